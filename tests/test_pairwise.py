"""The blockwise distance / kernel engine and the symmetric eigensolvers, against scikit-learn,
SciPy and NumPy on small data."""

from unittest.mock import patch

import dask.array as da
import numpy as np
import pytest
from sklearn.metrics.pairwise import pairwise_distances as sk_distances
from sklearn.metrics.pairwise import pairwise_kernels as sk_kernels

from dimred_dask.blocks.kernels import distance_block
from dimred_dask.errors import InputError
from dimred_dask.linalg import (
    choose_landmarks,
    nystrom_error,
    nystrom_features,
    nystrom_kernel,
    nystrom_map,
    nystrom_top_eigh,
    top_and_bottom_eigh,
    top_eigh,
)
from dimred_dask.pairwise import (
    blockwise,
    check_kernel,
    double_center,
    pairwise_distances,
    pairwise_kernels,
)

# float64 kernels agree with scikit-learn's to rounding (both are one GEMM plus elementwise)
KERNEL_RTOL = 1e-12
# euclidean distances from a Gram expansion lose ~sqrt(eps) * ||x|| on near-equal points
DISTANCE_ATOL = 1e-7

KERNEL_CASES = [
    ("linear", {}, "linear", {}),
    (
        "polynomial",
        {"degree": 2, "gamma": 0.5, "coef0": 1.0},
        "poly",
        {"degree": 2, "gamma": 0.5, "coef0": 1.0},
    ),
    ("gaussian", {"width": 2.0}, "rbf", {"gamma": 0.25}),
    ("gaussian", {}, "rbf", {"gamma": 1 / 7}),
    ("laplacian", {"gamma": 0.3}, "laplacian", {"gamma": 0.3}),
    ("sigmoid", {"gamma": 0.1, "coef0": 0.5}, "sigmoid", {"gamma": 0.1, "coef0": 0.5}),
    ("cosine", {}, "cosine", {}),
]


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(3)
    return rng.standard_normal((230, 7)), rng.standard_normal((61, 7))


@pytest.mark.parametrize("kernel,params,sk_name,sk_params", KERNEL_CASES)
def test_kernels_match_sklearn_and_are_exactly_symmetric(
    client, data, kernel, params, sk_name, sk_params
):
    X, Y = data
    ref = sk_kernels(X, metric=sk_name, **sk_params)
    lazy = pairwise_kernels(da.from_array(X, chunks=(50, 7)), kernel=kernel, **params)
    K = lazy.compute()
    np.testing.assert_allclose(K, ref, rtol=KERNEL_RTOL, atol=1e-14)
    assert (K == K.T).all()  # mirrored blocks: symmetric exactly, not to rounding
    np.testing.assert_allclose(
        pairwise_kernels(X, kernel=kernel, **params), ref, rtol=KERNEL_RTOL, atol=1e-14
    )
    cross = pairwise_kernels(
        da.from_array(X, chunks=(50, 7)), da.from_array(Y, chunks=(20, 7)), kernel=kernel, **params
    ).compute()
    np.testing.assert_allclose(
        cross, sk_kernels(X, Y, metric=sk_name, **sk_params), rtol=KERNEL_RTOL, atol=1e-14
    )


def test_upper_triangle_only_is_computed(data):
    X, _ = data
    lazy = pairwise_kernels(da.from_array(X, chunks=(50, 7)))
    names = {str(k[0] if isinstance(k, tuple) else k) for k in dict(lazy.__dask_graph__())}
    nb = 5  # 230 rows in chunks of 50
    assert sum("_Bound" in n for n in names) == nb * (nb + 1) // 2  # blocks i <= j
    assert sum(n.startswith("transpose") for n in names) == nb * (nb - 1) // 2  # mirrored


