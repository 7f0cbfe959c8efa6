"""t-SNE, SNE and UMAP (seed 004): affinities against their definitions and the peers,
gradients against finite differences, quality against openTSNE and umap-learn on data nobody
tuned for, determinism across thread counts, resume == uninterrupted, transforms, bad input."""

from __future__ import annotations

import numba
import numpy as np
import pytest
from sklearn.datasets import load_digits
from sklearn.neighbors import KNeighborsClassifier

from dimred_dask.errors import InputError
from dimred_dask.graphs import knn_graph
from dimred_dask.graphs.affinities import (
    conditional_rows,
    find_ab,
    fuzzy_rows,
    sne_affinities,
    tsne_affinities,
    umap_affinities,
)
from dimred_dask.methods._neighbor_runs import MemoryCheckpoint
from dimred_dask.methods.sne import sne
from dimred_dask.methods.tsne import TSNE, tsne
from dimred_dask.methods.umap import UMAP, umap
from dimred_dask.metrics import trustworthiness

# The calibration target: each row's entropy equals log2(perplexity) to 1e-5 bits
# (the bisection stops at 1e-10 nats).
PERPLEXITY_ATOL = 1e-5
# Central differences with step 1e-6 on O(1) costs: truncation ~1e-12, rounding ~1e-10;
# measured agreement 1e-8 relative.
FD_RTOL = 1e-6
# FFT interpolation (p = 3 nodes, boxes of side 1; openTSNE's defaults, whose error is the
# same): see FFT_Z_RTOL below for what was measured.
FFT_GRAD_RTOL = 0.06
# Quality floors of the issue: trustworthiness (k = 15) within 0.01 and 10-NN label accuracy
# of the 2-D embedding within 0.02 of the peer's on the same data in the same test.
# umap-learn bisects sigma on float32 distances and both stop once the row sum is within
# 1e-5 of log2(k): memberships agree to a few 1e-6 (measured max relative difference 1.7e-5)
FUZZY_RTOL = 1e-4
TRUST_MARGIN = 0.01
ACCURACY_MARGIN = 0.02


@pytest.fixture(autouse=True)
def in_process(request, monkeypatch):
    """Run the optimisations in this process, as without a cluster, even when an earlier
    test of the session started the shared Dask client (which then stays the default
    client): the thread-count, checkpoint and callback tests look at this process. Tests
    that ask for ``client`` run on the workers."""
    if "client" in request.fixturenames:
        return
    from importlib import import_module

    for name in ("_neighbor_runs", "tsne", "sne", "umap"):
        monkeypatch.setattr(
            import_module(f"dimred_dask.methods.{name}"), "active_client", lambda: None
        )


@pytest.fixture(scope="module")
def digits():
    X, y = load_digits(return_X_y=True)
    return X.astype(np.float64), y


@pytest.fixture(scope="module")
def mixture():
    """20 Gaussian clusters in 50-D (centres 3 sd apart in a 10-D subspace, isotropic noise)."""
    rng = np.random.default_rng(7)
    n, d, rank, k = 2000, 50, 10, 20
    basis = np.linalg.qr(rng.standard_normal((d, rank)))[0].T * np.linspace(3, 1, rank)[:, None]
    centres = rng.standard_normal((k, rank)) * 3.0
    y = rng.integers(0, k, n)
    X = (centres[y] + 0.5 * rng.standard_normal((n, rank))) @ basis
    return X + 0.5 * rng.standard_normal((n, d)), y


def _accuracy(Y, y) -> float:
    """10-NN label accuracy of the embedding (5-fold cross-validated)."""
    from sklearn.model_selection import cross_val_score

    return float(cross_val_score(KNeighborsClassifier(10), Y, y, cv=5).mean())


# --------------------------------------------------------------------------- affinities


def test_perplexity_calibration_matches_exact_entropy(digits):
    X, _ = digits
    g = knn_graph(X, 90, backend="exact")
    for perp in (5.0, 30.0):
        P, beta = conditional_rows(g.distances, perp)
        np.testing.assert_allclose(P.sum(axis=1), 1.0, atol=1e-12)
        with np.errstate(divide="ignore", invalid="ignore"):
            H = -np.where(P > 0, P * np.log2(P), 0.0).sum(axis=1)
        np.testing.assert_allclose(H, np.log2(perp), atol=PERPLEXITY_ATOL)
        # the rows are Gaussian in squared distance with the returned precision
        ref = np.exp(-beta[:, None] * (g.distances**2 - g.distances[:, :1] ** 2))
        np.testing.assert_allclose(P, ref / ref.sum(axis=1, keepdims=True), rtol=1e-10)


