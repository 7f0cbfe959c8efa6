"""Block statistics (exact merges, float32 precision) and the quality metrics."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.manifold import trustworthiness as sk_trustworthiness

from dimred_dask.blocks.stats import block_stats, merge_many
from dimred_dask.errors import InputError
from dimred_dask.metrics import knn_recall, reconstruction_error, sample_rows, trustworthiness
from dimred_dask.metrics.quality import SPARSE_BLOCK_ROWS

# A float32 scatter matrix made of float32 panel products summed in float64 was measured at
# 2e-8 relative error (bench/RESULTS.md); 1e-6 leaves room for other data and BLAS builds.
FLOAT32_SCATTER_RTOL = 1e-6


def test_merged_block_stats_equal_the_whole(rng):
    X = rng.standard_normal((1000, 7)) * 3 + 100.0  # a large mean: no cancellation allowed
    cuts = [0, 1, 50, 333, 334, 999, 1000]
    merged = merge_many(block_stats(X[a:b], a) for a, b in zip(cuts[:-1], cuts[1:]))
    Xc = X - X.mean(0)
    assert merged.n == 1000
    np.testing.assert_allclose(merged.mean, X.mean(0), rtol=1e-14)
    np.testing.assert_allclose(merged.m2, Xc.T @ Xc, rtol=1e-11)
    np.testing.assert_allclose(merged.sumsq, (Xc**2).sum(0), rtol=1e-11)


def test_float32_scatter_accuracy(rng):
    X = (rng.standard_normal((20000, 64)) * np.linspace(10, 0.1, 64) + 50).astype(np.float32)
    stats = block_stats(X)
    X64 = X.astype(np.float64)
    Xc = X64 - X64.mean(0)
    exact = Xc.T @ Xc
    err = np.abs(stats.m2 - exact).max() / np.abs(exact).max()
    assert err < FLOAT32_SCATTER_RTOL
    # each centred value x - shift is rounded to float32 (6e-8 of |x - shift|, a few standard
    # deviations at most) before its float64 sum: the mean is within 6e-8 std of exact
    spread = 6e-8 * X64.std(0)
    assert np.all(np.abs(stats.mean - X64.mean(0)) <= spread)
    np.testing.assert_allclose(stats.sumsq, np.diag(exact), rtol=FLOAT32_SCATTER_RTOL)
    moments = block_stats(X, gram=False)
    assert np.all(np.abs(moments.mean - X64.mean(0)) <= spread)
    np.testing.assert_allclose(moments.sumsq, np.diag(exact), rtol=FLOAT32_SCATTER_RTOL)


def test_nonfinite_blocks_report_rows(rng):
    X = rng.standard_normal((100, 3))
    X[[10, 70], 1] = np.nan
    X[40, 0] = np.inf
    merged = merge_many([block_stats(X[:50], 0), block_stats(X[50:], 50)])
    assert merged.nonfinite == 3 and merged.n_nan == 2
    assert merged.bad_rows == (10, 40, 70) and merged.n_bad_rows == 3  # every row, in order


@pytest.mark.parametrize("k", [1, 5, 12])
def test_trustworthiness_matches_sklearn(rng, k):
    X = rng.standard_normal((200, 8))
    Y = X[:, :2] + 0.3 * rng.standard_normal((200, 2))
    assert trustworthiness(X, Y, k) == pytest.approx(
        sk_trustworthiness(X, Y, n_neighbors=k), abs=1e-12
    )


def _full_orders(X, Y):
    """Each row's other rows in order of squared distance, ties by row number, from the two
    whole n x n matrices (the direct definitions below)."""
    from scipy.spatial.distance import cdist

    orders = []
    for Z in (X, Y):
        d = cdist(Z, Z, "sqeuclidean")
        np.fill_diagonal(d, np.inf)
        orders.append(np.argsort(d, axis=1, kind="stable"))
    return orders


def _full_trustworthiness(X, Y, k):
    ox, oy = _full_orders(X, Y)
    n = len(X)
    ranks = np.empty_like(ox)
    ranks[np.arange(n)[:, None], ox] = np.arange(1, n + 1)
    r = ranks[np.arange(n)[:, None], oy[:, :k]]
    return 1 - 2 / (n * k * (2 * n - 3 * k - 1)) * np.clip(r - k, 0, None).sum()


def _full_knn_recall(X, Y, k):
    ox, oy = _full_orders(X, Y)
    return np.mean([len(np.intersect1d(a, b)) for a, b in zip(ox[:, :k], oy[:, :k])]) / k


@pytest.mark.parametrize("block_elements", [1, 37 * 300, 1 << 18])
def test_metrics_made_block_by_block_equal_the_whole_matrices(rng, monkeypatch, block_elements):
    """Row blocks of one row, of 37 rows (a ragged last block) and one block: the same
    trustworthiness and recall as from the whole matrices, on data with tied distances
    (rounded) where the order of ties decides (scikit-learn breaks ties otherwise; it is
    compared on untied data above)."""
    import dimred_dask.metrics.quality as quality

    monkeypatch.setattr(quality, "BLOCK_ELEMENTS", block_elements)
    X = np.round(rng.standard_normal((300, 6)), 1)
    Y = np.round(X[:, :2] + 0.3 * rng.standard_normal((300, 2)), 0)
    for k in (1, 7):
        assert trustworthiness(X, Y, k) == pytest.approx(_full_trustworthiness(X, Y, k), abs=1e-12)
        assert knn_recall(X, Y, k) == pytest.approx(_full_knn_recall(X, Y, k), abs=1e-12)


def test_metrics_hold_a_block_of_rows_not_the_sample_squared(rng):
    """2000 sampled rows (the evaluate stage's sample): the whole distance matrices and their
    orders would be 4 x 32 MB; the blocks stay under 16 MiB."""
    import tracemalloc

    X, Y = rng.standard_normal((2000, 50)), rng.standard_normal((2000, 2))
    tracemalloc.start()
    try:
        trustworthiness(X, Y, 10)
        knn_recall(X, Y, 10)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 16 * 2**20, peak / 2**20


@pytest.mark.parametrize("k", [0, -1, 10, 11, 2.5, True])
def test_trustworthiness_refuses_n_neighbors_out_of_range(rng, k):
    X = rng.standard_normal((20, 3))
    with pytest.raises(InputError, match="n_neighbors") as err:
        trustworthiness(X, X[:, :2], k)
    assert err.value.fix and isinstance(err.value, ValueError)


@pytest.mark.parametrize("k", [0, -1, 20, 21, 2.5, True])
def test_knn_recall_refuses_n_neighbors_out_of_range(rng, k):
    """0 would divide by zero; n_samples or more would count each point as its own
    neighbour."""
    X = rng.standard_normal((20, 3))
    with pytest.raises(InputError, match="n_neighbors") as err:
        knn_recall(X, X[:, :2], k)
    assert err.value.fix
    assert knn_recall(X, X * 2.0, 19) == 1.0  # every other point: the largest k taken


def test_knn_recall_and_reconstruction(rng):
    X = rng.standard_normal((150, 5))
    assert knn_recall(X, X * 2.0, 7) == 1.0  # a similarity keeps every neighbour
    assert knn_recall(X, rng.standard_normal((150, 5)), 7) < 0.3
    assert reconstruction_error(X, X, X.mean(0)) == 0.0
    assert reconstruction_error(X, np.broadcast_to(X.mean(0), X.shape), X.mean(0)) == 1.0
    idx = sample_rows(1000, 100, 3)
    assert len(np.unique(idx)) == 100 and np.all(np.diff(idx) > 0)
    np.testing.assert_array_equal(idx, sample_rows(1000, 100, 3))


def test_reconstruction_error_block_by_block(rng):
    """A reconstruction given as a function of row slices (never whole in memory) gives the
    error of the whole array, over several blocks, for dense and sparse samples."""
    import scipy.sparse as sp

    X = rng.standard_normal((2500, 6)) * np.array([3, 2, 1, 0.5, 0.1, 0.1])
    Xhat = X.copy()
    Xhat[:, 3:] = 0.0
    calls = []

    def rebuild(rows):
        calls.append(rows)
        return Xhat[rows]

    direct = float(((X - Xhat) ** 2).sum() / ((X - X.mean(0)) ** 2).sum())
    assert reconstruction_error(X, rebuild, X.mean(0)) == pytest.approx(direct, rel=1e-12)
    assert len(calls) == -(-2500 // SPARSE_BLOCK_ROWS) > 1  # block by block
    S = sp.csr_matrix(np.where(np.abs(X) > 1, X, 0.0))
    dense = S.toarray()
    assert reconstruction_error(S, lambda rows: Xhat[rows], X.mean(0)) == pytest.approx(
        reconstruction_error(dense, Xhat, X.mean(0)), rel=1e-12
    )