@pytest.mark.parametrize(
    "metric,p",
    [
        ("euclidean", 2),
        ("sqeuclidean", 2),
        ("cosine", 2),
        ("manhattan", 2),
        ("chebyshev", 2),
        ("minkowski", 3),
    ],
)
def test_distances_match_sklearn(data, metric, p):
    X, Y = data
    kw = {"p": p} if metric == "minkowski" else {}
    D = pairwise_distances(da.from_array(X, chunks=(40, 7)), metric=metric, p=p).compute()
    np.testing.assert_allclose(D, sk_distances(X, metric=metric, **kw), atol=DISTANCE_ATOL)
    assert (np.diag(D) == 0).all() and (D == D.T).all()
    np.testing.assert_allclose(
        pairwise_distances(X, Y, metric=metric, p=p),
        sk_distances(X, Y, metric=metric, **kw),
        atol=DISTANCE_ATOL,
    )


def test_float32_stays_float32(data):
    X = data[0].astype(np.float32)
    assert pairwise_kernels(da.from_array(X, chunks=(50, 7))).dtype == np.float32
    assert pairwise_distances(X).dtype == np.float32


@pytest.mark.parametrize("dtype", [np.int64, np.float32, np.float64])
def test_dask_results_declare_the_dtype_their_blocks_have(data, dtype):
    """float32 blocks for float32 rows, float64 for any other (integers included)."""
    X, Y = (np.round(3 * d).astype(dtype) for d in data)
    dX, dY = da.from_array(X, chunks=(50, 7)), da.from_array(Y, chunks=(20, 7))
    nmap = nystrom_map(X[:20], check_kernel("gaussian", 7))
    lazy = {
        "kernels": pairwise_kernels(dX, kernel="polynomial"),
        "kernels, numpy Y": pairwise_kernels(dX, Y, kernel="laplacian"),
        "distances": pairwise_distances(dX),
        "distances, dask Y": pairwise_distances(dX, dY, metric="manhattan"),
        "blockwise": blockwise(lambda a, b: distance_block(a, b, "chebyshev"), dX),
        "nystrom features": nystrom_features(dX, nmap),
        "nystrom kernel": nystrom_kernel(dX, nmap),
    }
    want = np.float32 if dtype == np.float32 else np.float64
    for name, arr in lazy.items():
        assert (name, arr.dtype, arr.compute().dtype) == (name, want, want)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("chunks", [(70, 200), (33, 200), (50, 80)])
def test_centred_operator_products_are_b_times_q(dtype, chunks, monkeypatch):
    """B Q made a run of rows at a time (runs of 7 rows here, and blocks split by column
    too) is the product with B = -1/2 H (D * D) H formed; the lazy B is the same B."""
    import dimred_dask.blocks.centring as centring
    from dimred_dask.pairwise import CentredOperator, center_stats

    monkeypatch.setattr(centring, "RUN_BYTES", 7 * 8 * 200)
    rng = np.random.default_rng(0)
    X = rng.standard_normal((200, 5))
    D = sk_distances(X).astype(dtype)
    S = D.astype(np.float64) ** 2
    r = S.mean(axis=1)
    B = -0.5 * (S - r[:, None] - r[None, :] + r.mean())
    Q = rng.standard_normal((200, 4))
    Dd = da.from_array(D, chunks=chunks)
    rd, gd = (np.asarray(v) for v in da.compute(*center_stats(Dd.astype(np.float64) ** 2)))
    for op in (
        CentredOperator(Dd, rd, gd, square=True),
        CentredOperator(Dd.astype(np.float64) ** 2, rd, gd, square=False),
    ):
        got = op.product(Q).compute()
        assert got.shape == (200, 4) and got.dtype == np.float64
        np.testing.assert_allclose(got, B @ Q, rtol=1e-10, atol=1e-10 * np.abs(B @ Q).max())
        np.testing.assert_allclose(op.lazy().compute(), B, rtol=1e-6, atol=1e-6 * np.abs(B).max())


