"""Maximum variance unfolding, its slack variant, landmark MVU and action respecting embedding:
the unrolled coordinate recovered, the SDP's constraints held to the solver's tolerance, K
centred and PSD, the formulations agreeing, bad input refused with a typed error."""

from __future__ import annotations

import importlib
import warnings

import numpy as np
import pytest
from scipy.spatial import procrustes
from scipy.stats import spearmanr

from dimred_dask import (
    ActionRespectingEmbedding,
    InfeasibleError,
    LandmarkMVU,
    MaximumVarianceUnfolding,
    action_respecting_embedding,
    landmark_mvu,
    mvu,
)
from dimred_dask.errors import DimredWarning, DisconnectedGraphError, InputError
from dimred_dask.graphs import KNNGraph

from .sdp_data import curved_sheet, robot_walk, swiss_roll

SPEARMAN_MIN = 0.99  # the bar for the first coordinate against the unrolled one
SOLVER_TOL = 1e-7  # Clarabel's tol_gap_abs = tol_gap_rel = tol_feas (the method's default)
# Clarabel bounds residuals relative to the size of the iterates: a squared edge length
# K_ii + K_jj - 2 K_ij is met to ~tol x max K_ii (K in units of the mean squared edge); 10 is
# headroom for its equilibration scaling. Measured: 7.5e-5 of the mean against a bound 2.3e-3.
VIOLATION_FACTOR = 10.0
CENTRING_TOL = 1e-9  # |sum K| / tr K: the Haar basis makes sum K = 0 exact up to rounding
PSD_TOL = 1e-6  # smallest eigenvalue of K over its largest: the solver's PSD cone, to ~tol
LANDMARK_DISPARITY = 0.02  # Procrustes disparity landmark (m = 20) vs exact MVU; measured 3e-4
# landmark MVU on 2000 points, NumPy vs dask input on worker processes: the same sums in
# another order, through an SDP solved to 1e-7
DASK_AGREEMENT = 1e-4
STEP_TOL = 1e-4  # spread of one action's squared step lengths in K, relative
# back vs forward step length, relative: revisited places are seen with fresh pixel noise
# (0.01), so the two passes differ slightly; measured 0.8 % in K, 0.1 % along the first axis
EQUAL_TOL = 0.02


def _solver_bound(K, d2_mean):
    """What "held to the solver's tolerance" means for a squared distance, of the mean."""
    return VIOLATION_FACTOR * SOLVER_TOL * float(np.diag(K).max()) / d2_mean


def _check_kernel(model, d2_mean):
    info = model.info
    assert info["status"] == "optimal"
    K = model.kernel
    assert info["max_violation_over_mean"] <= _solver_bound(K, d2_mean)
    assert abs(K.sum()) <= CENTRING_TOL * np.trace(K)
    assert info["centring_ratio"] <= CENTRING_TOL
    assert info["min_eigenvalue_ratio"] >= -PSD_TOL


def _mean_d2(X, k):
    from dimred_dask.graphs import edge_list, knn_graph

    _, _, d = edge_list(knn_graph(X, k))
    return float(np.mean(d**2))


def test_mvu_unrolls_the_swiss_roll():
    X, t = swiss_roll(150, height=8.0, seed=0)
    model = mvu(X, n_neighbors=5)
    _check_kernel(model, _mean_d2(X, 5))
    assert abs(spearmanr(model.embedding[:, 0], t)[0]) >= SPEARMAN_MIN
    # the unrolled strip is long: the first eigenvalue carries almost all the variance
    assert model.info["explained_variance_ratio"][0] > 0.9
    assert model.info["dependencies"] > 0  # 5-cliques of 3-D points: the face was used


