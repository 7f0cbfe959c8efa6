"""k nearest neighbours between in-memory blocks of rows (NumPy only).

``block_topk(a, b, k, ...)`` returns, for every row of ``a``, the ``k`` nearest rows of ``b``
(their indices offset by ``b_offset``, and distances), nearest first, ties broken by the
smaller index so the result does not depend on the order blocks are visited in.
``merge_topk`` merges two such candidate lists. Distances are computed in float64 (the
expansion ||a||^2 + ||b||^2 - 2 a.b in float32 loses the small distances that decide
who is nearest), and returned in float64. Sparse blocks (``scipy.sparse``) stay sparse: their
distances come from sparse products (``blocks.kernels.SPARSE_METRICS``).
``exact_kth_distance`` gives the exact k-th neighbour distance of a sample of rows against
all rows, and ``recall_at`` a graph's recall from it.
"""

from __future__ import annotations

import numba
import numpy as np
import scipy.sparse as sp
from numba import njit, prange

from .kernels import distance_block
from .sparse import csr64

PANEL_ROWS = 1024  # rows of ``a`` per distance panel
# entries of one distance panel (64 MiB of float64): the columns of ``b`` are taken in slices
# of PANEL_ENTRIES // rows, so memory does not grow with len(b) (a 1000-row recall sample
# against 1 000 000 rows in one panel needed 8 GB, and its temporaries took a 24 GB machine)
PANEL_ENTRIES = 1 << 23
# exact euclidean kNN of dense rows with up to this many columns by a k-d tree (scipy's
# cKDTree, on all cores) instead of distance panels: O(n log n) against O(n^2 d) when d is
# small (in high dimensions the tree visits most leaves and the panels are faster).
KDTREE_MAX_DIM = 16
# ... and from this many rows: below, the panels cost little, and the graph keeps the
# panels' distances (||a||^2 + ||b||^2 - 2 a.b), which differ from the tree's exact
# differences in the 13th digit. The exact MVU solve (at most 3000 rows) of a perturbed
# graph flips between "optimal" and "optimal_inaccurate" on 1e-13 relative changes of its
# distances, so small inputs keep the panels' values.
KDTREE_MIN_ROWS = 4096
# ... and for dask input only while the one task that queries the tree holds at most this
# much (the rows, and indices and distances of k + 4 neighbours a row)
KDTREE_TASK_BYTES = 512 * 2**20