def test_double_centering_of_integers_is_not_truncated():
    M = np.array([[0, 1], [1, 0]])
    H = np.eye(2) - 0.5
    want = H @ M @ H  # [[-0.5, 0.5], [0.5, -0.5]]
    for out in (double_center(M), double_center(da.from_array(M, chunks=1)).compute()):
        assert out.dtype == np.float64
        np.testing.assert_array_equal(out, want)
    assert double_center(da.from_array(M, chunks=1)).dtype == np.float64
    M32 = M.astype(np.float32)
    assert double_center(M32).dtype == double_center(da.from_array(M32)).dtype == np.float32


def test_double_centering_equals_HKH_without_forming_H(client, data):
    X, _ = data
    n = X.shape[0]
    K = pairwise_kernels(da.from_array(X, chunks=(50, 7)))
    H = np.eye(n) - np.ones((n, n)) / n
    Kn = K.compute()
    np.testing.assert_allclose(double_center(K).compute(), H @ Kn @ H, atol=1e-13)
    D2 = pairwise_distances(X, metric="sqeuclidean")
    np.testing.assert_allclose(-0.5 * double_center(D2), -0.5 * H @ D2 @ H, atol=1e-12)


def test_square_chunks_layout(data):
    X, _ = data
    K = pairwise_kernels(da.from_array(X, chunks=(50, 7)), square_chunks=64)
    assert K.chunks == ((64, 64, 64, 38),) * 2


@pytest.mark.parametrize(
    "bad,match",
    [
        ({"kernel": "gaussian", "gamma": 0}, "gamma"),
        ({"kernel": "gaussian", "gamma": -1}, "gamma"),
        ({"kernel": "gaussian", "width": 0.0}, "width"),
        ({"kernel": "polynomial", "degree": 0}, "degree"),
        ({"kernel": "polynomial", "degree": 2.5}, "degree"),
        ({"kernel": "rbff"}, "Unknown kernel"),
        ({"kernel": "sigmoid", "coef0": float("nan")}, "coef0"),
        ({"kernel": "laplacian", "width": 1.0}, "width"),
        ({"kernel": "gaussian", "gamma": 1.0, "width": 1.0}, "not both"),
    ],
)
def test_kernel_parameters_out_of_range_are_refused(bad, match):
    params = dict(bad)
    with pytest.raises(InputError, match=match) as err:
        check_kernel(params.pop("kernel"), 5, **params)
    assert "Fix:" in str(err.value)


def test_minkowski_p_below_one_is_refused(data):
    with pytest.raises(InputError, match="p >= 1"):
        pairwise_distances(data[0], metric="minkowski", p=0.5)


# Subspace iteration with 4 power iterations and 10 extra vectors on a kernel spectrum that
# decays like this one's: measured 1e-6 relative error of the top eigenvalues; 1e-4 leaves room
# for other seeds without hiding a wrong answer (a missed eigenvalue is off by > 1e-2 here).
RANDOMIZED_RTOL = 1e-4


@pytest.mark.parametrize("solver", ["dense", "randomized", "lanczos"])
def test_eigensolvers_match_numpy(client, data, solver):
    X, _ = data
    # 3 x 3 uneven blocks (100, 100, 30); Lanczos takes a cluster round trip per matvec (37 here)
    Kc = double_center(pairwise_kernels(da.from_array(X, chunks=(100, 7)), width=3.0))
    w, v = np.linalg.eigh(Kc.compute())
    eig = top_eigh(Kc, 4, solver=solver, random_state=0)
    rtol = RANDOMIZED_RTOL if solver == "randomized" else 1e-10
    np.testing.assert_allclose(eig.values, w[::-1][:4], rtol=rtol)
    overlap = np.abs(np.sum(eig.vectors * v[:, ::-1][:, :4], axis=0))
    np.testing.assert_allclose(overlap, 1.0, atol=1e-3 if solver == "randomized" else 1e-8)


