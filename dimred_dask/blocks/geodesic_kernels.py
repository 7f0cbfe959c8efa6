"""All-pairs shortest paths of a symmetric sparse graph (numba, in memory): exact Isomap's
geodesic matrix.

Dijkstra from every vertex, with two savings over running it n times independently:

- **Levels.** The sources run in ``levels`` groups of consecutive vertices. Before group
  [lo, hi) starts, the rows of every earlier source are final, and the graph is undirected,
  so D[s, u] = D[u, s] is known for every u < lo (copied in tiles from the columns of the
  finished rows). Dijkstra from s then settles only the vertices >= lo: it is seeded with
  min over u < lo of D[s, u] + w(u, v) for each such v (the shortest path's last finished
  vertex, if any, is followed by a path through vertices >= lo). Over all groups this is
  about (levels + 1) / (2 levels) of the work of n independent runs.
- **Threads.** The sources of a group are independent: they run on numba's threads, each
  with its own heap (an indexed 4-ary heap with decrease-key).

Within a group, D[s, t] and D[t, s] come from two runs; they are equal up to rounding, and
the smaller is kept for both, so the result is exactly symmetric with a zero diagonal. The
values are the same as ``scipy.sparse.csgraph.dijkstra``'s to rounding (every value is the
sum of a shortest path's weights). Every stored entry is an edge (its weight >= 0).
"""

from __future__ import annotations

import numpy as np
from numba import get_num_threads, njit, prange

__all__ = ["all_pairs_shortest_paths", "rows_after_level", "LEVELS"]

LEVELS = 16  # groups of sources; more save less each (the first group has nothing known)
_TILE = 64  # rows and columns per tile when finished rows are copied into columns


@njit(cache=True, nogil=True)
def _sift_up(key, vertex, pos, i):
    k, v = key[i], vertex[i]
    while i > 0:
        parent = (i - 1) >> 2
        if key[parent] <= k:
            break
        key[i], vertex[i] = key[parent], vertex[parent]
        pos[vertex[i]] = i
        i = parent
    key[i], vertex[i] = k, v
    pos[v] = i


@njit(cache=True, nogil=True)
def _sift_down(key, vertex, pos, size, i):
    k, v = key[i], vertex[i]
    while True:
        child = 4 * i + 1
        if child >= size:
            break
        best, best_key = child, key[child]
        for c in range(child + 1, min(child + 4, size)):
            if key[c] < best_key:
                best, best_key = c, key[c]
        if best_key >= k:
            break
        key[i], vertex[i] = best_key, vertex[best]
        pos[vertex[i]] = i
        i = best
    key[i], vertex[i] = k, v
    pos[v] = i


@njit(cache=True, nogil=True)
def _push_or_lower(key, vertex, pos, size, v, d):
    """Queue v with key d, or lower its key to d; returns the new heap size."""
    p = pos[v]
    if p == -1:
        key[size], vertex[size] = d, v
        pos[v] = size
        _sift_up(key, vertex, pos, size)
        return size + 1
    key[p] = d
    _sift_up(key, vertex, pos, p)
    return size


@njit(cache=True, nogil=True)
def _crossing(indptr, indices, data, lo):
    """The edges from vertices >= lo to vertices < lo, as a CSR over the rows lo..n-1."""
    n = indptr.size - 1
    ptr = np.zeros(n - lo + 1, np.int64)
    for v in range(lo, n):
        c = 0
        for e in range(indptr[v], indptr[v + 1]):
            if indices[e] < lo:
                c += 1
        ptr[v - lo + 1] = ptr[v - lo] + c
    to = np.empty(ptr[-1], indices.dtype)
    w = np.empty(ptr[-1], np.float64)
    for v in range(lo, n):
        t = ptr[v - lo]
        for e in range(indptr[v], indptr[v + 1]):
            if indices[e] < lo:
                to[t] = indices[e]
                w[t] = data[e]
                t += 1
    return ptr, to, w


@njit(cache=True, nogil=True)
def _from_source(indptr, indices, data, cross_ptr, cross_to, cross_w, lo, s, row, key, vertex, pos):
    """Row s of the distances into ``row``, given the final columns of rows < lo (already
    copied into row[:lo]) and the edges from vertices >= lo into them. pos[v]: -2 settled,
    -1 not queued, else v's place in the heap. Returns the number of vertices s cannot
    reach."""
    n = indptr.size - 1
    for u in range(lo):
        pos[u] = -2
    for v in range(lo, n):
        row[v] = np.inf
        pos[v] = -1
    size = 0
    for v in range(lo, n):
        best = np.inf
        for e in range(cross_ptr[v - lo], cross_ptr[v - lo + 1]):
            c = row[cross_to[e]] + cross_w[e]
            if c < best:
                best = c
        if best < np.inf and v != s:
            row[v] = best
            size = _push_or_lower(key, vertex, pos, size, v, best)
    row[s] = 0.0
    size = _push_or_lower(key, vertex, pos, size, s, 0.0)
    while size > 0:
        u, du = vertex[0], key[0]
        pos[u] = -2
        size -= 1
        if size > 0:
            key[0], vertex[0] = key[size], vertex[size]
            pos[vertex[0]] = 0
            _sift_down(key, vertex, pos, size, 0)
        for e in range(indptr[u], indptr[u + 1]):
            v = indices[e]
            if pos[v] == -2:
                continue
            d = du + data[e]
            if d < row[v]:
                row[v] = d
                size = _push_or_lower(key, vertex, pos, size, v, d)
    unreached = 0
    for v in range(n):
        if row[v] == np.inf:
            unreached += 1
    return unreached


