"""Placing new points into a fixed t-SNE embedding (openTSNE's partial optimisation, with a
per-point normalisation so that every new point is independent of the others).

For a new point x: its k nearest training points (exact up to 20 000 training points, else
from an index over them, `graphs.query`), p_{j|x} at perplexity ``perplexity`` (5: new points
follow their closest neighbours), an initial position at the
median of those neighbours' positions, then ``n_iter`` steps of gradient descent on
KL(P_x || Q_x) with q_{j|x} = w_xj / sum_l w_xl over all training points (their positions
fixed): g_x = exaggeration * sum_j p_{j|x} w_xj (y_x - y_j) - sum_j w_xj^2 (y_x - y_j) / Z_x,
norm-clipped to ``max_grad_norm``, with momentum and gains. Repulsion is exact or read from
one interpolation grid of the training embedding (built once); positions stay inside that
grid. New points never interact, so dask input is done chunk by chunk in parallel and the
result does not depend on the chunking.
"""

from __future__ import annotations

import numpy as np

from .._validation import is_dask
from ..blocks.tsne_gradient import Interpolation, InterpolationGrid, point_z
from ..blocks.tsne_kernels import attraction, exact_repulsion, gains_step
from ..graphs.affinities import SparseAffinity, conditional_rows
from ..graphs.query import reference_topk
from ._base import refuse_nonfinite_block

__all__ = ["tsne_transform", "TRANSFORM_DEFAULTS", "place_rows", "reference_grid", "sne_place_rows"]

TRANSFORM_DEFAULTS = {
    "perplexity": 5.0,
    "n_iter": 250,
    "learning_rate": 0.1,
    "exaggeration": 1.5,
    "momentum": 0.8,
    "max_grad_norm": 0.25,
}
EXACT_REFERENCE_MAX = 5000  # exact repulsion against up to this many training points


def _potentials(Y, Y_ref, grid):
    if grid is None:
        phi = np.empty((Y.shape[0], Y.shape[1] + 3))
        exact_repulsion(Y, Y_ref, False, phi)
        return phi[:, :-1], phi[:, -1]
    phi = grid.potentials_at(Y)
    return phi, point_z(Y, phi)


def place_rows(X_new, X_train, Y_train, grid, metric: str, opts: dict, key=None):
    """New positions of one block of rows (NumPy) in the t-SNE embedding ``Y_train``
    (float64) of ``X_train``; ``grid``: `reference_grid`'s; ``key`` names the training rows
    for the search index (`graphs.query`)."""
    X_new = np.asarray(X_new, dtype=np.float64)
    n_ref, d = Y_train.shape
    k = int(min(n_ref, max(3 * opts["perplexity"] + 1, 10)))
    idx, dist = reference_topk(X_new, X_train, k, metric=metric, key=key)
    perp = min(opts["perplexity"], (k - 1) / 3)
    cond, _ = conditional_rows(dist, perp)
    P = SparseAffinity.from_rows(idx, cond, n_ref)
    Y = np.median(Y_train[idx], axis=1)
    if grid is not None:
        Y = grid.clip(Y)
    update, gains = np.zeros_like(Y), np.ones_like(Y)
    attract = np.empty_like(Y)
    for _ in range(int(opts["n_iter"])):
        attraction(P.indptr, P.indices, P.data, Y, Y_train, opts["exaggeration"], attract)
        phi, z = _potentials(Y, Y_train, grid)
        grad = attract - (Y * phi[:, :1] - phi[:, 1 : d + 1]) / z[:, None]
        norm = np.linalg.norm(grad, axis=1, keepdims=True)
        grad *= np.minimum(1.0, opts["max_grad_norm"] / np.maximum(norm, 1e-12))
        gains_step(Y, grad, update, gains, opts["momentum"], opts["learning_rate"], 0.01, 0.0)
        if grid is not None:
            Y = grid.clip(Y)
    return Y


def reference_grid(
    Y_train, gradient="auto", n_interpolation_points=3, min_num_intervals=None, ints_in_interval=1.0
):
    """The interpolation grid of the training embedding that the new points' repulsion is
    read from, or None where it is exact (``gradient="exact"``, or ``"auto"`` up to
    ``EXACT_REFERENCE_MAX`` training points). Built once for every block placed."""
    n_ref, d = Y_train.shape
    if gradient == "exact" or (gradient == "auto" and n_ref <= EXACT_REFERENCE_MAX):
        return None
    interp = Interpolation(
        n_interpolation_points, min_num_intervals or (10 if d == 3 else 50), ints_in_interval
    )
    return InterpolationGrid(np.ascontiguousarray(Y_train, dtype=np.float64), interp)


