"""Placing new rows on a finished run's map: the transform flow through the command line (a
run store of its own, resumable, its drift reported), a chain placed through its steps, bad
input refused before anything is written, and the placement of UMAP and t-SNE against
umap-learn's and openTSNE's transform on real data (scikit-learn's handwritten digits)."""

from __future__ import annotations

import json
import os
import warnings

import numpy as np
import pytest
import zarr

from dimred_dask.io import open_output, save_array
from tests.data import tree
from tests.hooks import HOOK


def _cli(capsys, *argv) -> tuple[int, str, str]:
    from flows.cli import main

    rc = main(list(argv))
    out = capsys.readouterr()
    err = out.err
    return rc, out.out, err[err.index("error:") :] if "error:" in err else err


@pytest.fixture(scope="module")
def digits():
    from sklearn.datasets import load_digits

    X, y = load_digits(return_X_y=True)
    return X.astype(np.float32), y


def _save(path, X, rows=200) -> str:
    save_array(X, str(path), chunks=(rows, X.shape[1]))
    return str(path)


def _place(capsys, model, inp, out, *extra):
    rc, shown, err = _cli(
        capsys, "transform", "--model", str(model), "--input", inp, "--output", str(out), *extra
    )
    assert rc == 0, err
    return shown, open_output(str(out)).read_json("manifest.json")


def test_a_chain_places_through_its_steps_resumably_with_drift(
    client, prefect_api, digits, tmp_path, capsys, monkeypatch
):
    """pca+umap on 1400 digits, the other 397 placed: equal to the PCA step's projection
    placed by the UMAP step's map; stopped after its place stage, the same command finishes
    it with the stage reused and the result of an uninterrupted placement."""
    from dimred_dask import load_model

    X, _ = digits
    train = _save(tmp_path / "train.zarr", X[:1400])
    new = _save(tmp_path / "new.zarr", X[1400:], rows=100)
    run = tmp_path / "map"
    argv = (
        "run",
        "--input",
        train,
        "--output",
        str(run),
        "--method",
        "pca+umap",
        "--param",
        "pca.n_components=20",
        "--param",
        "umap.n_epochs=60",
    )
    rc, _, err = _cli(capsys, *argv)
    assert rc == 0, err
    fitted = open_output(str(run)).read_json("manifest.json")
    assert fitted["placement"]["places_new_rows"]
    assert fitted["placement"]["refers_to"]["in_store"]  # the PCA step's reduced rows
    assert 0 < fitted["placement"]["model_bytes"] < 1400 * 2 * 4 * 3

    before = tree(run)
    monkeypatch.setenv("DIMRED_HOOK", HOOK)
    monkeypatch.setenv("DIMRED_TEST_FAIL", "after:place")
    out = tmp_path / "placed"
    rc, _, err = _cli(
        capsys, "transform", "--model", str(run), "--input", new, "--output", str(out)
    )
    assert rc == 1 and "stopped by the test after the place stage" in err
    assert not (out / "_COMMITTED").exists()
    monkeypatch.delenv("DIMRED_TEST_FAIL")
    shown, m = _place(capsys, run, new, out)
    assert m["stages"]["place"] == "reused" and m["stages"]["drift"] == "computed"
    _, fresh = _place(capsys, run, new, tmp_path / "fresh")
    Y = open_output(str(out)).read_array("embedding")
    np.testing.assert_array_equal(Y, open_output(str(tmp_path / "fresh")).read_array("embedding"))
    assert tree(run) == before  # the model's store is read, never written

    model = load_model(str(run))
    pca, umap = model.steps
    np.testing.assert_allclose(Y, umap.transform(pca.transform(X[1400:])), rtol=0, atol=1e-5)
    assert Y.shape == (397, 2) and m["embedding"]["shape"] == [397, 2]
    d = m["drift"]
    assert 0 <= d["beyond_p99"] <= 1 and d["training_p99"] > d["training_median"] > 0
    distance = open_output(str(out)).read_array("drift/distance")
    assert distance.shape == (397,)
    assert d["beyond_p99"] == pytest.approx(np.mean(distance > d["training_p99"]))
    assert "drift       " in shown and "placed      397 rows on the pca+umap map" in shown
    assert (out / "embedding.png").stat().st_size > 10_000
    rc, shown, _ = _cli(capsys, "inspect", str(out))
    assert rc == 0 and shown.startswith(f"output      {out}")


