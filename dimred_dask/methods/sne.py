"""Stochastic Neighbor Embedding (Hinton & Roweis 2002): `sne`, `SNE`.

Asymmetric: C = sum_i KL(P_i || Q_i) with p_{j|i} Gaussian at the target perplexity over the
kNN graph (rows sum to 1) and q_{j|i} ~ exp(-|y_i - y_j|^2) over all points (variance 1/2).
Gradient 2 sum_j (p_{j|i} - q_{j|i} + p_{i|j} - q_{i|j}) (y_i - y_j), exact, O(n^2) per
iteration: for small n (up to ``SNE_MAX`` points). Gradient descent with momentum and gains,
as t-SNE's optimiser; no exaggeration by default.
"""

from __future__ import annotations

import time

import numpy as np

from .._compute import active_client
from ..blocks.tsne_kernels import gains_step, sne_cost_grad
from ..errors import InputError
from ..graphs.affinities import check_perplexity
from ._embedding_family import (
    INIT_STD,
    KNN_RUN_DEFAULTS,
    PERPLEXITY_CHECKS,
    NeighbourEstimator,
    TSNEModel,
    checked_sweep,
    models_of,
    neighbour_graph,
    neighbour_specs,
    perplexity_affinities,
    perplexity_neighbours,
    run_settings,
    swept_params,
    task_result,
)
from ._neighbor_runs import (
    check_float,
    check_int,
    check_known,
    expand_sweep,
    one_run,
    pca_init,
    random_init,
    report_due,
    save_due,
    threads,
)
from ._spec import KNN_STAGE

__all__ = [
    "SNE",
    "sne",
    "sne_sweep",
    "SNE_DEFAULTS",
    "SNE_SWEEPABLE",
    "SNE_MAX",
    "check_sne_params",
]

SNE_MAX = 10_000
SNE_DEFAULTS = {
    "n_components": 2,
    "perplexity": 30.0,
    "n_iter": 500,
    "learning_rate": 0.5,
    "momentum": 0.5,
    "final_momentum": 0.8,
    "momentum_switch_iter": 250,
    "min_gain": 0.01,
    "max_step_norm": 5.0,
    "early_exaggeration": 1.0,
    "early_exaggeration_iter": 0,
    "init": "pca",
    **KNN_RUN_DEFAULTS,
}
SNE_SWEEPABLE = ("perplexity", "random_state", "learning_rate")


def check_sne_params(params: dict, n: int) -> list[dict]:
    """Every setting of a (possibly swept) SNE parameter set, checked.

    Parameters
    ----------
    params : dict
        Keys of ``SNE_DEFAULTS`` (missing ones take their defaults); those of
        ``SNE_SWEEPABLE`` may be lists.
    n : int
        The number of samples (at most ``SNE_MAX``).

    Returns
    -------
    list of dict
        One complete parameter dict per setting, ``perplexity``, ``learning_rate`` and
        ``n_neighbors`` checked and resolved.

    Raises
    ------
    InputError
        An unknown parameter, n above ``SNE_MAX``, a list for a parameter that cannot be
        swept, an empty sweep, or a value out of range.
    """
    check_known(params, SNE_DEFAULTS, "SNE")
    if n > SNE_MAX:
        raise InputError(
            f"SNE's exact O(n^2) gradient is for at most {SNE_MAX} points; found {n}.",
            "use t-SNE (--method tsne) for more points.",
        )
    p = swept_params(params, SNE_DEFAULTS, SNE_SWEEPABLE)
    check_int("n_components", p["n_components"], 1, 3, method="SNE")
    for key in (
        "n_iter",
        "momentum_switch_iter",
        "early_exaggeration_iter",
        "checkpoint_every",
        "callback_every",
    ):
        check_int(key, p[key], 0, method="SNE")
    check_float("early_exaggeration", p["early_exaggeration"], 0, method="SNE")
    check_float("min_gain", p["min_gain"], 0, method="SNE", open_lo=False)
    check_float("max_step_norm", p["max_step_norm"], 0, method="SNE", open_lo=False)
    if p["init"] not in ("pca", "random"):
        raise InputError(
            f"SNE init must be 'pca' or 'random'; found {p['init']!r}.", "pass init='pca'."
        )
    settings = expand_sweep(p, SNE_SWEEPABLE)
    perplexities = (check_perplexity(s["perplexity"], n, method="SNE") for s in settings)
    k = perplexity_neighbours(p["n_neighbors"], perplexities, n, "SNE")
    for s in settings:
        s["perplexity"] = check_perplexity(s["perplexity"], n, k, "SNE")
        s["learning_rate"] = check_float("learning_rate", s["learning_rate"], 0, method="SNE")
        s["n_neighbors"] = k
    return settings


