"""LLE's operator I - W built on the Dask workers from a kNN graph in a run's store
(dimred_dask.graphs.worker_lle): the in-process A and A^T entry for entry, the same eigenpairs
as LAPACK through the worker-side LOBPCG, and LLE through the flow with the graph and the
training rows left in the store."""

from __future__ import annotations

import dask.array as da
import numpy as np
import pytest
import scipy.sparse as sp

from dimred_dask import LocallyLinearEmbedding, lle
from dimred_dask.graphs import knn_graph, reconstruction_weights
from dimred_dask.graphs.worker_lle import lle_operator_on_workers
from dimred_dask.io import StoredRows, open_output, save_array
from dimred_dask.methods.lle import lle_operator
from flows.methods import load_model

from .test_worker_laplacian import _stored


def _wide(n=2400, d=20, seed=0):
    """Wide data of 5 overlapping groups: LOBPCG's kind of LLE problem (not a manifold)."""
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((n, d)) + 0.5 * rng.integers(0, 5, n)[:, None]).astype(np.float32)


def _bandwidth(M) -> int:
    coo = sp.coo_matrix(M)
    return int(np.abs(coo.row - coo.col).max())


@pytest.fixture(scope="module")
def wide_graph():
    X = _wide()
    return X, knn_graph(X, 10, backend="exact")


@pytest.fixture(scope="module")
def solve_graph():
    """Half the rows for the solves, each of LOBPCG's iterations a round of tasks: 311
    iterations to tol 1e-8 here (441 to 1e-10), whose eigenvalues are within 1e-11 of
    LAPACK's and vectors within 3e-6."""
    X = _wide(1200)
    return X, knn_graph(X, 10, backend="exact")


@pytest.mark.parametrize("reorder", [True, False])
def test_the_operator_and_its_transpose_are_the_in_process_ones(
    client, wide_graph, tmp_path, reorder
):
    X, g = wide_graph
    A0 = lle_operator(reconstruction_weights(X, g, 1e-3), g.indices)
    source = _stored(g, tmp_path / "run")
    A, first = lle_operator_on_workers(
        source, da.from_array(X, chunks=(700, X.shape[1])), n_neighbors=10, reorder=reorder
    )
    assert A.kind == "gram" and len(A.bounds) == 2
    assert abs(A.gather(client) - A0).max() == 0.0  # in X's numbering either way
    perm = np.arange(X.shape[0])
    if reorder:  # the blocks hold A in reverse Cuthill-McKee order, their rows numbered
        perm = np.concatenate(client.gather(A.order))
        assert sorted(perm) == list(range(X.shape[0])) and (perm != np.arange(len(perm))).any()
        held = sp.vstack(client.gather(A.rows)).tocsr()
        assert abs(held - A0[perm][:, perm]).max() == 0.0
        # the order is the reverse Cuthill-McKee order of the graph's symmetric structure
        from scipy.sparse.csgraph import reverse_cuthill_mckee

        n = X.shape[0]
        G = sp.csr_matrix(
            (np.ones(g.indices.size), (np.repeat(np.arange(n), 10), g.indices.ravel())),
            shape=(n, n),
        )
        np.testing.assert_array_equal(
            perm, reverse_cuthill_mckee((G + G.T).tocsr(), symmetric_mode=True)
        )
        assert _bandwidth(held) < _bandwidth(A0)
    At = sp.vstack(client.gather(A.rows_t)).tocsr()
    assert abs(At - A0.T[perm][:, perm]).max() == 0.0
    assert first == pytest.approx(np.sum((A0 @ np.ones(X.shape[0])) ** 2) / X.shape[0], abs=1e-25)


def test_lle_on_a_stored_graph_solves_on_the_workers(client, solve_graph, tmp_path):
    X, g = solve_graph
    ref = lle(X, graph=g, eigen_solver="dense")
    source = _stored(g, tmp_path / "run")
    Xd = da.from_array(X, chunks=(250, X.shape[1]))
    ours = lle(Xd, graph=source, eigen_solver="lobpcg-workers", tol=1e-8)
    assert ours.solver == "lobpcg-workers"
    np.testing.assert_allclose(ours.eigenvalues, ref.eigenvalues, rtol=1e-6)
    signs = np.sign(np.sum(ours.embedding * ref.embedding, axis=0))
    np.testing.assert_allclose(ours.embedding * signs, ref.embedding, atol=1e-5)
    in_memory = lle(X, graph=source, eigen_solver="dense")  # another solver: read whole
    np.testing.assert_array_equal(in_memory.embedding, ref.embedding)


