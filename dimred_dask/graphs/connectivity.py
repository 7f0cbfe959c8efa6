"""Symmetrising a kNN graph, counting its components, and refusing or joining disconnected ones.

A kNN graph is directed (j among i's neighbours does not imply the converse); the graph
methods work on the undirected graph ``symmetrize`` makes. When it has several connected
components, a method that needs one (Isomap's geodesics, LLE's and the Laplacian's null
space, MVU's constraints) either refuses with `DisconnectedGraphError` naming the component
sizes, or, with ``join=True``, adds for each component its shortest edge to another one
(Boruvka rounds: every component links to its nearest other component, repeated until one
is left; at most log2(components) rounds, each one exact pass per small component).
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp
from scipy.sparse.csgraph import connected_components as _cc

from .._validation import is_dask
from ..blocks.neighbors import block_topk
from ..blocks.union_find import component_labels
from ..errors import DisconnectedGraphError, InputError
from .knn import KNNGraph

__all__ = [
    "symmetrize",
    "connected_components",
    "graph_components",
    "check_connected",
    "join_components",
    "SYMMETRIZE",
]

SYMMETRIZE = ("max", "mean", "min", "union")


def symmetrize(graph, how: str = "max"):
    """The undirected weighted graph of a `KNNGraph` (or of a directed adjacency) as CSR.

    A `KNNGraph` contributes its neighbour lists only (distances, an exact duplicate's as a
    tiny positive number); its extra edges are added by `graph_csr`.

    Parameters
    ----------
    graph : KNNGraph or sparse matrix of shape (n, n)
        The directed graph; a matrix is read as CSR, its stored entries as the edge weights.
    how : {"max", "union", "mean", "min"}, default "max"
        ``max`` / ``union``: an edge listed in either direction, weight max(w_ij, w_ji)
        (equal for exact distances); ``mean``: the mean where both directions are listed,
        else the one weight; ``min``: keep an edge only where both directions are listed
        (mutual kNN).

    Returns
    -------
    scipy.sparse.csr_matrix of shape (n, n)
        The symmetric adjacency, explicit zeros removed, indices sorted.

    Raises
    ------
    InputError
        ``how`` is not one of `SYMMETRIZE`.
    """
    if how not in SYMMETRIZE:
        raise InputError(
            f"symmetrize must be one of {', '.join(SYMMETRIZE)}; found {how!r}.", "pass how='max'."
        )
    A = graph.to_csr() if isinstance(graph, KNNGraph) else sp.csr_matrix(graph)
    At = A.T.tocsr()
    if how in ("max", "union"):
        S = A.maximum(At)
    elif how == "min":
        S = A.minimum(At)
    else:
        both = A.multiply(At > 0)  # edges listed both ways: A + At counts them twice
        S = (A + At - both.multiply(0.5) - both.T.multiply(0.5)).tocsr()
    S = sp.csr_matrix(S)
    S.eliminate_zeros()
    S.sort_indices()
    return S


def connected_components(A) -> tuple[int, np.ndarray]:
    """The connected components of the undirected graph with adjacency ``A``.

    Parameters
    ----------
    A : KNNGraph, sparse matrix or array of shape (n, n)
        The graph; an edge listed in either direction joins its ends. Of a `KNNGraph` only
        the neighbour lists count, not its extra edges (see `graph_components`).

    Returns
    -------
    count : int
        The number of components.
    labels : numpy.ndarray of shape (n,)
        The component of each vertex, numbered from 0 by their smallest vertex.
    """
    if isinstance(A, KNNGraph):
        return graph_components(A, extra=[])
    return _cc(sp.csr_matrix(A), directed=True, connection="weak")


def graph_components(graph: KNNGraph, extra=None) -> tuple[int, np.ndarray]:
    """The connected components of a kNN graph with its extra edges, without an n x n matrix.

    The components of `graph_csr`'s matrix, numbered as SciPy numbers them (by their
    smallest row), found by union-find over the n x k lists in O(n k) time and O(n) memory.

    Parameters
    ----------
    graph : KNNGraph
        The graph; neighbour entries of -1 (rows short of k) are skipped.
    extra : sequence of (i, j, distance) or None, default None
        Extra edges to add; None takes ``graph.info["extra_edges"]`` (none if absent).

    Returns
    -------
    count : int
        The number of components.
    labels : numpy.ndarray of int64, shape (n,)
        The component of each row.
    """
    extra = graph.info.get("extra_edges", []) if extra is None else extra
    e = np.asarray(extra, dtype=np.float64).reshape(-1, 3)
    labels = component_labels(
        np.ascontiguousarray(graph.indices, dtype=np.int64),
        e[:, 0].astype(np.int64),
        e[:, 1].astype(np.int64),
    )
    return (int(labels.max()) + 1 if labels.size else 0), labels


def index_components(indices) -> tuple[int, np.ndarray]:
    """The connected components of a graph given by its n x k neighbour lists alone (rows
    short of k padded with -1), as `graph_components` numbers them.

    Parameters
    ----------
    indices : array-like of int, shape (n, k)
        Each row's neighbours.

    Returns
    -------
    count : int
        The number of components.
    labels : numpy.ndarray of int64, shape (n,)
        The component of each row.
    """
    none = np.empty(0, np.int64)
    labels = component_labels(np.ascontiguousarray(indices, dtype=np.int64), none, none)
    return (int(labels.max()) + 1 if labels.size else 0), labels


def sizes_text(labels: np.ndarray, limit: int = 8) -> str:
    """The components' count and largest sizes, for messages ("3 components of sizes ...")."""
    sizes = np.sort(np.bincount(labels))[::-1]
    shown = ", ".join(str(int(s)) for s in sizes[:limit])
    more = f" and {sizes.size - limit} more" if sizes.size > limit else ""
    return f"{sizes.size} components of sizes {shown}{more}"


