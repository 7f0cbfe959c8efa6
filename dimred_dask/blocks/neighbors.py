"""k nearest neighbours between in-memory blocks of rows (NumPy only).

``block_topk(a, b, k, ...)`` returns, for every row of ``a``, the ``k`` nearest rows of ``b``
(their indices offset by ``b_offset``, and distances), nearest first, ties broken by the
smaller index so the result does not depend on the order blocks are visited in.
``merge_topk`` merges two such candidate lists. Distances are computed in float64 (the
expansion ||a||^2 + ||b||^2 - 2 a.b in float32 loses the small distances that decide
who is nearest), and returned in float64. Sparse blocks (``scipy.sparse``) stay sparse: their
distances come from sparse products (``blocks.kernels.SPARSE_METRICS``).
"""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from .kernels import distance_block
from .sparse import csr64

PANEL_ROWS = 1024  # rows of ``a`` per distance panel
# entries of one distance panel (64 MiB of float64): the columns of ``b`` are taken in slices
# of PANEL_ENTRIES // rows, so memory does not grow with len(b) (a 1000-row recall sample
# against 1 000 000 rows in one panel needed 8 GB, and its temporaries took a 24 GB machine)
PANEL_ENTRIES = 1 << 23
# exact euclidean kNN of dense rows with up to this many columns by a k-d tree (scipy's
# cKDTree, on all cores) instead of distance panels: O(n log n) against O(n^2 d) when d is
# small. Off (0) by default: the tree's distances are the exact differences', which differ
# from the panels' (||a||^2 + ||b||^2 - 2 a.b) in the 13th digit, and the exact MVU solve of a
# perturbed graph in the test suite flips between "optimal" and "optimal_inaccurate" on such
# differences; 16 suits low-dimensional data once that solve is made robust.
KDTREE_MAX_DIM = 0


