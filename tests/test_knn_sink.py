"""The partitioned kNN backend writing the graph from the tasks that merge it (``sink=``): the
stored graph is the in-memory one, and through the flow the graph of a method that needs no
connectivity check never comes to the flow's process (real Dask workers, real Prefect API)."""

from __future__ import annotations

import dask.array as da
import numpy as np
import pytest
from sklearn.datasets import load_digits

from dimred_dask.graphs import graph_components, knn_graph, sample_recall
from dimred_dask.io import RunStore, open_output, save_array


@pytest.fixture(scope="module")
def blobs():
    from sklearn.datasets import make_blobs

    X, _ = make_blobs(3000, 10, centers=5, random_state=0)
    return X


def test_graph_written_from_the_workers_is_the_in_memory_graph(
    client, blobs, tmp_path, monkeypatch
):
    """Three row ranges of 1000 (two chunks of 500 each) written by their merge tasks: the
    stored arrays, the counts in ``info`` and the sampled recall equal the in-memory graph's."""
    import dimred_dask.graphs.partitioned as knn
    from flows.knn import StoreGraph

    monkeypatch.setattr(knn, "MERGE_ROWS", 800)  # ranges of whole chunks: 2 x 500 rows
    store = RunStore(str(tmp_path / "run"))
    store.prepare("new", {"method": "test"})
    sink = StoreGraph.create(store, 3000, 10, rows_per_chunk=500)
    X = da.from_array(blobs, chunks=(750, 10))
    kw = dict(backend="partitioned", random_state=0, n_partitions=4)
    out = knn_graph(X, 10, sink=sink, **kw)
    ref = knn_graph(blobs, 10, **kw)
    assert out is sink and out.backend == "partitioned" and out.metric == "euclidean"
    idx, dist = sink.rows(0, 3000, 10)
    np.testing.assert_array_equal(idx, ref.indices)
    # squared distances as |x|^2 + |y|^2 - 2 x.y by BLAS in other processes (another order
    # of summation): equal up to rounding of the norms' size, d * eps * (|x|^2 + |y|^2)
    bound = 2 * blobs.shape[1] * np.finfo(float).eps * 2 * (blobs**2).sum(axis=1).max()
    np.testing.assert_allclose(dist**2, ref.distances**2, rtol=0, atol=bound)
    for key in ("rows_short_of_k", "n_rows_with_duplicates", "n_partitions", "cell_rows"):
        assert out.info[key] == ref.info[key], key
    assert store.chunk_count("graph/indices") == 6  # every chunk written, once
    np.testing.assert_array_equal(
        sink.take(np.array([0, 499, 500, 2999]))[0], ref.indices[[0, 499, 500, 2999]]
    )
    assert sample_recall(X, sink, 300) == sample_recall(blobs, ref, 300)


def test_the_recall_search_rewrites_the_graph_where_it_is(client, tmp_path):
    """Rows of high intrinsic dimension, short of the target with 2 cells a row: the second
    build (4 cells a row) replaces the graph in the sink; its recall is measured there, and
    the rounds and the stored graph are the in-memory search's."""
    from flows.knn import StoreGraph

    rows = np.random.default_rng(0).standard_normal((6000, 30))
    store = RunStore(str(tmp_path / "run"))
    store.prepare("new", {"method": "test"})
    sink = StoreGraph.create(store, 6000, 10, rows_per_chunk=1500)
    kw = dict(backend="partitioned", random_state=0, n_partitions=24, recall_budget=100)
    out = knn_graph(da.from_array(rows, chunks=(1500, 30)), 10, sink=sink, **kw)
    ref = knn_graph(rows, 10, **kw)
    got, want = out.info["recall_search"], ref.info["recall_search"]
    assert [r["overlap"] for r in got["rounds"]] == [2, 4] and got["met"]
    assert [r["recall"] for r in got["rounds"]] == [r["recall"] for r in want["rounds"]]
    assert out.info["overlap"] == 4
    np.testing.assert_array_equal(sink.rows(0, 6000, 10)[0], ref.indices)


