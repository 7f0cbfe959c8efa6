"""Lazy n x m distance and kernel matrices between chunked arrays, and double centering.

``pairwise_kernels(X)`` / ``pairwise_distances(X)`` with dask input return a dask array whose
block (i, j) is ``blocks.kernels`` applied to row chunk i of X and row chunk j of Y. For X
against itself only the blocks with i <= j are computed; block (j, i) is the transpose of
block (i, j) (the matrix is symmetric by construction, exactly, not to rounding). With NumPy
input the result is a NumPy array.

``double_center(M)`` returns H M H (H = I - 11^T/n) without forming H: the row means, the
column means and the grand mean are dask reductions, and the centred matrix is the lazy
expression M - r 1^T - 1 c^T + g. ``-0.5 * double_center(D**2)`` is classical MDS's B.
`CentredOperator` is that B for the iterative eigensolvers: each product B Q is one task per
row block of M that multiplies its rows of S by Q a run at a time and centres the product
(`blocks.centring.centred_block_product`), never holding a block of B.

Sparse X or Y (``scipy.sparse``, or dask arrays of CSR row blocks) give the same dense matrix
for the kernels and distances made of inner products (``blocks.kernels.SPARSE_KERNELS`` /
``SPARSE_METRICS``: euclidean, sqeuclidean and cosine distances; linear, polynomial, gaussian,
sigmoid and cosine kernels), each block from sparse products of two row blocks; the others
refuse sparse input (`InputTypeError`) before anything is computed.
"""

from __future__ import annotations

import numpy as np

from .._validation import is_dask, is_sparse_input
from ..blocks.centring import centred_block_product
from ..blocks.kernels import (
    SPARSE_KERNELS,
    SPARSE_METRICS,
    block_dtype,
    distance_block,
    kernel_block,
)
from ..errors import InputTypeError
from .params import check_kernel, check_metric

__all__ = [
    "pairwise_kernels",
    "pairwise_distances",
    "double_center",
    "center_stats",
    "blockwise",
    "CentredOperator",
]


def _full_columns(X):
    return X if X.numblocks[1] == 1 else X.rechunk({1: -1})


def _zero_diagonal(block):
    block = np.array(block, copy=True)
    np.fill_diagonal(block, 0)
    return block


def blockwise(
    fn, X, Y=None, *, dtype=None, square_chunks: int | None = None, zero_diagonal: bool = False
):
    """The lazy matrix [fn(X_i, Y_j)]_ij over row chunks; symmetric-by-mirroring when Y is None.

    One delayed task per block. Against itself (``Y`` None) only the blocks with i <= j are
    computed; block (j, i) is the transpose of block (i, j), so the matrix is exactly
    symmetric. ``X`` and ``Y`` are rechunked to one chunk of columns.

    Parameters
    ----------
    fn : callable
        ``fn(X_i, Y_j)`` returns the block between two row chunks, as computed (NumPy, or
        sparse for sparse chunks), of shape (rows of X_i, rows of Y_j).
    X : dask array of shape (n, d)
        The rows.
    Y : dask array of shape (m, d) or None, default None
        The other rows; None: ``X`` against itself.
    dtype : dtype or None, default None
        The result's declared dtype; it should be the dtype ``fn`` returns. None: the dtype
        ``fn`` returns for empty row blocks of ``X``'s and ``Y``'s dtypes, or, when ``fn``
        fails on those, float32 for float32 ``X`` and float64 for any other (what the
        kernels and distances of ``blocks.kernels`` return).
    square_chunks : int or None, default None
        Rechunk ``X`` (and ``Y``) to that many rows per chunk first, so the blocks of the
        result are square (the layout of a run's on-disk matrix). None: ``X``'s chunks.
    zero_diagonal : bool, default False
        ``Y`` None only: set the diagonal exactly to 0 (a distance matrix; rounding leaves
        small values there).

    Returns
    -------
    dask array of shape (n, m)
        The lazy matrix (n x n when ``Y`` is None), chunked by the row chunks of ``X`` and
        ``Y``.
    """
    import dask.array as da
    from dask import delayed

    dtype = np.dtype(dtype) if dtype is not None else _probe_dtype(fn, X, Y)
    X = _full_columns(X)
    if square_chunks:
        X = X.rechunk({0: square_chunks})
    sym = Y is None
    if not sym:
        Y = _full_columns(Y)
        if square_chunks:
            Y = Y.rechunk({0: square_chunks})
    xs = X.to_delayed().ravel()
    ys = xs if sym else Y.to_delayed().ravel()
    rx, ry = X.chunks[0], (X.chunks[0] if sym else Y.chunks[0])
    f = delayed(fn, pure=True)
    tr = delayed(np.transpose, pure=True)
    rows = []
    for i, xi in enumerate(xs):
        row = []
        for j, yj in enumerate(ys):
            if sym and j < i:
                blk = tr(rows[j][i])  # the mirrored block: delayed, reused, never recomputed
            else:
                blk = f(xi, yj)
                if sym and i == j and zero_diagonal:
                    blk = delayed(_zero_diagonal, pure=True)(blk)
            row.append(blk)
        rows.append(row)
    arrays = [
        [da.from_delayed(rows[i][j], shape=(rx[i], ry[j]), dtype=dtype) for j in range(len(ys))]
        for i in range(len(xs))
    ]
    return da.block(arrays)


