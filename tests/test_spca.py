"""Supervised PCA, kernel supervised PCA, Bair's screening and HSIC against dense NumPy/SciPy
oracles that form H, B, K and Q explicitly (small n), scikit-learn's PCA, and the API rules."""

from __future__ import annotations

import dask.array as da
import numpy as np
import pytest
import scipy.linalg
from sklearn.decomposition import PCA as SkPCA
from sklearn.utils.estimator_checks import parametrize_with_checks

from dimred_dask.errors import DimredWarning, InputError
from dimred_dask.methods.hsic import hsic
from dimred_dask.methods.spca import (
    KernelSupervisedPCA,
    KernelSupervisedPCAModel,
    SupervisedPCA,
    SupervisedPCAModel,
    kernel_supervised_pca,
    supervised_pca,
)
from tests.data import low_rank

# Linear SPCA against the dense oracle eigh(X^T H B H X): both exact in float64; the SVD of
# the thin C = Xc^T Delta and eigh of Q = C C^T agree to rounding (measured 2e-15 here), so
# 1e-9 leaves room for the conditioning of the spectrum on other seeds.
ORACLE_RTOL = 1e-9
# float32 input: 6e-8 relative rounding of X, amplified by the eigengaps (measured 4e-8).
FLOAT32_RTOL = 1e-4
# Gaussian label kernel: the Nyström factor on all n labels drops eigenvalues of W below
# 1e-10 of the largest (linalg.nystrom.RANK_TOL), so B is exact to ~1e-10 relative; measured
# component error 1e-12, eigenvalues 1e-11.
GAUSSIAN_LABEL_RTOL = 1e-8
# Kernel SPCA against scipy.linalg.eigh(K H B H K, K + eps I) with eps = 1e-10 trace(K) / n:
# the regularisation moves the solution by ~eps / (the K eigenvalues the solution lives on),
# measured 1e-10 (eigenvalues) and 4e-11 (embeddings) here; 1e-6 allows for other spectra.
KSPCA_ORACLE_RTOL = 1e-6
# Nyström with m = n landmarks reproduces K up to the dropped eigenvalues of W (< 1e-10
# relative): the embeddings agree to rounding (measured 4e-15).
NYSTROM_FULL_RTOL = 1e-8
# Nyström with m = n / 2 k-means++ landmarks, gamma = 1 / (median squared distance): kernel
# error measured 2.4e-4 on held-out rows (relative Frobenius), eigenvalues then agree to 1e-4
# and embeddings to 1.1e-3 of their largest entry; 1e-2 is the stated bound.
NYSTROM_HALF_RTOL = 1e-2
# dask (blockwise, tree-merged) against NumPy: same float64 arithmetic, different order.
DASK_RTOL = 1e-10


def _same_up_to_sign(a, b, rtol):
    """Rows of ``a`` equal rows of ``b`` up to one sign per row."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    signs = np.sign((a * b).sum(axis=-1, keepdims=True))
    np.testing.assert_allclose(a * signs, b, rtol=rtol, atol=rtol * np.abs(b).max())


def _dense_spca(X, B, k):
    """The seed's algorithm verbatim: Q = X^T H B H X (rows = points), top-k eigenpairs."""
    n = X.shape[0]
    H = np.eye(n) - np.ones((n, n)) / n
    w, v = np.linalg.eigh(X.T @ H @ B @ H @ X)
    return w[::-1][:k], v[:, ::-1][:, :k].T


def _classes(rng, n=240, d=10, n_classes=3, dtype=np.float64):
    y = rng.integers(0, n_classes, n)
    X = low_rank(rng, n=n, d=d)
    X[:, :3] += 2.0 * rng.standard_normal((n_classes, 3))[y]
    return X.astype(dtype), y


def _as(kind, X):
    if kind == "numpy":
        return X
    if kind == "dask":
        return da.from_array(X, chunks=(70, X.shape[1]))
    return da.from_array(X, chunks=((100, 13, 90, X.shape[0] - 203), (4, X.shape[1] - 4)))


# ---------------------------------------------------------------- linear SPCA


