"""Kernel PCA (seed 002) against scikit-learn's KernelPCA, the seed's Wine homework, the
out-of-sample formula, Nyström, negative eigenvalues and bad parameters."""

import dask.array as da
import numpy as np
import pytest
from sklearn.datasets import load_wine
from sklearn.decomposition import PCA as SkPCA
from sklearn.decomposition import KernelPCA as SkKernelPCA
from sklearn.metrics import silhouette_score
from sklearn.model_selection import LeaveOneOut, cross_val_score
from sklearn.neighbors import KNeighborsClassifier
from sklearn.preprocessing import StandardScaler

from dimred_dask import DimredWarning, InputError, KernelPCA, kernel_pca

# dense solvers: both sides are LAPACK eigh of the same centred matrix
EXACT_RTOL = 1e-10
# randomized subspace iteration with the defaults (6 power iterations, 20 extra vectors) on the
# Wine gaussian kernel: measured 3e-9 (eigenvalues) and 6e-6 (embedding entries)
RANDOMIZED_EIG_RTOL = 1e-6
RANDOMIZED_EMB_ATOL = 1e-4


def _wine():
    w = load_wine()
    return StandardScaler().fit_transform(w.data), w.target


def _up_to_sign(a, b, atol):
    signs = np.sign(np.sum(a * b, axis=0))
    np.testing.assert_allclose(a * signs, b, atol=atol)


@pytest.mark.parametrize(
    "kernel,params,sk",
    [
        ("gaussian", {}, {"kernel": "rbf", "gamma": 1 / 13}),
        ("gaussian", {"width": 3.0}, {"kernel": "rbf", "gamma": 1 / 9}),
        (
            "polynomial",
            {"degree": 2, "gamma": 0.1, "coef0": 1.0},
            {"kernel": "poly", "degree": 2, "gamma": 0.1, "coef0": 1.0},
        ),
        # scikit-learn's KernelPCA has no "laplacian": a callable of the same formula
        (
            "laplacian",
            {"gamma": 0.05},
            {"kernel": lambda a, b: np.exp(-0.05 * np.abs(a - b).sum())},
        ),
        ("cosine", {}, {"kernel": "cosine"}),
    ],
)
@pytest.mark.parametrize("solver", ["dense", "lanczos", "randomized"])
def test_matches_sklearn(kernel, params, sk, solver):
    X, _ = _wine()
    ref = SkKernelPCA(3, eigen_solver="dense", **sk).fit(X)
    ours = KernelPCA(3, kernel=kernel, solver=solver, random_state=0, **params).fit(X)
    exact = solver != "randomized"
    np.testing.assert_allclose(
        ours.eigenvalues_, ref.eigenvalues_, rtol=EXACT_RTOL if exact else RANDOMIZED_EIG_RTOL
    )
    _up_to_sign(ours.embedding_, ref.transform(X), 1e-8 if exact else RANDOMIZED_EMB_ATOL)
    # the out-of-sample formula on new points, against scikit-learn's
    rng = np.random.default_rng(0)
    Z = X[:20] + 0.3 * rng.standard_normal((20, 13))
    _up_to_sign(ours.transform(Z), ref.transform(Z), 1e-8 if exact else RANDOMIZED_EMB_ATOL)


@pytest.mark.parametrize("solver", ["dense", "randomized", "lanczos", "nystrom"])
def test_transform_of_training_points_equals_embedding(solver):
    X, _ = _wine()
    m = KernelPCA(4, solver=solver, n_landmarks=100, random_state=0).fit(X)
    np.testing.assert_allclose(m.transform(X), m.embedding_, atol=1e-10)


def test_wine_homework_gaussian_kpca_separates_cultivars_better_than_pca():
    """Seed 002's homework: Gaussian kernel PCA of Wine (13-D, 178 samples, standardised),
    2 components, against linear PCA. Measures: leave-one-out 5-NN accuracy of the cultivar
    in 2-D, and the silhouette of the cultivars. The kernel width is the library default
    (gamma = 1/n_features, i.e. c = sqrt(13)), not tuned."""
    X, y = _wine()
    lin = SkPCA(2).fit_transform(X)
    ker = KernelPCA(2, kernel="gaussian").fit_transform(X)

    def acc(E):
        return cross_val_score(KNeighborsClassifier(5), E, y, cv=LeaveOneOut()).mean()

    a_lin, a_ker = acc(lin), acc(ker)
    assert a_ker > a_lin + 0.01, (a_ker, a_lin)  # measured 0.978 against 0.961
    assert silhouette_score(ker, y) > silhouette_score(lin, y) + 0.05  # 0.61 against 0.53


