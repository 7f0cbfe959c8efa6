"""Trustworthiness (Venna & Kaski 2001), kNN recall, reconstruction error, explained variance.

They work on in-memory samples (a few thousand rows): the caller draws the sample with
`sample_rows` and states its size in the manifest. The sample of the data may be sparse
(``scipy.sparse``): its distances then come from sparse products (||a||^2 + ||b||^2 - 2 a.b,
float64), and the reconstruction error densifies it one block of rows at a time.
"""

from __future__ import annotations

import numbers

import numpy as np
import scipy.sparse as sp
from scipy.spatial.distance import cdist

from .._validation import check_random_state
from ..blocks.kernels import sqeuclidean_block
from ..blocks.sparse import csr64, toarray_rows
from ..errors import InputError


def sample_rows(n: int, size: int, random_state=0) -> np.ndarray:
    """Sorted indices of ``min(n, size)`` rows drawn uniformly without replacement.

    Parameters
    ----------
    n : int
        The number of rows to draw from.
    size : int
        The number of rows wanted.
    random_state : int, numpy Generator, RandomState or None, default 0
        Seeds the draw.

    Returns
    -------
    ndarray of int of shape (min(n, size),)
        The row indices, ascending; every row (no draw) when ``size`` >= ``n``.

    Raises
    ------
    InputError
        When rows are drawn, a ``random_state`` that is not None, an int, a Generator or a
        RandomState.
    """
    if size >= n:
        return np.arange(n)
    rng = check_random_state(random_state)
    return np.sort(rng.choice(n, size=size, replace=False))


def _rows(X):
    """A sample of rows in float64: NumPy, or CSR when sparse."""
    return csr64(X) if sp.issparse(X) else np.asarray(X, dtype=np.float64)


def _check_n_neighbors(k, n: int, what: str, top: int, bound: str) -> int:
    """``k`` as an int in [1, ``top``]: the neighbours ``what`` compares in a sample of n rows
    (``bound`` states the limit in words)."""
    ok = isinstance(k, numbers.Integral) and not isinstance(k, bool) and 1 <= k <= top
    if not ok:
        raise InputError(
            f"{what} needs n_neighbors as an int with 1 <= n_neighbors {bound}; found "
            f"n_neighbors={k!r} for a sample of {n} rows.",
            f"pass n_neighbors between 1 and {top} (a larger sample allows more)."
            if top >= 1
            else "pass a larger sample.",
        )
    return int(k)


# rows of a block of the sample's distances: BLOCK_ELEMENTS float64 (2 MiB) per array
BLOCK_ELEMENTS = 1 << 18


