"""Locally linear embedding (Roweis & Saul 2000; Saul & Roweis 2003).

1. the kNN graph (shared);
2. reconstruction weights: for each x_i, the w minimising ||x_i - sum_j w_j x_j||^2 over its
   k neighbours with sum_j w_j = 1, i.e. G w = 1 with G the local Gram matrix (plus
   ``reg * trace(G)`` on the diagonal, needed when k > d), normalised to sum 1
   (`graphs.reconstruction_weights`, one task per row chunk on the workers);
3. the d + 1 bottom eigenvectors of M = (I - W)^T (I - W) (sparse, nnz ~ n k^2), dropping
   the constant one (eigenvalue 0): `linalg.bottom_eigsh` (dense, shift-invert ARPACK,
   LOBPCG) on M, or, above ``ARPACK_MAX`` rows by default (``eigen_solver="factored"``),
   `linalg.bottom_eigsh_gram` from a sparse LU of A = I - W instead of M (M's LU fills in:
   12 GB and 23 minutes at n = 1 000 000; see that module), the constant deflated. On
   data of more than ``FACTORIZE_MAX_DIM`` columns both factorisations fill in, and "auto"
   takes `linalg.bottom_eigsh_lobpcg` instead: LOBPCG on products with A = I - W (M never
   formed), Jacobi-preconditioned (or aggregation multigrid, ``eigen_solver="amg"``),
   guard vectors in the block, the constant deflated; above ``ARPACK_MAX`` rows with a
   cluster of two or more workers, the same iteration with I - W's rows and the n x p
   blocks on the workers (``eigen_solver="lobpcg-workers"``, `linalg.worker_lobpcg`).

   A solve that stops short of its tolerance is not returned: it is retried with the robust
   solver of its size class (``lle_fallbacks``: dense up to ``DENSE_MAX_SPARSE`` rows,
   shift-invert ARPACK up to ``ARPACK_MAX``, the factored solver above), and when none
   converges `SolverError` says where it stopped and what to change. Every attempt's record
   (``linalg.convergence``) is in ``info["convergence"]`` / ``convergence_``. On a 10-D
   swiss roll (3100 rows) "auto" picks LOBPCG, which stalls at residual 1.1e-5 against
   1.2e-8 (trustworthiness 0.85): the retry with ARPACK gives ARPACK's result (0.991).

Scale: Roweis & Saul's constraint (1/n) Y^T Y = I, so Y = sqrt(n) V (scikit-learn returns the
unit-norm V; the two differ by that factor only). ``reconstruction_error`` is the sum of
the kept eigenvalues, as scikit-learn reports it (for the unit-norm V).

``transform`` of new points (the out-of-sample extension of Saul & Roweis 2003): the weights
that reconstruct x from its k nearest training rows, applied to their embedding,
y = sum_j w_j y_j.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import partial

import numpy as np
import scipy.sparse as sp

from .._compute import active_client
from .._validation import check_array
from ..blocks.neighbors import reconstruction_weights_block
from ..errors import InputError
from ..graphs import check_n_neighbors, check_reg, reconstruction_weights
from ..graphs.worker_lle import lle_operator_on_workers
from ..linalg import (
    ARPACK_MAX,
    DENSE_MAX_SPARSE,
    SPARSE_EIGEN_SOLVERS,
    bottom_eigsh,
    bottom_eigsh_gram,
    bottom_eigsh_lobpcg,
)
from ..linalg.convergence import solve_with_fallbacks
from ..linalg.sparse_eigen import workers_at_hand
from ..linalg.worker_lobpcg import WorkerRows, bottom_eigsh_lobpcg_workers
from ._base import rows_at
from ._graph_common import (
    GraphEmbedding,
    GraphModel,
    check_eigen_solver,
    check_n_components_graph,
    estimator_of,
    graph_for_fit,
    graph_info,
    graph_spec,
    training_rows,
)

__all__ = [
    "LocallyLinearEmbedding",
    "LLEModel",
    "lle",
    "lle_matrix",
    "LLE_EIGEN_SOLVERS",
    "check_lle_params",
]

LLE_EIGEN_SOLVERS = SPARSE_EIGEN_SOLVERS + ("factored",)  # "amg": its own multigrid on I - W
# "auto" factorises (shift-invert ARPACK on M, or the factored solver) only for data of at
# most this many columns; above it, LOBPCG on products with I - W. Factorisations fill in on
# kNN graphs of high-dimensional data (the LU of I - W stays sparse on a low-dimensional
# manifold but not there, and shift-invert on M becomes impractical), whereas LOBPCG needs the
# bottom eigenvalues not too small against M's diagonal: true on high-dimensional data, not on
# a low-dimensional manifold such as the swiss roll, where it stalls. See bench/HISTORY.md.
FACTORIZE_MAX_DIM = 8


@dataclass
class LLEModel(GraphModel):
    embedding: np.ndarray  # (n, k), (1/n) Y^T Y = I
    eigenvalues: np.ndarray  # (k,) of M, ascending (the dropped ~0 one excluded)
    X_fit: np.ndarray  # (n, d)
    n_neighbors: int
    reg: float
    metric: str
    reconstruction_error: float
    solver: str
    info: dict = field(default_factory=dict)

    def _placer(self):
        """The weights that reconstruct a new row from its neighbours, on their embedding."""
        X_fit, Y, reg = self.X_fit, self.embedding, self.reg

        def place(block, idx, _):  # X_fit and Y in memory or in a run store (rows read as needed)
            w = reconstruction_weights_block(np.asarray(block), rows_at(X_fit, idx), reg)
            return np.einsum("bk,bkc->bc", w, np.asarray(rows_at(Y, idx), np.float64))

        return place


def lle_operator(weights: np.ndarray, indices: np.ndarray):
    """A = I - W as CSR from the (n, k) weights of each row's neighbours."""
    n, k = indices.shape
    W = sp.csr_matrix(
        (weights.ravel(), (np.repeat(np.arange(n), k), indices.ravel())), shape=(n, n)
    )
    return (sp.identity(n, format="csr") - W).tocsr()