def test_the_flow_writes_a_partitioned_graph_from_the_workers(
    client, prefect_api, tmp_path, monkeypatch
):
    """UMAP (no connectivity rule) with the partitioned backend through the flow: the graph
    is written by the workers, equals the in-memory graph, its components are counted where
    it is; a second run finds it in the graph cache, copied there by a task, and copied
    from there into its own store by a task."""
    from flows.embed import embed
    from flows.knn import GraphCache, load_graph

    X = load_digits().data.astype(np.float32)
    uri = str(tmp_path / "digits.zarr")
    save_array(X, uri, chunks=(500, 64))
    params = {"knn_backend": "partitioned", "n_epochs": 30, "random_state": 0}
    m = embed(uri, str(tmp_path / "out" / "a"), method="umap", params=params)
    g = m["graph"]
    assert g["written_from_workers"] is True and g["source"] == "computed"
    stored = load_graph(open_output(str(tmp_path / "out" / "a")))
    ref = knn_graph(X, stored.n_neighbors, backend="partitioned", random_state=0)
    np.testing.assert_array_equal(stored.indices, ref.indices)
    np.testing.assert_allclose(stored.distances, ref.distances, rtol=1e-6)  # float32 rows
    assert g["components"] == graph_components(ref)[0]
    assert g["cached"] is True
    assert np.isfinite(open_output(str(tmp_path / "out" / "a")).read_array("embedding")).all()

    def read_here(self, fp):
        raise AssertionError("the cached graph was read into the flow's process")

    monkeypatch.setattr(GraphCache, "load", read_here)  # copied by a task on a worker instead
    m2 = embed(uri, str(tmp_path / "out" / "b"), method="umap", params=params)
    assert m2["graph"]["source"] == "cache" and m2["graph"]["written_from_workers"] is True
    assert m2["stages"]["knn"] == "reused from cache"
    again = load_graph(open_output(str(tmp_path / "out" / "b")))
    np.testing.assert_array_equal(again.indices, stored.indices)
    np.testing.assert_array_equal(again.distances, stored.distances)


def test_a_method_that_needs_one_component_checks_the_stored_graph_on_a_worker(
    client, prefect_api, tmp_path
):
    """Laplacian eigenmaps (one component needed) with the partitioned backend: the graph is
    written from the workers and its components counted there; a connected graph runs, a
    disconnected one is refused with the sizes of its components and its arrays removed."""
    from sklearn.datasets import make_blobs

    from dimred_dask.errors import DisconnectedGraphError
    from flows.embed import embed
    from flows.knn import load_graph

    X, _ = make_blobs(2000, 8, centers=3, cluster_std=3.0, random_state=1)
    X = X.astype(np.float32)
    uri = str(tmp_path / "x.zarr")
    save_array(X, uri, chunks=(500, 8))
    params = {"knn_backend": "partitioned", "n_neighbors": 10}
    out = str(tmp_path / "lap")
    m = embed(uri, out, method="laplacian", params=params, graph_cache="none")
    assert m["graph"]["written_from_workers"] is True and m["graph"]["components"] == 1
    ref = knn_graph(X, 10, backend="partitioned", random_state=0)
    np.testing.assert_array_equal(load_graph(open_output(out)).indices, ref.indices)
    assert np.isfinite(open_output(out).read_array("embedding")).all()

    far = np.concatenate([X[:1000], X[1000:] + 1000.0])  # two groups far apart
    uri2 = str(tmp_path / "far.zarr")
    save_array(far, uri2, chunks=(500, 8))
    out2 = tmp_path / "far"
    with pytest.raises(DisconnectedGraphError, match=r"2 components of sizes 1000, 1000"):
        embed(uri2, str(out2), method="laplacian", params=params, graph_cache="none")
    assert not (out2 / "graph").exists()  # the refused graph's arrays went with it
    assert not RunStore(str(out2)).committed()
