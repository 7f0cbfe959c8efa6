"""The graph Laplacian built on the Dask workers from a kNN graph in a run's store
(dimred_dask.graphs.worker_laplacian): the in-process operator entry for entry, LAPACK's
eigenpairs, Laplacian eigenmaps and spectral clustering through the flow with the graph left
in the store, and a worker killed during the solve."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.linalg
from sklearn.datasets import make_swiss_roll

from dimred_dask import LaplacianEigenmaps, laplacian_eigenmaps
from dimred_dask.errors import InputError
from dimred_dask.graphs import graph_csr, graph_weights, join_components, knn_graph
from dimred_dask.graphs.laplacian import laplacian
from dimred_dask.graphs.worker_laplacian import laplacian_on_workers, spectral_embedding_workers
from dimred_dask.io import RunStore, StoredRows, open_output, save_array
from flows.knn import StoreGraph, save_graph
from flows.methods import load_model


def _stored(graph, path) -> StoreGraph:
    """The graph written to a run store as the kNN stage writes it, opened as the fit gets it
    (rows read by the tasks that need them)."""
    store = RunStore(str(path))
    store.prepare("new", {"method": "test"})
    save_graph(store, graph, rows_per_chunk=97)
    return StoreGraph.open(str(path))


@pytest.fixture(scope="module")
def roll_graph():
    X = make_swiss_roll(1500, random_state=4)[0]
    X[7] = X[3]  # an exact duplicate: its edge is kept as a tiny positive distance
    return X, knn_graph(X, 8, backend="exact")


@pytest.mark.parametrize("weights", ["heat", "binary"])
@pytest.mark.parametrize("normed", [True, False])
def test_the_operator_is_the_in_process_one(client, roll_graph, tmp_path, weights, normed):
    X, g = roll_graph
    W, t = graph_weights(graph_csr(g), weights, None)
    L, deg = laplacian(W, normed=normed)
    source = _stored(g, tmp_path / "run")
    Lw, deg_w, t_w = laplacian_on_workers(source, weights=weights, normed=normed, blocks=3)
    assert Lw.bounds == [(0, 500), (500, 1000), (1000, 1500)]
    G = Lw.gather(client)
    assert G.nnz == L.nnz
    assert abs(G - L).max() <= 1e-15 * abs(L).max()
    np.testing.assert_allclose(deg_w, deg, rtol=1e-14)
    assert (t_w is None) == (t is None) and (t is None or abs(t_w - t) <= 1e-14 * t)


def test_joining_edges_and_fewer_neighbours_than_stored(client, tmp_path):
    X = np.vstack([make_swiss_roll(300, random_state=1)[0], 60.0 + np.zeros((40, 3))])
    X[300:] += np.random.default_rng(0).standard_normal((40, 3))
    g = knn_graph(X, 9, backend="exact")
    joined, _ = join_components(g, X)
    assert joined.info["extra_edges"]
    want = joined.subset(6)
    W, _ = graph_weights(graph_csr(want))
    L, _ = laplacian(W, normed=True)
    Lw, _, _ = laplacian_on_workers(_stored(joined, tmp_path / "run"), n_neighbors=6)
    G = Lw.gather(client)
    assert G.nnz == L.nnz and abs(G - L).max() <= 1e-15


def test_eigenpairs_are_lapacks(client, roll_graph, tmp_path):
    X, g = roll_graph
    W, _ = graph_weights(graph_csr(g))
    L, deg = laplacian(W, normed=True)
    vals, vecs = scipy.linalg.eigh(L.toarray(), subset_by_index=[0, 2])
    res, _ = spectral_embedding_workers(_stored(g, tmp_path / "run"), 2, tol=1e-10)
    assert res.solver == "lobpcg-workers" and res.convergence[-1]["converged"]
    np.testing.assert_allclose(res.eigenvalues, vals[1:], rtol=1e-6)
    want = vecs[:, 1:] / np.sqrt(deg)[:, None]
    cos = np.abs(np.sum(res.embedding * want, axis=0)) / (
        np.linalg.norm(res.embedding, axis=0) * np.linalg.norm(want, axis=0)
    )
    np.testing.assert_allclose(cos, 1.0, atol=1e-8)
    np.testing.assert_allclose(res.degrees, deg, rtol=1e-14)


def test_the_vectors_can_stay_on_the_workers(client, roll_graph, tmp_path):
    """Spectral clustering of dask input keeps the solve's vectors on the workers (keep=True):
    its embedding is the gathered one of the same solve, scaled and signed alike, and no
    n x k array is sent back to the cluster in a graph."""
    import warnings

    import dask
    import dask.array as da

    from dimred_dask import spectral_clustering

    X, g = roll_graph
    source = _stored(g, tmp_path / "run")
    here, _ = spectral_embedding_workers(source, 3, weights="binary", drop_first=False)
    Xd = da.from_array(X, chunks=(500, 3))  # the embedding (1500 x 3 float64): 36 kB
    with (
        dask.config.set({"distributed.admin.large-graph-warning-threshold": "30kB"}),
        warnings.catch_warnings(record=True) as seen,
    ):
        warnings.simplefilter("always")
        sc = spectral_clustering(
            Xd, n_clusters=3, n_neighbors=8, graph=source, eigen_solver="lobpcg-workers",
            random_state=0,
        )  # fmt: skip
        Y, labels = sc.embedding.compute(), np.asarray(sc.labels)
    assert not [str(w.message) for w in seen if "large graph" in str(w.message)]
    assert isinstance(sc.embedding, da.Array) and sc.embedding.chunks[0] == Xd.chunks[0]
    assert sc.solver == "lobpcg-workers" and sorted(set(labels)) == [0, 1, 2]
    np.testing.assert_array_equal(sc.eigenvalues, here.eigenvalues)
    np.testing.assert_allclose(Y, here.embedding, rtol=1e-12, atol=0)


def test_the_function_reads_a_stored_graph_where_the_solve_is(client, roll_graph, tmp_path):
    X, g = roll_graph
    ref = laplacian_eigenmaps(X, n_neighbors=8, graph=g, eigen_solver="dense")
    source = _stored(g, tmp_path / "run")
    on_workers = laplacian_eigenmaps(
        X, n_neighbors=8, graph=source, eigen_solver="lobpcg-workers", tol=1e-10
    )
    in_memory = laplacian_eigenmaps(X, n_neighbors=8, graph=source, eigen_solver="dense")
    assert on_workers.solver == "lobpcg-workers" and in_memory.solver == "dense"
    np.testing.assert_allclose(on_workers.eigenvalues, ref.eigenvalues, rtol=1e-6)
    np.testing.assert_allclose(on_workers.embedding, ref.embedding, atol=1e-6)
    np.testing.assert_array_equal(in_memory.embedding, ref.embedding)
    assert on_workers.t == pytest.approx(ref.t, rel=1e-14)


def test_a_point_without_weight_is_refused_before_the_solve(client, tmp_path):
    from dimred_dask.graphs import KNNGraph

    n, k = 30, 3
    idx = (np.arange(n)[:, None] + np.arange(1, k + 1)) % n
    dist = np.ones((n, k))
    dist[5] = 40.0  # exp(-1600 / t) underflows to 0: row 5 has no weight to anyone
    idx[(idx == 5)] = 6
    g = KNNGraph(idx, dist)
    with pytest.raises(InputError, match="point 5 .*has weight 0 to all"):
        laplacian_on_workers(_stored(g, tmp_path / "run"), t=1.0)


def test_laplacian_through_the_flow_leaves_graph_and_rows_in_the_store(
    client, prefect_api, tmp_path
):
    from flows.embed import embed

    X = make_swiss_roll(1200, random_state=5)[0].astype(np.float32)
    uri = str(tmp_path / "roll.zarr")
    save_array(X, uri, chunks=(300, 3))
    params = {"n_neighbors": 10, "eigen_solver": "lobpcg-workers", "tol": 1e-10}
    m = embed(uri, str(tmp_path / "le"), method="laplacian", params=params)
    assert m["model"]["solver"] == "lobpcg-workers"
    Y = open_output(str(tmp_path / "le")).read_array("embedding").astype(np.float64)
    ref = LaplacianEigenmaps(2, n_neighbors=10, eigen_solver="dense").fit(X)
    want = ref.embedding_.astype(np.float64)
    signs = np.sign(np.sum(Y * want, axis=0))
    np.testing.assert_allclose(Y * signs, want, atol=1e-4 * np.abs(want).max())
    loaded = load_model(str(tmp_path / "le"))
    assert isinstance(loaded.X_fit, StoredRows)  # the training rows stayed in the store
    new = X[:50] + np.float32(0.2)
    placed = loaded.transform(new).astype(np.float64) * signs
    np.testing.assert_allclose(
        placed, ref.transform(new).astype(np.float64), atol=1e-4 * np.abs(want).max()
    )


def test_spectral_clustering_through_the_flow_on_the_workers(client, prefect_api, tmp_path):
    from sklearn.datasets import make_blobs
    from sklearn.metrics import adjusted_rand_score

    from flows.embed import embed

    X, y = make_blobs(900, 4, centers=3, cluster_std=0.6, random_state=2)
    uri = str(tmp_path / "blobs.zarr")
    save_array(X.astype(np.float32), uri, chunks=(300, 4))
    params = {"n_clusters": 3, "n_neighbors": 10, "eigen_solver": "lobpcg-workers"}
    m = embed(uri, str(tmp_path / "sc"), method="spectral", params=params)
    assert m["model"]["solver"] == "lobpcg-workers"
    labels = open_output(str(tmp_path / "sc")).read_array("model/labels_")
    assert adjusted_rand_score(labels, y) == 1.0


def test_a_worker_killed_during_the_solve_gives_the_undisturbed_answer(roll_graph, tmp_path):
    from distributed import Client

    from dimred_dask.errors import ConvergenceWarning
    from dimred_dask.linalg.worker_lobpcg import MAX_RESTARTS, bottom_eigsh_lobpcg_workers

    from .test_worker_lobpcg import _kill_one_worker_at, cluster_to_kill

    source = _stored(roll_graph[1], tmp_path / "run")
    with cluster_to_kill() as cluster, Client(cluster) as c:
        L, _, _ = laplacian_on_workers(source, client=c)
        kw = dict(kind="symmetric", tol=1e-14, maxiter=15, client=c)
        with pytest.warns(ConvergenceWarning):  # 15 iterations: not converged, enough
            calm = bottom_eigsh_lobpcg_workers(L, 3, **kw)
            stormy = bottom_eigsh_lobpcg_workers(L, 3, progress=_kill_one_worker_at(c, 4), **kw)
    # the loss was seen and survived: the operator's blocks on the lost worker are made again
    # by their tasks, and a restart that meets them still being made counts once more
    assert 1 <= stormy.info["restarts"] <= MAX_RESTARTS, stormy.info
    assert calm.info["restarts"] == 0
    np.testing.assert_array_equal(stormy.vectors, calm.vectors)


def test_the_caller_never_holds_the_graph_or_the_laplacian(client, tmp_path):
    """A regression guard on the flow's process: building the Laplacian from a stored graph
    on the workers allocates less than a quarter of the graph's own size in the caller
    (the degrees come back: n floats), where building it in the caller holds several times
    that. The solve's own memory is guarded in tests/test_worker_lobpcg.py."""
    import gc
    import tracemalloc

    from dimred_dask.graphs import KNNGraph
    from dimred_dask.methods._graph_common import graph_in_memory

    n, k = 60_000, 10
    rng = np.random.default_rng(1)
    # a ring lattice plus random edges: connected, every row k neighbours
    idx = np.empty((n, k), np.int64)
    idx[:, :4] = (np.arange(n)[:, None] + np.array([1, -1, 2, -2])) % n
    idx[:, 4:] = rng.integers(0, n, (n, k - 4))
    own = idx == np.arange(n)[:, None]
    idx[own] = np.broadcast_to(np.arange(n)[:, None] + 3, idx.shape)[own] % n
    g = KNNGraph(idx, np.sort(rng.uniform(0.5, 1.5, (n, k)), axis=1))
    source = _stored(g, tmp_path / "run")
    graph_bytes = g.indices.nbytes + g.distances.nbytes
    del g, idx, own
    peaks = {}
    for name, build in (
        ("workers", lambda: laplacian_on_workers(source)),
        ("in memory", lambda: laplacian(graph_weights(graph_csr(graph_in_memory(source)))[0])),
    ):
        gc.collect()
        tracemalloc.start()
        build()
        peaks[name] = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    assert peaks["in memory"] > 2 * graph_bytes, peaks  # the measure sees such arrays
    assert peaks["workers"] < graph_bytes / 4, peaks


