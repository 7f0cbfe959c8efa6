"""PCA against scikit-learn's PCA (the oracle), the seed texts' examples, and the API rules."""

from __future__ import annotations

import dask.array as da
import numpy as np
import pytest
from sklearn.decomposition import PCA as SkPCA

from dimred_dask import PCA, InputError, pca
from tests.data import low_rank

# Exact solvers agree with a float64 LAPACK SVD to rounding: ~1e-12 relative in float64;
# in float32, the input itself carries 6e-8 relative rounding, amplified by the condition of
# the covariance (variances 25..0.01 here) to ~1e-5.
EXACT_RTOL = {np.float64: 1e-9, np.float32: 2e-4}
# Randomized subspace iteration (4 power iterations, 10 oversamples) on a spectrum with a gap
# of ~100 between the kept and the dropped variances: error ~ (gap)^-(2q+1), far below 1e-6;
# float32 products bound it at ~1e-5.
RANDOMIZED_RTOL = {np.float64: 1e-6, np.float32: 2e-4}
EXACT = ("covariance", "tsqr", "dual")


def _as(kind, X):
    if kind == "numpy":
        return X
    if kind == "dask-regular":
        return da.from_array(X, chunks=(150, X.shape[1]))
    return da.from_array(X, chunks=((100, 250, 7, 243), (8, 12)))  # irregular rows, split columns


def _oracle(X, k):
    return SkPCA(n_components=k, svd_solver="full").fit(X.astype(np.float64))


def _assert_same_up_to_sign(a, b, rtol):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    signs = np.sign((a * b).sum(axis=-1, keepdims=True))
    np.testing.assert_allclose(a * signs, b, rtol=rtol, atol=rtol * np.abs(b).max())


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("solver", ["covariance", "tsqr", "dual", "randomized"])
@pytest.mark.parametrize("kind", ["numpy", "dask-regular", "dask-irregular"])
def test_matches_sklearn(rng, dtype, solver, kind):
    X = low_rank(rng, dtype=dtype)
    k = 4
    oracle = _oracle(X, k)
    rtol = (EXACT_RTOL if solver in EXACT else RANDOMIZED_RTOL)[dtype]
    model = PCA(k, solver=solver, random_state=0).fit(_as(kind, X))
    assert model.components_.dtype == dtype and model.explained_variance_.dtype == dtype
    np.testing.assert_allclose(model.explained_variance_, oracle.explained_variance_, rtol=rtol)
    np.testing.assert_allclose(
        model.explained_variance_ratio_, oracle.explained_variance_ratio_, rtol=rtol
    )
    np.testing.assert_allclose(model.singular_values_, oracle.singular_values_, rtol=rtol)
    np.testing.assert_allclose(model.noise_variance_, oracle.noise_variance_, rtol=10 * rtol)
    _assert_same_up_to_sign(model.components_, oracle.components_, 10 * rtol)
    Y = model.transform(_as(kind, X))
    assert (kind == "numpy") == isinstance(Y, np.ndarray)
    Y = np.asarray(Y)
    assert Y.dtype == dtype
    Yo = oracle.transform(X.astype(np.float64))
    _assert_same_up_to_sign(Y.T, Yo.T, 10 * rtol)
    Xr = np.asarray(model.inverse_transform(Y))
    np.testing.assert_allclose(
        Xr, oracle.inverse_transform(Yo), rtol=10 * rtol, atol=10 * rtol * np.abs(X).max()
    )


@pytest.mark.parametrize("kind", ["numpy", "dask"])
def test_randomized_keeps_its_precision_on_float32_data_far_from_the_origin(rng, kind):
    """Centring implicitly (X q - 1 mean^T q) in float32 loses eps * |mean| / std to
    cancellation: 1.2e-3 of the variances at a mean of 1e5 standard deviations. Such rows
    are centred explicitly; the variances match the exact ones as for centred data."""
    Z = rng.standard_normal((20000, 20)) * np.linspace(1.0, 0.01, 20)
    X = (Z + 1e5).astype(np.float32)
    exact = np.linalg.svd(X - X.mean(axis=0, dtype=np.float64), compute_uv=False)[:5] ** 2
    Xi = da.from_array(X, chunks=5000) if kind == "dask" else X
    model = pca(Xi, n_components=5, solver="randomized", random_state=0)
    got = np.asarray(model.explained_variance, np.float64) * (X.shape[0] - 1)
    np.testing.assert_allclose(got, exact, rtol=2e-6)


