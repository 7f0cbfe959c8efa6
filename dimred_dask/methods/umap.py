"""UMAP (McInnes, Healy & Melville 2018): `umap`, `umap_sweep`, `UMAPModel`, `UMAP`.

fit = kNN graph (n_neighbors - 1 neighbours: UMAP counts the point itself, shared) -> fuzzy
graph (rho_i, sigma_i per row, blockwise; fuzzy union) -> a, b fitted from ``min_dist`` and
``spread`` -> initial layout (spectral from the graph Laplacian through the shared sparse
eigensolver, PCA fallback with a warning; or PCA; or random) -> SGD epochs with negative
sampling (``blocks.umap_kernels``: each edge sampled in proportion to its weight, the
learning rate decaying linearly to 0, ``negative_sample_rate`` repulsions per attraction, each
attraction's step also taken, opposite, by the edge's other end, as umap-learn does).

The loss reported is the fuzzy cross-entropy over unordered pairs
CE = sum_{i<j} p log(p/q) + (1 - p) log((1 - p)/(1 - q)), q = 1 / (1 + a d^2b): exact over the
graph's edges; the non-edges (p = 0, term -log(1 - q)) are summed exactly up to
``CE_EXACT_MAX`` points and estimated from ``CE_PAIRS`` random pairs above (stated in the
model's info). Threads and determinism: see ``blocks.umap_kernels``; runs and sweeps as in
``_neighbor_runs``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from .._compute import active_client
from ..blocks.umap_kernels import apply_pulls, pull_sums
from ..errors import InputError
from ..graphs.affinities import affinity_row_blocks_delayed, find_ab
from ._base import HasConvergence
from ._distributed import OPTIMIZERS, optimize_umap_distributed, plan_optimizer
from ._embedding_family import (
    PlacingEstimator,
    checked_params,
    checked_sweep,
    distributed_blocks,
    models_of,
    neighbour_graph,
    neighbour_specs,
    run_settings,
    sample_fit,
    setting_affinities,
    task_result,
)
from ._neighbor_runs import (
    TaskProgress,
    check_choice,
    check_float,
    check_int,
    delayed_literal,
    expand_sweep,
    one_run,
    pca_init,
    report_due,
    save_due,
    threads,
)
from ._umap_init import scale_layout, spectral_layout
from ._umap_parts import combine_cross_entropy, cross_entropy, edge_schedule, sgd_step

__all__ = [
    "UMAP",
    "UMAPModel",
    "umap",
    "umap_sweep",
    "UMAP_DEFAULTS",
    "UMAP_SWEEPABLE",
    "check_umap_params",
    "cross_entropy",
]

UMAP_DEFAULTS = {
    "n_components": 2,
    "n_neighbors": 15,
    "min_dist": 0.1,
    "spread": 1.0,
    "n_epochs": None,
    "learning_rate": 1.0,
    "negative_sample_rate": 5,
    "repulsion_strength": 1.0,
    "local_connectivity": 1.0,
    "set_op_mix_ratio": 1.0,
    "a": None,
    "b": None,
    "init": "spectral",
    "metric": "euclidean",
    "knn_backend": "auto",
    "random_state": 0,
    "nndescent_kwds": None,
    "checkpoint_every": 20,
    "callback_every": 10,
    "fit_sample": None,
    "optimizer": "auto",
}
UMAP_SWEEPABLE = (
    "min_dist",
    "spread",
    "random_state",
    "n_neighbors",
    "learning_rate",
    "negative_sample_rate",
    "repulsion_strength",
)
INITS = ("spectral", "pca", "random")
NO_KEYS = np.empty(0, dtype=np.uint64)  # sgd_epoch: a fit's rows are keyed by their number


def _check_setting(s: dict, n: int) -> dict:
    s = dict(s)
    s["n_neighbors"] = check_int("n_neighbors", s["n_neighbors"], 2, n - 1, method="UMAP")
    s["spread"] = check_float("spread", s["spread"], 0, method="UMAP")
    s["min_dist"] = check_float("min_dist", s["min_dist"], 0, method="UMAP", open_lo=False)
    if s["min_dist"] > s["spread"]:
        raise InputError(
            f"UMAP needs min_dist <= spread; found min_dist={s['min_dist']} > "
            f"spread={s['spread']}.",
            "lower min_dist (0.1 is usual) or raise spread (1.0).",
        )
    s["learning_rate"] = check_float("learning_rate", s["learning_rate"], 0, method="UMAP")
    s["negative_sample_rate"] = check_int(
        "negative_sample_rate", s["negative_sample_rate"], 0, method="UMAP"
    )
    s["repulsion_strength"] = check_float(
        "repulsion_strength", s["repulsion_strength"], 0, method="UMAP", open_lo=False
    )
    s["random_state"] = check_int("random_state", s["random_state"], 0, method="UMAP")
    if s["a"] is None or s["b"] is None:
        s["a"], s["b"] = find_ab(s["spread"], s["min_dist"])
    else:
        s["a"] = check_float("a", s["a"], 0, method="UMAP")
        s["b"] = check_float("b", s["b"], 0, method="UMAP")
    return s


def check_umap_params(params: dict, n: int) -> list[dict]:
    """Every setting of a (possibly swept) UMAP parameter set, checked.

    Parameters
    ----------
    params : dict
        Keys of ``UMAP_DEFAULTS`` (missing ones take their defaults); those of
        ``UMAP_SWEEPABLE`` may be lists.
    n : int
        The number of samples.

    Returns
    -------
    list of dict
        One complete parameter dict per setting, ``a`` and ``b`` fitted from ``min_dist`` and
        ``spread`` unless given.

    Raises
    ------
    InputError
        An unknown parameter, a list for a parameter that cannot be swept, an empty sweep, a
        value out of range, min_dist > spread, or an ``init`` array of the wrong shape.
    """
    p = checked_params(params, UMAP_DEFAULTS, UMAP_SWEEPABLE, "UMAP")
    check_int("n_components", p["n_components"], 1, max(1, n - 2), method="UMAP")
    if p["n_epochs"] is None:
        p["n_epochs"] = 500 if n <= 10_000 else 200
    check_int("n_epochs", p["n_epochs"], 1, method="UMAP")
    for key in ("checkpoint_every", "callback_every"):
        check_int(key, p[key], 0, method="UMAP")
    check_float("local_connectivity", p["local_connectivity"], 0, method="UMAP")
    check_choice("optimizer", p["optimizer"], OPTIMIZERS, method="UMAP")
    check_float("set_op_mix_ratio", p["set_op_mix_ratio"], 0, 1, method="UMAP", open_lo=False)
    if not isinstance(p["init"], np.ndarray):
        check_choice("init", p["init"], INITS, method="UMAP")
    elif p["init"].shape != (n, p["n_components"]):
        raise InputError(
            f"UMAP init has shape {p['init'].shape}; expected ({n}, {p['n_components']}).",
            "pass one row per sample.",
        )
    return [_check_setting(s, n) for s in expand_sweep(p, UMAP_SWEEPABLE)]


@dataclass
class UMAPModel(HasConvergence):
    """A fitted UMAP embedding and how it was made."""

    embedding: np.ndarray  # (n, n_components) float32
    cross_entropy: float  # of the fitted rows (all, or the fit sample)
    params: dict
    n_epochs: int
    info: dict = field(default_factory=dict)
    fit_rows: np.ndarray | None = None  # the rows fitted on (fit_sample), or None: all
    fit_X: np.ndarray | None = field(default=None, repr=False)  # those rows' data


# --------------------------------------------------------------------------- optimiser


def optimize_umap(P, Y0, s: dict, *, checkpoint=None, progress=None):
    """SGD epochs for one setting, from ``Y0`` (float32) or a checkpoint; (Y, info)."""
    n_epochs = s["n_epochs"]
    indptr, indices, eps, eps_neg = edge_schedule(P, n_epochs, s["negative_sample_rate"])
    state = checkpoint.load() if checkpoint is not None else None
    if state is not None:
        start, Y = int(state["iteration"]), np.array(state["embedding"], dtype=np.float32)
        nxt, nxt_neg = np.array(state["next_sample"]), np.array(state["next_negative"])
    else:
        start, Y = 0, np.array(Y0, dtype=np.float32)
        nxt, nxt_neg = eps.copy(), eps_neg.copy()
    edges = (indptr, indices, eps, nxt, eps_neg, nxt_neg)
    pulls = np.zeros((indices.size, Y.shape[1]), dtype=np.float32)
    t0 = time.perf_counter()
    for epoch in range(start, n_epochs):
        alpha = np.float32(s["learning_rate"] * (1.0 - epoch / n_epochs))
        sgd_step(Y, Y.copy(), edges, s, alpha, epoch, NO_KEYS, True, pulls)
        apply_pulls(Y, pull_sums(indices, pulls, Y.shape[0]), alpha)
        done = epoch + 1
        report_due(progress, s, done, n_epochs, None)
        save_due(checkpoint, s, done, n_epochs, Y, None, next_sample=nxt, next_negative=nxt_neg)
    return Y, {
        "seconds": round(time.perf_counter() - t0, 3),
        "resumed_from": start,
        "edges": int(indices.size),
    }


def _initial(layout, setting: dict, n: int):
    """(Y0 float32, how, convergence records of the layout) for one setting."""
    records = []
    if isinstance(layout, tuple):
        layout, how, records = layout
    elif layout is None:
        how = "random"
        layout = np.random.default_rng(setting["random_state"]).uniform(
            -10.0, 10.0, (n, setting["n_components"])
        )
    else:
        how = "given"
    return scale_layout(layout, setting["random_state"]), how, records


def _finished(Y, ce, ce_how, info, how, records, setting, nt) -> tuple:
    sgd = (
        "UMAP layout optimisation (SGD epochs)",
        "umap sgd",
        setting["n_epochs"],
        "cross-entropy",
    )
    return task_result(Y, ce, info, nt, sgd, records, init=how, loss=ce_how)


def umap_task(P, layout, setting: dict, checkpoint, *, progress=None, n_jobs=None):
    """One UMAP embedding (a Dask task, or in this process): the layout of this setting's
    graph scaled with this seed's noise, then the epochs."""
    with threads(n_jobs) as nt:
        Y0, how, records = _initial(layout, setting, P.shape[0])
        Y, info = optimize_umap(P, Y0, setting, checkpoint=checkpoint, progress=progress)
        ce, ce_how = cross_entropy(P, Y, setting["a"], setting["b"], setting["random_state"])
        if progress is not None:
            progress(setting["n_epochs"], setting["n_epochs"], ce)
    return _finished(Y, ce, ce_how, {**info, "optimizer": "single"}, how, records, setting, nt)


