"""PCA solvers on NumPy or dask arrays. Each returns a `Spectrum` of the centred data.

- ``covariance_eigh``: one pass (mean and d x d scatter in float64, blockwise), then ``eigh``.
  Exact; the choice for up to a few thousand features. Sparse rows give their scatter as
  X^T X - n mu mu^T from one sparse product per block (``blocks.sparse``).
- ``tsqr_svd``: exact SVD of the tall centred matrix through its R factor (TSQR, Demmel et
  al. 2012; ``dask.array.linalg.tsqr``): better conditioned than the scatter matrix.
- ``randomized_eigh``: randomized block Krylov iteration (Halko, Martinsson & Tropp 2011;
  Musco & Musco 2015) on the operator A = Xc^T Xc, never formed. Each pass over the rows gives
  A Q = sum_b Xb^T (Xb Q) for the newest block; Rayleigh-Ritz on all blocks so far, with exact
  residuals, after every pass (stopping early at ``tol``).
  Sparse rows are centred implicitly (Xc Q = X Q - 1 (mu^T Q), Xc^T Y = X^T Y - mu (1^T Y),
  ``blocks.sparse``), so the same iteration takes CSR input and CSR-chunked dask arrays.
- ``dual_eigh``: n << d. Eigenvectors V of the n x n Gram Xc Xc^T, then U = Xc^T V S^-1
  (dual PCA: the Gram matrix's eigenvectors give the principal directions).

All eigen/singular vectors come out in descending order; signs are fixed by the caller.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.linalg

from .._compute import compute
from .._validation import is_dask, is_sparse_input
from ..blocks.sparse import sparse_gram_products
from ..blocks.stats import BlockStats, tree_reduce
from .convergence import record
from .moments import NUMPY_BLOCK_ROWS, column_stats, row_blocks
from .threaded import RowBlockPool


@dataclass
class Spectrum:
    mean: np.ndarray  # (d,)
    components: np.ndarray  # (r, d) orthonormal rows, descending variance
    variances: np.ndarray  # (r,) eigenvalues of the covariance (ddof=1)
    total_variance: float  # trace of the covariance
    n_samples: int
    exact: bool  # whether ``variances`` is the whole spectrum (so fractions are allowed)
    passes: int  # passes over the data
    constant_columns: np.ndarray | None = None  # indices of zero-variance columns
    convergence: dict | None = None  # randomized solver's record (``linalg.convergence``)


def _from_eigh(w: np.ndarray, v: np.ndarray, stats: BlockStats, *, exact: bool, passes: int):
    order = np.argsort(w)[::-1]
    w = np.clip(w[order], 0.0, None)
    return Spectrum(
        stats.mean,
        v[:, order].T.copy(),
        w,
        float(stats.sumsq.sum() / (stats.n - 1)),
        stats.n,
        exact,
        passes,
        _constant(stats),
    )


def _constant(stats: BlockStats) -> np.ndarray:
    return np.nonzero(stats.sumsq <= 0)[0]


def covariance_eigh(X, *, method="PCA", where="X") -> Spectrum:
    """Exact PCA from the covariance matrix: one pass, then LAPACK ``eigh``.

    The pass (`moments.column_stats`) gives the mean and the d x d centred scatter in
    float64, blockwise (dask: on the cluster); sparse rows give theirs from sparse products,
    centred implicitly. The covariance (ddof=1) is then decomposed in memory, so d must be
    small enough for a d x d matrix.

    Parameters
    ----------
    X : array-like, dask array or sparse matrix of shape (n_samples, n_features)
        The data rows (n_samples >= 2).
    method : str, default "PCA"
        The method's name in error messages.
    where : str, default "X"
        The name of the input in error messages.

    Returns
    -------
    Spectrum
        All d components (rows, descending variance), their variances (negative rounding
        clipped to 0), the total variance, ``exact=True``, one pass, the zero-variance
        columns.

    Raises
    ------
    InputError
        ``X`` holds NaN or inf, or values too large to square in float64.
    """
    stats = column_stats(X, gram=True, method=method, where=where, stage="covariance pass")
    cov = stats.m2 / (stats.n - 1)
    w, v = scipy.linalg.eigh(cov)
    return _from_eigh(w, v, stats, exact=True, passes=1)


def tsqr_svd(X, *, method="PCA", where="X") -> Spectrum:
    """Exact PCA from the SVD of the R factor of the centred data (TSQR).

    Better conditioned than the scatter matrix. A mean pass, then the QR factorisation of
    Xc = X - mean in float64: for dask, TSQR (Demmel et al. 2012; ``dask.array.linalg.tsqr``)
    on row blocks of at least max(first row chunk, n_features) rows and whole columns; for
    NumPy, LAPACK's QR of a centred copy. The SVD of R gives the components and the
    variances s² / (n - 1). Dense rows only.

    Parameters
    ----------
    X : array-like or dask array of shape (n_samples, n_features)
        The data rows, tall (n_samples >= n_features).
    method : str, default "PCA"
        The method's name in error messages.
    where : str, default "X"
        The name of the input in error messages.

    Returns
    -------
    Spectrum
        The components (rows, descending variance), their variances, the total variance,
        ``exact=True``, two passes, the zero-variance columns.

    Raises
    ------
    InputError
        ``X`` holds NaN or inf, or values too large to square in float64.
    """
    stats = column_stats(X, gram=False, method=method, where=where, stage="mean pass")
    n, d = X.shape
    if is_dask(X):
        import dask.array as da

        rows = max(int(X.chunks[0][0]), d, 1)
        Xc = (X.astype(np.float64) - stats.mean).rechunk({0: rows, 1: -1})
        _, r = da.linalg.tsqr(Xc, compute_svd=False)
        (r,) = compute(r, stage="tsqr pass")
    else:
        r = np.linalg.qr(np.asarray(X, dtype=np.float64) - stats.mean, mode="r")
    _, s, vt = np.linalg.svd(r, full_matrices=False)
    sp = _from_eigh(s**2 / (n - 1), vt.T, stats, exact=True, passes=2)
    return sp


def dual_eigh(X, *, method="PCA", where="X") -> Spectrum:
    """Exact PCA through the n x n Gram matrix, for n_samples << n_features (dual PCA).

    Three passes: the mean; the Gram matrix G = Xc Xcᵀ of the centred rows, in float64 (dask:
    computed into memory); then the components U = Xcᵀ V S⁻¹ from G's eigenvectors V
    (LAPACK ``eigh``). Eigenvalues at or below lambda_1 max(n, d) eps count as zero; their
    directions are completed to an orthonormal basis with fixed pseudo-random vectors, of
    variance 0. Dense rows only.

    Parameters
    ----------
    X : array-like or dask array of shape (n_samples, n_features)
        The data rows.
    method : str, default "PCA"
        The method's name in error messages.
    where : str, default "X"
        The name of the input in error messages.

    Returns
    -------
    Spectrum
        min(n_samples, n_features) components (rows, descending variance), their variances,
        the total variance, ``exact=True``, three passes, the zero-variance columns.

    Raises
    ------
    InputError
        ``X`` holds NaN or inf, or values too large to square in float64.
    """
    stats = column_stats(X, gram=False, method=method, where=where, stage="mean pass")
    n = X.shape[0]
    if is_dask(X):
        Xc = X.astype(np.float64) - stats.mean
        (gram,) = compute(Xc @ Xc.T, stage="dual Gram pass")
    else:
        Xc = np.asarray(X, dtype=np.float64) - stats.mean
        gram = Xc @ Xc.T
    lam, vecs = scipy.linalg.eigh(gram)
    order = np.argsort(lam)[::-1]
    lam, vecs = np.clip(lam[order], 0.0, None), vecs[:, order]
    sigma = np.sqrt(lam)
    keep = lam > lam[0] * max(n, X.shape[1]) * np.finfo(np.float64).eps  # numerically nonzero
    if is_dask(X):
        (proj,) = compute(Xc.T @ vecs[:, keep], stage="dual components pass")
    else:
        proj = Xc.T @ vecs[:, keep]
    comps = (proj / sigma[keep]).T  # rows u_j = Xc^T v_j / sigma_j  (U = X V S^-1)
    comps = _complete_basis(comps, min(n, X.shape[1]))
    var = np.zeros(comps.shape[0])
    var[: keep.sum()] = lam[keep] / (n - 1)
    return Spectrum(
        stats.mean, comps, var, float(stats.sumsq.sum() / (n - 1)), n, True, 3, _constant(stats)
    )


def _complete_basis(rows: np.ndarray, r: int) -> np.ndarray:
    """Extend orthonormal rows to ``r`` rows (directions of zero variance are arbitrary)."""
    k, d = rows.shape
    if k >= r:
        return rows
    rng = np.random.default_rng(0)
    extra = rng.standard_normal((r - k, d))
    extra -= (extra @ rows.T) @ rows
    q, _ = np.linalg.qr(extra.T)
    return np.vstack([rows, q.T[: r - k]])


def randomized_eigh(
    X,
    n_components: int,
    *,
    n_oversamples: int = 10,
    n_iter: int = 4,
    tol: float = 0.0,
    random_state=None,
    method="PCA",
    where="X",
) -> Spectrum:
    """Top ``n_components`` of the covariance by randomized block Krylov iteration.

    A random start block Q0 of width k + ``n_oversamples``; each pass over the rows gives
    A Qj (A = Xc^T Xc), and the next block is A Qj orthogonalised against every earlier one, so
    after j passes the basis spans the block Krylov space [Q0, A Q0, ..., A^(j-1) Q0]
    (Musco & Musco 2015, "Randomized Block Krylov Methods for Stronger and Faster Approximate
    Singular Value Decomposition"): it holds subspace iteration's space of the same passes, and
    converges in about the square root of its passes where the spectrum is flat. Every
    product A Qj is kept, so the Rayleigh-Ritz pairs and their exact residuals come from
    memory after each pass: at most ``n_iter`` + 1 passes (plus the mean pass), fewer once the
    largest relative residual ||A u - theta u|| / theta of the wanted pairs is at most ``tol``
    (``tol`` = 0: all of them). That residual bounds the distance from theta to an eigenvalue
    of A (Bauer-Fike), so ``tol`` bounds each explained variance's relative error; the error
    itself is usually far smaller (of the order of the residual squared over the gap). The
    basis (d x width per pass) and its image are held in memory.

    Each pass sums Xbᵀ (Xb Q) over row blocks: NumPy in blocks of ``NUMPY_BLOCK_ROWS`` rows
    (sparse ones on the cores' threads), dask one task per row chunk on the cluster, reduced
    in a fixed tree. Sparse rows are centred implicitly, never densified.

    Parameters
    ----------
    X : array-like, dask array or sparse matrix of shape (n_samples, n_features)
        The data rows (n_samples >= 2).
    n_components : int
        The number of components k, at most n_features.
    n_oversamples : int, default 10
        Extra columns of the start block beyond k (width min(d, k + ``n_oversamples``)).
    n_iter : int, default 4
        At most ``n_iter`` + 1 Krylov passes.
    tol : float, default 0.0
        Stop once the wanted pairs' largest relative residual is at most ``tol`` (0: every
        pass, unless the Krylov space fills up or becomes invariant first). A ``tol`` > 0 not
        reached marks the record ``converged=False``.
    random_state : int, numpy Generator, RandomState or None, default None
        Seeds the start block.
    method : str, default "PCA"
        The method's name in error messages.
    where : str, default "X"
        The name of the input in error messages.

    Returns
    -------
    Spectrum
        ``n_components`` components (rows, descending variance), their variances, the exact
        total variance (from the mean pass), ``exact=False``, the passes (Krylov passes + 1),
        the zero-variance columns and the ``convergence`` record.

    Raises
    ------
    InputError
        ``X`` holds NaN or inf, or values too large to square in float64; a
        ``random_state`` that is not None, an int, a Generator or a RandomState.
    """
    from .._validation import check_random_state

    n, d = X.shape
    stats = column_stats(X, gram=False, method=method, where=where, stage="mean pass")
    rng = check_random_state(random_state)
    width = min(d, n_components + n_oversamples)
    q, _ = np.linalg.qr(rng.standard_normal((d, width)))
    block = (
        sparse_gram_products
        if is_sparse_input(X)
        else _centred_block_products
        if _offset_costs_precision(stats, X.dtype)
        else _block_products
    )
    steps = int(n_iter) + 1
    krylov = _Krylov(d, min(d, width * steps), q)
    for it in range(steps):
        aq = _gram_products(X, stats.mean, q, stage=f"Krylov pass {it + 1}/{steps}", block=block)
        theta, vectors, residual = krylov.add_image(aq, n_components)
        if residual <= tol or it == steps - 1 or krylov.full:
            break
        q = krylov.next_block(aq)
        if q is None:  # the Krylov space is invariant: its Ritz pairs are exact
            break
    passes = krylov.passes + 1
    sp = _from_eigh(theta / (n - 1), vectors, stats, exact=False, passes=passes)
    sp.components, sp.variances = sp.components[:n_components], sp.variances[:n_components]
    asked = float(tol) > 0
    reached = residual <= tol
    sp.convergence = record(
        f"top {n_components} eigenpairs of the covariance",
        "randomized block Krylov",
        converged=reached or not asked,
        iterations=krylov.passes,
        residual=residual,
        tol=float(tol) if asked else None,
        passes=passes,
        status="converged"
        if asked and reached
        else "completed"
        if not asked
        else f"stopped after n_iter + 1 = {krylov.passes} Krylov passes",
        measure="max ||A u - theta u|| / theta of the wanted Ritz pairs after the last pass",
    )
    return sp


class _Krylov:
    """The block Krylov basis V (d x m, orthonormal) and A V, in preallocated columns, with the
    projected matrix T = V^T A V grown by one block row and column per pass (O(d m b) a pass,
    not O(d m^2))."""

    def __init__(self, d: int, columns: int, q0: np.ndarray):
        self.V = np.empty((d, columns))
        self.AV = np.empty((d, columns))
        self.T = np.empty((columns, columns))
        self.m, self.passes, self.pending = 0, 0, q0

    @property
    def full(self) -> bool:
        return self.m >= self.V.shape[0]

    def add_image(self, aq: np.ndarray, k: int):
        """Append the pending block Q and its image A Q; return the top ``k`` Ritz values,
        their vectors V y and the largest relative residual ||A u - theta u|| / theta among
        them (theta floored at sqrt(eps) theta_1, for pairs at the rounding level)."""
        q, m = self.pending, self.m
        b = q.shape[1]
        self.V[:, m : m + b], self.AV[:, m : m + b] = q, aq
        V, AV = self.V[:, : m + b], self.AV[:, : m + b]
        self.T[: m + b, m : m + b] = V.T @ aq
        self.T[m : m + b, :m] = self.T[:m, m : m + b].T
        self.m, self.passes = m + b, self.passes + 1
        T = self.T[: m + b, : m + b]
        top = min(k, m + b)
        theta, y = scipy.linalg.eigh((T + T.T) / 2, subset_by_index=[m + b - top, m + b - 1])
        theta, y = theta[::-1], y[:, ::-1]
        u = V @ y
        r = np.linalg.norm(AV @ y - u * theta, axis=0)
        floor = max(float(theta[0]) * np.sqrt(np.finfo(np.float64).eps), np.finfo(float).tiny)
        return theta, u, float(np.max(r / np.maximum(theta, floor)))

    def next_block(self, aq: np.ndarray) -> np.ndarray | None:
        """A Q orthogonalised against the basis (twice, for orthogonality to rounding), as an
        orthonormal block; directions already in the span (below 1e-10 of A Q's Frobenius norm)
        dropped; None when nothing new is left or there is no room for it."""
        V = self.V[:, : self.m]
        w = aq - V @ (V.T @ aq)
        w -= V @ (V.T @ w)
        u, s, _ = np.linalg.svd(w, full_matrices=False)
        scale = max(float(np.linalg.norm(aq)), np.finfo(np.float64).tiny)
        keep = s > 1e-10 * scale
        keep[self.V.shape[1] - self.m :] = False  # never more columns than allocated (<= d)
        self.pending = u[:, keep] if keep.any() else None
        return self.pending


def _block_products(block, mean, q):
    """For one row block: (Xb - 1 mean^T)^T (Xb - 1 mean^T) q, without a centred copy."""
    x = np.asarray(block)
    y = (x @ q.astype(x.dtype, copy=False)).astype(np.float64) - (mean @ q)
    return (x.T @ y.astype(x.dtype, copy=False)).astype(np.float64) - np.outer(mean, y.sum(axis=0))


# Implicit centring, X q - 1 (mean^T q) in X's dtype, loses about eps * |mean| / std of each
# column's spread to cancellation; above this loss the rows are centred explicitly (a copy of
# each block): float32 columns whose mean is a few hundred of their standard deviations.
CANCELLATION_LIMIT = 1e-5


def _offset_costs_precision(stats, dtype) -> bool:
    """Whether implicit centring would lose more than ``CANCELLATION_LIMIT`` of some column's
    spread to cancellation (a mean large against its standard deviation)."""
    std = np.sqrt(np.asarray(stats.sumsq, np.float64) / max(stats.n - 1, 1))
    ratio = np.abs(stats.mean) / np.maximum(std, np.finfo(np.float64).tiny)
    ratio = ratio[std > 0]  # constant columns have no spread to lose
    return bool(ratio.size) and float(np.finfo(dtype).eps * ratio.max()) > CANCELLATION_LIMIT


def _centred_block_products(block, mean, q):
    """`_block_products` with the block centred first (by its dtype's rounding of the mean,
    which the subtraction of nearby values leaves exact; the rest of the mean in float64)."""
    x = np.asarray(block)
    m = mean.astype(x.dtype)
    xc = x - m
    return _block_products(xc, mean - m.astype(np.float64), q)


def _add(a, b):
    return a + b


def _gram_products(X, mean, q, *, stage, block=_block_products):
    """Xc^T Xc q summed over row blocks of ``block`` (``_block_products`` for dense rows,
    ``blocks.sparse.sparse_gram_products`` for sparse ones), in a fixed tree."""
    if not is_dask(X):
        if block is sparse_gram_products:  # sparse products release the GIL: row blocks on
            with RowBlockPool(block_rows=NUMPY_BLOCK_ROWS) as pool:  # the cores, same sums
                parts = pool.map(lambda a, b: block(X[a:b], mean, q), X.shape[0])
            return tree_reduce(parts, _add)
        return tree_reduce(
            (block(X[a:b], mean, q) for a, b in row_blocks(X.shape[0], NUMPY_BLOCK_ROWS)), _add
        )
    from dask import delayed

    if X.numblocks[1] != 1:
        X = X.rechunk({1: -1})
    leaves = [delayed(block, pure=True)(b, mean, q) for b in X.to_delayed().ravel()]
    (res,) = compute(tree_reduce(leaves, delayed(_add, pure=True)), stage=stage)
    return res
