"""Action respecting embedding (Bowling, Ghodsi & Wilkinson 2005).

Data x_1 .. x_n in temporal order and a discrete action a_i taken between x_i and x_i+1
(n - 1 actions). MVU's problem (``methods.mvu``) plus, for every pair i, j with a_i = a_j:

    K_(i+1)(i+1) - 2 K_(i+1)(j+1) + K_(j+1)(j+1) = K_ii - 2 K_ij + K_jj

(an action moves any two points it is applied to without changing their distance: in the
embedding it is a rotation plus a translation). Each is one constraint of two dyads with
target 0, added to the same sparse map as the distance constraints.

The distance constraints are ``"slack"`` by default: with the action constraints, noisy
observations (two images of one place are never identical) leave no kernel that meets every
local distance exactly, while the penalised form keeps the action constraints exact and gives
only where it must. ``constraints="equality"`` is available and reports infeasibility.
``action_pairs="neighbors"`` keeps only pairs (i, j) that are graph neighbours, for long
sequences (all pairs of one action grow like n^2).
"""

from __future__ import annotations

import numpy as np

from .._validation import check_array, is_dask
from ..errors import InputError
from ._distance_sdp import distance_sdp, kernel_embedding
from ._sdp_family import EXACT_MAX as EXACT_MAX
from ._sdp_family import (
    SDPEmbeddingModel,
    SDPEstimator,
    SDPFit,
    check_exact_sdp_params,
    check_exact_size,
    check_one_of,
)
from ._spec import DOCS_SDP, KNN_STAGE, SDP_FUNCTION_ONLY, MethodSpec

__all__ = [
    "ActionRespectingEmbedding",
    "action_respecting_embedding",
    "check_actions",
    "action_constraints",
    "ACTION_PAIRS",
    "MAX_ACTION_PAIRS",
    "check_are_params",
]

ACTION_PAIRS = ("all", "neighbors")
MAX_ACTION_PAIRS = 50_000  # action constraints above this: refuse, suggest "neighbors"
_ARE = "Action respecting embedding"  # the method's name in messages


def check_actions(actions, n: int, *, where: str = "actions") -> np.ndarray:
    """The actions as integer codes (length n - 1), or an `InputError` saying what is wrong.

    Parameters
    ----------
    actions : array-like or dask array of shape (n - 1,) or (n - 1, 1)
        The action taken between row i and row i + 1: labels (ints or strings).
    n : int
        The number of rows of the data.
    where : str, default "actions"
        The name of the input in error messages.

    Returns
    -------
    numpy.ndarray of int64, shape (n - 1,)
        The actions as codes 0, 1, ... (in the sorted order of the labels).

    Raises
    ------
    InputError
        ``actions`` is None, not 1-D (or one column), not of length n - 1, has NaN or inf, or is
        not of labels (ints or strings).
    """
    if actions is None:
        raise InputError(
            f"Action respecting embedding needs the actions taken between "
            f"consecutive rows ({n - 1} of them for {n} rows); found none.",
            "pass actions=<array of length n - 1> (--actions URI in a run).",
        )
    a = np.asarray(actions.compute() if is_dask(actions) else actions)
    if a.ndim == 2 and a.shape[1] == 1:
        a = a[:, 0]
    if a.ndim != 1:
        raise InputError(
            f"The actions must be a 1-D array; found shape {a.shape} in {where}.",
            "pass one action label per step (a 1-D array or one column).",
        )
    if a.shape[0] != n - 1:
        raise InputError(
            f"There must be one action between each pair of consecutive rows: "
            f"{n - 1} for {n} rows; found {a.shape[0]} in {where}.",
            f"pass {n - 1} actions (action i is taken between row i and row i + 1).",
        )
    if a.dtype.kind == "f" and not np.isfinite(a).all():
        bad = np.nonzero(~np.isfinite(a))[0]
        raise InputError(
            f"The actions must be labels; found {bad.size} NaN/inf at steps "
            f"{bad[:10].tolist()} of {where}.",
            "label every step.",
        )
    if a.dtype.kind not in "biufUSO":
        raise InputError(
            f"The actions must be labels (ints or strings); found dtype {a.dtype} in {where}.",
            "pass integer or string action labels.",
        )
    _, codes = np.unique(a, return_inverse=True)
    return codes.astype(np.int64)


