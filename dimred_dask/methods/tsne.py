"""t-SNE (van der Maaten & Hinton 2008): the function ``tsne``, sweeps ``tsne_sweep``, the
model and `TSNE`.

fit = kNN graph (k = 3 x perplexity, shared) -> joint P (perplexity by bisection, blockwise)
-> initialisation (PCA scaled to std 1e-4, or random) -> gradient descent with early
exaggeration, momentum 0.5 -> 0.8, delta-bar-delta gains (minimum gain), step-norm clipping,
learning rate n / exaggeration per phase (openTSNE's "auto"), the embedding re-centred after
every step. Gradients: ``exact`` (all pairs, O(n^2)) or ``fft`` (interpolation on a grid,
Linderman et al. 2019), ``auto`` = exact up to ``EXACT_MAX`` points. The KL divergence of the
final embedding is reported (with Z from the same gradient method).

Each embedding's optimisation is one task on a Dask worker (using that worker's cores through
numba) when a client is active; a sweep (several perplexities, seeds, learning rates ...) runs
its embeddings as parallel tasks over one kNN graph. See ``_neighbor_runs`` for checkpoints
(resume ends exactly where an uninterrupted run ends) and progress.
"""

from __future__ import annotations

import time

import numpy as np

from .._compute import active_client
from ..blocks.tsne_gradient import Interpolation, kl_divergence, potentials, tsne_step
from ..errors import InputError
from ..graphs.affinities import affinity_row_blocks_delayed, check_perplexity
from ._distributed import OPTIMIZERS, optimize_tsne_distributed, plan_optimizer
from ._embedding_family import (
    INIT_STD,
    KNN_RUN_DEFAULTS,
    PERPLEXITY_CHECKS,
    PlacingEstimator,
    TSNEModel,
    checked_params,
    checked_sweep,
    distributed_blocks,
    models_of,
    neighbour_graph,
    neighbour_specs,
    perplexity_affinities,
    perplexity_neighbours,
    run_settings,
    sample_fit,
    task_result,
)
from ._neighbor_runs import (
    TaskProgress,
    check_choice,
    check_float,
    check_int,
    delayed_literal,
    expand_sweep,
    learning_rate_of,
    one_run,
    pca_init,
    random_init,
    save_due,
    threads,
)

__all__ = [
    "TSNE",
    "TSNEModel",
    "tsne",
    "tsne_sweep",
    "TSNE_DEFAULTS",
    "TSNE_SWEEPABLE",
    "check_tsne_params",
    "EXACT_MAX",
]

# gradient="auto": exact up to this many points, FFT above: on small n the exact O(n^2)
# gradient is the faster one, as the FFT interpolation's grid has a fixed cost per iteration
EXACT_MAX = 3000
GRADIENTS = ("auto", "exact", "fft")
TSNE_DEFAULTS = {
    "n_components": 2,
    "perplexity": 30.0,
    "early_exaggeration": 12.0,
    "early_exaggeration_iter": 250,
    "n_iter": 750,
    "exaggeration": 1.0,
    "learning_rate": "auto",
    "momentum": 0.5,
    "final_momentum": 0.8,
    "min_gain": 0.01,
    "max_step_norm": 5.0,
    "init": "pca",
    "gradient": "auto",
    "n_interpolation_points": 3,
    "min_num_intervals": None,
    "ints_in_interval": 1.0,
    **KNN_RUN_DEFAULTS,
    "fit_sample": None,
    "optimizer": "auto",
}
TSNE_SWEEPABLE = (
    "perplexity",
    "random_state",
    "learning_rate",
    "early_exaggeration",
    "exaggeration",
)


def _check_setting(p: dict, n: int, name: str = "t-SNE") -> dict:
    """The per-embedding parameters (those a sweep may vary) of one setting."""
    p = dict(p)
    p["perplexity"] = check_perplexity(p["perplexity"], n, method=name)
    p["early_exaggeration"] = check_float(
        "early_exaggeration", p["early_exaggeration"], 0, method=name
    )
    p["exaggeration"] = check_float("exaggeration", p["exaggeration"], 0, method=name)
    if p["learning_rate"] != "auto":
        p["learning_rate"] = check_float("learning_rate", p["learning_rate"], 0, method=name)
    if p["random_state"] is not None:
        p["random_state"] = check_int("random_state", p["random_state"], 0, method=name)
    return p


