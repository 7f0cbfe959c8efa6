"""Isomap and landmark Isomap (Tenenbaum, de Silva & Langford 2000; de Silva & Tenenbaum
2003).

Isomap = kNN graph -> geodesic distances (shortest paths on the symmetrised graph) ->
classical MDS of the geodesic matrix D^G:

    B = -1/2 J (D^G)^2 J = V Lambda V^T,   Y = V_k Lambda_k^1/2

D^G is not Euclidean, so B is not positive semidefinite. Only the positive
part is kept: components whose eigenvalue is not above rounding are set to zero (with a
warning), and the negative part is reported (``negative_mass`` = sum |lambda < 0| / sum
|lambda| with the dense solver, ``negative_ratio`` = |lambda_min| / lambda_max otherwise),
as classical MDS reports it. Geodesics: `graphs.geodesic_matrix` (Dijkstra from every
point on numba's threads in this process, where the matrix is used; each run settles only the
points whose rows are not finished yet), or on the workers for dask input with a cluster
(`isomap_on_workers`, `graphs.geodesic_matrix_on_workers`: the same groups of sources, a
task a worker in each). The MDS is
`methods.mds.classical_mds` of the precomputed geodesic matrix (dense, randomized or Lanczos).

Landmark Isomap (``LandmarkIsomap``, for large n): Dijkstra from m landmarks only (an m x n
matrix, O(m (E + n log n))), classical MDS of the m x m landmark block, and every point
triangulated from its geodesic distances to the landmarks, which is `MDSModel.transform` of
the precomputed landmark MDS (de Silva & Tenenbaum's L# formula). Then, as in landmark MDS,
the coordinates are centred and rotated onto their principal axes (a k x k eigenproblem).

``transform`` of new points (both): the geodesic from a new x to reference point l is
min over x's kNN j among the training rows of d(x, x_j) + D^G(j, l), then the MDS
triangulation. A training row finds itself at distance 0, so ``transform`` of the training
data gives back ``embedding_``.
"""

from __future__ import annotations

import inspect

import numpy as np

from .._validation import check_array, check_fits_in_memory, check_random_state
from ..errors import InputError
from ..graphs import (
    check_n_neighbors,
    geodesic_matrix,
    geodesic_matrix_on_workers,
    geodesic_rows,
    geodesic_rows_on_workers,
)
from ..linalg import choose_landmarks
from ..pairwise import check_metric
from ._base import DimredEstimator, ModelTransform, column_signs, like_input
from ._graph_common import (
    estimator_of,
    fit_graph,
    graph_for_fit,
    graph_info,
    graph_spec,
    is_int_in,
    training_rows,
)
from ._isomap_model import IsomapModel
from ._mds_parts import MDS_SOLVERS
from .mds import classical_mds

__all__ = [
    "Isomap",
    "LandmarkIsomap",
    "IsomapModel",
    "isomap",
    "landmark_isomap",
    "DEFAULT_N_LANDMARKS",
    "check_isomap_on_workers_params",
    "check_landmark_isomap_params",
    "ON_WORKERS_MAX",
]

DEFAULT_N_LANDMARKS = 300  # n_landmarks=None: min(n_samples, this)
ON_WORKERS_MAX = 20_000  # full Isomap in a run: n x n geodesics on the workers (3.2 GB here)
# full Isomap in memory holds about this many float64 n x n matrices at its peak (the
# geodesics, their squares, B; 4.2 measured at 3000 rows with the dense solver, 2.4 at 8000
# with the randomized one), and is refused when they would not fit (check_fits_in_memory)
IN_MEMORY_COPIES = 4
LANDMARK_CHOICES = ("maxmin", "uniform")  # of linalg.LANDMARK_METHODS: rows, graph vertices
TRIANGULATE_ROWS = 65_536  # rows triangulated at once (a rows x m float64 temporary)


# --------------------------------------------------------------------------- checks


def _check_common(X, n_components, n_neighbors, metric, method: str, limit: int):
    X = check_array(X, method=method)
    return X, _check_common_params(X.shape[0], n_components, n_neighbors, metric, method, limit)


