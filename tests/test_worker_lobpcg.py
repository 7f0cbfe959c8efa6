"""LOBPCG with its blocks on the Dask workers (dimred_dask.linalg.worker_lobpcg): the same
eigenpairs as LAPACK and as the in-process solver, the same bits for the same blocks, a
worker killed mid-solve, and the caller's process holding no n-sized iteration arrays."""

from __future__ import annotations

import gc
import os
import signal
import tracemalloc

import numpy as np
import pytest
import scipy.linalg
import scipy.sparse as sp

from dimred_dask import LocallyLinearEmbedding
from dimred_dask._compute import workers
from dimred_dask.errors import ConvergenceWarning, InputError
from dimred_dask.graphs import knn_graph, reconstruction_weights
from dimred_dask.linalg import bottom_eigsh_lobpcg
from dimred_dask.linalg.worker_lobpcg import bottom_eigsh_lobpcg_workers
from dimred_dask.methods.lle import lle_operator

from .test_lle_precond import VALUE_RTOL, VECTOR_ATOL, _mixture

TOL = 1e-10


@pytest.fixture(autouse=True)
def _one_blas_thread():
    from threadpoolctl import threadpool_limits

    with threadpool_limits(1, user_api="blas"):
        yield


@pytest.fixture(scope="module")
def lle_problem():
    """LLE's A = I - W on the 50-D mixture (n = 1000) and LAPACK's bottom of M = A^T A."""
    X = _mixture(n=1000)
    g = knn_graph(X, 10, backend="exact")
    A = lle_operator(reconstruction_weights(X, g, 1e-3), g.indices)
    vals, vecs = scipy.linalg.eigh((A.T @ A).toarray(), subset_by_index=[0, 4])
    return X, A, vals, vecs


def _agree(e, vals, vecs):
    np.testing.assert_allclose(e.values, vals, rtol=VALUE_RTOL)
    cos = np.abs(np.sum(e.vectors * vecs, axis=0))
    np.testing.assert_allclose(cos, 1.0, atol=VECTOR_ATOL)


def test_gram_kind_against_lapack_and_in_process(client, lle_problem):
    X, A, vals, vecs = lle_problem
    n = A.shape[0]
    e = bottom_eigsh_lobpcg_workers(A, 3, null=np.ones(n), tol=TOL, client=client)
    assert e.solver == "lobpcg-workers" and e.convergence["converged"]
    assert e.info["blocks"] == 2 and e.info["restarts"] == 0
    _agree(e, vals[1:4], vecs[:, 1:4])
    np.testing.assert_allclose(e.vectors.sum(axis=0), 0.0, atol=1e-10)  # orthogonal to 1
    M = (A.T @ A).tocsr()
    res = np.linalg.norm(M @ e.vectors - e.vectors * e.values, axis=0)
    assert (res <= TOL * M.diagonal().mean()).all()
    # the in-process iteration: the same arithmetic up to the order of the block sums
    ref = bottom_eigsh_lobpcg(A, 3, null=np.ones(n), tol=TOL)
    np.testing.assert_allclose(e.values, ref.values, rtol=VALUE_RTOL)


def test_a_seed_starts_the_in_process_and_the_worker_solve_alike(client, lle_problem):
    """Both solvers draw the start block from the seed the same way (in the same reverse
    Cuthill-McKee order): a few iterations give the same Ritz values, up to rounding; another
    seed, other values."""
    A, n = lle_problem[1], lle_problem[1].shape[0]
    kw = dict(null=np.ones(n), tol=TOL, maxiter=3)
    with pytest.warns(ConvergenceWarning):
        here = bottom_eigsh_lobpcg(A, 3, random_state=5, **kw)
    with pytest.warns(ConvergenceWarning):
        there = bottom_eigsh_lobpcg_workers(A, 3, random_state=5, client=client, **kw)
    with pytest.warns(ConvergenceWarning):
        other = bottom_eigsh_lobpcg(A, 3, random_state=6, **kw)
    assert here.info["iterations"] == there.info["iterations"] == 3
    np.testing.assert_allclose(there.values, here.values, rtol=1e-9)
    assert np.abs(other.values / here.values - 1).max() > 1e-4
    signs = np.sign(np.sum(here.vectors * there.vectors, axis=0))
    np.testing.assert_allclose(there.vectors * signs, here.vectors, atol=1e-8)


