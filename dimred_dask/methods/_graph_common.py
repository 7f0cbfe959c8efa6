"""What the graph methods (Isomap, landmark Isomap, LLE, Laplacian eigenmaps, spectral
clustering) share: parameter checks, the training rows' neighbours of new points, save/load
of their fitted models and the placing of new rows, the estimators' ``__init__`` (their
function's keywords) and the LLE / Laplacian eigenmaps estimator, the specs; and the one
kNN-graph getter (`fit_graph`: given and checked, or built) that they and the neighbour
embeddings (t-SNE, SNE, UMAP) use. No method module imports another: what two of them
share is here. Their numpydoc entries are written out in each function's docstring;
``tests/test_shared_docs.py`` checks that the shared ones are written alike."""

from __future__ import annotations

import inspect
import math
import numbers
from dataclasses import fields

import numpy as np

from .._compute import compute
from .._validation import check_array, is_dask, nonfinite_error
from ..blocks.neighbors import block_topk, streamed_topk
from ..errors import InputError
from ..graphs import (
    WEIGHTS,
    KNNGraph,
    check_connected,
    check_n_neighbors,
    graph_components,
    join_components,
    knn_graph,
)
from ..graphs.affinities import is_graph_source
from ..linalg import SPARSE_EIGEN_SOLVERS
from ._base import (
    DimredEstimator,
    HasConvergence,
    ModelTransform,
    is_stored,
    kept,
    like_input,
    row_blocks,
    rowwise,
)
from ._spec import DOCS_GRAPH, KNN_STAGE, MethodSpec

__all__ = [
    "ArrayModel",
    "GraphEmbedding",
    "GraphModel",
    "check_eigen_solver",
    "check_graph",
    "check_n_components_graph",
    "check_weights",
    "estimator_of",
    "fit_graph",
    "graph_info",
    "graph_spec",
    "is_graph_source",
    "is_int_in",
    "graph_in_memory",
    "graph_for_fit",
    "new_neighbours",
    "training_rows",
]


class ArrayModel(HasConvergence):
    """``arrays()`` / ``scalars()`` / ``from_arrays()`` of a dataclass model: the fields
    named in ``_ARRAYS`` go to a store's ``model/`` group, the rest to its attributes."""

    _ARRAYS: tuple = ()

    def arrays(self) -> dict[str, np.ndarray]:
        """The arrays, NumPy; a dask one (a fit that left it on the workers) stays dask, for
        the run store to write from the workers."""
        return {
            f"{n}_": v if is_dask(v) else np.asarray(v)
            for n in self._ARRAYS
            if (v := getattr(self, n)) is not None
        }

    def scalars(self) -> dict:
        out = {
            f.name: _plain(getattr(self, f.name))
            for f in fields(self)
            if f.name not in self._ARRAYS and f.name != "info"
        }
        return {**out, **{k: _plain(v) for k, v in getattr(self, "info", {}).items()}}

    def summary(self) -> dict:
        """What a run's manifest records of the fit: the model's scalars, its eigenvalues
        and the records of its iterative solves."""
        out = {
            k: v
            for k, v in self.scalars().items()
            if isinstance(v, (int, float, str, bool, dict)) or v is None
        }
        values = getattr(self, "eigenvalues", None)
        if values is not None:
            out["eigenvalues"] = np.asarray(values, dtype=float).tolist()
        return {**out, "convergence": self.convergence}

    @classmethod
    def from_arrays(cls, arrays: dict, scalars: dict):
        names = {f.name for f in fields(cls)}
        kw = {n: kept(arrays[f"{n}_"]) for n in cls._ARRAYS if f"{n}_" in arrays}
        kw.update({k: v for k, v in scalars.items() if k in names and k not in cls._ARRAYS})
        if "info" in names:
            kw["info"] = {k: v for k, v in scalars.items() if k not in names}
        return cls(**kw)