def test_components_past_the_kernels_rank_are_reported():
    """Asking for more components than the unfolded data spans gives columns of zero or
    rounding noise: a warning says so, as MDS and kernel PCA do; two components do not."""
    X, _ = swiss_roll(20, height=8.0, seed=0)
    with pytest.warns(DimredWarning, match=r"MVU: \d+ of the 15 requested .* rank") as record:
        model = mvu(X, n_components=15, n_neighbors=5, join_components=True)
    rank = model.info["rank"]
    assert rank < 15 and f"of the learned kernel ({rank};" in str(record[0].message)
    with warnings.catch_warnings():
        warnings.simplefilter("error", DimredWarning)
        mvu(X, n_components=2, n_neighbors=5, join_components=True)


def test_mvu_flattens_a_curved_sheet_and_transforms_new_points():
    X, u = curved_sheet(120, seed=0)
    est = MaximumVarianceUnfolding(2, n_neighbors=5)
    Y = est.fit_transform(X)
    _check_kernel(est._model, _mean_d2(X, 5))
    assert abs(spearmanr(Y[:, 0], u)[0]) >= SPEARMAN_MIN
    # flattened: the two kept eigenvalues hold the variance, the third is tiny
    assert sum(est.info_["explained_variance_ratio"]) > 0.99
    X_new, u_new = curved_sheet(30, seed=7)
    Z = est.transform(X_new)
    assert Z.shape == (30, 2) and abs(spearmanr(Z[:, 0], u_new)[0]) >= SPEARMAN_MIN


def test_primal_and_dual_formulations_agree():
    X, _ = curved_sheet(40, seed=0)
    dual = mvu(X, n_neighbors=4)
    # the primal (K a dense PSD variable) is the slow, degenerate form: Clarabel stops at
    # "optimal_inaccurate" on it, which is exactly why the dual form is the default
    with pytest.warns(UserWarning, match="optimal_inaccurate"):
        primal = mvu(X, n_neighbors=4, formulation="primal", allow_inaccurate=True)
    assert dual.info["status"] == "optimal"
    assert abs(primal.info["trace"] - dual.info["trace"]) <= 1e-3 * dual.info["trace"]
    assert procrustes(dual.embedding, primal.embedding)[2] < 1e-3


def test_slack_variant_is_exact_on_a_clean_graph_and_solves_an_infeasible_one():
    X, t = swiss_roll(150, height=8.0, extra_dims=7, noise=0.05, seed=2)
    exact = mvu(X, n_neighbors=6)
    slack = mvu(X, n_neighbors=6, constraints="slack")
    assert slack.info["status"] == "optimal"
    # an exact penalty: the clean graph's multipliers stay below nu, nothing gives
    assert abs(slack.info["trace"] - exact.info["trace"]) <= 1e-4 * exact.info["trace"]
    assert slack.info["max_violation_over_mean"] < 1e-3
    # the same graph with its distances perturbed by 20 %: no Euclidean configuration
    from dimred_dask.graphs import knn_graph

    g = knn_graph(X, 6)
    rng = np.random.default_rng(0)
    noisy = KNNGraph(g.indices, g.distances * rng.uniform(0.8, 1.2, g.distances.shape))
    with pytest.raises(InfeasibleError, match="constraints='slack'"):
        mvu(X, n_neighbors=6, graph=noisy)
    model = mvu(X, n_neighbors=6, graph=noisy, constraints="slack")
    assert model.info["status"] == "optimal" and model.info["max_violation_over_mean"] > 1e-3
    assert abs(spearmanr(model.embedding[:, 0], t)[0]) >= SPEARMAN_MIN


def test_infeasible_cycle_is_reported_by_the_solver():
    # a 4-cycle with sides 1, 1, 1, 5: no configuration in any dimension (5 > 1 + 1 + 1);
    # there is no clique, so it is the solver that finds it (dual unbounded)
    X = np.arange(8.0).reshape(4, 2)
    idx = np.array([[1, 3], [2, 0], [3, 1], [0, 2]])
    dist = np.array([[1.0, 5.0], [1.0, 1.0], [1.0, 1.0], [5.0, 1.0]])
    with pytest.raises(InfeasibleError, match="slack"):
        mvu(X, n_components=1, n_neighbors=2, graph=KNNGraph(idx, dist))
    ok = mvu(X, n_components=1, n_neighbors=2, graph=KNNGraph(idx, dist), constraints="slack")
    assert ok.info["status"] == "optimal"


