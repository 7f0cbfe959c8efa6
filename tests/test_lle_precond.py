"""LLE's solvers for wide data: LOBPCG on products with A = I - W (Jacobi or the aggregation
multigrid preconditioner of dimred_dask.linalg.amg), against LAPACK on M = Aᵀ A."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.linalg
import scipy.sparse as sp

from dimred_dask import LocallyLinearEmbedding
from dimred_dask.errors import InputError
from dimred_dask.graphs import knn_graph, reconstruction_weights
from dimred_dask.linalg import amg_hierarchy, bottom_eigsh_lobpcg
from dimred_dask.methods.lle import lle_operator

# Both solvers stop at residuals ||M v - λ v|| <= tol * mean(diag M) (~1e-10 here); a unit
# vector's sine to the exact one is then <= residual / gap = 2e-8 (gaps >= 5e-3 on this data,
# below), i.e. 8e-7 on the sqrt(n)-scaled embedding (n = 1500): VECTOR_ATOL. Measured:
# values within 1.2e-13 relative of LAPACK's, 1 - |cos| 6e-14, embeddings within 7e-9.
TOL = 1e-10
VALUE_RTOL = 1e-8
VECTOR_ATOL = 1e-6
# A symmetric V-cycle: T is symmetric to rounding (measured 2.2e-16 of its largest entry);
# T M has its spectrum in (0, 1] off M's null space (n = 600, levels 600, 130, 13: measured
# 0.049 - 1.0, a condition of 20 against 76 for Jacobi's D⁻¹ M), one V-cycle leaves 6.5% of
# the error's M-norm squared
SYMMETRY_RTOL = 1e-12


@pytest.fixture(autouse=True)
def _one_blas_thread():
    """The dense checks here (LAPACK on 600-1500 rows) took 10x as long with OpenBLAS's
    threads in the test process (which has imported Prefect, see conftest) on the busy
    2-core machine: 8.9 s against 0.9 s for one generalised eigvalsh at n = 600."""
    from threadpoolctl import threadpool_limits

    with threadpool_limits(1, user_api="blas"):
        yield


def _mixture(n=1500, d=50, seed=0):
    """bench's 50-D mixture (10 unit Gaussians, centres N(0, 0.3² I)); its LLE M at
    n = 1500, k = 10 has bottom eigenvalues 0, 0.0554, 0.0605, 0.0655, 0.0681 (LAPACK):
    gaps of ~5e-3 between the wanted ones and to the next."""
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((10, d)) * 0.3
    return centres[rng.integers(0, 10, n)] + rng.standard_normal((n, d))


@pytest.fixture(scope="module")
def mixture_lle():
    X = _mixture()
    g = knn_graph(X, 10, backend="exact")
    A = lle_operator(reconstruction_weights(X, g, 1e-3), g.indices)
    from threadpoolctl import threadpool_limits

    with threadpool_limits(1, user_api="blas"):  # see _one_blas_thread
        vals, vecs = scipy.linalg.eigh((A.T @ A).toarray(), subset_by_index=[0, 5])
    return X, A, vals, vecs


@pytest.mark.parametrize("preconditioner", ["jacobi", "amg"])
def test_bottom_eigsh_lobpcg_against_lapack(mixture_lle, preconditioner):
    X, A, vals, vecs = mixture_lle
    n = A.shape[0]
    e = bottom_eigsh_lobpcg(
        A, 3, null=np.ones(n), preconditioner=preconditioner, tol=TOL, random_state=1
    )
    assert e.solver == f"lobpcg-{preconditioner}" and e.info["iterations"] < 500
    np.testing.assert_allclose(e.values, vals[1:4], rtol=VALUE_RTOL)
    cos = np.abs(np.sum(e.vectors * vecs[:, 1:4], axis=0))
    np.testing.assert_allclose(cos, 1.0, atol=VECTOR_ATOL)
    np.testing.assert_allclose(e.vectors.sum(axis=0), 0.0, atol=1e-10)  # orthogonal to 1
    M = (A.T @ A).tocsr()
    res = np.linalg.norm(M @ e.vectors - e.vectors * e.values, axis=0)
    assert (res <= TOL * M.diagonal().mean()).all()


def test_lle_lobpcg_and_amg_agree_with_dense(mixture_lle, monkeypatch):
    import importlib

    lle_module = importlib.import_module("dimred_dask.methods.lle")
    X = mixture_lle[0]
    ref = LocallyLinearEmbedding(2, n_neighbors=10, eigen_solver="dense").fit(X)
    for solver in ("lobpcg", "amg"):
        ours = LocallyLinearEmbedding(2, n_neighbors=10, eigen_solver=solver, tol=TOL).fit(X)
        assert ours._model.solver == solver
        np.testing.assert_allclose(ours.eigenvalues_, ref.eigenvalues_, rtol=VALUE_RTOL)
        signs = np.sign(np.sum(ours.embedding_ * ref.embedding_, axis=0))
        np.testing.assert_allclose(ours.embedding_ * signs, ref.embedding_, atol=VECTOR_ATOL)
    # "auto": wide data (more than FACTORIZE_MAX_DIM columns) go to LOBPCG above the dense
    # limit; narrow data keep shift-invert ARPACK, then the factored solver
    monkeypatch.setattr(lle_module, "DENSE_MAX_SPARSE", 1000)
    assert lle_module.lle(X, tol=TOL).solver == "lobpcg"
    assert lle_module.lle(X[:, :3], tol=TOL).solver == "arpack"
    assert lle_module.choose_lle_solver("auto", 10**6, 3) == "factored"
    assert lle_module.choose_lle_solver("auto", 10**6, 50, workers=False) == "lobpcg"
    assert lle_module.choose_lle_solver("auto", 10**6, 50, workers=True) == "lobpcg-workers"
    assert lle_module.choose_lle_solver("auto", 200_000, 50, workers=True) == "lobpcg"
    assert lle_module.choose_lle_solver("auto", 500, 50) == "dense"


def test_amg_preconditioner_is_symmetric_positive_and_beats_jacobi():
    """The V-cycle T (three levels here) is a valid LOBPCG preconditioner: symmetric,
    positive on the complement of M's null vector, and T M better conditioned there than
    Jacobi's D⁻¹ M (dense checks, so a smaller mixture)."""
    X = _mixture(600)
    g = knn_graph(X, 10, backend="exact")
    A = lle_operator(reconstruction_weights(X, g, 1e-3), g.indices)
    n = A.shape[0]
    amg = amg_hierarchy(A, coarse_size=30, random_state=0)
    assert len(amg.info["sizes"]) >= 3 and amg.info["sizes"][-1] <= 50
    T = amg.solve(np.eye(n))
    assert np.abs(T - T.T).max() <= SYMMETRY_RTOL * np.abs(T).max()
    # on the complement of the constant: Q an orthonormal basis of it
    Q = scipy.linalg.null_space(np.ones((1, n)))
    M = (A.T @ A).toarray()
    Mq, Tq = Q.T @ M @ Q, Q.T @ T @ Q
    assert scipy.linalg.eigvalsh(Tq)[0] > 0
    lam = scipy.linalg.eigvalsh(Mq, np.linalg.inv(Tq))  # the spectrum of T M there
    assert lam[0] > 0 and lam[-1] <= 1 + 1e-8
    d = M.diagonal()
    jac = scipy.linalg.eigvalsh(Mq, Q.T @ np.diag(d) @ Q)  # of D⁻¹ M, projected
    assert lam[-1] / lam[0] < 0.5 * jac[-1] / jac[0]
    # and one V-cycle reduces the M-norm of the error of M y = r, for r ⊥ 1
    y = Q @ np.random.default_rng(0).standard_normal(n - 1)
    r = M @ y
    err = y - amg.solve(r)
    err -= err.mean()
    assert err @ M @ err < 0.5 * (y @ M @ y)


def test_lobpcg_bad_input():
    A = sp.identity(10, format="csr")
    with pytest.raises(InputError, match="preconditioner"):
        bottom_eigsh_lobpcg(A, 2, preconditioner="ilu")
    with pytest.raises(InputError, match="k < n - 1"):
        bottom_eigsh_lobpcg(A, 9)