def _plain(v):
    if isinstance(v, dict):
        return {k: _plain(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    return v.item() if isinstance(v, np.generic) else v


class GraphModel(ArrayModel):
    """A graph method's fitted model that places new rows from their ``n_neighbors`` nearest
    training rows (``X_fit``, in memory or in a run store) by ``metric``: ``_placer()`` gives
    the function (block, their indices, their distances) -> the block's embedding."""

    _ARRAYS = ("embedding", "eigenvalues", "X_fit")

    @property
    def n_components(self) -> int:
        return int(self.embedding.shape[1])

    def transform(self, X):
        """Embed rows of X (NumPy, or lazily row block by row block for dask)."""
        dtype = X.dtype
        place, X_fit, k, metric = self._placer(), self.X_fit, self.n_neighbors, self.metric

        def encode(block):
            idx, dist = new_neighbours(block, X_fit, k, metric)
            return place(block, idx, dist).astype(dtype)

        return rowwise(X, encode, self.n_components, dtype)


# --------------------------------------------------------------------------- checks


def is_int_in(value, low, high=math.inf) -> bool:
    """Whether ``value`` is an int (not a bool) in [low, high]."""
    return (
        isinstance(value, numbers.Integral) and not isinstance(value, bool) and low <= value <= high
    )


def check_n_components_graph(n_components, n: int, method: str, *, limit: int | None = None):
    """1 <= n_components <= limit (default n - 2: the graph spectral methods drop one
    eigenvector and need one more than they keep), or `InputError`."""
    limit = n - 2 if limit is None else limit
    if not is_int_in(n_components, 1, limit):
        raise InputError(
            f"{method} needs n_components as an int in [1, {limit}] for "
            f"n_samples = {n}; found {n_components!r}.",
            f"pass n_components between 1 and {max(limit, 1)} (2 or 3 is usual).",
        )
    return int(n_components)


def check_eigen_solver(eigen_solver, allowed: tuple = SPARSE_EIGEN_SOLVERS) -> None:
    """`InputError` unless ``eigen_solver`` is one of ``allowed``."""
    if eigen_solver not in allowed:
        raise InputError(
            f"eigen_solver must be one of {', '.join(allowed)}; found {eigen_solver!r}.",
            "pass eigen_solver='auto'.",
        )


def check_weights(weights, t):
    """Check the graph weighting of Laplacian eigenmaps and spectral clustering.

    Parameters
    ----------
    weights : {"heat", "binary"}
        Heat-kernel weights exp(-d^2 / t), or binary weights.
    t : float or None
        The heat kernel width, a finite number > 0 (None: the mean squared edge length).

    Raises
    ------
    InputError
        An unknown ``weights``, or ``t`` not None and not a finite number > 0.
    """
    if weights not in WEIGHTS:
        raise InputError(
            f"weights must be one of {', '.join(WEIGHTS)}; found {weights!r}.",
            "pass weights='heat' (exp(-d^2/t)) or 'binary'.",
        )
    if t is not None and (
        isinstance(t, (bool, np.bool_))
        or not isinstance(t, numbers.Real)
        or not np.isfinite(t)
        or t <= 0
    ):
        raise InputError(
            f"The heat kernel needs t > 0 (finite); found t={t!r}.",
            "leave t out (the mean squared edge length) or pass t > 0.",
        )


def graph_in_memory(graph) -> KNNGraph:
    """A `KNNGraph` of a graph source's rows (a `KNNGraph` as it is)."""
    if isinstance(graph, KNNGraph):
        return graph
    idx, dist = graph.rows(0, graph.n_samples, graph.n_neighbors)
    return KNNGraph(
        np.asarray(idx, np.int64),
        np.asarray(dist, np.float64),
        getattr(graph, "metric", "euclidean"),
        getattr(graph, "backend", "exact"),
        dict(getattr(graph, "info", None) or {}),
    )


def check_graph(graph, n: int, k_needed: int, method: str, *, sources: bool = True):
    """A kNN graph (or, with ``sources``, a graph source) of ``n`` rows with at least
    ``k_needed`` neighbours per row and none missing."""
    if not isinstance(graph, KNNGraph) and not (sources and is_graph_source(graph)):
        raise InputError(
            f"{method} needs graph=<KNNGraph>; found {type(graph).__name__}.",
            "pass dimred_dask.graphs.knn_graph(X, k) or leave graph out.",
        )
    if graph.n_samples != n:
        raise InputError(
            f"{method}: the kNN graph has {graph.n_samples} rows; the data have {n}.",
            "build the graph from these rows (or leave graph out).",
        )
    if graph.n_neighbors < k_needed:
        raise InputError(
            f"{method} needs {k_needed} neighbours per point; the kNN graph has "
            f"{graph.n_neighbors}.",
            f"build it with n_neighbors >= {k_needed}.",
        )
    if isinstance(graph, KNNGraph) and (graph.indices[:, :k_needed] < 0).any():
        raise InputError(
            "The kNN graph has rows with fewer neighbours than k (index -1).",
            "rebuild it with backend='exact' or 'nndescent'.",
        )
    return graph


def fit_graph(
    X,
    graph,
    n_neighbors,
    *,
    method: str,
    metric="euclidean",
    backend="auto",
    random_state=0,
    nndescent_kwds=None,
    cut: bool = True,
    join_components_: bool = False,
    connected: bool = True,
):
    """The kNN graph a method fits on: ``graph`` checked against ``X``, or a new one.

    Parameters
    ----------
    X : array-like or dask array of shape (n_samples, n_features)
        The rows.
    graph : KNNGraph, graph source or None
        A graph of these rows with at least ``n_neighbors`` neighbours (e.g. the flow's
        stored one), or None to build it.
    n_neighbors : int
        1 <= n_neighbors < n_samples.
    method : str
        The method's name, for messages.
    metric, backend, random_state, nndescent_kwds
        The new graph's (`graphs.knn_graph`).
    cut : bool, default True
        Cut a given graph to exactly ``n_neighbors`` (the graph methods read all of a row's
        neighbours). False keeps it whole and also accepts a graph source (the neighbour
        embeddings read the first ``n_neighbors`` of each row, block by block).
    join_components_ : bool, default False
        Join a disconnected graph to one component by its shortest edges.
    connected : bool, default True
        Refuse a graph of more than one component (`DisconnectedGraphError`).

    Returns
    -------
    KNNGraph or graph source
        The graph, with the joining edges (if any) in ``info["extra_edges"]``.
    """
    n = X.shape[0]
    k = check_n_neighbors(n_neighbors, n, method)
    if graph is None:
        graph = built_graph(
            X,
            k,
            method,
            metric=metric,
            backend=backend,
            random_state=random_state,
            nndescent_kwds=nndescent_kwds,
        )
    graph = check_graph(graph, n, k, method, sources=not cut)
    if cut and graph.n_neighbors != k:
        graph = graph.subset(k)
    if join_components_ and not graph.info.get("extra_edges"):
        count, _ = graph_components(graph)
        if count > 1:
            graph, _ = join_components(graph, X)
            graph.info["components_before_join"] = int(count)
    if connected and not graph.info.get("extra_edges"):
        check_connected(graph, method=method)
    return graph


def graph_for_fit(X, graph, p: dict, method: str, *, stored: bool, connected: bool = True):
    """The graph a graph method fits on, and whether it is a graph source left where it is.

    A graph source (the run store's graph) is kept as it is when ``stored`` (the fit reads
    it on the workers; its connectivity is the kNN stage's to check), after its rows and
    neighbours are checked against ``X``; otherwise it is read into memory. Anything else
    goes to `fit_graph` (built, checked, joined, refused when of another kind).

    Parameters
    ----------
    X : array-like or dask array of shape (n_samples, n_features)
        The rows.
    graph : KNNGraph, graph source or None
        The given graph.
    p : dict
        The method's parameters: ``n_neighbors``, ``metric``, ``knn_backend``,
        ``join_components``, ``random_state``.
    method : str
        The method's name, for messages.
    stored : bool
        Whether the fit reads a graph source where it is (its solve on the workers).
    connected : bool, default True
        Refuse a graph of more than one component (`fit_graph`).

    Returns
    -------
    tuple of (KNNGraph or graph source, bool)
        The graph, and True when it is a graph source to read where it is.
    """
    if is_graph_source(graph):
        n = X.shape[0]
        k = check_n_neighbors(p["n_neighbors"], n, method)
        graph = check_graph(graph, n, k, method)
        if stored and graph.n_neighbors == k:
            return graph, True
        graph = graph_in_memory(graph)
    g = fit_graph(
        X,
        graph,
        p["n_neighbors"],
        method=method,
        metric=p["metric"],
        backend=p["knn_backend"],
        join_components_=p["join_components"],
        random_state=p["random_state"],
        connected=connected,
    )
    return g, False


def graph_info(g, n_neighbors) -> dict:
    """What a fitted model records of its kNN graph ``g`` (``info["graph"]``)."""
    return {
        "n_neighbors": n_neighbors,
        "backend": g.backend,
        "extra_edges": len(g.info.get("extra_edges", [])),
    }


def built_graph(X, k: int, method: str, **kw) -> KNNGraph:
    """`graphs.knn_graph` of the rows of ``X``. Dask input is checked for finite values by
    the graph's own pass: a row with NaN or inf has no finite distance (or makes the search
    fail), and is then found and refused as `check_array` refuses it in memory."""
    try:
        graph = knn_graph(X, k, **kw)
    except ValueError as exc:
        if isinstance(exc, InputError) or not is_dask(X):
            raise
        _refuse_nonfinite(X, method)
        raise
    if is_dask(X) and not np.isfinite(graph.distances).all():
        _refuse_nonfinite(X, method)
    return graph


def _refuse_nonfinite(X, method: str) -> None:
    """`InputError` naming the rows of dask ``X`` that hold NaN or inf, if any."""
    import dask.array as da

    bad = ~da.isfinite(X)
    rows, n_bad, n_nan = compute(
        da.flatnonzero(bad.any(axis=1)), bad.sum(), da.isnan(X).sum(), stage=f"{method}: check"
    )
    if int(n_bad):
        raise nonfinite_error(method, rows, int(n_nan), int(n_bad) - int(n_nan), "X")


def training_rows(X, method: str) -> np.ndarray:
    """X in memory (the training rows new points are placed against)."""
    if is_dask(X):
        (rows,) = compute(X, stage=f"{method}: training rows")
        return np.asarray(rows)
    return np.asarray(X)


def new_neighbours(block: np.ndarray, X_fit, k: int, metric: str = "euclidean", p: float = 2.0):
    """(indices, distances) of the ``k`` nearest training rows of each row of ``block``
    (a training row finds itself first, at distance 0). ``X_fit`` in memory, or stored
    (`_base.is_stored`): then its chunks are read one at a time."""
    if is_stored(X_fit):
        return streamed_topk(np.asarray(block), row_blocks(X_fit), k, metric=metric, p=p)
    return block_topk(np.asarray(block), X_fit, k, metric=metric, p=p)


def checked(X, method: str, where: str = "X"):
    return check_array(X, method=method, where=where)


# --------------------------------------------------------------------------- estimators, specs


def estimator_of(function):
    """Class decorator: the estimator of ``function``, a graph method's function, which its
    ``fit`` calls (``_function``). Its ``__init__`` takes ``function``'s keywords but
    ``graph``, with their defaults (the first also by position), and keeps each as the
    attribute of its name: scikit-learn's parameters, declared once, with the function. The
    ``__init__`` is written out and compiled as `dataclasses` writes one, so that its
    signature and its errors are an ordinary function's."""
    defaults = {
        name: p.default
        for name, p in inspect.signature(function).parameters.items()
        if p.kind is p.KEYWORD_ONLY and name != "graph"
    }
    first, *rest = (f"{name}=_defaults[{name!r}]" for name in defaults)
    body = "".join(f"\n    self.{name} = {name}" for name in defaults)
    source = f"def __init__(self, {first}, *, {', '.join(rest)}):{body}\n"

    def decorate(cls):
        namespace = {"_defaults": defaults}
        exec(source, namespace)  # the source above: the names of function's keywords
        init = namespace["__init__"]
        init.__module__, init.__qualname__ = cls.__module__, f"{cls.__qualname__}.__init__"
        cls.__init__, cls._function = init, staticmethod(function)
        return cls

    return decorate


class GraphEmbedding(ModelTransform, DimredEstimator):
    """The estimator of LLE and of Laplacian eigenmaps (with `estimator_of`): ``fit`` runs
    the function with the estimator's parameters and keeps its `GraphModel`; the fitted
    attributes are the model's embedding (dask for dask input), eigenvalues, those of
    ``_attributes`` ({attribute: the model's field}), n_components_, n_features_in_ and
    convergence_."""

    # scikit-learn's estimator checks fit data sets of ~10 rows (k < n), and their random
    # blobs often give a disconnected kNN graph: join it
    _check_params = ({"n_neighbors": 5, "join_components": True},)
    _attributes: dict = {}

    def fit(self, X, y=None):
        model = self._function(X, **self.get_params(deep=False))
        self._model = model
        self.embedding_ = like_input(model.embedding, X if hasattr(X, "chunks") else model.X_fit)
        self.eigenvalues_ = model.eigenvalues
        for attribute, name in self._attributes.items():
            setattr(self, attribute, getattr(model, name))
        self.n_components_ = model.n_components
        self.n_features_in_ = int(model.X_fit.shape[1])
        self.convergence_ = model.convergence
        return self

    def fit_transform(self, X, y=None):
        return self.fit(X).embedding_


def graph_spec(name: str, estimator, function, model, check, flow_function=None, **more):
    """The `MethodSpec` of a graph method of dense rows, ``more`` its other fields: by
    default one that may follow PCA, with the flow's kNN stage first (a connected graph:
    joined or refused), run by ``flow_function`` in a run."""
    defaults = {
        "follows_pca": True,
        "takes": "dense",
        "docs": DOCS_GRAPH,
        "flow_adds": KNN_STAGE,
        "model": model,
        "check": check,
        "knn_graph": "connected",
        "flow_function": flow_function,
    }
    return MethodSpec(name, estimator, function, **{**defaults, **more})