def test_identity_label_kernel_is_pca(rng):
    X = low_rank(rng, n=300, d=8)
    n = X.shape[0]
    oracle = SkPCA(3, svd_solver="full").fit(X)
    for model in (
        SupervisedPCA(3, label_kernel="identity").fit(X),
        SupervisedPCA(3).fit(X, np.arange(n)),
    ):  # delta with n classes: B = I too
        _same_up_to_sign(model.components_, oracle.components_, ORACLE_RTOL)
        np.testing.assert_allclose(
            model.eigenvalues_, oracle.explained_variance_ * (n - 1), rtol=ORACLE_RTOL
        )
    vals, comps = _dense_spca(X, np.eye(n), 3)
    _same_up_to_sign(model.components_, comps, ORACLE_RTOL)


@pytest.mark.parametrize("kind", ["numpy", "dask", "dask-irregular"])
def test_delta_labels_match_dense_oracle(client, rng, kind):
    X, y = _classes(rng)
    vals, comps = _dense_spca(X, (y[:, None] == y[None, :]).astype(float), 2)
    labels = y if kind != "dask" else da.from_array(y, chunks=50)  # other chunks than X
    model = SupervisedPCA(2).fit(_as(kind, X), labels)
    np.testing.assert_allclose(model.eigenvalues_, vals, rtol=ORACLE_RTOL)
    _same_up_to_sign(model.components_, comps, ORACLE_RTOL)
    np.testing.assert_allclose(model.mean_, X.mean(axis=0), rtol=ORACLE_RTOL)
    Y = model.transform(_as(kind, X))
    assert (kind == "numpy") == isinstance(Y, np.ndarray)
    if kind != "numpy":
        assert Y.chunks[0] == _as(kind, X).chunks[0]
        assert isinstance(model.inverse_transform(Y), da.Array)
    np.testing.assert_allclose(
        np.asarray(Y),
        (X - X.mean(0)) @ model.components_.T,
        rtol=DASK_RTOL,
        atol=DASK_RTOL * np.abs(X).max(),
    )
    Xr = np.asarray(model.inverse_transform(np.asarray(Y)))
    P = model.components_.T @ model.components_
    np.testing.assert_allclose(Xr, (X - X.mean(0)) @ P + X.mean(0), rtol=1e-9, atol=1e-9)


def test_float32_kept(rng):
    X, y = _classes(rng, dtype=np.float32)
    vals, comps = _dense_spca(X.astype(np.float64), (y[:, None] == y[None, :]).astype(float), 2)
    model = SupervisedPCA(2).fit(X, y)
    assert model.components_.dtype == np.float32 and model.transform(X).dtype == np.float32
    _same_up_to_sign(model.components_, comps, FLOAT32_RTOL)


def test_linear_and_gaussian_label_kernels_match_oracle(rng):
    n = 200
    X = low_rank(rng, n=n, d=6)
    Y = np.column_stack([X[:, 0] - X[:, 3], np.sin(X[:, 1])]) + 0.1 * rng.standard_normal((n, 2))
    vals, comps = _dense_spca(X, Y @ Y.T, 2)
    model = supervised_pca(X, Y, n_components=2, label_kernel="linear")
    np.testing.assert_allclose(model.eigenvalues, vals, rtol=ORACLE_RTOL)
    _same_up_to_sign(model.components, comps, ORACLE_RTOL)
    t = Y[:, 0]
    B = np.exp(-0.5 * (t[:, None] - t[None, :]) ** 2)
    vals, comps = _dense_spca(X, B, 2)
    model = supervised_pca(
        X, t, n_components=2, label_kernel="gaussian", label_gamma=0.5, n_label_landmarks=n
    )
    np.testing.assert_allclose(model.eigenvalues, vals, rtol=GAUSSIAN_LABEL_RTOL)
    _same_up_to_sign(model.components, comps, GAUSSIAN_LABEL_RTOL)


