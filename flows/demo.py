"""The demos: a low-rank-plus-noise matrix made on the cluster, then PCA; or a synthetic
single-cell count matrix (sparse, cell types) written as AnnData .h5ad, then PCA + UMAP."""

from __future__ import annotations

import os
import time

from dimred_dask._compute import workers
from dimred_dask.cluster import cluster_client
from dimred_dask.datasets import low_rank_plus_noise, sparse_counts
from dimred_dask.errors import OutputExistsError
from dimred_dask.io import save_array

from .embed import embed


def run_demo(
    folder: str = ".dimred-demo",
    *,
    rows: int = 200_000,
    features: int = 256,
    rank: int = 16,
    n_components: int = 16,
    scheduler: str | None = None,
) -> dict:
    folder = os.path.abspath(folder)
    data, out = os.path.join(folder, "data.zarr"), os.path.join(folder, "pca-output")
    made = _demo_data_made(data, (rows, features))
    with cluster_client(scheduler) as client:
        if not made:
            t0 = time.perf_counter()
            print(
                f"making {rows:,} x {features} float32 (6 clusters in rank {rank}, plus noise) "
                f"at {data} ..."
            )
            X = low_rank_plus_noise(rows, features, rank=rank, chunk_rows=25_000, clusters=6)
            save_array(X, data, overwrite=True)
            print(f"  written in {time.perf_counter() - t0:.1f} s")
        print(
            f"embedding with PCA (k = {n_components}) on "
            f"{len(workers(client))}"
            f" Dask workers -> {out}"
        )
        return embed(
            data,
            out,
            method="pca",
            params={"n_components": n_components},
            scheduler=scheduler,
            overwrite=True,
        )


def _demo_data_made(data: str, shape: tuple) -> bool:
    """Whether ``data`` holds the demo's array of this shape already (False: nothing is
    there). Anything else there is refused: the demo never replaces data it did not make."""
    if not os.path.lexists(data):
        return False
    import zarr

    try:
        found = zarr.open_array(data, mode="r", zarr_format=3).shape
    except Exception:
        found = None
    if found == tuple(shape):
        return True
    raise OutputExistsError(
        f"{data} exists and is not the demo's {shape[0]:,} x {shape[1]} Zarr v3 array"
        + (f" (it holds {found[0]:,} x {found[1]})" if found and len(found) == 2 else "")
        + "; the demo replaces nothing it cannot tell is its own.",
        "move it away, or pass another --dir (or the --rows / --features it was made with).",
    )


def run_cells_demo(
    folder: str = ".dimred-demo",
    *,
    cells: int = 50_000,
    genes: int = 2000,
    types: int = 8,
    scheduler: str | None = None,
) -> dict:
    """Sparse log1p counts of ``cells`` x ``genes`` (2 % non-zero, ``types`` cell types) as an
    AnnData .h5ad, then the chain pca+umap (50 components, then a 2-D map)."""
    from dimred_dask.io.write import save_h5ad

    folder = os.path.abspath(folder)
    data = os.path.join(folder, f"cells-{cells}x{genes}.h5ad")  # a new size, a new file
    out = os.path.join(folder, "cells-map")
    os.makedirs(folder, exist_ok=True)
    if not os.path.exists(data):
        t0 = time.perf_counter()
        print(
            f"making {cells:,} cells x {genes:,} genes of sparse counts ({types} cell types) "
            f"at {data} ..."
        )
        X, kind = sparse_counts(cells, genes, types=types)
        save_h5ad(X, data, obs={"cell_type": kind.astype(str)})
        print(f"  {X.nnz:,} stored values written in {time.perf_counter() - t0:.1f} s")
    print(f"embedding with PCA (50 components) then UMAP -> {out}")
    return embed(
        data,
        out,
        method="pca+umap",
        params={"umap.random_state": 0},
        scheduler=scheduler,
        overwrite=True,
    )