def check_tsne_params(params: dict, n: int, name: str = "t-SNE") -> list[dict]:
    """Every setting of a (possibly swept) parameter set, checked; InputError if bad.

    Parameters
    ----------
    params : dict
        Keys of ``TSNE_DEFAULTS`` (missing ones take their defaults); those of
        ``TSNE_SWEEPABLE`` may be lists.
    n : int
        The number of samples.
    name : str, default "t-SNE"
        The method named in error messages.

    Returns
    -------
    list of dict
        One complete parameter dict per setting, ``gradient``, ``min_num_intervals`` and
        ``n_neighbors`` resolved.

    Raises
    ------
    InputError
        An unknown parameter, a list for a parameter that cannot be swept, an empty sweep, or a
        value out of range.
    """
    p = checked_params(params, TSNE_DEFAULTS, TSNE_SWEEPABLE, name)
    d = check_int("n_components", p["n_components"], 1, 3, method=name)
    grad = check_choice("gradient", p["gradient"], GRADIENTS, method=name)
    check_choice("optimizer", p["optimizer"], OPTIMIZERS, method=name)
    if grad == "auto":
        p["gradient"] = "exact" if n <= EXACT_MAX else "fft"
    if p["optimizer"] == "distributed" and p["gradient"] != "fft":
        raise InputError(
            f"{name} optimizer='distributed' computes the repulsion on an "
            f"interpolation grid; found gradient={p['gradient']!r}"
            f"{' (auto: exact up to %d rows)' % EXACT_MAX if grad == 'auto' else ''}.",
            "pass gradient='fft' (or optimizer='single').",
        )
    for key in ("early_exaggeration_iter", "checkpoint_every", "callback_every"):
        check_int(key, p[key], 0, method=name)
    check_int("n_iter", p["n_iter"], 1, method=name)
    check_int("n_interpolation_points", p["n_interpolation_points"], 2, 8, method=name)
    if p["min_num_intervals"] is None:
        p["min_num_intervals"] = 10 if d == 3 else 50
    check_int("min_num_intervals", p["min_num_intervals"], 1, method=name)
    check_float("ints_in_interval", p["ints_in_interval"], 0, method=name)
    for key in ("momentum", "final_momentum"):
        check_float(key, p[key], 0, 1, method=name, open_lo=False)
    check_float("min_gain", p["min_gain"], 0, method=name, open_lo=False)
    check_float("max_step_norm", p["max_step_norm"], 0, method=name, open_lo=False)
    if not (isinstance(p["init"], np.ndarray) or p["init"] in ("pca", "random")):
        raise InputError(
            f"{name} init must be 'pca', 'random' or an (n, {d}) array; found {p['init']!r}.",
            "pass init='pca'.",
        )
    settings = [_check_setting(s, n, name) for s in expand_sweep(p, TSNE_SWEEPABLE)]
    k = perplexity_neighbours(p["n_neighbors"], (s["perplexity"] for s in settings), n, name)
    for s in settings:
        s["n_neighbors"] = k
        check_perplexity(s["perplexity"], n, k, name)
    return settings


# --------------------------------------------------------------------------- optimiser


def _start(Y0, n: int, s: dict, state):
    if state is not None:
        if np.shape(state["embedding"]) != (n, s["n_components"]):
            raise InputError(
                f"The checkpoint's embedding has shape "
                f"{np.shape(state['embedding'])}; this run makes "
                f"({n}, {s['n_components']}).",
                "remove the stale checkpoint.",
            )
        return (
            int(state["iteration"]),
            np.array(state["embedding"], np.float64),
            np.array(state["update"], np.float64),
            np.array(state["gains"], np.float64),
        )
    if Y0 is None:
        Y0 = random_init(n, s["n_components"], INIT_STD, s["random_state"])
    Y = np.array(Y0, dtype=np.float64, copy=True)
    return 0, Y, np.zeros_like(Y), np.ones_like(Y)


