"""What the neighbour embeddings (t-SNE, `methods.tsne`; SNE, `methods.sne`; UMAP,
`methods.umap`) share beyond their runs (``_neighbor_runs``): t-SNE's model `TSNEModel` and
initial scale `INIT_STD`, which SNE's fits use too; the checks every parameter set goes
through; the steps every fit takes alike (the checked input and settings, the fit on a
sample, the kNN graph, each setting's affinities, the optimisations as tasks and their
models, the blocks of an optimisation spread over the workers); the estimators' bases
`NeighbourEstimator` and `PlacingEstimator`; and the methods' specs. The numpydoc entries
their docstrings share are written out in each (``tests/test_shared_docs.py`` checks they are
alike). The method modules import these from here, never from each other; ``methods.tsne``
re-exports the names it has always had (a model pickled before names
``methods.tsne.TSNEModel``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .._validation import check_array
from ..graphs.affinities import affinities, affinities_delayed
from ..linalg.convergence import completed
from ._base import DimredEstimator, HasConvergence
from ._distributed import block_bounds, block_graphs
from ._graph_common import fit_graph
from ._neighbor_runs import (
    check_fit_sample,
    check_int,
    check_known,
    expand_sweep,
    fit_then_place,
    fitted_reference,
    graph_ref,
    like_input,
    run_tasks,
    threads_per_task,
)
from ._spec import DOCS_NEIGHBOUR, NEIGHBOUR_ADDS, OPTIMISER_SUPPLIED, MethodSpec

__all__ = [
    "INIT_STD",
    "TSNEModel",
    "KNN_RUN_DEFAULTS",
    "PERPLEXITY_CHECKS",
    "PLACES_INTO_FIT",
    "NeighbourEstimator",
    "PlacingEstimator",
    "neighbour_specs",
    "swept_params",
    "checked_params",
    "perplexity_neighbours",
    "checked_sweep",
    "sample_fit",
    "neighbour_graph",
    "setting_affinities",
    "perplexity_affinities",
    "run_settings",
    "models_of",
    "task_result",
    "distributed_blocks",
]

INIT_STD = 1e-4  # the initial embedding's first column has this standard deviation
# t-SNE's and SNE's defaults for their kNN graph and their runs
KNN_RUN_DEFAULTS = {
    "n_neighbors": None,
    "metric": "euclidean",
    "knn_backend": "auto",
    "random_state": 0,
    "checkpoint_every": 50,
    "callback_every": 50,
}


@dataclass
class TSNEModel(HasConvergence):
    """A fitted t-SNE embedding and how it was made."""

    embedding: np.ndarray  # (n, n_components) float64
    kl_divergence: float  # of the fitted rows (all, or the fit sample)
    params: dict
    n_iter: int
    info: dict = field(default_factory=dict)
    fit_rows: np.ndarray | None = None  # the rows fitted on (fit_sample), or None: all
    fit_X: np.ndarray | None = field(default=None, repr=False)  # those rows' data


# --------------------------------------------------------------------------- parameters


def swept_params(params: dict, defaults: dict, sweepable: tuple) -> dict:
    """``params`` over ``defaults``; `InputError` for a list of a parameter not in
    ``sweepable``, or an empty sweep."""
    p = {**defaults, **params}
    expand_sweep(p, sweepable)  # lists only for the sweepable parameters
    return p


def checked_params(params: dict, defaults: dict, sweepable: tuple, method: str) -> dict:
    """``params`` over ``defaults`` (`swept_params`), after `InputError` for a key that is
    not one of ``defaults``."""
    check_known(params, defaults, method)
    return swept_params(params, defaults, sweepable)


def perplexity_neighbours(n_neighbors, perplexities, n: int, method: str) -> int:
    """The kNN graph's neighbours, checked: ``n_neighbors``, or when None min(n - 1,
    ceil(3 x the largest of ``perplexities``))."""
    kmax = int(np.ceil(3 * max(perplexities)))
    k = min(n - 1, kmax) if n_neighbors is None else n_neighbors
    return check_int("n_neighbors", k, 1, n - 1, method=method)


# --------------------------------------------------------------------------- fit steps


def checked_sweep(X, params: dict, check, method: str):
    """(X checked: a finite 2-D array of at least 4 rows, the settings ``check(params, n)``
    makes of ``params``, the first of them)."""
    X = check_array(X, method=method, min_samples=4)
    settings = check(params, X.shape[0])
    return X, settings, settings[0]


def sample_fit(sweep, place, X, graph, s0: dict, method: str, params: dict, **run):
    """The models of a fit on ``fit_sample`` rows of X with every row placed by ``place``
    (`fit_then_place`, seeded by the first setting's ``random_state``), or None when the fit
    is on all rows; ``run``: the sweep's checkpoint, callback and n_jobs."""
    size = check_fit_sample(s0.get("fit_sample"), X.shape[0], method, graph, s0["init"])
    if not size:
        return None
    rest = {k: v for k, v in params.items() if k != "fit_sample"}
    return fit_then_place(sweep, place, X, size, s0["random_state"] or 0, method, **run, **rest)


def neighbour_graph(X, graph, k: int, s0: dict, method: str):
    """The fit's kNN graph (`fit_graph`, kept whole): ``graph`` checked against X, or one of
    ``k`` neighbours built with the first setting's metric, backend, seed and NN-descent
    options."""
    return fit_graph(
        X,
        graph,
        k,
        method=method,
        metric=s0["metric"],
        cut=False,
        connected=False,
        backend=s0["knn_backend"],
        random_state=s0["random_state"] or 0,
        nndescent_kwds=s0.get("nndescent_kwds"),
    )


def setting_affinities(graph, n: int, kind: str, keys, options, client) -> dict:
    """{key: P} for each of ``keys`` (``options(key)``: the keywords of `affinities`):
    computed here without a client, else lazy on the workers (the graph a dask literal)."""
    if client is None:
        return {key: affinities(graph, kind, **options(key)) for key in keys}
    ref = graph_ref(graph)
    return {
        key: affinities_delayed(ref, n, graph.n_neighbors, kind, **options(key)) for key in keys
    }


def perplexity_affinities(graph, n: int, kind: str, settings: list[dict], client) -> dict:
    """{perplexity: P} of the settings' perplexities (t-SNE's joint P, SNE's conditional)."""
    perps = sorted({s["perplexity"] for s in settings})
    return setting_affinities(graph, n, kind, perps, lambda p: {"perplexity": p}, client)


def run_settings(task, inputs, settings, stage: str, checkpoint, callback, n_jobs) -> list:
    """``task(*inputs(setting), setting, its checkpoint)`` for every setting, as tasks
    (`run_tasks`); ``checkpoint``: the sweep's factory ``(index, setting)`` or None."""
    jobs = [
        (*inputs(s), s, checkpoint(i, s) if checkpoint else None) for i, s in enumerate(settings)
    ]
    return run_tasks(task, jobs, shared={}, callback=callback, n_jobs=n_jobs, stage=stage)


def models_of(cls, out: list, settings: list[dict], n_iter: str, **info) -> list:
    """A ``cls`` per setting from its optimisation's (Y, loss, info): the setting, its
    ``n_iter`` (the name of its iteration count), the run's info with ``info`` added."""
    return [
        cls(Y, float(loss), s, s[n_iter], {**run_info, **info})
        for (Y, loss, run_info), s in zip(out, settings)
    ]


def task_result(Y, loss, info: dict, n_threads, descent: tuple, records=(), /, **more) -> tuple:
    """An optimisation's (Y, loss, info): the run's ``info`` with its ``n_threads``, ``more``
    and its convergence records, ``records`` then the descent's: ``descent`` is (step,
    solver, iterations, the loss's name), completed (`completed`) from where it resumed."""
    step, solver, iterations, loss_name = descent
    rec = completed(
        step, solver, iterations, loss=loss, loss_name=loss_name, resumed_from=info["resumed_from"]
    )
    return Y, loss, {**info, "threads": n_threads, **more, "convergence": [*records, rec]}


def distributed_blocks(graph, plan: dict, client, n_jobs):
    """(n, the row bounds of ``plan``'s blocks, each block task's threads: ``n_jobs``, or
    the host's cores split between the blocks, the graph's blocks as the tasks read them)
    of an optimisation spread over the workers (`_distributed`)."""
    n = graph.n_samples
    bounds = block_bounds(n, plan["blocks"])
    n_threads = n_jobs or threads_per_task(len(bounds), client)
    return n, bounds, n_threads, block_graphs(graph, bounds)


# --------------------------------------------------------------------------- estimators


# scikit-learn's estimator checks fit 10-30 rows: the perplexity must stay below n / 3
PERPLEXITY_CHECKS = ({"perplexity": 3.0, "random_state": 0},)
# transform places new points into the fixed training embedding (optimising only their
# positions), so a training row given again lands near its fitted position, not on it
PLACES_INTO_FIT = dict.fromkeys(
    ("check_transformer_general", "check_transformer_data_not_an_array"),
    "transform places rows into the fitted embedding: a training row given again lands "
    "near its fitted position, not on it",
)


class NeighbourEstimator(DimredEstimator):
    """The base of `TSNE`, `SNE` and `UMAP`: ``fit``, the method's function on the
    estimator's parameters, and ``fit_transform``."""

    # the method's function (fit's model) and its name in fit's check of X
    _function = None
    _fit_name = ""
    # the method's name in fit_transform's check of X (None: the class name)
    _fit_transform_name: str | None = None
    # (X_fit, Y_fit, X, params) -> the rows of X placed into Y_fit, or None: no transform
    _place = None

    def fit(self, X, y=None, *, graph=None):
        X = check_array(X, method=self._fit_name, min_samples=4)
        model = self._function(X, graph=graph, **self.get_params(deep=False))
        self.embedding_, self.info_ = model.embedding, model.info
        self.n_features_in_ = X.shape[1]
        self.convergence_ = model.convergence
        self._keep(model)
        if self._place is not None:
            self._fit_X, self._fit_Y = fitted_reference(X, model)
        return self

    def _keep(self, model) -> None:
        """What fit keeps of the model besides its embedding: t-SNE's and SNE's KL
        divergence and iterations."""
        self.kl_divergence_, self.n_iter_ = model.kl_divergence, model.n_iter

    def fit_transform(self, X, y=None, *, graph=None):
        X = check_array(X, method=self._fit_transform_name or type(self).__name__, min_samples=4)
        return like_input(self.fit(X, graph=graph).embedding_, X, cast=True)


class PlacingEstimator(NeighbourEstimator):
    """The base of `TSNE` and `UMAP`: ``transform`` places new rows into the fitted
    embedding (against the fit sample's rows when the fit was on one)."""

    _check_exempt = PLACES_INTO_FIT

    def _place_params(self) -> dict:
        """The parameters ``_place`` reads: the estimator's."""
        return self.get_params(deep=False)

    def transform(self, X):
        X = self._new_rows(X, f"{self._fit_name} transform")
        return self._place(self._fit_X, self._fit_Y, X, self._place_params())


# --------------------------------------------------------------------------- specs


def neighbour_specs(name: str, estimator, function, sweep, **spec) -> tuple:
    """The method's ``METHOD_SPECS``: a neighbour embedding of dense rows that may follow
    PCA, with its ``sweep`` and the optimiser's arguments the flow supplies; ``spec``: the
    rest of its `MethodSpec` (``flow_adds`` by default `NEIGHBOUR_ADDS`)."""
    spec.setdefault("flow_adds", NEIGHBOUR_ADDS)
    return (
        MethodSpec(
            name,
            estimator,
            function,
            follows_pca=True,
            takes="dense",
            docs=DOCS_NEIGHBOUR,
            more_functions=(sweep,),
            flow_supplied=OPTIMISER_SUPPLIED,
            **spec,
        ),
    )
