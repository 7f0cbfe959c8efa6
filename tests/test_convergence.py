"""Convergence is part of the result: every iterative solve leaves a record, a solve that stops
short is retried with a robust solver or refused with `SolverError`, the records travel with
the model (estimator, function-form model, saved run store, manifest summary), and the SDP
solves report progress while they run."""

from __future__ import annotations

import importlib
import json
import re
import warnings

import numpy as np
import pytest
import scipy.sparse as sp

from dimred_dask import LocallyLinearEmbedding, lle, mvu
from dimred_dask._progress import reporting
from dimred_dask.errors import ConvergenceWarning, SolverError
from dimred_dask.graphs import graph_csr, knn_graph, laplacian
from dimred_dask.linalg import (
    bottom_eigsh,
    bottom_eigsh_gram,
    bottom_eigsh_lobpcg,
    nystrom_map,
    nystrom_top_eigh,
    randomized_eigh,
    top_eigh,
)
from dimred_dask.linalg.convergence import RECORD_KEYS, solve_with_fallbacks
from dimred_dask.metrics import trustworthiness
from dimred_dask.pairwise import check_kernel

from .sdp_data import curved_sheet, swiss_roll

lle_module = importlib.import_module("dimred_dask.methods.lle")  # the name `lle` is the function

# The LLE case: a 3-D swiss roll mapped into 10-D by a random orthonormal 3 x 10 map. With
# more than DENSE_MAX_SPARSE (3000) rows of more than FACTORIZE_MAX_DIM (8) columns, "auto"
# picks LOBPCG on products with I - W, which stops unconverged there (measured at n = 3100:
# residual 1.1e-5 after its 1000 iterations against the tolerance 1.2e-8; trustworthiness
# 0.848 against 0.991 with shift-invert ARPACK).
LLE_ROWS = 3100
# Trustworthiness of the retried fit against ARPACK's own: the retry ends on the same solver,
# so the two agree to rounding (measured: equal to 1e-15); 0.002 is far below the gap left by
# the unconverged LOBPCG (0.14).
TRUST_GAP = 0.002


def _records_ok(records):
    for r in records:
        assert set(RECORD_KEYS) <= set(r)
        json.dumps(r)  # JSON-able as it is


def _roll_10d(n: int, seed: int = 0):
    X3, _ = swiss_roll(n, height=21.0, seed=seed)
    q, _ = np.linalg.qr(np.random.default_rng(seed).standard_normal((10, 3)))
    return X3 @ q.T


def _laplacian(n=600, seed=0):
    X = np.random.default_rng(seed).standard_normal((n, 3))
    L, _ = laplacian(graph_csr(knn_graph(X, 8)), normed=True)
    return L


def _lle_operator(X, k=10):
    from dimred_dask.graphs import reconstruction_weights

    g = knn_graph(X, k)
    return lle_module.lle_operator(reconstruction_weights(X, g, 1e-3), g.indices)


# --------------------------------------------------------------------------- solver records


def test_dense_randomized_and_lanczos_records():
    rng = np.random.default_rng(0)
    Q, _ = np.linalg.qr(rng.standard_normal((200, 200)))
    A = (Q * np.r_[10.0, 8.0, 6.0, np.linspace(1, 0.1, 197)]) @ Q.T
    for solver in ("dense", "randomized", "lanczos"):
        rec = top_eigh(A, 3, solver=solver).convergence
        _records_ok([rec])
        assert rec["converged"] and rec["handled_by"] is None
    rand = top_eigh(A, 3, solver="randomized").convergence
    assert rand["status"] == "completed" and rand["passes"] == 5 and rand["residual"] < 1e-3
    assert top_eigh(A, 3, solver="lanczos").convergence["matvecs"] > 0
    pca = randomized_eigh(rng.standard_normal((500, 80)) * np.arange(1, 81), 3)
    assert pca.convergence["status"] == "completed" and pca.convergence["passes"] == 6
    # 20 features: two Krylov blocks of 13 span all of them, so the third pass is the last
    small = randomized_eigh(rng.standard_normal((500, 20)) * np.arange(1, 21), 3)
    assert small.convergence["passes"] == 3 and small.convergence["residual"] < 1e-12


