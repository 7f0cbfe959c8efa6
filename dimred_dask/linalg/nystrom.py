"""Nyström approximation (Williams & Seeger 2001) of a kernel matrix with m landmarks.

With C = k(X, L) (n x m) and W = k(L, L), K ~ C W^-1 C^T = Phi Phi^T with Phi = C R^-1,
W = R^T R. R is W's Cholesky factor (LAPACK ``?potrf``, blocked, and so cheaper than the
pivoted ``?pstrf`` and far cheaper than an eigendecomposition of W) when every pivot R_jj^2
(landmark j's squared distance in feature space from the span of the landmarks before it) is
at least ``RANK_TOL`` times W's largest diagonal entry. Otherwise the landmarks are nearly
dependent and R comes from the rank-revealing pivoted Cholesky, which drops the landmarks
within ``RANK_TOL`` of the span of the others: the map then has rank r < m over the r kept
landmarks, in pivot order. R^-1 is applied by triangular solves; the explicit inverse
(``proj``) is formed only when asked for. Kernel PCA of the
approximation is linear PCA of Phi, and since Phi is a fixed linear map of C, one pass over
the rows for C's mean and r x r scatter S_C (``column_stats``) gives Phi's scatter
R^-T S_C R^-1, whose top eigenpairs are those of the centred approximate kernel. A new point
x maps to phi(x) = k(x, L) R^-1, which is also the out-of-sample extension.

Landmarks: `linalg.landmarks.choose_landmarks` (``landmarks=``; ``auto`` takes k-means++ up
to 500 landmarks and uniform rows above: measured, m = 300 on three Gaussian clusters gave a
held-out error of 0.085 with k-means++ against 0.104 uniform, and m = 2000 on the kernel PCA
benchmark's data 4.3e-6 against 4.8e-6).
The approximation error is measured on a held-out sample of rows: the relative Frobenius
error of its kernel block, ||K_ss - Phi_s Phi_s^T||_F / ||K_ss||_F.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np
import scipy.linalg
from scipy.linalg import blas, lapack

from .._validation import check_random_state, is_dask
from ..blocks.kernels import block_dtype, kernel_block
from ..errors import InputError
from .convergence import record
from .threaded import RowBlockPool

__all__ = [
    "NystromMap",
    "nystrom_map",
    "nystrom_features",
    "nystrom_error",
    "nystrom_top_eigh",
    "kernel_rows",
    "ERROR_PROBES",
]

# Pivoted Cholesky stops when the largest remaining Schur-complement diagonal of W is below
# RANK_TOL times W's largest diagonal entry: the dropped landmarks then change the
# approximation by at most that much per entry of W. 1e-10 is the threshold the earlier
# eigenvalue truncation used.
RANK_TOL = 1e-10


@dataclass
class NystromMap:
    landmarks: np.ndarray  # (r, d) the kept landmarks (in pivot order when some were dropped)
    kernel: dict  # resolved kernel parameters (pairwise.params.check_kernel)
    factor: np.ndarray  # (r, r) R, upper triangular, W = R^T R: phi(x) = k(x, landmarks) R^-1
    info: dict  # {"n_landmarks": m asked, "rank": r, "pivots": kept rows of the m given,
    #              "factorization": "cholesky" or "pivoted cholesky"}

    @property
    def rank(self) -> int:
        return self.factor.shape[0]

    @functools.cached_property
    def proj(self) -> np.ndarray:
        """R^-1 (r x r, upper triangular; r^3 / 3 flops, formed on first use)."""
        inv, _ = lapack.dtrtri(self.factor, lower=0)
        return inv

    def solve(self, Z: np.ndarray) -> np.ndarray:
        """R^-1 Z (float64)."""
        return scipy.linalg.solve_triangular(
            self.factor, np.asarray(Z, np.float64), lower=False, check_finite=False
        )

    def solve_t(self, Z: np.ndarray) -> np.ndarray:
        """R^-T Z (float64)."""
        return scipy.linalg.solve_triangular(
            self.factor, np.asarray(Z, np.float64), trans="T", lower=False, check_finite=False
        )

    def kernel_to_landmarks(self, block: np.ndarray) -> np.ndarray:
        return kernel_block(
            np.asarray(block), self.landmarks.astype(block.dtype, copy=False), **self.kernel
        )

    def features(self, block: np.ndarray) -> np.ndarray:
        """phi(x) = k(x, L) R^-1 for the rows of ``block`` (rows, r), in its dtype."""
        c = self.kernel_to_landmarks(block)
        return c @ self.proj.astype(c.dtype, copy=False)


def nystrom_map(landmarks: np.ndarray, kernel: dict) -> NystromMap:
    """The Nyström feature map (Williams & Seeger 2001) of ``landmarks`` for a resolved kernel.

    W = k(L, L) is made in float64 and factorised as W = Rᵀ R: plain Cholesky (LAPACK
    ``?potrf``) when every pivot R_jj² is at least ``RANK_TOL`` times W's largest diagonal
    entry, else the rank-revealing pivoted Cholesky (``?pstrf``), which keeps r < m landmarks
    (those more than ``RANK_TOL`` away from the span of the others). A point x then maps to
    phi(x) = k(x, L) R⁻¹.

    Parameters
    ----------
    landmarks : array-like of shape (m, n_features)
        The landmark points.
    kernel : dict
        Resolved kernel parameters (from `pairwise.check_kernel`).

    Returns
    -------
    NystromMap
        ``landmarks`` the r kept ones (in pivot order when some were dropped, in their
        dtype), ``kernel`` a copy of the parameters, ``factor`` R (r, r) upper triangular,
        ``info`` with the landmarks given, the rank r, the kept rows (``"pivots"``) and the
        factorisation used.

    Raises
    ------
    InputError
        W has no positive diagonal entry (no landmarks, or a kernel that is not positive
        semidefinite on them), so the map would be empty.
    """
    L = np.asarray(landmarks)
    w = kernel_rows(L.astype(np.float64), L.astype(np.float64), kernel)
    # only the upper triangle is read from here on (LAPACK's ?potrf / ?pstrf with lower=0),
    # so W's rounding asymmetry (row blocks) does not matter
    top = float(np.max(np.diag(w))) if w.size else 0.0
    if not top > 0:
        raise InputError(
            "The landmarks' kernel matrix has no positive diagonal entry, so the "
            f"Nyström map is empty (kernel {kernel}).",
            "use a positive semidefinite kernel (gaussian, laplacian, polynomial "
            "with coef0 >= 0), or the dense/randomized solver.",
        )
    try:
        R = scipy.linalg.cholesky(w, lower=False, check_finite=False)
        full = float(np.min(np.diag(R))) ** 2 >= RANK_TOL * top
    except np.linalg.LinAlgError:
        full = False
    if full:
        keep, how = np.arange(L.shape[0]), "cholesky"
    else:
        c, piv, rank, _ = lapack.dpstrf(w, tol=RANK_TOL * top, lower=0)
        rank = int(rank) if rank > 0 else 1  # the first pivot is the largest diagonal: positive
        keep, how = piv[:rank] - 1, "pivoted cholesky"  # LAPACK pivots are 1-based
        R = np.triu(c[:rank, :rank])
    return NystromMap(
        L[keep],
        dict(kernel),
        R,
        {
            "n_landmarks": int(L.shape[0]),
            "rank": int(keep.size),
            "pivots": keep,
            "factorization": how,
        },
    )


def nystrom_features(X, nmap: NystromMap):
    """The Nyström features Phi = k(X, L) R⁻¹ of the rows of ``X`` (Phi Phiᵀ approximates K).

    Parameters
    ----------
    X : array-like or dask array of shape (n_samples, n_features)
        The rows. NumPy input is mapped here in one piece; a dask ``X`` (columns rechunked to
        one chunk) is mapped lazily, one block per row chunk.
    nmap : NystromMap
        The map, from `nystrom_map`.

    Returns
    -------
    ndarray or dask array of shape (n_samples, r)
        The features (r = ``nmap.rank``), float32 for float32 ``X`` and float64 for any
        other ``X``; a lazy dask array for dask input.
    """
    if not is_dask(X):
        return nmap.features(np.asarray(X))
    if X.numblocks[1] != 1:
        X = X.rechunk({1: -1})
    return X.map_blocks(
        nmap.features, chunks=(X.chunks[0], (nmap.rank,)), dtype=block_dtype(X.dtype)
    )


def nystrom_kernel(X, nmap: NystromMap):
    """The kernel C = k(X, L) between the rows of ``X`` and the map's r kept landmarks.

    Parameters
    ----------
    X : array-like or dask array of shape (n_samples, n_features)
        The rows. NumPy input is computed here in row blocks on the cores (`RowBlockPool`);
        a dask ``X`` (columns rechunked to one chunk) gives a lazy array, one block per row
        chunk, whose tasks carry the landmarks and the kernel parameters, not the r x r
        factor.
    nmap : NystromMap
        The map, from `nystrom_map`.

    Returns
    -------
    ndarray or dask array of shape (n_samples, r)
        C, float32 for float32 ``X`` and float64 for any other ``X``; a lazy dask array for
        dask input.
    """
    if not is_dask(X):
        X = np.asarray(X)
        return kernel_rows(X, nmap.landmarks.astype(X.dtype, copy=False), nmap.kernel)
    if X.numblocks[1] != 1:
        X = X.rechunk({1: -1})
    marks, kern = nmap.landmarks, nmap.kernel
    return X.map_blocks(
        lambda b: kernel_block(b, marks.astype(b.dtype, copy=False), **kern),
        chunks=(X.chunks[0], (nmap.rank,)),
        dtype=block_dtype(X.dtype),
    )


# The approximation error's numerator ||K_ss - Phi_s Phi_s^T||_F is estimated with this many
# Gaussian probes g (Hutchinson: E ||E g||^2 = ||E||_F^2), at 2 r^2 p + 2 s r p flops instead
# of the r^2 s + s^2 r of forming Phi_s Phi_s^T (6.4 GFLOP at r = 2000, s = 1000). The
# estimate's relative standard deviation is sqrt(2 sum l^4 / p) / sum l^2 over E's eigenvalues
# l: 1.6 % at p = 50 on the kernel PCA benchmark's s = 1000 block (E's effective rank ~148,
# measured), 0.8 % on the norm, below the 2.9 % spread of the exact value between different
# held-out samples of 1000 rows; sqrt(2 / p) = 20 % at worst (E of rank one). Samples of at
# most 2 p rows are computed exactly (the probes would cost as much).
ERROR_PROBES = 50


def nystrom_error(
    sample: np.ndarray, nmap: NystromMap, *, probes: int | None = ERROR_PROBES, random_state=0
) -> float:
    """Relative Frobenius error of the Nyström approximation on the kernel block of ``sample``.

    The error is ||K_ss - Phi_s Phi_sᵀ||_F / ||K_ss||_F, with the kernel blocks made in float64
    in row blocks on the cores. It depends on the sample's size, not only on the
    approximation: at fixed quality it falls as the sample grows, since the diagonal's share
    of the error falls. For a sample of more than 2 ``probes`` rows the numerator is
    estimated from ``probes`` Gaussian probes g (Hutchinson 1989: E ||E g||² = ||E||_F²)
    instead of forming Phi_s Phi_sᵀ.

    Parameters
    ----------
    sample : array-like of shape (s, n_features)
        Held-out rows, in memory (converted to float64).
    nmap : NystromMap
        The map, from `nystrom_map`.
    probes : int or None, default ERROR_PROBES
        The number of probes; None: the exact numerator.
    random_state : int, numpy Generator, RandomState or None, default 0
        Seeds the probes.

    Returns
    -------
    float
        The relative error (exact, or its estimate from the probes).

    Raises
    ------
    InputError
        With probes, a ``random_state`` that is not None, an int, a Generator or a
        RandomState.
    """
    x = np.asarray(sample, dtype=np.float64)
    s = x.shape[0]
    with RowBlockPool() as pool:
        exact = kernel_rows(x, x, nmap.kernel, pool)
        c = kernel_rows(x, nmap.landmarks.astype(np.float64), nmap.kernel, pool)
    norm = max(np.linalg.norm(exact), 1e-300)
    if probes is None or s <= 2 * int(probes):
        phi_t = nmap.solve_t(c.T)  # Phi^T = R^-T C^T (r x s)
        return float(np.linalg.norm(exact - phi_t.T @ phi_t) / norm)
    g = check_random_state(random_state).standard_normal((s, int(probes)))
    eg = exact @ g - c @ nmap.solve(nmap.solve_t(c.T @ g))  # E g, W^-1 = R^-1 R^-T
    return float(np.sqrt(np.einsum("ij,ij->", eg, eg) / int(probes)) / norm)


def kernel_rows(x: np.ndarray, y: np.ndarray, kernel: dict, pool=None) -> np.ndarray:
    """k(x, y) in x's dtype, made in row blocks of x on ``pool`` (a `RowBlockPool`; a new one
    on the cores when None)."""
    out = np.empty((x.shape[0], y.shape[0]), np.result_type(x.dtype, np.float32))

    def fill(a, b):
        out[a:b] = kernel_block(x[a:b], y, **kernel)

    if pool is None:
        with RowBlockPool() as pool:
            pool.map(fill, x.shape[0])
    else:
        pool.map(fill, x.shape[0])
    return out


# Subspace iteration on C held in memory stops when every wanted pair's relative residual in
# the n-space problem is below max(tol, RESIDUAL_FLOOR * eps(C's dtype)). Rounding in C puts a
# floor under that residual: on the kernel PCA benchmark's 20 000 x 2000 C it levelled off at
# 2.3-5.6 eps in float32 and 8-11 eps in float64 (measured); 64 eps stops at the floor with a
# margin for other data, well before the result could improve further. (The residual of the
# r x r problem is no substitute: R^-1 amplifies C's rounding there, and it levels off at
# ~4000 eps on the same data, measured.)
RESIDUAL_FLOOR = 64


def nystrom_top_eigh(
    X: np.ndarray,
    nmap: NystromMap,
    k: int,
    *,
    n_oversamples: int = 20,
    n_iter: int = 6,
    tol: float = 0.0,
    random_state=0,
    threads=None,
):
    """Top ``k`` eigenpairs of the centred Nyström kernel of the rows of ``X`` (in memory).

    The matrix is A = Phic Phicᵀ (n x n, never formed), Phic = Cc R⁻¹, Cc = C - 1 muᵀ,
    C = k(X, L), mu its column means. Randomized subspace iteration (Halko, Martinsson &
    Tropp 2011) runs on the r x r matrix M = Phicᵀ Phic = R⁻ᵀ Ccᵀ Cc R⁻¹, whose nonzero
    eigenvalues are A's: each pass is T = Cc (R⁻¹ Q) and M Q = R⁻ᵀ (Ccᵀ T). A Ritz pair
    (theta, v) of M gives y = T v = Phic (Q v), A's Ritz vector scaled to ||y||² = theta,
    which is kernel PCA's training embedding. After each pass the residual
    ||A y - theta y|| / (theta ||y||) of every wanted pair is checked.

    C (n x r) is made here, in row blocks on ``threads`` threads (`RowBlockPool`), and held
    in memory in ``X``'s precision (float32 for float32 ``X``, else float64); the first pass
    runs on each block while it is in cache, and each later pass reads C once. C is stored
    centred by the landmarks' own column means; the rest of the centring is applied to the
    products. The start block is the dominant subspace of the landmarks' own centred
    features (subspace iteration from a random block, no pass over C).

    Parameters
    ----------
    X : array-like of shape (n_samples, n_features)
        The rows, in memory.
    nmap : NystromMap
        The map, from `nystrom_map` (r = ``nmap.rank``).
    k : int
        The number of eigenpairs, at most r.
    n_oversamples : int, default 20
        Extra columns beyond k (block width min(r, k + ``n_oversamples``)).
    n_iter : int, default 6
        At most ``n_iter`` + 1 passes over C.
    tol : float, default 0.0
        Stop once every wanted pair's relative residual is at most max(``tol``,
        ``RESIDUAL_FLOOR`` times the machine epsilon of C's dtype), the floor that rounding
        in C puts under it. With 0 the passes are the method's (record "completed" when the
        floor was not reached); a ``tol`` > 0 not reached is ``converged=False``.
    random_state : int, numpy Generator, RandomState or None, default 0
        Seeds the start block.
    threads : int or None, default None
        Threads of the row blocks (None: the cores).

    Returns
    -------
    values : ndarray of shape (k,)
        The eigenvalues, descending, float64.
    vectors : ndarray of shape (r, k)
        Orthonormal eigenvectors of M: the principal directions in the feature space of
        Phi.
    embedding : ndarray of shape (n_samples, k)
        Y = Phic V, float64, with ||y_j||² = the j-th eigenvalue.
    mean : ndarray of shape (r,)
        mu, the column means of C, float64.
    info : dict
        ``"passes"``, ``"residual"`` (the largest relative residual), ``"converged"``,
        ``"threads"`` and the convergence record ``"record"``.

    Raises
    ------
    InputError
        A ``random_state`` that is not None, an int, a Generator or a RandomState.
    """
    X = np.asarray(X)
    n, r = X.shape[0], nmap.rank
    dt = np.dtype(np.float32 if X.dtype == np.float32 else np.float64)
    width = min(r, k + max(int(n_oversamples), 0))
    q = _landmark_start(nmap, width, check_random_state(random_state))
    stop = max(float(tol), RESIDUAL_FLOOR * float(np.finfo(dt).eps))
    R = nmap.factor
    mu0 = R.mean(axis=1) @ R  # column means of W = R^T R
    C = np.empty((n, r), dt)  # C - 1 mu0^T
    T = np.empty((n, width), dt)
    delta = None
    with RowBlockPool(threads) as pool:
        for it in range(int(n_iter) + 1):
            Z = nmap.solve(q)
            if delta is None:  # the first pass makes C
                shift = np.zeros(width)
                sums = pool.map(_first_pass(X, nmap, mu0.astype(dt), Z.astype(dt), C, T), n)
                delta = np.sum([s[2] for s in sums], axis=0) / n
            else:
                shift = Z.T @ delta  # T = C' Z - 1 (delta^T Z)
                sums = pool.map(_pass(C, Z.astype(dt), shift.astype(dt), T), n)
            G = np.sum([s[0] for s in sums], axis=0)  # C'^T T_used
            tsum = np.sum([s[1] for s in sums], axis=0)  # 1^T T_used
            late = Z.T @ delta - shift  # the part of the centring the pass did not apply
            if np.any(late):
                T -= late.astype(dt)
                G -= n * np.outer(delta, late)
                tsum -= n * late
            aq = nmap.solve_t(G - np.outer(delta, tsum))  # M Q = R^-T Cc^T T
            small = q.T @ aq
            w, v = scipy.linalg.eigh((small + small.T) / 2)
            order = np.argsort(w)[::-1][:k]
            w, v = w[order], v[:, order]
            y = np.asarray(T @ v.astype(dt), np.float64)  # Phic Q v
            s = nmap.solve(aq @ v)  # A y = Phic M Q v = Cc s
            s_dt = s.astype(dt)
            ay = np.concatenate(pool.map(lambda a, b: C[a:b] @ s_dt, n))
            ay = ay.astype(np.float64) - delta @ s
            scale = np.maximum(np.abs(w) * np.linalg.norm(y, axis=0), np.finfo(np.float64).tiny)
            residual = float(np.max(np.linalg.norm(ay - y * w, axis=0) / scale))
            if residual <= stop or it == int(n_iter):
                break
            q, _ = np.linalg.qr(aq)
    return (
        w,
        q @ v,
        y,
        mu0 + delta,
        {
            "passes": it + 1,
            "residual": residual,
            "converged": bool(residual <= stop),
            "threads": pool.threads,
            "record": _record(k, it + 1, residual, stop, tol),
        },
    )


def _record(k: int, passes: int, residual: float, stop: float, tol: float) -> dict:
    """`nystrom_top_eigh`'s convergence record. tol = 0 asks for "as accurate as n_iter + 1
    passes make it" (subspace iteration's fixed passes, stopped early at the rounding floor):
    "completed"; a tol > 0 not reached is not converged."""
    reached, asked = bool(residual <= stop), float(tol) > 0
    return record(
        f"top {k} eigenpairs of the centred Nyström kernel",
        "nystrom subspace iteration",
        converged=reached or not asked,
        iterations=passes,
        residual=residual,
        tol=stop,
        passes=passes,
        status="converged"
        if reached
        else "completed"
        if not asked
        else f"stopped after n_iter + 1 = {passes} passes",
        measure="max ||A y - theta y|| / (theta ||y||) of the wanted pairs",
    )


def _first_pass(X, nmap, mu0, Z, C, T):
    """A block's part of the first pass: C' = k(X, L) - mu0 into C, T' = C' Z into T; returns
    (C'^T T', 1^T T', C's column sums), float64."""
    marks = nmap.landmarks.astype(X.dtype, copy=False)  # once, not per block

    def run(a, b):
        c = kernel_block(X[a:b], marks, **nmap.kernel)
        c -= mu0
        C[a:b] = c
        t = T[a:b] = c @ Z
        return (
            np.asarray(c.T @ t, np.float64),
            t.sum(axis=0, dtype=np.float64),
            c.sum(axis=0, dtype=np.float64),
        )

    return run


def _pass(C, Z, shift, T):
    """A block's part of a later pass: T = C' Z - shift into T; returns (C'^T T, 1^T T)."""

    def run(a, b):
        c = C[a:b]
        t = c @ Z
        t -= shift
        T[a:b] = t
        return np.asarray(c.T @ t, np.float64), t.sum(axis=0, dtype=np.float64)

    return run


LANDMARK_START_ITERS = 2  # measured: 2 and 4 give the same residual after the first pass


def _landmark_start(nmap: NystromMap, width: int, rng) -> np.ndarray:
    """An orthonormal r x ``width`` start for `nystrom_top_eigh`: subspace iteration on the
    landmarks' own centred features. The kept landmarks' feature rows are Phi_L = W R^-1 = R^T
    (m x r), so each step costs two triangular products with R (r^2 width / 2 flops each:
    ``?trmm``, which reads only R's triangle and was faster than the dense product), no pass
    over C; the landmarks are a sample of the rows, so their top directions approximate those
    of all rows."""
    R = np.asarray(nmap.factor, np.float64)
    mu = R.mean(axis=1)  # column means of Phi_L = R^T
    q, _ = np.linalg.qr(rng.standard_normal((R.shape[0], width)))
    for _ in range(LANDMARK_START_ITERS):
        z = blas.dtrmm(1.0, R, q, trans_a=1) - mu @ q  # Phi_Lc q = R^T q - 1 mu^T q (m x width)
        rz = blas.dtrmm(1.0, R, z)
        q, _ = np.linalg.qr(rz - np.outer(mu, z.sum(axis=0)))  # Phi_Lc^T Phi_Lc q
    return q