def test_drift_is_told_for_rows_unlike_the_training_rows(
    client, prefect_api, digits, tmp_path, capsys
):
    X, _ = digits
    train = _save(tmp_path / "train.zarr", X[:1000])
    alike = _save(tmp_path / "alike.zarr", X[1000:1300])
    unlike = _save(tmp_path / "unlike.zarr", X[1000:1300][:, ::-1] * 1.5 + 3.0)
    run = tmp_path / "pca"
    rc, _, err = _cli(capsys, "run", "--input", train, "--output", str(run), "--n-components", "10")
    assert rc == 0, err
    _, calm = _place(capsys, run, alike, tmp_path / "a")
    shown, far = _place(capsys, run, unlike, tmp_path / "b")
    assert calm["drift"]["beyond_p99"] < far["drift"]["beyond_p99"]
    assert far["drift"]["beyond_p99"] > 0.5 and far["drift"]["warning"]
    assert "warning     " in shown and "fit a new map" in shown


def test_every_way_a_placement_is_refused_writes_nothing(
    client, prefect_api, digits, tmp_path, capsys
):
    X, _ = digits
    train = _save(tmp_path / "train.zarr", X[:600])
    new = _save(tmp_path / "new.zarr", X[600:700], rows=50)
    run = tmp_path / "iso"
    rc, _, err = _cli(
        capsys,
        "run",
        "--input",
        train,
        "--output",
        str(run),
        "--method",
        "isomap",
        "--param",
        "n_neighbors=10",
    )
    assert rc == 0, err
    _place(capsys, run, new, tmp_path / "placed")
    narrow = _save(tmp_path / "narrow.zarr", X[600:700, :60])
    text = tmp_path / "text.npy"
    np.save(text, np.array([["a", "b"]] * 5))
    unfinished = tmp_path / "unfinished"
    rc, _, _ = _cli(
        capsys, "run", "--input", train, "--output", str(unfinished), "--n-components", "2"
    )
    (unfinished / "_COMMITTED").unlink()
    cases = [
        ((str(tmp_path / "train.zarr"), new), "StoreError", "not a dimred-dask run store"),
        ((str(unfinished), new), "UncommittedOutputError", "its run did not finish"),
        ((str(tmp_path / "placed"), new), "InputError", "not a fitted run"),
        ((str(run), narrow), "InputError", "fitted on 64 columns; the input"),
        ((str(run), str(text)), "InputTypeError", "need real numbers"),
    ]
    for (model, inp), kind, found in cases:
        out = tmp_path / "out"
        rc, _, err = _cli(
            capsys, "transform", "--model", model, "--input", inp, "--output", str(out)
        )
        assert rc == 2 and err.startswith(f"error: {kind}: ") and found in err, (kind, err)
        assert "Fix:" in err and not out.exists()
    before = tree(run)
    for out, found in ((run, "is the model itself"), (run / "inner", "lies inside the model")):
        rc, _, err = _cli(
            capsys, "transform", "--model", str(run), "--input", new, "--output", str(out)
        )
        assert rc == 2 and err.startswith("error: InputError: The output") and found in err
    assert tree(run) == before