def lle_matrix(weights: np.ndarray, indices: np.ndarray):
    """M = (I - W)^T (I - W) as CSR from the (n, k) weights of each row's neighbours.

    Parameters
    ----------
    weights : numpy.ndarray of shape (n, k)
        Row i's reconstruction weights of its k neighbours.
    indices : numpy.ndarray of shape (n, k)
        Row i's neighbours (row indices, in the order of ``weights``).

    Returns
    -------
    scipy.sparse.csr_matrix of shape (n, n)
        M = (I - W)^T (I - W).
    """
    A = lle_operator(weights, indices)
    return (A.T @ A).tocsr()


def choose_lle_solver(solver: str, n: int, d: int, workers: bool | None = None) -> str:
    """``auto``: dense up to DENSE_MAX_SPARSE rows; then, for data of at most
    FACTORIZE_MAX_DIM columns, shift-invert ARPACK up to ARPACK_MAX and the factored solver
    above; for wider data, LOBPCG on products with I - W (above ARPACK_MAX rows on the
    workers, when there are two or more; ``workers``: whether there are, None to ask the
    active Dask client)."""
    if solver != "auto":
        return solver
    if n <= DENSE_MAX_SPARSE:
        return "dense"
    if d > FACTORIZE_MAX_DIM:
        if n > ARPACK_MAX and (workers_at_hand() if workers is None else workers):
            return "lobpcg-workers"
        return "lobpcg"
    return "arpack" if n <= ARPACK_MAX else "factored"


def lle_fallbacks(solver: str, n: int) -> list[str]:
    """The robust solvers LLE retries with, in order, when ``solver`` stops short: dense
    while it fits; else shift-invert ARPACK up to ARPACK_MAX rows and the factored solver
    (LU of I - W) above; ARPACK's own fallback is the factored solver."""
    if solver == "dense":
        return []
    if n <= DENSE_MAX_SPARSE:
        return ["dense"]
    if solver == "arpack":
        return ["factored"]
    return ["arpack"] if n <= ARPACK_MAX else [] if solver == "factored" else ["factored"]


