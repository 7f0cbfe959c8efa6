"""Chains in one run: PCA, then another method on PCA's embedding, one run store, each step's
stages committed and resumable; the same chain in the Python API as a scikit-learn Pipeline."""

from __future__ import annotations

import datetime
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from dimred_dask import PCA, InputError, OutputExistsError, make_chain
from dimred_dask.io import RunStore, open_output
from tests import hooks

BIN = os.path.dirname(sys.executable)


def _blobs(n=1500, d=60, seed=0):
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((5, d)) * 6
    return (centres[rng.integers(0, 5, n)] + rng.standard_normal((n, d))).astype(np.float32)


def _same_up_to_sign(a, b, atol):
    signs = np.sign(np.sum(a * b, axis=0))
    np.testing.assert_allclose(a * signs, b, atol=atol)


def test_pca_then_umap_in_one_run_store(client, prefect_api, tmp_path):
    from flows.embed import embed

    X = _blobs()
    np.save(tmp_path / "x.npy", X)
    out = str(tmp_path / "map")
    params = {"pca.n_components": 10, "n_neighbors": 10, "umap.n_epochs": 100}
    m = embed(str(tmp_path / "x.npy"), out, method="pca+umap", params=params)
    assert m["method"] == "pca+umap" and m["input"] == str(tmp_path / "x.npy")
    assert m["params"]["pca"]["n_components"] == 10 and m["params"]["umap"]["n_neighbors"] == 10
    assert m["input_meta"]["shape"] == [1500, 60]  # the run's input, not the step's
    assert m["chain"]["steps"] == ["pca", "umap"]
    assert m["chain"]["final_step_input_meta"]["shape"] == [1500, 10]
    step = open_output(m["chain"]["step_outputs"]["pca"])  # committed, a run store of its own
    # the 4 directions of the 5 centres are well separated; the 6 after them are noise whose
    # near-equal variances leave each direction free to turn (float32 against float64 here)
    _same_up_to_sign(
        step.read_array("embedding")[:, :4].astype(np.float64),
        PCA(10).fit_transform(X.astype(np.float64))[:, :4],
        atol=1e-3,
    )
    Y = open_output(out).read_array("embedding")
    assert Y.shape == (1500, 2) and np.isfinite(Y).all()
    assert m["metrics"]["trustworthiness"] > 0.9  # against the 60-D input
    with pytest.raises(OutputExistsError, match="committed run already"):
        embed(str(tmp_path / "x.npy"), out, method="pca+umap", params=params)
    m2 = embed(
        str(tmp_path / "x.npy"),
        out,
        method="pca+umap",
        params={**params, "pca.n_components": 5},
        overwrite=True,
    )
    assert open_output(m2["chain"]["step_outputs"]["pca"]).read_array("embedding").shape == (
        1500,
        5,
    )


@pytest.mark.parametrize(
    "method,params,pattern",
    [
        ("umap+pca", {}, r"PCA then one other method"),
        ("pca+nope", {}, r"Unknown method 'nope' in the chain"),
        ("pca+umap", {"tsne.perplexity": 5}, r"'tsne.perplexity' names no step"),
        ("pca+umap", {"pca.bogus": 1}, r"Unknown parameter\(s\) \['bogus'\] for method 'pca'"),
        ("pca+umap", {"umap.n_neighbors": 5000}, r"n_neighbors"),  # the final step's, checked first
    ],
)
def test_a_bad_chain_is_refused_before_anything_is_written(
    client, prefect_api, tmp_path, method, params, pattern
):
    from flows.embed import embed

    np.save(tmp_path / "x.npy", _blobs(n=300))
    out = tmp_path / "map"
    with pytest.raises(InputError, match=pattern):
        embed(str(tmp_path / "x.npy"), str(out), method=method, params=params)
    assert not out.exists()


