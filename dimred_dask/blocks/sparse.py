"""Kernels on in-memory sparse row blocks (``scipy.sparse`` CSR): column statistics, the
products of randomized PCA, and row norms, all without forming a dense copy of the block.

Sparse data are centred implicitly: the centred matrix Xc = X - 1 mu^T of a block is never
formed (it would be dense). Its statistics and products come from X and mu:

    sum of squares of column j   sum over the stored x_ij of (x_ij - mu_j)^2
                                 + (rows without a stored value in j) * mu_j^2   (exact)
    scatter                      Xc^T Xc = X^T X - n mu mu^T  (diagonal: the exact sums above)
    products                     Xc Q = X Q - 1 (mu^T Q),  Xc^T Y = X^T Y - mu (1^T Y)

Statistics are made in float64 (the block's stored values are converted, a copy of ``data``
only); the products of randomized PCA in the block's dtype, summed in float64, as for dense
blocks. NaN and inf among the stored values are found here, by the rows that hold them, so the
first pass over a dask array is also its finiteness check, as for dense blocks.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from .sparse_kernels import centred_gram_apply
from .stats import MAX_LISTED_ROWS, BlockStats

__all__ = [
    "as_csr",
    "csr64",
    "nonfinite_rows",
    "row_of",
    "sparse_block_stats",
    "sparse_gram_products",
    "sparse_matmul",
    "row_sqnorms",
    "dense_dot",
    "toarray_rows",
]


def as_csr(block) -> sp.csr_matrix:
    """``block`` as a ``csr_matrix`` (no copy when it is one already)."""
    if isinstance(block, sp.csr_matrix):
        return block
    return sp.csr_matrix(block.tocsr() if hasattr(block, "tocsr") else block)


def csr64(block) -> sp.csr_matrix:
    """The block in float64, sharing its index arrays (only ``data`` is copied)."""
    return _in(block if sp.issparse(block) else sp.csr_matrix(block), np.float64)


def row_of(x: sp.csr_matrix, positions: np.ndarray) -> np.ndarray:
    """The row of each position in ``x.data``."""
    return np.searchsorted(x.indptr, positions, side="right") - 1


def nonfinite_rows(block, offset: int = 0):
    """(values, NaN among them, first MAX_LISTED_ROWS global rows, rows in all) of the NaN /
    inf among the stored values of ``block``, or None when they are all finite."""
    x = as_csr(block)
    bad = ~np.isfinite(x.data)
    if not bad.any():
        return None
    at = np.flatnonzero(bad)
    rows = np.unique(row_of(x, at))
    return (
        int(at.size),
        int(np.isnan(x.data[at]).sum()),
        tuple(offset + int(r) for r in rows[:MAX_LISTED_ROWS]),
        int(rows.size),
    )


def _column_moments(x: sp.csr_matrix):
    """(mean, exact centred sum of squares) of each column of the float64 block ``x``."""
    n, d = x.shape
    s1 = np.bincount(x.indices, weights=x.data, minlength=d)
    mean = s1 / n
    dev = x.data - mean[x.indices]
    stored = np.bincount(x.indices, minlength=d)
    return mean, np.bincount(x.indices, weights=dev * dev, minlength=d) + (n - stored) * mean**2


def sparse_block_stats(block, offset: int = 0, *, gram: bool = True) -> BlockStats:
    """`blocks.stats.block_stats` of a sparse row block: count, column means, the centred
    scatter (``gram``; X^T X - n mu mu^T from one sparse product, with the exact diagonal) and
    the exact centred sums of squares, in float64. A block with NaN / inf among its stored
    values reports where they are instead; one whose values overflow float64 once squared
    reports its largest."""
    x = as_csr(block)
    n, d = x.shape
    if n == 0:
        return BlockStats(0, np.zeros(d), np.zeros((d, d)) if gram else None, np.zeros(d))
    bad = nonfinite_rows(x, offset)
    if bad is not None:
        return BlockStats(n, np.zeros(d), None, np.zeros(d), bad[0], bad[1], bad[2], bad[3])
    x = csr64(x)
    with np.errstate(over="ignore", invalid="ignore"):
        mean, sumsq = _column_moments(x)
        m2 = None
        if gram:
            m2 = (x.T @ x).toarray()
            m2 -= n * np.outer(mean, mean)
            m2[np.diag_indices(d)] = sumsq
    if not (np.isfinite(sumsq).all() and (m2 is None or np.isfinite(m2).all())):
        return _overflowed(x, offset)
    return BlockStats(n, mean, m2, sumsq)


def _overflowed(x: sp.csr_matrix, offset: int) -> BlockStats:
    big = np.zeros(x.shape[0])
    np.maximum.at(big, row_of(x, np.arange(x.nnz)), np.abs(x.data))
    rows = np.nonzero(big >= big.max() / 1e3)[0]
    return BlockStats(
        x.shape[0],
        np.zeros(x.shape[1]),
        None,
        np.zeros(x.shape[1]),
        bad_rows=tuple(offset + int(r) for r in rows[:MAX_LISTED_ROWS]),
        n_bad_rows=int(rows.size),
        overflow=float(big.max()),
    )


def sparse_gram_products(block, mean: np.ndarray, q: np.ndarray):
    """For one sparse row block: (Xb - 1 mu^T)^T (Xb - 1 mu^T) q, as
    ``linalg.pca_solvers._block_products`` gives for a dense block, from Xb q and Xb^T y, never
    centring Xb (``sparse_kernels.centred_gram_apply``). As there, the products run in the
    block's dtype (float32 stays float32: half the bytes to stream) and are centred in
    float64; other dtypes run in float64."""
    x = as_csr(block)
    return centred_gram_apply(_in(x, np.float32 if x.dtype == np.float32 else np.float64), mean, q)


def sparse_matmul(block, w: np.ndarray) -> np.ndarray:
    """X w for a sparse row block, multiplied in the block's float dtype (float32 stays
    float32; anything else float64), returned in float64."""
    x = as_csr(block)
    work = np.float32 if x.dtype == np.float32 else np.float64
    return np.asarray(_in(x, work) @ np.asarray(w, dtype=work), dtype=np.float64)


def row_sqnorms(x) -> np.ndarray:
    """Squared Euclidean norm of each row, float64 (sparse or dense)."""
    if sp.issparse(x):
        x = as_csr(x)
        return np.bincount(
            row_of(x, np.arange(x.nnz)),
            weights=np.square(x.data, dtype=np.float64),
            minlength=x.shape[0],
        )
    return np.einsum("ij,ij->i", x, x, dtype=np.float64)


def _in(x, dtype):
    """``x`` (sparse: as CSR) with its values in ``dtype`` (a copy of the values if needed)."""
    if not sp.issparse(x):
        return np.asarray(x, dtype=dtype)
    x = as_csr(x)
    if x.dtype == dtype:
        return x
    return sp.csr_matrix((x.data.astype(dtype), x.indices, x.indptr), shape=x.shape)


def dense_dot(a, b, dtype) -> np.ndarray:
    """a b^T computed in ``dtype`` as a dense array, for any mix of sparse and dense ``a``
    and ``b``."""
    out = _in(a, dtype) @ _in(b, dtype).T
    return out.toarray() if sp.issparse(out) else np.asarray(out)


def toarray_rows(x, rows: int = 4096):
    """Yield (start, dense block) over the rows of ``x`` (sparse or dense), ``rows`` at a
    time: a dense copy of one block at a time, never of the whole matrix."""
    for start in range(0, x.shape[0], rows):
        blk = x[start : start + rows]
        yield start, (blk.toarray() if sp.issparse(blk) else np.asarray(blk))