@pytest.mark.parametrize("solver", ["covariance", "tsqr", "single-pass"])
def test_transform_of_float32_rows_far_from_the_origin_is_exact(rng, solver):
    """The mean of float32 rows 1e5 from the origin does not fit in float32 (rounding 4e-3):
    the model keeps it in float64 and the embedding is (X - mean) W to float32's precision,
    not shifted by the mean's rounding (6e-4 of the embedding's range before)."""
    Z = rng.standard_normal((20000, 20)) * np.linspace(1.0, 0.01, 20)
    X = (Z + 1e5).astype(np.float32)
    est = PCA(5, solver=solver, random_state=0).fit(X)
    Y = est.transform(X)
    exact = (X - X.mean(axis=0, dtype=np.float64)) @ est.components_.T.astype(np.float64)
    assert Y.dtype == np.float32 and est.mean_.dtype == np.float32  # as scikit-learn's
    assert np.abs(Y - exact).max() <= 1e-6 * np.abs(exact).max()


@pytest.mark.parametrize(
    "n, dtype", [(9000, np.float32), (4096, np.float64), (3, np.float32), (0, np.float32)]
)
def test_centred_product_by_panels_is_the_expression(rng, n, dtype):
    """The transform's panel-by-panel (X - mu) W + shift: every row (panel edges, a short
    last panel, an empty block) as the whole-block expression, to the dtype's rounding."""
    from dimred_dask.methods._base import centred_product

    X = (rng.standard_normal((n, 30)) + 50.0).astype(dtype)
    mu, w = np.full(30, 50.0, dtype), rng.standard_normal((30, 4)).astype(dtype)
    shift = rng.standard_normal(4).astype(dtype)
    got = centred_product(X, mu, w, shift, dtype)
    want = (X - mu) @ w + shift
    assert got.dtype == dtype and got.shape == (n, 4)
    tol = 8 * np.finfo(dtype).eps * 30 * (np.abs(X - mu).max(initial=0) * np.abs(w).max() + 1)
    np.testing.assert_allclose(got, want, rtol=0, atol=tol)
    counts = rng.integers(0, 20, (5000, 30))  # integer rows: centred in the float dtype
    got = centred_product(
        counts, counts.mean(axis=0), w.astype(np.float64), np.zeros(4), np.float64
    )
    np.testing.assert_allclose(got, (counts - counts.mean(axis=0)) @ w, rtol=1e-12, atol=1e-10)


def test_dask_in_lazy_dask_out(rng):
    X = da.from_array(low_rank(rng), chunks=(200, 20))
    model = PCA(3).fit(X)
    Y = model.transform(X)
    assert isinstance(Y, da.Array) and Y.chunks[0] == X.chunks[0]
    assert isinstance(model.inverse_transform(Y), da.Array)
    np.testing.assert_allclose(Y.compute(), model.transform(X.compute()), rtol=1e-12, atol=1e-12)


def test_fit_on_cluster_workers(client, rng):
    """The same fit through worker processes gives the same numbers as in-process NumPy."""
    X = low_rank(rng, n=2000)
    local = PCA(3, solver="randomized", random_state=7).fit(X)
    remote = PCA(3, solver="randomized", random_state=7).fit(da.from_array(X, chunks=(300, 20)))
    np.testing.assert_allclose(remote.components_, local.components_, rtol=1e-9, atol=1e-12)
    for solver in EXACT:
        np.testing.assert_allclose(
            PCA(3, solver=solver).fit(da.from_array(X, chunks=(300, 20))).explained_variance_,
            _oracle(X, 3).explained_variance_,
            rtol=1e-9,
        )