def _fisher_and_accuracy(z, y):
    """Fisher's ratio (m1 - m0)^2 / (s0^2 + s1^2) of a 1-D projection, and the accuracy of
    the midpoint threshold between the two class means."""
    z0, z1 = z[y == 0], z[y == 1]
    fisher = (z1.mean() - z0.mean()) ** 2 / (z0.var() + z1.var())
    pred = (z > (z0.mean() + z1.mean()) / 2) == (z1.mean() > z0.mean())
    return fisher, float(np.mean(pred == (y == 1)))


def test_label_signal_in_low_variance_direction(rng):
    # SPCA's direction with delta labels is Xc^T Delta, the between-class mean difference (not
    # Fisher's whitened one): its noise from the high-variance axes shrinks like 1/sqrt(n)
    n = 4000
    y = rng.integers(0, 2, n)
    X = rng.standard_normal((n, 5)) * np.array([4.0, 3.0, 2.0, 1.5, 0.3])
    X[:, 4] += np.where(y == 1, 1.0, -1.0)  # the classes differ only along the last axis
    X = X @ scipy.linalg.qr(rng.standard_normal((5, 5)))[0]  # hide the axes
    f_spca, acc_spca = _fisher_and_accuracy(SupervisedPCA(1).fit_transform(X, y)[:, 0], y)
    f_pca, acc_pca = _fisher_and_accuracy(SkPCA(1).fit_transform(X)[:, 0], y)
    assert acc_spca > 0.95 and acc_pca < 0.7, (acc_spca, acc_pca)
    assert f_spca > 100 * f_pca, (f_spca, f_pca)


def test_bair_screening_keeps_informative_features(rng):
    n, d = 300, 20
    X = rng.standard_normal((n, d)) + 5.0
    informative = [2, 5, 11]
    t = X[:, informative].sum(axis=1) + 0.3 * rng.standard_normal(n)
    model = supervised_pca(X, t, n_components=1, label_kernel="linear", bair_n_features=3)
    np.testing.assert_array_equal(model.selected_features, informative)
    dropped = np.setdiff1d(np.arange(d), informative)
    assert np.all(model.components[:, dropped] == 0)
    _same_up_to_sign(
        model.components[:, informative], SkPCA(1).fit(X[:, informative]).components_, ORACLE_RTOL
    )
    # seed's scores (centred): s_j = Xc_j^T yc / ||Xc_j||
    Xc, tc = X - X.mean(0), t - t.mean()
    np.testing.assert_allclose(
        model.feature_scores, np.abs(Xc.T @ tc) / np.linalg.norm(Xc, axis=0), rtol=ORACLE_RTOL
    )
    threshold = 0.5 * np.sort(model.feature_scores)[-3]
    by_threshold = supervised_pca(
        X, t, n_components=1, label_kernel="linear", bair_threshold=threshold
    )
    np.testing.assert_array_equal(by_threshold.selected_features, informative)
    y = (t > np.median(t)).astype(int)  # classes: max over the one-hot columns
    by_class = SupervisedPCA(1, bair_n_features=3).fit(X, y)
    np.testing.assert_array_equal(by_class.selected_features_, informative)


def test_components_past_the_label_rank_warn(rng):
    X, y = _classes(rng, n_classes=2)
    with pytest.warns(DimredWarning, match="only 1 direction.*components 2-3 are"):
        model = SupervisedPCA(3).fit(X, y)
    np.testing.assert_allclose(model.components_ @ model.components_.T, np.eye(3), atol=1e-12)
    assert model.eigenvalues_[1] == 0 and model.eigenvalues_[2] == 0


# ---------------------------------------------------------------- kernel SPCA


def _dense_kspca(K, B, k):
    """The seed's generalised eigenproblem K H B H K beta = lambda K beta, K regularised by
    eps = 1e-10 trace(K) / n; returns (eigenvalues, embedding K beta)."""
    n = K.shape[0]
    H = np.eye(n) - np.ones((n, n)) / n
    eps = 1e-10 * np.trace(K) / n
    w, beta = scipy.linalg.eigh(K @ H @ B @ H @ K, K + eps * np.eye(n))
    return w[::-1][:k], K @ beta[:, ::-1][:, :k]