def check_connected(graph: KNNGraph, *, method: str = "this method") -> None:
    """Raise `DisconnectedGraphError` when the kNN graph has more than one component.

    Only the neighbour lists count, not the extra edges of a joined graph: call it on
    graphs without ``info["extra_edges"]``.

    Parameters
    ----------
    graph : KNNGraph
        The graph to check.
    method : str, default "this method"
        The method named in the error message.

    Raises
    ------
    DisconnectedGraphError
        The graph has several components; the message gives their sizes.
    """
    count, labels = connected_components(graph)
    if count > 1:
        raise disconnected_error(method, graph.n_neighbors, graph.n_samples, sizes_text(labels))


def disconnected_error(method: str, k: int, n: int, sizes: str) -> DisconnectedGraphError:
    """The `DisconnectedGraphError` of `check_connected`, for components counted elsewhere
    (``sizes``: `sizes_text` of their labels)."""
    return DisconnectedGraphError(
        f"{method} needs a connected neighbour graph; the {k}-NN graph of the {n} rows has "
        f"{sizes}.",
        f"raise n_neighbors (now {k}), or pass join_components=True to join each component "
        "to its nearest one by its shortest edge, or embed the components separately.",
    )


def _nearest_outside(X, members: np.ndarray, outside: np.ndarray, metric: str, p: float):
    """(i in members, j in outside, distance) of the closest pair, exactly."""
    from ..linalg.landmarks import take_rows

    a = take_rows(X, members, "component rows") if is_dask(X) else np.asarray(X)[members]
    best = (None, None, np.inf)
    step = 20_000
    for s in range(0, outside.size, step):
        cols = outside[s : s + step]
        b = take_rows(X, cols, "other rows") if is_dask(X) else np.asarray(X)[cols]
        idx, dist = block_topk(a, b, 1, metric=metric, p=p)
        r = int(np.argmin(dist[:, 0]))
        if dist[r, 0] < best[2]:
            best = (int(members[r]), int(cols[idx[r, 0]]), float(dist[r, 0]))
    return best