def test_sparse_solver_records_converged_and_stopped_short():
    L = _laplacian()
    for solver in ("dense", "arpack", "lobpcg"):
        rec = bottom_eigsh(L, 4, solver=solver).convergence
        _records_ok([rec])
        assert rec["converged"], rec
    with pytest.warns(ConvergenceWarning):
        rec = bottom_eigsh(L, 4, solver="lobpcg", maxiter=2).convergence
    assert not rec["converged"] and rec["residual"] > rec["tol"] == 1e-8
    assert rec["iterations"] <= 2 and "maxiter=2" in rec["status"]


def test_lle_solver_records_converged_and_stopped_short():
    A = _lle_operator(_roll_10d(800))
    ones = np.ones(A.shape[0])
    ok = bottom_eigsh_gram(A, 2, null=ones).convergence
    assert ok["converged"] and ok["residual"] <= ok["tol"] and ok["iterations"] >= 1
    with pytest.warns(ConvergenceWarning):
        short = bottom_eigsh_gram(A, 2, null=ones, maxiter=1).convergence
    assert not short["converged"] and short["iterations"] == 1
    with pytest.warns(ConvergenceWarning):
        lob = bottom_eigsh_lobpcg(A, 2, null=ones, maxiter=3).convergence
    _records_ok([ok, short, lob])
    assert not lob["converged"] and lob["iterations"] == 3 and lob["residual"] > lob["tol"]


def test_nystrom_record_reports_a_tolerance_not_reached():
    X = np.random.default_rng(0).standard_normal((400, 5))
    nmap = nystrom_map(X[:60], check_kernel("gaussian", 5))
    *_, info = nystrom_top_eigh(X, nmap, 2, n_iter=0, tol=1e-12)
    assert not info["record"]["converged"] and info["record"]["iterations"] == 1
    *_, info = nystrom_top_eigh(X, nmap, 2)  # tol 0: the passes are the method's
    assert info["record"]["converged"]


# --------------------------------------------------------------------------- retries


def test_lle_default_solver_retries_and_matches_arpack():
    X = _roll_10d(LLE_ROWS)
    assert lle_module.choose_lle_solver("auto", LLE_ROWS, 10) == "lobpcg"
    with pytest.warns(ConvergenceWarning, match="retried with arpack"):
        est = LocallyLinearEmbedding(2, n_neighbors=10).fit(X)
    first, second = est.convergence_
    _records_ok(est.convergence_)
    assert first["solver"] == "lobpcg-jacobi" and not first["converged"]
    assert first["handled_by"] == "retried with arpack"
    assert first["residual"] > first["tol"] and first["iterations"] == 1000
    assert second["solver"].startswith("arpack") and second["converged"]
    reference = lle(X, n_neighbors=10, eigen_solver="arpack")
    assert reference.convergence[0]["converged"] and len(reference.convergence) == 1
    t_auto = trustworthiness(X, est.embedding_, 10)
    t_arpack = trustworthiness(X, reference.embedding, 10)
    assert abs(t_auto - t_arpack) <= TRUST_GAP


def test_no_robust_alternative_raises_solver_error(monkeypatch):
    # above ARPACK_MAX the factored solver has no fallback: made small here
    monkeypatch.setattr(lle_module, "DENSE_MAX_SPARSE", 100)
    monkeypatch.setattr(lle_module, "ARPACK_MAX", 100)
    X = _roll_10d(400)
    with pytest.raises(SolverError, match=r"residual .* against the tolerance") as err:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            lle(X, n_neighbors=10, eigen_solver="factored", max_iter=1, tol=1e-12)
    msg = str(err.value)
    assert "factored" in msg and "after 1 iterations" in msg and "Fix: raise max_iter" in msg
    assert len(err.value.convergence) == 1 and not err.value.convergence[0]["converged"]


def test_every_attempt_is_in_the_error_when_all_fail():
    def attempt(solver):
        return None, {
            "step": "s",
            "solver": solver,
            "converged": False,
            "iterations": 5,
            "residual": 1e-3,
            "tol": 1e-8,
            "status": "stopped",
            "handled_by": None,
        }

    with pytest.raises(SolverError, match="lobpcg .* tried after|arpack") as err:
        solve_with_fallbacks(
            attempt, ["lobpcg", "arpack"], step="bottom", method="M", fix="do this"
        )
    assert "residual 1.0e-03 against the tolerance 1.0e-08" in str(err.value)
    assert [r["handled_by"] for r in err.value.convergence] == ["retried with arpack", None]


# --------------------------------------------------------------------------- SDP