@pytest.mark.parametrize(
    "kernel, params", [("gaussian", {"gamma": 0.05}), ("polynomial", {"degree": 2, "gamma": 0.1})]
)
def test_kernel_spca_dense_matches_generalised_eigenproblem(rng, kernel, params):
    from sklearn.metrics.pairwise import pairwise_kernels as sk_kernels

    X, y = _classes(rng, n=120, d=5)
    extra = {"coef0": 1.0} if kernel == "polynomial" else {}
    K = sk_kernels(X, metric={"gaussian": "rbf", "polynomial": "poly"}[kernel], **params, **extra)
    vals, emb = _dense_kspca(K, (y[:, None] == y[None, :]).astype(float), 2)
    model = KernelSupervisedPCA(2, kernel=kernel, solver="dense", **params).fit(X, y)
    np.testing.assert_allclose(model.eigenvalues_, vals, rtol=KSPCA_ORACLE_RTOL)
    _same_up_to_sign(model.embedding_.T, emb.T, KSPCA_ORACLE_RTOL)
    np.testing.assert_allclose(
        model.transform(X), model.embedding_, rtol=1e-9, atol=1e-9 * np.abs(model.embedding_).max()
    )


def test_kernel_spca_nystrom_agrees_with_dense(client, rng):
    X, y = _classes(rng, n=300, d=5)
    g = 0.002  # ~ 1 / median squared distance (432) of these points
    dense = KernelSupervisedPCA(2, gamma=g, solver="dense").fit(X, y)
    full = KernelSupervisedPCA(
        2, gamma=g, solver="nystrom", n_landmarks=300, landmarks="uniform"
    ).fit(X, y)
    np.testing.assert_allclose(full.eigenvalues_, dense.eigenvalues_, rtol=NYSTROM_FULL_RTOL)
    _same_up_to_sign(full.embedding_.T, dense.embedding_.T, NYSTROM_FULL_RTOL)
    half = KernelSupervisedPCA(2, gamma=g, solver="nystrom", n_landmarks=150).fit(X, y)
    assert half._model.info["approximation_error"] < 1e-3
    np.testing.assert_allclose(half.eigenvalues_, dense.eigenvalues_, rtol=NYSTROM_HALF_RTOL)
    _same_up_to_sign(half.embedding_.T, dense.embedding_.T, NYSTROM_HALF_RTOL)
    # the same fit through the cluster: lazy embedding, the same numbers
    Xd = da.from_array(X, chunks=(80, 5))
    on_dask = KernelSupervisedPCA(2, gamma=g, solver="nystrom", n_landmarks=150).fit(Xd, y)
    assert isinstance(on_dask.embedding_, da.Array)
    assert isinstance(on_dask.transform(Xd), da.Array)
    np.testing.assert_allclose(
        on_dask.embedding_.compute(),
        half.embedding_,
        rtol=DASK_RTOL,
        atol=DASK_RTOL * np.abs(half.embedding_).max(),
    )


def test_kernel_spca_linear_kernel_identity_labels_is_pca(rng):
    X = low_rank(rng, n=200, d=6)
    model = KernelSupervisedPCA(3, kernel="linear", label_kernel="identity").fit(X)  # no y
    oracle = SkPCA(3, svd_solver="full").fit(X)
    emb = model.embedding_ - model.embedding_.mean(axis=0)  # the seed's beta^T K: not centred
    _same_up_to_sign(emb.T, oracle.transform(X).T, KSPCA_ORACLE_RTOL)
    np.testing.assert_allclose(
        model.eigenvalues_, oracle.explained_variance_ * 199, rtol=KSPCA_ORACLE_RTOL
    )


def test_models_save_and_load(rng):
    X, y = _classes(rng, n=100)
    for model in (
        supervised_pca(X, y),
        supervised_pca(X, y, bair_n_features=4),
        kernel_supervised_pca(X, y, solver="dense"),
        kernel_supervised_pca(X, y, solver="nystrom", n_landmarks=40),
    ):
        cls = type(model)
        again = cls.from_arrays(
            {k: np.array(v) for k, v in model.arrays().items()}, dict(model.scalars())
        )
        np.testing.assert_array_equal(again.transform(X), model.transform(X))
        if cls is SupervisedPCAModel:
            np.testing.assert_array_equal(
                again.inverse_transform(X[:, :2]), model.inverse_transform(X[:, :2])
            )
        else:
            assert cls is KernelSupervisedPCAModel and again.kernel == model.kernel


