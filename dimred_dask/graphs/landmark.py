"""Graph-side work of landmark MVU (Weinberger, Packer & Saul 2005; Weinberger, Sha, Zhu &
Saul 2006): the n x m basis Q with K ~ Q L Q^T, and the m x m data of the SDP over L.

- ``reconstruction_basis``: every point is reconstructed from its neighbours by LLE weights
  (``reconstruction_weights``, blockwise on the workers); with Phi = (I - W)^T (I - W), the
  positions that best respect the weights given the m landmark positions y_l are
  y_u = -Phi_uu^-1 Phi_ul y_l, so Q = [I ; -Phi_uu^-1 Phi_ul] (one sparse factorisation of
  Phi_uu, m right-hand sides). Rows of Q sum to 1 (weights sum to 1).
- ``laplacian_basis``: the bottom m non-constant eigenvectors of the graph Laplacian
  (``bottom_eigsh``); orthonormal and orthogonal to 1. Past ``ARPACK_MAX`` rows with a
  cluster, the Laplacian is built and solved on the workers and Q stays there (dask).
- ``edge_normals``: with v_e = q_i - q_j, a squared edge length of Q L Q^T is
  svec(v_e v_e^T) . svec(L); the penalty sum_e (svec(v_e v_e^T) . svec(L) - d_e^2)^2 needs only
  G = A^T A (p x p, p = m(m+1)/2), h = A^T d^2 and d^2 . d^2. They are sums over edges:
  one task per chunk of edges (on the workers when there is a client), the chunks' sums
  added there too (``edge_sums``), so one p x p matrix comes back.
  ``row_gram`` gives Q^T Q (the objective tr(Q L Q^T) = <Q^T Q, L>) and Q^T 1 the same way.
"""

from __future__ import annotations

from functools import reduce

import numpy as np
import scipy.sparse as sp
from scipy.sparse.linalg import splu

from .._compute import active_client, compute
from .._validation import is_dask
from ..errors import InputError
from .connectivity import graph_csr
from .knn import KNNGraph
from .laplacian import graph_weights, laplacian
from .weights import reconstruction_weights

__all__ = [
    "reconstruction_basis",
    "laplacian_basis",
    "edge_normals",
    "row_gram",
    "svec_index",
    "edge_sums",
    "EDGE_CHUNK",
]

# the worker-side solve of a Laplacian basis stops at residuals of this times the mean degree:
# the basis needs the graph's smooth subspace, not eigenvectors to the last digits (on 10^5
# rows of a 50-D mixture, 41 eigenpairs in a block of 82: 1e-6 after ~60 iterations, 1e-8
# after 76)
BASIS_TOL = 1e-6
FAN_IN = 8  # chunk results combined by one task of `edge_sums`
EDGE_CHUNK = 20_000  # edges per task of ``edge_normals`` (20 000 x p float64 at once)