def _distributed(graph, layouts, settings, plan, client, checkpoint, callback, n_jobs) -> list:
    """Each setting's epochs spread over the workers (`_distributed`), one after the other."""
    n, bounds, nt, ref = distributed_blocks(graph, plan, client, n_jobs)
    out = []
    for i, s in enumerate(settings):
        key = _graph_key(s)
        P_blocks = affinity_row_blocks_delayed(
            ref, n, graph.n_neighbors, "umap", bounds, **_fuzzy_options(key)
        )
        layout = layouts[key]
        if layout is not None and not isinstance(layout, np.ndarray):
            layout = client.compute(layout).result()
        Y0, how, records = _initial(layout, s, n)
        progress = TaskProgress(i, None, callback)
        Y, terms, info = optimize_umap_distributed(
            P_blocks,
            bounds,
            Y0,
            s,
            client,
            checkpoint=checkpoint(i, s) if checkpoint else None,
            progress=progress,
            n_threads=nt,
        )
        ce, ce_how = combine_cross_entropy(terms, Y, s["a"], s["b"], s["random_state"])
        progress(s["n_epochs"], s["n_epochs"], ce)
        out.append(
            _finished(
                Y, ce, ce_how, {**info, "optimizer_reason": plan["reason"]}, how, records, s, nt
            )
        )
    return out


