"""Single-pass PCA out of core: ``python -m bench pca --only single-pass [--gib G] [--dir D]
[--compare-pool] [--codec none|zstd|blosc-lz4]``.

An array of ``gib`` GiB (default 1.5x the machine's memory), float32 x 512, uncompressed Zarr,
with singular values proportional to j^-2 (j = 1..512) around a mean of 1: a spectrum that
decays. Each pass starts with the page cache dropped where the machine allows. Measured:

- the floors of each pass: one plain read of the array, and the pass's compute on chunks
  already in memory (the sketch, the covariance's scatter, the transform's projection),
  measured two ways: a chunk's kernel alone in a worker, times the chunks over the cores; and
  the pass itself (its tasks, merges and scheduling) over chunks held in the workers' memory,
  the difference of 16 and 4 chunks scaled to the array; the single-pass transform's floor
  is a plain read of the row sketch;
- the flow with ``solver="single-pass"`` (fit: one read that also writes the row sketch;
  transform: the embedding from the row sketch): fit + transform (the passes; the ratios use
  these) and end to end (with validate's and evaluate's sampled chunks), workers' peak RSS;
- the flow with the exact covariance solver on the same array (two reads), the reference;
- the flow with ``solver="auto"`` and ``max_error=0.01``: the solver it picks and why;
- with ``--compare-pool``, each flow run first with the read buffers not reused (a fresh
  buffer per block, ``raw_chunks.POOL_BUFFERS = 0`` on the workers), then as shipped;
- with ``--codec``, the array's chunks compressed (zstd, Zarr v3's default, or Blosc-LZ4
  with byte shuffle): the plain read is then a decompressing read through zarr, and the
  codec's decode rate on one core and the stored / raw size are printed;
- the single-pass embedding's relative error against the exact one (signs aligned by the
  components), overall and per component, and the error estimate the fit reported.
"""

from __future__ import annotations

import gc
import json
import os
import shutil
import time

import numpy as np

from ._measure import PeakRSS, machine

K, D, CHUNK_ROWS, POWER = 32, 512, 32_768, 2.0
MAX_ERROR = 0.01  # the auto run's accepted embedding error
POOL_BUFFERS = 4  # dimred_dask.io.raw_chunks' default


def _warm_worker(path: str) -> None:
    """On a worker: the imports and first read of a pass, outside the timed runs."""
    from dimred_dask.blocks.stats import block_stats
    from dimred_dask.io import open_input

    block_stats(open_input(path).array.blocks[0].compute(scheduler="sync"), gram=True)


def _set_pool(buffers: int) -> None:
    """On a worker: how many read buffers it keeps for reuse (0: a fresh one per block)."""
    from dimred_dask.io import raw_chunks

    raw_chunks.POOL_BUFFERS = buffers
    raw_chunks._POOL.clear()