def optimize_sne(PP, Y0, s: dict, *, checkpoint=None, progress=None):
    """Gradient descent on SNE's cost for one setting; (Y, cost, info)."""
    P, PT = PP
    n, total = P.shape[0], s["n_iter"]
    state = checkpoint.load() if checkpoint is not None else None
    if state is not None:
        start, Y = int(state["iteration"]), np.array(state["embedding"], np.float64)
        update, gains = np.array(state["update"]), np.array(state["gains"])
    else:
        start = 0
        Y = np.array(
            Y0
            if Y0 is not None
            else random_init(n, s["n_components"], INIT_STD, s["random_state"]),
            dtype=np.float64,
        )
        update, gains = np.zeros_like(Y), np.ones_like(Y)
    t0, cost = time.perf_counter(), float("nan")
    for it in range(start, total):
        exag = s["early_exaggeration"] if it < s["early_exaggeration_iter"] else 1.0
        cost, grad = sne_cost_grad(
            P.indptr, P.indices, P.data * exag, PT.indptr, PT.indices, PT.data * exag, Y
        )
        mom = s["momentum"] if it < s["momentum_switch_iter"] else s["final_momentum"]
        gains_step(
            Y, grad, update, gains, mom, s["learning_rate"], s["min_gain"], s["max_step_norm"]
        )
        done = it + 1
        report_due(progress, s, done, total, cost)
        save_due(checkpoint, s, done, total, Y, cost, update=update, gains=gains)
    cost, _ = sne_cost_grad(P.indptr, P.indices, P.data, PT.indptr, PT.indices, PT.data, Y)
    return Y, cost, {"seconds": round(time.perf_counter() - t0, 3), "resumed_from": start}


def sne_task(PP, Y0, setting, checkpoint, *, progress=None, n_jobs=None):
    with threads(n_jobs) as nt:
        Y, cost, info = optimize_sne(PP, Y0, setting, checkpoint=checkpoint, progress=progress)
    descent = (
        "SNE gradient descent",
        "SNE (exact gradients)",
        setting["n_iter"],
        "sum of KL(P_i || Q_i)",
    )
    return task_result(Y, cost, info, nt, descent)


def sne_sweep(
    X, *, graph=None, checkpoint=None, callback=None, n_jobs=None, **params
) -> list[TSNEModel]:
    """SNE embeddings for every setting of ``params`` (see `tsne_sweep` for the arguments);
    the models' ``kl_divergence`` is SNE's cost sum_i KL(P_i || Q_i).

    Stochastic Neighbor Embedding (Hinton & Roweis 2002) with exact O(n^2) gradients, for
    up to ``SNE_MAX`` points.

    Parameters
    ----------
    X : array-like or dask array of shape (n_samples, n_features)
        The data rows (at least 4, at most ``SNE_MAX``).
    graph : KNNGraph or None, default None
        A kNN graph of X with at least 3 x perplexity neighbours (built when None).
    checkpoint : callable or None, default None
        A factory ``(index, setting) -> object with save/load`` (see ``_neighbor_runs``).
    callback : callable or None, default None
        ``(index, iteration, total, cost)``, called in this process.
    n_jobs : int or None, default None
        numba's threads for each embedding's optimisation, as in `tsne_sweep`.
    **params
        The keys of ``SNE_DEFAULTS`` (defaults there; others are refused):
        ``n_components`` (int in [1, 3], 2), ``perplexity`` (30.0), ``n_iter`` (500),
        ``learning_rate`` (> 0, 0.5), ``momentum`` (0.5) before iteration
        ``momentum_switch_iter`` (250) and ``final_momentum`` (0.8) after it, ``min_gain``
        (0.01), ``max_step_norm`` (5.0), ``early_exaggeration`` (> 0, 1.0: none) for the first
        ``early_exaggeration_iter`` (0) iterations, ``init`` ("pca" or "random"),
        ``n_neighbors`` (None: min(n - 1, ceil(3 x the largest perplexity))), ``metric``
        ("euclidean") and ``knn_backend`` ("auto") of the kNN graph, ``random_state`` (0),
        ``checkpoint_every`` and ``callback_every`` (iterations, 50). The sweepable ones
        (``SNE_SWEEPABLE``: perplexity, random_state, learning_rate) may be lists.

    Returns
    -------
    list of TSNEModel
        One model per setting, in the sweep's order.

    Raises
    ------
    InputError
        ``X`` is not a finite 2-D numeric array of at least 4 rows; more than ``SNE_MAX``
        rows; an unknown parameter, a list for a parameter that cannot be swept, an empty
        sweep, or a value out of range; a ``graph`` that does not fit X.
    """
    X, settings, s0 = checked_sweep(X, params, check_sne_params, "SNE")
    n = X.shape[0]
    graph = neighbour_graph(X, graph, s0["n_neighbors"], s0, "SNE")
    Y0 = None
    if s0["init"] == "pca":
        Y0 = pca_init(X, s0["n_components"], s0["random_state"])
        Y0 *= INIT_STD / max(Y0[:, 0].std(), 1e-300)
    Ps = perplexity_affinities(graph, n, "sne", settings, active_client())
    run = {"checkpoint": checkpoint, "callback": callback, "n_jobs": n_jobs}
    out = run_settings(
        sne_task, lambda s: (Ps[s["perplexity"]], Y0), settings, "SNE optimisation", **run
    )
    return models_of(TSNEModel, out, settings, "n_iter")


