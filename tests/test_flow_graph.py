"""The graph methods through the embed flow: the knn stage shared by a second method on the same
data (its manifest says the graph came from the cache), each method's output equal to its API,
and the kNN-specific bad input (k >= n, k < 1, a disconnected graph, all-duplicate rows,
n_components >= n) refused through the API, the flow and the CLI with nothing written."""

from __future__ import annotations

import re

import numpy as np
import pytest
from sklearn.datasets import make_swiss_roll

import dimred_dask
from dimred_dask import (
    DisconnectedGraphError,
    InputError,
    LandmarkIsomap,
    LocallyLinearEmbedding,
    SpectralClustering,
)
from dimred_dask.io import StoredRows, open_output, save_array
from flows.methods import load_model
from tests.test_bad_input import _snapshot, _write

FLOW_ATOL = 1e-4  # float32 input in the store vs the API on the same float32 rows


@pytest.fixture
def roll(tmp_path):
    X, t = make_swiss_roll(1000, random_state=2)
    X = X.astype(np.float32)
    uri = str(tmp_path / "roll.zarr")
    save_array(X, uri, chunks=(250, 3))
    return uri, X, t


def _same_up_to_sign(a, b, atol):
    signs = np.sign(np.sum(a * b, axis=0))
    np.testing.assert_allclose(a * signs, b, atol=atol)


def test_second_method_reuses_the_knn_graph(client, prefect_api, roll, tmp_path):
    from flows.embed import embed

    uri, X, t = roll
    graph = {"n_neighbors": 10}
    first = embed(
        uri,
        str(tmp_path / "runs" / "lisomap"),
        method="landmark-isomap",
        params={"n_landmarks": 100, **graph},
    )
    assert first["stages"]["knn"] == "computed" and first["graph"]["components"] == 1
    second = embed(uri, str(tmp_path / "runs" / "lle"), method="lle", params=graph)
    assert second["stages"]["knn"] == "reused from cache"
    assert second["graph"]["fingerprint"] == first["graph"]["fingerprint"]
    # resumed (its commit marker gone): the graph is its own stored copy, not the cache's
    (tmp_path / "runs" / "lle" / "_COMMITTED").unlink()
    resumed = embed(uri, str(tmp_path / "runs" / "lle"), method="lle", params=graph)
    assert resumed["stages"]["knn"] == "reused", resumed["stages"]
    for name, ref in (
        ("lisomap", LandmarkIsomap(2, n_neighbors=10, n_landmarks=100)),
        ("lle", LocallyLinearEmbedding(2, n_neighbors=10)),
    ):
        store = open_output(str(tmp_path / "runs" / name))
        Y = store.read_array("embedding")
        assert store.read_array("graph/indices").shape == (1000, 10)
        ref_y = ref.fit(X).embedding_
        _same_up_to_sign(
            Y.astype(np.float64), ref_y.astype(np.float64), FLOW_ATOL * np.abs(ref_y).max()
        )
        # the run's model, loaded with its training rows left in the store, places new rows
        # as the estimator does
        loaded, new = load_model(str(tmp_path / "runs" / name)), X[:40] + np.float32(0.3)
        assert isinstance(loaded.X_fit, StoredRows)
        want = ref.transform(new).astype(np.float64)
        _same_up_to_sign(
            loaded.transform(new).astype(np.float64), want, FLOW_ATOL * np.abs(want).max()
        )
    assert first["model"]["n_landmarks"] == 100 and "negative_ratio" in first["model"]


def test_spectral_clustering_writes_labels_and_embedding(client, prefect_api, tmp_path):
    from sklearn.datasets import make_moons

    from flows.embed import embed

    X, y = make_moons(800, noise=0.05, random_state=3)
    uri = str(tmp_path / "moons.zarr")
    save_array(X.astype(np.float32), uri, chunks=(200, 2))
    m = embed(
        uri, str(tmp_path / "sc"), method="spectral", params={"n_clusters": 2, "n_neighbors": 10}
    )
    assert m["graph"]["components"] == 2  # the two moons: cut along the components
    store = open_output(str(tmp_path / "sc"))
    labels = store.read_array("model/labels_")
    ref = SpectralClustering(2, n_neighbors=10).fit(X.astype(np.float32))
    from sklearn.metrics import adjusted_rand_score

    assert adjusted_rand_score(labels, ref.labels_) == 1.0
    assert adjusted_rand_score(labels, y) >= 0.95
    assert sorted(m["model"]["cluster_sizes"]) == [400, 400]
    assert store.read_array("embedding").shape == (800, 2)


def _data(n=60, d=3, seed=0):
    return np.random.default_rng(seed).standard_normal((n, d)).astype(np.float32)


def _two_clusters():
    a = _data(40)
    return np.vstack([a, a[:30] + 100.0])


