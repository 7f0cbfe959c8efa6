"""t-SNE, UMAP and SNE through the flow (real Prefect API, real Dask worker processes):
sweeps listed in the manifest, progress relayed from the workers, a worker SIGKILLed in the
middle of an optimisation (the rerun task resumes from the store's checkpoint and ends where a
calm run ends), bad input refused before anything is written."""

from __future__ import annotations

import os

import numpy as np
import pytest
from sklearn.datasets import load_digits

from dimred_dask._compute import workers
from dimred_dask.errors import InputError
from dimred_dask.io import open_output, save_array
from tests import hooks


@pytest.fixture(scope="module")
def digits_uri(tmp_path_factory):
    X = load_digits().data.astype(np.float32)
    uri = str(tmp_path_factory.mktemp("digits") / "digits.zarr")
    save_array(X, uri, chunks=(500, 64))
    return uri, X


def test_sweep_lists_every_embedding_and_reports_progress(
    client, prefect_api, digits_uri, tmp_path, monkeypatch, capfd
):
    from flows.embed import embed

    uri, X = digits_uri
    monkeypatch.setenv("DIMRED_TERMINAL_PROGRESS", "1")
    # the threads asserted below assume both workers are up (a worker another test's run
    # left restarting would make the split 2 cores // 1 visible worker)
    client.wait_for_workers(2, timeout=120)
    out = str(tmp_path / "umap")
    m = embed(uri, out, method="umap", params={"random_state": [0, 1], "n_epochs": 60})
    rows = m["model"]["embeddings"]
    assert [r["params"]["random_state"] for r in rows] == [0, 1]
    # measured 0.98: two seeds, both good, not the same embedding
    assert all(r["trustworthiness"] > 0.95 and np.isfinite(r["loss"]) for r in rows)
    assert rows[0]["loss_name"] == "cross-entropy" and rows[0]["threads"] == 1
    store = open_output(out)
    Y0, Y1 = store.read_array("model/embedding_0"), store.read_array("model/embedding_1")
    np.testing.assert_array_equal(store.read_array("embedding"), Y0.astype(np.float32))
    assert not np.array_equal(Y0, Y1)
    assert not store.fs.exists(store._path("checkpoints"))  # removed once the model is saved
    assert "iteration 60/60" in capfd.readouterr().err  # relayed from the workers
    t = embed(
        uri,
        str(tmp_path / "tsne"),
        method="tsne",
        params={"perplexity": [10, 30], "n_iter": 200, "early_exaggeration_iter": 80},
    )
    assert [r["params"]["perplexity"] for r in t["model"]["embeddings"]] == [10.0, 30.0]
    assert t["graph"]["n_neighbors"] == 90  # one graph for the sweep: 3 x the largest
    assert all(r["loss_name"] == "KL" and r["loss"] > 0 for r in t["model"]["embeddings"])
    d = embed(
        uri,
        str(tmp_path / "tsne-blocks"),
        method="tsne",
        params={
            "optimizer": "distributed",
            "gradient": "fft",
            "n_iter": 100,
            "early_exaggeration_iter": 40,
        },
    )
    row = d["model"]["embeddings"][0]
    assert row["optimizer"] == "distributed" and row["blocks"] == 2
    assert row["bytes_per_iteration"] > 3 * 1797 * 2 * 8  # positions and the grid
    assert set(row["seconds_per_iteration"]) == {
        "wall",
        "blocks",
        "coordinator",
        "transfer_and_wait",
    }
    assert row["trustworthiness"] > 0.95
    assert "iteration 100/100" in capfd.readouterr().err  # progress from the coordinator


def test_fit_sample_through_the_flow(client, prefect_api, digits_uri, tmp_path, capsys):
    from flows.cli import main

    uri, X = digits_uri
    out = str(tmp_path / "umap-sample")
    assert (
        main(
            [
                "run",
                "--input",
                uri,
                "--output",
                out,
                "--method",
                "umap",
                "--param",
                "fit_sample=800",
                "--param",
                "n_epochs=100",
                "--graph-cache",
                "none",
            ]
        )
        == 0
    )
    m = open_output(out).read_json("manifest.json")
    row = m["model"]["embeddings"][0]
    assert row["fit_sample"] == {
        **row["fit_sample"],
        "rows": 800,
        "of": 1797,
        "seed": 0,
        "placed_rows": 997,
    }
    assert m["stages"]["knn"] == "not needed"  # the fit builds the sample's graph itself
    assert row["trustworthiness"] > 0.95  # measured 0.98, on rows fitted and placed alike
    Y = open_output(out).read_array("embedding")
    assert Y.shape == (1797, 2) and np.isfinite(Y).all()
    assert "fit on 800 of 1797 rows" in capsys.readouterr().out