def test_the_same_blocks_give_the_same_bits(client, lle_problem):
    A = lle_problem[1]
    n = A.shape[0]
    runs = [
        bottom_eigsh_lobpcg_workers(
            A, 2, null=np.ones(n), tol=TOL, maxiter=25, blocks=3, client=client
        )
        for _ in range(2)
    ]
    assert runs[0].info["blocks"] == 3 and runs[0].info["iterations"] == 25
    np.testing.assert_array_equal(runs[0].vectors, runs[1].vectors)


def test_vectors_kept_on_the_workers_are_the_gathered_ones(client, lle_problem):
    """keep=True: the same bits as the gathered vectors, as a dask array of one chunk a
    block; the iterations reported to the progress reporter; a permuted operator refused."""
    import dask.array as da

    from dimred_dask._progress import reporting

    A = lle_problem[1]
    n = A.shape[0]
    kw = dict(null=np.ones(n), tol=TOL, maxiter=25, blocks=3, reorder=False, client=client)
    seen = []
    with pytest.warns(ConvergenceWarning, match="stopped after 25 iterations"):
        with reporting(lambda stage, done, total: seen.append((stage, done, total))):
            kept = bottom_eigsh_lobpcg_workers(A, 2, keep=True, **kw)
        got = bottom_eigsh_lobpcg_workers(A, 2, **kw)
    assert isinstance(kept.vectors, da.Array) and kept.vectors.numblocks == (3, 1)
    np.testing.assert_array_equal(kept.vectors.compute(), got.vectors)
    np.testing.assert_array_equal(kept.values, got.values)
    assert [d for _, d, _ in seen] == list(range(26)) and {t for _, _, t in seen} == {25}
    assert seen[0][0].startswith("LOBPCG on the workers: 2 eigenpairs, residual")
    with pytest.raises(InputError, match="own row order"):
        bottom_eigsh_lobpcg_workers(A, 2, keep=True, null=np.ones(n), client=client)


def _band_laplacian(n, reach, seed=0):
    """The normalised Laplacian of a ring whose rows link to random rows within ``reach``:
    row blocks read only the edges of their neighbours."""
    rng = np.random.default_rng(seed)
    rows = np.repeat(np.arange(n), 4)
    W = sp.csr_matrix(
        (np.ones(rows.size), (rows, (rows + rng.integers(1, reach, rows.size)) % n)), (n, n)
    )
    return sp.csgraph.laplacian((W + W.T).tocsr(), normed=True).tocsr()


def test_a_block_holds_its_rows_cut_by_the_blocks_of_their_columns():
    """`_split`: the parts give the rows' product with any V; a part reaching few of the
    block's rows holds only those; the halos are the columns touched."""
    from dimred_dask.linalg.worker_blocks import _split

    n, bounds = 1200, [(0, 300), (300, 600), (600, 900), (900, 1200)]
    L = _band_laplacian(n, 20)
    V = np.random.default_rng(1).standard_normal((n, 5))
    rows = L[300:600]
    parts, sels = _split(rows, bounds)
    assert sorted(parts) == [0, 1, 2]  # the ring's block 1 does not reach block 3
    assert parts[1][0] is None and len(parts[0][0]) < 30 and len(parts[2][0]) < 30
    out = np.zeros((300, 5))
    for j, (reached, part) in parts.items():
        a = bounds[j][0]
        z = part @ V[a + sels[j]]
        if reached is None:
            out += z
        else:
            out[reached] += z
    np.testing.assert_allclose(out, rows @ V, rtol=1e-13, atol=1e-15)
    assert len(sels[3]) == 0 and len(sels[0]) < 30
    # rows reading most of a block read it whole (one copy of it serves every reader)
    rng = np.random.default_rng(2)
    R = sp.random(300, n, density=0.01, random_state=rng, format="csr")
    parts, sels = _split(R, bounds)
    assert [len(s) for s in sels] == [300] * 4 and all(r is None for r, _ in parts.values())
    np.testing.assert_allclose(sum(parts[j][1] @ V[a:b] for j, (a, b) in enumerate(bounds)), R @ V)


