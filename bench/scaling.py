"""A model of the distributed t-SNE and UMAP optimisers at 10^7 and 10^8 rows on 8, 32 and 128
workers, from figures measured here (``python -m bench scaling``). It is a model, not a run.

Measured in this run:

- the per-row compute of one iteration in a block (``seconds_per_iteration.blocks`` of a
  distributed fit of ``bench.knn.make_data(--rows)`` on 2 worker processes of one thread,
  one block each: core-seconds per row = blocks x 1 core / (rows / 2));
- the coordinator's work at the largest 2-D grid (1 200^2 nodes, which every fit above a
  few hundred thousand rows reaches): summing the blocks' charges and the FFT convolution,
  timed on this machine with the product's own code;
- the bytes per iteration, from the same formulas the optimiser's ``bytes_per_iteration``
  counts (checked against the measured run).

Assumed (stated, not measured): one core per worker for the blocks' numba kernels (a worker
with c cores divides the block time by c), a coordinator NIC of ``--bandwidth`` GB/s (default
1.25: 10 GbE) through which every byte passes (the positions go to and come from every block
through the coordinator: a star), no overlap of compute and transfer, and the kNN graph and
P outside the model (their cost is the kNN stage's).
"""

from __future__ import annotations

import json
import os
import time

import numpy as np

from ._measure import machine
from .knn import D, make_data

D_OUT = 2
GRID_NODES = 1200**2  # the capped 2-D grid (MAX_BOXES[2] = 400 boxes x 3 nodes)
ITERATIONS = {"tsne": 750, "umap": 200}


def _measure_fits(rows: int) -> dict:
    from distributed import Client, LocalCluster, wait

    from dimred_dask.methods.tsne import tsne
    from dimred_dask.methods.umap import umap

    out = {}
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
        client.wait_for_workers(2)
        X = make_data(rows).persist()
        wait(X)
        m = tsne(
            X, optimizer="distributed", n_iter=300, early_exaggeration_iter=100, random_state=0
        )
        out["tsne"] = {
            k: m.info[k] for k in ("seconds_per_iteration", "bytes_per_iteration", "blocks")
        }
        m = umap(X, optimizer="distributed", n_epochs=60, init="pca", random_state=0)
        out["umap"] = {
            k: m.info[k]
            for k in ("seconds_per_iteration", "bytes_per_iteration", "blocks", "edges")
        }
    return out


def _coordinator_seconds(blocks: int, repeat: int = 5) -> dict:
    """Summing ``blocks`` charge grids and one convolution at the capped 2-D grid."""
    from dimred_dask.blocks.tsne_gradient import GridSpec

    spec = GridSpec((0.0, 0.0), (-600.0, -600.0), 1.0, 400, 3)
    rng = np.random.default_rng(0)
    charges = [rng.random((GRID_NODES, D_OUT + 2)) for _ in range(2)]
    sums, ffts = [], []
    for _ in range(repeat):
        t0 = time.perf_counter()
        total = charges[0].copy()
        for _ in range(blocks - 1):
            total += charges[1]
        t1 = time.perf_counter()
        spec.potentials(total, 10**6, os.cpu_count() or 1)
        ffts.append(time.perf_counter() - t1)
        sums.append((t1 - t0) / max(1, blocks - 1))
    return {"sum_per_block": float(np.median(sums)), "fft": float(np.median(ffts))}


def _bytes(name: str, n: int, w: int) -> float:
    """Bytes through the coordinator per iteration (as ``bytes_per_iteration`` counts)."""
    if name == "umap":
        return (w + 1) * n * D_OUT * 4
    grid_up = GRID_NODES * (D_OUT + 2) * 8
    grid_down = GRID_NODES * (D_OUT + 1) * 4
    return (w + 1) * n * D_OUT * 8 + w * (grid_up + grid_down)


def main(args) -> int:
    rows = args.rows or 200_000
    bw = (args.bandwidth or 1.25) * 1e9
    print(
        f"# bench scaling: a MODEL of the distributed optimisers, from figures measured on "
        f"{rows} x {D} here; {machine()}; load average {os.getloadavg()[0]:.2f}",
        flush=True,
    )
    fits = _measure_fits(rows)
    coord = _coordinator_seconds(8)
    print("measured: " + json.dumps({"fits": fits, "coordinator": coord}), flush=True)
    print(
        f"\nassumed: 1 core per worker, coordinator NIC {bw / 1e9:.2f} GB/s (star), no "
        "overlap; kNN graph and P not included\n"
    )
    print(
        "| method | rows | workers | block compute / it (s) | coordinator / it (s) | bytes "
        "through the coordinator / it | transfer / it (s) | per iteration (s) | "
        "optimisation (iterations) | per-worker state (GiB) | coordinator memory (GiB) |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for name in ("tsne", "umap"):
        f = fits[name]
        per_row = f["seconds_per_iteration"]["blocks"] * 1 / (rows / f["blocks"])
        nnz_row = 2 * (90 if name == "tsne" else 14)  # symmetrised kNN edges per row (bound)
        for n in (10**7, 10**8):
            for w in (8, 32, 128):
                block = per_row * n / w
                coordinator = (
                    coord["fft"] + coord["sum_per_block"] * (w - 1) if name == "tsne" else 0.0
                ) + n * D_OUT * 8 / 5e9
                moved = _bytes(name, n, w)
                transfer = moved / bw
                it = block + coordinator + transfer
                total = it * ITERATIONS[name]
                # a block: its rows of P (16 B per non-zero), all positions (float64), and its
                # rows' state (update, gains, output, potentials)
                state = (nnz_row * n / w * 16 + n * D_OUT * 8 + 6 * n / w * D_OUT * 8) / 2**30
                coord_mem = 4 * n * D_OUT * 8 / 2**30 + (
                    3 * GRID_NODES * (D_OUT + 2) * 8 / 2**30 if name == "tsne" else 0
                )
                print(
                    f"| {name} | {n:.0e} | {w} | {block:.2f} | {coordinator:.2f} | "
                    f"{moved / 2**30:.2f} GiB | {transfer:.2f} | {it:.2f} | "
                    f"{total / 60:.1f} min ({ITERATIONS[name]}) | {state:.2f} | "
                    f"{coord_mem:.2f} |",
                    flush=True,
                )
    return 0
