"""Progress reporting for long computations, independent of who is listening.

Library code calls ``report(stage, done, total)``; the caller decides where that goes by
installing a reporter with ``reporting(callback)``: the CLI draws a terminal bar, a Prefect
task moves a progress artifact, and with no reporter nothing happens. The reporter lives in a
context variable, so concurrent runs in different threads do not see each other's progress.
"""

from __future__ import annotations

import contextlib
import contextvars
import re
import sys
import time
from typing import Callable

Reporter = Callable[[str, float, float], None]

_REPORTER: contextvars.ContextVar[Reporter | None] = contextvars.ContextVar(
    "dimred_dask_reporter", default=None
)


def report(stage: str, done: float, total: float) -> None:
    cb = _REPORTER.get()
    if cb is not None:
        try:
            cb(stage, float(done), float(total))
        except Exception:  # a broken progress display must never break a computation
            pass


def has_reporter() -> bool:
    return _REPORTER.get() is not None


@contextlib.contextmanager
def reporting(callback: Reporter | None):
    token = _REPORTER.set(callback)
    try:
        yield
    finally:
        _REPORTER.reset(token)


class TerminalBar:
    """A one-line text progress bar on stderr, redrawn at most every ``interval`` seconds.

    A stage is known by its text with the numbers taken out, so "iteration 50/750, KL 4.93"
    and "iteration 100/750, KL 4.05" are one stage whose clock runs on. When the stream is not
    a terminal (a log file), a line is written at most every ``log_interval`` seconds and at
    the end of each stage, instead of redrawing."""

    def __init__(
        self, stream=None, width: int = 30, interval: float = 0.2, log_interval: float = 10.0
    ):
        self._stream = stream  # None: whatever sys.stderr is when drawing
        self.width = width
        self.interval = interval
        self.log_interval = log_interval
        self._last = 0.0
        self._key = None
        self._done = None
        self._t0 = time.perf_counter()

    @property
    def stream(self):
        return self._stream or sys.stderr

    def _tty(self) -> bool:
        try:
            return bool(self.stream.isatty())
        except (AttributeError, ValueError):
            return False

    def __call__(self, stage: str, done: float, total: float) -> None:
        now = time.perf_counter()
        tty = self._tty()
        key = re.sub(r"\d+(\.\d+)?", "#", stage)
        finished = total > 0 and done >= total
        if finished and key == self._done:
            return  # the end of a stage is drawn once
        if key != self._key:
            if self._key is not None and tty:
                self.stream.write("\n")
            self._key, self._t0, self._last = key, now, now
            self._done = None
            if not tty and not finished:
                return
        if not finished and now - self._last < (self.interval if tty else self.log_interval):
            return
        self._last = now
        frac = 0.0 if total <= 0 else min(1.0, done / total)
        fill = int(round(frac * self.width))
        bar = "#" * fill + "-" * (self.width - fill)
        line = f"{stage:<22} [{bar}] {frac:6.1%} {now - self._t0:6.1f}s"
        self.stream.write(f"\r{line}" if tty else f"{line}\n")
        if finished:
            if tty:
                self.stream.write("\n")
            self._key, self._done = None, key
        self.stream.flush()