def join_components(graph: KNNGraph, X, *, max_rounds: int = 64) -> tuple[KNNGraph, list]:
    """Make a kNN graph connected by adding, per component, its shortest edge to another.

    Boruvka rounds: each component but the largest is linked to its nearest point outside
    it (exact distances, computed blockwise), until one component is left. The extra edges
    go in ``info["extra_edges"]`` (with ``info["joined_components"] = True``); the
    neighbour lists keep their k columns, and `graph_csr` adds the extra edges.

    Parameters
    ----------
    graph : KNNGraph
        The graph of the rows of ``X``; extra edges it has already are kept.
    X : array-like or dask array of shape (n_samples, n_features)
        The dense rows the graph was built from (a dask array is read by row subsets).
    max_rounds : int, default 64
        The most rounds tried before giving up.

    Returns
    -------
    graph : KNNGraph
        A new graph with the same neighbour lists and the extra edges in its ``info``.
    extra : list of tuple (i, j, distance)
        All the extra edges, those ``graph`` had and those added.

    Raises
    ------
    InputError
        The graph's metric has no exact distance here (not in ``blocks.kernels.METRICS``).
    DisconnectedGraphError
        The graph is not connected after ``max_rounds`` rounds.
    """
    from ..blocks.kernels import METRICS

    if graph.metric not in METRICS:
        raise InputError(
            f"Joining components needs an exact distance; metric {graph.metric!r} has none here.",
            "raise n_neighbors instead.",
        )
    p = float(graph.info.get("metric_kwds", {}).get("p", 2.0))
    extra = [tuple(e) for e in graph.info.get("extra_edges", [])]
    for _ in range(max_rounds):
        count, labels = graph_components(graph, extra)
        if count == 1:
            break
        sizes = np.bincount(labels)
        largest = int(np.argmax(sizes))
        added = set()
        for c in range(count):
            if c == largest:
                continue
            members = np.nonzero(labels == c)[0]
            outside = np.nonzero(labels != c)[0]
            i, j, d = _nearest_outside(X, members, outside, graph.metric, p)
            key = (min(i, j), max(i, j))
            if key not in added:
                added.add(key)
                extra.append((i, j, d))
    else:  # the last round's edges may have joined the last components
        count, labels = graph_components(graph, extra)
        if count > 1:
            raise DisconnectedGraphError(
                f"Joining the components did not finish in {max_rounds} rounds; "
                f"{sizes_text(labels)} are left.",
                "raise n_neighbors, or max_rounds.",
            )
    info = {
        **graph.info,
        "extra_edges": [[int(i), int(j), float(d)] for i, j, d in extra],
        "joined_components": True,
    }
    return KNNGraph(graph.indices, graph.distances, graph.metric, graph.backend, info), extra


def graph_csr(graph: KNNGraph, extra=None, how: str = "max"):
    """The symmetric adjacency (distances) of a kNN graph, with its extra edges.

    Parameters
    ----------
    graph : KNNGraph
        The graph.
    extra : sequence of (i, j, distance) or None, default None
        Extra edges to add; None takes ``graph.info["extra_edges"]`` (none if absent). An
        extra edge's weight is the larger of its distance and the listed one, a zero
        distance stored as a tiny positive number.
    how : {"max", "union", "mean", "min"}, default "max"
        How the neighbour lists are symmetrised (`symmetrize`).

    Returns
    -------
    scipy.sparse.csr_matrix of shape (n, n)
        The symmetric distance adjacency.

    Raises
    ------
    InputError
        ``how`` is not one of `SYMMETRIZE`.
    """
    S = symmetrize(graph, how)
    extra = graph.info.get("extra_edges", []) if extra is None else extra
    if len(extra):
        e = np.asarray(extra, dtype=np.float64).reshape(-1, 3)
        i, j = e[:, 0].astype(np.int64), e[:, 1].astype(np.int64)
        w = np.maximum(e[:, 2], np.finfo(np.float64).tiny)
        n = S.shape[0]
        E = sp.csr_matrix(
            (np.concatenate([w, w]), (np.concatenate([i, j]), np.concatenate([j, i]))), shape=(n, n)
        )
        S = S.maximum(E).tocsr()
    return S
