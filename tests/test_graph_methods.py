"""The graph methods against scikit-learn (Isomap, LocallyLinearEmbedding, SpectralEmbedding,
SpectralClustering): geodesics, embeddings up to sign or Procrustes, the swiss roll unrolled,
moons and circles clustered, dask input on worker processes, transform of new points."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.spatial import procrustes
from scipy.stats import spearmanr
from sklearn.datasets import make_circles, make_moons, make_swiss_roll
from sklearn.metrics import adjusted_rand_score

from dimred_dask import (
    Isomap,
    LandmarkIsomap,
    LaplacianEigenmaps,
    LocallyLinearEmbedding,
    SpectralClustering,
)
from dimred_dask.graphs import (
    geodesic_rows,
    graph_csr,
    graph_weights,
    knn_graph,
    spectral_embedding,
)

# Same graph, same eigenproblem, both solved to LAPACK / ARPACK precision: measured 1e-12 to
# 2e-9 (LLE's eigenvalues are ~1e-8, so its eigenvectors carry ~1e-9 of solver noise).
EXACT_ATOL = 1e-7
UNROLL_SPEARMAN = 0.99  # the floor; measured 0.998 - 0.99994 here
ARI_FLOOR = 0.95  # the floor; measured 1.0 on both sets
LANDMARK_PROCRUSTES = 1e-3  # landmark vs full Isomap, 200 landmarks: measured 3e-5
# transform of training rows: LLE re-solves each row's weights with the row itself among its
# neighbours (weight ~1 - O(reg)); measured 5e-3 on unit-variance coordinates
LLE_SELF_ATOL = 2e-2


@pytest.fixture(scope="module")
def roll():
    X, t = make_swiss_roll(800, random_state=0)
    return X, t


def _up_to_sign(a, b, atol):
    signs = np.sign(np.sum(a * b, axis=0))
    np.testing.assert_allclose(a * signs, b, atol=atol)
    return signs


def _unrolled(Y, t) -> float:
    return max(abs(spearmanr(Y[:, c], t)[0]) for c in range(Y.shape[1]))


def test_isomap_equals_scikit_learn(roll):
    from sklearn.manifold import Isomap as SkIsomap

    X, t = roll
    ref = SkIsomap(n_neighbors=10, n_components=2).fit(X)
    ours = Isomap(2, n_neighbors=10, solver="dense").fit(X)
    np.testing.assert_allclose(ours.dist_matrix_, ref.dist_matrix_, atol=1e-9)
    np.testing.assert_allclose(ours.eigenvalues_, ref.kernel_pca_.eigenvalues_, rtol=1e-9)
    signs = _up_to_sign(ours.embedding_, ref.embedding_, EXACT_ATOL * 100)
    new = X[:25] + 0.05
    np.testing.assert_allclose(ours.transform(new) * signs, ref.transform(new), atol=1e-6)
    np.testing.assert_allclose(ours.transform(X[:40]), ours.embedding_[:40], atol=1e-6)
    assert _unrolled(ours.embedding_, t) >= UNROLL_SPEARMAN
    # the geodesic matrix is not Euclidean: negative part reported, positive part kept
    assert 0 < ours.negative_mass_ < 0.5 and ours.negative_eigenvalues_.size > 0


def test_landmark_isomap_matches_full_isomap(roll):
    X, t = roll
    full = Isomap(2, n_neighbors=10, solver="dense").fit(X)
    lm = LandmarkIsomap(2, n_neighbors=10, n_landmarks=200).fit(X)
    assert procrustes(full.embedding_, lm.embedding_)[2] < LANDMARK_PROCRUSTES
    assert _unrolled(lm.embedding_, t) >= UNROLL_SPEARMAN
    np.testing.assert_allclose(lm.transform(X[:40]), lm.embedding_[:40], atol=1e-6)
    assert lm.n_landmarks_ == 200 and lm.landmark_indices_.size == 200


def test_geodesics_on_workers_equal_local(client, roll):
    X, _ = roll
    g = knn_graph(X, 10)
    rows = geodesic_rows(g, np.arange(0, 800, 7), per_task=16)  # several tasks, scattered graph
    from scipy.sparse.csgraph import dijkstra

    ref = dijkstra(graph_csr(g), directed=False, indices=np.arange(0, 800, 7))
    np.testing.assert_allclose(rows, ref, rtol=0, atol=1e-12)


def test_geodesics_from_no_sources_are_empty(client, roll):
    from dimred_dask.graphs import geodesic_rows_on_workers

    g = knn_graph(roll[0], 10)
    rows = geodesic_rows(g, np.array([], dtype=np.int64))
    assert rows.shape == (0, 800) and rows.dtype == np.float64
    on_workers = geodesic_rows_on_workers(g, [], dtype=np.float32)
    assert on_workers.shape == (0, 800) and on_workers.dtype == np.float32
    assert on_workers.compute().shape == (0, 800)


def test_geodesic_rows_on_workers_without_a_client_is_refused(roll, monkeypatch):
    from dimred_dask.errors import InputError
    from dimred_dask.graphs import geodesic, geodesic_rows_on_workers

    monkeypatch.setattr(geodesic, "active_client", lambda: None)
    g = knn_graph(roll[0][:100], 10)
    with pytest.raises(InputError, match="geodesic_rows_on_workers .*distributed client") as e:
        geodesic_rows_on_workers(g, np.arange(5))
    assert "call geodesic_rows for the rows" in e.value.fix
    with pytest.raises(InputError, match="geodesic_matrix_on_workers .*distributed client") as e:
        geodesic.geodesic_matrix_on_workers(g)
    assert "call geodesic_matrix for the matrix" in e.value.fix


def test_lle_equals_scikit_learn(roll):
    from sklearn.manifold import LocallyLinearEmbedding as SkLLE

    X, t = roll
    ref = SkLLE(n_neighbors=12, n_components=2, eigen_solver="dense").fit(X)
    ours = LocallyLinearEmbedding(2, n_neighbors=12, eigen_solver="dense").fit(X)
    n = X.shape[0]
    # the seed's scale (1/n) Y^T Y = I; scikit-learn's columns have unit norm
    np.testing.assert_allclose(ours.embedding_.T @ ours.embedding_ / n, np.eye(2), atol=1e-9)
    signs = _up_to_sign(ours.embedding_ / np.sqrt(n), ref.embedding_, EXACT_ATOL)
    np.testing.assert_allclose(ours.reconstruction_error_, ref.reconstruction_error_, rtol=1e-6)
    new = X[:25] + 0.05
    np.testing.assert_allclose(
        ours.transform(new) / np.sqrt(n) * signs, ref.transform(new), atol=EXACT_ATOL
    )
    np.testing.assert_allclose(ours.transform(X[:40]), ours.embedding_[:40], atol=LLE_SELF_ATOL)
    arpack = LocallyLinearEmbedding(2, n_neighbors=12, eigen_solver="arpack").fit(X)
    _up_to_sign(arpack.embedding_, ours.embedding_, 1e-5)


# LLE's "factored" solver (LU of I - W, large n) against shift-invert ARPACK on M (the exact
# default for moderate n) on a 3000-point roll: measured 1.5e-7 on the unit-variance
# embedding and 6e-7 relative on the eigenvalues (~1e-10 and ~1e-8), ARPACK's tol 1e-8
FACTORED_ATOL = 1e-5
FACTORED_RTOL = 1e-5


def test_lle_factored_solver_agrees_with_shift_invert(monkeypatch):
    import importlib

    lle_module = importlib.import_module("dimred_dask.methods.lle")
    X, t = make_swiss_roll(3000, random_state=1)
    exact = LocallyLinearEmbedding(2, n_neighbors=12, eigen_solver="arpack").fit(X)
    fact = LocallyLinearEmbedding(2, n_neighbors=12, eigen_solver="factored").fit(X)
    assert fact._model.solver == "factored" and "factor_nnz" in fact._model.info
    _up_to_sign(fact.embedding_, exact.embedding_, FACTORED_ATOL)
    np.testing.assert_allclose(fact.eigenvalues_, exact.eigenvalues_, rtol=FACTORED_RTOL)
    assert _unrolled(fact.embedding_, t) >= UNROLL_SPEARMAN
    # "auto" keeps shift-invert up to ARPACK_MAX rows and takes the factored solver above
    monkeypatch.setattr(lle_module, "ARPACK_MAX", 2000)
    monkeypatch.setattr(lle_module, "DENSE_MAX_SPARSE", 100)
    assert lle_module.lle(X[:1500], n_neighbors=12).solver == "arpack"
    auto = lle_module.lle(X, n_neighbors=12)
    assert auto.solver == "factored"
    _up_to_sign(auto.embedding, exact.embedding_, FACTORED_ATOL)


def test_lle_unrolls_a_swiss_roll():
    X, t = make_swiss_roll(3000, random_state=1)
    Y = LocallyLinearEmbedding(2, n_neighbors=12, eigen_solver="arpack").fit_transform(X)
    assert _unrolled(Y, t) >= UNROLL_SPEARMAN


def test_laplacian_eigenmaps_equal_scikit_learn_on_the_same_affinity(roll):
    from sklearn.manifold import SpectralEmbedding

    X, t = roll
    ours = LaplacianEigenmaps(2, n_neighbors=10).fit(X)
    W, _ = graph_weights(graph_csr(knn_graph(X, 10)), "heat")
    ref = SpectralEmbedding(2, affinity="precomputed", eigen_solver="arpack", random_state=0).fit(
        W.toarray()
    )
    _up_to_sign(ours.embedding_, ref.embedding_, EXACT_ATOL)
    assert _unrolled(ours.embedding_, t) >= UNROLL_SPEARMAN
    # Nystrom transform: close to the training embedding for training rows
    Y = ours.transform(X[:40])
    assert np.abs(Y - ours.embedding_[:40]).max() < 0.05 * np.abs(ours.embedding_).max()


def test_laplacian_eigenmaps_take_a_numpy_width_and_refuse_a_bool(roll):
    """t from a NumPy computation (np.float32, np.int64) is a width like any other."""
    from dimred_dask.errors import InputError

    X, _ = roll
    t = float(np.median(knn_graph(X, 10).distances ** 2))
    base = LaplacianEigenmaps(2, n_neighbors=10, t=t).fit(X).embedding_
    for width in (np.float64(t), np.float32(t)):
        Y = LaplacianEigenmaps(2, n_neighbors=10, t=width).fit(X).embedding_
        _up_to_sign(Y, base, 1e-4)
    LaplacianEigenmaps(2, n_neighbors=10, t=np.int64(max(round(t), 1))).fit(X)
    for bad in (True, np.bool_(True), 0, -1.0, np.float32("nan")):
        with pytest.raises(InputError, match="t > 0"):
            LaplacianEigenmaps(2, n_neighbors=10, t=bad).fit(X)


def test_spectral_embedding_ratio_cut_is_the_unnormalised_laplacian(roll):
    X, _ = roll
    W, _ = graph_weights(graph_csr(knn_graph(X, 8)), "binary")
    res = spectral_embedding(W, 3, normed=False, solver="dense")
    L = np.diag(np.asarray(W.sum(axis=1)).ravel()) - W.toarray()
    w, v = np.linalg.eigh(L)
    np.testing.assert_allclose(res.eigenvalues, w[1:4], rtol=1e-8, atol=1e-12)
    _up_to_sign(res.embedding, v[:, 1:4], 1e-8)


@pytest.mark.parametrize("name", ["moons", "circles"])
def test_spectral_clustering_recovers_the_true_labels(name):
    from sklearn.cluster import SpectralClustering as SkSC

    X, y = (
        make_moons(1000, noise=0.05, random_state=0)
        if name == "moons"
        else make_circles(1000, factor=0.5, noise=0.05, random_state=0)
    )
    for kw in (
        {"cut": "normalized"},
        {"cut": "ratio"},
        {"affinity": "gaussian", "width": 0.2, "n_landmarks": 300},
    ):
        sc = SpectralClustering(2, n_neighbors=10, **kw).fit(X)
        assert adjusted_rand_score(y, sc.labels_) >= ARI_FLOOR, kw
        assert sc.embedding_.shape == (1000, 2)
    ref = SkSC(2, affinity="nearest_neighbors", n_neighbors=10, random_state=0).fit(X)
    assert adjusted_rand_score(ref.labels_, sc.labels_) >= ARI_FLOOR


def test_nystrom_normalized_cut_is_that_of_the_nystrom_affinity():
    # the r x r route (Phi never formed) against the n x n matrix D^-1/2 Phi Phi^T D^-1/2 of
    # the same landmarks, solved by LAPACK: eigenvalues 1 - s, embedding D^-1/2 u
    from dimred_dask.linalg import choose_landmarks, nystrom_map
    from dimred_dask.pairwise import check_kernel

    X, _ = make_moons(600, noise=0.05, random_state=0)
    sc = SpectralClustering(3, affinity="gaussian", width=0.3, n_landmarks=150, random_state=4).fit(
        X
    )
    L, _ = choose_landmarks(X, 150, "kmeans++", np.random.default_rng(4))  # the fit's first draw
    phi = nystrom_map(L, check_kernel("gaussian", 2, width=0.3)).features(X)
    A = phi @ phi.T
    d = A.sum(axis=1)
    s, u = np.linalg.eigh(A / np.sqrt(np.outer(d, d)))
    np.testing.assert_allclose(sc.eigenvalues_, 1 - s[::-1][:3], atol=1e-10)
    _up_to_sign(sc.embedding_, u[:, ::-1][:, :3] / np.sqrt(d)[:, None], 1e-8)


def test_dask_input_on_workers(client):
    import dask.array as da

    X, y = make_moons(1200, noise=0.05, random_state=1)
    Xd = da.from_array(X, chunks=(300, 2))
    # the two moons' 10-NN graph has 2 components: joined by their shortest edge
    kw = {"n_neighbors": 10, "join_components": True}
    ours = LocallyLinearEmbedding(2, **kw).fit(Xd)
    ref = LocallyLinearEmbedding(2, **kw).fit(X)
    assert isinstance(ours.embedding_, da.Array)
    np.testing.assert_allclose(np.asarray(ours.embedding_), ref.embedding_, atol=1e-6)
    new = ours.transform(Xd[:100])
    assert isinstance(new, da.Array)
    np.testing.assert_allclose(new.compute(), ref.transform(X[:100]), atol=1e-6)
    lm = LandmarkIsomap(2, n_landmarks=100, **kw).fit(Xd)
    np.testing.assert_allclose(
        np.asarray(lm.embedding_),
        LandmarkIsomap(2, n_landmarks=100, **kw).fit(X).embedding_,
        atol=1e-6,
    )
    sc = SpectralClustering(2, affinity="gaussian", width=0.2, n_landmarks=200).fit(Xd)
    assert isinstance(sc.labels_, da.Array)
    assert adjusted_rand_score(y, sc.labels_.compute()) >= ARI_FLOOR


def test_the_spectral_embedding_goes_to_the_cluster_once(client):
    """Dask input: the embedding the solve returns to this process is persisted once, and
    k-means' sample, the labels and the model's embedding refer to its chunks (as literals
    in each graph it was sent again every time: "Sending large graph", here over 200 kB)."""
    import warnings

    import dask
    import dask.array as da
    from sklearn.datasets import make_blobs

    X, y = make_blobs(6000, n_features=2, centers=6, cluster_std=0.4, random_state=0)
    Xd = da.from_array(X, chunks=(1500, 2))  # 96 kB in all; the embedding 6 columns, 288 kB
    with (
        dask.config.set({"distributed.admin.large-graph-warning-threshold": "200kB"}),
        warnings.catch_warnings(record=True) as seen,
    ):
        warnings.simplefilter("always")
        sc = SpectralClustering(6, n_neighbors=10, join_components=True, random_state=0).fit(Xd)
        labels, Y = sc.labels_.compute(), np.asarray(sc.embedding_)
    large = [str(w.message).splitlines()[0] for w in seen if "large graph" in str(w.message)]
    assert len(large) == 1, large
    assert Y.shape == (6000, 6) and adjusted_rand_score(y, labels) >= ARI_FLOOR


def test_same_seed_same_result(roll):
    X, _ = roll
    a = SpectralClustering(3, random_state=5).fit(X)
    b = SpectralClustering(3, random_state=5).fit(X)
    np.testing.assert_array_equal(a.labels_, b.labels_)
    c = LandmarkIsomap(2, n_landmarks=50, random_state=3).fit(X)
    d = LandmarkIsomap(2, n_landmarks=50, random_state=3).fit(X)
    np.testing.assert_array_equal(c.embedding_, d.embedding_)


def test_isomap_in_memory_refuses_what_would_not_fit(monkeypatch):
    """Full Isomap in this process holds about four n x n float64 matrices; above 80 % of
    the memory available it is refused before the graph is built, with the estimate and the
    routes that fit (40 000 rows: 48 GiB, where it would be killed for memory on a machine of
    24 GiB). Landmark Isomap, which holds nothing n x n, still runs."""
    import importlib

    from dimred_dask.errors import InputError

    iso = importlib.import_module(
        "dimred_dask.methods.isomap"
    )  # the package's isomap is the function

    X, _ = make_swiss_roll(300, random_state=0)
    assert Isomap(n_neighbors=10).fit(X).embedding_.shape == (300, 2)
    monkeypatch.setattr(iso, "IN_MEMORY_COPIES", 10**9)  # 300 x 300 made to need 671 TiB
    with pytest.raises(InputError, match=r"300 x 300 geodesic matrix .* GiB") as err:
        Isomap(n_neighbors=10).fit(X)
    assert "LandmarkIsomap" in str(err.value)
    assert LandmarkIsomap(n_neighbors=10, n_landmarks=50).fit(X).embedding_.shape == (300, 2)
