"""Classical and landmark MDS: against PCA (Euclidean distances), a dense NumPy oracle
(non-Euclidean metrics), seed 001's worked example, precomputed-matrix validation, the
out-of-sample triangulation, save/load, and scikit-learn's estimator contract."""

from __future__ import annotations

import json
import warnings

import dask.array as da
import numpy as np
import pytest
from scipy.spatial.distance import cdist
from sklearn.decomposition import PCA as SkPCA
from sklearn.utils.estimator_checks import parametrize_with_checks

from dimred_dask.errors import InputError
from dimred_dask.methods.landmark_mds import LandmarkMDS, LandmarkMDSModel, landmark_mds
from dimred_dask.methods.mds import MDS, MDSModel, check_distance_matrix, classical_mds
from tests.data import low_rank

# Dense eigh of B and scikit-learn's SVD of Xc are both backward stable: they agree to
# ~1e-13 relative; the gap between kept (variance >= 1) and dropped (0.01) eigenvalues
# keeps the eigenvectors as accurate. 1e-9 leaves a wide margin.
EXACT_RTOL = 1e-9
# Randomized subspace iteration (4 power iterations, 10 oversamples) with a kept/dropped
# eigenvalue gap of ~100: error ~ 100^-9 relative, far below 1e-6.
RANDOMIZED_RTOL = 1e-6
# float32 data: 6e-8 relative rounding per entry, amplified by the condition of B (~1e3).
FLOAT32_RTOL = 1e-4
# Landmark MDS on exactly rank-k Euclidean data is exact (de Silva & Tenenbaum 2003): only
# rounding, amplified by triangulating from few landmarks.
LANDMARK_EXACT_RTOL = 1e-7
# On rank-3 data plus noise of variance 0.01 in 7 more dimensions, triangulating from 40
# max-min landmarks moves each point by O(noise^2 / spread); measured 3e-4 of the largest
# coordinate, 1e-2 is the stated bound.
LANDMARK_NOISY_RTOL = 1e-2