@pytest.mark.parametrize("solver", ["covariance", "tsqr", "dual"])
def test_fraction_of_variance(rng, solver):
    X = low_rank(rng)
    for frac in (0.5, 0.9, 0.999):
        ours = PCA(frac, solver=solver).fit(X)
        theirs = SkPCA(frac, svd_solver="full").fit(X)
        assert ours.n_components_ == theirs.n_components_
        assert ours.explained_variance_ratio_.sum() >= frac


def test_fraction_refused_by_randomized(rng):
    with pytest.raises(InputError, match="randomized.*fraction"):
        PCA(0.9, solver="randomized").fit(low_rank(rng))


def test_whiten(rng):
    X = low_rank(rng)
    model = PCA(3, whiten=True).fit(X)
    Y = model.transform(X)
    np.testing.assert_allclose(np.var(Y, axis=0, ddof=1), 1.0, rtol=1e-10)
    oracle = SkPCA(3, whiten=True, svd_solver="full").fit(X)
    _assert_same_up_to_sign(Y.T, oracle.transform(X).T, 1e-8)
    np.testing.assert_allclose(
        model.inverse_transform(Y),
        oracle.inverse_transform(oracle.transform(X)),
        rtol=1e-8,
        atol=1e-8,
    )


def test_seed001_explained_variance_exercise():
    """Seed 001: covariance eigenvalues 0.99, 0.5, 2 with eigenvectors v1, v2, v3; a 2-D
    PCA keeps v3 and v1 and explains (2 + 0.99) / (2 + 0.99 + 0.5) = 0.8567 of the variance."""
    v = np.array([[-0.99, 0.09, 0.0], [0.0, 0.0, 1.0], [0.09, 0.99, 0.0]]).T
    v /= np.linalg.norm(v, axis=0)  # the seed rounds to two digits; normalise
    lam = np.array([0.99, 0.5, 2.0])
    cov = v @ np.diag(lam) @ v.T
    rng = np.random.default_rng(1)
    z = rng.standard_normal((5000, 3))
    z = (z - z.mean(0)) @ np.linalg.inv(np.linalg.cholesky(np.cov(z.T)).T)  # exact identity cov
    X = z @ np.linalg.cholesky(cov).T
    model = PCA(2).fit(X)
    assert model.explained_variance_ratio_.sum() == pytest.approx(0.8567335243553009, abs=1e-9)
    np.testing.assert_allclose(model.explained_variance_, [2.0, 0.99], rtol=1e-9)
    _assert_same_up_to_sign(model.components_, v[:, [2, 0]].T, 1e-9)
    # the covariance of Y is diag(2, 0.99) (question 3 of the exercise)
    np.testing.assert_allclose(np.cov(model.transform(X).T), np.diag([2.0, 0.99]), atol=1e-9)


def test_dual_pca_seed000_encode_reconstruct(rng):
    """Seed 000, dual PCA with d >> n. The seed's X is d x n (points in columns) with
    X = U S V^T, V the eigenvectors of X^T X (n x n). Encode: Y = S V^T; reconstruct:
    X^ = X V V^T; encode a test point: y = S^-1 V^T X^T x. Here rows are points, so the
    seed's X is our Xc.T and its V is the left factor of our Xc."""
    X = rng.standard_normal((12, 500)) + 1.0
    model = PCA(5, solver="dual").fit(X)
    Xc = X - X.mean(0)
    V, s, _ = np.linalg.svd(Xc, full_matrices=False)  # Xc = V S U^T
    V, S = V[:, :5], s[:5]
    Y = model.transform(X)
    _assert_same_up_to_sign(Y.T, np.diag(S) @ V.T, 1e-9)  # Y^T = S V^T
    x = rng.standard_normal(500)
    y = np.diag(1 / S) @ V.T @ Xc @ (x - X.mean(0))  # y = S^-1 V^T X^T x
    signs = np.sign((Y * (V * S)).sum(axis=0))  # the sign of each component, from training
    np.testing.assert_allclose(model.transform(x[None])[0] * signs, y, rtol=1e-9)
    np.testing.assert_allclose(
        model.inverse_transform(Y) - X.mean(0),
        V @ V.T @ Xc,  # X V V^T
        atol=1e-9,
    )