def test_landmark_geodesics_from_a_stored_graph_are_the_in_memory_ones(client, tmp_path):
    """Landmark Isomap's Dijkstra rows with the graph read and symmetrised by a task on a
    worker (a graph source), against the same rows from the graph in memory; the joining
    edges of a disconnected graph are read with it."""
    from dimred_dask.graphs import geodesic_rows_on_workers, join_components

    X = np.vstack([make_swiss_roll(400, random_state=6)[0], 80.0 + np.zeros((50, 3))])
    X[400:] += np.random.default_rng(2).standard_normal((50, 3))
    joined, _ = join_components(knn_graph(X, 8, backend="exact"), X)
    sources = np.array([0, 5, 401, 449, 200])
    want = geodesic_rows_on_workers(joined, sources).compute()
    got = geodesic_rows_on_workers(_stored(joined, tmp_path / "run"), sources).compute()
    np.testing.assert_array_equal(got, want)
    assert np.isfinite(got).all()  # the joining edge is there: every vertex reached


@pytest.mark.parametrize(
    "fit",
    [
        lambda X, g: laplacian_eigenmaps(X, graph=g),
        lambda X, g: __import__("dimred_dask").lle(X, graph=g),
        lambda X, g: __import__("dimred_dask").spectral_clustering(X, n_clusters=2, graph=g),
        lambda X, g: __import__("dimred_dask").landmark_isomap(X, graph=g),
    ],
    ids=["laplacian", "lle", "spectral", "landmark-isomap"],
)
def test_a_graph_of_another_kind_is_refused(fit):
    """The functions that accept the run store's graph still refuse what is neither a
    `KNNGraph` nor a graph source, with the message they gave before."""
    X = np.random.default_rng(0).standard_normal((100, 3))
    with pytest.raises(InputError, match=r"needs graph=<KNNGraph>; found str"):
        fit(X, "not a graph")