def svec_index(m: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(rows, cols, scale) of the upper triangle of an m x m matrix in svec order, with scale
    1 on the diagonal and sqrt(2) off it (so svec(A) . svec(B) = <A, B>)."""
    r, c = np.triu_indices(m)
    return r, c, np.where(r == c, 1.0, np.sqrt(2.0))


def reconstruction_basis(X, graph: KNNGraph, landmarks: np.ndarray, reg: float = 1e-3):
    """The landmark MVU basis Q from LLE reconstruction weights; see the module docstring.

    Q = [I ; -Phi_uu^-1 Phi_ul] with Phi = (I - W)^T (I - W): the landmark rows of Q are the
    identity, and every other row places its point where it best respects the weights,
    given the landmarks' positions (Weinberger, Packer & Saul 2005). The weights are computed
    blockwise for dask ``X`` (`reconstruction_weights`); Phi_uu is factorised once in this
    process (SuperLU).

    Parameters
    ----------
    X : array-like or dask array of shape (n_samples, n_features)
        The rows the graph was built from.
    graph : KNNGraph
        Their kNN graph, without rows short of k.
    landmarks : array-like of int, shape (m,)
        The landmark rows, distinct.
    reg : float, default 1e-3
        The regularisation of the local Gram matrices, relative to their trace.

    Returns
    -------
    Q : numpy.ndarray of float64, shape (n, m)
        The basis; each row sums to 1 up to rounding.
    info : dict
        ``fill_in`` (the nonzeros of the LU factors) and ``row_sum_error`` (the largest
        deviation of a row sum from 1).

    Raises
    ------
    InputError
        ``reg`` is not a positive finite number; the graph's rows do not match ``X`` or
        some have fewer than k neighbours; the system of the non-landmark rows is singular
        (some rows are not tied to any landmark).
    """
    n = graph.n_samples
    lm = np.asarray(landmarks, dtype=np.int64)
    W = reconstruction_weights(X, graph, reg)  # (n, k), blockwise for dask input
    k = graph.n_neighbors
    Wm = sp.csr_matrix(
        (W.ravel(), (np.repeat(np.arange(n), k), graph.indices.ravel())), shape=(n, n)
    )
    IW = (sp.identity(n, format="csr") - Wm).tocsc()
    Phi = (IW.T @ IW).tocsc()
    free = np.setdiff1d(np.arange(n), lm)
    Puu = Phi[free][:, free].tocsc()
    Pul = Phi[free][:, lm].toarray()
    try:
        lu = splu(Puu, permc_spec="COLAMD")
    except RuntimeError as exc:
        raise InputError(
            f"Landmark MVU: the reconstruction system of the non-landmark rows is "
            f"singular ({exc}); some rows are not tied to any landmark.",
            "raise n_neighbors, or use basis='laplacian'.",
        ) from None
    Q = np.zeros((n, lm.size))
    Q[lm, np.arange(lm.size)] = 1.0
    Q[free] = -lu.solve(Pul)
    return Q, {
        "fill_in": int(lu.L.nnz + lu.U.nnz),
        "row_sum_error": float(np.abs(Q.sum(axis=1) - 1).max()),
    }


def laplacian_basis(graph: KNNGraph, m: int, *, solver: str = "auto", random_state=0):
    """The landmark MVU basis Q from the graph Laplacian's bottom eigenvectors.

    The bottom m + 1 eigenpairs of L = D - W over `graph_csr` with heat weights
    (`graph_weights`) are computed and the first (constant, for a connected graph) dropped;
    a solve that stops short is retried (``linalg.sparse_eigen.bottom_eigsh_checked``).

    Parameters
    ----------
    graph : KNNGraph
        The kNN graph, connected (with its extra edges).
    m : int
        The columns of Q, at most n - 2.
    solver : {"auto", "dense", "arpack", "lobpcg", "amg", "lobpcg-workers"}, default "auto"
        The first eigensolver tried (``linalg.sparse_eigen``).
    random_state : int, numpy Generator or None, default 0
        Seeds the iterative eigensolvers.

    Returns
    -------
    Q : numpy.ndarray or dask array of float64, shape (n, m)
        Orthonormal columns, orthogonal to 1 for a connected graph. When the solver is
        ``lobpcg-workers`` (``auto`` above ``linalg.ARPACK_MAX`` rows with a cluster of two
        workers or more), the Laplacian is built on the workers (`laplacian_on_workers`,
        each block sent its rows of the graph), solved to `BASIS_TOL` and Q stays there:
        a dask array of one chunk a row block.
    info : dict
        ``laplacian_eigenvalues`` (the m kept, ascending) and ``convergence`` (the records
        of every solve).

    Raises
    ------
    InputError
        An unknown ``solver``, or m + 1 eigenpairs asked of an n x n problem with
        m + 1 >= n.
    SolverError
        No eigensolver reached the requested accuracy.

    Warns
    -----
    ConvergenceWarning
        The first solver stopped short and another one converged.
    """
    from ..linalg.sparse_eigen import bottom_eigsh_checked, choose_sparse_solver

    if choose_sparse_solver(solver, graph.n_samples) == "lobpcg-workers":
        return _laplacian_basis_on_workers(graph, m, random_state)
    W, t = graph_weights(graph_csr(graph), "heat")
    L, _ = laplacian(W, normed=False)
    eig, records = bottom_eigsh_checked(
        L,
        m + 1,
        solver=solver,
        random_state=random_state,
        method="Landmark MVU",
        step=f"bottom {m + 1} eigenpairs of the graph Laplacian (basis)",
        fix="use basis='reconstruction' (no eigensolver), or fewer n_landmarks.",
    )
    order = np.argsort(eig.values)
    vecs = np.asarray(eig.vectors)[:, order][:, 1:]
    return vecs, {
        "laplacian_eigenvalues": np.asarray(eig.values)[order][1:].tolist(),
        "convergence": records,
    }


def _laplacian_basis_on_workers(graph: KNNGraph, m: int, random_state):
    """`laplacian_basis` with the Laplacian built and solved on the workers, Q left there (a
    dask array); a solve that stops short is retried in this process while n allows."""
    from .worker_laplacian import bottom_on_workers, laplacian_on_workers

    client = active_client()
    L, _, _ = laplacian_on_workers(graph, weights="heat", normed=False, client=client)
    eig, records = bottom_on_workers(
        L,
        m + 1,
        step=f"bottom {m + 1} eigenpairs of the graph Laplacian (basis)",
        method="Landmark MVU",
        fix="use basis='reconstruction' (no eigensolver), or fewer n_landmarks.",
        tol=BASIS_TOL,
        random_state=random_state,
        client=client,
        keep=True,
    )
    order = np.argsort(eig.values)
    return eig.vectors[:, order[1:]], {
        "laplacian_eigenvalues": np.asarray(eig.values)[order][1:].tolist(),
        "convergence": records,
    }


def _normals_block(Qi: np.ndarray, Qj: np.ndarray, d2: np.ndarray):
    m = Qi.shape[1]
    r, c, sc = svec_index(m)
    V = Qi - Qj
    A = V[:, r] * V[:, c] * sc
    return A.T @ A, A.T @ d2, float(d2 @ d2)


def edge_normals(
    Q: np.ndarray, I: np.ndarray, J: np.ndarray, d2: np.ndarray, *, chunk: int | None = None
) -> tuple[np.ndarray, np.ndarray, float]:
    """The normal equations of the edge-length penalty over L; see the module docstring.

    Row e of A is svec(v_e v_e^T) with v_e = Q[I[e]] - Q[J[e]], so that A svec(L) holds the
    squared edge lengths of Q L Q^T. One sum a chunk of edges (`edge_sums`: on the
    workers with a distributed client and more than ``chunk`` edges or a dask Q).

    Parameters
    ----------
    Q : numpy.ndarray or dask array of shape (n, m)
        The basis.
    I, J : numpy.ndarray of int, shape (e,)
        The edges' two ends (row numbers of ``Q``).
    d2 : numpy.ndarray of shape (e,)
        The edges' squared lengths.
    chunk : int or None, default None
        Edges per chunk; None: `EDGE_CHUNK` (20 000).

    Returns
    -------
    G : numpy.ndarray of float64, shape (p, p)
        A^T A, with p = m (m + 1) / 2.
    h : numpy.ndarray of float64, shape (p,)
        A^T d2.
    c0 : float
        d2 . d2.
    """
    G, h, c0 = edge_sums(
        _normals_block,
        _add_normals,
        Q,
        I,
        J,
        d2,
        chunk=chunk,
        stage="landmark MVU: edge constraint normals",
    )
    return G, h, float(c0)


def edge_sums(fn, combine, Q, I, J, d2, *args, chunk: int | None = None, stage: str = "edges"):
    """fn(Q[I_c], Q[J_c], d2_c, *args) for every chunk c of ``chunk`` edges, combined.

    With a distributed client, and more than one chunk or a dask ``Q``: one task a chunk,
    ``Q`` and the edges sent to the workers once (a dask ``Q`` is assembled there, never
    here; the edges ``FAN_IN`` chunks a piece), the chunks' results combined on the workers
    ``FAN_IN`` at a time, so that only the one combined result comes back; else in this
    process, combined as they come.

    Parameters
    ----------
    fn : callable
        fn(Qi, Qj, d2, *args) for the rows of Q at the chunk's two ends.
    combine : callable
        combine(a, b): two results (of ``fn`` or of ``combine``) as one.
    Q : numpy.ndarray or dask array of shape (n, m)
        The rows the edges join.
    I, J : numpy.ndarray of int, shape (e,)
        The edges' two ends, e >= 1.
    d2 : numpy.ndarray of shape (e,)
        A value per edge (its squared length).
    *args
        Passed to ``fn``.
    chunk : int or None, default None
        Edges per chunk; None: `EDGE_CHUNK`.
    stage : str, default "edges"
        The stage named in the progress and in errors.

    Returns
    -------
    object
        The chunks' results combined, in edge order.
    """
    chunk = int(chunk or EDGE_CHUNK)
    starts = range(0, I.size, chunk)
    client = active_client()
    if is_dask(Q) and client is None:
        Q = np.asarray(Q.compute())
    if not is_dask(Q) and (client is None or I.size <= chunk):
        return reduce(
            combine,
            (
                fn(Q[I[s : s + chunk]], Q[J[s : s + chunk]], d2[s : s + chunk], *args)
                for s in starts
            ),
        )
    from dask import delayed

    if is_dask(Q):  # one key made on a worker from Q's blocks
        Qd = Q.rechunk(Q.shape).to_delayed().ravel()[0]
    else:
        Qd = client.scatter(Q, hash=False)
    # the edges sent once (not cut into every task), FAN_IN chunks a piece: a piece at a time
    # is serialised here
    step = chunk * FAN_IN
    pieces = [
        client.scatter([(I[a : a + step], J[a : a + step], d2[a : a + step])], hash=False)[0]
        for a in range(0, I.size, step)
    ]
    parts = [
        delayed(_on_chunk, pure=True)(fn, Qd, pieces[s // step], s % step, s % step + chunk, *args)
        for s in starts
    ]
    while len(parts) > 1:
        parts = [
            delayed(_combined, pure=True)(combine, *parts[i : i + FAN_IN])
            for i in range(0, len(parts), FAN_IN)
        ]
    (out,) = compute(parts[0], stage=stage)
    return out


def _on_chunk(fn, Q, edges, a, b, *args):
    I, J, d2 = (e[a:b] for e in edges)
    return fn(Q[I], Q[J], d2, *args)


def _combined(combine, *parts):
    return reduce(combine, parts)


def _add_normals(x, y):
    return x[0] + y[0], x[1] + y[1], x[2] + y[2]


def row_gram(Q) -> tuple[np.ndarray, np.ndarray]:
    """(Q^T Q, Q^T 1) — for a dask Q, as one blockwise pass."""
    if hasattr(Q, "dask"):
        (G, s) = compute(Q.T @ Q, Q.sum(axis=0), stage="landmark MVU: Q^T Q")
        return np.asarray(G), np.asarray(s)
    return Q.T @ Q, Q.sum(axis=0)
