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
        _follow(futures, stage)
    return tuple(client.gather(futures))


def _follow(futures, stage: str) -> None:
    from distributed.diagnostics.progressbar import TextProgressBar

    class _Feed(TextProgressBar):
        def _draw_bar(self, remaining=0, all=0, **kwargs):
            report(stage, all - remaining, all)

        def _draw_stop(self, remaining=0, all=0, status=None, **kwargs):
            if status == "finished":
                report(stage, all, all)

    try:
        _Feed(futures, interval="250ms", start=True)
    except Exception:  # progress is best effort; the gather below raises real errors
        pass