# --------------------------------------------------------------------------- fit


def _layouts(X, P_by_key: dict, settings: list[dict], client):
    """{graph key: layout or lazy (layout, how)}: spectral per fuzzy graph (a task next to it
    when a client is active), PCA or given shared, None for random (drawn in each task from
    its seed). Layouts do not depend on the seed (the eigensolver starts from seed 0), so a
    sweep over seeds shares them and each of its embeddings equals a single run's."""
    init, d = settings[0]["init"], settings[0]["n_components"]
    if isinstance(init, np.ndarray):
        return {key: np.asarray(init, dtype=np.float64) for key in P_by_key}
    if init == "random":
        return {key: None for key in P_by_key}
    seed = 0
    pca = pca_init(X, d, seed)
    if init == "pca":
        return {key: pca for key in P_by_key}
    if client is None:
        return {key: spectral_layout(P, d, pca, seed) for key, P in P_by_key.items()}
    from dask import delayed

    ref = delayed_literal(pca)
    task = delayed(spectral_layout, pure=True)
    return {key: task(P, d, ref, seed) for key, P in P_by_key.items()}


def _graph_key(s: dict) -> tuple:
    return (s["n_neighbors"], s["local_connectivity"], s["set_op_mix_ratio"])


def _fuzzy_options(key: tuple) -> dict:
    """The fuzzy graph's keywords (`affinities`) of a `_graph_key`."""
    return {"n_neighbors": key[0], "local_connectivity": key[1], "set_op_mix_ratio": key[2]}