def test_joint_p_is_symmetrised_conditional(digits):
    import scipy.sparse as sp

    X, _ = digits
    g = knn_graph(X, 30, backend="exact")
    P = tsne_affinities(g, 10.0).to_scipy()
    cond, _ = conditional_rows(g.distances, 10.0)
    n = X.shape[0]
    C = sp.csr_matrix((cond.ravel(), g.indices.ravel(), np.arange(0, n * 30 + 1, 30)), (n, n))
    ref = ((C + C.T) / (2 * n)).toarray()
    np.testing.assert_allclose(P.toarray(), ref, atol=1e-16)
    assert abs(P.sum() - 1.0) < 1e-12
    Pc, Pt = sne_affinities(g, 10.0)
    np.testing.assert_allclose(Pc.to_scipy().toarray(), C.toarray(), atol=1e-16)
    np.testing.assert_allclose(Pt.to_scipy().toarray(), C.T.toarray(), atol=1e-16)


def test_fuzzy_union_matches_umap_learn(digits):
    from umap.umap_ import fuzzy_simplicial_set

    X, _ = digits
    g = knn_graph(X, 14, backend="exact")
    ours = umap_affinities(g, 15).to_scipy().toarray()
    n = X.shape[0]
    idx = np.hstack([np.arange(n)[:, None], g.indices])  # umap-learn lists self first
    dist = np.hstack([np.zeros((n, 1)), g.distances])
    theirs, sigmas, rhos = fuzzy_simplicial_set(
        X, 15, 0, "euclidean", knn_indices=idx, knn_dists=dist.astype(np.float32)
    )
    np.testing.assert_allclose(ours, theirs.toarray(), rtol=FUZZY_RTOL, atol=1e-7)
    vals, rho, sigma = fuzzy_rows(g.distances, 15.0)
    np.testing.assert_allclose(rho, rhos, rtol=1e-6)
    # sigma solves sum_j exp(-max(0, d - rho) / sigma) = log2(k) to UMAP's tolerance 1e-5
    np.testing.assert_allclose(
        vals.sum(axis=1)[sigma > 1e-3 * g.distances.mean(axis=1)], np.log2(15), atol=1e-5
    )


def test_ab_curve_matches_umap_learn():
    from umap.umap_ import find_ab_params

    for spread, min_dist in ((1.0, 0.1), (1.0, 0.5), (2.0, 0.0)):
        np.testing.assert_allclose(
            find_ab(spread, min_dist), find_ab_params(spread, min_dist), rtol=1e-6
        )


# --------------------------------------------------------------------------- gradients

# measured on 5 x 500 Gaussian points per dimension (sd 8 in 1-D and 2-D, 4 in 3-D): the
# FFT-interpolated Z is within 1.5% and the repulsive force within 4.6% (relative 2-norm) of
# the exact ones
FFT_Z_RTOL = 0.05


def _small_affinities(n=25, k=10, perplexity=3.0, seed=0):
    X = np.random.default_rng(seed).standard_normal((n, 5))
    return knn_graph(X, k, backend="exact"), perplexity


def _fd_gradient(f, Y, h=1e-6):
    G = np.empty_like(Y)
    for idx in np.ndindex(Y.shape):
        up, down = Y.copy(), Y.copy()
        up[idx] += h
        down[idx] -= h
        G[idx] = (f(up) - f(down)) / (2 * h)
    return G


@pytest.mark.parametrize("d", [2, 3])
def test_tsne_gradient_matches_finite_differences(d):
    from dimred_dask.blocks.tsne_gradient import Interpolation, kl_divergence, tsne_gradient

    g, perp = _small_affinities()
    P = tsne_affinities(g, perp)
    Pd = P.to_scipy().toarray()
    Y = np.random.default_rng(1).standard_normal((g.n_samples, d))

    def kl(Y):
        W = 1.0 / (1.0 + ((Y[:, None] - Y[None]) ** 2).sum(-1))
        np.fill_diagonal(W, 0.0)
        Q = W / W.sum()
        mask = Pd > 0
        return float((Pd[mask] * np.log(Pd[mask] / Q[mask])).sum())

    Z, g4 = tsne_gradient(P.indptr, P.indices, P.data, Y, 1.0, "exact", Interpolation())
    np.testing.assert_allclose(4 * g4, _fd_gradient(kl, Y), rtol=FD_RTOL, atol=1e-9)
    assert kl_divergence(P.indptr, P.indices, P.data, Y, Z) == pytest.approx(kl(Y), rel=1e-12)


