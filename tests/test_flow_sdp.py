"""The embed flow with the semidefinite embeddings: mvu, landmark-mvu and are (--actions URI)
through a real Prefect API on worker processes, the solver report in the manifest, and bad
input (actions missing, of the wrong length, given to a method without actions; a
disconnected graph) refused before anything is written, through the flow and the CLI."""

from __future__ import annotations

import numpy as np
import pytest

from dimred_dask import action_respecting_embedding, mvu
from dimred_dask.errors import DisconnectedGraphError, InputError
from dimred_dask.io import open_output, save_array

from .sdp_data import robot_walk, swiss_roll

SIGN_ATOL = 1e-3  # the flow's fit against the API's on the same graph (float32 storage)


def _same_up_to_sign(a, b, atol):
    signs = np.sign(np.sum(a * b, axis=0))
    np.testing.assert_allclose(a * signs, b, atol=atol * np.abs(b).max())


@pytest.fixture
def roll(tmp_path):
    X, t = swiss_roll(150, height=8.0, seed=0)
    uri = str(tmp_path / "roll.zarr")
    save_array(X, uri, chunks=(50, 3))
    return uri, X, t


@pytest.fixture
def walk(tmp_path):
    # 24 steps forward, 12 back: the flow's plumbing, not ARE's quality (tests/test_mvu.py
    # takes the 60-step walk); its SDP solves in a seventh of the time
    images, actions, pos = robot_walk(24, 12)
    uri, a_uri = str(tmp_path / "walk.zarr"), str(tmp_path / "actions.zarr")
    save_array(images, uri, chunks=(12, images.shape[1]))
    save_array(actions.astype(np.int32), a_uri, chunks=(36,))
    return uri, a_uri, images, actions, pos


def test_mvu_and_landmark_mvu_runs_report_the_solver(client, prefect_api, roll, tmp_path):
    from flows.embed import embed

    uri, X, t = roll
    m = embed(uri, str(tmp_path / "mvu.zarr"), method="mvu", params={"n_neighbors": 5})
    assert m["stages"]["knn"] == "computed" and m["stages"]["fit"] == "computed"
    model = m["model"]
    assert model["status"] == "optimal" and model["objective"] > 0
    # relative to each edge (the mean over edges, and its max) and to the mean squared edge
    assert 0 < model["mean_relative_violation"] <= model["max_relative_violation"]
    assert model["max_violation_over_mean"] < 1e-3 and model["solver"] == "CLARABEL"
    ref = mvu(X, n_neighbors=5)
    store = open_output(str(tmp_path / "mvu.zarr"))
    _same_up_to_sign(store.read_array("embedding").astype(np.float64), ref.embedding, SIGN_ATOL)
    assert store.read_array("model/kernel_").shape == (150, 150)
    lm = embed(
        uri,
        str(tmp_path / "lmvu.zarr"),
        method="landmark-mvu",
        params={"n_neighbors": 5, "n_landmarks": 20},
    )
    assert lm["stages"]["knn"] == "reused from cache"  # same graph parameters, same data
    assert lm["model"]["status"] == "optimal" and lm["model"]["basis"] == "reconstruction"
    assert "mean_relative_violation" in lm["model"]
    from scipy.stats import spearmanr

    Y = open_output(str(tmp_path / "lmvu.zarr")).read_array("embedding")
    assert abs(spearmanr(Y[:, 0], t)[0]) >= 0.99
    # the run's model places new rows from its training rows left in the run store, as the
    # same model with them in memory does; a training row lands on its own embedding
    from dimred_dask.methods._base import is_stored
    from dimred_dask.methods.mvu import reconstruct
    from flows.methods import load_model

    loaded = load_model(str(tmp_path / "lmvu.zarr"))
    assert is_stored(loaded.model.X_fit)
    new = X[::10] + 0.01
    np.testing.assert_allclose(
        np.asarray(loaded.transform(new)),
        reconstruct(new, X, np.asarray(Y), 5, loaded.model.reg),
        rtol=1e-6,
        atol=1e-6 * np.abs(Y).max(),
    )
    np.testing.assert_allclose(np.asarray(loaded.transform(X[:10])), Y[:10])