def _ordered_topk(d: np.ndarray, idx: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The k smallest of each row of ``d`` (candidate indices ``idx``, same shape), sorted by
    (distance, index)."""
    k = min(k, d.shape[1])
    if k < d.shape[1]:
        part = np.argpartition(d, k - 1, axis=1)[:, :k]
        kth = np.take_along_axis(d, part[:, k - 1:k], axis=1)
        # include every tie of the k-th distance, so the tie-break by index is exact
        if (d == kth).sum(axis=1).max() > 1:
            part = np.argsort(d, axis=1, kind="stable")[:, : k + (d == kth).sum(axis=1).max()]
        d_c = np.take_along_axis(d, part, axis=1)
        i_c = np.take_along_axis(idx, part, axis=1)
    else:
        d_c, i_c = d, idx
    order = np.lexsort((i_c, d_c), axis=1)[:, :k]
    return np.take_along_axis(i_c, order, axis=1), np.take_along_axis(d_c, order, axis=1)


def block_topk(a: np.ndarray, b: np.ndarray, k: int, *, b_offset: int = 0,
               metric: str = "euclidean", p: float = 2.0) -> tuple[np.ndarray, np.ndarray]:
    """(indices int64 (len(a), min(k, len(b))), distances float64) of the nearest rows of b."""
    a = csr64(a) if sp.issparse(a) else np.asarray(a, dtype=np.float64)
    b = csr64(b) if sp.issparse(b) else np.asarray(b, dtype=np.float64)
    kk = min(k, b.shape[0])
    out_i = np.empty((a.shape[0], kk), dtype=np.int64)
    out_d = np.empty((a.shape[0], kk), dtype=np.float64)
    cols = np.arange(b_offset, b_offset + b.shape[0], dtype=np.int64)
    width = max(kk, PANEL_ENTRIES // max(1, min(PANEL_ROWS, a.shape[0])))
    for s in range(0, a.shape[0], PANEL_ROWS):
        best = None
        for c in range(0, max(1, b.shape[0]), width):
            d = distance_block(a[s:s + PANEL_ROWS], b[c:c + width], metric, p)
            cand = _ordered_topk(d, np.broadcast_to(cols[c:c + width], d.shape), kk)
            if best is not None:  # disjoint columns: the k smallest of the union
                cand = _ordered_topk(np.concatenate([best[1], cand[1]], axis=1),
                                     np.concatenate([best[0], cand[0]], axis=1), kk)
            best = cand
        out_i[s:s + PANEL_ROWS], out_d[s:s + PANEL_ROWS] = best
    return out_i, out_d


def kdtree_topk(x: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """(indices int64 (n, min(k, n)), euclidean distances float64) of the nearest rows of
    ``x`` to each row of ``x`` (itself included), sorted by (distance, index) as `block_topk`
    sorts them: the tree is asked for a few more, and a row whose k-th distance ties with the
    last one fetched is searched again by `block_topk`, so ties are broken exactly."""
    from scipy.spatial import cKDTree

    x = np.asarray(x, dtype=np.float64)
    n = x.shape[0]
    k = min(int(k), n)
    fetch = min(n, k + 4)
    dist, idx = cKDTree(x).query(x, fetch, workers=-1)
    dist, idx = dist.reshape(n, fetch), idx.reshape(n, fetch).astype(np.int64)
    order = np.lexsort((idx, dist), axis=1)
    idx, dist = np.take_along_axis(idx, order, axis=1), np.take_along_axis(dist, order, axis=1)
    if fetch > k:
        rows = np.nonzero(dist[:, k - 1] == dist[:, fetch - 1])[0]
        if rows.size:
            idx[rows, :k], dist[rows, :k] = block_topk(x[rows], x, k)
    return np.ascontiguousarray(idx[:, :k]), np.ascontiguousarray(dist[:, :k])


def merge_topk(x: tuple, y: tuple, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Merge two candidate lists (indices, distances) of the same rows; duplicates of an
    index (the same neighbour found twice) are kept once."""
    idx = np.concatenate([x[0], y[0]], axis=1)
    dist = np.concatenate([x[1], y[1]], axis=1)
    order = np.lexsort((dist, idx), axis=1)  # group equal indices, nearest copy first
    idx = np.take_along_axis(idx, order, axis=1)
    dist = np.take_along_axis(dist, order, axis=1)
    dup = np.zeros_like(idx, dtype=bool)
    dup[:, 1:] = idx[:, 1:] == idx[:, :-1]
    dist = np.where(dup, np.inf, dist)
    return _ordered_topk(dist, idx, k)


def drop_self(indices: np.ndarray, distances: np.ndarray, row_ids: np.ndarray, k: int):
    """From k + 1 candidates per row, drop the row itself (or, when the row is not among them,
    which happens only with more than k exact duplicates of it, the last candidate)."""
    is_self = indices == row_ids[:, None]
    has = is_self.any(axis=1)
    is_self[~has, -1] = True  # no self: drop the farthest instead
    keep = ~is_self
    # exactly one False per row now (a row cannot list itself twice)
    n = indices.shape[0]
    return (indices[keep].reshape(n, -1)[:, :k], distances[keep].reshape(n, -1)[:, :k])


def merge_candidates(point: np.ndarray, nbr: np.ndarray, dist: np.ndarray, n: int, k: int):
    """Best ``k`` distinct neighbours per point from (point, neighbour, distance) triples
    (the partitioned backend: a point's candidates from the cells it belongs to). Points
    with fewer than k distinct candidates get -1 / inf padding."""
    keep = point != nbr
    point, nbr, dist = point[keep], nbr[keep], dist[keep]
    order = np.lexsort((dist, nbr, point))
    point, nbr, dist = point[order], nbr[order], dist[order]
    first = np.ones(point.size, dtype=bool)
    first[1:] = (point[1:] != point[:-1]) | (nbr[1:] != nbr[:-1])
    point, nbr, dist = point[first], nbr[first], dist[first]
    order = np.lexsort((nbr, dist, point))
    point, nbr, dist = point[order], nbr[order], dist[order]
    starts = np.searchsorted(point, np.arange(n))
    rank = np.arange(point.size) - starts[point]
    sel = rank < k
    out_i = np.full((n, k), -1, dtype=np.int64)
    out_d = np.full((n, k), np.inf, dtype=np.float64)
    out_i[point[sel], rank[sel]] = nbr[sel]
    out_d[point[sel], rank[sel]] = dist[sel]
    return out_i, out_d


def reconstruction_weights_block(x: np.ndarray, neighbours: np.ndarray, reg: float = 1e-3):
    """LLE's reconstruction weights (Roweis & Saul 2000): for each row x_i of ``x`` (b, d) and its k
    neighbours ``neighbours[i]`` (b, k, d), the w minimising ||x_i - sum_j w_j n_j||^2 with
    sum_j w_j = 1: solve G w = 1 with G = Z Z^T, Z = N - x_i (the local Gram matrix), then
    normalise w to sum 1. G is singular when k > d (and may be when points are degenerate), so
    ``reg * trace(G)`` is added to its diagonal (scikit-learn's convention; a zero trace, all
    neighbours equal to x_i, gets reg itself). float64; returns (b, k)."""
    x = np.asarray(x, dtype=np.float64)
    z = np.asarray(neighbours, dtype=np.float64) - x[:, None, :]
    g = np.einsum("bkd,bld->bkl", z, z)
    k = g.shape[1]
    tr = np.trace(g, axis1=1, axis2=2)
    ridge = np.where(tr > 0, reg * tr, reg)
    g[:, np.arange(k), np.arange(k)] += ridge[:, None]
    w = np.linalg.solve(g, np.ones((g.shape[0], k, 1)))[..., 0]
    return w / w.sum(axis=1, keepdims=True)
