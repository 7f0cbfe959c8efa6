"""The graph Laplacian of a kNN graph built on the Dask workers, and its spectral embedding.

`spectral_embedding` (Laplacian eigenmaps, spectral clustering) builds the weighted,
symmetrised graph and its Laplacian in the caller's process: at 10^6 rows and more that
process holds the graph, the weights and the operator. Here the same operator is built by
tasks, one row block each, from a graph source (an object with ``n_samples``,
``n_neighbors``, ``rows(start, stop, k)`` and ``info``, such as the flow's reader of the graph
in a run's store), and is solved where it is by the worker-side LOBPCG
(`linalg.worker_lobpcg`). The caller holds O(blocks) numbers while the operator is built
and the degrees (n floats) and the n x k answer at the end.

The steps, per row block [a, b) (one block per worker):

1. its rows of the directed graph (distances, an exact duplicate's as a tiny positive
   number), and the same entries transposed, cut by the block of their new row;
2. the symmetric adjacency S: its own rows against the transposed entries every block sent
   it, the larger distance where both are listed (``symmetrize(how="max")``), with the
   graph's extra (joining) edges;
3. heat weights exp(-d^2 / t), ``t`` the mean squared edge length over all blocks (two
   numbers a block), or binary weights; the degrees;
4. L = D - W, or L_sym = I - D^-1/2 W D^-1/2 from the degrees of every row (one n-vector
   made on a worker and shared by the blocks).

The result is the in-process operator's, up to the rounding of ``t``'s sum.
"""

from __future__ import annotations

from functools import partial

import numpy as np
import scipy.sparse as sp

from .._compute import active_client, workers
from ..errors import InputError
from ..linalg.convergence import solve_with_fallbacks
from ..linalg.sparse_eigen import bottom_eigsh, fallback_solvers
from ..linalg.worker_lobpcg import WorkerRows, bottom_eigsh_lobpcg_workers
from .affinities import GraphRows, graph_rows
from .knn import KNNGraph
from .laplacian import WEIGHTS
from .spectral import SpectralResult

__all__ = ["laplacian_on_workers", "bottom_on_workers", "spectral_embedding_workers"]

TINY = np.finfo(np.float64).tiny


def _block_of(cols: np.ndarray, starts: np.ndarray) -> np.ndarray:
    return np.searchsorted(starts, cols, side="right") - 1


def _directed(source, k: int, a: int, b: int, bounds):
    """Rows [a, b) of the directed distance graph (first k neighbours), CSR (b - a) x n, and
    its entries transposed, per block: (rows local to that block, global columns,
    distances)."""
    n = int(source.n_samples)
    idx, dist = graph_rows(source, a, b, k)
    idx, dist = np.asarray(idx, np.int64), np.asarray(dist, np.float64)
    valid = idx.ravel() >= 0
    rows = np.repeat(np.arange(a, b), k)[valid]
    cols = idx.ravel()[valid]
    data = np.maximum(dist.ravel()[valid], TINY)
    own = sp.csr_matrix((data, (rows - a, cols)), shape=(b - a, n))
    starts = np.array([s for s, _ in bounds])
    dest = _block_of(cols, starts)
    pieces = []
    for j, (s, _) in enumerate(bounds):
        m = dest == j
        pieces.append((cols[m] - s, rows[m], data[m]))
    return own, pieces


def _piece(directed, j: int):
    return directed[1][j]


def _symmetric(a: int, b: int, n: int, extra, directed, *pieces):
    """Block [a, b) of S = max(A, A^T) with the extra edges; returns (S rows, sum of d^2
    over its entries, its entry count)."""
    own = directed[0]
    r = np.concatenate([p[0] for p in pieces])
    c = np.concatenate([p[1] for p in pieces])
    d = np.concatenate([p[2] for p in pieces])
    S = own.maximum(sp.csr_matrix((d, (r, c)), shape=(b - a, n)))
    if len(extra):
        e = np.asarray(extra, dtype=np.float64).reshape(-1, 3)
        i, j = e[:, 0].astype(np.int64), e[:, 1].astype(np.int64)
        w = np.maximum(e[:, 2], TINY)
        ii, jj, ww = np.concatenate([i, j]), np.concatenate([j, i]), np.concatenate([w, w])
        m = (ii >= a) & (ii < b)
        S = S.maximum(sp.csr_matrix((ww[m], (ii[m] - a, jj[m])), shape=(b - a, n)))
    S = sp.csr_matrix(S)
    S.eliminate_zeros()
    S.sort_indices()
    return S, float(np.dot(S.data, S.data)), int(S.nnz)


