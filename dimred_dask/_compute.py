"""Run dask graphs where they belong, with progress.

Dask input is computed on the active ``dask.distributed`` client when there is one, with a
progress feed from the scheduler (every task of the graph counts); without a client it runs
on the local threaded scheduler. NumPy work never goes through here.
"""

from __future__ import annotations

import os
import time

import dask

from ._progress import has_reporter, report

__all__ = [
    "compute",
    "active_client",
    "workers",
    "persisted",
    "smallest_worker_memory",
    "wait_done",
    "PausedWatch",
]

# A worker over its memory's pause fraction runs no task until its memory falls; when every
# worker stays paused, the graph waits for ever. An unattended run fails instead, after this
# many seconds of every worker paused (DIMRED_PAUSED_TIMEOUT; 0: wait for ever).
PAUSED_TIMEOUT = 600.0
PAUSED_CHECK_EVERY = 2.0  # seconds between looks at the workers' states


def active_client():
    """The current ``distributed.Client`` (in a worker: the worker's client), or None."""
    try:
        from distributed import get_client

        return get_client()
    except (ImportError, ValueError):
        return None


def workers(client) -> dict:
    """The cluster's workers now, {address: identity} (``memory_limit``, ``nthreads``, ...),
    asked of the scheduler. Not ``client.scheduler_info()["workers"]``: that returns the
    client's shared cache, which its periodic refresh (every 2 s) rewrites with no worker
    listed, so a call that lands between its own update and its read sees no workers (in
    ~1 of 3 calls with a 1 ms refresh; a worker-side solve took that for a lost worker)."""
    if client.asynchronous:  # an async client fetches nothing here: its cached totals
        return dict(client.scheduler_info().get("workers", {}))
    return dict(client.sync(client.scheduler.identity, n_workers=-1)["workers"])


def persisted(arr):
    """A dask array persisted on the active client (as is without one), so that the graphs
    that use it afterwards refer to its chunks instead of carrying them again. For arrays
    made in this process (``da.from_array``) the scheduler keeps the literals, so a chunk
    lost with a worker is made again. NumPy comes back as is."""
    client = active_client() if hasattr(arr, "dask") else None
    return arr if client is None else client.persist(arr)


def smallest_worker_memory(client=None) -> int | None:
    """The smallest memory limit (bytes) among the workers that have one; None without a
    client (``client`` or the current one) or when no worker has a limit."""
    client = client or active_client()
    if client is None:
        return None
    limits = [w.get("memory_limit") or 0 for w in workers(client).values()]
    limits = [int(m) for m in limits if m > 0]
    return min(limits) if limits else None


def wait_done(futures, timeout: float) -> bool:
    """Whether ``futures`` all finished within ``timeout`` seconds: `distributed.wait` that
    returns False instead of raising. The TimeoutError's traceback is dropped here: it holds
    the waiting frames, and through them the futures and their callers' locals, in a
    reference cycle that only the garbage collector breaks, so tasks whose results had been
    used stayed wanted on the cluster (and were computed again when a worker was lost)."""
    from distributed import wait

    try:
        wait(futures, timeout=timeout)
        return True
    except TimeoutError as exc:
        exc.__traceback__ = None
        return False


def compute(*collections, stage: str = "compute"):
    """``dask.compute`` with progress reported under ``stage``; returns a tuple."""
    client = active_client()
    if client is None:
        return dask.compute(*collections, scheduler="threads")
    futures = client.compute(list(collections))
    if has_reporter():
        _follow(client, futures, stage)
    else:
        _wait(client, futures, stage)
    return tuple(client.gather(futures))


def _wait(client, futures, stage: str, poll: float = 0.5) -> None:
    """Wait for ``futures``, failing if every worker stays paused (`PausedWatch`)."""
    watch = PausedWatch(client, stage)
    while not wait_done(futures, poll):
        watch.check()


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

    from distributed.diagnostics.progressbar import TextProgressBar

    if wait_done(futures, poll):
        report(stage, 1, 1)
        return
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
    watch = PausedWatch(client, stage)
    try:
        while not wait_done(futures, poll):
            if latest["total"]:
                report(stage, latest["done"], latest["total"])
            watch.check()
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


class PausedWatch:
    """Fails the wait (`StageError`) once every worker has been paused for memory for
    ``DIMRED_PAUSED_TIMEOUT`` seconds, naming their memory: the graph cannot progress. A
    wait on futures calls ``check()`` between its polls."""

    def __init__(self, client, stage: str):
        self.client, self.stage = client, stage
        raw = os.environ.get("DIMRED_PAUSED_TIMEOUT", "")
        try:
            self.timeout = float(raw) if raw.strip() else PAUSED_TIMEOUT
        except ValueError:
            self.timeout = PAUSED_TIMEOUT
        self.next_look = time.monotonic() + min(PAUSED_CHECK_EVERY, self.timeout or 1.0)
        self.since: float | None = None

    def check(self) -> None:
        now = time.monotonic()
        if self.timeout <= 0 or now < self.next_look:
            return
        self.next_look = now + min(PAUSED_CHECK_EVERY, self.timeout)
        try:
            listed = workers(self.client)
        except Exception:  # the scheduler is busy or gone: the wait reports that itself
            return
        paused = bool(listed) and all(w.get("status") == "paused" for w in listed.values())
        if not paused:
            self.since = None
            return
        self.since = self.since or now
        if now - self.since >= self.timeout:
            from .errors import StageError

            limits = sorted({int(w.get("memory_limit") or 0) for w in listed.values()})
            used = max(int((w.get("metrics") or {}).get("memory") or 0) for w in listed.values())
            limit = ", ".join(f"{m / 2**20:,.0f} MiB" for m in limits if m) or "none"
            raise StageError(
                f"Stage '{self.stage}': all {len(listed)} workers have been paused for memory "
                f"for {now - self.since:.0f} s, so no task can run (memory limit {limit}; the "
                f"fullest worker holds {used / 2**20:,.0f} MiB).",
                "give the workers more memory (the cluster's memory_limit), or fewer threads "
                "per worker; DIMRED_PAUSED_TIMEOUT sets how long a run waits (0: for ever).",
            )