@pytest.mark.parametrize("d", [1, 2, 3])
def test_fft_repulsion_close_to_exact(d):
    from dimred_dask.blocks.tsne_gradient import Interpolation, repulsion

    Y = np.random.default_rng(d).standard_normal((500, d)) * (4 if d == 3 else 8)
    Ze, re = repulsion(Y, "exact", Interpolation())
    Zf, rf = repulsion(Y, "fft", Interpolation(3, 10 if d == 3 else 50, 1.0))
    assert abs(Zf - Ze) / Ze < FFT_Z_RTOL
    assert np.linalg.norm(rf / Zf - re / Ze) / np.linalg.norm(re / Ze) < FFT_GRAD_RTOL


def test_sne_gradient_matches_finite_differences():
    from dimred_dask.blocks.tsne_kernels import sne_cost_grad

    g, perp = _small_affinities(n=20)
    P, PT = sne_affinities(g, perp)
    Pd = P.to_scipy().toarray()
    Y = np.random.default_rng(2).standard_normal((g.n_samples, 2))

    def cost(Y):  # sum_i KL(P_i || Q_i), q_{j|i} ~ exp(-|y_i - y_j|^2)
        E = np.exp(-((Y[:, None] - Y[None]) ** 2).sum(-1))
        np.fill_diagonal(E, 0.0)
        Q = E / E.sum(axis=1, keepdims=True)
        mask = Pd > 0
        return float((Pd[mask] * np.log(Pd[mask] / Q[mask])).sum())

    c, grad = sne_cost_grad(P.indptr, P.indices, P.data, PT.indptr, PT.indices, PT.data, Y)
    assert c == pytest.approx(cost(Y), rel=1e-12)
    np.testing.assert_allclose(grad, _fd_gradient(cost, Y), rtol=FD_RTOL, atol=1e-9)


def test_umap_gradients_match_finite_differences():
    from dimred_dask.blocks.umap_kernels import attractive_coeff, repulsive_coeff
    from dimred_dask.methods.umap import cross_entropy

    a, b = find_ab(1.0, 0.1)
    rng = np.random.default_rng(3)
    # the kernel's per-pair coefficients: -log q and -log(1 - q), q = 1 / (1 + a d^2b)
    for _ in range(5):
        yi, yj = rng.standard_normal(2), rng.standard_normal(2)

        def att(y):
            return np.log1p(a * (((y - yj) ** 2).sum()) ** b)

        def rep(y):
            d2b = (((y - yj) ** 2).sum()) ** b
            return -np.log(a * d2b / (1 + a * d2b))

        d2 = ((yi - yj) ** 2).sum()
        np.testing.assert_allclose(
            attractive_coeff(d2, a, b) * (yi - yj), _fd_gradient(att, yi), rtol=FD_RTOL
        )
        np.testing.assert_allclose(
            -repulsive_coeff(d2, a, b, 0.0) * (yi - yj), _fd_gradient(rep, yi), rtol=FD_RTOL
        )
    # seed 004's gradient of the cross-entropy (sum over unordered pairs) on a real graph
    g, _ = _small_affinities(n=30)
    P = umap_affinities(g, 6)
    Pd = P.to_scipy().toarray()
    Y = rng.standard_normal((30, 2))
    diff = Y[:, None] - Y[None]
    D2 = (diff**2).sum(-1)
    np.fill_diagonal(D2, 1.0)
    c = 2 * a * b * D2 ** (b - 1) * Pd / (1 + a * D2**b) - 2 * b * (1 - Pd) / (D2 * (1 + a * D2**b))
    np.fill_diagonal(c, 0.0)
    seed_grad = (c[:, :, None] * diff).sum(axis=1)
    fd = _fd_gradient(lambda Y: cross_entropy(P, Y, a, b)[0], Y)
    np.testing.assert_allclose(seed_grad, fd, rtol=FD_RTOL, atol=1e-8)