def _check_common_params(n: int, n_components, n_neighbors, metric, method: str, limit: int):
    check_n_neighbors(n_neighbors, n, method)
    if not isinstance(metric, str) or metric == "precomputed":
        raise InputError(
            f"{method} needs the data rows and a metric name; found metric={metric!r}.",
            "pass metric='euclidean' (the default).",
        )
    check_metric(metric, 2.0)
    if not is_int_in(n_components, 1, limit):
        raise InputError(
            f"{method} needs n_components as an int in [1, {limit}] "
            f"(n_samples = {n}); found {n_components!r}.",
            f"pass n_components between 1 and {limit} (2 is usual).",
        )
    return int(n_components)


def _check_solver(solver) -> None:
    if solver not in MDS_SOLVERS:
        raise InputError(
            f"Isomap solver must be one of {', '.join(MDS_SOLVERS)}; found {solver!r}.",
            "pass solver='auto'.",
        )


def _check_landmarks(n: int, k: int, m, landmarks) -> int:
    m = min(n, DEFAULT_N_LANDMARKS) if m is None else m
    if not is_int_in(m, k + 1, n):
        raise InputError(
            f"LandmarkIsomap needs n_landmarks as an int in [{k + 1}, {n}] "
            f"(more than n_components, at most n_samples); found {m!r}.",
            f"pass n_landmarks between {k + 1} and {n} (a few hundred is usual).",
        )
    if landmarks not in LANDMARK_CHOICES:
        raise InputError(
            f"landmarks must be 'maxmin' or 'uniform'; found {landmarks!r}.",
            "pass landmarks='maxmin'.",
        )
    return int(m)


def _check_in_memory(n: int) -> None:
    """`InputError` when the in-memory route's ``IN_MEMORY_COPIES`` n x n matrices would
    not fit in the memory available."""
    check_fits_in_memory(
        IN_MEMORY_COPIES * 8 * n * n,
        f"Isomap holds the {n} x {n} geodesic matrix and the matrices of its classical MDS "
        "in this process",
        "use LandmarkIsomap (Dijkstra from a few hundred landmarks, nothing n x n), or run "
        "method isomap through the flow on a Dask cluster (the geodesics stay on the "
        f"workers, up to {ON_WORKERS_MAX} rows).",
    )


def check_isomap_on_workers_params(params: dict, shape: tuple) -> None:
    """Refuse, before anything runs, `isomap_on_workers` parameters that cannot apply to an
    input of ``shape``: `isomap`'s own checks and messages, and at most ``ON_WORKERS_MAX``
    rows (the n x n geodesic matrix the workers hold).

    Parameters
    ----------
    params : dict
        `isomap`'s keywords but ``graph``.
    shape : tuple of int
        The input's ``(n_samples, n_features)``.

    Raises
    ------
    InputError
        ``n_components``, ``n_neighbors``, ``metric`` or ``solver`` out of range, or more
        than ``ON_WORKERS_MAX`` rows.
    """
    n = shape[0]
    _check_common_params(
        n, params["n_components"], params["n_neighbors"], params["metric"], "Isomap", n - 1
    )
    _check_solver(params["solver"])
    if n > ON_WORKERS_MAX:
        raise InputError(
            f"Isomap holds the n x n geodesic matrix (on the workers); n_samples = {n} is "
            f"above {ON_WORKERS_MAX}.",
            "use landmark Isomap (method landmark-isomap, `LandmarkIsomap`: Dijkstra from a "
            "few hundred landmarks only).",
        )


def check_landmark_isomap_params(params: dict, shape: tuple) -> None:
    """Refuse, before anything runs, `landmark_isomap` parameters that cannot apply to an
    input of ``shape``: the function's own checks and messages.

    Parameters
    ----------
    params : dict
        `landmark_isomap`'s keywords but ``graph``.
    shape : tuple of int
        The input's ``(n_samples, n_features)``.

    Raises
    ------
    InputError
        ``n_components``, ``n_neighbors``, ``metric``, ``n_landmarks`` or ``landmarks`` out
        of range.
    """
    n = shape[0]
    k = _check_common_params(
        n, params["n_components"], params["n_neighbors"], params["metric"], "LandmarkIsomap", n - 2
    )
    _check_landmarks(n, k, params["n_landmarks"], params["landmarks"])


