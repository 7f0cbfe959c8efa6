"""Timing and memory measurement shared by the benchmarks."""

from __future__ import annotations

import os
import platform
import statistics
import threading
import time

import psutil


class PeakRSS:
    """Samples the summed RSS of this process and the given pids (e.g. Dask workers) every
    ``interval`` seconds; ``peak`` is the largest sum minus the sum at the start. The pids in
    ``record`` also keep their samples, ``series[pid]``: a list of (time.time(), rss)."""

    def __init__(self, pids=(), interval: float = 0.02, record=()):
        self.procs = [psutil.Process()] + [psutil.Process(p) for p in pids if p != os.getpid()]
        self.interval = interval
        self.peak = 0
        self.per_process_peak = {p.pid: 0 for p in self.procs}
        self.series = {p: [] for p in record}

    def _sample(self):
        total = 0
        for p in self.procs:
            try:
                rss = p.memory_info().rss
            except psutil.Error:
                continue
            self.per_process_peak[p.pid] = max(self.per_process_peak[p.pid], rss)
            if p.pid in self.series:
                self.series[p.pid].append((time.time(), rss))
            total += rss
        return total

    def __enter__(self):
        self.base = self._sample()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def _run(self):
        while not self._stop.is_set():
            self.peak = max(self.peak, self._sample() - self.base)
            time.sleep(self.interval)

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()


def peak_by_span(series, spans: dict) -> dict:
    """The largest sample of ``series`` ((time, rss) pairs) within each named (start, end)
    span of ``spans``; spans without a sample are left out."""
    out = {}
    for name, (start, end) in spans.items():
        inside = [rss for t, rss in series if start <= t <= end]
        if inside:
            out[name] = max(inside)
    return out


def timed(fn, repeat: int, pids=()):
    """Run ``fn`` ``repeat`` times; return (median seconds, all times, peak RSS bytes, last)."""
    times, peak, out = [], 0, None
    for _ in range(repeat):
        with PeakRSS(pids) as mem:
            t0 = time.perf_counter()
            out = fn()
            times.append(time.perf_counter() - t0)
        peak = max(peak, mem.peak)
    return statistics.median(times), times, peak, out


def machine() -> str:
    return (
        f"{psutil.cpu_count(logical=True)} cores, "
        f"{psutil.virtual_memory().total / 2**30:.1f} GiB, {platform.machine()}, "
        f"Python {platform.python_version()}"
    )


def timed_in_turns(entries, pids=(), on_round=None):
    """``timed`` for several implementations taking turns, so that a drift of the host's speed
    (up to 40 % within minutes on these shared machines) falls on all of them alike.

    ``entries``: (name, fn, repeat) in the order to run them; round r runs, once each, those
    with repeat > r. Returns {name: (median seconds, all times, peak RSS bytes, last result)}
    and calls ``on_round(r, {name: seconds})`` after each round."""
    times = {name: [] for name, _, _ in entries}
    peaks = {name: 0 for name, _, _ in entries}
    last = {}
    for r in range(max(rep for _, _, rep in entries)):
        this_round = {}
        for name, fn, rep in entries:
            if r >= rep:
                continue
            _, (t,), peak, last[name] = timed(fn, 1, pids)
            times[name].append(t)
            peaks[name] = max(peaks[name], peak)
            this_round[name] = t
        if on_round is not None:
            on_round(r, this_round)
    return {
        name: (statistics.median(times[name]), times[name], peaks[name], last[name])
        for name, _, _ in entries
    }