@pytest.mark.parametrize("solver", ["dense", "randomized", "lanczos"])
def test_smallest_eigenvalues_of_an_indefinite_matrix(data, solver):
    X, _ = data
    B = -0.5 * double_center(pairwise_distances(X, metric="chebyshev") ** 2)
    w = np.linalg.eigvalsh(B)
    assert w[0] < 0  # chebyshev distances are not Euclidean: B has a negative part
    top = top_eigh(B, 1, solver="dense").values[0]
    eig = top_eigh(B, 3, solver=solver, which="SA", shift=top, n_iter=40)
    np.testing.assert_allclose(eig.values, w[:3], rtol=1e-3 if solver == "randomized" else 1e-9)


def test_randomized_smallest_needs_a_shift(data):
    with pytest.raises(InputError, match="shift"):
        top_eigh(np.eye(20), 2, solver="randomized", which="SA")


class _CountingOperator:
    """A symmetric matrix as an operator whose lazy products are counted (passes over it)."""

    def __init__(self, A):
        self.A, self.shape, self.ndim, self.products = A, A.shape, 2, 0

    def product(self, Q):
        self.products += 1
        return da.from_array(self.A @ Q, chunks=(50, -1))


@pytest.mark.parametrize("n_iter", [0, 1, 4, 40])
def test_top_and_bottom_eigh_share_their_passes(data, n_iter):
    """Both ends of an indefinite B in n_iter + 2 passes (1 when n_iter is 0): the top pairs
    are `top_eigh`'s from the same start block; the bottom Ritz values bound the smallest
    eigenvalues from above and reach them when the iteration is long enough."""
    X, _ = data
    B = -0.5 * double_center(pairwise_distances(X, metric="chebyshev") ** 2)
    w = np.linalg.eigvalsh(B)
    assert w[0] < 0  # chebyshev distances are not Euclidean: B has a negative part
    op = _CountingOperator(B)
    top, bottom = top_and_bottom_eigh(op, 3, n_iter=n_iter, random_state=0)
    assert op.products == (1 if n_iter == 0 else n_iter + 2)
    assert top.passes + bottom.passes == op.products
    assert bottom.info["shared_passes"] == n_iter + 1 - bottom.passes
    alone = top_eigh(B, 3, solver="randomized", n_iter=n_iter, random_state=0)
    np.testing.assert_allclose(top.values, alone.values, rtol=1e-12)
    np.testing.assert_allclose(np.abs(top.vectors.T @ alone.vectors).diagonal(), 1.0, atol=1e-9)
    np.testing.assert_allclose(top.product, B @ top.vectors, atol=1e-9 * abs(w[-1]))
    assert np.all(np.diff(bottom.values) >= 0)
    assert np.all(bottom.values >= w[:3] - 1e-9 * abs(w[-1]))  # Ritz values: upper bounds
    np.testing.assert_allclose(bottom.vectors.T @ bottom.vectors, np.eye(3), atol=1e-12)
    if n_iter == 40:
        np.testing.assert_allclose(bottom.values, w[:3], rtol=1e-3)
        np.testing.assert_allclose(bottom.info["shift"], w[-1], rtol=1e-12)
        sequential = top_eigh(B, 3, solver="randomized", which="SA", shift=w[-1], n_iter=40)
        np.testing.assert_allclose(bottom.values, sequential.values, rtol=1e-3)


@pytest.mark.parametrize("method", ["uniform", "maxmin", "kmeans++", "kmeans"])
def test_nystrom_error_shrinks_with_landmarks(data, method):
    X = np.vstack([data[0], data[1]])
    kern = check_kernel("gaussian", 7, width=4.0)
    errors = []
    for m in (10, 60, 200):
        L, _ = choose_landmarks(X, m, method, random_state=0)
        errors.append(nystrom_error(X[:100], nystrom_map(L, kern)))
    assert errors[0] > errors[1] > errors[2]
    L, idx = choose_landmarks(X, X.shape[0], "uniform", random_state=0)  # all points
    assert nystrom_error(X[:100], nystrom_map(L, kern)) < 1e-6


