"""Connected components of a neighbour-list graph by union-find (numba, in memory)."""

from __future__ import annotations

import numpy as np
from numba import njit

__all__ = ["component_labels"]


@njit(cache=True, nogil=True)
def _find(parent, x):
    root = x
    while parent[root] != root:
        root = parent[root]
    while parent[x] != root:  # path compression
        nxt = parent[x]
        parent[x] = root
        x = nxt
    return root


@njit(cache=True, nogil=True)
def _union(parent, a, b):
    ra, rb = _find(parent, a), _find(parent, b)
    if ra < rb:
        parent[rb] = ra
    elif rb < ra:
        parent[ra] = rb


@njit(cache=True, nogil=True)
def component_labels(indices, extra_i, extra_j):
    """Labels 0..c-1 of the undirected graph whose edges are (i, indices[i, t]) for every
    entry >= 0 (an n x k array of neighbour lists) and (extra_i[e], extra_j[e]); components
    numbered by their smallest vertex, as a breadth-first search from vertex 0, 1, ...
    numbers them. Every root is its component's smallest vertex."""
    n, k = indices.shape
    parent = np.arange(n)
    for i in range(n):
        for t in range(k):
            j = indices[i, t]
            if j >= 0:
                _union(parent, i, j)
    for e in range(extra_i.shape[0]):
        _union(parent, extra_i[e], extra_j[e])
    labels = np.empty(n, np.int64)
    count = 0
    for i in range(n):
        r = _find(parent, i)
        if r == i:
            labels[i] = count
            count += 1
        else:
            labels[i] = labels[r]  # r < i: labelled already
    return labels


# compiled (or loaded from numba's cache) on import, in the importing thread: a process's first
# numba compilation then never runs in a worker thread
component_labels(np.zeros((1, 1), np.int64), np.zeros(0, np.int64), np.zeros(0, np.int64))
