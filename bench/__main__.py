"""python -m bench NAME [options]: run a benchmark of this project against its peers."""

from __future__ import annotations

import argparse
import os
import sys


def _parser() -> argparse.ArgumentParser:
    """Every benchmark's options (one parser: most options apply to several benchmarks)."""
    p = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    p.add_argument(
        "name",
        choices=[
            "pca",
            "kpca",
            "mds",
            "knn",
            "isomap",
            "lle",
            "spectral",
            "clustering",
            "mvu",
            "tsne",
            "umap",
            "sparse",
            "scaling",
            "shards",
            "models",
            "numba-cache",
            "flow-peak",
            "real-umap",
            "real-tsne",
            "transform",
            "solver-memory",
        ],
        help="which benchmark",
    )
    p.add_argument(
        "--big",
        action="store_true",
        help="out of core: a Zarr array on disk larger than memory (pca); "
        "n = 1 000 000 Nyström on 4 GiB workers (kpca); 1 000 000 x 50 end to "
        "end on 2 workers (tsne, umap)",
    )
    p.add_argument(
        "--exact-big",
        action="store_true",
        help="kpca: exact kernel PCA of n = 50 000 through a 10 GB kernel on disk",
    )
    p.add_argument("--rows", type=int, default=None, help="rows of the data (default per bench)")
    p.add_argument("--repeat", type=int, default=3, help="timed repetitions (median reported)")
    p.add_argument("--gib", type=float, default=None, help="--big: size of the array in GiB")
    p.add_argument(
        "--dir",
        default=None,
        help="--big: where to write the array (pca: kept; "
        "kpca, mds: default bench/_data, deleted unless --keep)",
    )
    p.add_argument("--workers", type=int, default=None, help="--big, flow-peak: worker processes")
    p.add_argument(
        "--graph-cache",
        default=None,
        help="flow-peak: the kNN graph cache's folder, kept afterwards so that a later "
        "invocation on the same data reuses its graph (default: a folder of this run, removed)",
    )
    p.add_argument("--threads", type=int, default=2, help="--big: threads per worker")
    p.add_argument(
        "--landmarks",
        type=int,
        default=None,
        help="kpca: Nyström landmarks m (default 2000, --big 1000); clustering: "
        "(default 1000); "
        "mds: landmarks (default 1000); mvu: landmark MVU's m (default 40)",
    )
    p.add_argument(
        "--peer-repeat",
        type=int,
        default=1,
        help="kpca, mds, mvu: timed repetitions of the slow peers and exact solvers",
    )
    p.add_argument(
        "--keep",
        action="store_true",
        help="kpca, mds: keep what --big / --exact-big wrote under --dir",
    )
    p.add_argument(
        "--trees",
        type=int,
        default=None,
        help="knn: NN-descent trees of our tuned run (default: pynndescent's)",
    )
    p.add_argument(
        "--iters",
        type=int,
        default=None,
        help="knn: NN-descent iterations of our tuned run (default: pynndescent's)",
    )
    p.add_argument(
        "--fit-sample",
        type=int,
        default=None,
        help="umap/tsne --big: fit on this many rows, place the others; transform: the map's "
        "fit sample",
    )
    p.add_argument(
        "--optimizer",
        default="auto",
        choices=["auto", "single", "distributed"],
        help="umap/tsne --big: the optimiser (one worker, or spread over all)",
    )
    p.add_argument(
        "--compare-optimizers",
        action="store_true",
        help="umap/tsne --big: the one-worker and the distributed optimiser in "
        "turns (--big-repeat rounds), same data, same cluster",
    )
    p.add_argument(
        "--bandwidth",
        type=float,
        default=None,
        help="scaling: the coordinator's network bandwidth in GB/s (default 1.25)",
    )
    p.add_argument(
        "--hard",
        action="store_true",
        help="knn: 300 000 isotropic 50-D blobs (intrinsic dimension 50) with the "
        "stage's target recall 0.95, against pynndescent tuned to reach it",
    )
    p.add_argument(
        "--exact",
        action="store_true",
        help="isomap: exact Isomap against scikit-learn's at n = 10 000 and 20 000 "
        "(--rows: one n), --repeat rounds in turns",
    )
    p.add_argument(
        "--compare-workers",
        action="store_true",
        help="isomap: landmark Isomap at --rows (default 1 000 000), or with --exact "
        "exact Isomap (default 20 000), on one kNN graph with its geodesics in this "
        "process and on the workers, in turns (--repeat rounds)",
    )
    p.add_argument(
        "--skip-big",
        action="store_true",
        help="isomap: only the n = 20 000 comparison, not the 1 000 000 run",
    )
    p.add_argument(
        "--solver",
        default=None,
        help="lle, spectral: the sparse eigensolver for every data set (default: "
        "lle: auto; spectral: arpack on the swiss roll, lobpcg on the "
        "50-D mixture); several, comma-separated, run in turns on the same "
        "graph, --repeat rounds",
    )
    p.add_argument(
        "--tol",
        type=float,
        default=1e-6,
        help="lle, spectral: the eigensolver's tolerance (default 1e-6; the methods' own "
        "default is 1e-8)",
    )
    p.add_argument(
        "--only",
        default=None,
        help="lle, spectral: only the data set whose name starts with this "
        "('swiss', '50-D'); pca: 'read' times the input read path against "
        "zarr's own dask reader, 'single-pass' the one-pass PCA out of core",
    )
    p.add_argument(
        "--compare-pool",
        action="store_true",
        help="pca --only single-pass: each flow run also with the read buffers "
        "not reused, in turns",
    )
    p.add_argument(
        "--codec",
        default=None,
        choices=["none", "zstd", "blosc-lz4"],
        help="pca --only single-pass: compress the array's chunks with this codec",
    )
    p.add_argument(
        "--first-run",
        action="store_true",
        help="tsne, umap: also time one run in a fresh process with an empty numba "
        "cache (compilation included)",
    )
    p.add_argument(
        "--big-repeat",
        type=int,
        default=1,
        help="mvu: timed repetitions of landmark MVU at n = --rows (default 20 000)",
    )
    p.add_argument("--genes", type=int, default=None, help="sparse: columns (default 20 000)")
    p.add_argument(
        "--no-scanpy",
        action="store_true",
        help="sparse: leave scanpy out (it calls scikit-learn's ARPACK PCA)",
    )
    p.add_argument(
        "--density",
        type=float,
        default=None,
        help="sparse --big: share of non-zero counts (default 0.035)",
    )
    p.add_argument(
        "--worker-memory",
        default=None,
        help="sparse --big: memory_limit of each worker (default 5GiB); lle, "
        "spectral: of each worker (default: the machine's share); flow-peak: of each "
        "worker (default 8GiB)",
    )
    p.add_argument(
        "--methods",
        default=None,
        help="flow-peak: the methods run through the flow, comma-separated, each "
        "optionally with parameters (laplacian:eigen_solver=lobpcg;tol=1e-6)",
    )
    p.add_argument(
        "--csv",
        default=None,
        help="real-umap, real-tsne: also a local CSV of rows, the label last (reduced to 50 PCs)",
    )
    p.add_argument(
        "--seeds", type=int, nargs="+", default=None, help="real-umap, real-tsne: the seeds"
    )
    p.add_argument(
        "--new-rows",
        type=int,
        default=None,
        help="transform: rows placed (default: as many as --rows)",
    )
    p.add_argument(
        "--maps",
        nargs="+",
        default=None,
        choices=["umap", "tsne"],
        help="transform: the maps fitted and placed on (default: umap and tsne; umap only with "
        "--fit-sample)",
    )
    return p