def test_are_run_takes_actions_from_a_uri(client, prefect_api, walk, tmp_path):
    from flows.embed import embed

    uri, a_uri, images, actions, pos = walk
    params = {"n_components": 1, "n_neighbors": 4}
    m = embed(uri, str(tmp_path / "are.zarr"), method="are", params=params, actions=a_uri)
    assert m["actions"] == a_uri and m["model"]["status"] == "optimal"
    steps = m["model"]["action_steps"]  # per action: mean step, length, spread
    assert steps["0"]["count"] == 24 and steps["1"]["count"] == 12
    assert steps["0"]["mean_step"][0] * steps["1"]["mean_step"][0] < 0  # opposite
    ref = action_respecting_embedding(images, actions, **params)
    Y = open_output(str(tmp_path / "are.zarr")).read_array("embedding").astype(np.float64)
    _same_up_to_sign(Y, ref.embedding.astype(np.float64), SIGN_ATOL)
    # other actions, same data: the fit is not reused
    (tmp_path / "are.zarr" / "_COMMITTED").unlink()
    save_array(actions[::-1].astype(np.int32), str(tmp_path / "a2.zarr"), chunks=(36,))
    again = embed(
        uri,
        str(tmp_path / "are.zarr"),
        method="are",
        params=params,
        actions=str(tmp_path / "a2.zarr"),
    )
    assert again["stages"]["knn"] == "reused" and again["stages"]["fit"] == "computed"


@pytest.mark.parametrize("case", ["missing", "short", "not-needed", "disconnected"])
def test_bad_sdp_input_is_refused_before_writing(client, prefect_api, walk, tmp_path, case):
    from flows.embed import embed

    uri, a_uri, images, actions, _ = walk
    out = tmp_path / f"out-{case}"
    if case == "missing":
        with pytest.raises(InputError, match="needs the actions"):
            embed(uri, str(out), method="are")
    elif case == "short":
        save_array(actions[:-2].astype(np.int32), str(tmp_path / "short.zarr"), chunks=(34,))
        with pytest.raises(InputError, match="36 for 37 rows; found 34"):
            embed(uri, str(out), method="are", actions=str(tmp_path / "short.zarr"))
    elif case == "not-needed":
        with pytest.raises(InputError, match="takes no actions"):
            embed(uri, str(out), method="mvu", actions=a_uri)
    else:
        rng = np.random.default_rng(0)
        X = np.r_[rng.standard_normal((40, 3)), rng.standard_normal((30, 3)) + 50.0]
        save_array(X, str(tmp_path / "two.zarr"), chunks=(35, 3))
        with pytest.raises(DisconnectedGraphError, match="sizes 40, 30"):
            embed(str(tmp_path / "two.zarr"), str(out), method="mvu", params={"n_neighbors": 4})
    assert not out.exists()


def test_cli_passes_actions_and_reports_errors(client, prefect_api, walk, tmp_path, capsys):
    from flows.cli import main

    uri, a_uri, *_ = walk
    out = tmp_path / "cli-are"
    code = main(
        [
            "run",
            "--input",
            uri,
            "--output",
            str(out),
            "--method",
            "are",
            "--actions",
            str(tmp_path / "nope.zarr"),
            "--n-components",
            "1",
            "--scheduler",
            client.scheduler.address,
        ]
    )
    err = capsys.readouterr().err
    assert code == 2 and "InputError" in err and "does not exist" in err
    assert not out.exists()
    code = main(
        [
            "run",
            "--input",
            uri,
            "--output",
            str(out),
            "--method",
            "are",
            "--actions",
            a_uri,
            "--n-components",
            "1",
            "--param",
            "n_neighbors=4",
            "--scheduler",
            client.scheduler.address,
        ]
    )
    assert code == 0 and (out / "_COMMITTED").exists()