@njit(cache=True, nogil=True, parallel=True)
def _levels(indptr, indices, data, bounds, threads, out, unreached):
    n = indptr.size - 1
    for level in range(bounds.size - 1):
        lo, hi = bounds[level], bounds[level + 1]
        for tile in prange((hi - lo + _TILE - 1) // _TILE):  # out[lo:hi, :lo] = out[:lo, lo:hi].T
            r0 = lo + tile * _TILE
            r1 = min(r0 + _TILE, hi)
            for c0 in range(0, lo, _TILE):
                for r in range(r0, r1):
                    for c in range(c0, min(c0 + _TILE, lo)):
                        out[r, c] = out[c, r]
        cross_ptr, cross_to, cross_w = _crossing(indptr, indices, data, lo)
        for t in prange(threads):
            key = np.empty(n, np.float64)
            vertex = np.empty(n, indices.dtype)
            pos = np.empty(n, indices.dtype)
            for s in range(lo + t, hi, threads):
                unreached[s] = _from_source(
                    indptr,
                    indices,
                    data,
                    cross_ptr,
                    cross_to,
                    cross_w,
                    lo,
                    s,
                    out[s],
                    key,
                    vertex,
                    pos,
                )
        for tile in prange((hi - lo + _TILE - 1) // _TILE):  # within the group: the smaller
            r0 = lo + tile * _TILE
            for r in range(r0, min(r0 + _TILE, hi)):
                for c in range(lo, r):
                    m = min(out[r, c], out[c, r])
                    out[r, c] = m
                    out[c, r] = m


@njit(cache=True, nogil=True)
def _rows_after(indptr, indices, data, lo, a, b, out, unreached):
    n = indptr.size - 1
    cross_ptr, cross_to, cross_w = _crossing(indptr, indices, data, lo)
    key = np.empty(n, np.float64)
    vertex = np.empty(n, indices.dtype)
    pos = np.empty(n, indices.dtype)
    for s in range(a, b):
        unreached[s - a] = _from_source(
            indptr, indices, data, cross_ptr, cross_to, cross_w, lo, s, out[s - a], key, vertex, pos
        )


def rows_after_level(csr, lo: int, a: int, b: int, known: np.ndarray):
    """(rows, unreached): the shortest-path rows of sources a..b-1 (lo <= a), one thread,
    given ``known`` = their distances to the vertices < lo (the columns a..b of the finished
    rows of every source < lo, transposed): Dijkstra settles only the vertices >= lo, as a
    group of `all_pairs_shortest_paths` does. ``rows`` is (b - a) x n float64 (``known`` in
    its first lo columns); ``unreached`` counts the vertices each source cannot reach."""
    n = csr.shape[0]
    out = np.empty((b - a, n), np.float64)
    out[:, :lo] = known
    unreached = np.zeros(b - a, np.int64)
    index = np.int32 if n < 2**31 - 1 else np.int64
    _rows_after(
        np.asarray(csr.indptr, np.int64),
        np.asarray(csr.indices, index),
        np.asarray(csr.data, np.float64),
        int(lo),
        int(a),
        int(b),
        out,
        unreached,
    )
    return out, unreached


def all_pairs_shortest_paths(csr, levels: int = LEVELS, threads: int | None = None):
    """(D, unreached): the n x n float64 shortest-path distances of the symmetric CSR graph
    ``csr`` (entries = edge weights >= 0; inf = no path) and, per source, how many vertices
    it cannot reach. ``threads``: numba's thread count by default."""
    n = csr.shape[0]
    out = np.empty((n, n), np.float64)
    unreached = np.zeros(n, np.int64)
    if n == 0:
        return out, unreached
    bounds = np.unique(np.linspace(0, n, max(1, min(int(levels), n)) + 1).astype(np.int64))
    threads = max(1, min(int(threads or get_num_threads()), n))
    index = np.int32 if n < 2**31 - 1 else np.int64  # smaller arrays stay in the caches
    _levels(
        np.asarray(csr.indptr, np.int64),
        np.asarray(csr.indices, index),
        np.asarray(csr.data, np.float64),
        bounds,
        threads,
        out,
        unreached,
    )
    return out, unreached


def _warm_up():
    """Compile (or load from numba's cache) on import, in the importing thread: a process's
    first numba compilation then never runs in a worker thread."""
    from scipy.sparse import csr_matrix

    csr = csr_matrix(np.array([[0.0, 1.0], [1.0, 0.0]]))
    all_pairs_shortest_paths(csr, levels=2, threads=1)
    rows_after_level(csr, 1, 1, 2, np.ones((1, 1)))


_warm_up()