def test_a_chain_killed_between_its_steps_reuses_the_first(client, prefect_api, tmp_path):
    np.save(tmp_path / "x.npy", _blobs(n=1200))
    out, log = tmp_path / "map", tmp_path / "executions.jsonl"
    env = {
        **os.environ,
        "PREFECT_API_URL": prefect_api,
        **hooks.env(DIMRED_TEST_EXECUTION_LOG=str(log)),
        "DASK_SCHEDULER_ADDRESS": client.scheduler.address,
    }
    argv = [
        os.path.join(BIN, "dimred-dask"),
        "run",
        "--input",
        str(tmp_path / "x.npy"),
        "--output",
        str(out),
        "--method",
        "pca+umap",
        "--param",
        "pca.n_components=8",
        "--param",
        "umap.n_epochs=60",
    ]
    killed = subprocess.run(
        argv,
        env={**env, "DIMRED_TEST_KILL": "after:publish"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert killed.returncode == -9, killed.stderr[-2000:]  # right after the PCA step committed
    assert RunStore(str(out / "steps" / "pca")).committed() and not RunStore(str(out)).committed()
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    runs = [json.loads(line) for line in log.read_text().splitlines()]
    pca_fits = [r for r in runs if r["stage"] == "fit" and r["output"].endswith("steps/pca")]
    umap_fits = [r for r in runs if r["stage"] == "fit" and r["output"] == str(out)]
    assert len(pca_fits) == 1 and len(umap_fits) == 1  # PCA was reused, not recomputed
    manifest = open_output(str(out)).read_json("manifest.json")
    assert manifest["chain"]["earlier"][0]["stages"]["fit"] == "reused"


def test_date_in_an_output_path_is_the_run_date():
    from flows.chain import expand_output

    when = datetime.datetime(2026, 11, 25, 23, 30, tzinfo=datetime.timezone.utc)
    assert (
        expand_output("s3://lab/maps/pca-umap-{date}", when) == "s3://lab/maps/pca-umap-2026-11-25"
    )
    assert expand_output("runs/x", when) == "runs/x"


def test_make_chain_is_a_scikit_learn_pipeline():
    import dask.array as da
    from sklearn.base import clone

    X = _blobs(n=600).astype(np.float64)
    pipe = make_chain(
        "pca+umap",
        **{"pca.n_components": 8, "n_neighbors": 10, "umap.n_epochs": 60, "umap.random_state": 0},
    )
    assert [name for name, _ in pipe.steps] == ["pca", "umap"]
    Y = pipe.fit_transform(X)
    by_hand = clone(pipe.steps[1][1]).fit_transform(PCA(8).fit_transform(X))
    np.testing.assert_allclose(Y, by_hand)  # the same two steps, nothing in between
    Yd = clone(pipe).fit_transform(da.from_array(X, chunks=(200, 60)))
    assert isinstance(Yd, da.Array) and Yd.shape == (600, 2)  # dask in, dask out
    assert clone(pipe).set_params(umap__n_neighbors=5).steps[1][1].n_neighbors == 5
    with pytest.raises(InputError, match="PCA then one of"):
        make_chain("umap+pca")


def test_sparse_counts_in_an_h5ad_go_through_pca_then_umap(client, prefect_api, tmp_path, capsys):
    from dimred_dask.datasets import sparse_counts
    from dimred_dask.io.write import save_h5ad
    from flows.cli import main

    X, _ = sparse_counts(3000, 300, types=4, density=0.05, chunk_rows=1000)
    path = save_h5ad(X, str(tmp_path / "cells.h5ad"))
    # a method that would densify the matrix is refused, its fix names the chain
    assert main(["run", "--input", path, "--output", str(tmp_path / "u"), "--method", "umap"]) == 2
    err = capsys.readouterr().err
    assert "InputTypeError" in err and "pca+umap" in err, err
    assert not (tmp_path / "u").exists()
    out = tmp_path / "map"
    assert (
        main(
            [
                "run",
                "--input",
                path,
                "--output",
                str(out),
                "--method",
                "pca+umap",
                "--param",
                "pca.n_components=10",
                "--param",
                "umap.n_epochs=60",
            ]
        )
        == 0
    )
    printed = capsys.readouterr().out
    assert "h5ad, element X, sparse" in printed, printed
    m = open_output(str(out)).read_json("manifest.json")
    assert m["input_meta"]["sparse"] and m["input_meta"]["format"] == "h5ad"
    step = open_output(str(out / "steps" / "pca")).read_array("embedding").astype(np.float64)
    dense = PCA(10).fit_transform(X.toarray().astype(np.float64))
    _same_up_to_sign(step[:, :3], dense[:, :3], atol=1e-3)  # the 3 cell-type directions
    assert open_output(str(out)).read_array("embedding").shape == (3000, 2)