# --------------------------------------------------------------------------- full Isomap


def isomap(
    X,
    *,
    n_components=2,
    n_neighbors=10,
    metric="euclidean",
    knn_backend="auto",
    join_components=False,
    solver="auto",
    n_oversamples=10,
    n_iter=4,
    random_state=0,
    graph=None,
) -> IsomapModel:
    """Isomap of the rows of ``X`` (NumPy or dask); returns the `IsomapModel`.

    Isomap (Tenenbaum, de Silva & Langford 2000): kNN graph, geodesic distances, classical MDS
    of the geodesic matrix (its positive part; the negative part is reported). Holds the n x n
    geodesic matrix in memory: for n up to ~20 000; use `landmark_isomap` above
    (`isomap_on_workers` leaves the matrix on the workers).

    Parameters
    ----------
    X : array-like or dask array of shape (n_samples, n_features)
        The data rows.
    n_components : int, default 2
        An int in [1, n_samples - 1].
    n_neighbors : int, default 10
        An int in [1, n_samples - 1].
    metric : str, default "euclidean"
        The kNN metric (euclidean, manhattan, ...); "precomputed" is refused.
    knn_backend : {"auto", "exact", "nndescent", "partitioned"}, default "auto"
        How the kNN graph is built.
    join_components : bool, default False
        Join a disconnected graph by its shortest edges (else refused).
    solver : {"auto", "dense", "randomized", "lanczos"}, default "auto"
        Classical MDS's (``dense`` up to 4000 points under ``auto``, else ``randomized``).
    n_oversamples : int, default 10
        Randomized solver only.
    n_iter : int, default 4
        Randomized solver only.
    random_state : int, numpy Generator or None, default 0
        Seeds the kNN graph and the randomized solver.
    graph : KNNGraph or None, default None
        A `KNNGraph` of these rows (the flow's stored one) instead of building it.

    Returns
    -------
    IsomapModel
        The fitted model: the embedding, the classical MDS of the geodesics and what
        ``transform`` of new points needs.

    Raises
    ------
    InputError
        ``X`` is not a finite 2-D numeric array; ``n_components``, ``n_neighbors``,
        ``metric`` or ``solver`` out of range; a ``graph`` of another number of rows.
    DisconnectedGraphError
        The kNN graph has more than one component and ``join_components`` is False.
    SolverError
        The MDS eigensolver did not converge.
    """
    return _isomap(**locals(), on_workers=False)


def isomap_on_workers(X, **params) -> IsomapModel:
    """`isomap` (same parameters) for dask ``X`` with a distributed client, the n x n
    geodesic matrix left on the workers: its rows are made and persisted there
    (`graphs.geodesic_matrix_on_workers`), classical MDS
    reads them there (only n x k blocks come back), and the model's ``reference`` is that
    dask array and its ``X_fit`` is ``X`` itself, so that the flow writes both to the run
    store from the workers (NumPy input, or no client: `isomap`)."""
    from .._compute import active_client
    from .._validation import is_dask

    return _isomap(
        X,
        **_with_defaults(isomap, params),
        on_workers=is_dask(X) and active_client() is not None,
    )


def _with_defaults(fn, params: dict) -> dict:
    defaults = {
        k: p.default
        for k, p in inspect.signature(fn).parameters.items()
        if p.kind is p.KEYWORD_ONLY
    }
    unknown = sorted(set(params) - set(defaults))
    if unknown:
        raise TypeError(f"{fn.__name__}_on_workers got unknown parameters {unknown}")
    return {**defaults, **params}