def test_sdp_status_record_and_refusal():
    X, _ = swiss_roll(60, seed=0)
    model = mvu(X, n_neighbors=6)
    sdp, eig = model.convergence
    _records_ok(model.convergence)
    assert sdp["status"] == "optimal" and sdp["converged"] and sdp["clarabel_status"] == "Solved"
    assert sdp["iterations"] > 0 and sdp["residual"] <= sdp["tol"]
    assert {"gap_rel", "gap_abs", "res_primal", "res_dual"} <= set(sdp)
    assert eig["converged"]
    with pytest.raises(SolverError, match="after 3 iterations") as err:
        mvu(X, n_neighbors=6, max_iter=3)
    assert "Fix: raise max_iter" in str(err.value)
    recs = err.value.convergence
    assert [r["handled_by"] for r in recs] == ["solved again in the reversed order", None]


def test_inaccurate_status_is_refused_or_accepted_and_recorded():
    X, _ = curved_sheet(40, seed=0)  # the primal form stops at "optimal_inaccurate" here
    with pytest.raises(SolverError, match="optimal_inaccurate"):
        mvu(X, n_neighbors=4, formulation="primal")
    with pytest.warns(ConvergenceWarning, match="optimal_inaccurate"):
        model = mvu(X, n_neighbors=4, formulation="primal", allow_inaccurate=True)
    rec = model.convergence[0]
    assert rec["status"] == "optimal_inaccurate" and not rec["converged"]
    assert rec["handled_by"] == "accepted (allow_inaccurate=True)"


def test_progress_reports_iterations_during_the_sdp_solve():
    calls = []
    X, _ = swiss_roll(60, seed=0)
    with reporting(lambda stage, done, total: calls.append((stage, done, total))):
        model = mvu(X, n_neighbors=6)
    stages = [c[0] for c in calls]
    assert "MVU SDP: canonicalising (cvxpy)" in stages and "MVU SDP: Clarabel set-up" in stages
    its = [(s, d, t) for s, d, t in calls if "Clarabel iteration " in s]
    numbers = [int(s.split("Clarabel iteration ")[1].split(",")[0]) for s, _, _ in its[:-1]]
    assert numbers == list(range(len(numbers))) and numbers[-1] == model.info["iterations"]
    shares = [d / t for _, d, t in its]  # the way of the residual to the tolerance, in decades
    assert all(0 <= x < 1 for x in shares[:-1]) and shares[-1] == 1.0
    assert max(shares[:-1]) > 0.5  # most of the way before it stopped
    assert re.search(r"stops at \de-\d\d, at most 200 iterations\)$", its[0][0]), its[0][0]


# --------------------------------------------------------------------------- fit results


def test_records_travel_with_the_model_through_the_flow_adapters(tmp_path):
    from dimred_dask.io import RunStore
    from flows.methods import METHODS

    X = swiss_roll(300, seed=0)[0]
    with pytest.warns(ConvergenceWarning, match="retried with dense"):
        stopped = lle(X, n_neighbors=10, eigen_solver="lobpcg", max_iter=20)
    cases = {"lle": stopped, "mvu": mvu(X[:60], n_neighbors=6)}
    from dimred_dask import pca

    cases["pca"] = pca(X, n_components=2)
    for name, model in cases.items():
        adapter = METHODS[name]
        store = RunStore(str(tmp_path / name))
        store.prepare("new", {"method": name})
        adapter.save(model, store)
        loaded = adapter.load(store)
        assert loaded.convergence == model.convergence
        assert adapter.summary(loaded)["convergence"] == model.convergence
    assert cases["pca"].convergence == []  # exact covariance PCA: nothing iterative
    assert [r["handled_by"] for r in cases["lle"].convergence] == ["retried with dense", None]


def test_umap_spectral_init_fallback_is_recorded(monkeypatch):
    from dimred_dask.methods import _umap_init

    monkeypatch.setattr(_umap_init, "SPECTRAL_MAXITER", 1)
    W = graph_csr(knn_graph(np.random.default_rng(0).standard_normal((400, 3)), 8))
    W = sp.csr_matrix((W + W.T) / 2)

    class Graph:
        def to_scipy(self):
            return W

    pca_layout = np.random.default_rng(1).standard_normal((400, 2))
    with pytest.warns(ConvergenceWarning, match="PCA initialisation"):
        layout, how, records = _umap_init.spectral_layout(Graph(), 2, pca_layout)
    assert how.startswith("pca") and np.array_equal(layout, pca_layout)
    assert records[0]["handled_by"] == "fell back to PCA initialisation"
    assert not records[0]["converged"]
