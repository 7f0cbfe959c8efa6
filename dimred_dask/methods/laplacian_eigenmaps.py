"""Laplacian eigenmaps (Belkin & Niyogi 2003).

Heat-kernel weights w_ij = exp(-d_ij^2 / t) (``t`` defaults to the mean squared edge length)
or binary weights on the symmetrised kNN graph; the generalised problem L y = lambda D y,
its d + 1 smallest eigenpairs, the first (constant, lambda = 0) dropped:
`graphs.spectral_embedding` with ``normed=True`` (columns D-orthonormal, as scikit-learn's
``SpectralEmbedding``).

``transform`` by the Nyström formula (Bengio et al. 2004): D^-1 W y = (1 - lambda) y, so a new
point x with weights w_j to its k nearest training rows maps to

    y_c(x) = sum_j w_j y_c(x_j) / ((1 - lambda_c) sum_j w_j).

A training row is its own nearest neighbour (weight 1) in ``transform``, so transform of the
training data approximates ``embedding_`` without equalling it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .._validation import check_array
from ..graphs import check_n_neighbors, graph_csr, graph_weights, spectral_embedding
from ..graphs.worker_laplacian import spectral_embedding_workers
from ..linalg.sparse_eigen import choose_sparse_solver
from ._base import rows_at
from ._graph_common import (
    GraphEmbedding,
    GraphModel,
    check_eigen_solver,
    check_n_components_graph,
    check_weights,
    estimator_of,
    graph_for_fit,
    graph_info,
    graph_spec,
    training_rows,
)

__all__ = [
    "LaplacianEigenmaps",
    "LaplacianEigenmapsModel",
    "laplacian_eigenmaps",
    "check_weights",
    "check_laplacian_params",
]


@dataclass
class LaplacianEigenmapsModel(GraphModel):
    embedding: np.ndarray  # (n, k), y^T D y = 1
    eigenvalues: np.ndarray  # (k,) ascending, the dropped 0 excluded
    X_fit: np.ndarray
    n_neighbors: int
    weights: str
    t: float | None
    metric: str
    solver: str
    info: dict = field(default_factory=dict)

    def _placer(self):
        """The Nystrom formula: a new row's weights to its neighbours, their embedding."""
        Y, t, binary = self.embedding, self.t, self.weights == "binary"  # Y: in memory or stored
        scale = 1.0 / np.maximum(1.0 - np.asarray(self.eigenvalues, np.float64), 1e-12)

        def place(block, idx, dist):
            w = np.ones_like(dist) if binary else np.exp(-(dist**2) / t)
            w = w / np.maximum(w.sum(axis=1, keepdims=True), np.finfo(float).tiny)
            y = np.asarray(rows_at(Y, idx), np.float64)
            return np.einsum("bk,bkc->bc", w, y) * scale

        return place


def check_laplacian_params(params: dict, shape: tuple) -> None:
    """Refuse, before anything runs, `laplacian_eigenmaps` parameters that cannot apply to an
    input of ``shape``: the function's own checks and messages.

    Parameters
    ----------
    params : dict
        `laplacian_eigenmaps`'s keywords but ``graph``.
    shape : tuple of int
        The input's ``(n_samples, n_features)``.

    Raises
    ------
    InputError
        ``n_components``, ``weights``, ``t`` or ``eigen_solver`` out of range.
    """
    check_n_components_graph(params["n_components"], shape[0], "LaplacianEigenmaps")
    check_weights(params["weights"], params["t"])
    check_eigen_solver(params["eigen_solver"])


def laplacian_eigenmaps(
    X,
    *,
    n_components=2,
    n_neighbors=10,
    weights="heat",
    t=None,
    eigen_solver="auto",
    tol=1e-8,
    max_iter=None,
    metric="euclidean",
    knn_backend="auto",
    join_components=False,
    random_state=0,
    graph=None,
) -> LaplacianEigenmapsModel:
    """Laplacian eigenmaps of the rows of ``X`` (NumPy or dask); returns the model.

    Laplacian eigenmaps (Belkin & Niyogi 2003): the generalised problem L y = lambda D y on the
    weighted symmetrised kNN graph, the constant eigenvector dropped; columns D-orthonormal
    (y^T D y = 1).

    Parameters
    ----------
    X : array-like or dask array of shape (n_samples, n_features)
        The data rows.
    n_components : int, default 2
        An int in [1, n_samples - 2].
    n_neighbors : int, default 10
        An int in [1, n_samples - 1].
    weights : {"heat", "binary"}, default "heat"
        Heat-kernel weights w_ij = exp(-d_ij^2 / t), or binary weights.
    t : float or None, default None
        Heat kernel width (None: mean squared edge length).
    eigen_solver : {"auto", "dense", "arpack", "lobpcg", "amg", "lobpcg-workers"}, default "auto"
        The eigensolver; a solve that stops short is retried with dense, shift-invert
        ARPACK or, above 200 000 rows, "amg" (LOBPCG with a smoothed-aggregation multigrid
        preconditioner; see ``linalg.sparse_eigen``). "lobpcg-workers": LOBPCG with the
        Laplacian's rows and its n x p blocks on the Dask workers; "auto" takes it above
        200 000 rows when a client has two or more workers, "amg" there otherwise.
    tol : float, default 1e-8
        The eigensolver's tolerance.
    max_iter : int or None, default None
        The eigensolver's iterations (None: its own default).
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
    LaplacianEigenmapsModel
        The fitted model: embedding, eigenvalues, the heat width used, the eigensolver's
        records in ``info["convergence"]``.

    Raises
    ------
    InputError
        ``X`` is not a finite 2-D numeric array; ``n_components``, ``n_neighbors``,
        ``weights``, ``t``, ``eigen_solver`` or ``metric`` out of range; a point without an
        edge; a ``graph`` of another number of rows.
    DisconnectedGraphError
        The kNN graph has more than one component and ``join_components`` is False.
    SolverError
        No eigensolver converged.
    """
    return _laplacian_eigenmaps(**locals())