def test_other_blocks_rows_taken_one_part_a_task_give_the_same_bits(
    client, lle_problem, monkeypatch
):
    """A block adds what it reads from other blocks one part a task when the parts are large
    (`PART_BYTES`): the same sums in the same order, so the same bits as one task (whose
    eigenpairs the other tests check against LAPACK). On a graph in random order each
    block reads others whole; on a band, their edges only, all in one task."""
    from dimred_dask.linalg import worker_lobpcg as wl

    S = abs(lle_problem[1]) + abs(lle_problem[1]).T
    shuffled = sp.csgraph.laplacian(S.tocsr(), normed=True).tocsr()
    for L, parted in ((shuffled, True), (_band_laplacian(1200, 20), False)):
        kw = dict(kind="symmetric", tol=1e-14, maxiter=12, blocks=4, client=client)
        methods = []
        call = wl._Solve.call

        def spy(self, i, method, after, *args):
            methods.append(method)
            return call(self, i, method, after, *args)

        with pytest.warns(ConvergenceWarning):  # 12 iterations: not converged, enough
            whole = bottom_eigsh_lobpcg_workers(L, 3, **kw)
            with monkeypatch.context() as m:
                m.setattr(wl, "PART_BYTES", 0)
                m.setattr(wl._Solve, "call", spy)
                parts = bottom_eigsh_lobpcg_workers(L, 3, **kw)
        assert ("add" in methods) == parted and "apply" in methods
        assert whole.info["iterations"] == 12
        np.testing.assert_array_equal(parts.vectors, whole.vectors)
        np.testing.assert_array_equal(parts.values, whole.values)


def test_symmetric_kind_on_a_normalised_laplacian(client, lle_problem):
    X, A = lle_problem[:2]
    S = abs(A) + abs(A).T
    L = sp.csgraph.laplacian(S.tocsr(), normed=True).tocsr()
    vals, vecs = scipy.linalg.eigh(L.toarray(), subset_by_index=[0, 3])
    from dimred_dask.linalg import bottom_eigsh  # the spectral methods' way in

    e = bottom_eigsh(L, 4, solver="lobpcg-workers", tol=TOL)
    assert e.solver == "lobpcg-workers" and e.info["kind"] == "symmetric"
    assert e.convergence["converged"]
    np.testing.assert_allclose(e.values[1:], vals[1:], rtol=VALUE_RTOL)
    assert abs(e.values[0]) < 1e-9  # the trivial pair, D^1/2 1
    cos = np.abs(np.sum(e.vectors[:, 1:] * vecs[:, 1:], axis=0))
    np.testing.assert_allclose(cos, 1.0, atol=VECTOR_ATOL)


def test_methods_take_the_worker_solver(client, lle_problem):
    X = lle_problem[0]
    ref = LocallyLinearEmbedding(2, n_neighbors=10, eigen_solver="dense").fit(X)
    ours = LocallyLinearEmbedding(2, n_neighbors=10, eigen_solver="lobpcg-workers", tol=TOL).fit(X)
    assert ours._model.solver == "lobpcg-workers"
    np.testing.assert_allclose(ours.eigenvalues_, ref.eigenvalues_, rtol=VALUE_RTOL)
    signs = np.sign(np.sum(ours.embedding_ * ref.embedding_, axis=0))
    np.testing.assert_allclose(ours.embedding_ * signs, ref.embedding_, atol=VECTOR_ATOL)


