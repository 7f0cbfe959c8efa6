"""Sparse input (single-cell counts): CSR in memory and dask arrays of CSR row blocks give what
the densified matrix gives (PCA, supervised PCA, the kNN graph, distance and kernel blocks,
metrics), every other method refuses with the chain as its fix, finiteness and dtype rules,
fingerprints, and the same PCA on any number of workers."""

from __future__ import annotations

import importlib

import dask.array as da
import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.decomposition import PCA as SkPCA

from dimred_dask import PCA, InputError, SupervisedPCA, metrics, pca
from dimred_dask._validation import check_array, is_sparse_input
from dimred_dask.errors import InputTypeError
from dimred_dask.graphs import knn_graph, sample_recall
from dimred_dask.io.fingerprint import _hash_block, array_fingerprint
from dimred_dask.methods import (
    MDS,
    SNE,
    SPARSE_METHODS,
    TSNE,
    UMAP,
    ActionRespectingEmbedding,
    Isomap,
    KernelPCA,
    KernelSupervisedPCA,
    LandmarkIsomap,
    LandmarkMDS,
    LandmarkMVU,
    LaplacianEigenmaps,
    LocallyLinearEmbedding,
    MaximumVarianceUnfolding,
    SpectralClustering,
    accepts_sparse,
    check_sparse_input,
    make_chain,
)
from dimred_dask.pairwise import pairwise_distances, pairwise_kernels

# The sparse solvers multiply in float64 what the dense ones multiply in float64 too (for
# float64 input), in another order: sparse and dense results agree to rounding (measured
# <= 1e-12 relative on these data).
SAME_RTOL = 1e-9
# Exact (covariance) PCA against scikit-learn's LAPACK SVD of the densified float64 matrix:
# the 1e-6 relative on explained variances (measured 2e-15).
EXACT_RTOL = 1e-6
# Randomized subspace iteration (4 power iterations, 10 oversamples) on these counts: a gap of
# 20x between the 5th and 6th variance (13.4 against 0.64), so the error is far below the
# 1e-6 the dense randomized tests use (measured 2e-12 on the variances, 6e-7 on components).
RANDOMIZED_RTOL = 1e-6
# NN-descent on CSR rows: measured 0.993-0.997 on these data (dense rows: 0.994-0.998); the
# floor of the dense NN-descent test.
NNDESCENT_RECALL = 0.95
K = 5  # components: the 6 clusters span 5 directions of variance


def counts(rng, n=3000, d=400, n_clusters=6, markers=12):
    """Integer counts with cluster structure, ~3.4 % non-zero: every cluster expresses 12 marker
    genes often and highly (p 0.8, Poisson 30), every gene is seen now and then (p >= 0.003)."""
    labels = rng.integers(0, n_clusters, n)
    base = rng.lognormal(0.0, 1.0, d)
    base = np.maximum(base * 0.01 / base.mean(), 0.003)
    p = np.tile(np.clip(base, 0, 0.2), (n_clusters, 1))
    lam = np.ones((n_clusters, d))
    for c in range(n_clusters):
        genes = rng.choice(d, markers, replace=False)
        p[c, genes], lam[c, genes] = 0.8, 30.0
    mask = rng.random((n, d)) < p[labels]
    vals = rng.poisson(lam[labels]) + 1
    return sp.csr_matrix(np.where(mask, vals, 0).astype(np.int32)), labels


def log1p(X, dtype=np.float64):
    out = X.astype(dtype)
    out.data = np.log1p(out.data)
    return out


@pytest.fixture(scope="module")
def data():
    X, labels = counts(np.random.default_rng(0))
    return log1p(X), labels


def _as(kind, X):
    if kind == "csr":
        return X
    if kind == "csc":
        return X.tocsc()
    chunks = (700, X.shape[1]) if kind == "dask" else ((1000, 800, 1200), (X.shape[1],))
    return da.from_array(
        X, chunks=chunks, asarray=False, meta=sp.csr_matrix((0, X.shape[1]), dtype=X.dtype)
    )