def _isomap(X, *, graph, on_workers, **p):
    X = check_array(X, method="Isomap")
    X, k = _check_common(
        X, p["n_components"], p["n_neighbors"], p["metric"], "Isomap", X.shape[0] - 1
    )
    _check_solver(p["solver"])
    if not on_workers:
        _check_in_memory(X.shape[0])
    g = fit_graph(
        X,
        graph,
        p["n_neighbors"],
        method="Isomap",
        metric=p["metric"],
        backend=p["knn_backend"],
        join_components_=p["join_components"],
        random_state=p["random_state"],
    )
    stats = None
    if on_workers:  # the geodesic rows stay persisted on the workers (n x n)
        G, *stats = geodesic_matrix_on_workers(g, method="Isomap", with_stats=True)
    else:
        G = geodesic_matrix(g, method="Isomap")
    mds = classical_mds(
        G,
        n_components=k,
        metric="precomputed",
        solver=p["solver"],
        n_oversamples=p["n_oversamples"],
        n_iter=p["n_iter"],
        random_state=p["random_state"],
        where="the geodesic distance matrix",
        check_input=False,
        stats=stats,
    )
    X_fit = X if on_workers else training_rows(X, "Isomap")
    info = {
        "graph": graph_info(g, g.n_neighbors),
        "mds_solver": mds.solver,
        "convergence": _mds_records(mds, "the geodesic distances' B"),
    }
    return IsomapModel(
        np.asarray(mds.embedding, X.dtype),
        mds,
        G.astype(X.dtype, copy=False),
        X_fit,
        np.eye(k),
        np.zeros(k),
        int(p["n_neighbors"]),
        p["metric"],
        None,
        info,
    )


def _mds_records(mds, what: str) -> list:
    """The MDS step's convergence records, their step naming the matrix."""
    return [
        {**r, "step": r["step"].replace(" of B", "") + f" of {what}"}
        for r in mds.info.get("convergence", [])
    ]


# --------------------------------------------------------------------------- landmark Isomap


def landmark_isomap(
    X,
    *,
    n_components=2,
    n_neighbors=10,
    n_landmarks=None,
    landmarks="maxmin",
    metric="euclidean",
    knn_backend="auto",
    join_components=False,
    random_state=0,
    graph=None,
) -> IsomapModel:
    """Landmark Isomap of the rows of ``X`` (NumPy or dask): Dijkstra from ``n_landmarks``
    landmarks, landmark MDS, triangulation, alignment. O(m n log n); nothing n x n.

    Landmark Isomap (de Silva & Tenenbaum 2003).

    Parameters
    ----------
    X : array-like or dask array of shape (n_samples, n_features)
        The data rows.
    n_components : int, default 2
        An int in [1, n_samples - 2].
    n_neighbors : int, default 10
        An int in [1, n_samples - 1].
    n_landmarks : int or None, default None
        m, an int in (n_components, n_samples], or None for min(n_samples, 300).
    landmarks : {"maxmin", "uniform"}, default "maxmin"
        Max-min in the input space on a sample, or uniform rows.
    metric : str, default "euclidean"
        The kNN metric (euclidean, manhattan, ...); "precomputed" is refused.
    knn_backend : {"auto", "exact", "nndescent", "partitioned"}, default "auto"
        How the kNN graph is built.
    join_components : bool, default False
        Join a disconnected graph by its shortest edges (else refused).
    random_state : int, numpy Generator or None, default 0
        Seeds the kNN graph and the landmark choice.
    graph : KNNGraph or None, default None
        A `KNNGraph` of these rows (the flow's stored one) instead of building it.

    Returns
    -------
    IsomapModel
        The fitted model, with the landmarks' row indices.

    Raises
    ------
    InputError
        ``X`` is not a finite 2-D numeric array; ``n_components``, ``n_neighbors``,
        ``n_landmarks``, ``landmarks`` or ``metric`` out of range; a ``graph`` of another
        number of rows.
    DisconnectedGraphError
        The kNN graph has more than one component and ``join_components`` is False.
    SolverError
        The landmarks' MDS eigensolver did not converge.
    """
    return _landmark_isomap(**locals(), on_workers=False)


def landmark_isomap_on_workers(X, **params) -> IsomapModel:
    """`landmark_isomap` (same parameters) for dask ``X`` with a distributed client, the
    geodesics left on the workers: Dijkstra's m x n rows stay there, and so does the
    triangulation; only the m x m landmark block and the n x k embedding come back. The
    model's ``reference`` (n x m) is a dask array persisted on the workers and its ``X_fit``
    is ``X`` itself, so that the flow writes both to the run store from the workers (NumPy
    input, or no client: `landmark_isomap`)."""
    from .._compute import active_client
    from .._validation import is_dask

    return _landmark_isomap(
        X,
        **_with_defaults(landmark_isomap, params),
        on_workers=is_dask(X) and active_client() is not None,
    )