def _probe_dtype(fn, X, Y) -> np.dtype:
    """The dtype ``fn`` returns for empty row blocks (``block_dtype`` of X's if it fails)."""
    d = X.shape[1]
    a = np.empty((0, d), X.dtype)
    b = a if Y is None else np.empty((0, d), Y.dtype)
    try:
        return np.asarray(fn(a, b)).dtype
    except Exception:  # a block function that cannot take empty blocks
        return block_dtype(X.dtype)


def pairwise_kernels(
    X,
    Y=None,
    *,
    kernel: str = "gaussian",
    gamma=None,
    width=None,
    degree: int = 3,
    coef0: float = 1.0,
    square_chunks: int | None = None,
):
    """Kernel matrix K_ij = k(x_i, y_j); lazy for dask input (see the module docstring).

    With NumPy (or in-memory sparse) ``X`` and ``Y`` the matrix is computed here. When either
    is a dask array the result is a lazy `blockwise` matrix (an in-memory ``Y`` is chunked
    like ``X``'s first row chunk; an in-memory ``X`` gets dask's automatic chunks). With
    ``Y`` None the matrix is exactly symmetric (the upper triangle mirrored). The blocks are
    float32 for float32 input, else float64.

    Parameters
    ----------
    X : array-like, dask array or sparse matrix of shape (n, n_features)
        The rows.
    Y : array-like, dask array, sparse matrix of shape (m, n_features) or None, default None
        The other rows; None: ``X`` against itself.
    kernel : str, default "gaussian"
        One of ``KERNELS`` (linear, polynomial, gaussian, laplacian, sigmoid, cosine) or the
        aliases ``rbf`` and ``poly``; sparse rows take those of ``SPARSE_KERNELS`` (all but
        laplacian).
    gamma : float or None, default None
        The kernels' scale (gaussian exp(-gamma ||x - y||²), laplacian exp(-gamma ||x -
        y||_1), polynomial and sigmoid on gamma xᵀy + coef0); None: 1 / n_features, or
        1 / width² when ``width`` is given.
    width : float or None, default None
        Gaussian only, instead of ``gamma``: c in exp(-||x - y||² / c²).
    degree : int, default 3
        Polynomial only: the degree.
    coef0 : float, default 1.0
        Polynomial and sigmoid only: the constant term.
    square_chunks : int or None, default None
        Dask only: rows per chunk of both operands, so the blocks are square.

    Returns
    -------
    ndarray or dask array of shape (n, m)
        K (n x n when ``Y`` is None), float32 for float32 ``X``, else float64; a dask
        array when either input is one.

    Raises
    ------
    InputError
        An unknown kernel or a parameter out of range (`pairwise.check_kernel`).
    InputTypeError
        Sparse input with a kernel not in ``SPARSE_KERNELS``.
    """
    params = check_kernel(kernel, X.shape[1], gamma=gamma, width=width, degree=degree, coef0=coef0)
    _check_sparse(X, Y, params["kernel"], SPARSE_KERNELS, "kernel")
    return _pairwise(kernel_block, params, X, Y, square_chunks, zero_diagonal=False)


