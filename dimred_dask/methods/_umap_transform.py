"""Placing new points into a fixed UMAP embedding (as umap-learn's ``transform``).

For each new point: its ``n_neighbors`` nearest training points (exact up to 20 000 training
points, else from an index over them, `graphs.query`), memberships exp(-max(0, d - rho) /
sigma) with local connectivity one less than the fit's, an initial position at the
membership-weighted mean of those neighbours' positions, then SGD epochs (as umap-learn:
100 up to 10 000 training points, else 30) moving only the new points, from a quarter of the
fit's learning rate (as umap-learn's): attraction to their neighbours, repulsion from random
training points. The generator of a row is keyed by the row's values (a hash of its
bytes), so a row's position depends on the row alone: not on how the rows are chunked,
ordered or batched with others (nor does its sampling schedule: epochs per sample are
relative to membership 1); dask input is one task per chunk.
"""

from __future__ import annotations

import numpy as np

from .._validation import is_dask
from ..blocks.umap_kernels import no_pulls
from ..graphs.affinities import fuzzy_rows
from ..graphs.query import reference_topk
from ._base import refuse_nonfinite_block
from ._umap_parts import sgd_step

__all__ = ["umap_transform", "place_rows"]


def _epochs(params: dict, n_ref: int) -> int:
    return 100 if n_ref <= 10_000 else 30


def row_keys(X: np.ndarray) -> np.ndarray:
    """A uint64 hash of each row's float64 bytes (a multiply-xorshift fold over the columns)."""
    u = np.ascontiguousarray(X, dtype=np.float64).view(np.uint64)
    h = np.full(u.shape[0], 0x9E3779B97F4A7C15, dtype=np.uint64)
    for j in range(u.shape[1]):
        h = (h ^ u[:, j]) * np.uint64(0xBF58476D1CE4E5B9)
        h ^= h >> np.uint64(31)
    return h


def place_rows(X_new, X_train, Y_train, params: dict, key=None):
    """Positions of the rows of ``X_new`` (NumPy) in the embedding ``Y_train`` (float32) of
    ``X_train``; ``params``: the fit's setting (``n_neighbors``, ``metric``, ``a``, ``b``
    ...); ``key`` names the training rows for the search index (`graphs.query`)."""
    X_new = np.asarray(X_new, dtype=np.float64)
    n_ref, d = Y_train.shape
    k = int(min(params["n_neighbors"], n_ref))
    idx, dist = reference_topk(X_new, X_train, k, metric=params["metric"], key=key)
    if params["metric"] == "euclidean":
        # the found neighbours' distances again, directly: the search's ||a||^2 + ||b||^2 -
        # 2 a.b leaves a row's distance to its own copy at ~1e-8, a value that depends on
        # the rows searched together, and the membership's rho (the nearest distance above
        # 0) jumps with it; directly, a copy is at 0 whatever the batch
        ref = np.asarray(X_train)
        for a in range(0, len(idx), 4096):  # 4096 x k x d at a time
            diff = X_new[a : a + 4096, None, :] - ref[idx[a : a + 4096]]
            dist[a : a + 4096] = np.sqrt(np.einsum("ijk,ijk->ij", diff, diff))
    vals, _, _ = fuzzy_rows(dist, float(k), max(0.0, params["local_connectivity"] - 1.0))
    w = vals / np.maximum(vals.sum(axis=1, keepdims=True), 1e-300)
    Y = np.ascontiguousarray((w[:, :, None] * Y_train[idx]).sum(axis=1), dtype=np.float32)
    n_epochs = _epochs(params, n_ref)
    # epochs per sample relative to the largest possible membership, 1 (not the block's
    # largest, as umap-learn does), so that a row's schedule does not depend on its block
    flat = vals.ravel()
    keep = flat >= 1.0 / float(n_epochs)
    keep2 = keep.reshape(vals.shape)
    indptr = np.concatenate([[0], np.cumsum(keep2.sum(axis=1))]).astype(np.int64)
    indices = np.ascontiguousarray(idx[keep2], dtype=np.int64)
    eps = 1.0 / flat[keep]
    rate = params["negative_sample_rate"]
    eps_neg = eps / rate if rate > 0 else np.full_like(eps, np.inf)
    edges = (indptr, indices, eps, eps.copy(), eps_neg, eps_neg.copy())
    Yref = np.ascontiguousarray(Y_train, dtype=np.float32)
    keys = row_keys(X_new)
    for epoch in range(n_epochs):
        alpha = np.float32(params["learning_rate"] / 4.0 * (1.0 - epoch / n_epochs))
        sgd_step(Y, Yref, edges, params, alpha, epoch, keys, False, no_pulls(d))
    return Y


def umap_transform(X_train, Y_train, X_new, params: dict):
    """Positions of the rows of ``X_new`` in the embedding ``Y_train`` of ``X_train``
    (NumPy in -> NumPy out, dask in -> dask out, one task per chunk)."""
    Y_train = np.ascontiguousarray(Y_train, dtype=np.float32)
    X_train = np.asarray(X_train.compute() if is_dask(X_train) else X_train, dtype=np.float64)
    d = Y_train.shape[1]
    if not is_dask(X_new):
        return place_rows(X_new, X_train, Y_train, params).astype(np.asarray(X_new).dtype)
    X_new = X_new if X_new.numblocks[1] == 1 else X_new.rechunk({1: -1})

    def block(x, block_info=None):
        refuse_nonfinite_block(x, "UMAP transform", block_info)
        return place_rows(x, X_train, Y_train, params).astype(x.dtype)

    return X_new.map_blocks(block, chunks=(X_new.chunks[0], (d,)), dtype=X_new.dtype)
