"""Models loaded from a run store leave their training-sized arrays (X_fit, the training
embedding, geodesics to landmarks, the eigenvector coefficients) in the store: loading costs
the model's small arrays, and `transform` reads the rows it needs, block by block, in the
process that runs it (a worker, for dask input), locally or from S3."""

from __future__ import annotations

import pathlib
import subprocess
import sys
import tracemalloc
import uuid

import dask.array as da
import numpy as np
import pytest

import dimred_dask.io.stored_rows as stored_rows
from dimred_dask.io import RunStore, StoredRows
from dimred_dask.methods import (
    MDS,
    Isomap,
    KernelPCA,
    LandmarkIsomap,
    LaplacianEigenmaps,
    LocallyLinearEmbedding,
)
from flows.adapter import STORED_ARRAYS, save_model
from flows.methods import get_method

CASES = {
    "lle": lambda: LocallyLinearEmbedding(n_neighbors=12),
    "isomap": lambda: Isomap(n_neighbors=12),
    "landmark-isomap": lambda: LandmarkIsomap(n_neighbors=12, n_landmarks=60),
    "laplacian": lambda: LaplacianEigenmaps(n_neighbors=12),
    "mds": lambda: MDS(),
    "kpca": lambda: KernelPCA(kernel="rbf"),
}


def _stored(model) -> set:
    return {k for k, v in vars(model).items() if isinstance(v, StoredRows)}


@pytest.mark.parametrize("name", sorted(CASES))
def test_a_loaded_model_reads_its_training_rows_from_the_store(name, tmp_path, monkeypatch):
    rng = np.random.default_rng(3)
    X, new = rng.normal(size=(1500, 8)), rng.normal(size=(97, 8))
    est = CASES[name]().fit(X)
    # chunks of a few rows: the transform's sums and top-k run across many stored blocks
    monkeypatch.setattr(stored_rows, "MODEL_CHUNK_BYTES", 4096)
    store = RunStore(str(tmp_path / "run"))
    save_model(est._model, store)
    loaded = get_method(name).load(store)
    kept = _stored(loaded) | (_stored(loaded.mds) if hasattr(loaded, "mds") else set())
    assert kept and kept <= {n.rstrip("_").removeprefix("mds_") for n in STORED_ARRAYS}, kept
    if name == "isomap":  # the MDS of the n x n geodesics: its n x k arrays stay stored too
        assert _stored(loaded.mds) == {"embedding", "proj"}
    assert all(getattr(loaded, n).chunk_rows < 1500 for n in _stored(loaded))
    want = est.transform(new)
    got = loaded.transform(new)
    np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-12 * np.abs(want).max())
    # dask input: the same, lazily
    lazy = loaded.transform(da.from_array(new, chunks=40))
    assert isinstance(lazy, da.Array)
    np.testing.assert_allclose(lazy.compute(), want, rtol=1e-9, atol=1e-12 * np.abs(want).max())


def test_stored_rows_read_what_zarr_holds(tmp_path, monkeypatch):
    monkeypatch.setattr(stored_rows, "MODEL_CHUNK_BYTES", 1000)
    A = np.arange(600 * 7, dtype=np.float32).reshape(600, 7)
    store = RunStore(str(tmp_path / "run"))
    store.write_array("model/X_fit_", A)
    s = store.read_group("model", lazy={"X_fit_"})["X_fit_"]
    assert isinstance(s, StoredRows) and s.chunk_rows == 35 and s.shape == A.shape
    idx = np.array([[599, 0, 3], [3, 3, 598]])
    np.testing.assert_array_equal(s.take_rows(idx), A[idx])
    np.testing.assert_array_equal(s[idx], A[idx])
    np.testing.assert_array_equal(np.concatenate([b for _, b in s.row_blocks()]), A)
    assert [lo for lo, _ in s.row_blocks()][:3] == [0, 35, 70]
    np.testing.assert_array_equal(np.asarray(s), A)
    np.testing.assert_array_equal(s.to_dask().compute(), A)
    with pytest.raises(IndexError):
        s.take_rows([600])


@pytest.fixture
def bucket(s3_server):
    import s3fs

    name = f"models-{uuid.uuid4().hex[:8]}"
    s3fs.S3FileSystem().mkdir(name)
    return name