def _edge_sums(sym):
    return sym[1], sym[2]


def _weighted(sym, weights: str, t):
    """Block rows of W and their degrees."""
    W = sp.csr_matrix(sym[0], dtype=np.float64, copy=True)
    W.data = np.ones_like(W.data) if weights == "binary" else np.exp(-(W.data**2) / t)
    return W, np.asarray(W.sum(axis=1)).ravel()


def _degrees_of(weighted):
    return weighted[1]


def _stack(*parts):
    return np.concatenate(parts)


def _no_edge(deg_block, a: int) -> tuple[int, int]:
    """(count of rows of degree 0 in the block, the first one's row number or -1)."""
    zero = np.flatnonzero(deg_block <= 0)
    return int(zero.size), int(zero[0] + a) if zero.size else -1


def _laplacian_rows(weighted, deg, a: int, normed: bool):
    """Rows [a, a + m) of L = D - W, or of I - D^-1/2 W D^-1/2 (``deg``: every row's)."""
    W, own = weighted
    m = W.shape[0]
    if not normed:
        return (sp.diags(own, offsets=a, shape=W.shape) - W).tocsr()
    inv = np.where(deg > 0, 1.0 / np.sqrt(np.where(deg > 0, deg, 1.0)), 0.0)
    M = (sp.diags(inv[a : a + m]) @ W @ sp.diags(inv)).tocsr()
    return (sp.diags((own > 0).astype(np.float64), offsets=a, shape=W.shape) - M).tocsr()


