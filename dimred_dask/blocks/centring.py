"""Classical MDS's B = -1/2 J M J of a symmetric matrix in memory (numba, threads): two passes
over M, no n x n temporary besides B itself (NumPy's expression makes three)."""

from __future__ import annotations

import numpy as np
from numba import njit, prange

__all__ = ["double_centred"]


@njit(cache=True, nogil=True, parallel=True)
def _row_means(M, square, r):
    n, m = M.shape
    for i in prange(n):
        acc = 0.0
        for j in range(m):
            v = np.float64(M[i, j])
            acc += v * v if square else v
        r[i] = acc / m


@njit(cache=True, nogil=True, parallel=True)
def _centre(M, square, r, g, B):
    n, m = M.shape
    for i in prange(n):
        ri = r[i] - g
        for j in range(m):
            v = np.float64(M[i, j])
            B[i, j] = -0.5 * ((v * v if square else v) - ri - r[j])


def double_centred(M, *, square: bool, out=None):
    """(B, r, g) for symmetric ``M`` (n x n, float32 or float64): with S = M * M when
    ``square`` else M, r the row means of S and g their mean (float64),
    B = -1/2 (S - r 1^T - 1 r^T + g) in float64. ``out``: an n x n float64 C-contiguous array
    to write B into (it may be M itself)."""
    M = np.ascontiguousarray(M)
    n = M.shape[0]
    r = np.empty(n, np.float64)
    _row_means(M, bool(square), r)
    g = float(r.mean()) if n else 0.0
    B = np.empty((n, n), np.float64) if out is None else out
    _centre(M, bool(square), r, g, B)
    return B, r, g


def _warm_up():
    """Compile (or load from numba's cache) on import, in the importing thread."""
    for dtype in (np.float32, np.float64):
        for square in (True, False):
            double_centred(np.zeros((1, 1), dtype), square=square)


_warm_up()
