"""k-means on in-memory rows: assignment, Lloyd iterations, mini-batch updates (NumPy only).

Seeds come from `blocks.landmarks.kmeans_plusplus` (k-means++, Arthur & Vassilvitskii 2007).
Lloyd stops when the centres move less than ``tol`` times the mean per-feature variance of
the data in squared norm (scikit-learn's rule). Mini-batch k-means (Sculley 2010): each
centre moves toward the mean of its batch members with step count_batch / count_total.
"""

from __future__ import annotations

import numpy as np

from .kernels import sqeuclidean_block
from .landmarks import kmeans_plusplus

__all__ = ["assign", "lloyd", "kmeans_best_of", "minibatch_update"]


def assign(x: np.ndarray, centres: np.ndarray):
    """(labels int64, squared distance to the nearest centre float64) of each row."""
    d = sqeuclidean_block(np.asarray(x, np.float64), np.asarray(centres, np.float64))
    lab = np.argmin(d, axis=1)
    return lab.astype(np.int64), np.maximum(d[np.arange(d.shape[0]), lab], 0.0)


def _means(x, lab, k, old):
    counts = np.bincount(lab, minlength=k)
    sums = np.zeros_like(old)
    np.add.at(sums, lab, x)
    new = old.copy()
    moved = counts > 0
    new[moved] = sums[moved] / counts[moved, None]
    return new


def lloyd(x: np.ndarray, centres: np.ndarray, max_iter: int = 300, tol: float = 1e-4):
    """(centres, labels, inertia, iterations) of Lloyd's algorithm from ``centres``."""
    x = np.asarray(x, np.float64)
    c = np.asarray(centres, np.float64).copy()
    k = c.shape[0]
    thresh = tol * float(np.mean(np.var(x, axis=0)))
    it = 0
    for it in range(1, max_iter + 1):
        lab, _ = assign(x, c)
        new = _means(x, lab, k, c)
        shift = float(((new - c) ** 2).sum())
        c = new
        if shift <= thresh:
            break
    lab, d = assign(x, c)
    return c, lab, float(d.sum()), it


def kmeans_best_of(
    x: np.ndarray,
    k: int,
    rng: np.random.Generator,
    n_init: int = 10,
    max_iter: int = 300,
    tol: float = 1e-4,
):
    """The run of lowest inertia among ``n_init`` k-means++ starts: (centres, labels,
    inertia, iterations)."""
    best = None
    for _ in range(int(n_init)):
        seeds = np.asarray(x, np.float64)[kmeans_plusplus(np.asarray(x, np.float64), k, rng)]
        out = lloyd(x, seeds, max_iter, tol)
        if best is None or out[2] < best[2]:
            best = out
    return best


def minibatch_update(batch: np.ndarray, centres: np.ndarray, counts: np.ndarray):
    """One mini-batch step: (new centres, new counts)."""
    batch = np.asarray(batch, np.float64)
    lab, _ = assign(batch, centres)
    k = centres.shape[0]
    bc = np.bincount(lab, minlength=k)
    sums = np.zeros_like(centres)
    np.add.at(sums, lab, batch)
    counts = counts + bc
    c = centres.copy()
    hit = bc > 0
    step = bc[hit] / counts[hit]
    c[hit] = (1 - step)[:, None] * c[hit] + step[:, None] * (sums[hit] / bc[hit, None])
    return c, counts