def optimize_tsne(P, Y0, s: dict, *, checkpoint=None, progress=None, workers: int = 1):
    """Run (or resume) the t-SNE gradient descent for one setting; (Y, kl, info)."""
    n = P.shape[0]
    interp = Interpolation(
        s["n_interpolation_points"], s["min_num_intervals"], s["ints_in_interval"]
    )
    state = checkpoint.load() if checkpoint is not None else None
    start, Y, update, gains = _start(Y0, n, s, state)
    Ynew = np.empty_like(Y)
    fixed = {  # the step's arguments that stay the same for the whole run
        "min_gain": s["min_gain"],
        "max_step": s["max_step_norm"],
        "method": s["gradient"],
        "interp": interp,
        "workers": workers,
        "data32": P.data.astype(np.float32),
    }
    t0, total, every = time.perf_counter(), s["n_iter"], s["callback_every"]
    for it in range(start, total):
        early = it < s["early_exaggeration_iter"]
        exag = s["early_exaggeration"] if early else s["exaggeration"]
        report = progress is not None and every and (it % every == 0)
        _, kl = tsne_step(
            P.indptr,
            P.indices,
            P.data,
            Y,
            Ynew,
            update,
            gains,
            exaggeration=exag,
            momentum=s["momentum"] if early else s["final_momentum"],
            learning_rate=learning_rate_of(s, n, exag),
            kl=report,
            **fixed,
        )
        Y, Ynew = Ynew, Y
        Y -= Y.mean(axis=0)
        if report:
            progress(it, total, kl)  # the KL of the embedding after `it` iterations
        save_due(checkpoint, s, it + 1, total, Y, kl, update=update, gains=gains)
    Z, _ = potentials(Y, s["gradient"], interp, workers)
    kl = kl_divergence(P.indptr, P.indices, P.data, Y, Z)
    if progress is not None:
        progress(total, total, kl)
    return (
        Y,
        kl,
        {
            "seconds": round(time.perf_counter() - t0, 3),
            "resumed_from": start,
            "gradient": s["gradient"],
            "nnz_P": int(P.nnz),
        },
    )


def _finished(Y, kl, info, setting: dict, nt) -> tuple:
    init = setting["init"] if isinstance(setting["init"], str) else "given"
    solver = f"t-SNE ({info['gradient']} gradients)"
    descent = ("t-SNE gradient descent", solver, setting["n_iter"], "KL")
    return task_result(Y, kl, info, nt, descent, init=init)


def tsne_task(P, Y0, setting: dict, checkpoint, *, progress=None, n_jobs=None):
    """One embedding, as run in a Dask task (or in this process)."""
    with threads(n_jobs) as nt:
        Y, kl, info = optimize_tsne(
            P, Y0, setting, checkpoint=checkpoint, progress=progress, workers=nt
        )
    return _finished(Y, kl, {**info, "optimizer": "single"}, setting, nt)


def _distributed(graph, Y0, settings, plan, client, checkpoint, callback, n_jobs) -> list:
    """Each setting's optimisation spread over the workers (`_distributed`), one after the
    other."""
    n, bounds, nt, ref = distributed_blocks(graph, plan, client, n_jobs)
    out = []
    for i, s in enumerate(settings):
        P_blocks = affinity_row_blocks_delayed(
            ref, n, graph.n_neighbors, "tsne", bounds, perplexity=s["perplexity"]
        )
        ck = checkpoint(i, s) if checkpoint else None
        initial = _start(Y0, n, s, ck.load() if ck is not None else None)
        Y, kl, info = optimize_tsne_distributed(
            P_blocks,
            bounds,
            initial,
            s,
            client,
            checkpoint=ck,
            progress=TaskProgress(i, None, callback),
            n_threads=nt,
        )
        out.append(_finished(Y, kl, {**info, "optimizer_reason": plan["reason"]}, s, nt))
    return out