def test_disconnected_graph_and_bad_parameters_are_refused():
    rng = np.random.default_rng(0)
    X = np.r_[rng.standard_normal((30, 3)), rng.standard_normal((20, 3)) + 100.0]
    with pytest.raises(DisconnectedGraphError, match="sizes 30, 20"):
        mvu(X, n_neighbors=4)
    with pytest.raises(DisconnectedGraphError):
        landmark_mvu(X, n_neighbors=4, n_landmarks=10)
    with pytest.raises(InputError, match="constraints"):
        mvu(X[:30], constraints="soft")
    with pytest.raises(InputError, match="n_landmarks"):
        landmark_mvu(X[:30], n_landmarks=30)
    with pytest.raises(InputError, match="solver"):
        mvu(X[:30], solver="mosek")


def test_are_recovers_the_robot_walk():
    images, actions, pos = robot_walk()  # 40 steps forward, 20 back, 64-pixel views
    est = ActionRespectingEmbedding(1, n_neighbors=4)
    Y = est.fit_transform(images, actions)[:, 0]
    assert est.solver_status_ == "optimal"
    assert abs(spearmanr(Y, pos)[0]) >= SPEARMAN_MIN
    # in the learned kernel every forward step has one length, every back step another
    # (the action constraints, held to the solver's tolerance: the distances are penalised)
    K = est.kernel_
    step2 = np.diag(K)[1:] + np.diag(K)[:-1] - 2 * np.diag(K, 1)
    fwd2, back2 = step2[:40], step2[40:]
    assert est.info_["max_action_violation_over_mean"] <= _solver_bound(K, _mean_d2(images, 4))
    assert np.ptp(fwd2) <= STEP_TOL * fwd2.mean() and np.ptp(back2) <= STEP_TOL * back2.mean()
    # equal and opposite: a back step undoes a forward step
    f_len, b_len = np.sqrt(fwd2.mean()), np.sqrt(back2.mean())
    assert abs(b_len - f_len) <= EQUAL_TOL * f_len
    fwd, back = np.diff(Y[:41]), np.diff(Y[40:])
    assert np.sign(fwd.mean()) == -np.sign(back.mean())
    assert abs(fwd.mean() + back.mean()) <= EQUAL_TOL * abs(fwd.mean())
    # nearly a translation along the first axis (measured spread 1e-3 of the step)
    assert fwd.std() <= 1e-2 * abs(fwd.mean())


def test_are_refuses_bad_actions():
    images, actions, _ = robot_walk()
    with pytest.raises(InputError, match="60 for 61 rows; found 59"):
        action_respecting_embedding(images, actions[:-1])
    with pytest.raises(InputError, match="found none"):
        action_respecting_embedding(images, None)
    with pytest.raises(InputError, match="1-D"):
        action_respecting_embedding(images, np.zeros((60, 2)))
    with pytest.raises(InputError, match="NaN"):
        action_respecting_embedding(images, np.r_[actions[:-1], np.nan].astype(float))


def test_landmark_mvu_agrees_with_exact_mvu():
    X, t = swiss_roll(150, height=8.0, seed=0)
    exact = mvu(X, n_neighbors=5)
    lm = landmark_mvu(X, n_neighbors=5, n_landmarks=20)
    assert lm.info["status"] == "optimal"
    assert procrustes(exact.embedding, lm.embedding)[2] <= LANDMARK_DISPARITY
    assert abs(spearmanr(lm.embedding[:, 0], t)[0]) >= SPEARMAN_MIN