def test_a_neighbour_map_refuses_training_rows_that_changed(
    client, prefect_api, digits, tmp_path, capsys
):
    """A t-SNE map refers to the rows it was fitted on by location and fingerprint: changed
    since, they are refused (and the run can no longer place); vanished, too."""
    X, _ = digits
    train = _save(tmp_path / "train.zarr", X[:500], rows=100)
    new = _save(tmp_path / "new.zarr", X[500:600], rows=50)
    run = tmp_path / "tsne"
    rc, _, err = _cli(
        capsys,
        "run",
        "--input",
        train,
        "--output",
        str(run),
        "--method",
        "tsne",
        "--param",
        "n_iter=250",
    )
    assert rc == 0, err
    _place(capsys, run, new, tmp_path / "ok")
    z = zarr.open_array(train, mode="r+")
    z[100:200] = z[100:200][::-1]
    rc, _, err = _cli(
        capsys,
        "transform",
        "--model",
        str(run),
        "--input",
        new,
        "--output",
        str(tmp_path / "changed"),
    )
    assert rc == 2 and err.startswith("error: InputChangedError: The model's training rows")
    assert "Fix:" in err and not (tmp_path / "changed").exists()
    os.rename(train, train + ".moved")
    rc, _, err = _cli(
        capsys, "transform", "--model", str(run), "--input", new, "--output", str(tmp_path / "gone")
    )
    assert rc == 2 and "cannot be read any more" in err and not (tmp_path / "gone").exists()


# ---- quality against the peers' transform, on real data ------------------------------------

# our placed rows' trustworthiness (k = 10) may be below the peer's by at most this much, and
# their 10-nearest-training-neighbour label agreement by at most PLACED_ACCURACY_TOLERANCE: the
# bounds the placement was asked to meet, each several times the spread between seeds of the
# peers' own figures on these digits (0.002-0.004 and 0.005-0.01)
PLACED_TRUST_TOLERANCE = 0.01
PLACED_ACCURACY_TOLERANCE = 0.02


def _placed_quality(X_train, y_train, X_new, y_new, Y_train, Y_new):
    from sklearn.manifold import trustworthiness
    from sklearn.neighbors import KNeighborsClassifier

    knn = KNeighborsClassifier(10).fit(Y_train, y_train)
    return trustworthiness(X_new, Y_new, n_neighbors=10), knn.score(Y_new, y_new)


SEEDS = (0, 1)  # the peers' placed trustworthiness moves by up to 0.005 between seeds


def _fit_and_place(method, who, seed, Xt, Xn):
    """(training map, placed rows) of ``who``'s ``method`` with its defaults."""
    if method == "umap":
        if who == "ours":
            from dimred_dask import UMAP

            model = UMAP(random_state=seed).fit(Xt)
            return model.embedding_, model.transform(Xn)
        import umap

        model = umap.UMAP(random_state=seed).fit(Xt)
        return model.embedding_, model.transform(Xn)
    if who == "ours":
        from dimred_dask import TSNE

        model = TSNE(random_state=seed).fit(Xt)
        return model.embedding_, model.transform(Xn)
    import openTSNE

    model = openTSNE.TSNE(random_state=seed, n_jobs=2).fit(Xt)
    return np.asarray(model), np.asarray(model.transform(Xn))


@pytest.mark.parametrize("method", ["umap", "tsne"])
def test_placement_is_as_good_as_the_peers_transform(method, digits):
    """The run's placement is the estimator's transform (`test_flow_contracts`); here that
    transform against umap-learn's and openTSNE's on the same 1400 digits, the other 397
    placed, each with its defaults, averaged over `SEEDS`."""
    X, y = digits
    Xt, yt, Xn, yn = X[:1400], y[:1400], X[1400:], y[1400:]
    scores = {"ours": [], "peer": []}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for seed in SEEDS:
            for who in scores:
                Yt, Yn = _fit_and_place(method, who, seed, Xt, Xn)
                scores[who].append(_placed_quality(Xt, yt, Xn, yn, Yt, Yn))
    ours, peer = np.mean(scores["ours"], axis=0), np.mean(scores["peer"], axis=0)
    print(json.dumps({"method": method, **{k: np.round(v, 4).tolist() for k, v in scores.items()}}))
    assert ours[0] >= peer[0] - PLACED_TRUST_TOLERANCE, (ours, peer)
    assert ours[1] >= peer[1] - PLACED_ACCURACY_TOLERANCE, (ours, peer)