def _bottom(A, k, solver, tol, max_iter, random_state, first=None):
    """The k bottom eigenpairs of M = A^T A after the constant one: (values, vectors, the
    dropped eigenvalue, solver, info, convergence record). ``A`` may be held on the
    workers (`WorkerRows`, ``first``: the constant's quotient): a solver other than
    ``lobpcg-workers`` runs on A assembled on one worker (not started, its record saying
    so, when it would not fit there)."""
    n = A.shape[0]
    if isinstance(A, WorkerRows):
        if solver == "lobpcg-workers":
            eig = bottom_eigsh_lobpcg_workers(
                A, k, kind="gram", tol=tol, maxiter=max_iter, random_state=random_state
            )
            return eig.values, eig.vectors, first, solver, dict(eig.info), eig.convergence
        client = active_client()
        short = A.room_on_a_worker(client, solver, k + 1)
        if short is not None:
            return None, None, None, solver, {}, short
        solve = partial(
            _bottom, k=k, solver=solver, tol=tol, max_iter=max_iter, random_state=random_state
        )
        return A.on_a_worker(client, solve)
    deflated = {  # solvers that keep the constant out of their block
        "lobpcg-workers": lambda: bottom_eigsh_lobpcg_workers(
            A, k, kind="gram", null=np.ones(n), tol=tol, maxiter=max_iter, random_state=random_state
        ),
        "lobpcg": lambda: bottom_eigsh_lobpcg(
            A, k, null=np.ones(n), tol=tol, maxiter=max_iter, random_state=random_state
        ),
        "amg": lambda: bottom_eigsh_lobpcg(
            A,
            k,
            null=np.ones(n),
            tol=tol,
            maxiter=max_iter,
            random_state=random_state,
            preconditioner="amg",
        ),
        "factored": lambda: bottom_eigsh_gram(
            A, k, null=np.ones(n), tol=tol, maxiter=max_iter, random_state=random_state
        ),
    }
    if solver in deflated:
        eig = deflated[solver]()
        first = float(np.sum((A @ np.ones(n)) ** 2)) / n  # the constant's, ~0
        return eig.values, eig.vectors, first, solver, dict(eig.info), eig.convergence
    M = (A.T @ A).tocsr()
    eig = bottom_eigsh(
        M, k + 1, solver=solver, tol=tol, maxiter=max_iter, random_state=random_state
    )
    return (
        eig.values[1:],
        eig.vectors[:, 1:],
        float(eig.values[0]),
        eig.solver,
        {"nnz_M": int(M.nnz)},
        eig.convergence,
    )


def _bottom_checked(A, k, solver, tol, max_iter, random_state, first=None):
    """`_bottom` with `lle_fallbacks` (``max_iter`` is the first solver's; the others run
    with their defaults): (values, vectors, dropped eigenvalue, solver, info, records)."""
    n = A.shape[0]

    def attempt(s):
        out = _bottom(A, k, s, tol, max_iter if s == solver else None, random_state, first)
        return out[:5], out[5]

    (vals, vec, first, used, info), records = solve_with_fallbacks(
        attempt,
        [solver] + lle_fallbacks(solver, n),
        method="LLE",
        step=f"bottom {k} eigenpairs of M = (I - W)^T (I - W) (the constant excluded)",
        fix=f"raise max_iter or loosen tol; or pass eigen_solver='arpack' (up to "
        f"{ARPACK_MAX} rows), 'factored' (above) or 'dense' (up to {DENSE_MAX_SPARSE}).",
    )
    return vals, vec, first, used, info, records