def test_transform_after_load_from_s3_without_the_training_rows_in_memory(
    bucket, client, monkeypatch
):
    """A model saved to S3 loads without its training-sized arrays, and a dask transform
    carries only handles to them: the workers read the rows from S3 themselves. (Bytes are
    counted by pickling, not traced: the S3 server of the tests runs in this process.)"""
    import cloudpickle

    rng = np.random.default_rng(7)
    X = rng.normal(size=(12_000, 16))  # X_fit: 1.5 MB; geodesics to landmarks: 5.8 MB
    new = rng.normal(size=(300, 16))
    est = LandmarkIsomap(n_neighbors=10, n_landmarks=60).fit(X)
    monkeypatch.setattr(stored_rows, "MODEL_CHUNK_BYTES", 2**18)  # several chunks each
    url = f"s3://{bucket}/runs/iso"
    save_model(est._model, RunStore(url))
    want = est.transform(new)
    training = X.nbytes + est._model.reference.nbytes + est._model.embedding.nbytes

    loaded = get_method("landmark-isomap").load(RunStore(url))
    assert {"X_fit", "reference", "embedding"} <= _stored(loaded)
    assert len(cloudpickle.dumps(loaded)) < training / 100
    lazy = loaded.transform(da.from_array(new, chunks=75))
    graph = dict(lazy.__dask_graph__())
    assert len(cloudpickle.dumps(graph)) < new.nbytes + training / 100
    got = client.compute(lazy).result()
    np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-12 * np.abs(want).max())


def test_loading_a_model_costs_its_small_arrays(tmp_path):
    from sklearn.datasets import make_swiss_roll

    rng = np.random.default_rng(8)
    roll, _ = make_swiss_roll(10_000, random_state=8)
    X = roll @ np.linalg.qr(rng.normal(size=(16, 3)))[0].T  # a swiss roll in 16 dimensions
    est = LocallyLinearEmbedding(n_neighbors=10, eigen_solver="arpack").fit(X)
    store = RunStore(str(tmp_path / "run"))
    save_model(est._model, store)
    # the load's peak, traced in a fresh process: in this one, the session's cluster and
    # Prefect threads allocate while tracemalloc runs
    code = (
        "import sys, tracemalloc\n"
        "from dimred_dask.io import RunStore\n"
        "from flows.methods import get_method\n"
        "store = RunStore(sys.argv[1])\n"
        "get_method('lle').load(store)\n"  # the imports a first load makes, untraced
        "tracemalloc.start()\n"
        "model = get_method('lle').load(store)\n"
        "print(tracemalloc.get_traced_memory()[1])\n"
    )
    peak = int(
        subprocess.run(
            [sys.executable, "-c", code, store.url],
            capture_output=True,
            text=True,
            check=True,
            cwd=pathlib.Path(__file__).parents[1],
        ).stdout.split()[-1]
    )
    assert peak < X.nbytes / 10, (peak, X.nbytes)
    loaded = get_method("lle").load(store)
    assert {"X_fit", "embedding"} <= _stored(loaded)
    new = X[:50] + rng.normal(scale=0.1, size=(50, 16))
    want = est.transform(new)
    np.testing.assert_allclose(
        loaded.transform(new), want, rtol=1e-9, atol=1e-12 * np.abs(want).max()
    )


def test_load_model_refuses_what_it_cannot_load(tmp_path):
    from dimred_dask.errors import InputError, StoreError, UncommittedOutputError
    from dimred_dask.methods._neighbor_runs import EmbeddingSet
    from flows.methods import load_model

    with pytest.raises(StoreError, match="No run output"):
        load_model(str(tmp_path / "missing"))
    est = LocallyLinearEmbedding(n_neighbors=8).fit(np.random.default_rng(1).normal(size=(60, 3)))
    store = RunStore(str(tmp_path / "unfinished"))
    store.prepare("new", {"method": "lle"})
    save_model(est._model, store)
    with pytest.raises(UncommittedOutputError):
        load_model(str(tmp_path / "unfinished"))
    store.commit({"method": "lle"}, guard=None)
    loaded = load_model(str(tmp_path / "unfinished"))
    assert isinstance(loaded.X_fit, StoredRows) and loaded.n_features == 3
    with pytest.raises(InputError, match="fitted on 3 columns; X has 4"):
        loaded.transform(np.zeros((2, 4)))
    with pytest.raises(InputError):
        loaded.transform(np.array([[0.0, np.nan, 1.0]]))
    ints = np.array([[1, 0, -1], [0, 2, 1]])
    np.testing.assert_array_equal(loaded.transform(ints), est.transform(ints.astype(float)))
    umap_run = RunStore(str(tmp_path / "umap"))
    umap_run.prepare("new", {"method": "umap"})
    save_model(EmbeddingSet("umap", [np.zeros((60, 2))], [{}], [0.0]), umap_run)
    umap_run.commit({"method": "umap"}, guard=None)
    with pytest.raises(InputError, match="keeps its embeddings only"):
        load_model(str(tmp_path / "umap"))