def umap_sweep(
    X, *, graph=None, checkpoint=None, callback=None, n_jobs=None, **params
) -> list[UMAPModel]:
    """UMAP embeddings of ``X`` (NumPy or dask) for every setting of ``params`` (any of
    ``UMAP_SWEEPABLE`` given as a list is swept) over one kNN graph.

    UMAP (McInnes, Healy & Melville 2018); the settings run as parallel tasks, several lists
    make their product (first list varies slowest).

    Parameters
    ----------
    X : array-like or dask array of shape (n_samples, n_features)
        The data rows (at least 4).
    graph : KNNGraph or None, default None
        A kNN graph of X; built when None, with max(n_neighbors) - 1 neighbours (UMAP counts
        the point itself).
    checkpoint : callable or None, default None
        A factory ``(index, setting) -> object with save/load`` (see ``_neighbor_runs``).
    callback : callable or None, default None
        ``(index, epoch, n_epochs, loss or None)``, called in this process.
    n_jobs : int or None, default None
        numba's threads for each embedding's optimisation; None: with a client, the host's
        cores split between the tasks that run on it at once, else numba's current setting.
    **params
        The keys of ``UMAP_DEFAULTS`` (defaults there; others are refused):
        ``n_components`` (int in [1, n - 2], 2), ``n_neighbors`` (int in [2, n - 1], 15),
        ``min_dist`` (>= 0, at most spread, 0.1) and ``spread`` (> 0, 1.0), from which ``a``
        and ``b`` are fitted unless both are given (> 0; None); ``n_epochs`` (None: 500 up to
        10 000 points, else 200); ``learning_rate`` (> 0, 1.0, decaying linearly to 0);
        ``negative_sample_rate`` (repulsions per attraction, int >= 0, 5);
        ``repulsion_strength`` (>= 0, 1.0); ``local_connectivity`` (> 0, 1.0) and
        ``set_op_mix_ratio`` (in [0, 1], 1.0: fuzzy union) of the fuzzy graph; ``init``
        ("spectral", "pca", "random", or an (n, n_components) array); ``metric``
        ("euclidean"), ``knn_backend`` ("auto") and ``nndescent_kwds`` (None) of the kNN
        graph; ``random_state`` (int >= 0, 0); ``checkpoint_every`` (20) and
        ``callback_every`` (10) epochs; ``fit_sample`` (None, or an int >= 10: fit on that many
        rows drawn at random, place the others with the transform); ``optimizer`` ("auto",
        "single": each embedding one task on one worker, "distributed": one embedding's
        edges split over all workers, the same embedding bit for bit; "auto" takes
        "distributed" when the graph and the optimiser's state would exceed a quarter of a
        worker's memory and there are two workers or more). The sweepable ones
        (``UMAP_SWEEPABLE``: min_dist, spread, random_state, n_neighbors, learning_rate,
        negative_sample_rate, repulsion_strength) may be lists.

    Returns
    -------
    list of UMAPModel
        One model per setting, in the sweep's order; ``cross_entropy`` is the fuzzy
        cross-entropy over unordered pairs (see the module docstring).

    Raises
    ------
    InputError
        ``X`` is not a finite 2-D numeric array of at least 4 rows; an unknown parameter, a
        list for a parameter that cannot be swept, an empty sweep, or a value out of range
        (also min_dist > spread, an ``init`` array of the wrong shape); ``fit_sample`` with a
        ``graph`` or an ``init`` array; a ``graph`` that does not fit X.
    """
    X, settings, s0 = checked_sweep(X, params, check_umap_params, "UMAP")
    n = X.shape[0]
    run = {"checkpoint": checkpoint, "callback": callback, "n_jobs": n_jobs}
    sampled = sample_fit(umap_sweep, _place, X, graph, s0, "UMAP", params, **run)
    if sampled is not None:
        return sampled
    graph = neighbour_graph(X, graph, max(s["n_neighbors"] for s in settings) - 1, s0, "UMAP")
    keys = sorted({_graph_key(s) for s in settings})
    client = active_client()
    Ps = setting_affinities(graph, n, "umap", keys, _fuzzy_options, client)
    layouts = _layouts(X, Ps, settings, client)
    plan = plan_optimizer(s0["optimizer"], n, 2 * n * graph.n_neighbors, s0["n_components"], client)
    if plan["optimizer"] == "distributed":
        out = _distributed(graph, layouts, settings, plan, client, checkpoint, callback, n_jobs)
        return models_of(UMAPModel, out, settings, "n_epochs")
    out = run_settings(
        umap_task,
        lambda s: (Ps[_graph_key(s)], layouts[_graph_key(s)]),
        settings,
        "UMAP optimisation",
        **run,
    )
    return models_of(UMAPModel, out, settings, "n_epochs", optimizer_reason=plan["reason"])


