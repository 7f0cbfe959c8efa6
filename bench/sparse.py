"""Sparse PCA: this project against scikit-learn and scanpy on the same CSR counts.

Data: synthetic single-cell counts (``dimred_dask.datasets.sparse_counts``): ``--rows`` cells
(default 1 000 000) x ``--genes`` genes (default 20 000), 2 % non-zero, log1p of 1 + Poisson
counts, eight cell types with marker genes; float32 CSR. Beyond its first few components the
spectrum is nearly flat (sampling noise), the hard case for a randomized solver.

- ours: ``PCA(50, solver="randomized", n_iter=40, tol=5e-5)`` (block Krylov,
  stopping at the tolerance) and with the defaults (``n_iter=4``: 5 Krylov passes), on the
  Dask array that ``open_input`` gives for the same matrix written as an ``.h5ad`` by anndata (read from the file in every fit, as a run
  does; 2 worker processes of 1 thread), centred implicitly;
- scikit-learn ``PCA(50, svd_solver="arpack")`` on the in-memory CSR matrix (it centres sparse
  input implicitly through a LinearOperator);
- scanpy ``sc.pp.pca(X, n_comps=50)`` on the same CSR matrix, if scanpy is installed.

They run in turns. Quality: the largest relative difference of the 50 explained variances
from scikit-learn's ARPACK ones (ARPACK converges to machine precision: tol=0).
"""
from __future__ import annotations

import os
import time
import warnings

import numpy as np

from ._measure import PeakRSS, machine, timed_in_turns

K = 50


def _version(name: str) -> str:
    from importlib.metadata import version

    return version(name)


def _rel(ev, ref) -> float:
    ev, ref = np.asarray(ev, np.float64), np.asarray(ref, np.float64)
    return float(np.max(np.abs(ev - ref) / ref))


def main(args) -> int:
    import psutil
    from distributed import Client, LocalCluster
    from sklearn.decomposition import PCA as SkPCA

    from dimred_dask import PCA
    from dimred_dask.datasets import sparse_counts
    from dimred_dask.io import open_input
    from dimred_dask.io.write import save_h5ad

    n, genes = args.rows or 1_000_000, args.genes or 20_000
    folder = args.dir or os.path.join(os.path.dirname(__file__), "_data")
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, f"counts-{n}x{genes}.h5ad")
    print(f"# bench sparse: {n:,} x {genes:,} log1p counts, 2 % non-zero, k = {K}; {machine()}; "
          f"load average at start {os.getloadavg()[0]:.2f}", flush=True)
    t0 = time.perf_counter()
    X, _ = sparse_counts(n, genes, density=0.02)
    print(f"  data: {X.nnz:,} stored values ({X.nnz / n / genes:.2%}), CSR "
          f"{(X.data.nbytes + X.indices.nbytes + X.indptr.nbytes) / 2**30:.2f} GiB, made in "
          f"{time.perf_counter() - t0:.0f} s", flush=True)
    wrote = not os.path.exists(path)
    if wrote:
        t0 = time.perf_counter()
        save_h5ad(X, path + ".tmp", overwrite=True)
        os.replace(path + ".tmp", path)
        print(f"  written by anndata to {path} in {time.perf_counter() - t0:.0f} s", flush=True)
    entries, evs = [], {}

    def keep(name, fn):
        def run():
            ev = fn()
            evs[name] = ev
            return ev
        return run

    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1",
                      dashboard_address="127.0.0.1:0", memory_limit="6GiB") as cluster, \
            Client(cluster) as client:
        pids = list(client.run(os.getpid).values())
        inp = open_input(path)
        print(f"  ours reads {inp.array.numblocks[0]} row chunks of "
              f"{inp.array.chunks[0][0]:,} rows", flush=True)

        passes = {}

        def ours(n_iter, tol, key):
            def run():
                model = PCA(K, solver="randomized", n_iter=n_iter, tol=tol,
                            random_state=0).fit(open_input(path).array)
                passes[key] = model.convergence_[0]["passes"]
                return model.explained_variance_
            return run

        def sklearn():
            return SkPCA(K, svd_solver="arpack", random_state=0).fit(X).explained_variance_

        entries.append(("dimred-dask PCA randomized, tol=5e-5 (2 workers, from the .h5ad)",
                        keep("ours", ours(40, 5e-5, "ours")), args.repeat))
        entries.append(("dimred-dask PCA randomized, defaults (2 workers, from the .h5ad)",
                        keep("ours-default", ours(4, 0.0, "ours-default")), args.repeat))
        entries.append(('scikit-learn PCA(svd_solver="arpack") (in process)',
                        keep("sklearn", sklearn), args.peer_repeat))
        try:
            import scanpy as sc

            def scanpy():
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    _, _, ratio, var = sc.pp.pca(X, n_comps=K, return_info=True)
                return var

            entries.append((f"scanpy {_version('scanpy')} pp.pca (in process)",
                            keep("scanpy", scanpy), args.peer_repeat))
        except ImportError:
            print("  scanpy not installed: pip install 'dimred-dask[bench]'")

        def on_round(r, times):
            line = ", ".join(f"{k.split(' (')[0]} {v:.1f} s" for k, v in times.items())
            print(f"  round {r + 1}: {line}; load {os.getloadavg()[0]:.2f}", flush=True)

        per_worker = PeakRSS(pids)
        with per_worker:
            results = timed_in_turns(entries, pids=(), on_round=on_round)
        worker_peak = max(per_worker.per_process_peak[p] for p in pids)
    ref = evs["sklearn"]
    print("\n| implementation | median (s) | runs (s) | passes over the data | max rel. diff. "
          "of the 50 explained variances from ARPACK's | rel. diff. of their sum | "
          "ours (tol=5e-5) / this |\n|---|---|---|---|---|---|---|")
    ours_med = results[entries[0][0]][0]
    for (name, _, _), key in zip(entries, ["ours", "ours-default", "sklearn", "scanpy"]):
        med, times, _, _ = results[name]
        total = abs(np.sum(evs[key], dtype=np.float64) / np.sum(ref, dtype=np.float64) - 1)
        print(f"| {name} | {med:.1f} | {', '.join(f'{t:.1f}' for t in times)} | "
              f"{passes.get(key, '')} | {_rel(evs[key], ref):.1e} | {total:.1e} | "
              f"{ours_med / med:.2f} |")
    print(f"\nworker peak RSS (largest of the 2 workers, over all rounds): "
          f"{worker_peak / 2**30:.2f} GiB; this process holds the CSR matrix for the peers; "
          f"load average at end {os.getloadavg()[0]:.2f}; "
          f"memory available {psutil.virtual_memory().available / 2**30:.1f} GiB")
    if wrote and not args.keep:
        os.remove(path)  # only the file this run wrote
    return 0