def action_constraints(codes: np.ndarray, pairs: str = "all", graph_pairs=None):
    """The dyads (ci, I, J, sign) of the action constraints: for each pair i < j with the
    same action, +(i+1, j+1) and -(i, j).

    Parameters
    ----------
    codes : numpy.ndarray of int, shape (n - 1,)
        The actions as codes (`check_actions`).
    pairs : {"all", "neighbors"}, default "all"
        Every pair of steps with the same action, or only pairs (i, j) that are graph
        neighbours (for long sequences: all pairs of one action grow like n^2).
    graph_pairs : numpy.ndarray of int or None, default None
        With ``pairs="neighbors"``: the graph's edges as keys i * n + j (n the number of rows);
        None keeps every pair.

    Returns
    -------
    tuple of 4 numpy.ndarray
        (ci, I, J, sign): constraint numbers from 0, two dyads each, signs +1 and -1.

    Raises
    ------
    InputError
        An unknown ``pairs``, or more than ``MAX_ACTION_PAIRS`` action constraints.
    """
    check_one_of(
        pairs,
        ACTION_PAIRS,
        "action_pairs",
        "pass action_pairs='all' (every pair, as in the method).",
    )
    ii, jj = [], []
    for a in np.unique(codes):
        steps = np.nonzero(codes == a)[0]
        i, j = np.triu_indices(steps.size, k=1)
        ii.append(steps[i])
        jj.append(steps[j])
    ii = np.concatenate(ii) if ii else np.empty(0, np.int64)
    jj = np.concatenate(jj) if jj else np.empty(0, np.int64)
    if pairs == "neighbors" and graph_pairs is not None:
        keep = np.isin(ii * (codes.size + 1) + jj, graph_pairs)
        ii, jj = ii[keep], jj[keep]
    m = ii.size
    if m > MAX_ACTION_PAIRS:
        raise InputError(
            f"{m} action constraints (all pairs of steps with the same action) "
            f"are more than {MAX_ACTION_PAIRS}.",
            "pass action_pairs='neighbors' (only pairs that are graph "
            "neighbours), or embed a shorter sequence.",
        )
    ci = np.repeat(np.arange(m), 2)
    I = np.stack([ii + 1, ii], axis=1).ravel()
    J = np.stack([jj + 1, jj], axis=1).ravel()
    s = np.tile([1.0, -1.0], m)
    return ci, I, J, s


def action_steps(Y: np.ndarray, codes: np.ndarray) -> dict:
    """Per action: the mean step y_i+1 - y_i in the embedding, its length, and the spread of
    the steps around it relative to that length (0 for a pure translation). Keyed by the
    action code as a string, the same in memory and in the JSON manifest."""
    steps = np.diff(Y, axis=0)
    out = {}
    for a in np.unique(codes):
        s = steps[codes == a]
        mean = s.mean(axis=0)
        length = float(np.linalg.norm(mean))
        out[str(int(a))] = {
            "count": int(s.shape[0]),
            "mean_step": mean.tolist(),
            "length": length,
            "spread": float(np.linalg.norm(s - mean, axis=1).mean() / max(length, 1e-300)),
        }
    return out