def tsne_transform(
    X_train,
    Y_train,
    X_new,
    *,
    metric: str = "euclidean",
    gradient="auto",
    n_interpolation_points=3,
    min_num_intervals=None,
    ints_in_interval=1.0,
    **options,
):
    """Positions of the rows of ``X_new`` in the embedding ``Y_train`` of ``X_train``
    (NumPy in -> NumPy out, dask in -> dask out, one task per chunk)."""
    opts = {**TRANSFORM_DEFAULTS, **options}
    Y_train = np.ascontiguousarray(Y_train, dtype=np.float64)
    X_train = np.asarray(X_train.compute() if is_dask(X_train) else X_train, dtype=np.float64)
    d = Y_train.shape[1]
    grid = reference_grid(
        Y_train, gradient, n_interpolation_points, min_num_intervals, ints_in_interval
    )
    if not is_dask(X_new):
        return place_rows(X_new, X_train, Y_train, grid, metric, opts).astype(X_new.dtype)
    X_new = X_new if X_new.numblocks[1] == 1 else X_new.rechunk({1: -1})

    def block(x, block_info=None):
        refuse_nonfinite_block(x, "t-SNE transform", block_info)
        return place_rows(x, X_train, Y_train, grid, metric, opts).astype(x.dtype)

    return X_new.map_blocks(block, chunks=(X_new.chunks[0], (d,)), dtype=X_new.dtype)


SNE_BLOCK_PAIRS = 4_000_000  # (new, training) pairs held at once: 32 MB of float64 per array


def sne_place_rows(X_new, X_train, Y_train, metric: str, opts: dict, key=None):
    """New positions of one block of rows in an SNE embedding (Hinton & Roweis 2002): for a
    new point x, p_{j|x} at ``opts["perplexity"]`` over its nearest training points and
    q_{j|x} = exp(-|y_x - y_j|^2) / sum_l exp(-|y_x - y_l|^2) over all of them (fixed);
    gradient descent on KL(P_x || Q_x), whose gradient is 2 sum_j (p_{j|x} - q_{j|x})
    (y_x - y_j), with momentum and gains, from the median of the neighbours' positions. New
    points never interact: the result does not depend on the blocks."""
    X_new = np.asarray(X_new, dtype=np.float64)
    Y_train = np.ascontiguousarray(Y_train, dtype=np.float64)
    n_ref, d = Y_train.shape
    out = np.empty((X_new.shape[0], d))
    step = max(1, SNE_BLOCK_PAIRS // max(1, n_ref))
    for lo in range(0, X_new.shape[0], step):
        out[lo : lo + step] = _sne_place(X_new[lo : lo + step], X_train, Y_train, metric, opts, key)
    return out


def _sne_place(X_new, X_train, Y_train, metric, opts, key):
    n_ref, d = Y_train.shape
    k = int(min(n_ref, max(3 * opts["perplexity"] + 1, 10)))
    idx, dist = reference_topk(X_new, X_train, k, metric=metric, key=key)
    cond, _ = conditional_rows(dist, min(opts["perplexity"], (k - 1) / 3))
    P = np.zeros((X_new.shape[0], n_ref))
    np.put_along_axis(P, idx, cond, axis=1)
    Y = np.median(Y_train[idx], axis=1)
    update, gains = np.zeros_like(Y), np.ones_like(Y)
    for _ in range(int(opts["n_iter"])):
        diff = Y[:, None, :] - Y_train[None, :, :]
        logits = -(diff**2).sum(axis=2)
        logits -= logits.max(axis=1, keepdims=True)
        Q = np.exp(logits)
        Q /= Q.sum(axis=1, keepdims=True)
        grad = 2.0 * np.einsum("ij,ijk->ik", P - Q, diff)
        norm = np.linalg.norm(grad, axis=1, keepdims=True)
        grad *= np.minimum(1.0, opts["max_grad_norm"] / np.maximum(norm, 1e-12))
        gains_step(Y, grad, update, gains, opts["momentum"], opts["learning_rate"], 0.01, 0.0)
    return Y
