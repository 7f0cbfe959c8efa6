"""Geodesic (shortest-path) distances on the symmetrised kNN graph, for Isomap
(Tenenbaum, de Silva & Langford 2000).

``geodesic_matrix(graph)``: all n x n distances for exact Isomap, by
`blocks.geodesic_kernels.all_pairs_shortest_paths` (Dijkstra from every vertex on numba's
threads, each run settling only the vertices whose rows are not finished yet) in this process
(or in one task on a worker). Exactly symmetric, zero diagonal.

``geodesic_matrix_on_workers(graph)``: the same matrix left on the workers, by the same
levels: the sources run in ``levels`` groups one after another, each group cut into one part
per worker, and a part's task (`blocks.geodesic_kernels.rows_after_level`) receives the
columns of the finished rows at its sources (cut by small tasks where those rows are), so
that its Dijkstra runs settle only the vertices of the group and after: about half the work
of n independent runs. Symmetric to rounding (D[s, t] and D[t, s] of two sources in one
group come from two runs; every other pair is copied).

``geodesic_rows(graph, sources)``: the (len(sources), n) matrix of shortest-path distances
from each source to every vertex, by Dijkstra (``scipy.sparse.csgraph.dijkstra``) from blocks
of sources. With a ``dask.distributed`` client the CSR graph is scattered to every worker
once (``client.scatter(..., broadcast=True)``) and each task runs Dijkstra from one block of
sources against it; without a client the blocks run on the local threaded scheduler (SciPy
releases the GIL). O(len(sources) * (E + n log n)): all n sources for full Isomap (an
n x n result), m landmarks for landmark Isomap.

``geodesics_through_neighbours``: the out-of-sample step. A new point x with neighbours
j_1..j_k among the training points (at distances d_1..d_k) is at geodesic distance
g(x, l) = min_t (d_t + G[j_t, l]) from every reference point l (scikit-learn's Isomap
``transform`` does the same).
"""

from __future__ import annotations

import operator

import numpy as np
import scipy.sparse as sp
from scipy.sparse.csgraph import dijkstra

from .._compute import active_client, compute
from ..blocks.geodesic_kernels import LEVELS, all_pairs_shortest_paths, rows_after_level
from ..errors import DisconnectedGraphError, InputError
from .affinities import is_graph_source
from .connectivity import graph_csr
from .knn import KNNGraph

__all__ = [
    "dijkstra_block",
    "geodesic_matrix",
    "geodesic_rows",
    "geodesic_rows_on_workers",
    "geodesic_matrix_on_workers",
    "geodesics_through_neighbours",
    "SOURCES_PER_TASK",
]

# Dijkstra sources per task: one source on a large graph is already a long computation, so a
# few dozen make a task that outweighs its scheduling and still leave tasks for every worker
SOURCES_PER_TASK = 32
# exact geodesics on the workers: at least this many sources a group by default
LEVEL_ROWS = 1024


def dijkstra_block(csr, sources: np.ndarray, dtype=np.float64) -> np.ndarray:
    """Shortest-path distances from ``sources`` to every vertex, by SciPy's Dijkstra.

    The matrix is symmetric, so it is read as a directed graph (no transpose is made).

    Parameters
    ----------
    csr : scipy.sparse.csr_matrix of shape (n, n)
        The symmetric graph, edge weights = distances.
    sources : array-like of int
        The source vertices (row numbers).
    dtype : numpy dtype, default numpy.float64
        The dtype of the result.

    Returns
    -------
    numpy.ndarray of shape (len(sources), n)
        The distances; inf where a vertex cannot be reached.
    """
    out = dijkstra(csr, directed=True, indices=np.asarray(sources, dtype=np.int64))
    return np.asarray(out, dtype=dtype).reshape(len(sources), csr.shape[0])


def _adjacency(graph) -> sp.csr_matrix:
    if isinstance(graph, KNNGraph):
        return graph_csr(graph)
    A = sp.csr_matrix(graph, dtype=np.float64)
    if A.shape[0] != A.shape[1]:
        raise InputError(
            f"A graph adjacency must be square; found shape {A.shape}.",
            "pass the n x n symmetric distance graph or a KNNGraph.",
        )
    return A


