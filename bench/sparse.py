"""Sparse PCA: this project against scikit-learn and scanpy on the same CSR counts.

Data: synthetic single-cell counts (``dimred_dask.datasets.sparse_counts``): ``--rows`` cells
(default 1 000 000) x ``--genes`` genes (default 20 000), 2 % non-zero, log1p of 1 + Poisson
counts, eight cell types with marker genes; float32 CSR. Beyond its first few components the
spectrum is nearly flat (sampling noise), the hard case for a randomized solver.

- ours: ``PCA(50, solver="randomized", n_iter=40, tol=2e-3)`` (block Krylov,
  stopping at the tolerance) and with the defaults (``n_iter=4``: 5 Krylov passes), on the
  Dask array that ``open_input`` gives for the same matrix written as an ``.h5ad`` by anndata
  (read from the file in every fit, as a run
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
    print(
        f"# bench sparse: {n:,} x {genes:,} log1p counts, 2 % non-zero, k = {K}; {machine()}; "
        f"load average at start {os.getloadavg()[0]:.2f}",
        flush=True,
    )
    t0 = time.perf_counter()
    X, _ = sparse_counts(n, genes, density=0.02)
    print(
        f"  data: {X.nnz:,} stored values ({X.nnz / n / genes:.2%}), CSR "
        f"{(X.data.nbytes + X.indices.nbytes + X.indptr.nbytes) / 2**30:.2f} GiB, made in "
        f"{time.perf_counter() - t0:.0f} s",
        flush=True,
    )
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

    with (
        LocalCluster(
            n_workers=2,
            threads_per_worker=1,
            processes=True,
            host="127.0.0.1",
            dashboard_address="127.0.0.1:0",
            memory_limit="6GiB",
        ) as cluster,
        Client(cluster) as client,
    ):
        pids = list(client.run(os.getpid).values())
        inp = open_input(path)
        print(
            f"  ours reads {inp.array.numblocks[0]} row chunks of {inp.array.chunks[0][0]:,} rows",
            flush=True,
        )

        passes = {}

        def ours(n_iter, tol, key):
            def run():
                model = PCA(K, solver="randomized", n_iter=n_iter, tol=tol, random_state=0).fit(
                    open_input(path).array
                )
                passes[key] = model.convergence_[0]["passes"]
                return model.explained_variance_

            return run

        def sklearn():
            return SkPCA(K, svd_solver="arpack", random_state=0).fit(X).explained_variance_

        entries.append(
            (
                "dimred-dask PCA randomized, tol=2e-3 (2 workers, from the .h5ad)",
                keep("ours", ours(40, 2e-3, "ours")),
                args.repeat,
            )
        )
        entries.append(
            (
                "dimred-dask PCA randomized, defaults (2 workers, from the .h5ad)",
                keep("ours-default", ours(4, 0.0, "ours-default")),
                args.repeat,
            )
        )
        entries.append(
            (
                'scikit-learn PCA(svd_solver="arpack") (in process)',
                keep("sklearn", sklearn),
                args.peer_repeat,
            )
        )
        try:
            if args.no_scanpy:
                raise ImportError
            import scanpy as sc

            def scanpy():
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    _, _, ratio, var = sc.pp.pca(X, n_comps=K, return_info=True)
                return var

            entries.append(
                (
                    f"scanpy {_version('scanpy')} pp.pca (in process)",
                    keep("scanpy", scanpy),
                    args.peer_repeat,
                )
            )
        except ImportError:
            print(
                "  scanpy not run (--no-scanpy, or not installed: pip install 'dimred-dask[bench]')"
            )

        def on_round(r, times):
            line = ", ".join(f"{k.split(' (')[0]} {v:.1f} s" for k, v in times.items())
            print(f"  round {r + 1}: {line}; load {os.getloadavg()[0]:.2f}", flush=True)

        per_worker = PeakRSS(pids)
        with per_worker:
            results = timed_in_turns(entries, pids=(), on_round=on_round)
        worker_peak = max(per_worker.per_process_peak[p] for p in pids)
    ref = evs["sklearn"]
    print(
        "\n| implementation | median (s) | runs (s) | passes over the data | max rel. diff. "
        "of the 50 explained variances from ARPACK's | rel. diff. of their sum | "
        "ours (tol=2e-3) / this |\n|---|---|---|---|---|---|---|"
    )
    ours_med = results[entries[0][0]][0]
    for (name, _, _), key in zip(entries, ["ours", "ours-default", "sklearn", "scanpy"]):
        med, times, _, _ = results[name]
        total = abs(np.sum(evs[key], dtype=np.float64) / np.sum(ref, dtype=np.float64) - 1)
        print(
            f"| {name} | {med:.1f} | {', '.join(f'{t:.1f}' for t in times)} | "
            f"{passes.get(key, '')} | {_rel(evs[key], ref):.1e} | {total:.1e} | "
            f"{ours_med / med:.2f} |"
        )
    print(
        f"\nworker peak RSS (largest of the 2 workers, over all rounds): "
        f"{worker_peak / 2**30:.2f} GiB; this process holds the CSR matrix for the peers; "
        f"load average at end {os.getloadavg()[0]:.2f}; "
        f"memory available {psutil.virtual_memory().available / 2**30:.1f} GiB"
    )
    if wrote and not args.keep:
        os.remove(path)  # only the file this run wrote
    return 0


def _block(args):
    """One block of the big counts matrix (``datasets._counts_block``), int64 indptr."""
    from dimred_dask.datasets import _counts_block

    i, rows, genes, density = args
    X, kind = _counts_block(i, rows, genes, 8, density, 0)
    X.indptr = X.indptr.astype(np.int64)
    return X, kind


def _write_anndata_zarr(path: str, n: int, genes: int, density: float, chunk_rows: int):
    """Sparse counts as an AnnData-Zarr store, written block by block through anndata (the
    first block by ``write_zarr``, the rest appended to X with ``sparse_dataset``), blocks made
    by 2 processes; obs (the cell types) written last. Never all in memory."""
    from concurrent.futures import ProcessPoolExecutor

    import anndata as ad
    import pandas as pd
    import zarr
    from anndata.io import sparse_dataset, write_elem

    jobs = [
        (i, min(chunk_rows, n - s), genes, density) for i, s in enumerate(range(0, n, chunk_rows))
    ]
    kinds, nnz, t0 = [], 0, time.perf_counter()
    with ProcessPoolExecutor(2) as pool, warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*future.infer_string")
        for i, (X, kind) in enumerate(pool.map(_block, jobs)):
            kinds.append(kind)
            nnz += X.nnz
            if i == 0:
                with pd.option_context("future.infer_string", False):
                    ad.AnnData(X=X).write_zarr(path)
                # anndata consolidates the metadata; edits go to the arrays' own metadata
                group = zarr.open_group(path, mode="r+", use_consolidated=False)
                target = sparse_dataset(group["X"])
            else:
                target.append(X)
            if i % 10 == 9 or i == len(jobs) - 1:
                print(
                    f"  written {sum(j[1] for j in jobs[: i + 1]):,} of {n:,} rows, "
                    f"{nnz:,} stored values, {time.perf_counter() - t0:.0f} s",
                    flush=True,
                )
        with pd.option_context("future.infer_string", False):
            kind = np.concatenate(kinds)
            write_elem(
                group,
                "obs",
                pd.DataFrame(
                    {"cell_type": pd.Categorical(kind.astype(str))},
                    index=pd.Index(np.arange(n).astype(str), dtype=object),
                ),
            )
    zarr.consolidate_metadata(path)  # X's new shape and the new obs, for consolidated readers
    return nnz


def _du(path: str) -> int:
    return sum(os.path.getsize(os.path.join(r, f)) for r, _, fs in os.walk(path) for f in fs)


class _ClusterProcess:
    """A LocalCluster of ``n`` worker processes x 1 thread whose scheduler lives in a process
    of its own (spawned), so that the flow's process holds only what the flow holds; the
    scheduler's address while inside ``with``."""

    def __init__(self, n: int, memory_limit: str):
        self.n, self.limit = n, memory_limit

    def __enter__(self) -> str:
        import multiprocessing

        ctx = multiprocessing.get_context("spawn")
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=_serve_cluster, args=(child, self.n, self.limit))
        self.proc.start()
        if not self.conn.poll(180):
            self.proc.terminate()
            raise SystemExit("the cluster process did not start within 180 s")
        return self.conn.recv()

    def __exit__(self, *exc):
        self.conn.send("stop")
        self.proc.join(120)
        if self.proc.is_alive():
            self.proc.terminate()
        return False