def _landmark_isomap(X, *, graph, on_workers, **p):
    X = check_array(X, method="LandmarkIsomap")
    n, metric, landmarks = X.shape[0], p["metric"], p["landmarks"]
    X, k = _check_common(X, p["n_components"], p["n_neighbors"], metric, "LandmarkIsomap", n - 2)
    m = _check_landmarks(n, k, p["n_landmarks"], landmarks)
    rng = check_random_state(p["random_state"])
    # a stored graph is read by the task that builds the adjacency (on the workers)
    g, _ = graph_for_fit(X, graph, p, "LandmarkIsomap", stored=on_workers)
    _, idx = choose_landmarks(
        X,
        int(m),
        landmarks,
        rng,
        metric=metric,
        allowed=LANDMARK_CHOICES,
        check_finite="LandmarkIsomap",
    )
    if on_workers:
        mds, reference, Y = _triangulate_on_workers(g, idx, k, rng, X.dtype)
        X_fit = X
    else:
        GL = geodesic_rows(g, idx, method="LandmarkIsomap")  # (m, n)
        mds = _landmark_mds(GL[:, idx], k, rng)
        reference = np.ascontiguousarray(GL.T, dtype=X.dtype)  # (n, m)
        del GL
        Y = np.concatenate(
            [
                np.asarray(mds.transform(reference[s : s + TRIANGULATE_ROWS]), np.float64)
                for s in range(0, n, TRIANGULATE_ROWS)
            ]
        )
        X_fit = training_rows(X, "LandmarkIsomap")
    offset, rotation = _principal_axes(Y)
    Y = (Y - offset) @ rotation
    signs = column_signs(Y[idx])
    rotation, Y = rotation * signs, Y * signs
    info = {
        "graph": graph_info(g, g.n_neighbors),
        "n_landmarks": int(m),
        "landmark_method": landmarks,
        "convergence": _mds_records(mds, "the landmarks' B"),
    }
    return IsomapModel(
        Y.astype(X.dtype),
        mds,
        reference,
        X_fit,
        rotation,
        offset,
        int(p["n_neighbors"]),
        metric,
        np.asarray(idx),
        info,
    )


def _landmark_mds(block: np.ndarray, k: int, rng):
    return classical_mds(
        (block + block.T) / 2,
        n_components=k,
        metric="precomputed",
        solver="auto",
        random_state=rng,
        where="the landmarks' geodesic distance matrix",
    )


def _triangulate_on_workers(g, idx, k: int, rng, dtype):
    """(landmark MDS, reference (n, m) persisted on the workers, Y (n, k) float64 here): the
    same operations as the in-process path, block by block where the geodesics are."""
    from .._compute import active_client, compute

    GL = geodesic_rows_on_workers(g, idx, method="LandmarkIsomap")  # (m, n) on the workers
    (block,) = compute(GL[:, idx], stage="LandmarkIsomap: the landmarks' geodesics")
    mds = _landmark_mds(np.asarray(block), k, rng)
    reference = active_client().persist(GL.T.astype(dtype).rechunk({0: TRIANGULATE_ROWS, 1: -1}))
    del GL

    def triangulate(rows):
        return np.asarray(mds.transform(np.ascontiguousarray(rows)), np.float64)

    Y = reference.map_blocks(triangulate, chunks=(reference.chunks[0], (k,)), dtype=np.float64)
    (Y,) = compute(Y, stage="LandmarkIsomap: triangulation")
    return mds, reference, np.asarray(Y)


def _principal_axes(Y: np.ndarray):
    """(mean, rotation onto the principal axes, descending variance) of the rows of Y."""
    mean = Y.mean(axis=0)
    C = (Y - mean).T @ (Y - mean)
    w, R = np.linalg.eigh((C + C.T) / 2)
    return mean, R[:, np.argsort(w)[::-1]]


# --------------------------------------------------------------------------- estimators