def _ordered_topk(d: np.ndarray, idx: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The k smallest of each row of ``d`` (candidate indices ``idx``, same shape), sorted by
    (distance, index)."""
    k = min(k, d.shape[1])
    if k < d.shape[1]:
        part = np.argpartition(d, k - 1, axis=1)[:, :k]
        kth = np.take_along_axis(d, part[:, k - 1 : k], axis=1)
        # include every tie of the k-th distance, so the tie-break by index is exact
        if (d == kth).sum(axis=1).max() > 1:
            part = np.argsort(d, axis=1, kind="stable")[:, : k + (d == kth).sum(axis=1).max()]
        d_c = np.take_along_axis(d, part, axis=1)
        i_c = np.take_along_axis(idx, part, axis=1)
    else:
        d_c, i_c = d, idx
    order = np.lexsort((i_c, d_c), axis=1)[:, :k]
    return np.take_along_axis(i_c, order, axis=1), np.take_along_axis(d_c, order, axis=1)


def block_topk(
    a: np.ndarray,
    b: np.ndarray,
    k: int,
    *,
    b_offset: int = 0,
    metric: str = "euclidean",
    p: float = 2.0,
) -> tuple[np.ndarray, np.ndarray]:
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
            d = distance_block(a[s : s + PANEL_ROWS], b[c : c + width], metric, p)
            cand = _ordered_topk(d, np.broadcast_to(cols[c : c + width], d.shape), kk)
            if best is not None:  # disjoint columns: the k smallest of the union
                cand = _ordered_topk(
                    np.concatenate([best[1], cand[1]], axis=1),
                    np.concatenate([best[0], cand[0]], axis=1),
                    kk,
                )
            best = cand
        out_i[s : s + PANEL_ROWS], out_d[s : s + PANEL_ROWS] = best
    return out_i, out_d


def streamed_topk(
    a: np.ndarray, blocks, k: int, *, metric: str = "euclidean", p: float = 2.0
) -> tuple[np.ndarray, np.ndarray]:
    """`block_topk` of ``a`` against rows that arrive as ``(offset, rows)`` blocks (read one at
    a time from a store): the k nearest of all of them, sorted by (distance, index), the same
    neighbours `block_topk` finds against the rows stacked."""
    best = None
    for offset, b in blocks:
        cand = block_topk(a, b, k, b_offset=offset, metric=metric, p=p)
        if best is not None:
            cand = _ordered_topk(
                np.concatenate([best[1], cand[1]], axis=1),
                np.concatenate([best[0], cand[0]], axis=1),
                k,
            )
        best = cand
    if best is None:
        raise ValueError("streamed_topk needs at least one block of rows")
    return best


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


def merge_candidates(
    point: np.ndarray, nbr: np.ndarray, dist: np.ndarray, n: int, k: int, offset: int = 0
):
    """Best ``k`` distinct neighbours per point from (point, neighbour, distance) triples
    (the partitioned backend: a point's candidates from the cells it belongs to): nearest
    first, ties by the smaller neighbour index, a neighbour listed twice kept at its smaller
    distance, the point itself dropped. Points with fewer than k distinct candidates get
    -1 / inf padding. The triples are grouped by point in one counting pass and each point's
    few candidates sorted on their own, on all threads (a global sort of the 10^8 triples of a
    10^6-row graph held one core for minutes). ``point`` counts from 0 to n - 1 for the rows
    ``offset`` to ``offset + n - 1`` (a range of the rows merged on its own): the neighbours
    are row numbers, the point itself is neighbour ``point + offset``."""
    point = np.ascontiguousarray(point)
    starts, order = _group_by_point(point, int(n))
    out_i = np.full((n, k), -1, dtype=np.int64)
    out_d = np.full((n, k), np.inf, dtype=np.float64)
    chunks = int(min(n, 8 * numba.get_num_threads())) if n else 0
    _merge_rows(
        starts,
        order,
        np.ascontiguousarray(nbr),
        np.ascontiguousarray(dist),
        int(k),
        int(offset),
        out_i,
        out_d,
        chunks,
    )
    return out_i, out_d


@njit(cache=True, nogil=True)
def _group_by_point(point, n):
    """(starts (n + 1), order): the triples of point i are order[starts[i]:starts[i + 1]],
    in their input order."""
    starts = np.zeros(n + 1, np.int64)
    for e in range(point.size):
        starts[point[e] + 1] += 1
    for i in range(n):
        starts[i + 1] += starts[i]
    pos = starts[:-1].copy()
    order = np.empty(point.size, np.int64)
    for e in range(point.size):
        p = point[e]
        order[pos[p]] = e
        pos[p] += 1
    return starts, order


@njit(parallel=True, cache=True, nogil=True)
def _merge_rows(starts, order, nbr, dist, k, offset, out_i, out_d, chunks):
    n = out_i.shape[0]
    for c in prange(chunks):
        for i in range(c * n // chunks, (c + 1) * n // chunks):
            s, e = starts[i], starts[i + 1]
            d = np.empty(e - s)
            j = np.empty(e - s, np.int64)
            m = 0
            for t in range(s, e):
                q = order[t]
                if nbr[q] != i + offset:
                    d[m] = dist[q]
                    j[m] = nbr[q]
                    m += 1
            d, j = d[:m], j[:m]
            by_j = np.argsort(j, kind="mergesort")
            d, j = d[by_j], j[by_j]
            u = 0  # each neighbour once, at its smallest distance
            for t in range(m):
                if u > 0 and j[t] == j[u - 1]:
                    d[u - 1] = min(d[u - 1], d[t])
                else:
                    j[u], d[u] = j[t], d[t]
                    u += 1
            by_d = np.argsort(d[:u], kind="mergesort")  # stable: ties stay in index order
            for r in range(min(k, u)):
                out_i[i, r] = j[by_d[r]]
                out_d[i, r] = d[by_d[r]]


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


# ---- exact k-th neighbour distances of a sample of rows (a graph's recall)


def exact_kth_distance(
    x,
    rows: np.ndarray,
    k: int,
    metric: str = "euclidean",
    p: float = 2.0,
    bound: np.ndarray | None = None,
) -> np.ndarray:
    """The exact distance of the k-th nearest other row, for rows ``rows`` of in-memory x
    (dense or CSR). ``bound``: an upper bound of it per row (the k-th listed distance of any
    graph bounds it: those are k real rows); inf or None: the k-th distance among an evenly
    spaced subset of rows. One scan of x in panels keeps only the distances within the bound
    (a comparison per entry instead of a partial sort of every panel); what passes is sorted.
    No float64 copy of all of x is made."""
    sparse = sp.issparse(x)
    sample = csr64(x[rows]) if sparse else np.asarray(x[rows], dtype=np.float64)
    bound = np.full(rows.size, np.inf) if bound is None else np.asarray(bound, np.float64)
    loose = ~np.isfinite(bound)
    if loose.any():
        bound[loose] = _subset_kth(x, rows[loose], sample[loose], k, metric, p)
    width = max(k + 1, PANEL_ENTRIES // max(1, rows.size))
    l2 = not sparse and metric in ("euclidean", "sqeuclidean")
    scan = _scan_l2 if l2 else _scan_any
    r, c = scan(x, rows, sample, bound, metric, p, width)
    short = np.bincount(r, minlength=rows.size) < k
    if short.any():  # a bound below the true distance (it should not be): no bound for these
        if loose[short].all():  # cannot happen: the subset's own k rows pass its bound
            raise RuntimeError("exact k-th distances: a row has fewer than k candidates")
        return exact_kth_distance(x, rows, k, metric, p, np.where(short, np.inf, bound))
    dist = _pair_distances(x, sample, r, c, metric, p)
    order = np.lexsort((dist, r))
    r, dist = r[order], dist[order]
    starts = np.searchsorted(r, np.arange(rows.size))
    return dist[starts + k - 1]


def _dense_or_csr(b):
    return csr64(b) if sp.issparse(b) else np.asarray(b, dtype=np.float64)


def _subset_kth(x, rows, sample, k, metric, p):
    """The k-th distance among every (n / 20 000)-th row: at least the true one."""
    sub = np.arange(0, x.shape[0], max(1, x.shape[0] // 20_000))
    d = distance_block(sample, _dense_or_csr(x[sub]), metric, p)
    d[rows[:, None] == sub[None, :]] = np.inf
    return np.partition(d, k - 1, axis=1)[:, k - 1]


def _hits(mask: np.ndarray, rows: np.ndarray, lo: int):
    """(sample row, x row) of the True entries of a panel's mask, self excluded."""
    any_row = np.nonzero(mask.any(axis=1))[0]  # few rows have a hit in a panel: look there
    r, c = np.nonzero(mask[any_row])
    r, c = any_row[r], c + lo
    keep = rows[r] != c
    return r[keep], c[keep]


def _scan_any(x, rows, sample, bound, metric, p, width):
    out = []
    for lo in range(0, x.shape[0], width):
        d = distance_block(sample, _dense_or_csr(x[lo : lo + width]), metric, p)
        out.append(_hits(d <= bound[:, None] * (1 + 1e-9), rows, lo))
    return np.concatenate([o[0] for o in out]), np.concatenate([o[1] for o in out])


def _scan_l2(x, rows, sample, bound, metric, p, width):
    """Dense euclidean rows screened in float32 (||b||^2 - 2 a.b against the bound, with a
    margin of 1e-3 of the squared norms, far above float32's rounding); the pairs that pass
    are computed again exactly."""
    b2 = bound**2 if metric == "euclidean" else bound
    na = np.einsum("ij,ij->i", sample, sample)
    s32 = sample.astype(np.float32)
    out = []
    for lo in range(0, x.shape[0], width):
        b = np.asarray(x[lo : lo + width], dtype=np.float32)
        nb = np.einsum("ij,ij->i", b, b, dtype=np.float64)
        screen = s32 @ b.T
        screen *= -2.0
        screen += nb.astype(np.float32)[None, :]
        limit = (b2 - na + 1e-3 * (na + nb.max())).astype(np.float32)
        out.append(_hits(screen <= limit[:, None], rows, lo))
    return np.concatenate([o[0] for o in out]), np.concatenate([o[1] for o in out])


def _pair_distances(x, sample, r, c, metric, p, step: int = 65_536):
    """Distances between sample row r[i] and x row c[i], in float64, as `block_topk` has them
    (dense euclidean from the differences)."""
    dist = np.empty(r.size)
    l2 = not sp.issparse(x) and metric in ("euclidean", "sqeuclidean")
    for lo in range(0, r.size, step):
        rr, cc = r[lo : lo + step], c[lo : lo + step]
        if l2:
            diff = sample[rr] - np.asarray(x[cc], dtype=np.float64)
            d = np.einsum("ij,ij->i", diff, diff)
            dist[lo : lo + step] = np.sqrt(d) if metric == "euclidean" else d
            continue
        for i in np.unique(rr):  # few distinct sample rows per step: one small block each
            at = np.nonzero(rr == i)[0]
            dist[lo + at] = distance_block(sample[i : i + 1], _dense_or_csr(x[cc[at]]), metric, p)[
                0
            ]
    return dist


def recall_at(listed: np.ndarray, kth: np.ndarray) -> float:
    """Share of listed neighbour distances within the row's exact k-th neighbour distance (so
    ties and duplicates count as found); NN-descent's distances are float32."""
    tol = 1e-5 * np.maximum(kth, 1e-12)[:, None]
    return float(((listed <= kth[:, None] + tol) & np.isfinite(listed)).mean())