def test_same_seed_same_result_and_sign_fixed(rng):
    X = low_rank(rng, n=800, d=60)
    a = PCA(4, solver="randomized", random_state=3).fit(X).components_
    b = PCA(4, solver="randomized", random_state=3).fit(X).components_
    np.testing.assert_array_equal(a, b)
    for comp in PCA(4).fit(X).components_:
        assert comp[np.argmax(np.abs(comp))] > 0


def test_does_not_mutate_input(rng):
    X = low_rank(rng)
    before = X.copy()
    PCA(3).fit_transform(X)
    np.testing.assert_array_equal(X, before)


def test_function_form_returns_model(rng):
    X = low_rank(rng)
    model = pca(X, n_components=3)
    np.testing.assert_allclose(model.transform(X), PCA(3).fit_transform(X))
    assert model.solver == "covariance" and model.passes == 1


def test_auto_solver_choice(rng):
    assert PCA(2).fit(low_rank(rng)).solver_ == "covariance"
    assert PCA(2).fit(rng.standard_normal((20, 5000))).solver_ == "dual"


def _flat_tail(rng, n=3000, d=300):
    """A few strong directions, then a nearly flat spectrum: slow for subspace iteration."""
    X = rng.standard_normal((n, d)) * np.r_[np.geomspace(8, 3, 6), np.linspace(1.05, 0.95, d - 6)]
    return X + 5.0


def test_randomized_krylov_reaches_its_tol_on_a_flat_spectrum(rng):
    X = _flat_tail(rng)
    exact = SkPCA(20, svd_solver="full").fit(X).explained_variance_
    short = PCA(20, solver="randomized", n_iter=2, random_state=0).fit(X)
    err_short = np.max(np.abs(short.explained_variance_ - exact) / exact)
    model = PCA(20, solver="randomized", n_iter=40, tol=1e-5, random_state=0).fit(X)
    rec = model.convergence_[0]
    assert rec["converged"] and rec["status"] == "converged" and rec["residual"] <= 1e-5
    assert rec["passes"] < 42  # stopped early, at the tolerance
    err = np.max(np.abs(model.explained_variance_ - exact) / exact)
    assert err < 1e-5 < err_short
    ref = SkPCA(20, svd_solver="full").fit(X).components_
    np.testing.assert_allclose(np.abs(np.sum(model.components_ * ref, axis=1))[:6], 1, atol=1e-6)


def test_randomized_tol_not_reached_is_unconverged_and_bad_tol_refused(rng):
    X = _flat_tail(rng)
    rec = PCA(20, solver="randomized", n_iter=1, tol=1e-8, random_state=0).fit(X).convergence_[0]
    assert not rec["converged"] and rec["residual"] > rec["tol"] == 1e-8
    assert rec["passes"] == 3 and "stopped after n_iter + 1 = 2" in rec["status"]
    for bad in (-1.0, float("nan"), "small"):
        with pytest.raises(InputError, match="tol >= 0"):
            PCA(2, solver="randomized", tol=bad).fit(X)


def test_randomized_krylov_same_result_from_dask_chunks(rng):
    X = _flat_tail(rng, n=1200, d=80)
    a = PCA(10, solver="randomized", n_iter=6, random_state=1).fit(X)
    b = PCA(10, solver="randomized", n_iter=6, random_state=1).fit(
        da.from_array(X, chunks=(250, 80))
    )
    np.testing.assert_allclose(a.explained_variance_, b.explained_variance_, rtol=1e-10)
    np.testing.assert_allclose(a.components_, b.components_, atol=1e-8)