def lle(
    X,
    *,
    n_components=2,
    n_neighbors=10,
    reg=1e-3,
    eigen_solver="auto",
    tol=1e-8,
    max_iter=None,
    metric="euclidean",
    knn_backend="auto",
    join_components=False,
    random_state=0,
    graph=None,
) -> LLEModel:
    """LLE of the rows of ``X`` (NumPy or dask); returns the `LLEModel`.

    Locally linear embedding (Roweis & Saul 2000; Saul & Roweis 2003), scaled so that
    (1/n) Y^T Y = I. A solve that stops short of ``tol`` is retried with the robust solver of
    its size class (``lle_fallbacks``).

    Parameters
    ----------
    X : array-like or dask array of shape (n_samples, n_features)
        The data rows.
    n_components : int, default 2
        An int in [1, n_samples - 2].
    n_neighbors : int, default 10
        More than n_components, less than n_samples.
    reg : float, default 1e-3
        > 0, the ridge on the local Gram matrix (times its trace).
    eigen_solver : {"auto", "dense", "arpack", "lobpcg", "lobpcg-workers", "factored", \
"amg"}, default "auto"
        "auto" is dense up to 3000 rows; then, for data of at most 8 columns, shift-invert
        ARPACK on M up to 200 000 rows and "factored" (LU of I - W) above; for wider data
        "lobpcg" (LOBPCG on products with I - W, Jacobi-preconditioned, the constant deflated),
        above 200 000 rows "lobpcg-workers" when a Dask client has two or more workers (the
        same iteration with its blocks on the workers). "amg": LOBPCG with an aggregation
        multigrid preconditioner.
    tol : float, default 1e-8
        The eigensolver's tolerance.
    max_iter : int or None, default None
        The eigensolver's iteration limit (the first solver's; fallbacks run with their
        defaults); None for its default.
    metric : str, default "euclidean"
        The kNN graph's metric.
    knn_backend : {"auto", "exact", "nndescent", "partitioned"}, default "auto"
        The kNN graph's backend.
    join_components : bool, default False
        Join a disconnected kNN graph by its shortest edges (else refused).
    random_state : int, numpy Generator or None, default 0
        Seeds the kNN graph and the eigensolver.
    graph : KNNGraph or None, default None
        A `KNNGraph` of these rows to use instead of building one.

    Returns
    -------
    LLEModel
        The fitted model: embedding, eigenvalues, reconstruction error (the sum of the kept
        eigenvalues), the eigensolver's records in ``info["convergence"]``.

    Raises
    ------
    InputError
        ``X`` is not a finite 2-D numeric array; ``n_components``, ``n_neighbors``, ``reg``,
        ``eigen_solver`` or ``metric`` out of range; n_neighbors <= n_components; a ``graph``
        of another number of rows.
    DisconnectedGraphError
        The kNN graph has more than one component and ``join_components`` is False.
    SolverError
        No eigensolver (the one asked for and its fallbacks) converged.
    """
    return _lle(**locals())


def _lle(X, *, keep_rows=True, graph=None, **p) -> LLEModel:
    """`lle`; ``keep_rows=False`` leaves ``X_fit`` as ``X`` itself (a run's store writes dask
    rows from the workers). A graph source (the run store's graph) is read on the workers
    when the solve is there too (`graphs.lle_operator_on_workers`: the weights and I - W
    made there; its connectivity is the kNN stage's to check), else read into memory."""
    X = check_array(X, method="LLE")
    n = X.shape[0]
    k = check_n_components_graph(p["n_components"], n, "LLE")
    reg = check_reg(p["reg"])
    check_eigen_solver(p["eigen_solver"], LLE_EIGEN_SOLVERS)
    solve = (p["tol"], p["max_iter"], p["random_state"])
    solver = choose_lle_solver(p["eigen_solver"], n, int(X.shape[1]))
    g, stored = graph_for_fit(X, graph, p, "LLE", stored=solver == "lobpcg-workers")
    kn = int(g.n_neighbors)
    _check_more_neighbours(kn, k)
    if stored:
        A, first = lle_operator_on_workers(g, X, n_neighbors=kn, reg=reg)
        vals, vec, first, solver, info, records = _bottom_checked(A, k, solver, *solve, first)
    else:
        w = reconstruction_weights(X, g, reg)
        vals, vec, first, solver, info, records = _bottom_checked(
            lle_operator(w, g.indices), k, solver, *solve
        )
    vec = np.asarray(vec, np.float64)
    s = np.sign(vec[np.argmax(np.abs(vec), axis=0), np.arange(k)])
    vec = vec * np.where(s == 0, 1.0, s)
    vals = np.asarray(vals, np.float64)
    info.update({"first_eigenvalue": first, "convergence": records, "graph": graph_info(g, kn)})
    return LLEModel(
        (np.sqrt(n) * vec).astype(X.dtype),
        vals,
        training_rows(X, "LLE") if keep_rows else X,
        kn,
        reg,
        p["metric"],
        float(vals.sum()),
        solver,
        info,
    )