# --------------------------------------------------------------------------- quality


def _quality(X, y, Y, k=15):
    return trustworthiness(X, Y, k), _accuracy(Y, y)


def test_tsne_quality_against_opentsne(digits, mixture):
    from openTSNE import TSNE as OpenTSNE

    for X, y in (digits, mixture):
        ours = tsne(X, random_state=0)
        theirs = np.asarray(OpenTSNE(n_jobs=2, random_state=0).fit(X))
        (t_ours, a_ours), (t_theirs, a_theirs) = (
            _quality(X, y, ours.embedding),
            _quality(X, y, theirs),
        )
        assert t_ours >= t_theirs - TRUST_MARGIN, (t_ours, t_theirs)
        assert a_ours >= a_theirs - ACCURACY_MARGIN, (a_ours, a_theirs)
        assert ours.embedding.shape == (X.shape[0], 2) and np.isfinite(ours.kl_divergence)


def test_umap_quality_against_umap_learn(digits, mixture):
    import umap as umap_learn

    for X, y in (digits, mixture):
        ours = umap(X, random_state=0)
        theirs = umap_learn.UMAP(random_state=0).fit_transform(X)
        (t_ours, a_ours), (t_theirs, a_theirs) = (
            _quality(X, y, ours.embedding),
            _quality(X, y, theirs),
        )
        assert t_ours >= t_theirs - TRUST_MARGIN, (t_ours, t_theirs)
        assert a_ours >= a_theirs - ACCURACY_MARGIN, (a_ours, a_theirs)


# --------------------------------------------------------------------------- determinism


@pytest.fixture
def one_thread():
    old = numba.get_num_threads()
    yield lambda: numba.set_num_threads(1)
    numba.set_num_threads(old)


def test_same_seed_same_bits_for_any_thread_count(digits, one_thread):
    X = digits[0][:1000]
    runs = {}
    for threads in (2, 1):
        if threads == 1:
            one_thread()
        runs[threads] = (
            umap(X, random_state=3, n_epochs=60).embedding,
            tsne(
                X, random_state=3, gradient="fft", n_iter=120, early_exaggeration_iter=60
            ).embedding,
        )
    for a, b in zip(runs[1], runs[2]):
        np.testing.assert_array_equal(a, b)
    assert not np.array_equal(umap(X, random_state=4, n_epochs=60).embedding, runs[1][0])


@pytest.mark.parametrize("method", ["tsne", "umap", "sne"])
def test_resume_from_checkpoint_equals_uninterrupted(digits, method):
    X = digits[0][:400]
    run = {
        "tsne": lambda **kw: tsne(
            X, n_iter=120, early_exaggeration_iter=50, checkpoint_every=20, **kw
        ),
        "umap": lambda **kw: umap(X, n_epochs=80, checkpoint_every=20, **kw),
        "sne": lambda **kw: sne(X, n_iter=100, perplexity=10, checkpoint_every=20, **kw),
    }
    calm = run[method]().embedding
    ck = MemoryCheckpoint(fail_after=3)  # saves at 20, 40, 60: "crashes" after the third
    with pytest.raises(InterruptedError):
        run[method](checkpoint=ck)
    assert [s["iteration"] for s in ck.states] == [20, 40, 60]
    resumed = run[method](checkpoint=ck)
    np.testing.assert_array_equal(resumed.embedding, calm)
    assert resumed.info["resumed_from"] == 60


# --------------------------------------------------------------------------- transform


@pytest.mark.parametrize("cls", [TSNE, UMAP], ids=lambda c: c.__name__)
def test_transform_refuses_nonfinite_rows_of_dask_input(cls, digits):
    """NumPy rows are checked before the placement; dask rows in the chunk's task: a NaN or
    inf row is an InputError naming its row in the whole array, never a position."""
    import dask.array as da

    X = digits[0][:200]
    est = cls(random_state=0, n_iter=50) if cls is TSNE else cls(random_state=0, n_epochs=20)
    est.fit(X)
    new = X[:30].copy()
    new[17, 4] = np.inf
    Y = est.transform(da.from_array(new, chunks=(10, -1)))  # lazy: nothing checked yet
    with pytest.raises(InputError, match="transform needs finite values; found 1 inf in row 17"):
        Y.compute(scheduler="threads")