def test_every_landmark_method_chooses_with_the_one_chooser():
    """Landmark MDS, landmark Isomap and landmark MVU take their landmarks from
    `choose_landmarks` (the same rows for the same seed); the ones that need rows refuse
    k-means centres before any work; non-finite sample rows name the method."""
    from dimred_dask.methods import LandmarkIsomap, LandmarkMDS, landmark_mvu
    from dimred_dask.methods.landmark_mds import LANDMARK_CHOICES

    X = np.random.default_rng(3).standard_normal((240, 3))
    for how in ("maxmin", "uniform"):
        want = choose_landmarks(X, 25, how, 0, allowed=LANDMARK_CHOICES)[1]
        got = LandmarkMDS(2, n_landmarks=25, landmarks=how, random_state=0).fit(X)
        np.testing.assert_array_equal(got.landmark_indices_, want)
        iso = LandmarkIsomap(2, n_neighbors=10, n_landmarks=25, landmarks=how).fit(X)
        np.testing.assert_array_equal(iso.landmark_indices_, want)
    mvu = landmark_mvu(X[:120], n_landmarks=20, n_neighbors=8)
    want = choose_landmarks(X[:120], 20, "maxmin", 0)[1]
    assert mvu.info["landmarks"] == want.tolist()
    for est in (LandmarkMDS(2, landmarks="kmeans"), LandmarkIsomap(2, landmarks="kmeans")):
        with pytest.raises(InputError, match="maxmin, uniform|'maxmin' or 'uniform'"):
            est.fit(X)
    bad = X.copy()
    bad[7, 1] = np.nan
    with pytest.raises(InputError, match="LandmarkMDS"):
        LandmarkMDS(2, n_landmarks=25).fit(da.from_array(bad, chunks=60))


# The probe estimate of ||E||_F^2 (Hutchinson, p Gaussian probes) has standard deviation
# sqrt(2 sum l^4 / p) over E's eigenvalues l; 4 of them bound a fixed seed's draw.
PROBE_SIGMAS = 4


def test_nystrom_error_probe_estimate_against_exact():
    """Above 2 * probes rows the error's numerator is a probe estimate: it agrees with the exact
    value within the estimator's own spread (computed from E's spectrum), is reproducible, and
    the exact path is what ``probes=None`` and small samples give."""
    X = np.random.default_rng(5).standard_normal((700, 6))
    kern = check_kernel("gaussian", 6, width=3.0)
    L, idx = choose_landmarks(X, 60, "uniform", random_state=0)
    nmap = nystrom_map(L, kern)
    sample = np.delete(X, idx, axis=0)[:400]
    exact = nystrom_error(sample, nmap, probes=None)
    est = nystrom_error(sample, nmap, probes=50)
    assert est == nystrom_error(sample, nmap, probes=50)  # seeded
    assert est != exact  # the probe path ran (400 > 2 * 50 rows)
    K = sk_kernels(sample, sample, metric="rbf", gamma=1 / 9)
    C = sk_kernels(sample, nmap.landmarks, metric="rbf", gamma=1 / 9)
    E = K - C @ np.linalg.solve(sk_kernels(nmap.landmarks, metric="rbf", gamma=1 / 9), C.T)
    lam = np.linalg.eigvalsh((E + E.T) / 2)
    np.testing.assert_allclose(exact, np.linalg.norm(E) / np.linalg.norm(K), rtol=1e-6)
    sd = np.sqrt(2 * np.sum(lam**4) / 50) / np.linalg.norm(K) ** 2
    assert abs(est**2 - exact**2) <= PROBE_SIGMAS * sd
    assert nystrom_error(sample[:100], nmap) == nystrom_error(sample[:100], nmap, probes=None)


def test_landmarks_are_reproducible(client, data):
    X = da.from_array(data[0], chunks=(50, 7))
    a, _ = choose_landmarks(X, 20, "kmeans", random_state=5)
    b, _ = choose_landmarks(X, 20, "kmeans", random_state=5)
    np.testing.assert_array_equal(a, b)


def _nystrom_kernel(X, nmap):
    """C W^-1 C^T from the map's own pieces: Phi Phi^T with Phi = C R^-1."""
    phi = nmap.features(np.asarray(X, np.float64))
    return phi @ phi.T