# ---------------------------------------------------------------- HSIC


def test_hsic_detects_dependence(rng):
    n = 150
    y = rng.integers(0, 3, n)
    X = rng.standard_normal((n, 10))
    X[:, 0] += y  # class means 0, 1, 2 along one axis of ten
    sq = ((X[:, None, :] - X[None, :, :]) ** 2).sum(-1)
    gamma = 1 / np.median(sq[np.triu_indices(n, 1)])  # the median heuristic
    dep = hsic(X, y, gamma=gamma, random_state=0)
    noise = rng.standard_normal((n, 10))
    indep = hsic(noise, y, width=np.sqrt(2 * 10), random_state=0)  # median sq distance ~ 2d
    assert dep.p_value < 0.05 and indep.p_value > 0.05, (dep, indep)
    # the definition, verbatim
    H = np.eye(n) - np.ones((n, n)) / n
    K, B = np.exp(-gamma * sq), (y[:, None] == y[None, :]).astype(float)
    np.testing.assert_allclose(
        dep.statistic, np.trace(K @ H @ B @ H) / (n - 1) ** 2, rtol=ORACLE_RTOL
    )


def test_hsic_exact_and_low_rank_agree(client, rng):
    X, y = _classes(rng, n=200)
    exact = hsic(X, y, kernel="linear", solver="exact", n_permutations=100)
    low = hsic(X, y, kernel="linear", solver="lowrank", n_permutations=100)  # factor X: exact
    np.testing.assert_allclose(low.statistic, exact.statistic, rtol=ORACLE_RTOL)
    assert low.p_value == exact.p_value  # the same permutations
    t = X[:, 0] + 0.5 * rng.standard_normal(200)
    exact = hsic(X, t, kernel="linear", label_kernel="gaussian", label_gamma=0.1, solver="exact")
    low = hsic(
        X,
        t,
        kernel="linear",
        label_kernel="gaussian",
        label_gamma=0.1,
        solver="lowrank",
        n_label_landmarks=200,
    )  # Nyström on all labels: exact to 1e-9
    np.testing.assert_allclose(low.statistic, exact.statistic, rtol=GAUSSIAN_LABEL_RTOL)
    assert low.p_value == exact.p_value < 0.05
    on_dask = hsic(da.from_array(X, chunks=(60, 10)), t, label_kernel="linear", solver="lowrank")
    local = hsic(X, t, label_kernel="linear", solver="lowrank")
    np.testing.assert_allclose(on_dask.statistic, local.statistic, rtol=DASK_RTOL)
    assert on_dask.p_value == local.p_value


# ---------------------------------------------------------------- bad input