@pytest.mark.parametrize("search", ["exact", "index"])
def test_transform_places_new_points_near_their_class(digits, search, monkeypatch):
    import dask.array as da

    from dimred_dask.graphs import query

    if search == "index":  # the training rows' index, as above 20 000 training rows
        monkeypatch.setattr(query, "EXACT_REFERENCE_MAX", 500)
    X, y = digits
    perm = np.random.default_rng(0).permutation(len(X))
    train, test = perm[:1400], perm[1400:]
    for est in (TSNE(random_state=0, n_iter=500), UMAP(random_state=0, n_epochs=200)):
        est.fit(X[train])
        clf = KNeighborsClassifier(10).fit(est.embedding_, y[train])
        Yt = est.transform(X[test])
        # measured 0.98 - 0.99 (t-SNE, UMAP): held-out digits land among their own class
        assert clf.score(Yt, y[test]) >= 0.95
        # chunk by chunk on dask input: the same positions whatever the chunking (exact
        # search); the index's query fills a short candidate list at random along its batch,
        # so a rare row may differ between chunkings (measured: 1 of 397), never between
        # runs with the same chunking
        # (in this process: the threshold patched above does not reach worker processes)
        Yd = est.transform(da.from_array(X[test], chunks=(150, -1)))
        assert isinstance(Yd, da.Array)
        if search == "exact":
            np.testing.assert_array_equal(Yd.compute(scheduler="threads"), Yt)
        else:
            same = (Yd.compute(scheduler="threads") == Yt).all(axis=1)
            assert same.mean() >= 0.99, same.mean()
            again = est.transform(da.from_array(X[test], chunks=(150, -1)))
            np.testing.assert_array_equal(
                Yd.compute(scheduler="threads"), again.compute(scheduler="sync")
            )


# --------------------------------------------------------------------------- sample fit


@pytest.mark.parametrize("method", ["umap", "tsne"])
def test_fit_sample_fits_a_sample_and_places_the_rest(digits, method):
    import dask.array as da

    X, y = digits
    fit, est = (
        (umap, UMAP(random_state=3, n_epochs=200, fit_sample=700))
        if method == "umap"
        else (tsne, TSNE(random_state=3, n_iter=400, fit_sample=700))
    )
    opts = {"random_state": 3, **({"n_epochs": 200} if method == "umap" else {"n_iter": 400})}
    m = fit(X, fit_sample=700, **opts)
    rows = np.sort(np.random.default_rng(3).choice(len(X), 700, replace=False))
    np.testing.assert_array_equal(m.fit_rows, rows)  # drawn with the recorded seed
    assert m.info["fit_sample"] == {
        **m.info["fit_sample"],
        "rows": 700,
        "of": len(X),
        "seed": 3,
        "placed_rows": len(X) - 700,
    }
    # the sampled rows are exactly a fit on those rows; the others placed by transform
    alone = fit(X[rows], **opts)
    np.testing.assert_array_equal(m.embedding[rows], alone.embedding)
    full = fit(X, **opts)
    t_sample = trustworthiness(X, m.embedding, 15)
    # measured: 0.98-0.99 for both, sampled and full
    assert t_sample >= trustworthiness(X, full.embedding, 15) - 0.02
    assert _accuracy(m.embedding, y) >= 0.9
    # the estimator: the same embedding, dask input in row chunks gives the same result,
    # transform of new rows places them against the fit sample
    Y = est.fit_transform(X)
    np.testing.assert_array_equal(Y, m.embedding)
    Yd = est.fit_transform(da.from_array(X, chunks=(500, -1)))
    np.testing.assert_array_equal(np.asarray(Yd), m.embedding)
    assert est._fit_X.shape == (700, 64)
    np.testing.assert_array_equal(
        est.transform(X[rows[:50]]), alone_place(fit, X, rows, alone, method)[:50]
    )


def alone_place(fit, X, rows, alone, method):
    from importlib import import_module

    mod = import_module(f"dimred_dask.methods.{method}")
    return mod._place(X[rows], alone.embedding, X[rows], alone.params)


