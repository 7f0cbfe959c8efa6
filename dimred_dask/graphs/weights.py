"""LLE reconstruction weights over the kNN graph, blockwise (shared by LLE, its out-of-sample
transform and landmark MVU's reconstruction of every point from the landmarks)."""

from __future__ import annotations

import numbers

import numpy as np

from .._compute import compute
from .._validation import is_dask
from ..blocks.neighbors import reconstruction_weights_block
from ..errors import InputError
from .knn import KNNGraph

__all__ = ["reconstruction_weights", "check_reg"]


def check_reg(reg) -> float:
    """Check that the regularisation ``reg`` is a positive finite number; return it.

    Parameters
    ----------
    reg : float
        The regularisation (a bool is refused).

    Returns
    -------
    float
        ``reg``.

    Raises
    ------
    InputError
        ``reg`` is not a real number, not finite, or not > 0.
    """
    if (
        not isinstance(reg, numbers.Real)
        or isinstance(reg, bool)
        or not np.isfinite(reg)
        or reg <= 0
    ):
        raise InputError(
            f"The regularisation reg must be a positive finite number; found {reg!r}.",
            "pass reg=1e-3 (the default).",
        )
    return float(reg)


def _chunk_weights(x, rows_x, idx, reg):
    """Weights of one row chunk: ``rows_x`` holds the rows of X listed in ``idx`` (sorted
    unique ids ``uniq`` mapped by searchsorted)."""
    uniq, pos = np.unique(idx, return_inverse=True)
    return reconstruction_weights_block(x, rows_x[pos.reshape(idx.shape)], reg)


def reconstruction_weights(X, graph: KNNGraph, reg: float = 1e-3, *, Y=None) -> np.ndarray:
    """LLE's reconstruction weights of each row from its kNN graph neighbours.

    Row i holds the weights, summing to 1, that best reconstruct x_i from its neighbours
    ``graph.indices[i]`` (Roweis & Saul 2000), the local Gram matrix regularised by ``reg``
    times its trace. NumPy: at once, in this process. Dask (``X`` or ``Y``): one task per
    row chunk of ``X``, each gathering only the neighbour rows it needs.

    Parameters
    ----------
    X : array-like or dask array of shape (n, n_features)
        The rows to reconstruct.
    graph : KNNGraph
        Their neighbours: n rows of k indices into ``Y``, none -1.
    reg : float, default 1e-3
        The regularisation, > 0.
    Y : array-like, dask array or None, default None
        The rows the neighbours index (new points against training rows); None: ``X``.

    Returns
    -------
    numpy.ndarray of float64, shape (n, k)
        The weights.

    Raises
    ------
    InputError
        ``reg`` is not a positive finite number; ``graph`` has not one row per row of ``X``,
        or has rows with fewer than k neighbours.
    """
    reg = check_reg(reg)
    Y = X if Y is None else Y
    idx = graph.indices
    if idx.shape[0] != X.shape[0]:
        raise InputError(
            f"The graph has {idx.shape[0]} rows; the data have {X.shape[0]}.",
            "build the graph from these rows.",
        )
    if (idx < 0).any():
        raise InputError(
            "The graph has rows with fewer than k neighbours (index -1).",
            "rebuild it with backend='exact' or 'nndescent'.",
        )
    if not is_dask(X) and not is_dask(Y):
        return reconstruction_weights_block(np.asarray(X), np.asarray(Y)[idx], reg)
    import dask.array as da
    from dask import delayed

    Xd = X if is_dask(X) else da.from_array(np.asarray(X), chunks=(max(1, X.shape[0] // 8), -1))
    Xd = Xd if Xd.numblocks[1] == 1 else Xd.rechunk({1: -1})
    starts = np.concatenate([[0], np.cumsum(Xd.chunks[0])]).astype(int)
    task = delayed(_chunk_weights, pure=True)
    parts = []
    for i, xi in enumerate(Xd.to_delayed().ravel()):
        sub = idx[starts[i] : starts[i + 1]]
        uniq = np.unique(sub)
        rows = Y[uniq] if is_dask(Y) else np.asarray(Y)[uniq]
        parts.append(task(xi, rows, sub, reg))
    return np.concatenate(compute(*parts, stage="reconstruction weights"))
