"""The demo: a low-rank-plus-noise matrix made on the cluster, then the embedding flow."""
from __future__ import annotations

import os
import time

from dimred_dask.cluster import cluster_client
from dimred_dask.datasets import low_rank_plus_noise
from dimred_dask.io import save_array

from .embed import embed


def run_demo(folder: str = ".dimred-demo", *, rows: int = 200_000, features: int = 256,
             rank: int = 16, n_components: int = 16, scheduler: str | None = None) -> dict:
    folder = os.path.abspath(folder)
    data, out = os.path.join(folder, "data.zarr"), os.path.join(folder, "pca-output")
    with cluster_client(scheduler) as client:
        if not os.path.exists(os.path.join(data, "zarr.json")):
            t0 = time.perf_counter()
            print(f"making {rows:,} x {features} float32 (6 clusters in rank {rank}, plus noise) "
                  f"at {data} ...")
            X = low_rank_plus_noise(rows, features, rank=rank, chunk_rows=25_000, clusters=6)
            save_array(X, data, overwrite=True)
            print(f"  written in {time.perf_counter() - t0:.1f} s")
        print(f"embedding with PCA (k = {n_components}) on {len(client.scheduler_info()['workers'])}"
              f" Dask workers -> {out}")
        return embed(data, out, method="pca", params={"n_components": n_components},
                     scheduler=scheduler, overwrite=True)
