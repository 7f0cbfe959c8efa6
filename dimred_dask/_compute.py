"""Run dask graphs where they belong, with progress.

Dask input is computed on the active ``dask.distributed`` client when there is one, with a
progress feed from the scheduler (every task of the graph counts); without a client it runs
on the local threaded scheduler. NumPy work never goes through here.
"""

from __future__ import annotations

import dask

from ._progress import has_reporter, report

__all__ = ["compute", "active_client"]


def active_client():
    """The current ``distributed.Client`` (in a worker: the worker's client), or None."""
    try:
        from distributed import get_client

        return get_client()
    except (ImportError, ValueError):
        return None


def compute(*collections, stage: str = "compute"):
    """``dask.compute`` with progress reported under ``stage``; returns a tuple."""
    client = active_client()
    if client is None:
        return dask.compute(*collections, scheduler="threads")
    futures = client.compute(list(collections))
    if has_reporter():
        _follow(client, futures, stage)
    return tuple(client.gather(futures))


def _follow(client, futures, stage: str, poll: float = 0.25) -> None:
    """Wait for ``futures``, reporting progress from a scheduler feed in the meantime.

    The waiting is done on the futures themselves; the feed (all tasks of the graph, counted
    by the scheduler) only supplies numbers. It runs in a daemon thread and is aborted at the
    end, so it can never hold up a computation: when several clients share keys, the feed
    may stop before its keys look finished to it.

    The feed starts only when the work outlives the first ``poll``, and the futures are held
    until it has seen its keys once: a feed whose keys were already released would wait for
    them on the scheduler until the scheduler closes.
    """
    import threading

    from distributed import wait
    from distributed.diagnostics.progressbar import TextProgressBar

    try:
        wait(futures, timeout=poll)
        report(stage, 1, 1)
        return
    except TimeoutError:
        pass
    latest = {"done": 0, "total": 0}
    seen = threading.Event()

    class _Feed(TextProgressBar):
        def _draw_bar(self, remaining=0, all=0, **kwargs):
            latest["done"], latest["total"] = all - remaining, all
            seen.set()

        def _draw_stop(self, **kwargs):
            pass

    try:
        feed = _Feed(futures, interval="250ms", start=False)
    except Exception:
        feed = None
    if feed is not None:

        def listen():
            try:
                feed._loop_runner.run_sync(feed.listen)
            except Exception:
                pass

        threading.Thread(target=listen, daemon=True, name="dimred-progress").start()
    try:
        while True:
            try:
                wait(futures, timeout=poll)
                break
            except TimeoutError:
                if latest["total"]:
                    report(stage, latest["done"], latest["total"])
        report(stage, max(latest["total"], 1), max(latest["total"], 1))
    finally:
        if feed is not None:
            seen.wait(timeout=5.0)  # the futures (so the keys) are still held here
        comm = getattr(feed, "comm", None)
        if comm is not None:
            try:
                feed._loop_runner.loop.add_callback(comm.abort)
            except Exception:
                pass