def pairwise_distances(
    X, Y=None, *, metric: str = "euclidean", p: float = 2.0, square_chunks: int | None = None
):
    """Distance matrix D_ij = d(x_i, y_j); lazy for dask input (see the module docstring).

    Computed as `pairwise_kernels` computes its matrix: here for in-memory input, a lazy
    `blockwise` matrix when either input is a dask array. With ``Y`` None the matrix is
    exactly symmetric with an exact zero diagonal. The blocks are float32 for float32 input,
    else float64.

    Parameters
    ----------
    X : array-like, dask array or sparse matrix of shape (n, n_features)
        The rows.
    Y : array-like, dask array, sparse matrix of shape (m, n_features) or None, default None
        The other rows; None: ``X`` against itself.
    metric : str, default "euclidean"
        One of ``METRICS`` (euclidean, sqeuclidean, cosine, manhattan, chebyshev, minkowski);
        sparse rows take those of ``SPARSE_METRICS`` (euclidean, sqeuclidean, cosine).
    p : float, default 2.0
        Minkowski only: the order, p >= 1.
    square_chunks : int or None, default None
        Dask only: rows per chunk of both operands, so the blocks are square.

    Returns
    -------
    ndarray or dask array of shape (n, m)
        D (n x n when ``Y`` is None), float32 for float32 ``X``, else float64; a dask
        array when either input is one.

    Raises
    ------
    InputError
        An unknown metric or a bad ``p`` (`pairwise.check_metric`).
    InputTypeError
        Sparse input with a metric not in ``SPARSE_METRICS``.
    """
    params = check_metric(metric, p)
    _check_sparse(X, Y, params["metric"], SPARSE_METRICS, "metric")
    return _pairwise(distance_block, params, X, Y, square_chunks, zero_diagonal=True)


def _check_sparse(X, Y, name: str, allowed, what: str) -> None:
    if name in allowed or not (is_sparse_input(X) or (Y is not None and is_sparse_input(Y))):
        return
    raise InputTypeError(
        f"The {name} {what} is not made of inner products, so it needs dense rows; found "
        f"sparse input. Sparse rows take the {what}s {', '.join(allowed)}.",
        f"pass one of those {what}s, or reduce with PCA first (--method pca+<method>) and use "
        f"the {name} {what} on the dense embedding.",
    )


def _block(a):
    """A row block as the block kernels take it: NumPy, or sparse as it is."""
    return a if hasattr(a, "tocsr") else np.asarray(a)


class _Bound:
    """A picklable block function with its parameters bound (dask hashes it by value)."""

    def __init__(self, fn, params: dict):
        self.fn, self.params = fn, dict(params)

    def __call__(self, a, b):
        return self.fn(_block(a), _block(b), **self.params)

    def __dask_tokenize__(self):
        return (self.fn.__module__, self.fn.__name__, sorted(self.params.items()))


def _pairwise(fn, params, X, Y, square_chunks, zero_diagonal):
    bound = _Bound(fn, params)
    if is_dask(X) or is_dask(Y):
        X = X if is_dask(X) else _from_memory(X, None)
        if Y is not None and not is_dask(Y):
            Y = _from_memory(Y, X.chunks[0][0])
        return blockwise(
            bound,
            X,
            Y,
            dtype=block_dtype(X.dtype),  # what the blocks are made in (``_work`` of X's rows)
            square_chunks=square_chunks,
            zero_diagonal=zero_diagonal,
        )
    X = _block(X)
    out = bound(X, X if Y is None else _block(Y))
    if Y is None:  # the same exact symmetry as the blockwise path
        out = np.triu(out) + np.triu(out, 1).T
        if zero_diagonal:
            np.fill_diagonal(out, 0)
    return out


def _from_memory(X, rows):
    """An in-memory X as a dask array of row chunks (CSR chunks for sparse X)."""
    import dask.array as da

    if is_sparse_input(X):
        import scipy.sparse as sp

        X = sp.csr_matrix(X)
        return da.from_array(
            X,
            chunks=(rows or "auto", X.shape[1]),
            asarray=False,
            meta=sp.csr_matrix((0, X.shape[1]), dtype=X.dtype),
        )
    return (
        da.from_array(np.asarray(X))
        if rows is None
        else da.from_array(np.asarray(X), chunks=(rows, -1))
    )


