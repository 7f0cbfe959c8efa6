"""Nyström approximation (Williams & Seeger 2001) of a kernel matrix with m landmarks.

With C = k(X, L) (n x m) and W = k(L, L) = U S U^T, K ~ C W^+ C^T = Phi Phi^T where
Phi = C U S^-1/2 is an explicit feature map of rank r <= m (eigenvalues of W below
``RANK_TOL * max`` are dropped). Kernel PCA of the approximation is then linear PCA of Phi:
one pass over the rows computes Phi's mean and r x r scatter (``column_stats``), whose
eigendecomposition is the one-shot eigendecomposition of the centred approximate kernel.
A new point x maps to phi(x) = k(x, L) U S^-1/2, which is also the out-of-sample extension.

Landmarks (``landmarks=``): ``uniform`` rows; ``kmeans++`` seeds or ``kmeans`` centres
(10 Lloyd iterations) computed on a uniform sample of ``LANDMARK_SAMPLE_FACTOR * m`` rows.
The approximation error is measured on a held-out sample of rows: the relative Frobenius
error of its kernel block, ||K_ss - Phi_s Phi_s^T||_F / ||K_ss||_F.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .._compute import compute
from .._validation import check_random_state, is_dask
from ..blocks.kernels import kernel_block
from ..blocks.landmarks import kmeans, kmeans_plusplus
from ..errors import InputError

__all__ = ["LANDMARK_METHODS", "NystromMap", "take_rows", "choose_landmarks", "nystrom_map",
           "nystrom_features", "nystrom_error"]

LANDMARK_METHODS = ("uniform", "kmeans++", "kmeans")
LANDMARK_SAMPLE_FACTOR = 10
RANK_TOL = 1e-10


def take_rows(X, idx: np.ndarray, stage: str = "row sample") -> np.ndarray:
    """Rows ``idx`` (sorted) of X as a NumPy array; for dask only the chunks holding them are read."""
    idx = np.sort(np.asarray(idx))
    if is_dask(X):
        (rows,) = compute(X[idx], stage=stage)
        return np.asarray(rows)
    return np.asarray(X[idx])


def choose_landmarks(X, m: int, method: str = "kmeans++", random_state=0):
    """(landmark points (m, d), their row indices or None for k-means centres)."""
    n = X.shape[0]
    if method not in LANDMARK_METHODS:
        raise InputError(f"landmarks must be one of {', '.join(LANDMARK_METHODS)}; found "
                         f"{method!r}.", "pass landmarks='kmeans++' (the default).")
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
    landmarks: np.ndarray  # (m, d)
    kernel: dict  # resolved kernel parameters (blocks.kernels.check_kernel)
    proj: np.ndarray  # (m, r) = U_r S_r^-1/2
    w_eigenvalues: np.ndarray  # (r,) kept eigenvalues of W, descending

    @property
    def rank(self) -> int:
        return self.proj.shape[1]

    def kernel_to_landmarks(self, block: np.ndarray) -> np.ndarray:
        return kernel_block(np.asarray(block), self.landmarks.astype(block.dtype, copy=False),
                            **self.kernel)

    def features(self, block: np.ndarray) -> np.ndarray:
        """phi(x) = k(x, L) U S^-1/2 for the rows of ``block`` (rows, r), in its dtype."""
        c = self.kernel_to_landmarks(block)
        return c @ self.proj.astype(c.dtype, copy=False)


def nystrom_map(landmarks: np.ndarray, kernel: dict) -> NystromMap:
    w = kernel_block(landmarks.astype(np.float64), landmarks.astype(np.float64), **kernel)
    s, u = np.linalg.eigh((w + w.T) / 2)
    order = np.argsort(s)[::-1]
    s, u = s[order], u[:, order]
    keep = s > RANK_TOL * max(s[0], 0.0) if s[0] > 0 else np.zeros_like(s, dtype=bool)
    if not keep.any():
        raise InputError("The landmarks' kernel matrix has no positive eigenvalue, so the "
                         f"Nyström map is empty (kernel {kernel}).",
                         "use a positive semidefinite kernel (gaussian, laplacian, polynomial "
                         "with coef0 >= 0), or the dense/randomized solver.")
    return NystromMap(np.asarray(landmarks), dict(kernel), u[:, keep] / np.sqrt(s[keep]),
                      s[keep])


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
    phi = nmap.features(x)
    return float(np.linalg.norm(exact - phi @ phi.T) / max(np.linalg.norm(exact), 1e-300))