def _row_blocks(n: int):
    step = max(1, BLOCK_ELEMENTS // max(n, 1))
    for a in range(0, n, step):
        yield a, min(n, a + step)


def _neighbour_order(X, a: int, b: int) -> np.ndarray:
    """Rows a..b-1 of the stable order of every row of X by its squared distance from X's
    rows a..b-1, a row never its own neighbour (it comes last)."""
    rows = X[a:b]
    d = sqeuclidean_block(rows, X) if sp.issparse(X) else cdist(rows, X, "sqeuclidean")
    d[np.arange(b - a), np.arange(a, b)] = np.inf
    return np.argsort(d, axis=1, kind="stable")


def trustworthiness(X, Y, n_neighbors: int = 5) -> float:
    """Trustworthiness of the embedding ``Y`` of the rows ``X`` (Venna & Kaski 2001).

    T = 1 - 2/(n k (2n - 3k - 1)) sum_i sum_{j in U_i} (r(i, j) - k), where U_i are the
    embedding's k nearest neighbours of i that are not among its k nearest in X, and r(i, j)
    is the rank of j by distance from i in X. Exact: the squared Euclidean distances in both
    spaces (float64; from sparse products for sparse ``X``), ties broken by row order, made a
    block of rows at a time (about 2 MiB per array, not n x n).

    Parameters
    ----------
    X : array-like or sparse matrix of shape (n_samples, n_features)
        A sample of the data rows.
    Y : array-like of shape (n_samples, n_components)
        Their embedding.
    n_neighbors : int, default 5
        k, with 1 <= k < n_samples / 2.

    Returns
    -------
    float
        T in [0, 1]; 1 when no point has intruders among its embedding's neighbours.

    Raises
    ------
    InputError
        ``n_neighbors`` is not an int in range (a ``ValueError``).
    """
    X, Y = _rows(X), np.asarray(Y, dtype=np.float64)
    n = X.shape[0]
    k = _check_n_neighbors(
        n_neighbors, n, "trustworthiness", (n - 1) // 2, f"< n_samples / 2 = {n / 2}"
    )
    penalty = 0
    for a, b in _row_blocks(n):  # rows are independent: one block's n-wide arrays at a time
        order_x = _neighbour_order(X, a, b)
        ranks = np.empty_like(order_x)
        ranks[np.arange(b - a)[:, None], order_x] = np.arange(1, n + 1)[None, :]
        del order_x
        nn_y = _neighbour_order(Y, a, b)[:, :k]
        r = ranks[np.arange(b - a)[:, None], nn_y]
        penalty += int(np.clip(r - k, 0, None).sum())
    return float(1.0 - 2.0 / (n * k * (2.0 * n - 3.0 * k - 1.0)) * penalty)


def knn_recall(X, Y, n_neighbors: int = 10) -> float:
    """Mean fraction of each point's k nearest neighbours in X that are also its k nearest in Y.

    Exact: the squared Euclidean distances in both spaces (float64; from sparse products for
    sparse ``X``), a block of rows at a time; a point is not its own neighbour.

    Parameters
    ----------
    X : array-like or sparse matrix of shape (n_samples, n_features)
        A sample of the data rows.
    Y : array-like of shape (n_samples, n_components)
        Their embedding.
    n_neighbors : int, default 10
        k, with 1 <= k < n_samples.

    Returns
    -------
    float
        The recall, in [0, 1].

    Raises
    ------
    InputError
        ``n_neighbors`` is not an int in range (a ``ValueError``).
    """
    X, Y = _rows(X), np.asarray(Y, dtype=np.float64)
    n = X.shape[0]
    k = _check_n_neighbors(n_neighbors, n, "knn_recall", n - 1, "< n_samples")
    hits = 0
    for a, b in _row_blocks(n):
        nx, ny = _neighbour_order(X, a, b)[:, :k], _neighbour_order(Y, a, b)[:, :k]
        hits += sum(len(np.intersect1d(p, q, assume_unique=True)) for p, q in zip(nx, ny))
    return float(hits / n / k)


def reconstruction_error(X, X_hat, mean) -> float:
    """||X - X_hat||² / ||X - mean||² (Frobenius): the fraction of the sample's variance lost.

    The sums run over blocks of ``SPARSE_BLOCK_ROWS`` rows in float64: a sparse ``X`` is
    densified one block at a time, and a callable ``X_hat`` is asked for one block at a time,
    so the sample's reconstruction is never whole in memory.

    Parameters
    ----------
    X : array-like or sparse matrix of shape (n_samples, n_features)
        A sample of the data rows.
    X_hat : array-like of shape (n_samples, n_features) or callable
        Their reconstruction, or a function that takes a ``slice`` of rows and returns those
        rows' reconstruction.
    mean : array-like of shape (n_features,)
        The mean the variance is measured from (e.g. the fitted model's).

    Returns
    -------
    float
        The fraction, 0.0 when ``X`` equals ``mean`` everywhere.
    """
    mean = np.asarray(mean, dtype=np.float64)
    rebuild = X_hat if callable(X_hat) else (lambda rows: X_hat[rows])
    num = den = 0.0
    X = csr64(X) if sp.issparse(X) else np.asarray(X)  # dense rows stay in their dtype
    for start, block in toarray_rows(X, SPARSE_BLOCK_ROWS):
        block = block.astype(np.float64, copy=False)
        rows = slice(start, start + block.shape[0])
        num += ((block - np.asarray(rebuild(rows), dtype=np.float64)) ** 2).sum()
        den += ((block - mean) ** 2).sum()
    return float(num / den) if den > 0 else 0.0


SPARSE_BLOCK_ROWS = 256  # rows of a sample compared at once (40 MB at d = 20 000)


def explained_variance_summary(explained_variance, ratio) -> dict:
    """The explained variances of a linear embedding as plain Python values (for a manifest).

    Parameters
    ----------
    explained_variance : array-like of shape (n_components,)
        The variance along each component.
    ratio : array-like of shape (n_components,)
        Each component's fraction of the total variance.

    Returns
    -------
    dict
        ``"explained_variance"`` and ``"explained_variance_ratio"`` (lists of float, in
        float64) and ``"explained_variance_ratio_total"`` (float, the sum of ``ratio``).
    """
    ratio = np.asarray(ratio, dtype=np.float64)
    return {
        "explained_variance": np.asarray(explained_variance, dtype=np.float64).tolist(),
        "explained_variance_ratio": ratio.tolist(),
        "explained_variance_ratio_total": float(ratio.sum()),
    }