def test_the_caller_holds_no_iteration_blocks(client):
    """A regression guard on the caller's memory: its Python-side allocations (NumPy's are
    traced) do not grow with the block's width p, whereas the in-process solver holds
    S and M S, 6 n x p arrays."""
    n = 40_000
    rng = np.random.default_rng(0)
    cols = rng.integers(0, n, (n, 6))
    W = sp.csr_matrix(
        (np.full(n * 6, 1 / 6), cols.ravel(), np.arange(0, 6 * n + 1, 6)), shape=(n, n)
    )
    A = (sp.identity(n, format="csr") - W).tocsr()
    peaks = {}
    for p in (8, 40):
        gc.collect()  # what an earlier solve left to the collector is not this one's
        tracemalloc.start()
        with pytest.warns(ConvergenceWarning):  # 5 iterations are not meant to converge
            bottom_eigsh_lobpcg_workers(
                A, 2, null=np.ones(n), tol=1e-12, maxiter=5, block=p, client=client
            )
        peaks[p] = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    # holding even one n x p array would grow the peak by n x 32 x 8 bytes (in-process: 6 of
    # them); measured: within 10 kB. Half of one such array leaves room for the O(nnz) copies
    # of A, which do not depend on p but may outlive a solve until the collector runs.
    grown = peaks[40] - peaks[8]
    assert grown < n * 32 * 8 / 2, peaks


def _kill_one_worker_at(client, iteration):
    killed = []

    def progress(it, res):
        if it == iteration and not killed:  # once: the restarted solve passes here again
            killed.append(it)
            victim = sorted(workers(client))[0]
            pid = client.run(os.getpid, workers=[victim])[victim]
            os.kill(pid, signal.SIGKILL)

    return progress


def cluster_to_kill():
    """A cluster of its own (2 worker processes) for a test that kills one of them."""
    from distributed import LocalCluster

    return LocalCluster(
        n_workers=2,
        threads_per_worker=1,
        processes=True,
        host="127.0.0.1",
        dashboard_address="127.0.0.1:0",
    )


def test_a_worker_killed_mid_solve_gives_the_undisturbed_answer(lle_problem):
    from distributed import Client

    A = lle_problem[1]
    n = A.shape[0]
    with cluster_to_kill() as cluster, Client(cluster) as c:
        kw = dict(null=np.ones(n), tol=1e-12, maxiter=20, client=c)  # 20 iterations, not
        with pytest.warns(ConvergenceWarning):  # converged: enough
            calm = bottom_eigsh_lobpcg_workers(A, 2, **kw)
            stormy = bottom_eigsh_lobpcg_workers(A, 2, progress=_kill_one_worker_at(c, 5), **kw)
    assert stormy.info["restarts"] == 1 and calm.info["restarts"] == 0
    np.testing.assert_array_equal(stormy.vectors, calm.vectors)
    np.testing.assert_array_equal(stormy.values, calm.values)


def test_bad_input_is_refused(client):
    A = sp.identity(10, format="csr")
    with pytest.raises(InputError, match="kind must be one of gram, symmetric"):
        bottom_eigsh_lobpcg_workers(A, 2, kind="dense", client=client)
    with pytest.raises(InputError, match="square A and 1 <= k < n - 1"):
        bottom_eigsh_lobpcg_workers(A[:5], 2, client=client)
    with pytest.raises(InputError, match="B given"):
        from dimred_dask.linalg import bottom_eigsh

        bottom_eigsh(A, 2, B=A, solver="lobpcg-workers")


def test_auto_takes_the_workers_above_the_arpack_limit(client):
    from dimred_dask.linalg import ARPACK_MAX
    from dimred_dask.linalg.sparse_eigen import choose_sparse_solver

    assert choose_sparse_solver("auto", ARPACK_MAX + 1) == "lobpcg-workers"  # 2 workers here
    assert choose_sparse_solver("auto", ARPACK_MAX) == "arpack"