def test_nystrom_map_cholesky_or_pivoted_gives_the_same_approximation(data):
    """Independent landmarks: plain Cholesky, all kept; the approximation equals
    C W^-1 C^T computed by a dense solve. A duplicated landmark: its pivot is 0, so the
    pivoted Cholesky drops it, and the approximation is that of the distinct landmarks."""
    X = np.vstack([data[0], data[1]])
    kern = check_kernel("gaussian", 7, width=4.0)
    L = X[:40]
    nmap = nystrom_map(L, kern)
    assert nmap.info["factorization"] == "cholesky" and nmap.rank == 40
    C = sk_kernels(X, L, metric="rbf", gamma=1 / 16)
    W = sk_kernels(L, L, metric="rbf", gamma=1 / 16)
    np.testing.assert_allclose(_nystrom_kernel(X, nmap), C @ np.linalg.solve(W, C.T), atol=1e-9)
    # R^-1 by triangular solves and the explicit inverse agree
    Z = np.random.default_rng(0).standard_normal((40, 3))
    np.testing.assert_allclose(nmap.solve(Z), nmap.proj @ Z, atol=1e-9)
    np.testing.assert_allclose(nmap.solve_t(Z), nmap.proj.T @ Z, atol=1e-9)
    dup = nystrom_map(np.vstack([L, L[:5]]), kern)
    assert dup.info["factorization"] == "pivoted cholesky" and dup.rank == 40
    np.testing.assert_allclose(_nystrom_kernel(X, dup), _nystrom_kernel(X, nmap), atol=1e-8)


# nystrom_top_eigh against LAPACK, in units of the dtype's eps: measured at most 4.2 (float64)
# and 2.8 (float32) for eigenvalues, the embedding and the vectors' angle cosines.
NYSTROM_EIGH_EPS = 100


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_nystrom_top_eigh_against_dense_eigh(data, dtype, threads):
    """The top eigenpairs of the centred Nyström kernel Phic Phic^T against LAPACK on the
    n x n matrix, the returned embedding Y = Phic V (= eigenvectors * sqrt(lambda)) and the
    column means of C, with C made in row blocks (several blocks, on one or two threads)."""
    X = np.vstack([data[0], data[1]]).astype(dtype)
    kern = check_kernel("gaussian", 7, width=4.0)
    L, _ = choose_landmarks(X, 120, "uniform", random_state=0)
    nmap = nystrom_map(L, kern)
    C = np.asarray(nmap.kernel_to_landmarks(X), np.float64)
    mean = C.mean(axis=0)
    assert X.shape[0] > 4 * 64
    with patch("dimred_dask.linalg.threaded.BLOCK_ROWS", 64):  # several row blocks
        w, V, Y, mu, info = nystrom_top_eigh(
            X, nmap, 3, n_oversamples=20, n_iter=30, threads=threads
        )
    phi_c = (C - mean) @ nmap.proj
    ref_w, ref_u = np.linalg.eigh(phi_c @ phi_c.T)
    ref_w, ref_u = ref_w[::-1][:3], ref_u[:, ::-1][:, :3]
    eps = np.finfo(dtype).eps
    assert info["converged"] and info["residual"] <= 64 * eps  # RESIDUAL_FLOOR
    assert info["passes"] < 31  # stopped on the residual, not the pass limit
    assert info["threads"] == threads
    np.testing.assert_allclose(mu, mean, atol=NYSTROM_EIGH_EPS * eps)
    np.testing.assert_allclose(w, ref_w, rtol=NYSTROM_EIGH_EPS * eps)
    np.testing.assert_allclose(Y, phi_c @ V, atol=NYSTROM_EIGH_EPS * eps * np.abs(Y).max())
    cos = np.abs(np.sum(Y / np.linalg.norm(Y, axis=0) * ref_u, axis=0))
    np.testing.assert_allclose(cos, 1.0, atol=NYSTROM_EIGH_EPS * eps)
