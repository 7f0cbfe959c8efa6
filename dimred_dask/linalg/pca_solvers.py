"""PCA solvers on NumPy or dask arrays. Each returns a `Spectrum` of the centred data.

- ``covariance_eigh``: one pass (mean and d x d scatter in float64, blockwise), then ``eigh``.
  Exact; the choice for up to a few thousand features. Sparse rows give their scatter as
  X^T X - n mu mu^T from one sparse product per block (``blocks.sparse``).
- ``tsqr_svd``: exact SVD of the tall centred matrix through its R factor (TSQR, Demmel et
  al. 2012; ``dask.array.linalg.tsqr``): better conditioned than the scatter matrix.
- ``randomized_eigh``: randomized subspace iteration (Halko, Martinsson & Tropp 2011,
  Alg. 4.4/5.3) on the operator A = Xc^T Xc, never formed. Each power iteration is one pass
  over the rows (A Q = sum_b Xb^T (Xb Q)); a final pass gives the Rayleigh-Ritz matrix.
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
from .convergence import completed
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
    return Spectrum(stats.mean, v[:, order].T.copy(), w, float(stats.sumsq.sum() / (stats.n - 1)),
                    stats.n, exact, passes, _constant(stats))


def _constant(stats: BlockStats) -> np.ndarray:
    return np.nonzero(stats.sumsq <= 0)[0]


def covariance_eigh(X, *, method="PCA", where="X") -> Spectrum:
    stats = column_stats(X, gram=True, method=method, where=where, stage="covariance pass")
    cov = stats.m2 / (stats.n - 1)
    w, v = scipy.linalg.eigh(cov)
    return _from_eigh(w, v, stats, exact=True, passes=1)


def tsqr_svd(X, *, method="PCA", where="X") -> Spectrum:
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
    return Spectrum(stats.mean, comps, var, float(stats.sumsq.sum() / (n - 1)), n, True, 3,
                    _constant(stats))


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


def randomized_eigh(X, n_components: int, *, n_oversamples: int = 10, n_iter: int = 4,
                    random_state=None, method="PCA", where="X") -> Spectrum:
    """Top ``n_components`` of the covariance by randomized subspace iteration."""
    from .._validation import check_random_state

    n, d = X.shape
    stats = column_stats(X, gram=False, method=method, where=where, stage="mean pass")
    rng = check_random_state(random_state)
    width = min(d, n_components + n_oversamples)
    q, _ = np.linalg.qr(rng.standard_normal((d, width)))
    residual = None
    block = sparse_gram_products if is_sparse_input(X) else _block_products
    for it in range(n_iter):
        aq, _ = _gram_products(X, stats.mean, q, stage=f"power iteration {it + 1}/{n_iter}",
                               block=block)
        if it == n_iter - 1:
            residual = _ritz_residual(q, aq, n_components)
        q, _ = np.linalg.qr(aq)
    _, small = _gram_products(X, stats.mean, q, stage="Rayleigh-Ritz pass", need_aq=False,
                              block=block)
    w, v = scipy.linalg.eigh(small)
    sp = _from_eigh(w / (n - 1), q @ v, stats, exact=False, passes=n_iter + 2)
    sp.components, sp.variances = sp.components[:n_components], sp.variances[:n_components]
    sp.convergence = completed(
        f"top {n_components} eigenpairs of the covariance", "randomized subspace iteration",
        n_iter, passes=n_iter + 2, residual=residual,
        measure="max ||A u - theta u|| / theta_max of the Ritz pairs one pass before the "
                "last (an estimate for the last pass's, usually smaller); None without power "
                "iterations")
    return sp


def _ritz_residual(q: np.ndarray, aq: np.ndarray, k: int) -> float:
    """Relative residual of the top ``k`` Ritz pairs of A on span(q), from aq = A q (d x width,
    in memory: no pass)."""
    theta, u = scipy.linalg.eigh((q.T @ aq + aq.T @ q) / 2)
    order = np.argsort(theta)[::-1][:k]
    theta, u = theta[order], u[:, order]
    r = np.linalg.norm(aq @ u - (q @ u) * theta, axis=0)
    return float(r.max() / max(float(theta[0]), np.finfo(np.float64).tiny))


def _block_products(block, mean, q, need_aq):
    """For one row block: (Xb - mean)^T (Xb - mean) q and ((Xb - mean) q)^T ((Xb - mean) q)."""
    x = np.asarray(block)
    qd = q.astype(x.dtype, copy=False)
    y = (x @ qd).astype(np.float64) - (mean @ q)  # (Xb - 1 mean^T) q without a centred copy
    small = y.T @ y
    if not need_aq:
        return None, small
    aq = (x.T @ y.astype(x.dtype, copy=False)).astype(np.float64) - np.outer(mean, y.sum(axis=0))
    return aq, small


def _add_pairs(a, b):
    return (None if a[0] is None else a[0] + b[0], a[1] + b[1])


def _gram_products(X, mean, q, *, stage, need_aq=True, block=_block_products):
    """Sum over row blocks of ``block``'s products (``_block_products`` for dense rows,
    ``blocks.sparse.sparse_gram_products`` for sparse ones), in a fixed tree."""
    if not is_dask(X):
        if block is sparse_gram_products:  # sparse products release the GIL: row blocks on
            with RowBlockPool(block_rows=NUMPY_BLOCK_ROWS) as pool:  # the cores, same sums
                parts = pool.map(lambda a, b: block(X[a:b], mean, q, need_aq), X.shape[0])
            return tree_reduce(parts, _add_pairs)
        return tree_reduce((block(X[a:b], mean, q, need_aq)
                            for a, b in row_blocks(X.shape[0], NUMPY_BLOCK_ROWS)), _add_pairs)
    from dask import delayed

    if X.numblocks[1] != 1:
        X = X.rechunk({1: -1})
    leaves = [delayed(block, pure=True)(b, mean, q, need_aq)
              for b in X.to_delayed().ravel()]
    (res,) = compute(tree_reduce(leaves, delayed(_add_pairs, pure=True)), stage=stage)
    return res