def test_auto_with_b_takes_the_in_process_lobpcg_above_the_arpack_limit(client, monkeypatch):
    """The workers' LOBPCG solves M x = lambda x only: with B, "auto" takes SciPy's LOBPCG,
    multigrid-preconditioned, above the ARPACK limit even with two workers; asked for by
    name it is still refused."""
    from dimred_dask.linalg import bottom_eigsh, bottom_eigsh_checked, sparse_eigen

    n = 300
    monkeypatch.setattr(sparse_eigen, "DENSE_MAX_SPARSE", 50)
    monkeypatch.setattr(sparse_eigen, "ARPACK_MAX", 100)
    rng = np.random.default_rng(0)
    A = sp.diags([np.full(n - 1, 0.1), np.arange(1.0, n + 1), np.full(n - 1, 0.1)], [-1, 0, 1])
    B = sp.diags(rng.uniform(1.0, 2.0, n))
    vals = scipy.linalg.eigh(A.toarray(), B.toarray(), eigvals_only=True)[:3]
    e = bottom_eigsh(A, 3, B=B, tol=1e-9)
    assert e.solver == "amg" and e.convergence["converged"]
    np.testing.assert_allclose(e.values, vals, rtol=1e-8)
    checked, _ = bottom_eigsh_checked(A, 3, step="bottom", method="test", B=B, tol=1e-9)
    assert checked.solver == "amg"
    with pytest.raises(InputError, match="B given"):
        bottom_eigsh(A, 3, B=B, solver="lobpcg-workers")


def test_memory_note_tells_a_tight_solve_from_a_roomy_one():
    """The block arrays' estimate (9 n_i x p arrays, 10 for a Gram operator): spectral
    clustering's 22 columns on blocks of 10^6 rows take 1.48 GiB, over half of a 2 GiB
    worker and under half of a 3 GiB one (the layout before, 12 arrays, took 1.97 GiB and
    went over 3 GiB at 4 000 000 rows on 4 workers: bench/RESULTS.md)."""
    from dimred_dask.linalg.worker_memory import memory_note

    bounds = [(i * 1_000_000, (i + 1) * 1_000_000) for i in range(4)]
    text, tight = memory_note(bounds, 22, 2 * 2**30)
    assert tight and "1.48 GiB" in text and "1000000 rows x 22 columns" in text
    assert "2.00 GiB" in text and "9 float64 arrays" in text
    assert not memory_note(bounds, 22, 3 * 2**30)[1]
    assert "10 float64 arrays" in memory_note(bounds, 22, 3 * 2**30, gram=True)[0]
    assert not memory_note(bounds, 22, 0)[1]  # no limit set: nothing to compare with


def test_a_stall_is_judged_by_the_residuals_rate_over_the_last_window():
    """Once a window from STALL_AFTER on: a residual falling 10x per 100 iterations from 1e-3
    reaches 1e-8 by iteration 700 of 1000 (not stalled); one falling 2x per 100 would need
    about 1900 (stalled), as would one that does not fall; none is judged between windows."""
    from dimred_dask.linalg.worker_lobpcg import STALL_AFTER, STALL_WINDOW, _stalled

    def history(factor_per_window, at=STALL_AFTER, start=1e-3):
        return [start * factor_per_window ** ((i - at) / STALL_WINDOW) for i in range(at + 1)]

    assert not _stalled(history(0.1), 1e-8, 1000)
    assert _stalled(history(0.5), 1e-8, 1000)
    assert _stalled(history(1.0), 1e-8, 1000)
    assert not _stalled(history(0.5)[:-1], 1e-8, 1000)  # not at a window's end
    assert not _stalled(history(0.5)[: STALL_AFTER - STALL_WINDOW + 1], 1e-8, 1000)
    assert not _stalled(history(0.5, start=1e-9), 1e-8, 1000)  # converged
