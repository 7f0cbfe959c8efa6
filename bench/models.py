"""A run's model placing new rows: loaded whole into the caller, against left in its run store.

``python -m bench models [--rows N] [--repeat R]``

Data: an LLE model of ``--rows`` training rows (default 1 000 000) of R^50 in float32 (a
Gaussian mixture: the training rows, 200 MB at 1 000 000) with a 2-D embedding, saved to a
local run store as the flow saves it (`flows.adapter.save_model`: row chunks of 16 MiB). The
model is assembled directly, not fitted: placing new rows costs the same whatever the
embedding's values, and an LLE fit of 10^6 rows is a benchmark of its own. New rows: 10 000
rows of the same mixture as a dask array in 4 chunks. A LocalCluster of 2 worker processes.

Two ways, in turns (``--repeat`` rounds), the same new rows each time:

- **in memory**: the model read whole from the store (what loading did before), then
  ``transform`` computed on the workers: the training rows travel to them inside the task
  graph;
- **stored**: ``flows.methods.load_model``: the training rows and the embedding stay in the
  store (``io.StoredRows``); each task reads them block by block on its worker.

Timed: load + transform + gather of the 10 000 x 2 result. Measured by sampling RSS every
50 ms: the caller's (the flow's process) peak above its level before the load, and each
worker's peak. The two results are compared (they must be equal to rounding).
"""

from __future__ import annotations

import os
import shutil
import statistics
import tempfile
import time

import numpy as np
import psutil

from ._measure import PeakRSS, machine

D, K, NEW_ROWS, NEW_CHUNKS, NEIGHBOURS = 50, 2, 10_000, 4, 10


def _mixture(n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    centres = np.random.default_rng(0).normal(scale=4.0, size=(8, D))
    return (centres[rng.integers(0, 8, n)] + rng.normal(size=(n, D))).astype(np.float32)


def _write_model(path: str, n: int) -> None:
    from dimred_dask.io import RunStore
    from dimred_dask.methods.lle import LLEModel
    from flows.adapter import save_model

    X = _mixture(n, 1)
    Y = (X[:, :K] / 4.0).astype(np.float32)
    model = LLEModel(
        embedding=Y,
        eigenvalues=np.array([1e-4, 2e-4]),
        X_fit=X,
        n_neighbors=NEIGHBOURS,
        reg=1e-3,
        metric="euclidean",
        solver="arpack",
        reconstruction_error=0.0,
    )
    store = RunStore(path)
    store.prepare("new", {"method": "lle"})
    save_model(model, store)
    store.commit({"method": "lle"}, guard=None)


def _in_memory(path: str):
    from dimred_dask.io import RunStore
    from dimred_dask.methods.lle import LLEModel

    store = RunStore(path)
    return LLEModel.from_arrays(store.read_group("model"), store.read_attrs("model"))


def _stored(path: str):
    from flows.methods import load_model

    return load_model(path)


def main(args) -> int:
    import dask.array as da
    from distributed import Client, LocalCluster

    n = args.rows or 1_000_000
    rounds = max(1, args.repeat)
    work = tempfile.mkdtemp(prefix="bench-models-", dir=args.dir)
    path = os.path.join(work, "run")
    print(f"machine: {machine()}; load before: {os.getloadavg()}")
    try:
        t0 = time.perf_counter()
        _write_model(path, n)
        print(f"model of {n} x {D} training rows written in {time.perf_counter() - t0:.1f} s")
        new = da.from_array(_mixture(NEW_ROWS, 2), chunks=(NEW_ROWS // NEW_CHUNKS, D))
        with (
            LocalCluster(
                n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None
            ) as cluster,
            Client(cluster) as client,
        ):
            pids = [p for p in client.run(os.getpid).values()]
            rows, results = {"in memory": [], "stored": []}, {}
            for r in range(rounds):
                for name, load in (("in memory", _in_memory), ("stored", _stored)):
                    client.run(_collect)
                    _collect()
                    before = psutil.Process().memory_info().rss
                    with PeakRSS(pids, interval=0.05) as mem:
                        t0 = time.perf_counter()
                        model = load(path)
                        Y = client.compute(model.transform(new)).result()
                        seconds = time.perf_counter() - t0
                    del model
                    results[name] = Y
                    peaks = [mem.per_process_peak[p] for p in pids]
                    rows[name].append(
                        (seconds, mem.per_process_peak[os.getpid()] - before, max(peaks))
                    )
                    print(
                        f"round {r + 1} {name:9s}: {seconds:7.2f} s, caller peak "
                        f"+{rows[name][-1][1] / 2**20:,.0f} MiB, worker peak "
                        f"{max(peaks) / 2**20:,.0f} MiB",
                        flush=True,
                    )
                print(
                    f"round {r + 1} ratio stored / in memory: "
                    f"{rows['stored'][-1][0] / rows['in memory'][-1][0]:.2f}"
                )
            diff = float(np.abs(results["stored"] - results["in memory"]).max())
            print(f"largest difference between the two results: {diff:.3g}")
        for name in rows:
            t = [s for s, _, _ in rows[name]]
            print(
                f"{name:9s}: median {statistics.median(t):.2f} s of {t}; caller peak "
                f"+{max(c for _, c, _ in rows[name]) / 2**20:,.0f} MiB; worker peak "
                f"{max(w for _, _, w in rows[name]) / 2**20:,.0f} MiB"
            )
        print(f"load after: {os.getloadavg()}")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


def _collect():
    import gc

    gc.collect()
