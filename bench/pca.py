"""PCA: this project against scikit-learn and dask-ml on the same data in the same run.

In memory (default): a 200 000 x 512 float32 low-rank-plus-noise matrix, k = 32.
  - sklearn PCA(svd_solver="randomized") and PCA(svd_solver="full") on the NumPy array;
  - dask-ml PCA(svd_solver="randomized") and ours on the same LocalCluster (2 worker
    processes), the data persisted on the workers; we time fit only.
  Quality: relative error of the explained variances against the exact float64 spectrum.

Out of core (--big): see ``main_big``.
"""

from __future__ import annotations

import json
import os
import shutil
import time
import warnings

import numpy as np

from dimred_dask._compute import workers

from ._measure import PeakRSS, machine, timed

K = 32


def make_data(n: int, d: int = 512, rank: int = 48, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    basis, _ = np.linalg.qr(rng.standard_normal((d, rank)))
    scales = np.geomspace(30.0, 1.0, rank)
    X = (
        rng.standard_normal((n, rank), dtype=np.float32) * scales.astype(np.float32)
    ) @ basis.T.astype(np.float32)
    X += rng.standard_normal((n, d), dtype=np.float32) * np.float32(0.5)
    X += np.float32(2.0)  # a non-zero mean, as real data has
    return X


def exact_variances(X: np.ndarray) -> np.ndarray:
    X64 = X.astype(np.float64)
    X64 -= X64.mean(axis=0)
    w = np.linalg.eigvalsh(X64.T @ X64 / (X.shape[0] - 1))
    return w[::-1]


def _rel_err(ev, exact) -> float:
    ev = np.asarray(ev, dtype=np.float64)
    return float(np.max(np.abs(ev - exact[: len(ev)]) / exact[: len(ev)]))


def _table(rows, ours_name):
    ours = next(r for r in rows if r["name"] == ours_name)
    lines = [
        "| implementation | fit median (s) | runs (s) | peak RSS delta (MiB) | "
        "max rel. error of explained variance | ours / this |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        ratio = ours["median"] / r["median"]
        lines.append(
            f"| {r['name']} | {r['median']:.3f} | "
            f"{', '.join(f'{t:.3f}' for t in r['times'])} | {r['peak'] / 2**20:.0f} | "
            f"{r['err']:.2e} | {ratio:.2f} |"
        )
    return "\n".join(lines)


def main(args) -> int:
    import dask.array as da
    from distributed import Client, LocalCluster
    from sklearn.decomposition import PCA as SkPCA

    from dimred_dask import PCA

    n = args.rows or 200_000
    print(f"# bench pca: {n} x 512 float32, k = {K}; {machine()}")
    X = make_data(n)
    exact = exact_variances(X)
    rows = []

    def add(name, fn, pids=(), repeat=args.repeat):
        med, times, peak, model = timed(fn, repeat, pids)
        rows.append(
            {
                "name": name,
                "median": med,
                "times": times,
                "peak": peak,
                "err": _rel_err(model.explained_variance_, exact),
            }
        )
        print(f"  {name:<48} {med:8.3f} s  err {rows[-1]['err']:.2e}", flush=True)

    with (
        LocalCluster(
            n_workers=2,
            threads_per_worker=1,
            processes=True,
            host="127.0.0.1",
            dashboard_address="127.0.0.1:0",
        ) as cluster,
        Client(cluster) as client,
    ):
        pids = list(client.run(os.getpid).values())
        Xd = da.from_array(X, chunks=(25_000, 512)).persist()
        client.wait_for_workers(2)
        from distributed import wait

        wait(Xd)
        add(
            "dimred-dask PCA covariance (2 workers)",
            lambda: PCA(K, solver="covariance").fit(Xd),
            pids,
        )
        add(
            "dimred-dask PCA randomized (2 workers)",
            lambda: PCA(K, solver="randomized", random_state=0).fit(Xd),
            pids,
        )
        try:
            import dask_ml.decomposition as dml

            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                add(
                    "dask-ml PCA randomized (2 workers)",
                    lambda: dml.PCA(K, svd_solver="randomized", random_state=0).fit(Xd),
                    pids,
                )
        except ImportError:
            print("  dask-ml not installed: pip install 'dimred-dask[bench]'")
    add(
        "sklearn PCA randomized (in process)",
        lambda: SkPCA(K, svd_solver="randomized", random_state=0).fit(X),
    )
    add("sklearn PCA full (in process)", lambda: SkPCA(K, svd_solver="full").fit(X), repeat=1)
    add("dimred-dask PCA covariance (NumPy, in process)", lambda: PCA(K).fit(X))
    t0 = time.perf_counter()
    _ = X.T @ X
    gram = time.perf_counter() - t0
    print()
    print(_table(rows, "dimred-dask PCA covariance (2 workers)"))
    print(
        f"\nfloor: float32 X^T X of this data in NumPy (2 BLAS threads): {gram:.3f} s "
        f"({2 * n * 512 * 512 / gram / 1e9:.0f} GFLOP/s)"
    )
    return 0


def _write_big(path: str, gib: float, d: int = 512, chunk_rows: int = 32_768, compressors=None):
    """A float32 low-rank-plus-noise Zarr array of about ``gib`` GiB, uncompressed (random data
    does not compress; decompression would only cost CPU), written by the workers."""
    from dimred_dask.datasets import low_rank_plus_noise
    from dimred_dask.io import save_array

    n = int(gib * 2**30 / (d * 4)) // chunk_rows * chunk_rows
    meta = os.path.join(path, "zarr.json")
    if os.path.exists(meta) and json.load(open(meta)).get("shape") == [n, d]:
        return n  # made by an earlier run with --dir: reuse it
    X = low_rank_plus_noise(n, d, rank=16, chunk_rows=chunk_rows)
    save_array(X, path, overwrite=True, compressors=compressors)
    return n


def _read_pass(path: str) -> float:
    """One full read of the array on the cluster (one value kept per chunk)."""
    from dask import compute, delayed

    from dimred_dask.io import open_input

    blocks = list(open_input(path).array.to_delayed().ravel())
    firsts = [delayed(lambda b: float(b[0, 0]))(b) for b in blocks]
    t0 = time.perf_counter()
    compute(*firsts)
    return time.perf_counter() - t0


def main_big(args) -> int:
    import psutil
    from distributed import Client, LocalCluster

    from dimred_dask.cluster import local_cluster_size
    from flows.embed import embed

    mem = psutil.virtual_memory().total
    gib = args.gib or 1.5 * mem / 2**30
    folder = os.path.abspath(args.dir or os.path.join(os.path.dirname(__file__), "_data"))
    os.makedirs(folder, exist_ok=True)
    path, out = os.path.join(folder, "big.zarr"), os.path.join(folder, "big-pca")
    size = {**local_cluster_size(args.workers, args.threads), "memory_limit": 2 * 2**30}
    print(
        f"# bench pca --big: {gib:.1f} GiB float32 x 512 on disk at {path}; {machine()}; "
        f"workers {size}"
    )
    with (
        LocalCluster(
            processes=True, host="127.0.0.1", dashboard_address="127.0.0.1:0", **size
        ) as cl,
        Client(cl) as client,
    ):
        t0 = time.perf_counter()
        n = _write_big(path, gib)
        print(f"  wrote {n} rows in {time.perf_counter() - t0:.1f} s", flush=True)
        reads = [_read_pass(path) for _ in range(2)]
        print(f"  two sequential reads: {reads[0]:.1f} + {reads[1]:.1f} s", flush=True)
        pids = list(client.run(os.getpid).values())
        workers_before = set(workers(client))
        with PeakRSS(pids, interval=0.25) as rss:
            t0 = time.perf_counter()
            m = embed(path, out, method="pca", params={"n_components": K}, overwrite=True)
            total = time.perf_counter() - t0
        workers_after = set(workers(client))
    worker_peaks = [rss.per_process_peak[p] for p in pids]
    restarted = workers_before != workers_after
    budget = 1.3 * sum(reads)
    print(
        json.dumps(
            {
                "rows": n,
                "gib": round(n * 512 * 4 / 2**30, 1),
                "reads_s": reads,
                "embed_total_s": total,
                "stage_timings_s": m["timings"],
                "passes_over_data": {
                    "fit": m["model"]["passes"],
                    "transform": 1,
                    "validate+evaluate": "sampled chunks only",
                },
                "worker_peak_rss_gib": [round(p / 2**30, 2) for p in worker_peaks],
                "worker_restarted": restarted,
                "ratio_to_two_reads": total / sum(reads),
                "target_ratio": 1.3,
                "target_met": total <= budget and not restarted and max(worker_peaks) <= 2 * 2**30,
            },
            indent=1,
        )
    )
    if not args.dir:
        shutil.rmtree(folder, ignore_errors=True)
    return 0


def _drop_page_cache() -> bool:
    try:
        os.sync()
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")
        return True
    except OSError:
        return False


def main_read(args) -> int:
    """The input read path (``open_input``: a store that refuses absent chunks and a row reader
    that names the chunk that fails to decode) against zarr's own dask reader
    (``da.from_zarr``) on the same array, same row chunks, in turns, page cache dropped before
    each read where the machine allows; uncompressed and zstd (Zarr v3's default codec)."""
    import dask.array as da
    import zarr
    from dask import compute, delayed
    from distributed import Client, LocalCluster

    from dimred_dask.cluster import local_cluster_size
    from dimred_dask.io import open_input

    from ._measure import timed_in_turns

    gib = args.gib or 4.0
    folder = os.path.abspath(args.dir or os.path.join(os.path.dirname(__file__), "_data"))
    os.makedirs(folder, exist_ok=True)
    size = {**local_cluster_size(args.workers, args.threads), "memory_limit": 2 * 2**30}
    print(f"# bench pca --only read: {gib:.1f} GiB float32 x 512; {machine()}; workers {size}")

    def first_values(arr):
        blocks = list(arr.to_delayed().ravel())
        return compute(*[delayed(lambda b: float(b[0, 0]))(b) for b in blocks])

    rows = []
    with (
        LocalCluster(
            processes=True, host="127.0.0.1", dashboard_address="127.0.0.1:0", **size
        ) as cl,
        Client(cl),
    ):
        for codec, compressors in (("uncompressed", None), ("zstd", "auto")):
            path = os.path.join(folder, f"read-{codec}.zarr")
            _write_big(path, gib, compressors=compressors)
            ours = open_input(path).array
            theirs = da.from_zarr(zarr.open_array(path, mode="r"), chunks=ours.chunks)
            dropped = []

            def read(arr):
                def run():
                    dropped.append(_drop_page_cache())
                    return first_values(arr)

                return run

            res = timed_in_turns(
                [
                    ("zarr's da.from_zarr", read(theirs), args.repeat),
                    ("dimred-dask open_input", read(ours), args.repeat),
                ]
            )
            a, b = res["zarr's da.from_zarr"], res["dimred-dask open_input"]
            per_round = [round(y / x, 3) for x, y in zip(a[1], b[1])]
            rows.append(
                {
                    "codec": codec,
                    "chunks": len(ours.chunks[0]),
                    "from_zarr_s": [round(t, 2) for t in a[1]],
                    "open_input_s": [round(t, 2) for t in b[1]],
                    "ratio_median": round(b[0] / a[0], 3),
                    "ratio_per_round": per_round,
                    "page_cache_dropped": all(dropped),
                }
            )
            print(json.dumps(rows[-1]), flush=True)
    if not args.dir:
        shutil.rmtree(folder, ignore_errors=True)
    return 0