def _decaying_block(i: int, rows: int, d: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng([seed, i])
    basis = np.linalg.qr(np.random.default_rng([seed, 10**6]).standard_normal((d, d)))[0]
    scale = (np.arange(1, d + 1) ** -POWER * 10.0).astype(np.float32)
    g = rng.standard_normal((rows, d), dtype=np.float32) * scale
    return (g @ basis.T.astype(np.float32) + np.float32(1.0)).astype(np.float32)


def _compressors(codec: str | None):
    """zarr ``compressors`` for ``--codec``: None (raw chunks), zstd (Zarr v3's default) or
    Blosc with LZ4 and byte shuffle."""
    if codec in (None, "none"):
        return None
    if codec == "zstd":
        return "auto"
    if codec == "blosc-lz4":
        from zarr.codecs import BloscCodec

        return BloscCodec(cname="lz4", clevel=5, shuffle="shuffle")
    raise SystemExit(f"--codec must be none, zstd or blosc-lz4; found {codec!r}")


def _folder_bytes(path: str) -> int:
    return sum(
        os.path.getsize(os.path.join(root, f)) for root, _, files in os.walk(path) for f in files
    )


def _decode_rate(path: str, codec: str) -> float:
    """Bytes per second one core decodes: the first chunk file's frame decoded 5 times."""
    import glob

    import numcodecs

    chunk = sorted(glob.glob(os.path.join(path, "c", "0", "0")))[0]
    frame = open(chunk, "rb").read()
    dec = numcodecs.Zstd() if codec == "zstd" else numcodecs.Blosc()
    times = []
    for _ in range(5):
        t0 = time.perf_counter()
        out = dec.decode(frame)
        times.append(time.perf_counter() - t0)
    return len(out) / float(np.median(times))


def write_decaying(path: str, gib: float, d: int = D, seed: int = 0, codec=None) -> int:
    """The array at ``path`` (reused when an earlier run with --dir left it), written by the
    workers; returns its rows."""
    import dask.array as da
    from dask import delayed

    from dimred_dask.io import save_array

    n = int(gib * 2**30 / (d * 4)) // CHUNK_ROWS * CHUNK_ROWS
    meta = os.path.join(path, "zarr.json")
    if os.path.exists(meta) and json.load(open(meta)).get("shape") == [n, d]:
        return n
    blocks = [
        da.from_delayed(
            delayed(_decaying_block, pure=True)(i, CHUNK_ROWS, d, seed),
            shape=(CHUNK_ROWS, d),
            dtype=np.float32,
        )
        for i in range(n // CHUNK_ROWS)
    ]
    save_array(da.concatenate(blocks), path, overwrite=True, compressors=_compressors(codec))
    return n


def _sketch_kernel(width: int):
    from dimred_dask.blocks.sketch import dense_block_sketch

    omega = np.random.default_rng(0).standard_normal((D, width))
    return lambda block: dense_block_sketch(block, omega)


def _scatter_kernel():
    from dimred_dask.blocks.stats import block_stats

    return lambda block: block_stats(block, gram=True)


def _projection_kernel():
    from dimred_dask.methods._base import centred_product

    w = np.random.default_rng(0).standard_normal((D, K)).astype(np.float32)
    mu, shift = np.ones(D, dtype=np.float32), np.zeros(K, dtype=np.float32)
    return lambda block: centred_product(block, mu, w, shift, np.float32)


def _compute_floor(client, path: str, n_chunks: int, kernel) -> float:
    """Seconds ``kernel`` would take for the whole array on this cluster: its median time on
    a chunk held in a worker's memory, times the chunks, over the tasks that can run at once
    (worker threads, at most one per core)."""
    from dimred_dask.io import open_input

    arr = open_input(path).array

    def kernel_seconds(block):
        times = []
        for _ in range(3):
            t0 = time.perf_counter()
            kernel(block)
            times.append(time.perf_counter() - t0)
        return float(np.median(times))

    (blk,) = client.persist([arr.blocks[0]])
    per_chunk = client.compute(
        blk.map_blocks(lambda b: np.array([[kernel_seconds(b)]]), chunks=((1,), (1,)), dtype=float)
    ).result()
    import psutil

    parallel = min(sum(client.nthreads().values()), psutil.cpu_count(logical=True))
    return float(per_chunk[0, 0]) * n_chunks / parallel


IN_MEMORY_CHUNKS = (4, 16)  # chunks held in the workers' memory for the passes' floors


def _same(block):
    return block


def _pass_floors(client, path: str, n_chunks: int, width: int) -> dict:
    """Seconds each pass's own code would take over the whole array with its chunks already
    in the workers' memory: the pass (the sketch, the covariance's scatter, the transform's
    projection; dask's tasks, merges and scheduling included, no read) timed over the first
    4 and the first 16 chunks held in memory (median of 3), the difference scaled to the
    array's chunks, so the passes' fixed costs (graph, final merge) are not scaled with it."""
    from distributed import wait

    from dimred_dask.io import open_input
    from dimred_dask.linalg.moments import column_stats
    from dimred_dask.linalg.single_pass import single_pass_eigh
    from dimred_dask.methods.pca import pca

    small, large = IN_MEMORY_CHUNKS
    X = open_input(path).array
    held = client.persist(X[: large * CHUNK_ROWS])
    wait(held)
    model = pca(held, n_components=K, solver="covariance")

    def project(Xm):
        Y = model.transform(Xm)
        firsts = Y.map_blocks(lambda b: b[:1, :1], chunks=((1,) * Y.numblocks[0], (1,)))
        firsts.compute()

    passes = {
        "sketch": lambda Xm: single_pass_eigh(Xm, K, n_oversamples=width - K, random_state=0),
        "scatter": lambda Xm: column_stats(Xm, gram=True),
        "projection": project,
    }
    out = {}
    for name, run in passes.items():
        times = {}
        for m in (small, large):
            ts = []
            for rep in range(4):  # the first builds what later ones reuse (numba, imports)
                # a graph of its own each time: the cluster may still hold an earlier run's
                # results under the same keys, and would hand them back
                Xm = held[: m * CHUNK_ROWS].map_blocks(_same, name=f"held-{name}-{m}-{rep}")
                gc.collect()
                t0 = time.perf_counter()
                run(Xm)
                ts.append(time.perf_counter() - t0)
            times[m] = float(np.median(ts[1:]))
        out[name] = max(times[large] - times[small], 0.0) / (large - small) * n_chunks
    del held
    return out


def _embedding_error(sp_out: str, ex_out: str) -> dict:
    import dask.array as da

    from dimred_dask.io import RunStore

    a, b = RunStore(sp_out), RunStore(ex_out)
    signs = np.sign(
        np.sum(a.read_array("model/components_") * b.read_array("model/components_"), axis=1)
    )
    ya = da.from_zarr(a.open_array("embedding")).astype(np.float64) * signs
    yb = da.from_zarr(b.open_array("embedding")).astype(np.float64)
    diff, ref = da.compute(((ya - yb) ** 2).sum(axis=0), (yb**2).sum(axis=0))
    per = np.sqrt(diff / ref)
    return {
        "relative_error": float(np.sqrt(diff.sum() / ref.sum())),
        "per_component_max": float(per.max()),
        "per_component": [round(float(x), 6) for x in per],
    }


def main_single_pass(args) -> int:
    import dask.array as da
    import psutil
    from distributed import Client, LocalCluster

    from dimred_dask.cluster import local_cluster_size
    from dimred_dask.io import save_array
    from flows.embed import embed

    from .pca import _drop_page_cache, _read_pass

    gib = args.gib or 1.5 * psutil.virtual_memory().total / 2**30
    folder = os.path.abspath(args.dir or os.path.join(os.path.dirname(__file__), "_data"))
    os.makedirs(folder, exist_ok=True)
    codec = None if args.codec in (None, "none") else args.codec
    path = os.path.join(folder, f"decaying-{codec}.zarr" if codec else "decaying.zarr")
    size = {**local_cluster_size(args.workers, args.threads), "memory_limit": 2 * 2**30}
    print(
        f"# bench pca --only single-pass: {gib:.1f} GiB float32 x {D}, singular values "
        f"~ j^-{POWER:g}; k = {K}; chunks {codec or 'uncompressed'}; {machine()}; "
        f"workers {size}; load "
        f"{os.getloadavg()[0]:.2f}",
        flush=True,
    )
    result = {}
    with (
        LocalCluster(
            processes=True, host="127.0.0.1", dashboard_address="127.0.0.1:0", **size
        ) as cl,
        Client(cl) as client,
    ):
        t0 = time.perf_counter()
        n = write_decaying(path, gib, codec=codec)
        print(f"  array of {n} rows ready in {time.perf_counter() - t0:.1f} s", flush=True)
        if codec:
            stored = _folder_bytes(path)
            result["stored_over_raw"] = round(stored / (n * D * 4), 3)
            result["decode_gb_per_s_one_core"] = round(_decode_rate(path, codec) / 1e9, 2)
            print(
                f"  stored / raw {result['stored_over_raw']}, decode "
                f"{result['decode_gb_per_s_one_core']} GB/s on one core",
                flush=True,
            )
        warm = os.path.join(folder, "warm.zarr")  # Prefect's temporary server and the
        write_decaying(warm, CHUNK_ROWS * D * 4 / 2**30)  # workers' imports start here, not
        embed(
            warm,
            os.path.join(folder, "out-warm"),
            method="pca",  # in a timed pass
            params={"n_components": K},
            overwrite=True,
        )
        width = K + max(10, K)
        dropped = [_drop_page_cache()]
        read = _read_pass(path)
        chunks = n // CHUNK_ROWS
        floors = {
            "sketch": _compute_floor(client, path, chunks, _sketch_kernel(width)),
            "scatter": _compute_floor(client, path, chunks, _scatter_kernel()),
            "projection": _compute_floor(client, path, chunks, _projection_kernel()),
        }
        print(
            f"  floors: plain read {read:.1f} s; a chunk's kernel alone, scaled: "
            + ", ".join(f"{k} {v:.1f} s" for k, v in floors.items()),
            flush=True,
        )
        pass_floors = _pass_floors(client, path, chunks, width)
        print(
            "  the passes on chunks held in the workers' memory, scaled: "
            + ", ".join(f"{k} {v:.1f} s" for k, v in pass_floors.items()),
            flush=True,
        )
        pids = list(client.run(os.getpid).values())
        runs = {}
        turns = [
            (name, solver, pool)
            for name, solver in (("single-pass", "single-pass"), ("covariance", "covariance"))
            for pool in ((False, True) if args.compare_pool else (True,))
        ]
        turns.append(("auto", "auto", True))  # with max_error: should take single-pass here
        for name, solver, pool in turns:
            client.restart()  # nothing an earlier turn computed is still held on the cluster
            client.run(_warm_worker, warm)
            pids = list(client.run(os.getpid).values())
            client.run(_set_pool, POOL_BUFFERS if pool else 0)
            label = name if pool else f"{name} (read buffers not reused)"
            out = os.path.join(folder, f"out-{name}")
            shutil.rmtree(out, ignore_errors=True)  # an earlier turn's stages are not reused
            dropped.append(_drop_page_cache())
            with PeakRSS(pids, interval=0.25) as rss:
                t0 = time.perf_counter()
                params = {
                    "n_components": K,
                    "solver": solver,
                    **({"max_error": MAX_ERROR} if solver == "auto" else {}),
                }
                m = embed(path, out, method="pca", params=params, overwrite=True)
                total = time.perf_counter() - t0
            t = m["timings"]
            runs[label] = {
                "total_s": round(total, 1),
                "fit_plus_transform_s": round(t["fit"] + t["transform"], 1),
                "stages_s": {k: round(v, 1) for k, v in m["timings"].items()},
                "passes_over_X": m["model"]["passes"] + (m["model"]["solver"] != "single-pass"),
                "worker_peak_rss_gib": [round(rss.per_process_peak[p] / 2**30, 2) for p in pids],
                "sketch": m["model"].get("sketch"),
                "solver": m["model"]["solver"],
                "solver_choice": m["model"].get("solver_choice"),
            }
            print(f"  {label}: {json.dumps(runs[label])}", flush=True)
        dropped.append(_drop_page_cache())
        # the row sketch is removed once the embedding is committed: its read is timed on an
        # array of its shape and chunks written here
        sketch_like = os.path.join(folder, "sketch-like.zarr")
        save_array(
            da.random.default_rng(0).random(
                (n, width), dtype=np.float32, chunks=(CHUNK_ROWS, width)
            ),
            sketch_like,
            overwrite=True,
            compressors=None,
        )
        dropped.append(_drop_page_cache())
        sketch_read = _read_pass(sketch_like)
        err = _embedding_error(
            os.path.join(folder, "out-single-pass"), os.path.join(folder, "out-covariance")
        )
    sp = runs["single-pass"]["fit_plus_transform_s"]
    ex = runs["covariance"]["fit_plus_transform_s"]
    sp_floor = max(read, floors["sketch"]) + sketch_read
    ex_floor = max(read, floors["scatter"]) + max(read, floors["projection"])
    sp_pass_floor = max(read, pass_floors["sketch"]) + sketch_read
    ex_pass_floor = max(read, pass_floors["scatter"]) + max(read, pass_floors["projection"])
    result = {
        **result,
        "rows": n,
        "gib": round(n * D * 4 / 2**30, 1),
        "plain_read_s": round(read, 1),
        "compute_floors_s": {k: round(v, 1) for k, v in floors.items()},
        "sketch_read_s": round(sketch_read, 1),
        "single_pass_floors_s": round(sp_floor, 1),
        "covariance_floors_s": round(ex_floor, 1),
        "single_pass_over_its_floors": round(sp / sp_floor, 3),
        "covariance_over_its_floors": round(ex / ex_floor, 3),
        "pass_floors_in_memory_s": {k: round(v, 1) for k, v in pass_floors.items()},
        "single_pass_floors_by_passes_s": round(sp_pass_floor, 1),
        "covariance_floors_by_passes_s": round(ex_pass_floor, 1),
        "single_pass_over_its_pass_floors": round(sp / sp_pass_floor, 3),
        "covariance_over_its_pass_floors": round(ex / ex_pass_floor, 3),
        "page_cache_dropped": all(dropped),
        "runs": runs,
        "single_pass_over_read": round(sp / read, 3),
        "single_pass_over_exact": round(sp / ex, 3),
        "embedding_error_vs_exact": err,
        "error_estimate_reported": (runs["single-pass"]["sketch"] or {}).get(
            "embedding_error_estimate"
        ),
    }
    print(json.dumps(result, indent=1))
    for name in (
        "out-single-pass",
        "out-covariance",
        "out-auto",
        "out-warm",
        "warm.zarr",
        "sketch-like.zarr",
    ):
        shutil.rmtree(os.path.join(folder, name), ignore_errors=True)
    if not args.dir:
        shutil.rmtree(folder, ignore_errors=True)
    return 0