# --------------------------------------------------------------------------- fit


def _initial(X, settings: list[dict]):
    """The shared initial embedding (PCA scaled to std INIT_STD), or None for random."""
    init = settings[0]["init"]
    n, d = X.shape[0], settings[0]["n_components"]
    if isinstance(init, np.ndarray):
        if init.shape != (n, d):
            raise InputError(
                f"init has shape {init.shape}; expected ({n}, {d}).",
                "pass an initial embedding with one row per sample.",
            )
        return np.asarray(init, dtype=np.float64)
    if init == "random":
        return None
    Y = pca_init(X, d, 0)  # the same for every seed of a sweep (as a single run's)
    std = Y[:, 0].std()
    return Y * (INIT_STD / std) if std > 0 else Y


def tsne_sweep(
    X, *, graph=None, checkpoint=None, callback=None, n_jobs=None, **params
) -> list[TSNEModel]:
    """t-SNE embeddings of ``X`` (NumPy or dask) for every setting of ``params`` (any of
    ``TSNE_SWEEPABLE`` given as a list is swept).

    t-SNE (van der Maaten & Hinton 2008); gradients exact or FFT-interpolated (Linderman et
    al. 2019), see the module docstring. The settings of a sweep run as parallel tasks over
    one kNN graph; several lists make their product (first list varies slowest).

    Parameters
    ----------
    X : array-like or dask array of shape (n_samples, n_features)
        The data rows (at least 4).
    graph : KNNGraph or None, default None
        A kNN graph of X with at least 3 x perplexity neighbours (built when None).
    checkpoint : callable or None, default None
        A factory ``(index, setting) -> object with save/load`` (see ``_neighbor_runs``).
    callback : callable or None, default None
        ``(index, iteration, total, kl)``, called in this process.
    n_jobs : int or None, default None
        numba's threads for each embedding's optimisation; None: with a client, the host's
        cores split between the tasks that run on it at once, else numba's current setting.
    **params
        The keys of ``TSNE_DEFAULTS`` (defaults there; others are refused):
        ``n_components`` (int in [1, 3], 2), ``perplexity`` (30.0), ``early_exaggeration``
        (> 0, 12.0) for the first ``early_exaggeration_iter`` (250) of ``n_iter`` (750)
        iterations, then ``exaggeration`` (> 0, 1.0); ``learning_rate`` (> 0, or "auto":
        n / exaggeration per phase); ``momentum`` (0.5, early phase) and ``final_momentum``
        (0.8), in [0, 1]; ``min_gain`` (0.01); ``max_step_norm`` (step-norm clipping, 5.0);
        ``init`` ("pca": PCA scaled to std 1e-4, "random", or an (n, n_components) array);
        ``gradient`` ("auto": exact up to ``EXACT_MAX`` points, fft above; "exact"; "fft");
        ``n_interpolation_points`` (int in [2, 8], 3), ``min_num_intervals`` (None: 10 for 3-D,
        else 50) and ``ints_in_interval`` (1.0) for the FFT gradients; ``n_neighbors`` (None:
        min(n - 1, ceil(3 x the largest perplexity))); ``metric`` ("euclidean") and
        ``knn_backend`` ("auto") of the kNN graph; ``random_state`` (int >= 0 or None, 0);
        ``checkpoint_every`` and ``callback_every`` (iterations, 50); ``fit_sample`` (None, or
        an int >= 10: fit on that many rows drawn at random, place the others with the
        transform); ``optimizer`` ("auto", "single": each embedding one task on one worker,
        "distributed": one embedding's rows and P split over all workers, FFT gradients only;
        "auto" takes "distributed" when P and the optimiser's state would exceed a quarter of
        a worker's memory and there are two workers or more). The sweepable ones
        (``TSNE_SWEEPABLE``: perplexity, random_state, learning_rate, early_exaggeration,
        exaggeration) may be lists.

    Returns
    -------
    list of TSNEModel
        One model per setting, in the sweep's order; ``kl_divergence`` is the KL divergence of
        the final embedding.

    Raises
    ------
    InputError
        ``X`` is not a finite 2-D numeric array of at least 4 rows; an unknown parameter, a
        list for a parameter that cannot be swept, an empty sweep, or a value out of range;
        ``fit_sample`` with a ``graph`` or an ``init`` array; a ``graph`` that does not fit X.
    """
    X, settings, s0 = checked_sweep(X, params, check_tsne_params, "t-SNE")
    n = X.shape[0]
    run = {"checkpoint": checkpoint, "callback": callback, "n_jobs": n_jobs}
    sampled = sample_fit(tsne_sweep, _place, X, graph, s0, "t-SNE", params, **run)
    if sampled is not None:
        return sampled
    graph = neighbour_graph(X, graph, s0["n_neighbors"], s0, "t-SNE")
    Y0 = _initial(X, settings)
    client = active_client()
    choice = "single" if s0["gradient"] != "fft" else s0["optimizer"]  # blocks: FFT only
    plan = plan_optimizer(choice, n, 2 * n * graph.n_neighbors, s0["n_components"], client)
    if plan["optimizer"] == "distributed":
        out = _distributed(graph, Y0, settings, plan, client, checkpoint, callback, n_jobs)
        return models_of(TSNEModel, out, settings, "n_iter")
    Ps = perplexity_affinities(graph, graph.n_samples, "tsne", settings, client)
    if client is not None and Y0 is not None:
        Y0 = delayed_literal(Y0)
    out = run_settings(
        tsne_task, lambda s: (Ps[s["perplexity"]], Y0), settings, "t-SNE optimisation", **run
    )
    return models_of(TSNEModel, out, settings, "n_iter", optimizer_reason=plan["reason"])