def sne(X, *, graph=None, checkpoint=None, callback=None, n_jobs=None, **params) -> TSNEModel:
    """One SNE embedding (see `sne_sweep`; ``checkpoint`` is an object with save/load).

    Parameters
    ----------
    X : array-like or dask array of shape (n_samples, n_features)
        The data rows (at least 4, at most ``SNE_MAX``).
    graph : KNNGraph or None, default None
        A kNN graph of X with at least 3 x perplexity neighbours (built when None).
    checkpoint : object or None, default None
        An object with ``save(state)`` and ``load() -> state | None`` (see
        ``_neighbor_runs``); the run resumes from a saved state.
    callback : callable or None, default None
        ``(iteration, total, cost)``, called in this process.
    n_jobs : int or None, default None
        numba's threads for the optimisation, as in `tsne_sweep`.
    **params
        The keys of ``SNE_DEFAULTS``, one value each (lists are refused: use `sne_sweep`);
        see `sne_sweep`.

    Returns
    -------
    TSNEModel
        The embedding; its ``kl_divergence`` is SNE's cost sum_i KL(P_i || Q_i).

    Raises
    ------
    InputError
        As `sne_sweep`, and a list for a sweepable parameter.
    """
    return one_run(sne_sweep, "sne", SNE_SWEEPABLE, X, graph, checkpoint, callback, n_jobs, params)


class SNE(NeighbourEstimator):
    """Stochastic Neighbor Embedding (Hinton & Roweis 2002), exact gradients, for small n.

    Parameters
    ----------
    n_components : int in [1, 3], default 2
        Dimensions of the embedding.
    perplexity : float, default 30.0
        The effective number of neighbours of each point's Gaussian (below n / 3).
    n_iter : int, default 500
        Iterations in all.
    learning_rate : float > 0, default 0.5
        The step size.
    momentum : float in [0, 1], default 0.5
        Momentum before iteration ``momentum_switch_iter``.
    final_momentum : float in [0, 1], default 0.8
        Momentum from iteration ``momentum_switch_iter`` on.
    momentum_switch_iter : int, default 250
        The iteration at which the momentum changes.
    min_gain : float, default 0.01
        The smallest per-coordinate gain of the delta-bar-delta rule.
    max_step_norm : float, default 5.0
        Steps longer than this are clipped.
    early_exaggeration : float > 0, default 1.0
        The factor on P during the first ``early_exaggeration_iter`` iterations (1: none).
    early_exaggeration_iter : int, default 0
        Iterations of the early phase.
    init : {"pca", "random"}, default "pca"
        The starting positions.
    n_neighbors : int or None, default None
        Neighbours in the kNN graph (None: min(n - 1, ceil(3 x perplexity))).
    metric : str, default "euclidean"
        The kNN graph's metric.
    knn_backend : str, default "auto"
        The kNN graph's backend (see `dimred_dask.graphs.knn_graph`).
    random_state : int >= 0 or None, default 0
        Seeds the initialisation and the kNN graph.
    checkpoint_every : int, default 50
        Iterations between checkpoints.
    callback_every : int, default 50
        Iterations between progress reports.
    checkpoint : object or None, default None
        An object with ``save(state)`` and ``load()``: the fit resumes from a saved state.
    callback : callable or None, default None
        ``(iteration, total, cost)``, called in this process.
    n_jobs : int or None, default None
        numba's threads for the optimisation.

    Attributes
    ----------
    embedding_, kl_divergence_, n_iter_
    """

    _check_params = PERPLEXITY_CHECKS
    _function = staticmethod(sne)
    _fit_name = _fit_transform_name = "SNE"

    def __init__(
        self,
        n_components=2,
        *,
        perplexity=30.0,
        n_iter=500,
        learning_rate=0.5,
        momentum=0.5,
        final_momentum=0.8,
        momentum_switch_iter=250,
        min_gain=0.01,
        max_step_norm=5.0,
        early_exaggeration=1.0,
        early_exaggeration_iter=0,
        init="pca",
        n_neighbors=None,
        metric="euclidean",
        knn_backend="auto",
        random_state=0,
        n_jobs=None,
        checkpoint=None,
        checkpoint_every=50,
        callback=None,
        callback_every=50,
    ):
        self._keep_params(locals())


METHOD_SPECS = neighbour_specs(
    "sne", SNE, sne, sne_sweep, function_defaults=SNE_DEFAULTS, model=TSNEModel, flow_adds=KNN_STAGE
)
