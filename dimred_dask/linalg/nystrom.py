"""Nyström approximation (Williams & Seeger 2001) of a kernel matrix with m landmarks.

With C = k(X, L) (n x m) and W = k(L, L), K ~ C W^-1 C^T = Phi Phi^T with Phi = C R^-1,
W = R^T R. R is W's Cholesky factor (LAPACK ``?potrf``, blocked: 0.05 s at m = 2000 on this
machine, where the pivoted ``?pstrf`` takes 0.32 s and an eigendecomposition of W ~1 s) when
every pivot R_jj^2 (landmark j's squared distance in feature space from the span of the
landmarks before it) is at least ``RANK_TOL`` times W's largest diagonal entry. Otherwise the
landmarks are nearly dependent and R comes from the rank-revealing pivoted Cholesky, which
drops the landmarks within ``RANK_TOL`` of the span of the others: the map then has rank
r < m over the r kept landmarks, in pivot order. R^-1 is applied by triangular solves; the
explicit inverse (``proj``) is formed only when asked for. Kernel PCA of the
approximation is linear PCA of Phi, and since Phi is a fixed linear map of C, one pass over
the rows for C's mean and r x r scatter S_C (``column_stats``) gives Phi's scatter
R^-T S_C R^-1, whose top eigenpairs are those of the centred approximate kernel. A new point
x maps to phi(x) = k(x, L) R^-1, which is also the out-of-sample extension.

Landmarks (``landmarks=``): ``uniform`` rows; ``kmeans++`` seeds or ``kmeans`` centres
(10 Lloyd iterations) computed on a uniform sample of ``LANDMARK_SAMPLE_FACTOR * m`` rows;
``auto``: k-means++ up to ``AUTO_KMEANSPP_MAX`` landmarks, uniform above. k-means++ costs
O(10 m^2 d) (the sample's distances to each new centre, with local trials), which for
m = 2000 is more than the whole fit; and the more landmarks, the less their placement
matters (measured: m = 300 on three Gaussian clusters, held-out error 0.085 k-means++
against 0.104 uniform; m = 2000 on the kernel PCA benchmark's data, 4.3e-6 against 4.8e-6).
The approximation error is measured on a held-out sample of rows: the relative Frobenius
error of its kernel block, ||K_ss - Phi_s Phi_s^T||_F / ||K_ss||_F.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np
import scipy.linalg
from scipy.linalg import lapack

from .._compute import compute
from .._validation import check_random_state, is_dask
from ..blocks.kernels import kernel_block
from ..blocks.landmarks import kmeans, kmeans_plusplus
from ..errors import InputError

__all__ = ["LANDMARK_METHODS", "NystromMap", "take_rows", "choose_landmarks", "nystrom_map",
           "resolve_landmark_method", "nystrom_features", "nystrom_error", "nystrom_top_eigh"]

LANDMARK_METHODS = ("auto", "uniform", "kmeans++", "kmeans")
LANDMARK_SAMPLE_FACTOR = 10
AUTO_KMEANSPP_MAX = 500
# Pivoted Cholesky stops when the largest remaining Schur-complement diagonal of W is below
# RANK_TOL times W's largest diagonal entry: the dropped landmarks then change the
# approximation by at most that much per entry of W. 1e-10 is the threshold the earlier
# eigenvalue truncation used.
RANK_TOL = 1e-10


def take_rows(X, idx: np.ndarray, stage: str = "row sample") -> np.ndarray:
    """Rows ``idx`` (sorted) of X as a NumPy array; for dask only the chunks holding them are read."""
    idx = np.sort(np.asarray(idx))
    if is_dask(X):
        (rows,) = compute(X[idx], stage=stage)
        return np.asarray(rows)
    return np.asarray(X[idx])


def resolve_landmark_method(method: str, m: int) -> str:
    """The landmark choice ``auto`` stands for with ``m`` landmarks; others unchanged."""
    if method not in LANDMARK_METHODS:
        raise InputError(f"landmarks must be one of {', '.join(LANDMARK_METHODS)}; found "
                         f"{method!r}.", "pass landmarks='auto' (the default: k-means++ up "
                         f"to {AUTO_KMEANSPP_MAX} landmarks, uniform above).")
    if method == "auto":
        return "kmeans++" if m <= AUTO_KMEANSPP_MAX else "uniform"
    return method


def choose_landmarks(X, m: int, method: str = "auto", random_state=0):
    """(landmark points (m, d), their row indices or None for k-means centres)."""
    n = X.shape[0]
    method = resolve_landmark_method(method, m)
    if not isinstance(m, (int, np.integer)) or isinstance(m, bool) or not 1 <= m <= n:
        raise InputError(f"n_landmarks must be an int in [1, n_samples={n}]; found {m!r}.",
                         f"pass n_landmarks between 1 and {n} (a few hundred to a few "
                         "thousand is usual).")
    rng = check_random_state(random_state)
    if method == "uniform":
        idx = np.sort(rng.choice(n, size=m, replace=False))
        return take_rows(X, idx, "landmark rows"), idx
    size = min(n, LANDMARK_SAMPLE_FACTOR * m)
    sample_idx = np.sort(rng.choice(n, size=size, replace=False))
    sample = take_rows(X, sample_idx, "landmark sample")
    if method == "kmeans++":
        pick = np.sort(kmeans_plusplus(sample, m, rng))
        return sample[pick], sample_idx[pick]
    return kmeans(sample, m, rng), None


@dataclass
class NystromMap:
    landmarks: np.ndarray  # (r, d) the kept landmarks (in pivot order when some were dropped)
    kernel: dict  # resolved kernel parameters (blocks.kernels.check_kernel)
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
        return scipy.linalg.solve_triangular(self.factor, np.asarray(Z, np.float64),
                                             lower=False, check_finite=False)

    def solve_t(self, Z: np.ndarray) -> np.ndarray:
        """R^-T Z (float64)."""
        return scipy.linalg.solve_triangular(self.factor, np.asarray(Z, np.float64),
                                             trans="T", lower=False, check_finite=False)

    def kernel_to_landmarks(self, block: np.ndarray) -> np.ndarray:
        return kernel_block(np.asarray(block), self.landmarks.astype(block.dtype, copy=False),
                            **self.kernel)

    def features(self, block: np.ndarray) -> np.ndarray:
        """phi(x) = k(x, L) R^-1 for the rows of ``block`` (rows, r), in its dtype."""
        c = self.kernel_to_landmarks(block)
        return c @ self.proj.astype(c.dtype, copy=False)


def nystrom_map(landmarks: np.ndarray, kernel: dict) -> NystromMap:
    """The Nyström feature map of ``landmarks`` (m, d) for a resolved kernel."""
    L = np.asarray(landmarks)
    w = kernel_block(L.astype(np.float64), L.astype(np.float64), **kernel)
    w = (w + w.T) / 2
    top = float(np.max(np.diag(w))) if w.size else 0.0
    if not top > 0:
        raise InputError("The landmarks' kernel matrix has no positive diagonal entry, so the "
                         f"Nyström map is empty (kernel {kernel}).",
                         "use a positive semidefinite kernel (gaussian, laplacian, polynomial "
                         "with coef0 >= 0), or the dense/randomized solver.")
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
    return NystromMap(L[keep], dict(kernel), R,
                      {"n_landmarks": int(L.shape[0]), "rank": int(keep.size), "pivots": keep,
                       "factorization": how})


def nystrom_features(X, nmap: NystromMap):
    """Phi for all rows of X: lazy (row chunks) for dask input, NumPy otherwise."""
    if not is_dask(X):
        return nmap.features(np.asarray(X))
    if X.numblocks[1] != 1:
        X = X.rechunk({1: -1})
    return X.map_blocks(nmap.features, chunks=(X.chunks[0], (nmap.rank,)), dtype=X.dtype)


def nystrom_error(sample: np.ndarray, nmap: NystromMap) -> float:
    """Relative Frobenius error of the approximation on the kernel block of ``sample``."""
    x = np.asarray(sample, dtype=np.float64)
    exact = kernel_block(x, x, **nmap.kernel)
    phi_t = nmap.solve_t(nmap.kernel_to_landmarks(x).T)  # Phi^T = R^-T C^T (r x s)
    return float(np.linalg.norm(exact - phi_t.T @ phi_t) / max(np.linalg.norm(exact), 1e-300))


# Subspace iteration on a centred C held in memory stops when every wanted pair's relative
# residual in the n-space problem is below max(tol, RESIDUAL_FLOOR * eps(C's dtype)). Rounding
# in C puts a floor under that residual: on the kernel PCA benchmark's 20 000 x 2000 C it
# levelled off at 2.3-5.6 eps in float32 and 8-11 eps in float64 (measured); 64 eps stops at
# the floor with a margin for other data, well before the result could improve further.
RESIDUAL_FLOOR = 64


def nystrom_top_eigh(Cc: np.ndarray, nmap: NystromMap, k: int, *, n_oversamples: int = 20,
                     n_iter: int = 6, tol: float = 0.0, random_state=0):
    """Top ``k`` eigenpairs of the centred Nyström kernel A = Phic Phic^T (n x n, never formed),
    Phic = Cc R^-1, for Cc = C - column means held in memory (NumPy).

    Randomized subspace iteration (Halko, Martinsson & Tropp 2011) on the r x r matrix
    M = Phic^T Phic = R^-T Cc^T Cc R^-1, whose nonzero eigenvalues are A's: each pass is
    T = Cc (R^-1 Q) and M Q = R^-T (Cc^T T), 4 n r (k + p) flops. The pass also gives the
    embedding: for a Ritz pair (theta, v) of M on Q, y = T v = Phic (Q v) is A's Ritz vector
    scaled to ||y||^2 = theta, which is kernel PCA's training embedding. After each pass the
    residual of the problem that is solved, ||A y - theta y|| / (theta ||y||) with
    A y = Phic (M Q v) (one more product with k columns), is checked; the iteration stops when
    it is at most max(tol, RESIDUAL_FLOOR * eps) for every wanted pair, or after
    ``n_iter + 1`` passes.

    The start is not random but the dominant subspace of the landmarks' own problem (see
    `_landmark_start`), which saves the first pass over C: on the kernel PCA benchmark's
    20 000 x 2000 C the residual after one pass is 1e-4 from there against 80 from a random
    start, and the iteration stops after 2 passes instead of 3 (measured).

    Returns (eigenvalues (k,) descending, V (r, k) orthonormal eigenvectors of M,
    Y = Phic V (n, k) float64, info with the passes and the final residual).
    """
    r, dt = nmap.rank, Cc.dtype
    width = min(r, k + max(int(n_oversamples), 0))
    q = _landmark_start(nmap, width, check_random_state(random_state))
    stop = max(float(tol), RESIDUAL_FLOOR * float(np.finfo(dt).eps))
    for it in range(int(n_iter) + 1):
        T = Cc @ nmap.solve(q).astype(dt)  # Phic Q (n, w)
        aq = nmap.solve_t(Cc.T @ T)  # M Q (r, w)
        small = q.T @ aq
        w, v = scipy.linalg.eigh((small + small.T) / 2)
        order = np.argsort(w)[::-1][:k]
        w, v = w[order], v[:, order]
        y = np.asarray(T @ v.astype(dt), np.float64)  # Phic Q v
        ay = np.asarray(Cc @ nmap.solve(aq @ v).astype(dt), np.float64)  # A y = Phic M Q v
        scale = np.maximum(np.abs(w) * np.linalg.norm(y, axis=0), np.finfo(np.float64).tiny)
        residual = float(np.max(np.linalg.norm(ay - y * w, axis=0) / scale))
        if residual <= stop or it == int(n_iter):
            break
        q, _ = np.linalg.qr(aq)
    return w, q @ v, y, {"passes": it + 1, "residual": residual,
                         "converged": bool(residual <= stop)}


LANDMARK_START_ITERS = 2  # measured: 2 and 4 give the same residual after the first pass


def _landmark_start(nmap: NystromMap, width: int, rng) -> np.ndarray:
    """An orthonormal r x ``width`` start for `nystrom_top_eigh`: subspace iteration on the
    landmarks' own centred features. The kept landmarks' feature rows are Phi_L = W R^-1 = R^T
    (m x r), so each step costs two products with R (r^2 width flops each), no pass over C;
    the landmarks are a sample of the rows, so their top directions approximate those of all
    rows."""
    R = nmap.factor
    mu = R.mean(axis=1)  # column means of Phi_L = R^T
    q, _ = np.linalg.qr(rng.standard_normal((R.shape[0], width)))
    for _ in range(LANDMARK_START_ITERS):
        z = R.T @ q - mu @ q  # Phi_Lc q (m x width)
        q, _ = np.linalg.qr(R @ z - np.outer(mu, z.sum(axis=0)))  # Phi_Lc^T Phi_Lc q
    return q