def _place(X_fit, Y_fit, X, params: dict):
    from ._umap_transform import umap_transform

    return umap_transform(X_fit, Y_fit, X, params)


def umap(X, *, graph=None, checkpoint=None, callback=None, n_jobs=None, **params) -> UMAPModel:
    """One UMAP embedding (see `umap_sweep`; ``checkpoint`` is an object with save/load,
    ``callback(epoch, n_epochs, loss or None)``).

    Parameters
    ----------
    X : array-like or dask array of shape (n_samples, n_features)
        The data rows (at least 4).
    graph : KNNGraph or None, default None
        A kNN graph of X; built when None, with n_neighbors - 1 neighbours.
    checkpoint : object or None, default None
        An object with ``save(state)`` and ``load() -> state | None`` (see
        ``_neighbor_runs``); the run resumes from a saved state.
    callback : callable or None, default None
        ``callback(epoch, n_epochs, loss or None)``, called in this process.
    n_jobs : int or None, default None
        numba's threads for the optimisation, as in `umap_sweep`.
    **params
        The keys of ``UMAP_DEFAULTS``, one value each (lists are refused: use `umap_sweep`);
        see `umap_sweep`.

    Returns
    -------
    UMAPModel
        The embedding, its cross-entropy, the parameters (with ``a`` and ``b``) and the run's
        ``info``.

    Raises
    ------
    InputError
        As `umap_sweep`, and a list for a sweepable parameter.
    """
    return one_run(
        umap_sweep, "umap", UMAP_SWEEPABLE, X, graph, checkpoint, callback, n_jobs, params
    )


