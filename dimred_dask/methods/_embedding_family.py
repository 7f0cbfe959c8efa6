"""What the neighbour embeddings (t-SNE, `methods.tsne`; SNE, `methods.sne`; UMAP,
`methods.umap`) share beyond their runs (``_neighbor_runs``): t-SNE's model `TSNEModel` and
initial scale `INIT_STD`, which SNE's fits use too; the steps every fit takes alike (the fit on
a sample, the kNN graph, each setting's affinities, the optimisations as tasks and their
models); and the estimators' base `NeighbourEstimator`. The numpydoc entries their docstrings
share are written out in each (``tests/test_shared_docs.py`` checks they are alike). The
method modules import these from here, never from each other; ``methods.tsne`` re-exports the
names it has always had (a model pickled before names ``methods.tsne.TSNEModel``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .._validation import check_array
from ..graphs.affinities import affinities, affinities_delayed
from ._base import DimredEstimator, HasConvergence
from ._graph_common import fit_graph
from ._neighbor_runs import (
    check_fit_sample,
    fit_then_place,
    graph_ref,
    like_input,
    run_tasks,
)

__all__ = [
    "INIT_STD",
    "TSNEModel",
    "KNN_RUN_DEFAULTS",
    "PERPLEXITY_CHECKS",
    "PLACES_INTO_FIT",
    "NeighbourEstimator",
    "keep_params",
    "sample_fit",
    "neighbour_graph",
    "setting_affinities",
    "perplexity_affinities",
    "run_settings",
    "models_of",
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


# --------------------------------------------------------------------------- fit steps


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


def run_settings(task, inputs, settings, checkpoint, callback, n_jobs, stage: str) -> list:
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


def keep_params(estimator, values: dict) -> None:
    """``__init__``'s arguments (its ``locals()``) as the estimator's attributes."""
    for key, value in values.items():
        if key not in ("self", "__class__"):
            setattr(estimator, key, value)


class NeighbourEstimator(DimredEstimator):
    """The base of `TSNE`, `SNE` and `UMAP`: the fit of the method's function on the
    estimator's parameters, and ``fit_transform``."""

    # the method's name in fit_transform's check of X (None: the class name)
    _fit_transform_name: str | None = None

    def _fit_model(self, function, X, graph, method: str):
        """(X checked, ``function``'s model of X); sets ``embedding_``, ``info_``,
        ``n_features_in_`` and ``convergence_``."""
        X = check_array(X, method=method, min_samples=4)
        model = function(X, graph=graph, **self.get_params(deep=False))
        self.embedding_, self.info_ = model.embedding, model.info
        self.n_features_in_ = X.shape[1]
        self.convergence_ = model.convergence
        return X, model

    def fit_transform(self, X, y=None, *, graph=None):
        X = check_array(X, method=self._fit_transform_name or type(self).__name__, min_samples=4)
        return like_input(self.fit(X, graph=graph).embedding_, X, cast=True)