def test_exact_isomap_leaves_its_geodesic_matrix_on_the_workers(client, tmp_path, monkeypatch):
    """The flow's exact Isomap: the n x n geodesics stay persisted on the workers, classical
    MDS (randomized, as above 4000 rows) reads them there, and the model's reference goes to
    the run store from there; the embedding and the stored geodesics are the in-process
    fit's."""
    from sklearn.datasets import make_swiss_roll

    from dimred_dask.graphs import knn_graph
    from dimred_dask.methods.isomap import isomap, isomap_on_workers

    X, _ = make_swiss_roll(3_000, random_state=5)
    g = knn_graph(X, 10)
    params = {"n_neighbors": 10, "graph": g, "random_state": 0, "solver": "randomized"}
    here = isomap(X, **params)
    # Kruskal's stress on 2000 sampled rows costs ~130 MB in any process, whatever n; 300
    # rows here, so that what is traced is what grows with n
    monkeypatch.setattr("dimred_dask.methods._mds_parts.STRESS_MAX_ROWS", 300)
    tracemalloc.start()
    try:
        there = isomap_on_workers(da.from_array(X, chunks=750), **params)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    geodesics = X.shape[0] ** 2 * 8  # the n x n float64 matrix the in-process fit holds
    assert peak < geodesics / 4, (peak, geodesics)
    assert isinstance(there.reference, da.Array) and isinstance(there.X_fit, da.Array)
    scale = np.abs(here.embedding).max()
    np.testing.assert_allclose(there.embedding, here.embedding, rtol=1e-9, atol=1e-9 * scale)
    store = RunStore(str(tmp_path / "run"))
    save_model(there, store)
    loaded = get_method("isomap").load(store)
    np.testing.assert_allclose(np.asarray(loaded.reference), here.reference, rtol=1e-12)
    new = X[:30] + 0.05
    np.testing.assert_allclose(
        loaded.transform(new), here.transform(new), rtol=1e-8, atol=1e-8 * scale
    )


def test_landmark_isomap_leaves_its_geodesics_on_the_workers(client, tmp_path):
    """The flow's landmark Isomap: Dijkstra's m x n rows and the triangulation stay on the
    workers, the reference and the training rows go to the run store from there; the
    embedding and the stored arrays are the in-process fit's."""
    from sklearn.datasets import make_swiss_roll

    from dimred_dask.graphs import knn_graph
    from dimred_dask.methods.isomap import landmark_isomap, landmark_isomap_on_workers

    X, _ = make_swiss_roll(20_000, random_state=5)
    Xd = da.from_array(X, chunks=5_000)
    g = knn_graph(X, 10)
    m = 400  # the m x n geodesics (64 MB) well above the graph's own O(n k) here
    params = {"n_neighbors": 10, "n_landmarks": m, "graph": g, "random_state": 0}
    here = landmark_isomap(X, **params)
    tracemalloc.start()
    try:
        there = landmark_isomap_on_workers(Xd, **params)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    geodesics = m * X.shape[0] * 8  # the m x n float64 block the in-process fit holds
    assert peak < geodesics / 4, (peak, geodesics)
    assert isinstance(there.reference, da.Array) and isinstance(there.X_fit, da.Array)
    np.testing.assert_allclose(
        there.embedding, here.embedding, rtol=1e-10, atol=1e-10 * np.abs(here.embedding).max()
    )
    store = RunStore(str(tmp_path / "run"))
    save_model(there, store)
    loaded = get_method("landmark-isomap").load(store)
    np.testing.assert_array_equal(np.asarray(loaded.reference), here.reference)
    np.testing.assert_array_equal(np.asarray(loaded.X_fit), X)
    new = X[:30] + 0.05
    np.testing.assert_allclose(
        loaded.transform(new),
        here.transform(new),
        rtol=1e-9,
        atol=1e-9 * np.abs(here.embedding).max(),
    )