def check_are_params(params: dict, shape: tuple) -> dict:
    """Refuse, before anything runs, `action_respecting_embedding` parameters that cannot
    apply to an input of ``shape``: the function's own checks and messages (the actions are
    checked against the rows by `check_actions`).

    Parameters
    ----------
    params : dict
        The function's keywords (those `mvu.check_exact_sdp_params` reads).
    shape : tuple of int
        The input's ``(n_samples, n_features)``.

    Returns
    -------
    dict
        ``n_neighbors``, ``tol``, ``max_iter`` and ``reg`` with their defaults resolved.

    Raises
    ------
    InputError
        A parameter out of range, or more than ``EXACT_MAX`` rows.
    """
    p = check_exact_sdp_params(params, shape, _ARE)
    check_exact_size(shape[0], _ARE, "embed a shorter (or subsampled) sequence.")
    return p


def action_respecting_embedding(
    X,
    actions,
    *,
    n_components=2,
    n_neighbors=6,
    constraints="slack",
    slack_penalty=10.0,
    action_pairs="all",
    face_reduction=True,
    formulation="dual",
    solver="clarabel",
    tol=None,
    max_iter=None,
    allow_inaccurate=False,
    metric="euclidean",
    knn_backend="auto",
    join_components=False,
    reg=1e-3,
    keep_kernel=True,
    graph=None,
    random_state=0,
    verbose=False,
    where="X",
) -> SDPEmbeddingModel:
    """Fit action respecting embedding to ``X`` (rows in temporal order) and ``actions``.

    Action respecting embedding (Bowling, Ghodsi & Wilkinson 2005): MVU's problem (`mvu`) plus
    one constraint for every pair of steps with the same action (the module docstring has
    the details).

    Parameters
    ----------
    X : array-like or dask array of shape (n_samples, n_features)
        The data rows in temporal order; n_samples at most ``EXACT_MAX``.
    actions : array-like of shape (n_samples - 1,)
        The discrete action taken between row i and row i + 1 (labels: ints or strings).
    n_components : int, default 2
        An int with 1 <= n_components < n_samples.
    n_neighbors : int, default 6
        The kNN graph's neighbours, an int with 1 <= n_neighbors < n_samples.
    constraints : {"equality", "slack"}, default "slack"
        The distance constraints: penalised violations (the action constraints stay exact),
        or exact (reports infeasibility).
    slack_penalty : float, default 10.0
        The slack variant's penalty factor (> 0), as in `mvu`.
    action_pairs : {"all", "neighbors"}, default "all"
        Every pair of steps with the same action, or only pairs (i, j) that are graph
        neighbours, for long sequences (all pairs of one action grow like n^2).
    face_reduction : bool, default True
        As in `mvu` (equality constraints, dual formulation).
    formulation : {"dual", "primal"}, default "dual"
        The SDP formulation.
    solver : {"clarabel", "scs"}, default "clarabel"
        The SDP solver.
    tol : float in (0, 1) or None, default None
        The solver's tolerance; None for 1e-7 (Clarabel) or 1e-6 (SCS).
    max_iter : int or None, default None
        The solver's iteration limit; None for 200 (Clarabel) or 100 000 (SCS).
    allow_inaccurate : bool, default False
        Accept the solver status "optimal_inaccurate" (with a warning) instead of raising
        `SolverError`.
    metric : str, default "euclidean"
        The kNN graph's metric.
    knn_backend : {"auto", "exact", "nndescent", "partitioned"}, default "auto"
        The kNN graph's backend.
    join_components : bool, default False
        Join a disconnected kNN graph by its shortest edges (else refused).
    reg : float, default 1e-3
        > 0, the ridge of the reconstruction weights that place new points.
    keep_kernel : bool, default True
        Keep the n x n kernel K in the model.
    graph : KNNGraph or None, default None
        A `KNNGraph` of X already built; else one is built with ``n_neighbors``, ``metric``
        and ``knn_backend``.
    random_state : int, numpy Generator or None, default 0
        Seeds the kNN graph.
    verbose : bool, default False
        Passed to the SDP solver (its own log).
    where : str, default "X"
        The name of the input in error messages.

    Returns
    -------
    SDPEmbeddingModel
        The fitted model; ``info`` adds the action constraints' count and largest violation
        and, per action, its mean step in the embedding (``action_steps``).

    Raises
    ------
    InputError
        ``X`` is not a finite 2-D numeric array; bad ``actions`` (`check_actions`);
        n_samples above ``EXACT_MAX``; a parameter out of range; more than
        ``MAX_ACTION_PAIRS`` action constraints; a ``graph`` of another number of rows.
    DisconnectedGraphError
        The kNN graph has more than one component and ``join_components`` is False.
    InfeasibleError
        The SDP is infeasible (use ``constraints="slack"``).
    SolverError
        The SDP solver did not reach "optimal" (unless ``allow_inaccurate``).
    """
    params = dict(locals())  # the keywords as given, read by the checks, graph and solver
    X = check_array(params.pop("X"), method=_ARE, where=where)
    n = X.shape[0]
    codes = check_actions(actions, n)
    fit, (I, J, d) = SDPFit.start(X, params, check_are_params, _ARE)
    extra = action_constraints(codes, action_pairs, graph_pairs=I * n + J)
    K, info = distance_sdp(n, I, J, d**2, extra=extra, **fit.solver_keywords())
    Y, lam, kinfo = kernel_embedding(K, int(n_components), fit.method)
    Y = Y.astype(X.dtype)
    act = _action_violation(K, extra)
    return fit.exact_model(
        "are",
        Y,
        lam,
        K,
        info,
        kinfo,
        n_edges=int(I.size),
        n_action_constraints=int(extra[0].size // 2),
        n_actions=int(codes.max()) + 1 if codes.size else 0,
        max_action_violation_over_mean=act / float(np.mean(d**2)),
        action_steps=action_steps(Y, codes),
    )


def _action_violation(K: np.ndarray, extra) -> float:
    ci, I, J, s = extra
    if ci.size == 0:
        return 0.0
    val = s * (K[I, I] + K[J, J] - 2 * K[I, J])
    return float(np.abs(np.bincount(ci, weights=val)).max())


class ActionRespectingEmbedding(SDPEstimator):
    """Action respecting embedding (Bowling et al. 2005): ``fit(X, actions)`` with X in
    temporal order and ``actions`` of length n - 1. See `action_respecting_embedding` for the
    parameters."""

    # scikit-learn's checks call fit(X, y) with n targets, where this fit takes the n - 1
    # actions between consecutive rows: they cannot run (tests/test_mvu.py checks ARE)
    _check_params = ()
    _check_not_run = (
        "fit's second argument is the n - 1 actions between consecutive rows, "
        "where the checks pass n targets"
    )

    def __init__(
        self,
        n_components=2,
        *,
        n_neighbors=6,
        constraints="slack",
        slack_penalty=10.0,
        action_pairs="all",
        face_reduction=True,
        formulation="dual",
        solver="clarabel",
        tol=None,
        max_iter=None,
        allow_inaccurate=False,
        metric="euclidean",
        knn_backend="auto",
        join_components=False,
        reg=1e-3,
        random_state=0,
    ):
        self._keep_params(locals())

    def fit(self, X, actions=None):
        X = check_array(X, method=_ARE)
        model = action_respecting_embedding(X, actions, **self.get_params())
        self.action_steps_ = model.info["action_steps"]
        return self._set(model, X)

    def fit_transform(self, X, actions=None):
        return self.fit(X, actions).embedding_


METHOD_SPECS = (
    MethodSpec(
        "are",
        ActionRespectingEmbedding,
        action_respecting_embedding,
        takes="dense, with `--actions`",
        docs=DOCS_SDP,
        flow_adds=KNN_STAGE,
        not_in_estimator={"keep_kernel": "the estimator keeps K", **SDP_FUNCTION_ONLY},
        model=SDPEmbeddingModel,
        check=check_are_params,
        knn_graph="connected",
        second_input="actions",
    ),
)
