"""Classical MDS's B = -1/2 J M J of a symmetric matrix in memory (numba, threads): two passes
over M, no n x n temporary besides B itself (NumPy's expression makes three).

`centred_block_product`: a row block's rows of B times Q without the block's rows of B ever
held: S Q made a run of rows of S at a time in a buffer of a few MiB (the square, then
BLAS), then centred with two p-vectors, where the lazy expression of B makes four
block-sized temporaries before its product.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

__all__ = ["double_centred", "centred_block_product", "sample_block"]

RUN_BYTES = 4 * 2**20  # a run of rows of S: small enough to stay in cache while it is used


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


def centred_block_product(blocks, r_rows, c, w, Qs, *, square: bool):
    """Rows of B Q for one row block of a symmetric M: B = -1/2 (S - r 1^T - 1 r^T + g),
    S = M * M when ``square`` else M, the product summed over the column blocks.

    B is centred after the product, not before it: B Q = -1/2 (S Q - r c^T - 1 w^T) with
    c = 1^T Q and w = Q^T r - g c, which the caller computes once for all blocks. Only S is
    made, a run of rows at a time, each run's product by BLAS.

    Parameters
    ----------
    blocks : list of ndarray
        The row block's blocks of M, one per column block (each m x n_j).
    r_rows : ndarray of shape (m,)
        The row means of S at the block's rows.
    c : ndarray of shape (p,)
        The column sums of Q.
    w : ndarray of shape (p,)
        Q^T r - g c, r the row means of S and g their mean.
    Qs : list of ndarray
        Q's rows at each column block (n_j x p).
    square : bool
        Whether S is M squared.

    Returns
    -------
    ndarray of float64, shape (m, p)
        The block's rows of B Q (the lazy B's product to rounding: the centring terms are
        subtracted from S Q, of the size of S's entries times Q's, not from each entry).
    """
    m = blocks[0].shape[0]
    out = np.zeros((m, Qs[0].shape[1]))
    for M, Q in zip(blocks, Qs):
        M = np.asarray(M)
        Q = np.asarray(Q, np.float64)
        step = max(1, RUN_BYTES // (8 * max(M.shape[1], 1)))
        buf = np.empty((min(step, m), M.shape[1]))
        for a in range(0, m, step):
            b = min(a + step, m)
            if M.dtype == np.float64:
                t = np.multiply(M[a:b], M[a:b], out=buf[: b - a]) if square else M[a:b]
            else:  # float32 rows squared and multiplied in float64
                t = buf[: b - a]
                t[:] = M[a:b]
                if square:
                    np.multiply(t, t, out=t)
            out[a:b] += t @ Q
    out -= np.asarray(r_rows, np.float64)[:, None] * np.asarray(c, np.float64)[None, :]
    out -= np.asarray(w, np.float64)[None, :]
    out *= -0.5
    return out


def sample_block(block, rows: np.ndarray, cols: np.ndarray) -> np.ndarray:
    """block[rows][:, cols] in one copy: a block's part of MDS's stress sample of D."""
    return np.asarray(block)[np.ix_(rows, cols)]


def _warm_up():
    """Compile (or load from numba's cache) on import, in the importing thread."""
    for dtype in (np.float32, np.float64):
        for square in (True, False):
            double_centred(np.zeros((1, 1), dtype), square=square)


_warm_up()