def _serve_cluster(conn, n: int, memory_limit: str) -> None:
    from distributed import LocalCluster

    with LocalCluster(
        n_workers=n,
        threads_per_worker=1,
        processes=True,
        host="127.0.0.1",
        dashboard_address="127.0.0.1:0",
        memory_limit=memory_limit,
    ) as cluster:
        conn.send(cluster.scheduler_address)
        conn.recv()  # until the benchmark is done with it


def main_big(args) -> int:
    """The chain pca+umap out of core: a sparse AnnData-Zarr larger than the machine's memory
    (default 5 000 000 cells x 20 000 genes at 3.5 %: ~3.5e9 stored values, ~26 GiB as CSR in
    memory) through the flow on 2 worker processes; the flow's (this process's) and each
    worker's peak RSS sampled, worker restarts checked by pid, where the time went from the
    manifest."""
    import json

    import psutil
    from distributed import Client

    from flows.embed import embed

    from ._measure import PeakRSS

    n, genes = args.rows or 5_000_000, args.genes or 20_000
    density = args.density or 0.035
    folder = args.dir or os.path.join(os.path.dirname(__file__), "_data")
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, f"cells-{n}x{genes}-{density}.zarr")
    out = os.path.join(folder, f"cells-{n}x{genes}-map")
    print(
        f"# bench sparse --big: {n:,} x {genes:,} counts at {density:.1%} as AnnData-Zarr, "
        f"pca+umap through the flow; {machine()}; load {os.getloadavg()[0]:.2f}",
        flush=True,
    )
    wrote = not os.path.exists(path)
    if wrote:  # written under another name, renamed when complete
        if os.path.exists(path + ".partial"):
            raise SystemExit(
                f"{path}.partial is an unfinished store of an earlier run: remove it first"
            )
        import multiprocessing

        # in a process of its own, so that this one (the flow's) starts clean
        writer = multiprocessing.get_context("spawn").Process(
            target=_write_anndata_zarr, args=(path + ".partial", n, genes, density, 50_000)
        )
        writer.start()
        writer.join()
        if writer.exitcode != 0:
            raise SystemExit(f"writing {path}.partial failed (exit code {writer.exitcode})")
        os.rename(path + ".partial", path)
    import zarr

    nnz = int(zarr.open_array(os.path.join(path, "X", "data"), mode="r").shape[0])
    mem = psutil.virtual_memory().total
    csr = nnz * 8 + (n + 1) * 8
    print(
        f"  input {path}: {nnz:,} stored values; as CSR in memory {csr / 2**30:.1f} GiB "
        f"({csr / mem:.2f}x this machine's {mem / 2**30:.1f} GiB); on disk "
        f"{_du(path) / 2**30:.1f} GiB (anndata's Zarr compression)",
        flush=True,
    )
    limit = args.worker_memory or "5GiB"
    with _ClusterProcess(2, limit) as address, Client(address) as client:
        pids = sorted(client.run(os.getpid).values())
        flow = PeakRSS(interval=0.5)
        workers = PeakRSS(pids, interval=0.5)
        t0 = time.perf_counter()
        with flow, workers:
            embed(
                path,
                out,
                method="pca+umap",
                overwrite=True,
                params={"pca.n_components": 50, "umap.random_state": 0},
                scheduler=address,
                graph_cache="none",
            )  # every stage computed
        wall = time.perf_counter() - t0
        after = sorted(client.run(os.getpid).values())
    manifest = json.load(open(os.path.join(out, "manifest.json")))
    print(
        f"\nend to end {wall:.0f} s ({wall / 60:.1f} min); worker processes "
        f"{'unchanged (no restart)' if after == pids else f'CHANGED: {pids} -> {after}'}; "
        f"memory_limit {limit} each"
    )
    print(
        f"flow process (this one; the scheduler and workers run in other processes) peak RSS "
        f"{flow.per_process_peak[os.getpid()] / 2**30:.2f} GiB (at the start "
        f"{flow.base / 2**30:.2f}); workers' peaks "
        + ", ".join(f"{workers.per_process_peak[p] / 2**30:.2f}" for p in pids)
        + " GiB"
    )
    print(
        json.dumps(
            {k: manifest.get(k) for k in ("timings", "chain", "convergence", "metrics")},
            indent=1,
            default=str,
        )[:6000]
    )
    print(f"load average at end {os.getloadavg()[0]:.2f}")
    if wrote and not args.keep:
        import shutil

        shutil.rmtree(path)  # only the input this run wrote
    return 0