# (id, method, X, params, API call, error, message pattern)
CASES = [
    (
        "k-equals-n",
        "isomap",
        _data(),
        {"n_neighbors": 60},
        lambda X: dimred_dask.isomap(X, n_neighbors=60),
        InputError,
        r"n_neighbors",
    ),
    (
        "k-zero",
        "lle",
        _data(),
        {"n_neighbors": 0},
        lambda X: dimred_dask.lle(X, n_neighbors=0),
        InputError,
        r"n_neighbors",
    ),
    (
        "disconnected",
        "laplacian",
        _two_clusters(),
        {"n_neighbors": 5},
        lambda X: dimred_dask.laplacian_eigenmaps(X, n_neighbors=5),
        DisconnectedGraphError,
        r"2 components of sizes 40, 30",
    ),
    (
        "all-duplicates",
        "landmark-isomap",
        np.ones((50, 3), np.float32),
        {"n_neighbors": 5},
        lambda X: dimred_dask.landmark_isomap(X, n_neighbors=5),
        InputError,
        r"exact duplicates",
    ),
    (
        "n-components-equals-n",
        "lle",
        _data(),
        {"n_components": 60},
        lambda X: dimred_dask.lle(X, n_components=60),
        InputError,
        r"n_components",
    ),
    (
        "spectral-clusters-equal-n",
        "spectral",
        _data(),
        {"n_clusters": 60},
        lambda X: dimred_dask.spectral_clustering(X, n_clusters=60),
        InputError,
        r"n_clusters",
    ),
]


def _case(cid):
    return next(c for c in CASES if c[0] == cid)


@pytest.mark.parametrize("cid", [c[0] for c in CASES])
def test_bad_input_api(cid):
    _, _, X, _, call, err, pattern = _case(cid)
    with pytest.raises(err, match=pattern) as info:
        call(X)
    assert "Fix:" in str(info.value)


@pytest.mark.parametrize("cid", [c[0] for c in CASES])
def test_bad_input_flow_and_cli(cid, tmp_path, client, prefect_api, capsys):
    from flows.cli import main
    from flows.embed import embed

    _, method, X, params, _, err, pattern = _case(cid)
    inp = _write(tmp_path, X, "in")
    out = str(tmp_path / "out")
    before = _snapshot(out)
    with pytest.raises(err, match=pattern):
        embed(inp, out, method=method, params=params, graph_cache="none")
    assert _snapshot(out) == before, "a refused run must not write to its output"
    argv = ["run", "--input", inp, "--output", out, "--method", method, "--graph-cache", "none"]
    argv += [a for k, v in params.items() for a in ("--param", f"{k}={v}")]
    assert main(argv) == 2
    stderr = capsys.readouterr().err
    assert err.__name__ in stderr and "Fix:" in stderr and re.search(pattern, stderr), stderr
    assert _snapshot(out) == before


def test_knn_graph_short_of_its_target_recall_is_kept_with_a_warning(
    client, prefect_api, tmp_path, capsys
):
    from flows.cli import main

    X = np.random.default_rng(4).standard_normal((3000, 50)).astype(np.float32)
    inp = _write(tmp_path, X, "in")
    out = str(tmp_path / "lap")
    argv = [
        "run",
        "--input",
        inp,
        "--output",
        out,
        "--method",
        "laplacian",
        "--graph-cache",
        "none",
        "--param",
        "knn_backend=nndescent",
    ]
    before = _snapshot(out)
    assert main(argv + ["--knn-target-recall", "high"]) == 2
    err = capsys.readouterr().err
    assert "InputError" in err and "--knn-target-recall 0.9" in err
    assert _snapshot(out) == before
    # a target NN-descent cannot reach on 50-D noise, and no time to improve
    assert main(argv + ["--knn-target-recall", "1.0", "--knn-recall-budget", "0"]) == 0
    printed = capsys.readouterr().out
    assert re.search(
        r"knn graph +10 neighbours, nndescent, 1 component\(s\), recall 0\.\d+ "
        r"\(target 1, 1 build\(s\)\)",
        printed,
    ), printed
    assert re.search(
        r"warning +The kNN graph's recall is 0\.\d+ on 1000 sampled rows, below "
        r"the target 1 after 1 NN-descent build\(s\).*time budget.*Fix:",
        printed,
    )
    graph = open_output(out).read_json("manifest.json")["graph"]
    assert graph["recall"] < 1.0 and graph["recall_search"]["met"] is False
    assert "below the target" in graph["recall_warning"]
    assert open_output(out).read_array("embedding").shape == (3000, 2)


def test_a_partitioned_graph_short_of_its_recall_is_told_what_applies_to_it():
    """A partitioned graph short of its target: the warning says how far its search went
    (cells a row, why it stopped), why the backend was chosen and what to do."""
    from dimred_dask.graphs import KNNGraph
    from flows.knn import recall_shortfall

    idx = np.zeros((50, 3), np.int64)
    info = {
        "n_partitions": 160,
        "overlap": 4,
        "why_partitioned": "NN-descent in one task would need about 4.9 GiB, over 0.5 of "
        "the smallest worker's memory",
        "recall_search": {
            "rounds": [{"overlap": 2, "recall": 0.17}, {"overlap": 4, "recall": 0.29}],
            "stopped": "time budget: the next round (about 2000 s) would exceed 1900 s",
        },
    }
    g = KNNGraph(idx, np.ones((50, 3)), "euclidean", "partitioned", info)
    text = recall_shortfall(g, {"recall": 0.291, "sample_rows": 50}, 0.9)
    assert "recall is 0.291" in text and "4 nearest of 160 cells" in text
    assert "after 2 partitioned build(s) up to 4 cells a row (time budget" in text
    assert "about 4.9 GiB" in text and "knn_backend=nndescent" in text
    assert "--knn-recall-budget" in text
    g = KNNGraph(idx, np.ones((50, 3)), "euclidean", "nndescent", {})
    assert "--knn-recall-budget" in recall_shortfall(g, {"recall": 0.5, "sample_rows": 50}, 0.9)
    assert recall_shortfall(g, {"recall": 0.95, "sample_rows": 50}, 0.9) is None