# --------------------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda X: tsne(X, perplexity=40), r"perplexity < n_samples / 3"),
        (lambda X: tsne(X, n_components=4), r"n_components in 1\.\.3"),
        (lambda X: sne(X, perplexity=0), r"positive perplexity"),
        (lambda X: umap(X, n_neighbors=100), r"n_neighbors in 2\.\.99"),
        (lambda X: umap(X, min_dist=2.0, spread=1.0), r"min_dist <= spread"),
        (lambda X: umap(X, graph=knn_graph(X[:50], 10)), r"graph has 50 rows; the data have 100"),
        (
            lambda X: tsne(X, graph=knn_graph(X, 5)),
            r"needs 90 neighbours per point; the kNN graph has 5",
        ),
        (lambda X: tsne(X, perplexity=[5, 10]), r"use tsne_sweep"),
        (lambda X: umap(X, init="laplacian"), r"init must be one of spectral"),
        (lambda X: umap(X, fit_sample=5), r"fit_sample must be an int >= 10"),
        (lambda X: tsne(X, fit_sample="half"), r"fit_sample must be an int >= 10"),
        (lambda X: umap(X, fit_sample=50, graph=knn_graph(X, 14)), r"a graph of all 100 rows"),
        (lambda X: tsne(X, fit_sample=50, init=np.zeros((100, 2))), r"init array of 100 rows"),
    ],
)
def test_bad_input_is_refused(call, match):
    X = np.random.default_rng(0).standard_normal((100, 5))
    with pytest.raises(InputError, match=match) as err:
        call(X)
    assert "Fix:" in str(err.value)


def test_sweep_on_workers_equals_in_process(client, digits, monkeypatch):
    from importlib import import_module  # the package exports functions of the same names

    runs = import_module("dimred_dask.methods._neighbor_runs")
    tsne_module = import_module("dimred_dask.methods.tsne")
    umap_module = import_module("dimred_dask.methods.umap")

    X = digits[0][:600]
    seen = []
    on_workers = umap_module.umap_sweep(
        X, random_state=[0, 1], n_epochs=50, callback=lambda i, it, total, loss: seen.append(i)
    )
    assert set(seen) == {0, 1}  # progress relayed from the task on each worker
    assert {m.info["threads"] for m in on_workers} == {1}  # 2 cores, 2 tasks at once
    t_workers = tsne_module.tsne_sweep(
        X, perplexity=[10, 20], n_iter=80, early_exaggeration_iter=30
    )
    for module in (runs, tsne_module, umap_module):  # the same calls without the cluster
        monkeypatch.setattr(module, "active_client", lambda: None)  # (as `in_process`)
    for a, s in zip(on_workers, (0, 1)):
        np.testing.assert_array_equal(a.embedding, umap(X, random_state=s, n_epochs=50).embedding)
    for a, p in zip(t_workers, (10, 20)):
        np.testing.assert_array_equal(
            a.embedding, tsne(X, perplexity=p, n_iter=80, early_exaggeration_iter=30).embedding
        )


def _reference_max(value):
    from dimred_dask.graphs import query

    query.EXACT_REFERENCE_MAX = value


def test_the_index_placement_is_the_same_on_the_workers(client, digits, monkeypatch):
    import dask.array as da

    from dimred_dask.graphs import query

    X, _ = digits
    est = UMAP(random_state=0, n_epochs=100).fit(X[:1200])
    new = da.from_array(X[1200:], chunks=(200, -1))
    monkeypatch.setattr(query, "EXACT_REFERENCE_MAX", 500)  # the index, in this process
    here = est.transform(new).compute(scheduler="sync")
    client.run(_reference_max, 500)  # ... and on the workers, which build their own
    try:
        there = est.transform(new).compute()
    finally:
        client.run(_reference_max, 20_000)
    np.testing.assert_array_equal(there, here)


@pytest.mark.parametrize("Est", [TSNE, UMAP])
def test_more_components_than_features(Est):
    """One feature, two components: PCA gives the first coordinate of the initialisation,
    small noise the second (it used to fail in the initialisation with PCA's message)."""
    x = np.random.default_rng(0).standard_normal((300, 1))
    est = Est(random_state=0, n_iter=250) if Est is TSNE else Est(random_state=0, n_epochs=50)
    Y = est.fit_transform(x)
    assert Y.shape == (300, 2) and np.isfinite(Y).all()
    # the embedding keeps the order of the line: neighbours on it stay neighbours
    assert trustworthiness(x, Y, n_neighbors=5) > 0.9
    assert est.transform(x[:5]).shape == (5, 2)