def main(argv=None) -> int:
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    args = _parser().parse_args(argv)
    if args.name == "transform":
        from . import transform

        return transform.main(args)
    if args.name == "solver-memory":
        from . import solver_memory

        return solver_memory.main(args)
    if args.name in ("real-umap", "real-tsne"):
        from . import real_data

        return real_data.main(args)
    if args.name == "flow-peak":
        from . import flow_peak

        return flow_peak.main(args)
    if args.name == "sparse":
        from . import sparse

        return sparse.main_big(args) if args.big else sparse.main(args)
    if args.name == "numba-cache":
        from . import numba_cache

        return numba_cache.main(args)
    if args.name == "models":
        from . import models

        return models.main(args)
    if args.name == "shards":
        from . import shards

        return shards.main(args)
    if args.name == "scaling":
        from . import scaling

        return scaling.main(args)
    if args.name in ("tsne", "umap"):
        from . import neighbor

        return neighbor.main(args)
    if args.name == "isomap":
        from . import graph

        if args.compare_workers:
            return graph.main_isomap_workers(args)
        return graph.main_isomap_exact(args) if args.exact else graph.main_isomap(args)
    if args.name in ("lle", "spectral"):
        from . import graph

        return graph.main_graph_method(args, args.name)
    if args.name == "clustering":
        from . import clustering

        return clustering.main(args)
    if args.name == "mvu":
        from . import mvu

        return mvu.main(args)
    if args.name == "knn":
        from . import knn

        return knn.main(args)
    if args.name == "kpca":
        from . import kpca

        if args.exact_big:
            return kpca.main_exact_big(args)
        if args.big:
            return kpca.main_big(args)
        return kpca.main(args)
    if args.name == "mds":
        from . import mds

        return mds.main(args)
    from . import pca

    if args.big:
        return pca.main_big(args)
    if args.only == "read":
        return pca.main_read(args)
    if args.only == "single-pass":
        from . import pca_single

        return pca_single.main_single_pass(args)
    return pca.main(args)


if __name__ == "__main__":
    sys.exit(main())