def _source_adjacency(source) -> sp.csr_matrix:
    """`graph_csr` of a graph source's rows, with its extra edges (on a worker)."""
    idx, dist = source.rows(0, source.n_samples, source.n_neighbors)
    info = dict(getattr(source, "info", None) or {})
    g = KNNGraph(np.asarray(idx, np.int64), np.asarray(dist, np.float64), info=info)
    return graph_csr(g)


def _graph_on_workers(graph, caller: str, in_process: str):
    """(client, n, graph) for a function that leaves its result on the workers: the active
    client (`InputError` without one: there are no workers to hold the result), the vertex
    count, and the adjacency (a CSR matrix) or, for a graph source, a future of it: the
    graph stays where it is, one task reads it and builds the adjacency on a worker, the
    others fetch it from there."""
    client = active_client()
    if client is None:
        raise InputError(
            f"{caller} leaves its result on the workers of a dask.distributed client; found "
            "no active distributed client.",
            "call it inside a distributed Client (dimred_dask.cluster.cluster_client), or call "
            f"{in_process} in this process.",
        )
    if is_graph_source(graph):
        return client, int(graph.n_samples), client.submit(_source_adjacency, graph, pure=False)
    csr = _adjacency(graph)
    return client, csr.shape[0], csr


def _shared(csr):
    """The graph as one object every task refers to: scattered to all workers when there is
    a client (sent once per worker, never through the scheduler), else one delayed key.
    The scattered key is new on every call (``hash=False``): re-scattering the same graph
    under its content hash while the previous call's future is being released left
    ``Client.scatter`` waiting forever (seen in scikit-learn's estimator checks, which fit
    the same data many times in a row): an upstream bug in distributed
    (dask/distributed#8576), where the release and the new scatter of one key race on
    different channels."""
    from dask import delayed

    client = active_client()
    if client is None:
        return delayed(csr, pure=True)
    return client.scatter(csr, broadcast=True, hash=False)


def geodesic_matrix(
    graph, *, method: str = "Isomap", on_workers: bool = False, stage: str = "geodesics (all pairs)"
) -> np.ndarray:
    """All n x n geodesic distances over a graph, for exact Isomap.

    By `blocks.geodesic_kernels.all_pairs_shortest_paths`, in this process on numba's
    threads by default: the matrix is wanted here (classical MDS and the model read it), and
    bringing it from a worker costs a transfer of n x n float64.

    Parameters
    ----------
    graph : KNNGraph or sparse matrix of shape (n, n)
        A `KNNGraph` (symmetrised with its extra edges, `graph_csr`) or a symmetric matrix
        of distances.
    method : str, default "Isomap"
        The method named in error messages.
    on_workers : bool, default False
        Run in one task on a worker when there is a distributed client (for a process with
        few cores); without a client it runs here either way.
    stage : str, default "geodesics (all pairs)"
        The progress label of that task.

    Returns
    -------
    numpy.ndarray of float64, shape (n, n)
        The distances: exactly symmetric, zero diagonal.

    Raises
    ------
    InputError
        ``graph`` is a matrix that is not square.
    DisconnectedGraphError
        Some point cannot be reached from another.
    """
    from dask import delayed

    csr = _adjacency(graph)
    if on_workers and active_client() is not None:
        task = delayed(all_pairs_shortest_paths, pure=True)(csr)
        ((G, unreached),) = compute(task, stage=stage)
    else:
        G, unreached = all_pairs_shortest_paths(csr)
    if unreached.any():
        i = int(np.argmax(unreached > 0))
        _disconnected(method, int(unreached[i]), csr.shape[0], i)
    return G


def _disconnected(method: str, count: int, n: int, source: int):
    raise DisconnectedGraphError(
        f"{method} needs a connected neighbour graph; {count} of the {n} points cannot be "
        f"reached from point {source}.",
        "raise n_neighbors, or pass join_components=True to join each component to its "
        "nearest one by its shortest edge.",
    )