class UMAP(PlacingEstimator):
    """UMAP (McInnes, Healy & Melville 2018) with a deterministic multithreaded SGD.

    ``transform(X_new)`` optimises only the new points against the fixed embedding
    (``_umap_transform``), chunk by chunk for dask input.

    Parameters
    ----------
    n_components : int in [1, n - 2], default 2
        Dimensions of the embedding.
    n_neighbors : int in [2, n - 1], default 15
        Neighbours of each point in the fuzzy graph (counting the point itself).
    min_dist : float >= 0, default 0.1
        How close embedded points may come (at most ``spread``); with ``spread`` it fixes
        ``a`` and ``b``.
    spread : float > 0, default 1.0
        The scale of the embedded points.
    n_epochs : int or None, default None
        SGD epochs (None: 500 up to 10 000 points, else 200).
    learning_rate : float > 0, default 1.0
        The first epoch's step, decaying linearly to 0.
    negative_sample_rate : int >= 0, default 5
        Repulsions sampled per attraction.
    repulsion_strength : float >= 0, default 1.0
        The weight of the repulsions.
    local_connectivity : float > 0, default 1.0
        Neighbours each point is assumed connected to (the fuzzy graph's rho).
    set_op_mix_ratio : float in [0, 1], default 1.0
        1: the fuzzy union of the directed memberships, 0: their intersection.
    a, b : float > 0 or None, default None
        The embedding's membership curve 1 / (1 + a d^(2b)); fitted to ``min_dist`` and
        ``spread`` unless both are given.
    init : "spectral", "pca", "random" or array of shape (n_samples, n_components)
        The starting positions (default "spectral": the fuzzy graph's Laplacian eigenvectors).
    metric : str, default "euclidean"
        The kNN graph's metric.
    knn_backend : str, default "auto"
        The kNN graph's backend (see `dimred_dask.graphs.knn_graph`).
    random_state : int >= 0, default 0
        Seeds the initialisation, the negative samples and the kNN graph; the same seed gives
        the same bits for any number of threads.
    nndescent_kwds : dict or None, default None
        Options for the NN-descent kNN backend.
    n_jobs : int or None, default None
        numba's threads for the optimisation.
    checkpoint : object or None, default None
        An object with ``save(state)`` and ``load()``: the fit resumes from a saved state.
    checkpoint_every : int, default 20
        Epochs between checkpoints.
    callback : callable or None, default None
        ``(epoch, n_epochs, loss or None)``, called in this process.
    callback_every : int, default 10
        Epochs between progress reports.
    fit_sample : int >= 10 or None, default None
        Fit on that many rows drawn at random and place the others with the transform.
    optimizer : {"auto", "single", "distributed"}, default "auto"
        "single": the embedding is one task on one worker; "distributed": its edges are split
        over all workers, giving the same embedding bit for bit; "auto" takes "distributed"
        when the graph and the optimiser's state would exceed a quarter of a worker's memory
        on two workers or more.

    Attributes
    ----------
    embedding_, cross_entropy_, a_, b_
    """

    _check_params = ({"n_neighbors": 5, "random_state": 0},)
    _function, _place = staticmethod(umap), staticmethod(_place)
    _fit_name = "UMAP"

    def __init__(
        self,
        n_components=2,
        *,
        n_neighbors=15,
        min_dist=0.1,
        spread=1.0,
        n_epochs=None,
        learning_rate=1.0,
        negative_sample_rate=5,
        repulsion_strength=1.0,
        local_connectivity=1.0,
        set_op_mix_ratio=1.0,
        a=None,
        b=None,
        init="spectral",
        metric="euclidean",
        knn_backend="auto",
        random_state=0,
        nndescent_kwds=None,
        n_jobs=None,
        checkpoint=None,
        checkpoint_every=20,
        callback=None,
        callback_every=10,
        fit_sample=None,
        optimizer="auto",
    ):
        self._keep_params(locals())

    def _keep(self, model) -> None:
        """What fit keeps of the model besides its embedding: its cross-entropy, ``a``,
        ``b``, epochs and settings (what transform places new rows with)."""
        self.cross_entropy_ = model.cross_entropy
        self.a_, self.b_ = model.params["a"], model.params["b"]
        self.n_epochs_, self.params_ = model.n_epochs, model.params

    def _place_params(self) -> dict:
        return self.params_


METHOD_SPECS = neighbour_specs(
    "umap", UMAP, umap, umap_sweep, function_defaults=UMAP_DEFAULTS, model=UMAPModel
)