def _same_up_to_sign(a, b, rtol):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    signs = np.sign((a * b).sum(axis=-1, keepdims=True))
    np.testing.assert_allclose(a * signs, b, rtol=rtol, atol=rtol * np.abs(b).max())


# --------------------------------------------------------------------------- validation


def test_recognised_as_sparse(data):
    X, _ = data
    assert is_sparse_input(X) and is_sparse_input(_as("dask", X))
    assert is_sparse_input(sp.csr_array(X)) and not is_sparse_input(X.toarray())
    assert not is_sparse_input(da.from_array(X.toarray()))


def test_check_array_refuses_by_default_with_the_chain(data):
    X, _ = data
    for given in (X, _as("dask", X)):
        with pytest.raises(InputTypeError, match="sparse") as err:
            check_array(given, method="UMAP")
        assert "--method pca+umap" in str(err.value) and "densify" in str(err.value)


@pytest.mark.parametrize("kind", ["csr", "csc", "coo", "csr_array"])
def test_check_array_gives_csr(data, kind):
    X, _ = data
    given = sp.csr_array(X) if kind == "csr_array" else X.asformat(kind)
    out = check_array(given, accept_sparse=True)
    assert isinstance(out, sp.csr_matrix) and out.dtype == np.float64
    assert (out != X).nnz == 0


@pytest.mark.filterwarnings("ignore:PCA. 3 of 60 columns")  # zero-variance genes
def test_integer_counts_become_float32():
    """One dtype rule with dense data (`float_dtype`): counts of at most 16 bits are float32
    (exact), wider integers float64."""
    X, _ = counts(np.random.default_rng(1), n=400, d=60)
    X = X.astype(np.uint16)
    assert check_array(X, accept_sparse=True).dtype == np.float32
    assert check_array(X.astype(np.int32), accept_sparse=True).dtype == np.float64
    D = check_array(_as("dask", X), accept_sparse=True)
    assert D.dtype == np.float32 and D.compute().dtype == np.float32
    model = PCA(3).fit(X)
    assert model.components_.dtype == np.float32
    dense = PCA(3).fit(X.toarray())
    np.testing.assert_allclose(model.explained_variance_, dense.explained_variance_, rtol=1e-5)


def test_nonfinite_refused_naming_rows(data):
    X, _ = data
    bad = X.copy()
    bad.data[bad.indptr[17]] = np.nan
    bad.data[bad.indptr[2040]] = np.inf
    with pytest.raises(InputError, match="1 NaN and 1 inf in rows 17 and 2040"):
        check_array(bad, method="PCA", accept_sparse=True)
    for solver in ("covariance", "randomized"):  # dask: found by the first pass
        with pytest.raises(InputError, match="1 NaN and 1 inf in rows 17 and 2040"):
            pca(_as("dask", bad), n_components=K, solver=solver)
    with pytest.raises(InputError, match="rows 17 and 2040"):
        SupervisedPCA(2).fit(_as("dask", bad), data[1])


# --------------------------------------------------------------------------- PCA