FIX = (
    "raise max_iter (laplacian_eigenmaps, --param max_iter) or loosen tol; or pass "
    "eigen_solver='arpack' (shift-invert) or 'dense' (small n)."
)


def _laplacian_eigenmaps(X, *, keep_rows=True, graph=None, **p) -> LaplacianEigenmapsModel:
    """`laplacian_eigenmaps`; ``keep_rows=False`` leaves ``X_fit`` as ``X`` itself (a run's
    store writes dask rows from the workers). A graph source (the run store's graph) is
    read on the workers when the solve is there too (`graphs.spectral_embedding_workers`:
    its connectivity is the kNN stage's to check), else read into memory."""
    X = check_array(X, method="LaplacianEigenmaps")
    check_laplacian_params(p, X.shape)
    k, n = int(p["n_components"]), X.shape[0]
    kn = check_n_neighbors(p["n_neighbors"], n, "LaplacianEigenmaps")
    solve = dict(tol=p["tol"], maxiter=p["max_iter"], random_state=p["random_state"])
    on_workers = choose_sparse_solver(p["eigen_solver"], n) == "lobpcg-workers"
    g, stored = graph_for_fit(X, graph, p, "LaplacianEigenmaps", stored=on_workers)
    if stored:
        res, t_used = spectral_embedding_workers(
            g, k, n_neighbors=kn, weights=p["weights"], t=p["t"],
            method="LaplacianEigenmaps", fix=FIX, **solve,
        )  # fmt: skip
    else:
        W, t_used = graph_weights(graph_csr(g), p["weights"], p["t"])
        res = spectral_embedding(
            W, k, normed=True, drop_first=True, solver=p["eigen_solver"],
            method="LaplacianEigenmaps", fix=FIX, **solve,
        )  # fmt: skip
    info = {
        "first_eigenvalue": res.first_eigenvalue,
        "convergence": res.convergence,
        "graph": graph_info(g, kn),
    }
    return LaplacianEigenmapsModel(
        res.embedding.astype(X.dtype),
        res.eigenvalues,
        training_rows(X, "LaplacianEigenmaps") if keep_rows else X,
        kn,
        p["weights"],
        t_used,
        p["metric"],
        res.solver,
        info,
    )


def _laplacian_in_a_run(X, **params) -> LaplacianEigenmapsModel:
    """`laplacian_eigenmaps` as a run calls it: the training rows stay where they are (the
    run store writes them from the workers; a loaded model reads them a chunk at a time)."""
    return _laplacian_eigenmaps(X, keep_rows=False, **params)


@estimator_of(laplacian_eigenmaps)
class LaplacianEigenmaps(GraphEmbedding):
    """Laplacian eigenmaps (Belkin & Niyogi 2003) on NumPy or dask arrays.

    Parameters
    ----------
    n_components : int in [1, n_samples - 2]
    n_neighbors : int
    weights : {"heat", "binary"}; t : heat kernel width (None: mean squared edge length)
    eigen_solver : {"auto", "dense", "arpack", "lobpcg", "amg", "lobpcg-workers"}; tol
    max_iter : int or None, the eigensolver's iterations (None: its own default)
    metric, knn_backend, join_components, random_state : the kNN graph's

    Attributes
    ----------
    embedding_ (y^T D y = 1), eigenvalues_, t_, n_components_, n_features_in_,
    convergence_ (the eigensolver's records; a solve that stops short is retried with
    shift-invert ARPACK or dense, see ``graphs.spectral``)
    """

    _attributes = {"t_": "t"}
    # Nystrom's out-of-sample formula (Bengio et al. 2004) places a training row from its k
    # nearest training rows, itself included: close to the eigenvector entry, not equal (an
    # extension, not a projection); max_iter goes to an external eigensolver (LAPACK, ARPACK,
    # LOBPCG) and only LOBPCG reports its iterations (in convergence_): no n_iter_, as
    # scikit-learn exempts its own Isomap, KernelPCA and LocallyLinearEmbedding
    _check_exempt = {
        **dict.fromkeys(
            ("check_transformer_general", "check_transformer_data_not_an_array"),
            "transform is the Nystrom extension, not equal to fit_transform on the training rows",
        ),
        "check_transformer_n_iter": "the eigensolver behind max_iter reports no iteration count",
    }


METHOD_SPECS = (
    graph_spec(
        "laplacian",
        LaplacianEigenmaps,
        laplacian_eigenmaps,
        LaplacianEigenmapsModel,
        check_laplacian_params,
        _laplacian_in_a_run,
        graph_in_store=True,
    ),
)