def _bad_cases():
    rng = np.random.default_rng(0)
    X, y = rng.standard_normal((30, 4)), np.arange(30) % 3
    nan_t = np.arange(30.0)
    nan_t[7] = np.nan
    return {
        "labels-wrong-length": lambda: supervised_pca(X, y[:-1]),
        "single-class": lambda: supervised_pca(X, np.zeros(30)),
        "nan-labels-linear": lambda: supervised_pca(X, nan_t, label_kernel="linear"),
        "nan-labels-delta": lambda: supervised_pca(X, nan_t),
        "nan-labels-dask": lambda: supervised_pca(
            da.from_array(X, chunks=10), da.from_array(nan_t, chunks=10), label_kernel="linear"
        ),
        "nan-in-dask-X": lambda: supervised_pca(
            da.from_array(np.where(X > 2, np.nan, X), chunks=10), y
        ),
        "nan-in-dask-X-hsic-exact": lambda: hsic(
            da.from_array(np.where(X > 2, np.nan, X), chunks=10), y, solver="exact"
        ),
        "constant-targets": lambda: supervised_pca(X, np.ones(30), label_kernel="linear"),
        "k-equals-n": lambda: supervised_pca(X[:4], y[:4], n_components=4),
        "k-above-d": lambda: supervised_pca(X, y, n_components=5),
        "k-not-int": lambda: supervised_pca(X, y, n_components=1.5),
        "bad-label-kernel": lambda: supervised_pca(X, y, label_kernel="rbf"),
        "no-labels": lambda: SupervisedPCA().fit(X),
        "gamma-zero": lambda: kernel_supervised_pca(X, y, gamma=0.0),
        "gamma-negative-hsic": lambda: hsic(X, y, gamma=-1.0),
        "kernel-k-equals-n": lambda: kernel_supervised_pca(X, y, n_components=30),
        "bad-solver": lambda: kernel_supervised_pca(X, y, solver="eigen"),
        "bair-both": lambda: supervised_pca(X, y, bair_threshold=1.0, bair_n_features=2),
        "bair-keeps-too-few": lambda: supervised_pca(X, y, bair_threshold=1e9),
        "hsic-identity": lambda: hsic(X, y, label_kernel="identity"),
        "text-targets": lambda: supervised_pca(X, np.array(["a"] * 30), label_kernel="linear"),
        "missing-class-label": lambda: supervised_pca(X, np.array([None, "a", "b"] * 10)),
        "mixed-class-labels": lambda: kernel_supervised_pca(
            X, np.array([1, "a", "b"] * 10, object)
        ),
        "mixed-class-labels-dask": lambda: supervised_pca(
            X, da.from_array(np.array([1, "a", "b"] * 10, object), chunks=10)
        ),
    }


@pytest.mark.parametrize("case", sorted(_bad_cases()))
def test_bad_input_is_refused(case):
    with pytest.raises(InputError) as info:
        _bad_cases()[case]()
    assert "\nFix: " in str(info.value)


def test_error_messages_say_what_was_found():
    X = np.zeros((30, 4)) + np.arange(4)
    with pytest.raises(InputError, match="X has 30 rows; y has shape \\(29,\\)"):
        supervised_pca(X, np.arange(29))
    with pytest.raises(InputError, match="found 1 class"):
        supervised_pca(X, np.ones(30, dtype=int))
    t = np.arange(30.0)
    t[[3, 9]] = np.nan
    with pytest.raises(InputError, match="2 NaN in rows 3 and 9 of y"):
        supervised_pca(X, t, label_kernel="linear")


# ---------------------------------------------------------------- scikit-learn's contract


# scikit-learn's data has 2 classes where n_components=2: the second component is a completion
@pytest.mark.filterwarnings("ignore:.*orthonormal completion:dimred_dask.errors.DimredWarning")
@parametrize_with_checks(
    [
        SupervisedPCA(),
        SupervisedPCA(1, label_kernel="linear"),
        SupervisedPCA(1, bair_n_features=2),
        KernelSupervisedPCA(),
        KernelSupervisedPCA(solver="nystrom", n_landmarks=20),
    ]
)
def test_sklearn_contract(estimator, check):
    check(estimator)


def test_transform_of_float32_rows_far_from_the_origin_is_exact(rng):
    """As PCA's: the model keeps the mean in float64, so float32 rows 1e5 from the origin
    are embedded as (X - mean) U to float32's precision, not shifted by the float32 mean's
    rounding (6e-4 of the embedding's range before). The estimator's ``mean_`` stays in X's
    dtype, as scikit-learn's."""
    Z = rng.standard_normal((20000, 20)) * np.linspace(1.0, 0.01, 20)
    y = np.digitize(Z[:, 3], [-0.5, 0.5])  # three classes: two directions of dependence
    X = (Z + 1e5).astype(np.float32)
    for Xi in (X, da.from_array(X, chunks=5000)):
        est = SupervisedPCA(2).fit(Xi, y)
        Y = np.asarray(est.transform(Xi))
        exact = (X - X.mean(axis=0, dtype=np.float64)) @ est.components_.T.astype(np.float64)
        assert Y.dtype == np.float32 and est.mean_.dtype == np.float32
        assert np.abs(Y - exact).max() <= 1e-6 * np.abs(exact).max()