def geodesic_rows(
    graph,
    sources,
    *,
    dtype=np.float64,
    per_task: int = SOURCES_PER_TASK,
    method: str = "Isomap",
    stage: str = "geodesics (Dijkstra)",
) -> np.ndarray:
    """Geodesic distances from ``sources`` to every vertex, as an in-memory array.

    Dijkstra from blocks of ``per_task`` sources (`dijkstra_block`): with a distributed
    client, one task per block against the graph scattered once to every worker; without
    one, on the local threaded scheduler (or directly here for a single block).

    Parameters
    ----------
    graph : KNNGraph or sparse matrix of shape (n, n)
        A `KNNGraph` (symmetrised with its extra edges, `graph_csr`) or a symmetric matrix
        of distances.
    sources : array-like of int
        The source vertices (row numbers), flattened.
    dtype : numpy dtype, default numpy.float64
        The dtype of the result.
    per_task : int, default SOURCES_PER_TASK
        Sources per task (32); values below 1 count as 1.
    method : str, default "Isomap"
        The method named in error messages.
    stage : str, default "geodesics (Dijkstra)"
        The progress label of the tasks.

    Returns
    -------
    numpy.ndarray of shape (len(sources), n)
        Row t holds the distances from ``sources[t]``; no rows when ``sources`` is empty.

    Raises
    ------
    InputError
        ``graph`` is a matrix that is not square.
    DisconnectedGraphError
        A source cannot reach every vertex.
    """
    from dask import delayed

    csr = _adjacency(graph)
    sources = np.asarray(sources, dtype=np.int64).ravel()
    if sources.size == 0:
        return np.empty((0, csr.shape[0]), dtype=dtype)
    blocks = _source_blocks(sources, per_task)
    if len(blocks) <= 1 and active_client() is None:
        rows = dijkstra_block(csr, sources, dtype)
    else:
        shared = _shared(csr)
        task = delayed(dijkstra_block, pure=True)
        rows = np.concatenate(compute(*[task(shared, b, dtype) for b in blocks], stage=stage))
    unreachable = ~np.isfinite(rows)
    if unreachable.any():
        i = int(np.nonzero(unreachable.any(axis=1))[0][0])
        _disconnected(method, int(unreachable[i].sum()), csr.shape[0], int(sources[i]))
    return rows


def _source_blocks(sources: np.ndarray, per_task: int) -> list:
    step = max(1, int(per_task))
    return [sources[s : s + step] for s in range(0, sources.size, step)]


def geodesic_rows_on_workers(
    graph,
    sources,
    *,
    dtype=np.float64,
    per_task: int = SOURCES_PER_TASK,
    method: str = "Isomap",
    stage: str = "geodesics (Dijkstra)",
):
    """`geodesic_rows` left on the workers, as a persisted dask array.

    Only the count of unreachable vertices per source comes back to this process, to raise
    `DisconnectedGraphError` as `geodesic_rows` does.

    Parameters
    ----------
    graph : KNNGraph, graph source or sparse matrix of shape (n, n)
        A `KNNGraph` (symmetrised with its extra edges, `graph_csr`), a graph source (read
        and symmetrised by a task on a worker: this process never holds it) or a symmetric
        matrix of distances.
    sources : array-like of int
        The source vertices (row numbers), flattened.
    dtype : numpy dtype, default numpy.float64
        The dtype of the result.
    per_task : int, default SOURCES_PER_TASK
        Sources per task (32), which is also the row chunk of the result.
    method : str, default "Isomap"
        The method named in error messages.
    stage : str, default "geodesics (Dijkstra)"
        The progress label of the count of unreachable vertices.

    Returns
    -------
    dask.array.Array of shape (len(sources), n)
        The distances, persisted on the workers in row chunks of ``per_task`` sources; no
        rows when ``sources`` is empty.

    Raises
    ------
    InputError
        There is no distributed client, or ``graph`` is a matrix that is not square.
    DisconnectedGraphError
        A source cannot reach every vertex.
    """
    import dask.array as da
    from dask import delayed

    client, n, shared = _graph_on_workers(
        graph, "geodesic_rows_on_workers", "geodesic_rows for the rows"
    )
    sources = np.asarray(sources, dtype=np.int64).ravel()
    if sources.size == 0:
        return da.empty((0, n), dtype=dtype, chunks=(0, n))
    shared = _shared(shared) if sp.issparse(shared) else shared
    task = delayed(dijkstra_block, pure=True)
    rows = da.concatenate(
        [
            da.from_delayed(task(shared, b, dtype), shape=(b.size, n), dtype=dtype)
            for b in _source_blocks(sources, per_task)
        ]
    )
    rows = client.persist(rows)
    (unreached,) = compute((~da.isfinite(rows)).sum(axis=1), stage=stage)
    if unreached.any():
        i = int(np.nonzero(unreached)[0][0])
        _disconnected(method, int(unreached[i]), n, int(sources[i]))
    return rows