def test_landmark_mvus_laplacian_basis_is_solved_and_left_on_the_workers(client, roll_graph):
    """The basis of landmark MVU from the worker-side LOBPCG: the in-process Laplacian's
    bottom eigenvectors (LAPACK), held as one dask chunk a row block, never gathered."""
    import dask.array as da

    from dimred_dask.graphs.landmark import laplacian_basis

    _, g = roll_graph
    ref, ref_info = laplacian_basis(g, 6, solver="dense")
    Q, info = laplacian_basis(g, 6, solver="lobpcg-workers")
    assert isinstance(Q, da.Array) and Q.shape == ref.shape
    assert Q.numblocks == (len(client.scheduler_info()["workers"]), 1)
    assert not any(
        isinstance(v, np.ndarray) and v.size >= Q.shape[0] for v in dict(Q.dask).values()
    )
    rec = info["convergence"][-1]
    assert rec["solver"] == "lobpcg-workers" and rec["converged"]
    # to the solve's tolerance (BASIS_TOL): each Ritz value within the residual r of an
    # eigenvalue; the subspace within r / gap of the reference's, the gap to the next one
    r = rec["tol"]
    gap = laplacian_basis(g, 7, solver="dense")[1]["laplacian_eigenvalues"][-1] - max(
        ref_info["laplacian_eigenvalues"]
    )
    assert r / gap < 1e-2  # the bound below says something
    np.testing.assert_allclose(
        info["laplacian_eigenvalues"], ref_info["laplacian_eigenvalues"], rtol=0, atol=r
    )
    Qw = Q.compute()
    np.testing.assert_allclose(Qw.T @ Qw, np.eye(6), atol=1e-8)
    assert np.linalg.norm(Qw - ref @ (ref.T @ Qw), axis=0).max() <= r / gap