@pytest.mark.parametrize("whiten", [False, True])
@pytest.mark.parametrize("solver", ["covariance", "randomized"])
@pytest.mark.parametrize("kind", ["csr", "csc", "dask", "dask-irregular"])
def test_pca_equals_pca_of_the_densified_matrix(data, kind, solver, whiten):
    X, _ = data
    dense = X.toarray()
    model = PCA(K, solver=solver, whiten=whiten, random_state=0).fit(_as(kind, X))
    same = PCA(K, solver=solver, whiten=whiten, random_state=0).fit(dense)
    oracle = SkPCA(K, svd_solver="full", whiten=whiten).fit(dense)
    rtol = EXACT_RTOL if solver == "covariance" else RANDOMIZED_RTOL
    assert model.solver_ == solver
    np.testing.assert_allclose(model.explained_variance_, same.explained_variance_, rtol=SAME_RTOL)
    np.testing.assert_allclose(model.explained_variance_, oracle.explained_variance_, rtol=rtol)
    np.testing.assert_allclose(
        model.explained_variance_ratio_, oracle.explained_variance_ratio_, rtol=rtol
    )
    np.testing.assert_allclose(model.noise_variance_, oracle.noise_variance_, rtol=10 * rtol)
    np.testing.assert_allclose(model.mean_, dense.mean(axis=0), rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(
        model.components_, same.components_, rtol=SAME_RTOL, atol=SAME_RTOL
    )  # both sign-fixed
    _same_up_to_sign(model.components_, oracle.components_, 10 * rtol)
    Y = model.transform(_as(kind, X))
    assert isinstance(Y, da.Array) == kind.startswith("dask")
    if kind.startswith("dask"):
        assert Y.chunks[0] == _as(kind, X).chunks[0] and Y.chunks[1] == (K,)
        Y = Y.compute()
    assert isinstance(Y, np.ndarray) and Y.dtype == np.float64
    np.testing.assert_allclose(
        Y, same.transform(dense), rtol=SAME_RTOL, atol=SAME_RTOL * np.abs(Y).max()
    )
    _same_up_to_sign(Y.T, oracle.transform(dense).T, 10 * rtol)
    np.testing.assert_allclose(
        model.inverse_transform(Y), same.inverse_transform(Y), rtol=SAME_RTOL, atol=SAME_RTOL
    )


# float32 input: the covariance solver accumulates in float64, so only the float32 result
# carries rounding (6e-8; measured 1e-7 on the variances); the randomized solver and transform
# multiply in float32 as the dense solvers do (test_pca's float32 tolerance).
FLOAT32_RTOL = {"covariance": 1e-6, "randomized": 2e-4}


@pytest.mark.parametrize("solver", ["covariance", "randomized"])
def test_pca_float32_counts_equal_the_float64_oracle(solver):
    X, _ = counts(np.random.default_rng(0))
    X32 = log1p(X, np.float32)
    X64 = X32.toarray().astype(np.float64)
    oracle = SkPCA(K, svd_solver="full").fit(X64)
    rtol = FLOAT32_RTOL[solver]
    for kind in ("csr", "dask"):
        model = PCA(K, solver=solver, random_state=0).fit(_as(kind, X32))
        assert model.components_.dtype == np.float32
        np.testing.assert_allclose(model.explained_variance_, oracle.explained_variance_, rtol=rtol)
        Y = np.asarray(model.transform(_as(kind, X32)))
        assert Y.dtype == np.float32
        _same_up_to_sign(Y.T, oracle.transform(X64).T, 10 * rtol)


@pytest.mark.parametrize("dtype, rtol", [(np.float64, 1e-12), (np.float32, 1e-5)])
@pytest.mark.parametrize("l2_bytes", [1 << 20, 1000])  # one range of genes; many, uneven
def test_gram_kernel_equals_the_dense_centred_products(data, monkeypatch, dtype, rtol, l2_bytes):
    """The kernel of the randomized passes against Xc^T Xc q in float64 on the densified
    block: any cut of the genes into ranges, unsorted column indices, empty rows, int64
    indices. float32 blocks multiply in float32 (the tolerance is float32 rounding summed over
    a block's 3 000 rows, measured 6e-7)."""
    from dimred_dask.blocks import sparse_kernels
    from dimred_dask.blocks.sparse import sparse_gram_products

    monkeypatch.setattr(sparse_kernels, "L2_BYTES", l2_bytes)
    X, _ = data
    X = X.astype(dtype).tolil()
    X[100:140] = 0  # empty rows
    X = X.tocsr()
    rng = np.random.default_rng(1)
    mean = np.asarray(X.mean(axis=0), np.float64).ravel()
    q = rng.standard_normal((X.shape[1], 7))
    dense = X.toarray().astype(np.float64) - mean
    want = dense.T @ (dense @ q)
    shuffled = X.copy()  # the same matrix, each row's stored values in another order
    for i in range(shuffled.shape[0]):
        a, b = shuffled.indptr[i], shuffled.indptr[i + 1]
        order = rng.permutation(b - a) + a
        shuffled.indices[a:b], shuffled.data[a:b] = X.indices[order], X.data[order]
    shuffled.has_sorted_indices = False
    wide = sp.csr_matrix(
        (X.data, X.indices.astype(np.int64), X.indptr.astype(np.int64)), shape=X.shape
    )
    assert len(sparse_kernels.gene_ranges(X.shape[1], 7, X.dtype.itemsize)) - 1 == (
        1 if l2_bytes > 1e5 else -(-X.shape[1] // max(1, l2_bytes // (7 * X.dtype.itemsize)))
    )
    for block in (X, shuffled, wide):
        got = sparse_gram_products(block, mean, q)
        assert got.dtype == np.float64
        np.testing.assert_allclose(got, want, rtol=rtol, atol=rtol * np.abs(want).max())


def test_pca_fraction_of_variance_and_auto(data, monkeypatch):
    X, _ = data
    model = PCA(0.9).fit(X)
    oracle = SkPCA(0.9, svd_solver="full").fit(X.toarray())
    assert model.solver_ == "covariance" and model.n_components_ == oracle.n_components_
    pca_module = importlib.import_module("dimred_dask.methods._pca_plan")
    monkeypatch.setattr(pca_module, "COVARIANCE_MAX_FEATURES", 100)
    assert PCA(K, random_state=0).fit(X).solver_ == "randomized"  # d = 400 > 100
    assert PCA(K, random_state=0).fit(X.toarray()).solver_ == "dual"  # dense: n <= 4096


def test_pca_covariance_refused_when_d_x_d_does_not_fit(data, monkeypatch):
    pca_module = importlib.import_module("dimred_dask.methods._pca_plan")
    X, _ = data
    monkeypatch.setattr(pca_module, "SPARSE_COVARIANCE_SHARE", 1e-6)
    with pytest.raises(InputError, match="d x d float64") as err:
        pca(X, n_components=K, solver="covariance")
    assert "solver='randomized'" in str(err.value)
    with pytest.raises(InputError, match="d x d float64"):
        check_sparse_input("pca", X, {"solver": "covariance"})
    assert pca(X, n_components=K, solver="auto").solver == "randomized"
    with pytest.raises(InputError, match="int n_components"):
        pca(X, n_components=0.9)


@pytest.mark.parametrize("solver", ["tsqr", "dual"])
def test_pca_densifying_solvers_refuse(data, solver):
    X, _ = data
    for given in (X, _as("dask", X)):
        with pytest.raises(InputTypeError, match=f"solver='{solver}' does not take sparse"):
            PCA(K, solver=solver).fit(given)
    with pytest.raises(InputTypeError, match="solver='randomized'"):
        check_sparse_input("pca+umap", X, {"solver": solver})


def test_pca_same_result_on_any_number_of_workers(client, data):
    """The sum over row blocks is a fixed tree: bit for bit the same on 2 worker processes,
    on 1 in-process worker and without a cluster."""
    from distributed import Client, LocalCluster

    X, _ = data
    D = _as("dask", X)
    results = {}
    for solver in ("covariance", "randomized"):
        m2 = PCA(K, solver=solver, random_state=3).fit(D)
        with (
            LocalCluster(
                n_workers=1, threads_per_worker=1, processes=False, dashboard_address=None
            ) as one,
            Client(one),
        ):
            m1 = PCA(K, solver=solver, random_state=3).fit(D)
            y1 = m1.transform(D).compute()
        assert np.array_equal(m1.components_, m2.components_)
        assert np.array_equal(m1.explained_variance_, m2.explained_variance_)
        assert np.array_equal(y1, m2.transform(D).compute())
        results[solver] = m2
    again = PCA(K, solver="randomized", random_state=3).fit(D)
    assert np.array_equal(again.components_, results["randomized"].components_)


# --------------------------------------------------------------------------- supervised PCA


@pytest.mark.parametrize(
    "kw", [{}, {"label_kernel": "linear"}, {"label_kernel": "identity"}, {"bair_n_features": 40}]
)
@pytest.mark.parametrize("kind", ["csr", "dask"])
def test_spca_equals_spca_of_the_densified_matrix(data, kind, kw):
    X, labels = data
    y = labels.astype(float) if kw.get("label_kernel") == "linear" else labels
    k = 1 if kw.get("label_kernel") == "linear" else K
    model = SupervisedPCA(k, **kw).fit(_as(kind, X), y)
    same = SupervisedPCA(k, **kw).fit(X.toarray(), y)
    np.testing.assert_allclose(model.eigenvalues_, same.eigenvalues_, rtol=SAME_RTOL)
    _same_up_to_sign(model.components_, same.components_, SAME_RTOL)
    Y = model.transform(_as(kind, X))
    assert isinstance(Y, da.Array) == (kind == "dask")
    _same_up_to_sign(np.asarray(Y).T, same.transform(X.toarray()).T, SAME_RTOL)


# --------------------------------------------------------------------------- kNN graph


@pytest.mark.parametrize("metric", ["euclidean", "cosine"])
def test_exact_knn_graph_equals_the_dense_one(client, data, metric):
    X, _ = data
    dense = knn_graph(X.toarray(), 10, metric=metric, backend="exact")
    for kind in ("csr", "dask"):
        g = knn_graph(_as(kind, X), 10, metric=metric, backend="exact")
        assert np.array_equal(g.indices, dense.indices)
        np.testing.assert_allclose(g.distances, dense.distances, rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("metric", ["euclidean", "cosine"])
def test_nndescent_takes_csr_rows(data, metric):
    X, _ = data
    g = knn_graph(X, 10, metric=metric, backend="nndescent", random_state=0)
    r = sample_recall(X, g, 500, random_state=0)
    assert r["recall"] >= NNDESCENT_RECALL, r
    assert not (g.indices == np.arange(X.shape[0])[:, None]).any()
    dense = sample_recall(X.toarray(), g, 500, random_state=0)
    assert dense["recall"] == r["recall"]


def test_knn_refuses_other_metrics_and_the_partitioned_backend(data):
    X, _ = data
    with pytest.raises(InputTypeError, match="metric='manhattan'"):
        knn_graph(X, 10, metric="manhattan")
    with pytest.raises(InputTypeError, match="partitioned"):
        knn_graph(_as("dask", X), 10, backend="partitioned")


# --------------------------------------------------------------------------- pairwise blocks


@pytest.mark.parametrize(
    "spec",
    [
        ("kernel", "linear"),
        ("kernel", "gaussian"),
        ("kernel", "cosine"),
        ("kernel", "polynomial"),
        ("metric", "euclidean"),
        ("metric", "cosine"),
    ],
)
def test_pairwise_blocks_equal_the_dense_ones(client, data, spec):
    X, _ = data
    X = X[:600]
    what, name = spec
    fn = pairwise_kernels if what == "kernel" else pairwise_distances
    dense = fn(X.toarray(), **{what: name})
    np.testing.assert_allclose(fn(X, **{what: name}), dense, rtol=1e-9, atol=1e-12)
    lazy = fn(da.from_array(X, chunks=(250, X.shape[1]), asarray=False), **{what: name})
    out = lazy.compute()
    assert isinstance(out, np.ndarray) and np.array_equal(out, out.T)
    np.testing.assert_allclose(out, dense, rtol=1e-9, atol=1e-12)


def test_pairwise_refuses_what_is_not_made_of_inner_products(data):
    X, _ = data
    with pytest.raises(InputTypeError, match="laplacian kernel"):
        pairwise_kernels(X, kernel="laplacian")
    with pytest.raises(InputTypeError, match="manhattan metric"):
        pairwise_distances(_as("dask", X), metric="manhattan")


# --------------------------------------------------------------------------- the other methods

_REFUSING = {
    "kpca": lambda: KernelPCA(2),
    "mds": lambda: MDS(2),
    "landmark-mds": lambda: LandmarkMDS(2),
    "kspca": lambda: KernelSupervisedPCA(2),
    "isomap": lambda: Isomap(),
    "landmark-isomap": lambda: LandmarkIsomap(),
    "lle": lambda: LocallyLinearEmbedding(),
    "laplacian": lambda: LaplacianEigenmaps(),
    "spectral": lambda: SpectralClustering(),
    "tsne": lambda: TSNE(),
    "umap": lambda: UMAP(),
    "sne": lambda: SNE(),
    "mvu": lambda: MaximumVarianceUnfolding(),
    "landmark-mvu": lambda: LandmarkMVU(),
    "are": lambda: ActionRespectingEmbedding(),
}


def test_every_flow_method_has_an_answer():
    from flows.methods import METHODS

    assert set(SPARSE_METHODS) == set(METHODS)
    assert {m for m, ok in SPARSE_METHODS.items() if ok} == {"pca", "spca"}
    assert set(_REFUSING) == {m for m, ok in SPARSE_METHODS.items() if not ok}
    assert accepts_sparse("pca+umap") and not accepts_sparse("umap")


@pytest.mark.parametrize("name", sorted(SPARSE_METHODS))
def test_methods_take_or_refuse_sparse_input(data, name):
    X, labels = data
    small = X[:300]
    if SPARSE_METHODS[name]:
        check_sparse_input(name, small)
        return
    with pytest.raises(InputTypeError, match="sparse") as err:
        check_sparse_input(name, small)
    assert f"reduce with PCA first: --method pca+{name}" in str(err.value)
    assert "pca.n_components=50" in str(err.value)
    for given in (small, _as("dask", small)):
        est = _REFUSING[name]()
        args = {"kspca": (labels[:300],), "are": (np.zeros(299, int),)}.get(name, ())
        with pytest.raises(InputTypeError, match="does not take sparse input") as err:
            est.fit(given, *args)
        assert f"--method pca+{name}" in str(err.value)
        assert not hasattr(est, "embedding_")


@pytest.mark.filterwarnings("ignore:PCA. 29 of 400 columns")  # genes unseen in 400 cells
def test_chain_takes_sparse_input(data):
    X, _ = data
    small = X[:400]
    chain = make_chain("pca+mds", **{"pca.n_components": 10, "mds.n_components": 2})
    Y = chain.fit_transform(small)
    Yd = make_chain("pca+mds", **{"pca.n_components": 10, "mds.n_components": 2}).fit_transform(
        small.toarray()
    )
    _same_up_to_sign(Y.T, Yd.T, 1e-8)


# --------------------------------------------------------------------------- fingerprint, metrics


def test_fingerprint_of_sparse_chunks(data):
    X, _ = data
    fp = array_fingerprint(_as("dask", X))
    assert fp == array_fingerprint(_as("dask", X.copy()))
    wide = X.copy()
    wide.indices, wide.indptr = wide.indices.astype(np.int64), wide.indptr.astype(np.int64)
    assert _hash_block(wide) == _hash_block(X) == _hash_block(X.tocsc())
    changed = X.copy()
    changed.data[5] += 1.0
    assert array_fingerprint(_as("dask", changed))["digest"] != fp["digest"]
    moved = X.copy()
    moved.indices[0] = (moved.indices[0] + 1) % X.shape[1]
    assert _hash_block(moved) != _hash_block(X)


def test_metrics_take_a_sparse_sample(data):
    X, _ = data
    sample = X[:800]
    model = PCA(K).fit(X)
    Y = model.transform(sample)
    Xh = model.inverse_transform(Y)
    dense = sample.toarray()
    assert metrics.trustworthiness(sample, Y, 10) == pytest.approx(
        metrics.trustworthiness(dense, Y, 10), rel=1e-12
    )
    assert metrics.knn_recall(sample, Y, 10) == pytest.approx(
        metrics.knn_recall(dense, Y, 10), rel=1e-12
    )
    assert metrics.reconstruction_error(sample, Xh, model.mean_) == pytest.approx(
        metrics.reconstruction_error(dense, Xh, model.mean_), rel=1e-12
    )
