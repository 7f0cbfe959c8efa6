"""numba kernel of randomized PCA's product on one sparse row block: Xc^T Xc Q from the CSR
rows of X, without a centred copy.

Both products of a pass (Y = X Q - 1 m^T with m = Q^T mu, then X^T Y) gather or scatter one
row of Q (or of the result) of ``w`` values for every stored value of X, at random genes: with
Q of d x w floats larger than a core's L2 cache, each of those row accesses goes to the slower
shared cache. The genes are therefore cut into ranges whose slice of Q (and of the result) fits
in L2, and each product sweeps the block's rows once per range, reading each row's stored values
of that range only (CSR rows have sorted column indices, so a row's part in a range is one
contiguous slice, found once per block). Y is streamed in row order, which the hardware
prefetches (measurements in bench/HISTORY.md, sparse PCA).

Sums: each row's X Q is accumulated in the block's dtype (as SciPy's product does), centred in
float64; X^T Y is accumulated in the block's dtype over the block's rows (the caller sums blocks
in float64); 1^T Y is summed in float64. Results do not depend on the range width.
"""

from __future__ import annotations

import threading

import numpy as np
from numba import njit

__all__ = ["centred_gram_apply", "gene_ranges"]

L2_BYTES = 1 << 20  # the slice of Q one range may take (Q's and the result's share L2)
# Row blocks call the kernel from several threads at once (a thread pool, dask's threaded
# scheduler). numba's first compilation in a process is not safe against a concurrent one
# (github.com/numba/numba/issues/2517); the first call of each signature runs alone.
_FIRST_CALL = threading.Lock()
_COMPILED: set = set()


def gene_ranges(d: int, w: int, itemsize: int) -> np.ndarray:
    """Range bounds over ``d`` genes (0, ..., d) such that one range's rows of a d x ``w``
    array of ``itemsize``-byte values take at most ``L2_BYTES``."""
    per = max(1, L2_BYTES // max(1, w * itemsize))
    return np.unique(np.r_[np.arange(0, d, per), d]).astype(np.int64)


@njit(cache=True, nogil=True)
def _row_splits(indices, indptr, bounds):
    """s[i, r]: the position in ``indices`` where row i's part in range r starts (s[i, R] its
    end); each row's indices must be sorted."""
    n = indptr.shape[0] - 1
    R = bounds.shape[0] - 1
    s = np.empty((n, R + 1), np.int64)
    for i in range(n):
        a, b = indptr[i], indptr[i + 1]
        s[i, 0] = a
        for r in range(1, R):
            s[i, r] = a + np.searchsorted(indices[a:b], bounds[r])
        s[i, R] = b
    return s


@njit(cache=True, nogil=True)
def _gram_ranges(data, indices, s, q, m):
    n, R = s.shape[0], s.shape[1] - 1
    d, w = q.shape
    acc = np.zeros((n, w), q.dtype)  # X Q in the block's dtype, then Y = X Q - 1 m^T
    for r in range(R):
        for i in range(n):
            for p in range(s[i, r], s[i, r + 1]):
                v = data[p]
                j = indices[p]
                for c in range(w):
                    acc[i, c] += v * q[j, c]
    ysum = np.zeros(w)
    for i in range(n):
        for c in range(w):
            yc = np.float64(acc[i, c]) - m[c]
            ysum[c] += yc
            acc[i, c] = yc
    out = np.zeros((d, w), q.dtype)
    for r in range(R):
        for i in range(n):
            for p in range(s[i, r], s[i, r + 1]):
                v = data[p]
                j = indices[p]
                for c in range(w):
                    out[j, c] += v * acc[i, c]
    return out, ysum


def centred_gram_apply(x, mean: np.ndarray, q: np.ndarray) -> np.ndarray:
    """(X - 1 mu^T)^T (X - 1 mu^T) q for a CSR block ``x`` whose values are float32 or float64
    (the products run in that dtype), in float64."""
    if not x.has_sorted_indices:
        x = x.sorted_indices()
    work = x.dtype
    qw = np.ascontiguousarray(q, dtype=work)
    m = np.asarray(mean, dtype=np.float64) @ np.asarray(q, dtype=np.float64)
    bounds = gene_ranges(x.shape[1], qw.shape[1], qw.itemsize)
    key = (x.data.dtype.str, x.indices.dtype.str, x.indptr.dtype.str)
    if key in _COMPILED:
        out, ysum = _apply(x, bounds, qw, m)
    else:
        with _FIRST_CALL:
            out, ysum = _apply(x, bounds, qw, m)
            _COMPILED.add(key)
    return out.astype(np.float64) - np.outer(mean, ysum)


def _apply(x, bounds, qw, m):
    return _gram_ranges(x.data, x.indices, _row_splits(x.indices, x.indptr, bounds), qw, m)


def _warm_up():
    """Compile (or load from numba's cache) the common signatures on import, in the importing
    thread: a process's first numba compilation then never runs in a worker thread."""
    for dtype in (np.float32, np.float64):
        data, indices, indptr = np.ones(1, dtype), np.zeros(1, np.int32), np.array([0, 1], np.int32)
        q = np.ones((1, 1), dtype)
        centred_gram_apply(_CSR((data, indices, indptr), shape=(1, 1)), np.zeros(1), q)


from scipy.sparse import csr_matrix as _CSR  # noqa: E402

_warm_up()