def _place(X_fit, Y_fit, X, params: dict):
    from ._tsne_transform import tsne_transform

    return tsne_transform(
        X_fit,
        Y_fit,
        X,
        metric=params["metric"],
        gradient=params["gradient"],
        n_interpolation_points=params["n_interpolation_points"],
        min_num_intervals=params["min_num_intervals"],
        ints_in_interval=params["ints_in_interval"],
    )


def tsne(X, *, graph=None, checkpoint=None, callback=None, n_jobs=None, **params) -> TSNEModel:
    """One t-SNE embedding (see `tsne_sweep`; ``checkpoint`` is an object with save/load).

    Parameters
    ----------
    X : array-like or dask array of shape (n_samples, n_features)
        The data rows (at least 4).
    graph : KNNGraph or None, default None
        A kNN graph of X with at least 3 x perplexity neighbours (built when None).
    checkpoint : object or None, default None
        An object with ``save(state)`` and ``load() -> state | None`` (see
        ``_neighbor_runs``); the run resumes from a saved state.
    callback : callable or None, default None
        ``(iteration, total, kl)``, called in this process.
    n_jobs : int or None, default None
        numba's threads for the optimisation (as in `tsne_sweep`).
    **params
        The keys of ``TSNE_DEFAULTS``, one value each (lists are refused: use `tsne_sweep`);
        see `tsne_sweep`.

    Returns
    -------
    TSNEModel
        The embedding, its KL divergence, the parameters and the run's ``info``.

    Raises
    ------
    InputError
        As `tsne_sweep`, and a list for a sweepable parameter.
    """
    return one_run(
        tsne_sweep, "tsne", TSNE_SWEEPABLE, X, graph, checkpoint, callback, n_jobs, params
    )


# --------------------------------------------------------------------------- estimator