def test_a_worker_killed_during_the_solve_of_the_ordered_blocks(wide_graph, tmp_path):
    """The blocks in reverse Cuthill-McKee order (and the order itself) lost with a worker
    are made again by their tasks: the answer is the undisturbed one, in X's numbering."""
    from distributed import Client

    from dimred_dask.errors import ConvergenceWarning
    from dimred_dask.linalg.worker_lobpcg import MAX_RESTARTS, bottom_eigsh_lobpcg_workers

    from .test_worker_lobpcg import _kill_one_worker_at, cluster_to_kill

    X, g = wide_graph
    source = _stored(g, tmp_path / "run")
    with cluster_to_kill() as cluster, Client(cluster) as c:
        A, _ = lle_operator_on_workers(source, X, n_neighbors=10, client=c)
        kw = dict(kind="gram", tol=1e-14, maxiter=15, client=c)
        with pytest.warns(ConvergenceWarning):  # 15 iterations: not converged, enough
            calm = bottom_eigsh_lobpcg_workers(A, 2, **kw)
            stormy = bottom_eigsh_lobpcg_workers(A, 2, progress=_kill_one_worker_at(c, 4), **kw)
        A0 = A.gather(c)
    assert 1 <= stormy.info["restarts"] <= MAX_RESTARTS, stormy.info
    assert calm.info["reordered"] and calm.info["restarts"] == 0
    np.testing.assert_array_equal(stormy.vectors, calm.vectors)
    # the vectors are in X's numbering: their Rayleigh quotients on the unpermuted M
    v = calm.vectors
    quotients = np.sum((A0 @ v) ** 2, axis=0) / np.sum(v**2, axis=0)
    np.testing.assert_allclose(quotients, calm.values, rtol=1e-8)


def test_lle_through_the_flow_on_the_workers(client, prefect_api, tmp_path):
    from flows.embed import embed

    X = _wide(800, seed=3)
    uri = str(tmp_path / "wide.zarr")
    save_array(X, uri, chunks=(400, X.shape[1]))
    # tol 1e-7: 221 iterations (347 to 1e-10), vectors within 1e-5 of LAPACK's
    params = {"n_neighbors": 10, "eigen_solver": "lobpcg-workers", "tol": 1e-7}
    m = embed(uri, str(tmp_path / "lle"), method="lle", params=params)
    assert m["model"]["solver"] == "lobpcg-workers"
    Y = open_output(str(tmp_path / "lle")).read_array("embedding").astype(np.float64)
    ref = LocallyLinearEmbedding(2, n_neighbors=10, eigen_solver="dense").fit(X)
    want = ref.embedding_.astype(np.float64)
    signs = np.sign(np.sum(Y * want, axis=0))
    np.testing.assert_allclose(Y * signs, want, atol=1e-4 * np.abs(want).max())
    loaded = load_model(str(tmp_path / "lle"))
    assert isinstance(loaded.X_fit, StoredRows)  # the training rows stayed in the store
    new = X[:30] + np.float32(0.1)
    np.testing.assert_allclose(
        loaded.transform(new).astype(np.float64) * signs,
        ref.transform(new).astype(np.float64),
        atol=1e-4 * np.abs(want).max(),
    )


def test_a_worker_solve_that_stops_short_is_retried_on_one_worker(client, solve_graph, tmp_path):
    """A worker-side LOBPCG that stops short is retried by the robust solver of the size on
    the operator assembled on one worker (not in the caller's process): both solves are in
    the record, and the answer is the in-process dense one."""
    from dimred_dask.errors import ConvergenceWarning

    X, g = solve_graph
    ref = lle(X, graph=g, eigen_solver="dense")
    source = _stored(g, tmp_path / "run")
    Xd = da.from_array(X, chunks=(250, X.shape[1]))
    with pytest.warns(ConvergenceWarning, match="retried with dense, which converged"):
        ours = lle(Xd, graph=source, eigen_solver="lobpcg-workers", tol=1e-8, max_iter=3)
    first, second = ours.info["convergence"][-2:]
    assert first["solver"] == "lobpcg-workers" and not first["converged"]
    assert second["solver"] == "dense" and second["converged"]
    assert ours.solver == "dense"
    np.testing.assert_allclose(ours.eigenvalues, ref.eigenvalues, rtol=1e-9)
    signs = np.sign(np.sum(ours.embedding * ref.embedding, axis=0))
    np.testing.assert_allclose(ours.embedding * signs, ref.embedding, atol=1e-9)


def test_a_fallback_that_would_not_fit_on_a_worker_is_not_started(
    client, solve_graph, tmp_path, monkeypatch
):
    """When the operator assembled on one worker and the robust solver's memory would
    exceed the share of a worker's limit allowed to one task, the fallback is not started
    (no worker is run out of memory): the refusal says so, with the estimate, and its fix
    names more worker memory beside the solver's own parameters."""
    from dimred_dask.errors import SolverError
    from dimred_dask.linalg import worker_lobpcg

    X, g = solve_graph
    source = _stored(g, tmp_path / "run")
    Xd = da.from_array(X, chunks=(250, X.shape[1]))
    monkeypatch.setattr(worker_lobpcg, "MEMORY_SHARE", 1e-6)  # ~4 KiB of a few GiB
    with pytest.raises(SolverError, match="not run: the operator assembled on one worker") as e:
        lle(Xd, graph=source, eigen_solver="lobpcg-workers", tol=1e-8, max_iter=3)
    assert "GiB there, more than 0% of the smallest worker's memory limit" in e.value.problem
    assert "raise max_iter or loosen tol" in e.value.fix and "more memory" in e.value.fix
    first, second = e.value.convergence
    assert first["solver"] == "lobpcg-workers" and not first["converged"]
    assert second["solver"] == "dense" and second["not_run"] == "memory"
