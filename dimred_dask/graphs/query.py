"""The nearest training rows of new rows: what the transforms of t-SNE and UMAP (and a fit on
a sample, which places every other row) search.

Up to ``EXACT_REFERENCE_MAX`` training rows the search is exact (``blocks.neighbors.block_topk``,
the same as the exact kNN graph). Above, a pynndescent index over the training rows is queried
(as umap-learn's and openTSNE's transforms do): the exact search costs a distance per (new,
training) pair, 10^11 of them to place 900 000 rows against 100 000, while the index answers a
row from a few hundred distances. The index is built once per process for a given training
set (the tasks of one worker share it) with a fixed seed on one thread, so every process
builds the same index. Its query fills a row's candidate list at random when its search tree
gives too few, from one generator that runs along the batch: a rare row's neighbours can then
differ with the chunk it is in (1 of 397 held-out digits moved, by 0.003), never between runs
with the same chunks. The exact search does not depend on the chunking at all.
"""

from __future__ import annotations

import hashlib
import threading

import numpy as np

from ..blocks.neighbors import block_topk

__all__ = ["reference_topk", "EXACT_REFERENCE_MAX"]

EXACT_REFERENCE_MAX = 20_000
INDEX_NEIGHBORS = 30  # the index's own graph (pynndescent's default)
QUERY_EPSILON = 0.1  # pynndescent's default search breadth
_INDEX: dict = {}  # {key: index}, one training set per process
_LOCK = threading.Lock()


def _key(X: np.ndarray, metric: str) -> tuple:
    digest = hashlib.blake2b(np.ascontiguousarray(X).view(np.uint8), digest_size=16).hexdigest()
    return (X.shape, str(X.dtype), metric, digest)


def _index(X_train: np.ndarray, metric: str, key=None):
    import numba

    from .nndescent import pynndescent_cached

    NNDescent = pynndescent_cached().NNDescent

    x = np.ascontiguousarray(X_train, dtype=np.float32)
    key = (key, metric) if key is not None else _key(x, metric)
    with _LOCK:
        index = _INDEX.get(key)
        if index is None:
            # one thread: NN-descent's parallel updates make the index depend on the thread
            # count, and every process (the client, each worker) must build the same index
            before = numba.get_num_threads()
            numba.set_num_threads(1)
            try:
                index = NNDescent(
                    x,
                    n_neighbors=min(INDEX_NEIGHBORS, x.shape[0] - 1),
                    metric=metric,
                    random_state=0,
                    compressed=True,
                )
                index.prepare()
            finally:
                numba.set_num_threads(before)
            _INDEX.clear()
            _INDEX[key] = index
    return index


def reference_topk(X_new, X_train, k: int, metric: str = "euclidean", key=None):
    """(indices (len(X_new), k) int64, distances float64) of the nearest rows of ``X_train``
    to each row of ``X_new``, nearest first (exact up to EXACT_REFERENCE_MAX training rows).
    ``key``: what names the training rows (e.g. their location and fingerprint), so that the
    index is found again without hashing them; None hashes their bytes."""
    if X_train.shape[0] <= EXACT_REFERENCE_MAX:
        return block_topk(X_new, X_train, k, metric=metric)
    index = _index(X_train, metric, key)
    idx, dist = index.query(
        np.ascontiguousarray(X_new, dtype=np.float32), k=k, epsilon=QUERY_EPSILON
    )
    return idx.astype(np.int64), dist.astype(np.float64)