def _columns(rows, a: int, b: int) -> np.ndarray:
    return np.array(rows[:, a:b])


def _part(csr, lo: int, a: int, b: int, *finished) -> tuple:
    """(rows, [unreached, sums of squares]) of the sources a..b-1, given the finished rows'
    columns a..b (in row order: together the rows 0..lo-1)."""
    known = np.concatenate(finished, axis=0).T if finished else np.empty((b - a, 0))
    rows, unreached = rows_after_level(csr, lo, a, b, known)
    return rows, np.stack([unreached.astype(np.float64), np.einsum("ij,ij->i", rows, rows)])


def geodesic_matrix_on_workers(
    graph,
    *,
    levels: int | None = None,
    method: str = "Isomap",
    stage: str = "geodesics (all pairs)",
    with_stats: bool = False,
):
    """All n x n geodesic distances over a graph, for exact Isomap, left on the workers.

    Dijkstra from every vertex in ``levels`` groups of sources, each group cut into one task
    per worker; a task settles only the vertices from its group on, given the columns of
    the rows of the earlier groups at its sources (the module docstring).

    Parameters
    ----------
    graph : KNNGraph, graph source or sparse matrix of shape (n, n)
        As `geodesic_rows_on_workers` takes it (a graph source is read on a worker).
    levels : int or None, default None
        The groups of sources; each group waits for the ones before it. None: `LEVELS` (16),
        fewer below ``LEVEL_ROWS`` sources a group (every group adds a wait and tasks that
        grow with the square of the count, which at a few thousand rows outweigh what the
        group saves).
    method : str, default "Isomap"
        The method named in error messages.
    stage : str, default "geodesics (all pairs)"
        The progress label of the count of unreachable vertices.
    with_stats : bool, default False
        Also return the row means of the squared distances and their mean (classical MDS's
        centring of them), summed by the tasks that make the rows.

    Returns
    -------
    dask.array.Array of float64, shape (n, n)
        The distances, persisted on the workers, a row chunk per task.
    (ndarray of shape (n,), float)
        With ``with_stats``: the row means of the squares and their mean, after the matrix.

    Raises
    ------
    InputError
        There is no distributed client, or ``graph`` is a matrix that is not square.
    DisconnectedGraphError
        Some point cannot be reached from another.
    """
    import dask.array as da

    from .._compute import workers

    client, n, shared = _graph_on_workers(
        graph, "geodesic_matrix_on_workers", "geodesic_matrix for the matrix"
    )
    shared = _shared(shared) if sp.issparse(shared) else shared
    if n == 0:
        empty = da.empty((0, 0), dtype=np.float64, chunks=(0, 0))
        return (empty, np.zeros(0), 0.0) if with_stats else empty
    names = sorted(workers(client)) or [None]
    levels = min(LEVELS, max(1, n // LEVEL_ROWS)) if levels is None else int(levels)
    bounds = np.unique(np.linspace(0, n, max(1, min(levels, n)) + 1).astype(np.int64))
    done, counts = [], []  # (a, b, future) of the finished parts in row order; their counts
    for lo, hi in zip(bounds[:-1], bounds[1:]):
        cuts = np.unique(np.linspace(lo, hi, min(len(names), hi - lo) + 1).astype(np.int64))
        level = []
        for p, (a, b) in enumerate(zip(cuts[:-1], cuts[1:])):
            cols = [  # ahead of the parts queued on the worker that holds the rows
                client.submit(_columns, f, int(a), int(b), priority=1, pure=False)
                for _, _, f in done
            ]
            where = None if names[0] is None else [names[p % len(names)]]
            pair = client.submit(
                _part,
                shared,
                int(lo),
                int(a),
                int(b),
                *cols,
                workers=where,
                allow_other_workers=True,
                pure=False,
            )
            part = client.submit(operator.getitem, pair, 0, pure=False)
            level.append((int(a), int(b), part))
            counts.append(client.submit(operator.getitem, pair, 1, pure=False))
        done += level
    parts = [
        da.from_delayed(c, shape=(2, b - a), dtype=np.float64) for (a, b, _), c in zip(done, counts)
    ]
    ((unreached, sumsq),) = compute(da.concatenate(parts, axis=1), stage=stage)
    if unreached.any():
        i = int(np.nonzero(unreached)[0][0])
        _disconnected(method, int(unreached[i]), n, i)
    G = da.concatenate([da.from_delayed(f, shape=(b - a, n), dtype=np.float64) for a, b, f in done])
    if not with_stats:
        return G
    r = sumsq / n
    return G, r, float(r.mean())


def geodesics_through_neighbours(
    nbr_idx: np.ndarray, nbr_dist: np.ndarray, reference: np.ndarray
) -> np.ndarray:
    """Geodesic distances of new points through their training neighbours (Isomap transform).

    g(x, l) = min_t (d_t + reference[j_t, l]) for each new point x with neighbours j_t among
    the training rows at distances d_t.

    Parameters
    ----------
    nbr_idx : numpy.ndarray of int, shape (b, k)
        Each new point's neighbours: row numbers of ``reference`` (all valid, no -1).
    nbr_dist : numpy.ndarray of shape (b, k)
        Their distances.
    reference : numpy.ndarray of shape (n, m)
        The geodesic distances of the n training rows to the m reference points.

    Returns
    -------
    numpy.ndarray of float64, shape (b, m)
        The new points' geodesic distances to the reference points.

    Raises
    ------
    InputError
        ``nbr_idx`` is not integer, or holds a row number outside 0 to n - 1 (a -1 would
        otherwise read the last row).
    """
    nbr_idx = np.asarray(nbr_idx)
    nbr_dist = np.asarray(nbr_dist, dtype=np.float64)
    _check_neighbour_rows(nbr_idx, reference.shape[0])
    out = np.full((nbr_idx.shape[0], reference.shape[1]), np.inf)
    for t in range(nbr_idx.shape[1]):  # k passes of (b, m): no (b, k, m) temporary
        np.minimum(out, nbr_dist[:, t : t + 1] + reference[nbr_idx[:, t]], out=out)
    return out


def _check_neighbour_rows(nbr_idx: np.ndarray, n: int) -> None:
    """Refuse neighbour numbers that NumPy would read wrongly (negative ones from the end)."""
    if not np.issubdtype(nbr_idx.dtype, np.integer):
        raise InputError(
            f"Neighbour indices must be integer row numbers; found dtype {nbr_idx.dtype}.",
            "pass the neighbours' row numbers as an integer array.",
        )
    if nbr_idx.size == 0:
        return
    lo, hi = int(nbr_idx.min()), int(nbr_idx.max())
    if lo < 0 or hi >= n:
        raise InputError(
            f"Neighbour indices must be rows 0 to {n - 1} of the reference; found indices "
            f"from {lo} to {hi}.",
            "pass only found neighbours: drop the -1 entries of rows short of k, and number "
            "the neighbours by the rows of the reference matrix.",
        )