def laplacian_on_workers(
    source, *, n_neighbors=None, weights="heat", t=None, normed=True, blocks=None, client=None
):
    """The Laplacian of a graph source's symmetrised, weighted kNN graph, built on the Dask
    workers one row block per worker.

    Belkin & Niyogi (2003) heat weights w_ij = exp(-d_ij^2 / t) or binary weights;
    L = D - W or, ``normed``, L_sym = I - D^-1/2 W D^-1/2 (von Luxburg 2007).

    Parameters
    ----------
    source : KNNGraph or graph source
        ``n_samples``, ``n_neighbors``, ``rows(start, stop, k)`` (read in the tasks) and
        ``info`` (its ``extra_edges`` are added). A `KNNGraph` in this process sends each
        block its own rows.
    n_neighbors : int or None, default None
        The neighbours of each row taken (the first ones); None: all the source's.
    weights : {"heat", "binary"}, default "heat"
        The edge weights.
    t : float or None, default None
        The heat kernel's width; None: the mean squared edge length of the symmetric graph.
    normed : bool, default True
        The symmetric normalised Laplacian (every row must have an edge).
    blocks : int or None, default None
        The row blocks (None: one per worker).
    client : distributed.Client or None, default None
        The cluster (None: the current client).

    Returns
    -------
    L : WorkerRows
        The Laplacian's row blocks on the workers.
    degrees : numpy.ndarray of float64, shape (n,)
        The row sums of W.
    t : float or None
        The heat width used (None for binary weights).

    Raises
    ------
    InputError
        An unknown ``weights``, no Dask client, or (``normed``) a row without an edge.
    """
    if weights not in WEIGHTS:
        raise InputError(
            f"weights must be one of {', '.join(WEIGHTS)}; found {weights!r}.",
            "pass weights='heat' (exp(-d^2/t)) or 'binary'.",
        )
    client = client or active_client()
    if client is None:
        raise InputError(
            "The Laplacian on the workers needs a Dask cluster; found no active Client.",
            "start a Client (dimred_dask.cluster), or build the graph in this process.",
        )
    n = int(source.n_samples)
    nb = max(1, min(n // 2, int(blocks or len(workers(client)))))
    cuts = np.linspace(0, n, nb + 1).astype(np.int64)
    bounds = [(int(a), int(b)) for a, b in zip(cuts[:-1], cuts[1:])]
    extra = list((getattr(source, "info", None) or {}).get("extra_edges", []))
    k = int(source.n_neighbors if n_neighbors is None else n_neighbors)
    if isinstance(source, KNNGraph):  # in this process: each block is sent its rows only
        per = [client.scatter(GraphRows.of(source, a, b), hash=False) for a, b in bounds]
    else:  # read in the tasks (e.g. from a run's store)
        per = [source] * nb
    directed = [
        client.submit(_directed, s, k, a, b, bounds, pure=False) for s, (a, b) in zip(per, bounds)
    ]
    del per
    sym = []
    for j, (a, b) in enumerate(bounds):
        pieces = [client.submit(_piece, d, j, pure=False) for d in directed]
        sym.append(client.submit(_symmetric, a, b, n, extra, directed[j], *pieces, pure=False))
    del directed, pieces  # the transposed pieces are dropped once the blocks have them
    if weights == "heat" and t is None:
        sums = client.gather([client.submit(_edge_sums, s, pure=False) for s in sym])
        count = sum(c for _, c in sums)
        t = float(sum(d2 for d2, _ in sums) / count) if count else 1.0
        t = t if t > 0 else 1.0
    t_used = None if weights == "binary" else float(t)
    weighted = [client.submit(_weighted, s, weights, t_used, pure=False) for s in sym]
    del sym
    degs = [client.submit(_degrees_of, w, pure=False) for w in weighted]
    deg_all = client.submit(_stack, *degs, pure=False)
    if normed:
        empty = client.gather(
            [client.submit(_no_edge, d, a, pure=False) for d, (a, _) in zip(degs, bounds)]
        )
        count = sum(c for c, _ in empty)
        if count:
            first = next(i for c, i in empty if c)
            raise InputError(
                f"The normalised Laplacian needs every point to have an edge; point "
                f"{first} (and {count - 1} others) has weight 0 to all.",
                "raise n_neighbors, or use weights='binary'.",
            )
    rows = [
        client.submit(_laplacian_rows, w, deg_all, a, normed, pure=False)
        for w, (a, _) in zip(weighted, bounds)
    ]
    degrees = client.gather(deg_all)
    return WorkerRows(n, bounds, rows), np.asarray(degrees, np.float64), t_used


def bottom_on_workers(
    L: WorkerRows,
    want: int,
    *,
    step: str,
    method: str,
    fix: str,
    tol: float = 1e-8,
    maxiter: int | None = None,
    random_state=0,
    client=None,
    keep: bool = False,
):
    """The ``want`` smallest eigenpairs of a symmetric operator held on the workers, by the
    worker-side LOBPCG (told to stop early when it stalls, where a fallback follows); a
    solve that stops short is retried on the whole operator, assembled
    on one worker, by the robust solver of its size (`fallback_solvers`: dense, shift-invert
    ARPACK, or LOBPCG with a multigrid preconditioner above ``ARPACK_MAX`` rows); refused when
    that stops short too.

    Parameters
    ----------
    L : WorkerRows
        The operator (e.g. from `laplacian_on_workers`).
    want : int
        The number of eigenpairs.
    step, method, fix : str
        What was solved, the method, and the fix, for the records and the `SolverError`.
    tol : float, default 1e-8
        The tolerance (LOBPCG's relative to the mean diagonal).
    maxiter : int or None, default None
        LOBPCG's iteration limit (None: its default).
    random_state : int, numpy Generator or None, default 0
        Seeds the start vectors.
    client : distributed.Client or None, default None
        The cluster (None: the current client).
    keep : bool, default False
        Leave the worker-side solve's vectors on the workers (a dask array; see
        `bottom_eigsh_lobpcg_workers`).

    Returns
    -------
    tuple of (Eigen, list of dict)
        The eigenpairs and every solve's convergence record.

    Raises
    ------
    SolverError
        No eigensolver reached ``tol``.
    """
    client = client or active_client()

    def attempt(s):
        if s == "lobpcg-workers":
            eig = bottom_eigsh_lobpcg_workers(
                L,
                want,
                kind="symmetric",
                tol=tol,
                maxiter=maxiter,
                random_state=random_state,
                client=client,
                keep=keep,
                stall=bool(fallbacks),  # a stalled solve continues with the fallback
            )
        else:  # a robust solver on the whole operator, assembled on one worker
            short = L.room_on_a_worker(client, s, want)
            if short is not None:  # not started: it would not fit there
                return None, short
            eig = L.on_a_worker(
                client,
                partial(bottom_eigsh, k=want, solver=s, tol=tol, random_state=random_state),
            )
        return eig, eig.convergence

    fallbacks = fallback_solvers("lobpcg-workers", L.shape[0])
    return solve_with_fallbacks(
        attempt, ["lobpcg-workers"] + fallbacks, step=step, method=method, fix=fix
    )


def spectral_embedding_workers(
    source,
    n_components: int,
    *,
    n_neighbors=None,
    weights="heat",
    t=None,
    normed: bool = True,
    drop_first: bool = True,
    tol: float = 1e-8,
    maxiter: int | None = None,
    random_state=0,
    method: str = "Spectral embedding",
    fix: str | None = None,
    client=None,
    keep: bool = False,
):
    """`spectral.spectral_embedding` of a graph source's weighted kNN graph, its Laplacian
    built (`laplacian_on_workers`) and solved (worker-side LOBPCG) on the Dask workers.

    Laplacian eigenmaps (Belkin & Niyogi 2003) and spectral clustering (Shi & Malik 2000;
    von Luxburg 2007). A solve that stops short is retried as `bottom_on_workers` retries it
    (dense, shift-invert ARPACK, or multigrid-preconditioned LOBPCG by size, on the operator
    assembled on one worker), else refused.

    Parameters
    ----------
    source : graph source
        As `laplacian_on_workers`.
    n_components : int
        The eigenvectors returned, besides the dropped first one.
    n_neighbors, weights, t, normed
        As `laplacian_on_workers`.
    drop_first : bool, default True
        Compute one more eigenvector and drop the first (constant for a connected graph).
    tol : float, default 1e-8
        LOBPCG's tolerance (relative to the mean diagonal).
    maxiter : int or None, default None
        LOBPCG's iteration limit (None: its default).
    random_state : int, numpy Generator or None, default 0
        Seeds the start vectors.
    method : str, default "Spectral embedding"
        The method named in the `SolverError`.
    fix : str or None, default None
        The fix given in the `SolverError`.
    client : distributed.Client or None, default None
        The cluster (None: the current client).
    keep : bool, default False
        Leave the eigenvectors on the workers: the embedding is then a dask array of one
        chunk a row block, scaled and sign-fixed there (a fallback solve's
        embedding is NumPy all the same).

    Returns
    -------
    tuple of (SpectralResult, float or None)
        The embedding as `spectral_embedding` returns it, and the heat width used.

    Raises
    ------
    InputError
        As `laplacian_on_workers`; ``n_components`` out of range.
    SolverError
        No eigensolver reached ``tol``.
    """
    client = client or active_client()
    n = int(source.n_samples)
    want = int(n_components) + int(bool(drop_first))
    if not 1 <= want < n - 1:
        raise InputError(
            f"A spectral embedding of {n} points on the workers can have at most "
            f"{n - 2 - int(drop_first)} components; asked for {n_components}.",
            f"pass n_components below {n - 1 - int(drop_first)}.",
        )
    L, deg, t_used = laplacian_on_workers(
        source, n_neighbors=n_neighbors, weights=weights, t=t, normed=normed, client=client
    )
    what = "L y = lambda D y" if normed else "L = D - W"
    eig, records = bottom_on_workers(
        L,
        want,
        step=f"bottom {want} eigenpairs of {what}",
        method=method,
        fix=fix or "raise maxiter or loosen tol.",
        tol=tol,
        maxiter=maxiter,
        random_state=random_state,
        client=client,
        keep=keep,
    )
    if hasattr(eig.vectors, "dask"):  # left on the workers
        return _kept_embedding(eig, deg, drop_first, normed, records), t_used
    # in place: the n x k columns are the largest arrays this process holds
    vals = np.asarray(eig.values, np.float64)
    first = float(vals[0]) if drop_first else None
    vec = np.asarray(eig.vectors, np.float64)  # n x (k + drop_first): scaled in place
    vec, solver = (vec[:, 1:] if drop_first else vec), eig.solver
    del eig
    if normed:
        vec /= np.sqrt(deg)[:, None]
    s = np.sign(vec[np.argmax(np.abs(vec), axis=0), np.arange(vec.shape[1])])
    vec *= np.where(s == 0, 1.0, s)
    vals = vals[1:] if drop_first else vals
    return SpectralResult(vec, vals, deg, first, solver, records), t_used


def _kept_embedding(eig, deg, drop_first: bool, normed: bool, records) -> SpectralResult:
    """`spectral_embedding_workers`' scaling and signs applied to vectors left on the
    workers (a dask array): only each column's entry of largest magnitude comes here."""
    import dask.array as da

    from .._compute import compute

    vals = np.asarray(eig.values, np.float64)
    vec = eig.vectors[:, 1:] if drop_first else eig.vectors
    if normed:
        vec = vec / da.from_array(np.sqrt(deg), chunks=(vec.chunks[0],))[:, None]
    (at,) = compute(da.argmax(abs(vec), axis=0), stage="spectral embedding: signs")
    (top,) = compute(vec.vindex[at, np.arange(vec.shape[1])], stage="spectral embedding: signs")
    s = np.sign(top)
    vec = vec * np.where(s == 0, 1.0, s)
    first = float(vals[0]) if drop_first else None
    vals = vals[1:] if drop_first else vals
    return SpectralResult(vec, vals, deg, first, eig.solver, records)