def test_worker_killed_mid_optimisation_resumes_from_checkpoint(
    prefect_api, digits_uri, tmp_path, monkeypatch
):
    from distributed import Client, LocalCluster

    from flows.embed import embed

    uri, _ = digits_uri
    flag = tmp_path / "fired"
    for name, value in hooks.env(
        DIMRED_TEST_KILL="checkpoint:2",  # inherited by workers
        DIMRED_TEST_KILL_ONCE=str(flag),
    ).items():
        monkeypatch.setenv(name, value)
    params = {"n_epochs": 100, "checkpoint_every": 20, "random_state": 5}
    with (
        LocalCluster(
            n_workers=2,
            threads_per_worker=1,
            processes=True,
            host="127.0.0.1",
            dashboard_address="127.0.0.1:0",
        ) as cluster,
        Client(cluster) as c,
    ):
        before = set(workers(c))
        stormy = embed(
            uri,
            str(tmp_path / "stormy"),
            method="umap",
            params=params,
            scheduler=cluster.scheduler_address,
        )
        after = set(workers(c))
        calm = embed(
            uri,
            str(tmp_path / "calm"),
            method="umap",
            params=params,
            scheduler=cluster.scheduler_address,
        )
    assert flag.exists() and before != after  # a worker died at the 2nd checkpoint
    assert stormy["model"]["embeddings"][0]["resumed_from"] == 40
    assert calm["model"]["embeddings"][0]["resumed_from"] == 0
    np.testing.assert_array_equal(
        open_output(str(tmp_path / "stormy")).read_array("embedding"),
        open_output(str(tmp_path / "calm")).read_array("embedding"),
    )


@pytest.mark.parametrize(
    "method, params, match",
    [
        ("tsne", {"perplexity": 700}, r"perplexity < n_samples / 3"),
        ("tsne", {"n_components": 4}, r"n_components in 1\.\.3"),
        ("umap", {"min_dist": 1.5}, r"min_dist <= spread"),
        ("umap", {"n_neighbors": 1797}, r"n_neighbors in 2\.\.1796"),
        ("sne", {"perplexity": [5, 700]}, r"perplexity < n_samples / 3"),
        ("tsne", {"n_iter": [100, 200]}, r"Only perplexity, random_state"),
        ("umap", {"neighbours": 10}, r"Unknown parameter"),
    ],
)
def test_bad_input_refused_before_anything_is_written(
    client, prefect_api, digits_uri, tmp_path, method, params, match
):
    from flows.embed import embed

    uri, _ = digits_uri
    out = tmp_path / "out"
    with pytest.raises(InputError, match=match) as err:
        embed(uri, str(out), method=method, params=params)
    assert "Fix:" in str(err.value)
    assert not out.exists() or not os.listdir(out)


def test_numba_compiles_in_the_flow_process_whatever_prefects_print_setting(
    client, prefect_api, tmp_path
):
    """NN-descent on a fit sample is compiled in the flow's own process on its first graph;
    pynndescent's kernels call print, and numba refuses to compile them once Prefect's
    log_prints has replaced builtins.print (a TypingError that failed every sampled UMAP
    fit of a fresh process). A fresh process, with PREFECT_LOGGING_LOG_PRINTS set."""
    import subprocess
    import sys

    X = np.random.default_rng(0).standard_normal((600, 8)).astype(np.float32)
    np.save(tmp_path / "x.npy", X)
    env = {**os.environ, "PREFECT_API_URL": prefect_api, "PREFECT_LOGGING_LOG_PRINTS": "true"}
    args = ["run", "--input", str(tmp_path / "x.npy"), "--output", str(tmp_path / "out")]
    args += ["--method", "umap", "--scheduler", client.scheduler.address]
    for p in ("fit_sample=300", "knn_backend=nndescent", "n_epochs=20"):
        args += ["--param", p]
    cli = os.path.join(os.path.dirname(sys.executable), "dimred-dask")
    done = subprocess.run([cli, *args], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "TypingError" not in done.stderr
    Y = open_output(str(tmp_path / "out")).open_array("embedding").to_dask().compute()
    assert Y.shape == (600, 2) and np.isfinite(Y).all()