def _same_up_to_sign(a, b, rtol):
    """Columns of ``a`` equal those of ``b`` up to a sign each, relative to max|b|."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    signs = np.sign((a * b).sum(axis=0))
    np.testing.assert_allclose(a * signs, b, rtol=0, atol=rtol * np.abs(b).max())


def _oracle_b(D):
    n = D.shape[0]
    J = np.eye(n) - np.ones((n, n)) / n
    B = -0.5 * J @ (D**2) @ J
    w, v = np.linalg.eigh((B + B.T) / 2)
    return w[::-1], v[:, ::-1]


@pytest.fixture(scope="module")
def data():
    return low_rank(np.random.default_rng(7), n=300, d=10, rank=3)


@pytest.fixture(scope="module")
def exact_rank3():
    """Exactly rank-3 Euclidean data, shifted off the origin, distinct variances."""
    rng = np.random.default_rng(3)
    w = rng.standard_normal((3, 8)) * np.array([4.0, 2.0, 1.0])[:, None]
    return rng.standard_normal((400, 3)) @ w + 5.0


# ----------------------------------------------------------------- Euclidean = PCA


@pytest.mark.parametrize(
    "solver,rtol", [("dense", EXACT_RTOL), ("randomized", RANDOMIZED_RTOL), ("lanczos", EXACT_RTOL)]
)
def test_euclidean_mds_is_pca(data, solver, rtol):
    k = 3
    pca = SkPCA(k, svd_solver="full").fit(data)
    model = MDS(k, solver=solver).fit(data)
    assert isinstance(model.embedding_, np.ndarray) and model.solver_ == solver
    _same_up_to_sign(model.embedding_, pca.transform(data), rtol)
    n = data.shape[0]
    np.testing.assert_allclose(model.eigenvalues_ / (n - 1), pca.explained_variance_, rtol=rtol)
    np.testing.assert_allclose(
        model.explained_variance_ratio_, pca.explained_variance_ratio_, rtol=rtol
    )
    assert model.negative_ratio_ == 0.0 and model.negative_eigenvalues_.size == 0
    if solver == "dense":
        assert model.negative_mass_ == 0.0


@pytest.mark.parametrize("solver,rtol", [("dense", EXACT_RTOL), ("randomized", RANDOMIZED_RTOL)])
def test_euclidean_mds_is_pca_on_dask(client, data, solver, rtol):
    X = da.from_array(data, chunks=(70, 10))  # irregular last chunk: 70, 70, 70, 70, 20
    model = MDS(3, solver=solver).fit(X)
    assert isinstance(model.embedding_, da.Array) and model.embedding_.chunks[0] == X.chunks[0]
    _same_up_to_sign(
        model.embedding_.compute(), SkPCA(3, svd_solver="full").fit_transform(data), rtol
    )
    local = MDS(3, solver=solver).fit(data)
    np.testing.assert_allclose(model.eigenvalues_, local.eigenvalues_, rtol=rtol)
    Y = model.transform(X)
    assert isinstance(Y, da.Array)
    np.testing.assert_allclose(
        Y.compute(), model.embedding_.compute(), rtol=0, atol=rtol * np.abs(local.embedding_).max()
    )


def test_float32_stays_float32(data):
    X = data.astype(np.float32)
    model = MDS(3).fit(X)
    assert model.embedding_.dtype == np.float32 and model.transform(X).dtype == np.float32
    _same_up_to_sign(
        model.embedding_, SkPCA(3, svd_solver="full").fit_transform(data), FLOAT32_RTOL
    )


def test_seed001_explained_fraction():
    """Seed 001: covariance eigenvalues 0.99, 0.5, 2 with eigenvectors v1, v2, v3; the 2-D
    projection keeps v3 and v1 and explains (2 + 0.99) / (2 + 0.99 + 0.5) = 0.8567. MDS on
    Euclidean distances is PCA: B's eigenvalues are (n - 1) times the covariance's."""
    v = np.array([[-0.99, 0.09, 0.0], [0.0, 0.0, 1.0], [0.09, 0.99, 0.0]]).T
    v /= np.linalg.norm(v, axis=0)  # the seed rounds to two digits; v1 . v3 = 0 already
    np.testing.assert_allclose(v.T @ v, np.eye(3), atol=1e-15)
    lam = np.array([0.99, 0.5, 2.0])
    z = np.random.default_rng(1).standard_normal((500, 3))
    z -= z.mean(axis=0)
    z = z @ np.linalg.inv(np.linalg.cholesky(np.cov(z.T)).T)  # sample covariance exactly I
    X = z @ (v @ np.diag(np.sqrt(lam)) @ v.T)  # sample covariance exactly v diag(lam) v^T
    model = MDS(2).fit(X)
    assert model.explained_variance_ratio_.sum() == pytest.approx(0.8567, abs=1e-4)
    assert model.explained_variance_ratio_.sum() == pytest.approx(2.99 / 3.49, abs=1e-12)
    np.testing.assert_allclose(model.eigenvalues_ / (X.shape[0] - 1), [2.0, 0.99], rtol=1e-10)
    # the embedding is Y = A Xc with A = [v3; v1] (question 1 of the exercise), up to sign
    _same_up_to_sign(model.embedding_, (X - X.mean(0)) @ v[:, [2, 0]], 1e-10)


# ----------------------------------------------------------------- non-Euclidean


@pytest.mark.parametrize("metric", ["manhattan", "chebyshev"])
def test_non_euclidean_against_dense_oracle(metric):
    X = np.random.default_rng(5).standard_normal((120, 4))
    w, v = _oracle_b(cdist(X, X, {"manhattan": "cityblock"}.get(metric, metric)))
    k = 3
    model = classical_mds(X, n_components=k, metric=metric, solver="dense")
    np.testing.assert_allclose(model.eigenvalues, w[:k], rtol=1e-10)
    _same_up_to_sign(model.embedding, v[:, :k] * np.sqrt(w[:k]), 1e-9)
    tol = model.info["rounding_tol"]
    negative = np.sort(w[w < -tol])
    assert negative.size > 0
    np.testing.assert_allclose(model.negative_eigenvalues, negative, rtol=1e-9)
    assert model.negative_mass == pytest.approx(-negative.sum() / np.abs(w).sum(), rel=1e-9)
    assert model.negative_mass > 0
    ratio = -w[-1] / w[0]
    assert model.negative_ratio == pytest.approx(ratio, rel=1e-9)
    lanczos = classical_mds(X, n_components=k, metric=metric, solver="lanczos")
    np.testing.assert_allclose(lanczos.negative_eigenvalues, negative[:k], rtol=1e-8)
    assert lanczos.negative_ratio == pytest.approx(ratio, rel=1e-8)
    # subspace iteration on lambda_max I - B: a lower bound of |lambda_min|
    rand = classical_mds(X, n_components=k, metric=metric, solver="randomized")
    assert 0 < rand.negative_ratio <= ratio * (1 + 1e-9)
    assert rand.info["negative_ratio_is_lower_bound"] and rand.negative_mass is None


# ----------------------------------------------------------------- precomputed


def _bad(kind):
    D = cdist(*(2 * [np.random.default_rng(2).standard_normal((12, 3))]))
    if kind == "not square":
        return D[:, :10], r"square .* shape \(12, 10\)"
    if kind == "asymmetric":
        D[3, 7] += 0.5
        return D, r"symmetric distance matrix; found D\[3, 7\] = .* but D\[7, 3\] ="
    if kind == "diagonal":
        D[2, 2] = 1.0
        return D, r"zero diagonal .* D\[2, 2\] = 1"
    if kind == "negative":
        D[3, 7] = D[7, 3] = -0.5
        return D, r"D\[3, 7\] = -0\.5 < 0"
    D[1, 4] = D[4, 1] = np.nan
    return D, r"finite distances; found 2 NaN in rows 1 and 4 of D \(the first at D\[1, 4\]\)"


@pytest.mark.parametrize("kind", ["not square", "asymmetric", "diagonal", "negative", "nan"])
def test_precomputed_refused_numpy(kind):
    D, message = _bad(kind)
    with pytest.raises(InputError, match=message) as info:
        MDS(2, metric="precomputed").fit(D)
    assert info.value.fix


@pytest.mark.parametrize("kind", ["asymmetric", "negative", "nan"])
def test_precomputed_refused_dask(client, kind):
    D, message = _bad(kind)
    with pytest.raises(InputError, match=message):
        check_distance_matrix(da.from_array(D, chunks=5))


def test_precomputed_matches_data_input(client, data):
    D = cdist(data, data)
    ref = MDS(3).fit(data)
    for D_in in (D, da.from_array(D, chunks=(100, 150))):
        model = MDS(3, metric="precomputed").fit(D_in)
        assert isinstance(model.embedding_, da.Array) == isinstance(D_in, da.Array)
        assert model.n_features_in_ == data.shape[0]
        np.testing.assert_allclose(
            np.asarray(model.embedding_),
            ref.embedding_,
            rtol=0,
            atol=1e-9 * np.abs(ref.embedding_).max(),
        )
        assert model.stress_ == pytest.approx(ref.stress_, rel=1e-6)
    # new points: transform takes their distances to the training points
    new = data[:5] + 0.3
    np.testing.assert_allclose(
        model.transform(cdist(new, data)),
        ref.transform(new),
        rtol=0,
        atol=1e-9 * np.abs(ref.embedding_).max(),
    )


def test_precomputed_rounding_asymmetry_is_cleaned():
    D = cdist(*(2 * [np.random.default_rng(4).standard_normal((20, 3))]))
    D[0, 1] *= 1 + 1e-12
    D[5, 5] = 1e-14
    clean = check_distance_matrix(D)
    assert np.array_equal(clean, clean.T) and not np.diag(clean).any()
    assert D[5, 5] == 1e-14  # the caller's array is untouched


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("square", [True, False])
def test_double_centred_equals_the_centring_matrices(dtype, square):
    from dimred_dask.blocks.centring import double_centred

    x = np.random.default_rng(5).standard_normal((70, 4))
    M = cdist(x, x).astype(dtype)
    S = M.astype(np.float64) ** 2 if square else M.astype(np.float64)
    J = np.eye(70) - 1.0 / 70
    B, r, g = double_centred(M, square=square)
    np.testing.assert_allclose(B, -0.5 * J @ S @ J, rtol=0, atol=1e-12 * np.abs(S).max())
    np.testing.assert_allclose(r, S.mean(axis=1), rtol=1e-14)
    assert g == pytest.approx(S.mean(), rel=1e-14) and B.dtype == np.float64
    if dtype == np.float64:  # written over its own input
        same, _, _ = double_centred(M, square=square, out=M)
        assert same is M
        np.testing.assert_allclose(M, B, rtol=0, atol=0)


@pytest.mark.parametrize("solver", ["dense", "randomized"])
def test_unchecked_input_gives_the_checked_result(solver):
    """check_input=False (a matrix the caller made symmetric) skips only the validation."""
    x = np.random.default_rng(6).standard_normal((300, 5))
    D = cdist(x, x, "cityblock")
    checked = classical_mds(D, n_components=3, metric="precomputed", solver=solver)
    unchecked = classical_mds(
        D, n_components=3, metric="precomputed", solver=solver, check_input=False
    )
    np.testing.assert_array_equal(unchecked.embedding, checked.embedding)
    np.testing.assert_array_equal(unchecked.eigenvalues, checked.eigenvalues)


# ----------------------------------------------------------------- out of sample


@pytest.mark.parametrize(
    "metric,solver",
    [
        ("euclidean", "dense"),
        ("euclidean", "randomized"),
        ("manhattan", "dense"),
        ("cosine", "dense"),
    ],
)
def test_transform_of_training_points_is_the_embedding(data, metric, solver):
    model = MDS(3, metric=metric, solver=solver).fit(data)
    scale = np.abs(model.embedding_).max()
    np.testing.assert_allclose(model.transform(data), model.embedding_, rtol=0, atol=1e-9 * scale)


def test_landmark_transform_of_training_points_is_the_embedding(data):
    model = LandmarkMDS(2, n_landmarks=40).fit(data)
    np.testing.assert_allclose(model.transform(data), model.embedding_, rtol=0, atol=1e-12)
    np.testing.assert_allclose(model.fit_transform(data), model.embedding_, rtol=0, atol=0)


# ----------------------------------------------------------------- landmark MDS


@pytest.mark.parametrize("landmarks", ["maxmin", "uniform"])
def test_landmark_all_points_is_classical(data, landmarks):
    n = data.shape[0]
    model = LandmarkMDS(3, n_landmarks=n, landmarks=landmarks).fit(data)
    assert np.array_equal(model.landmark_indices_, np.arange(n))
    ref = MDS(3).fit(data)
    _same_up_to_sign(model.embedding_, ref.embedding_, EXACT_RTOL)
    np.testing.assert_allclose(model.eigenvalues_, ref.eigenvalues_, rtol=EXACT_RTOL)


def test_landmark_few_landmarks_on_low_rank_data(exact_rank3, data):
    model = landmark_mds(exact_rank3, n_components=3, n_landmarks=20)
    assert model.n_landmarks == 20 and model.landmarks.shape == (20, 8)
    _same_up_to_sign(
        model.transform(exact_rank3), MDS(3).fit_transform(exact_rank3), LANDMARK_EXACT_RTOL
    )
    assert model.stress < 1e-8
    noisy = LandmarkMDS(3, n_landmarks=40).fit(data)
    _same_up_to_sign(noisy.embedding_, MDS(3).fit_transform(data), LANDMARK_NOISY_RTOL)


def test_landmark_dask_is_lazy_on_the_cluster(client, data):
    X = da.from_array(data, chunks=(70, 10))
    model = LandmarkMDS(3, n_landmarks=40, random_state=3).fit(X)
    Y = model.embedding_
    assert isinstance(Y, da.Array) and Y.chunks == (X.chunks[0], (3,))
    # one task per row block on top of X's graph: no n x n matrix anywhere
    assert len(Y.__dask_graph__()) <= 3 * X.numblocks[0]
    local = LandmarkMDS(3, n_landmarks=40, random_state=3).fit(data)
    assert np.array_equal(model.landmark_indices_, local.landmark_indices_)
    np.testing.assert_allclose(Y.compute(), local.embedding_, rtol=0, atol=1e-10)
    assert isinstance(model.transform(X), da.Array)
    assert isinstance(LandmarkMDS(3, n_landmarks=40).fit_transform(X), da.Array)


def test_landmark_stress_is_sampled_above_2000_rows():
    X = low_rank(np.random.default_rng(9), n=2500, d=6, rank=2)
    model = landmark_mds(X, n_components=2, n_landmarks=50, landmarks="uniform")
    assert model.info["stress_rows"] == 2000 and model.info["stress_exact"] is False
    assert 0 < model.stress < 0.05


def test_non_euclidean_landmark_reports_negative_part():
    X = np.random.default_rng(5).standard_normal((200, 4))
    model = LandmarkMDS(2, n_landmarks=60, metric="manhattan").fit(X)
    assert model.negative_mass_ > 0 and model.negative_eigenvalues_.size > 0


# ----------------------------------------------------------------- save / load


def test_models_save_and_load(data):
    for model in (
        classical_mds(data, n_components=2),
        classical_mds(cdist(data, data), n_components=2, metric="precomputed"),
        landmark_mds(data, n_components=2, n_landmarks=30),
    ):
        arrays, scalars = model.arrays(), model.scalars()
        assert all(isinstance(a, np.ndarray) for a in arrays.values())
        scalars = json.loads(json.dumps(scalars))  # a manifest holds them as JSON
        back = type(model).from_arrays(arrays, scalars)
        assert isinstance(back, (MDSModel, LandmarkMDSModel))
        probe = cdist(data[:7], data) if model.metric["metric"] == "precomputed" else data[:7]
        np.testing.assert_array_equal(back.transform(probe), model.transform(probe))
        assert back.stress == model.stress and back.info == model.info


# ----------------------------------------------------------------- refusals


@pytest.mark.parametrize(
    "make,message",
    [
        (lambda: MDS(12), r"n_components as an int in \[1, 11\].*found n_components=12"),
        (lambda: MDS(0), r"n_components as an int in \[1, 11\]"),
        (lambda: MDS(2, solver="svd"), r"solver must be one of"),
        (lambda: MDS(2, metric="hamming"), r"metric as one of .*'precomputed'; found 'hamming'"),
        (lambda: LandmarkMDS(12), r"n_components as an int in \[1, 11\]"),
        (lambda: LandmarkMDS(2, n_landmarks=13), r"n_landmarks as an int in \[3, 12\].*=13"),
        (lambda: LandmarkMDS(2, n_landmarks=2), r"n_landmarks as an int in \[3, 12\]"),
        (lambda: LandmarkMDS(2, landmarks="kmeans"), r"landmarks as one of maxmin, uniform"),
        (lambda: LandmarkMDS(2, metric="precomputed"), r"needs the data rows"),
    ],
)
def test_bad_parameters_refused(make, message):
    X = np.random.default_rng(0).standard_normal((12, 3))
    with pytest.raises(InputError, match=message) as info:
        make().fit(X)
    assert info.value.fix


def test_rank_deficient_components_are_zeroed_with_a_warning():
    X = np.random.default_rng(0).standard_normal((30, 1))
    with pytest.warns(UserWarning, match="1 of the 2 requested components"):
        model = MDS(2).fit(X)
    assert not model.embedding_[:, 1].any()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        np.testing.assert_allclose(model.transform(X), model.embedding_, atol=1e-12)


# ----------------------------------------------------------------- scikit-learn contract


@parametrize_with_checks(
    [
        MDS(),
        MDS(1, solver="randomized"),
        LandmarkMDS(),
        LandmarkMDS(n_landmarks=8, landmarks="uniform"),
    ]
)
def test_sklearn_contract(estimator, check):
    check(estimator)


def test_mds_in_memory_refuses_what_would_not_fit(monkeypatch, rng):
    """MDS of rows in memory holds their n x n squared distances and B (60 000 float32 rows:
    about 47 GiB, where the allocation failed after a minute before). Over 80 % of the memory
    available it is refused at once with the two ways out; dask rows with an iterative solver
    hold nothing n x n and are not refused."""
    import dask.array as da

    import dimred_dask._validation as validation

    X = rng.standard_normal((300, 4))
    monkeypatch.setattr(validation, "MEMORY_SHARE", 1e-9)  # nothing n x n fits
    with pytest.raises(InputError, match=r"300 x 300 squared distances") as err:
        MDS(2).fit(X)
    assert "dask array" in str(err.value) and "LandmarkMDS" in str(err.value)
    model = MDS(2, solver="randomized").fit(da.from_array(X, chunks=100))
    assert model.embedding_.shape == (300, 2)


@pytest.mark.parametrize("chunks", [(37, 200), (64, 41), (200, 200)])
def test_principal_submatrix_of_a_chunked_matrix(chunks):
    """The stress sample of a dask D: the entries at the sampled rows and columns, in order,
    from any blocking (rows and columns cut apart, blocks holding none of the rows)."""
    from dimred_dask.methods._precomputed import principal_submatrix

    D = np.random.default_rng(3).random((200, 200))
    for idx in (np.array([0, 5, 36, 37, 38, 150, 199]), np.arange(200), np.array([64])):
        got = principal_submatrix(da.from_array(D, chunks=chunks), idx)
        np.testing.assert_array_equal(got.compute(), D[np.ix_(idx, idx)])
    np.testing.assert_array_equal(principal_submatrix(D, idx), D[np.ix_(idx, idx)])


def test_passes_over_a_dask_d_and_the_callers_row_means():
    """Randomized MDS of a dask D: a pass that checks D and takes its row means, then
    n_iter + 2 for both ends of the spectrum (n_iter + 1 without the negative part); an inner
    caller's row means of D squared skip the first pass and give the same model."""
    from scipy.spatial.distance import cdist

    X = np.random.default_rng(2).standard_normal((300, 3))
    D = cdist(X, X, "cityblock")  # not Euclidean: B has a negative part
    Dd = da.from_array(D, chunks=(100, 300))
    kw = {"metric": "precomputed", "solver": "randomized", "n_components": 2}
    full = classical_mds(Dd, **kw)
    assert full.info["passes"] == 1 + 6
    assert classical_mds(Dd, measure_negative=False, **kw).info["passes"] == 1 + 5
    r = (D**2).mean(axis=1)
    given = classical_mds(Dd, check_input=False, stats=(r, r.mean()), **kw)
    assert given.info["passes"] == 6
    np.testing.assert_allclose(given.eigenvalues, full.eigenvalues, rtol=1e-12)
    np.testing.assert_allclose(given.negative_eigenvalues, full.negative_eigenvalues, rtol=1e-9)
    _same_up_to_sign(given.embedding, full.embedding, 1e-9)