def test_eigenvectors_are_unit_and_renormalised():
    X, _ = _wine()
    m = KernelPCA(3, solver="dense").fit(X)
    A = m.eigenvectors_
    np.testing.assert_allclose(A.T @ A, np.eye(3), atol=1e-12)
    # embedding = A Lambda^1/2, so the feature-space directions psi = F H A Lambda^-1/2 are
    # orthonormal: Y^T Y = Lambda
    np.testing.assert_allclose(m.embedding_.T @ m.embedding_, np.diag(m.eigenvalues_), atol=1e-9)


# Nyström with m = 600 of n = 3000 on this smooth kernel: measured 0.1% eigenvalue error and
# Procrustes disparity 1e-4 against the exact embedding
NYSTROM_EIG_RTOL = 0.01
NYSTROM_DISPARITY = 0.01


@pytest.fixture(scope="module")
def exact_3000():
    rng = np.random.default_rng(1)
    X = rng.standard_normal((3000, 5)) @ rng.standard_normal((5, 10))
    return X, KernelPCA(2, width=6.0, solver="lanczos").fit(X)


@pytest.mark.parametrize("landmarks", ["uniform", "kmeans++", "kmeans"])
def test_nystrom_close_to_exact(client, exact_3000, landmarks):
    from scipy.spatial import procrustes

    X, exact = exact_3000
    Xd = da.from_array(X.astype(np.float32), chunks=(700, 10))
    approx = KernelPCA(
        2, width=6.0, solver="nystrom", n_landmarks=600, landmarks=landmarks, random_state=0
    ).fit(Xd)
    assert isinstance(approx.embedding_, da.Array)
    np.testing.assert_allclose(approx.eigenvalues_, exact.eigenvalues_, rtol=NYSTROM_EIG_RTOL)
    _, _, disparity = procrustes(exact.embedding_, approx.embedding_.compute())
    assert disparity < NYSTROM_DISPARITY
    assert 0 < approx.approximation_error_ < 0.05


# NumPy input, dask input gathered into one worker task, and dask input by passes over C
# persisted on the cluster solve the same Nyström problem to the solvers' stopping rule
# (residual 64 eps of float32, 7.6e-6; over this spectrum's relative gap ~0.3 the vectors may
# differ by ~2.5e-5): measured 4e-8 / 1.9e-7 apart in eigenvalues and 1.3e-5 / 9e-6 of the
# largest entry in the embedding (the paths also factor W with different BLAS threading).
NYSTROM_PATHS_EIG_RTOL = 1e-6
NYSTROM_PATHS_EMB = 1e-4


def test_nystrom_paths_for_dask_input_agree_with_numpy(client, exact_3000):
    from unittest.mock import patch

    X = exact_3000[0].astype(np.float32)
    Xd = da.from_array(X, chunks=(700, 10))
    kw = dict(width=6.0, solver="nystrom", n_landmarks=600, random_state=0)
    ref = KernelPCA(2, **kw).fit(X)
    one = KernelPCA(2, **kw).fit(Xd)
    with patch("dimred_dask.methods.kpca.ONE_TASK_SHARE", 0.0):  # as if C did not fit
        passes = KernelPCA(2, **kw).fit(Xd)
    assert ref._model.info["nystrom_eigensolver"] == "subspace iteration"
    assert one._model.info["nystrom_eigensolver"] == "subspace iteration (one worker)"
    assert passes._model.info["nystrom_eigensolver"] == "subspace iteration"
    assert passes._model.info["passes"] > one._model.info["passes"]
    assert passes._model.embedding is None and one._model.embedding is not None
    for fit in (one, passes):
        assert isinstance(fit.embedding_, da.Array)
        np.testing.assert_allclose(fit.eigenvalues_, ref.eigenvalues_, rtol=NYSTROM_PATHS_EIG_RTOL)
        np.testing.assert_allclose(
            fit.embedding_.compute(),
            ref.embedding_,
            atol=NYSTROM_PATHS_EMB * np.abs(ref.embedding_).max(),
        )