class TSNE(PlacingEstimator):
    """t-SNE (van der Maaten & Hinton 2008) with FFT-interpolated gradients for large n.

    ``transform(X_new)`` places new points against the fixed embedding (``_tsne_transform``),
    chunk by chunk for dask input.

    Parameters
    ----------
    n_components : int in [1, 3], default 2
        Dimensions of the embedding.
    perplexity : float, default 30.0
        The effective number of neighbours of each point's Gaussian (below n / 3).
    early_exaggeration : float > 0, default 12.0
        The factor on P during the first ``early_exaggeration_iter`` iterations.
    early_exaggeration_iter : int, default 250
        Iterations of the early phase (part of ``n_iter``).
    n_iter : int, default 750
        Iterations in all.
    exaggeration : float > 0, default 1.0
        The factor on P after the early phase.
    learning_rate : float > 0 or "auto", default "auto"
        The step size; "auto" is n / exaggeration in each phase.
    momentum : float in [0, 1], default 0.5
        Momentum of the early phase.
    final_momentum : float in [0, 1], default 0.8
        Momentum after the early phase.
    min_gain : float, default 0.01
        The smallest per-coordinate gain of the delta-bar-delta rule.
    max_step_norm : float, default 5.0
        Steps longer than this are clipped.
    init : "pca", "random" or array of shape (n_samples, n_components), default "pca"
        The starting positions ("pca": PCA scaled to standard deviation 1e-4).
    gradient : {"auto", "exact", "fft"}, default "auto"
        Exact all-pairs gradients, or FFT-interpolated ones (Linderman et al. 2019); "auto":
        exact up to ``EXACT_MAX`` points.
    n_interpolation_points : int in [2, 8], default 3
        FFT gradients: interpolation nodes per box.
    min_num_intervals : int or None, default None
        FFT gradients: the fewest boxes per dimension (None: 10 in 3-D, else 50).
    ints_in_interval : float, default 1.0
        FFT gradients: the side of a box.
    n_neighbors : int or None, default None
        Neighbours in the kNN graph (None: min(n - 1, ceil(3 x perplexity))).
    metric : str, default "euclidean"
        The kNN graph's metric.
    knn_backend : str, default "auto"
        The kNN graph's backend (see `dimred_dask.graphs.knn_graph`).
    random_state : int >= 0 or None, default 0
        Seeds the initialisation and the kNN graph; the same seed gives the same bits.
    checkpoint_every : int, default 50
        Iterations between checkpoints (the flow's run store).
    callback_every : int, default 50
        Iterations between progress reports.
    fit_sample : int >= 10 or None, default None
        Fit on that many rows drawn at random and place the others with the transform.
    optimizer : {"auto", "single", "distributed"}, default "auto"
        "single": the embedding is one task on one worker; "distributed": its rows and P are
        split over all workers (FFT gradients); "auto" takes "distributed" when P and the
        optimiser's state would exceed a quarter of a worker's memory on two workers or more.
    checkpoint : object or None, default None
        An object with ``save(state)`` and ``load()``: the fit resumes from a saved state.
    callback : callable or None, default None
        ``(iteration, total, kl)``, called in this process.
    n_jobs : int or None, default None
        numba's threads for the optimisation.

    Attributes
    ----------
    embedding_, kl_divergence_, n_iter_
    """

    _check_params = PERPLEXITY_CHECKS
    _function, _place = staticmethod(tsne), staticmethod(_place)
    _fit_name = "t-SNE"

    def __init__(
        self,
        n_components=2,
        *,
        perplexity=30.0,
        early_exaggeration=12.0,
        early_exaggeration_iter=250,
        n_iter=750,
        exaggeration=1.0,
        learning_rate="auto",
        momentum=0.5,
        final_momentum=0.8,
        min_gain=0.01,
        max_step_norm=5.0,
        init="pca",
        gradient="auto",
        n_interpolation_points=3,
        min_num_intervals=None,
        ints_in_interval=1.0,
        n_neighbors=None,
        metric="euclidean",
        knn_backend="auto",
        random_state=0,
        n_jobs=None,
        checkpoint=None,
        checkpoint_every=50,
        callback=None,
        callback_every=50,
        fit_sample=None,
        optimizer="auto",
    ):
        self._keep_params(locals())


METHOD_SPECS = neighbour_specs(
    "tsne", TSNE, tsne, tsne_sweep, function_defaults=TSNE_DEFAULTS, model=TSNEModel
)