class _IsomapBase(ModelTransform, DimredEstimator):
    _method = "Isomap"

    def _set(self, model: IsomapModel, X):
        self._model = model
        X = X if hasattr(X, "chunks") else model.X_fit
        self.embedding_ = like_input(model.embedding, X)
        self.eigenvalues_ = model.mds.eigenvalues
        self.explained_variance_ratio_ = model.mds.explained_variance_ratio
        self.negative_eigenvalues_ = model.mds.negative_eigenvalues
        self.negative_mass_ = model.mds.negative_mass
        self.negative_ratio_ = model.mds.negative_ratio
        self.stress_ = model.mds.stress
        self.n_components_ = model.n_components
        self.n_features_in_ = int(X.shape[1])
        self.convergence_ = model.convergence
        return self

    def fit_transform(self, X, y=None):
        return self.fit(X).embedding_


@estimator_of(isomap)
class Isomap(_IsomapBase):
    """Isomap (Tenenbaum, de Silva & Langford 2000) on NumPy or dask arrays: kNN graph,
    Dijkstra geodesics on the workers, classical MDS of the geodesic matrix (its positive
    part; the negative part is reported).

    Parameters
    ----------
    n_components : int in [1, n_samples - 1]
    n_neighbors : int in [1, n_samples - 1]
    metric : the kNN metric (euclidean, manhattan, ...)
    knn_backend : {"auto", "exact", "nndescent", "partitioned"}
    join_components : bool, join a disconnected graph by its shortest edges (else refused)
    solver : {"auto", "dense", "randomized", "lanczos"} (classical MDS's)
    n_oversamples, n_iter : randomized solver only
    random_state : int, numpy Generator or None

    Attributes
    ----------
    embedding_, eigenvalues_, explained_variance_ratio_, negative_eigenvalues_,
    negative_mass_ (dense solver), negative_ratio_, stress_ (against the geodesics),
    dist_matrix_ (n x n geodesics), n_components_, n_features_in_
    """

    # scikit-learn's estimator checks fit data sets of ~10 rows (k < n), and their random
    # blobs often give a disconnected kNN graph: join it
    _check_params = ({"n_neighbors": 5, "join_components": True},)

    def fit(self, X, y=None):
        model = isomap(X, **self.get_params(deep=False))
        self._set(model, X)
        self.dist_matrix_ = model.reference
        return self


@estimator_of(landmark_isomap)
class LandmarkIsomap(_IsomapBase):
    """Landmark Isomap (de Silva & Tenenbaum 2003) on NumPy or dask arrays: Dijkstra from m
    landmarks, landmark MDS, triangulation of every point. O(m n log n), no n x n matrix.

    Parameters
    ----------
    n_components : int in [1, n_samples - 2]
    n_neighbors : int
    n_landmarks : int in (n_components, n_samples], or None for min(n_samples, 300)
    landmarks : {"maxmin", "uniform"}
    metric, knn_backend, join_components, random_state : as `Isomap`

    Attributes
    ----------
    embedding_, eigenvalues_ (of the landmarks' B), explained_variance_ratio_,
    negative_eigenvalues_, negative_mass_, negative_ratio_, stress_ (landmarks),
    landmark_indices_, n_landmarks_, n_components_, n_features_in_
    """

    _method = "LandmarkIsomap"

    # scikit-learn's estimator checks fit data sets of ~10 rows (k < n), and their random
    # blobs often give a disconnected kNN graph: join it
    _check_params = ({"n_landmarks": 8, "n_neighbors": 5, "join_components": True},)

    def fit(self, X, y=None):
        model = landmark_isomap(X, **self.get_params(deep=False))
        self._set(model, X)
        self.landmark_indices_ = model.landmark_indices
        self.n_landmarks_ = int(model.landmark_indices.size)
        return self


METHOD_SPECS = (
    # the n x n geodesics stay on the workers; the model's large arrays are written to the
    # run store from there
    graph_spec(
        "isomap", Isomap, isomap, IsomapModel, check_isomap_on_workers_params, isomap_on_workers
    ),
    # the m x n geodesics stay on the workers; the model's reference and training rows are
    # written to the run store from there, and the graph is read there from the store
    graph_spec(
        "landmark-isomap",
        LandmarkIsomap,
        landmark_isomap,
        IsomapModel,
        check_landmark_isomap_params,
        landmark_isomap_on_workers,
        graph_in_store=True,
    ),
)
