"""Fill numba's on-disk cache before the first run: ``python -m dimred_dask.warmup``.

numba compiles a function on its first call in a process and, with ``cache=True``, keeps the
machine code on disk for the next process. A fresh installation has an empty cache, so its
first t-SNE, UMAP, kNN graph or Isomap run compiles pynndescent's and this package's kernels,
which on small data is most of that run's time (see bench/RESULTS.md, "pynndescent's compiled
functions cached on disk"). This module runs each of them once on a few hundred generated
rows, as compiling ``.py`` files to ``.pyc`` does at install time: ``make install`` calls it,
and a worker image should run it once when it is built (docs/operations.md). Nothing is read
or written but numba's cache.

Functions numba cannot cache (pynndescent's ``nn_descent`` closures, which use dynamic
globals) are still compiled by the first graph of each process.
"""

from __future__ import annotations

import sys
import time
import warnings

import numpy as np

__all__ = ["warm"]


def _steps():
    from .graphs import knn_graph, query
    from .methods import TSNE, UMAP, Isomap

    rng = np.random.default_rng(0)
    X = rng.standard_normal((600, 8)).astype(np.float32)

    def graph():
        knn_graph(X, 10, backend="nndescent", target_recall=None)

    def sparse_graph():  # CSR rows (counts): pynndescent's sparse kernels, compiled apart
        import scipy.sparse as sp

        S = sp.random(600, 200, density=0.05, format="csr", random_state=0, dtype=np.float32)
        knn_graph(S, 10, backend="nndescent", target_recall=None)

    def index():  # above EXACT_REFERENCE_MAX training rows, new rows go through an index
        train = rng.standard_normal((query.EXACT_REFERENCE_MAX + 1, 8)).astype(np.float32)
        query.reference_topk(X[:50], train, 5)

    return [
        ("kNN graph (NN-descent)", graph),
        ("kNN graph of sparse rows (NN-descent)", sparse_graph),
        ("kNN index and its query", index),
        ("UMAP", lambda: UMAP(n_epochs=20, random_state=0).fit_transform(X)),
        ("t-SNE", lambda: TSNE(n_iter=250, random_state=0).fit_transform(X)),
        ("Isomap", lambda: Isomap(n_neighbors=10).fit_transform(X.astype(np.float64))),
    ]


def warm(stream=sys.stdout) -> float:
    """Run each numba-compiled path once on generated data, filling numba's on-disk cache.

    The paths are the NN-descent kNN graph, a kNN index and its query, UMAP, t-SNE and
    Isomap, each on a few hundred random rows in this process; their warnings are silenced.

    Parameters
    ----------
    stream : file-like, default sys.stdout
        Where one line per path (its name and seconds) is printed. The default is the
        ``sys.stdout`` of the time this module was imported.

    Returns
    -------
    float
        The seconds all the paths took.
    """
    t0 = time.perf_counter()
    for name, step in _steps():
        t = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            step()
        print(f"  numba cache: {name} ({time.perf_counter() - t:.1f} s)", file=stream, flush=True)
    return time.perf_counter() - t0


if __name__ == "__main__":
    print("filling numba's on-disk cache (python -m dimred_dask.warmup) ...", flush=True)
    print(f"done in {warm():.1f} s", flush=True)