def _lle_in_a_run(X, **params) -> LLEModel:
    """`lle` as a run calls it: the training rows stay where they are (the run store writes
    them from the workers; a loaded model reads them a chunk at a time)."""
    return _lle(X, keep_rows=False, **params)


def _check_more_neighbours(n_neighbors: int, k: int) -> None:
    if n_neighbors <= k:
        raise InputError(
            f"LLE needs n_neighbors > n_components; found n_neighbors="
            f"{n_neighbors}, n_components={k}.",
            f"pass n_neighbors of at least {k + 1} (10 or more is usual).",
        )


def check_lle_params(params: dict, shape: tuple) -> None:
    """Refuse, before anything runs, `lle` parameters that cannot apply to an input of
    ``shape``: the function's own checks and messages.

    Parameters
    ----------
    params : dict
        `lle`'s keywords but ``graph``.
    shape : tuple of int
        The input's ``(n_samples, n_features)``.

    Raises
    ------
    InputError
        ``n_components``, ``reg``, ``eigen_solver`` or ``n_neighbors`` out of range, or
        ``n_neighbors`` not above ``n_components``.
    """
    n = shape[0]
    k = check_n_components_graph(params["n_components"], n, "LLE")
    check_reg(params["reg"])
    check_eigen_solver(params["eigen_solver"], LLE_EIGEN_SOLVERS)
    _check_more_neighbours(check_n_neighbors(params["n_neighbors"], n, "LLE"), k)


@estimator_of(lle)
class LocallyLinearEmbedding(GraphEmbedding):
    """LLE (Roweis & Saul 2000) on NumPy or dask arrays.

    Parameters
    ----------
    n_components : int in [1, n_samples - 2]
    n_neighbors : int, more than n_components
    reg : float > 0, the ridge on the local Gram matrix (times its trace)
    eigen_solver : {"auto", "dense", "arpack", "lobpcg", "lobpcg-workers", "factored", "amg"};
        "auto" is dense up to 3000 rows; then, for data of at most 8 columns, shift-invert
        ARPACK on M up to 200 000 rows and "factored" (LU of I - W) above; for wider data
        "lobpcg" (LOBPCG on products with I - W, Jacobi-preconditioned, the constant
        deflated), above 200 000 rows "lobpcg-workers" when a Dask client has two or more
        workers (its blocks on the workers). "amg": LOBPCG with an aggregation multigrid
        preconditioner
    tol, max_iter : the eigensolver's
    metric, knn_backend, join_components, random_state : the kNN graph's

    Attributes
    ----------
    embedding_ ((1/n) Y^T Y = I), eigenvalues_, reconstruction_error_, n_components_,
    n_features_in_, convergence_ (the eigensolver's records, a retried solve's first)
    """

    _method = "LLE"
    _attributes = {"reconstruction_error_": "reconstruction_error"}
    # transform re-solves a training row's reconstruction weights with the row itself among
    # its k nearest training rows (ridge reg * trace(G)): within O(reg) of its embedding,
    # above the check's atol of 0.01
    _check_exempt = dict.fromkeys(
        ("check_transformer_general", "check_transformer_data_not_an_array"),
        "transform re-solves the weights of a training row with itself as a neighbour",
    )


METHOD_SPECS = (
    graph_spec(
        "lle",
        LocallyLinearEmbedding,
        lle,
        LLEModel,
        check_lle_params,
        _lle_in_a_run,
        graph_in_store=True,
    ),
)