def center_stats(M):
    """Row means and grand mean of a square matrix, float64; lazy for dask input.

    For a symmetric M the column means equal the row means, which is what the kernels and
    distances here produce.

    Parameters
    ----------
    M : ndarray or dask array of shape (n, n)
        The matrix.

    Returns
    -------
    row_means : ndarray or dask array of shape (n,)
        The mean of each row, float64.
    grand_mean : float or 0-d dask array
        The mean of all entries (the mean of the row means), float64.
    """
    r = M.mean(axis=1, dtype=np.float64)
    return r, r.mean()


def double_center(M, stats=None):
    """H M H (H = I - 11ᵀ/n) for a symmetric M: M - r 1ᵀ - 1 rᵀ + g. Lazy when M is dask.

    H is never formed. The means are float64 and the result is cast to M's dtype when M is
    floating (float32 stays float32), else to float64 (integer M is not truncated). For a
    dask M the expression fuses into M's blocks.
    ``-0.5 * double_center(D**2)`` is classical MDS's B.

    Parameters
    ----------
    M : ndarray or dask array of shape (n, n)
        The symmetric matrix (its row means serve as its column means).
    stats : tuple or None, default None
        (row means, grand mean) as `center_stats` returns them, computed beforehand (e.g. in
        one pass with other reductions); None: computed here, within the same lazy
        expression for a dask M.

    Returns
    -------
    ndarray or dask array of shape (n, n)
        The doubly centred matrix, in M's dtype for floating M, else float64.
    """
    r, g = stats if stats is not None else center_stats(M)
    dtype = M.dtype if np.issubdtype(M.dtype, np.inexact) else np.dtype(np.float64)
    if is_dask(M):
        # float64 means, cast per block: the expression fuses into M's blocks
        return (M - r[:, None] - r[None, :] + g).astype(dtype)
    r = np.asarray(r, dtype=np.float64)
    return (M - r[:, None] - r[None, :] + g).astype(dtype)


class CentredOperator:
    """Classical MDS's B = -1/2 H S H (S = M * M when ``square`` else M, H = I - 11^T/n) of a
    symmetric dask M, for the eigensolvers of `linalg.top_eigh`: never formed.

    Each product B Q (`product`) is one task per row block of M, which makes its rows of S a
    run at a time in a small buffer, multiplies them by Q and centres the product
    (B Q = -1/2 (S Q - r c^T - 1 w^T), c = 1^T Q, w = Q^T r - g c;
    `blocks.centring.centred_block_product`); the lazy expression
    ``-0.5 * double_center(S, (r, g))`` (`lazy`, for the dense solver) makes four
    block-sized temporaries in every task of every pass.

    Parameters
    ----------
    M : dask array of shape (n, n)
        The symmetric matrix (distances when ``square``).
    r : ndarray of shape (n,)
        The row means of S (float64), as `center_stats` gives them.
    g : float
        Their mean.
    square : bool
        Whether S is M squared.
    """

    ndim = 2
    dtype = np.dtype(np.float64)

    def __init__(self, M, r, g, *, square: bool):
        self.M, self.r, self.g, self.square = M, np.asarray(r, np.float64), float(g), square
        self.shape = M.shape

    def lazy(self):
        """B as a lazy dask expression."""
        S = self.M.astype(np.float64) ** 2 if self.square else self.M
        return -0.5 * double_center(S, (self.r, self.g))

    def product(self, Q):
        """B Q as a dask array (n x p, float64): one task per row block of M."""
        import dask.array as da

        M, Q = self.M, np.asarray(Q, np.float64)
        rows, cols = M.chunks
        c = Q.sum(axis=0)  # B Q = -1/2 (S Q - r c^T - 1 w^T)
        w = Q.T @ self.r - self.g * c
        r_rows = da.from_array(self.r, chunks=(rows,))
        Qd = da.from_array(Q, chunks=(cols, Q.shape[1]))
        return da.blockwise(
            centred_block_product,
            "ik",
            M,
            "ij",
            r_rows,
            "i",
            c,
            None,
            w,
            None,
            Qd,
            "jk",
            square=self.square,
            concatenate=False,
            dtype=np.float64,
        )