def test_landmark_mvu_on_workers_matches_numpy(client):
    import dask.array as da

    X, t = swiss_roll(2000, height=21.0, seed=1)
    ref = LandmarkMVU(2, n_landmarks=20).fit(X)
    assert abs(spearmanr(ref.embedding_[:, 0], t)[0]) >= SPEARMAN_MIN
    Xd = da.from_array(X, chunks=(500, 3))
    # small edge chunks: the normal matrices are summed over several tasks on the workers,
    # two at a time (a tree of combining tasks)
    from dimred_dask.graphs import landmark

    old = landmark.EDGE_CHUNK, landmark.FAN_IN
    landmark.EDGE_CHUNK, landmark.FAN_IN = 2000, 2
    try:
        est = LandmarkMVU(2, n_landmarks=20).fit(Xd)
    finally:
        landmark.EDGE_CHUNK, landmark.FAN_IN = old
    Y = est.embedding_
    assert isinstance(Y, da.Array)
    np.testing.assert_allclose(
        Y.compute(), ref.embedding_, atol=DASK_AGREEMENT * np.abs(ref.embedding_).max()
    )


def test_landmark_mvu_above_the_reconstruction_limit_solves_its_basis_on_the_workers(
    client, monkeypatch
):
    """basis="auto" past `RECONSTRUCTION_MAX` rows: the Laplacian basis, built and solved on
    the workers (past ARPACK_MAX), the edge sums made there from Q's blocks: the embedding
    of the same basis solved in this process (LAPACK)."""
    from dimred_dask.linalg import sparse_eigen

    lm_module = importlib.import_module("dimred_dask.methods.landmark_mvu")

    X, t = swiss_roll(2000, height=21.0, seed=1)
    ref = landmark_mvu(X, n_landmarks=12, basis="laplacian")
    assert ref.info["convergence"][0]["solver"] == "dense"
    monkeypatch.setattr(lm_module, "RECONSTRUCTION_MAX", 1000)
    monkeypatch.setattr(sparse_eigen, "DENSE_MAX_SPARSE", 500)
    monkeypatch.setattr(sparse_eigen, "ARPACK_MAX", 1000)
    got = landmark_mvu(X, n_landmarks=12)
    assert got.info["basis"] == "laplacian"
    assert got.info["convergence"][0]["solver"] == "lobpcg-workers"
    assert got.info["status"] == ref.info["status"] == "optimal"
    assert procrustes(ref.embedding, got.embedding)[2] <= DASK_AGREEMENT
    for key in ("max_relative_violation", "mean_relative_violation"):
        assert got.info[key] == pytest.approx(ref.info[key], rel=1e-3)


def test_an_sdp_whose_dense_system_would_not_fit_is_refused_before_the_solver(monkeypatch):
    """Action respecting embedding with every pair of same-action steps ties most pairs of
    rows together, so Clarabel's system is dense: 300 rows need about 120 GiB (the process
    was killed for memory before). It is refused with the estimate and the ways out; the
    sparse choice (action_pairs="neighbors") is not, and neither is a dense system that
    fits."""
    import dimred_dask._validation as validation
    import dimred_dask.linalg.sdp as sdp

    t = np.arange(300)
    noise = 0.01 * np.random.default_rng(0).standard_normal(300)
    X = np.c_[np.cos(t / 20), np.sin(t / 20), noise]
    actions = t[:-1] % 2
    with pytest.raises(InputError, match=r"dense 299 x 299 .* about 119.9 GiB") as err:
        action_respecting_embedding(X, actions)
    assert "action_pairs='neighbors'" in str(err.value) and "solver='scs'" in str(err.value)
    sdp._check_dense_cone(99, "dual", "side 99")  # 1.5 GiB: passes where that is available
    monkeypatch.setattr(validation, "MEMORY_SHARE", 1e-9)  # nothing fits: only the dense ones fail
    with pytest.raises(InputError, match="formulation='dual'"):
        sdp._check_dense_cone(10, "primal", "primal")
    model = action_respecting_embedding(X[:120], actions[:119], action_pairs="neighbors")
    assert model.embedding.shape == (120, 2)
