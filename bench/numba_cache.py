"""pynndescent's first graph in a fresh process, with its numba functions cached on disk or not.

``python -m bench numba-cache [--rows N] [--repeat R]``

Every Dask worker and every run is a fresh process, and pynndescent compiles its numba
functions on its first graph there. ``graphs.nndescent.pynndescent_cached`` turns numba's
on-disk cache on for them; ``DIMRED_NUMBA_CACHE=0`` turns it off. Each round starts two fresh
Python processes, in turns: one with the cache (filled by a first, untimed process that
starts from an empty cache directory) and one without. Each builds the kNN graph of
``--rows`` (default 3000) x 10 Gaussian rows with ``knn_graph(backend="nndescent")``; timed
from before the import of dimred_dask to the graph (the process's whole useful life). The
two graphs are compared (the same seed: they must be equal).
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile

from ._measure import machine

CHILD = """
import json, sys, time
t0 = time.perf_counter()
import numpy as np
from dimred_dask.graphs import knn_graph
X = np.random.default_rng(0).standard_normal(({rows}, 10))
g = knn_graph(X, 10, backend="nndescent", target_recall=None, random_state=0)
print(json.dumps({{"seconds": time.perf_counter() - t0,
                  "digest": int(g.indices.sum() * 7 + g.indices[:, 0].sum())}}))
"""


def _fresh(rows: int, env: dict) -> dict:
    out = subprocess.run(
        [sys.executable, "-W", "ignore", "-c", CHILD.format(rows=rows)],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(args) -> int:
    rows = args.rows or 3000
    print(f"# bench numba-cache: {rows:,} x 10, {machine()}; load {os.getloadavg()}", flush=True)
    with tempfile.TemporaryDirectory(prefix="numba-cache-") as cache:
        on = {**os.environ, "NUMBA_CACHE_DIR": cache, "DIMRED_NUMBA_CACHE": "1"}
        off = {**os.environ, "NUMBA_CACHE_DIR": cache, "DIMRED_NUMBA_CACHE": "0"}
        first = _fresh(rows, on)
        print(f"first process, empty cache: {first['seconds']:.1f} s", flush=True)
        cached, plain, ratios = [], [], []
        for r in range(args.repeat):
            a, b = _fresh(rows, on), _fresh(rows, off)
            if not a["digest"] == b["digest"] == first["digest"]:
                print("the graphs differ", a, b, first)
                return 1
            cached.append(a["seconds"])
            plain.append(b["seconds"])
            ratios.append(a["seconds"] / b["seconds"])
            print(
                f"round {r + 1}: cached {a['seconds']:.1f} s, not cached {b['seconds']:.1f} s, "
                f"ratio {ratios[-1]:.2f}; load {os.getloadavg()[0]:.2f}",
                flush=True,
            )
    print(
        f"median: cached {statistics.median(cached):.1f} s, not cached "
        f"{statistics.median(plain):.1f} s, ratio {statistics.median(ratios):.2f} "
        "(the same graph each time)"
    )
    return 0