def _roll_laplacian(n: int):
    X = make_swiss_roll(n, random_state=0)[0]
    g = knn_graph(X, 10, backend="exact")
    W, _ = graph_weights(graph_csr(g))
    L, deg = laplacian(W, normed=True)
    return g, L, deg


def test_the_multigrid_lobpcg_converges_where_jacobis_stalls():
    """The normalised Laplacian of a swiss roll's 10-NN graph: its bottom eigenvalues are
    tiny and close (1e-4 and less at 10 000 points, closer as n grows), where LOBPCG with
    a Jacobi preconditioner stalls; with the smoothed-aggregation V-cycle it converges in a
    few dozen iterations to shift-invert ARPACK's eigenpairs."""
    from dimred_dask.errors import ConvergenceWarning
    from dimred_dask.linalg import bottom_eigsh

    _, L, _ = _roll_laplacian(10_000)
    ref = bottom_eigsh(L, 3, solver="arpack", tol=1e-12)
    with pytest.warns(ConvergenceWarning, match="LOBPCG did not reach"):
        jacobi = bottom_eigsh(L, 3, solver="lobpcg", tol=1e-8, maxiter=150)
    assert not jacobi.convergence["converged"]
    amg = bottom_eigsh(L, 3, solver="amg", tol=1e-8, maxiter=150)
    rec = amg.convergence
    assert rec["converged"] and rec["iterations"] < 150 and rec["multigrid"]["levels"] >= 2
    np.testing.assert_allclose(amg.values[1:], ref.values[1:], rtol=1e-6)
    cos = np.abs(np.sum(amg.vectors[:, 1:] * ref.vectors[:, 1:], axis=0))
    np.testing.assert_allclose(cos, 1.0, atol=1e-6)