def test_dask_input_gives_the_numpy_result(client):
    X, _ = _wine()
    Xd = da.from_array(X, chunks=(50, 13))
    for solver in ("randomized", "lanczos"):
        a = KernelPCA(2, solver=solver, random_state=0).fit(X)
        b = KernelPCA(2, solver=solver, random_state=0).fit(Xd)
        assert isinstance(b.embedding_, da.Array)
        np.testing.assert_allclose(b.eigenvalues_, a.eigenvalues_, rtol=1e-12)
        np.testing.assert_allclose(b.embedding_.compute(), a.embedding_, atol=1e-10)
        out = b.transform(Xd[:30])
        assert isinstance(out, da.Array)
        np.testing.assert_allclose(out.compute(), a.transform(X[:30]), atol=1e-10)


def test_precomputed_kernel_matrix_is_used(client):
    from dimred_dask.pairwise import pairwise_kernels

    X, _ = _wine()
    K = pairwise_kernels(da.from_array(X, chunks=(60, 13))).persist()
    a = kernel_pca(X, n_components=2, solver="randomized")
    b = kernel_pca(X, n_components=2, solver="randomized", kernel_matrix=K)
    np.testing.assert_allclose(b.eigenvalues, a.eigenvalues, rtol=1e-12)


def test_indefinite_kernel_reports_its_negative_part():
    X, _ = _wine()
    m = KernelPCA(3, kernel="sigmoid", solver="dense").fit(X)
    assert m._model.info["negative_mass"] > 0.01  # tanh kernel: not PSD on this data


def test_rank_deficient_kernel_warns_and_zeroes_components():
    rng = np.random.default_rng(0)
    X = rng.standard_normal((50, 2))  # the linear kernel has rank 2
    with pytest.warns(DimredWarning, match="eigenvalue <= 0"):
        m = KernelPCA(4, kernel="linear", solver="dense").fit(X)
    assert m._model.info["n_nonpositive_components"] == 2
    assert np.all(m.embedding_[:, 2:] == 0) and np.all(m.eigenvalues_[2:] == 0)
    assert np.all(np.isfinite(m.transform(X)))


def test_model_round_trips_through_arrays():
    from dimred_dask.methods.kpca import KernelPCAModel

    X, _ = _wine()
    for solver in ("dense", "nystrom"):
        m = kernel_pca(X, n_components=2, solver=solver, n_landmarks=50)
        back = KernelPCAModel.from_arrays(m.arrays(), m.scalars())
        np.testing.assert_array_equal(back.transform(X[:10]), m.transform(X[:10]))


@pytest.mark.parametrize(
    "params,match",
    [
        ({"n_components": 178}, "n_components < n_samples"),
        ({"n_components": 0}, "n_components"),
        ({"gamma": 0.0}, "gamma"),
        ({"width": -1.0}, "width"),
        ({"kernel": "polynomial", "degree": 0}, "degree"),
        ({"kernel": "spline"}, "Unknown kernel"),
        ({"solver": "arpack"}, "solver"),
        ({"solver": "nystrom", "n_landmarks": 500}, "n_landmarks"),
        ({"solver": "nystrom", "landmarks": "random"}, "landmarks"),
    ],
)
def test_bad_parameters_are_refused(params, match):
    X, _ = _wine()
    with pytest.raises(InputError, match=match) as err:
        KernelPCA(**{"n_components": 2, **params}).fit(X)
    assert "Fix:" in str(err.value)


@pytest.mark.parametrize("landmarks", ["kmeans++", "maxmin", "uniform"])
def test_nystrom_refuses_nonfinite_dask_rows(landmarks):
    """Dask rows are checked where the fit reads them: the landmark sample, then the
    kernel pass; a NaN row among the sampled ones is refused before a landmark is chosen."""
    X = np.random.default_rng(0).standard_normal((60, 3))
    X[3, 1] = np.nan
    est = KernelPCA(2, solver="nystrom", n_landmarks=10, landmarks=landmarks)
    with pytest.raises(InputError, match="KernelPCA needs finite values; found .*NaN in row 3"):
        est.fit(da.from_array(X, chunks=20))
