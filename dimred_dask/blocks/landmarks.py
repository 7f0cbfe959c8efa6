"""Landmark choice on an in-memory sample of rows: k-means++ seeding, Lloyd's k-means, max-min.

All deterministic for a given NumPy Generator.
"""

from __future__ import annotations

import numpy as np

from .kernels import distance_block, sqeuclidean_block


def kmeans_plusplus(x: np.ndarray, m: int, rng: np.random.Generator) -> np.ndarray:
    """Indices of ``m`` rows of ``x`` chosen by k-means++ (Arthur & Vassilvitskii 2007) with
    2 + log(m) local trials per centre, as scikit-learn does."""
    n = x.shape[0]
    trials = 2 + int(np.log(max(m, 2)))
    first = int(rng.integers(n))
    chosen = [first]
    x64 = np.asarray(x, dtype=np.float64)
    norms = np.einsum("ij,ij->i", x64, x64)

    def to(rows):  # squared distances of every row to x[rows], norms computed once
        d = x64 @ (-2.0 * x64[rows]).T
        d += norms[:, None]
        d += norms[rows][None, :]
        return np.maximum(d, 0.0, out=d)

    closest = to([first])[:, 0]
    for _ in range(1, m):
        total = closest.sum()
        if total <= 0:  # fewer distinct points than m: take unchosen rows in order
            rest = np.setdiff1d(np.arange(n), chosen)[: m - len(chosen)]
            chosen.extend(rest.tolist())
            break
        cand = np.searchsorted(np.cumsum(closest), rng.uniform(0, total, trials))
        cand = np.minimum(cand, n - 1)
        d = np.minimum(closest[:, None], to(cand))
        best = int(np.argmin(d.sum(axis=0)))
        chosen.append(int(cand[best]))
        closest = d[:, best]
    return np.asarray(chosen[:m])


def kmeans(x: np.ndarray, m: int, rng: np.random.Generator, n_iter: int = 10) -> np.ndarray:
    """``m`` k-means centres of ``x``: k-means++ seeds, then ``n_iter`` Lloyd iterations.
    An empty cluster keeps its previous centre."""
    centres = x[kmeans_plusplus(x, m, rng)].astype(np.float64)
    for _ in range(n_iter):
        label = np.argmin(sqeuclidean_block(x, centres.astype(x.dtype)), axis=1)
        counts = np.bincount(label, minlength=m)
        sums = np.zeros_like(centres)
        np.add.at(sums, label, x)
        moved = counts > 0
        centres[moved] = sums[moved] / counts[moved, None]
    return centres.astype(x.dtype)


def maxmin(
    x: np.ndarray, m: int, rng: np.random.Generator, metric: str = "euclidean", p: float = 2.0
) -> np.ndarray:
    """Indices of ``m`` rows by max-min (farthest point) selection from a random first row,
    the landmark choice de Silva & Tenenbaum (2003) recommend for landmark MDS."""
    n = x.shape[0]
    chosen = [int(rng.integers(n))]
    closest = distance_block(x, x[chosen], metric, p)[:, 0].astype(np.float64)
    for _ in range(1, m):
        nxt = int(np.argmax(closest))
        if closest[nxt] <= 0:
            rest = np.setdiff1d(np.arange(n), chosen)[: m - len(chosen)]
            chosen.extend(rest.tolist())
            break
        chosen.append(nxt)
        closest = np.minimum(closest, distance_block(x, x[nxt : nxt + 1], metric, p)[:, 0])
    return np.asarray(chosen[:m])