def test_a_stalled_worker_solve_above_the_arpack_limit_continues_with_the_multigrid(
    client, tmp_path, monkeypatch
):
    """Above ARPACK_MAX rows (made small here) a worker-side LOBPCG that stops short is
    not refused: the operator is assembled on one worker and solved there by the
    multigrid-preconditioned LOBPCG; both solves are in the record, and the embedding is
    the in-process shift-invert one."""
    from dimred_dask.graphs.spectral import spectral_embedding
    from dimred_dask.linalg import sparse_eigen

    g, _, _ = _roll_laplacian(5000)
    source = _stored(g, tmp_path / "run")
    ref = spectral_embedding(graph_weights(graph_csr(g))[0], 2, solver="arpack", tol=1e-12)
    monkeypatch.setattr(sparse_eigen, "ARPACK_MAX", 1000)
    with pytest.warns(Warning, match="amg"):
        res, _ = spectral_embedding_workers(source, 2, tol=1e-10, maxiter=3)
    first, second = res.convergence
    assert first["solver"] == "lobpcg-workers" and not first["converged"]
    assert second["solver"].startswith("lobpcg (scipy, smoothed-aggregation")
    assert second["converged"]
    assert res.solver == "amg"
    np.testing.assert_allclose(res.eigenvalues, ref.eigenvalues, rtol=1e-6)
    cos = np.abs(np.sum(res.embedding * ref.embedding, axis=0)) / (
        np.linalg.norm(res.embedding, axis=0) * np.linalg.norm(ref.embedding, axis=0)
    )
    np.testing.assert_allclose(cos, 1.0, atol=1e-6)


def test_a_multigrid_fallback_that_would_not_fit_on_a_worker_is_not_started(
    client, tmp_path, monkeypatch
):
    """The Laplacian's robust solve on one worker is estimated first (`one_worker_need`):
    above the share of the smallest worker's memory limit allowed to one task it is not
    started, and the refusal says why and that more worker memory would do."""
    from dimred_dask.errors import SolverError
    from dimred_dask.linalg import sparse_eigen, worker_lobpcg
    from dimred_dask.linalg.worker_memory import one_worker_need

    g, _, _ = _roll_laplacian(5000)
    source = _stored(g, tmp_path / "run")
    monkeypatch.setattr(sparse_eigen, "ARPACK_MAX", 1000)
    L, _, _ = laplacian_on_workers(source, client=client)
    operator = L.nbytes(client)
    held = client.gather(L.rows)
    assert operator == sum(b.data.nbytes + b.indices.nbytes + b.indptr.nbytes for b in held)
    need = one_worker_need("amg", "symmetric", 5000, operator, 3)
    assert need > 12 * operator  # the assembly's copies and the multigrid's hierarchy
    assert L.room_on_a_worker(client, "amg", 3) is None  # a few MiB of a few GiB: fits
    monkeypatch.setattr(worker_lobpcg, "MEMORY_SHARE", 1e-6)
    with pytest.raises(SolverError, match="not run: the operator assembled") as e:
        spectral_embedding_workers(source, 2, tol=1e-10, maxiter=3)
    assert "more memory" in e.value.fix
    first, second = e.value.convergence
    assert first["solver"] == "lobpcg-workers" and first["handled_by"] == "retried with amg"
    assert second["solver"] == "amg" and second["not_run"] == "memory"
