"""A run never deletes what it did not write and never embeds wrong data in silence: each case
is what an operator does by accident, run through the command line (in process, with the
session's Dask workers and Prefect API), with a checksum of the data that must stay intact."""

from __future__ import annotations

import os

import numpy as np
import pytest
import zarr

from dimred_dask import PCA, InputError, StoreError
from dimred_dask.io import RunStore, open_input, open_output
from tests.data import tree as _tree


def _data(n=400, d=6, seed=0):
    rng = np.random.default_rng(seed)
    return (
        rng.standard_normal((n, 3)) @ rng.standard_normal((3, d))
        + 0.1 * rng.standard_normal((n, d))
    ).astype(np.float32)


def _zarr(path, X, chunk_rows=100, **kwargs) -> str:
    arr = zarr.create_array(
        str(path), shape=X.shape, dtype=X.dtype, chunks=(chunk_rows, X.shape[1]), **kwargs
    )
    arr[...] = X
    return str(path)


def _cli(capsys, *argv) -> tuple[int, str]:
    from flows.cli import main

    rc = main(["run", *argv])
    return rc, capsys.readouterr().err


@pytest.fixture
def good(tmp_path):
    X = _data()
    return _zarr(tmp_path / "in.zarr", X), X


# ---- overwrite is scoped to what the project wrote ---------------------------------------------


def test_overwrite_through_a_symlink_to_the_input_is_refused(
    client, prefect_api, good, tmp_path, capsys
):
    inp, _ = good
    before = _tree(inp)
    link = tmp_path / "link.zarr"
    os.symlink(inp, link)
    rc, err = _cli(capsys, "--input", inp, "--output", str(link), "--overwrite")
    assert rc == 2 and "is the input itself" in err and "symbolic links" in err, err
    assert _tree(inp) == before
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "keep.txt").write_text("not the run's")
    other = tmp_path / "other-link"
    os.symlink(elsewhere, other)
    rc, err = _cli(capsys, "--input", inp, "--output", str(other), "--overwrite")
    assert rc == 2 and "OutputExistsError" in err and "is a symbolic link" in err, err
    assert (elsewhere / "keep.txt").read_text() == "not the run's"
    assert _tree(inp) == before


def test_overwrite_of_a_folder_that_is_not_a_run_store_is_refused(
    client, prefect_api, good, tmp_path, capsys
):
    inp, X = good
    home = tmp_path / "home"
    (home / "projects").mkdir(parents=True)
    (home / "notes.txt").write_text("mine")
    np.save(home / "labels.npy", np.arange(X.shape[0]) % 2)
    before = _tree(home)
    rc, err = _cli(capsys, "--input", inp, "--output", str(home), "--overwrite")
    assert rc == 2 and "not a dimred-dask run store" in err and "Fix:" in err, err
    assert _tree(home) == before
    # the folder holding the labels: refused as containing an input, whatever it is
    rc, err = _cli(
        capsys,
        "--input",
        inp,
        "--labels",
        str(home / "labels.npy"),
        "--output",
        str(home),
        "--method",
        "spca",
        "--overwrite",
    )
    assert rc == 2 and "contains the labels" in err, err
    assert _tree(home) == before


def test_overwrite_replaces_a_run_store_only_without_foreign_entries(
    client, prefect_api, good, tmp_path, capsys
):
    inp, X = good
    out = tmp_path / "run"
    assert _cli(capsys, "--input", inp, "--output", str(out), "--n-components", "2")[0] == 0
    (out / "my-notes.txt").write_text("written by a person")
    before = _tree(out)
    rc, err = _cli(capsys, "--input", inp, "--output", str(out), "--overwrite")
    assert rc == 2 and "my-notes.txt" in err and "which no run writes" in err, err
    assert _tree(out) == before
    (out / "my-notes.txt").unlink()
    rc, err = _cli(
        capsys, "--input", inp, "--output", str(out), "--overwrite", "--n-components", "3"
    )
    assert rc == 0, err
    assert open_output(str(out)).read_array("embedding").shape == (X.shape[0], 3)


def test_symlinks_inside_an_unfinished_output_are_refused(
    client, prefect_api, good, tmp_path, capsys
):
    inp, _ = good
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "victim.json").write_text('{"precious": true}')
    (outside / "picture.png").write_bytes(b"precious")
    before = _tree(outside)
    out = tmp_path / "unfinished"
    store = RunStore(str(out))
    store.prepare("new", {"method": "pca"})
    store.mark_stage("validate", "x", {"info": {}}, guard=None)
    os.symlink(outside / "victim.json", out / "manifest.json")
    os.symlink(outside / "picture.png", out / "embedding.png")
    rc, err = _cli(capsys, "--input", inp, "--output", str(out))
    assert rc == 2 and "symbolic links" in err, err
    rc, err = _cli(capsys, "--input", inp, "--output", str(out), "--overwrite")
    assert rc == 2 and "symbolic links" in err, err
    assert _tree(outside) == before


def test_run_store_writes_never_follow_links(tmp_path):
    """Below the run's checks: the store itself refuses to write or delete through a link."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "a.txt").write_text("keep")
    store = RunStore(str(tmp_path / "run"))
    store.prepare("new", {"method": "pca"})
    os.symlink(outside, tmp_path / "run" / "model")
    with pytest.raises(StoreError, match="symbolic link"):
        store.write_array("model/components_", np.ones((2, 2)))
    with pytest.raises(StoreError, match="symbolic link"):
        store.write_bytes("model/x.json", b"{}")
    store.remove("model")  # the link itself goes, never what it points to
    assert not os.path.lexists(tmp_path / "run" / "model")
    assert (outside / "a.txt").read_text() == "keep"
    os.symlink(outside / "a.txt", tmp_path / "run" / "manifest.json")
    store.write_bytes("manifest.json", b"{}")  # replaces the link, does not write through it
    assert not os.path.islink(tmp_path / "run" / "manifest.json")
    assert (outside / "a.txt").read_text() == "keep"


def test_an_empty_lease_left_by_a_crash_does_not_block_runs(
    client, prefect_api, good, tmp_path, capsys
):
    inp, _ = good
    out = tmp_path / "out"
    out.mkdir()
    (out / "_LEASE").write_bytes(b"")
    rc, err = _cli(capsys, "--input", inp, "--output", str(out))
    assert rc == 0, err
    assert open_output(str(out)).read_array("embedding").shape[0] == 400


# ---- input integrity ---------------------------------------------------------------------------


def test_a_missing_chunk_is_refused_by_name_or_counted_when_allowed(
    client, prefect_api, good, tmp_path, capsys
):
    inp, X = good
    os.remove(os.path.join(inp, "c", "2", "0"))
    out = tmp_path / "out"
    rc, err = _cli(capsys, "--input", inp, "--output", str(out))
    assert rc == 2 and "1 of its 4 chunk objects missing (c/2/0)" in err, err
    assert "--allow-missing-chunks" in err and not out.exists()
    rc, err = _cli(capsys, "--input", inp, "--output", str(out), "--allow-missing-chunks")
    assert rc == 0, err
    manifest = open_output(str(out)).read_json("manifest.json")
    assert manifest["input_meta"]["missing_chunks"] == 1
    assert manifest["input_meta"]["missing_chunk_keys"] == ["c/2/0"]


def test_a_chunk_zarr_skipped_as_fill_is_refused_unless_allowed(
    client, prefect_api, tmp_path, capsys
):
    X = _data()
    X[100:200] = 0.0  # zarr does not store a chunk that holds only the fill value
    inp = _zarr(tmp_path / "sparse.zarr", X)
    assert not os.path.exists(os.path.join(inp, "c", "1", "0"))
    rc, err = _cli(capsys, "--input", inp, "--output", str(tmp_path / "o1"))
    assert rc == 2 and "(c/1/0)" in err and "only the fill value" in err, err
    rc, err = _cli(
        capsys,
        "--input",
        inp,
        "--output",
        str(tmp_path / "o2"),
        "--allow-missing-chunks",
        "--n-components",
        "2",
    )
    assert rc == 0, err
    Y = open_output(str(tmp_path / "o2")).read_array("embedding")
    ref = PCA(2).fit_transform(X.astype(np.float64))
    np.testing.assert_allclose(np.abs(Y), np.abs(ref), atol=1e-3)


def test_a_chunk_lost_after_validation_is_not_read_as_fill(tmp_path):
    inp = _zarr(tmp_path / "in.zarr", _data())
    arr = open_input(inp, check_chunks=False).array
    os.remove(os.path.join(inp, "c", "3", "0"))
    with pytest.raises(InputError, match=r"incomplete: 1 missing \(c/3/0\)"):
        arr.compute(scheduler="sync")


def test_our_own_all_fill_chunks_are_stored_so_counts_prove_a_write(tmp_path):
    store = RunStore(str(tmp_path / "run"))
    store.prepare("new", {"method": "pca"})
    target = store.create_array("embedding", (300, 2), (100, 2), np.float32)
    target[...] = np.zeros((300, 2), np.float32)
    assert store.chunk_count("embedding") == target.nchunks == 3


@pytest.mark.parametrize("damage", ["garbage", "truncated"])
def test_a_chunk_that_does_not_decode_is_named(client, prefect_api, good, tmp_path, capsys, damage):
    inp, _ = good
    chunk = os.path.join(inp, "c", "1", "0")
    raw = open(chunk, "rb").read()
    with open(chunk, "wb") as f:
        f.write(b"\x00garbage" * 8 if damage == "garbage" else raw[: len(raw) // 2])
    rc, err = _cli(capsys, "--input", inp, "--output", str(tmp_path / "out"))
    assert rc == 2 and "Could not decode chunk 'c/1/0'" in err and "Fix:" in err, err
    assert "Traceback" not in err


def test_a_truncated_npy_is_refused_before_reading(client, prefect_api, tmp_path, capsys):
    path = tmp_path / "x.npy"
    np.save(path, _data())
    raw = path.read_bytes()
    path.write_bytes(raw[: len(raw) - 100])
    rc, err = _cli(capsys, "--input", str(path), "--output", str(tmp_path / "out"))
    assert rc == 2 and "is truncated" in err, err


def test_a_csv_value_that_is_not_a_number_is_named(client, prefect_api, tmp_path, capsys):
    import pandas as pd

    X = _data(n=30_000, d=3).astype(np.float64)
    df = pd.DataFrame(X, columns=["a", "b", "c"])
    df["b"] = df["b"].astype(object)
    df.loc[29_000, "b"] = "oops"  # past the rows dask reads to guess the types
    df.to_csv(tmp_path / "t.csv", index=False)
    rc, err = _cli(capsys, "--input", str(tmp_path / "t.csv"), "--output", str(tmp_path / "o"))
    assert rc == 2 and "InputTypeError" in err and "['b']" in err and "'oops'" in err, err
    assert "dask" not in err.lower()


def test_an_unreachable_object_store_is_a_store_error(
    client, prefect_api, tmp_path, capsys, monkeypatch
):
    import socket

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setenv("DIMRED_S3_ENDPOINT_URL", f"http://127.0.0.1:{port}")
    # one attempt per request: the message is the same after the retries, which take ~30 s
    monkeypatch.setattr("dimred_dask.io.uris.S3_MAX_ATTEMPTS", 1)
    rc, err = _cli(capsys, "--input", "s3://lab/cells.zarr", "--output", str(tmp_path / "o"))
    assert rc == 2 and "StoreError" in err and "could not reach the storage" in err, err
    assert "Traceback" not in err


# ---- dtypes ------------------------------------------------------------------------------------


def test_uint8_whitened_pca_is_embedded_in_float(client, prefect_api, tmp_path, capsys):
    X = (np.random.default_rng(1).random((300, 8)) > 0.5).astype(np.uint8)
    inp = _zarr(tmp_path / "u8.zarr", X)
    out = tmp_path / "out"
    rc, err = _cli(capsys, "--input", inp, "--output", str(out), "--param", "whiten=true")
    assert rc == 0, err
    store = open_output(str(out))
    Y = store.read_array("embedding")
    assert Y.dtype == np.float32
    ref = PCA(2, whiten=True).fit_transform(X.astype(np.float32))
    np.testing.assert_allclose(np.abs(Y), np.abs(ref), rtol=1e-3, atol=1e-3)
    meta = store.read_json("manifest.json")["input_meta"]
    assert meta["stored_dtype"] == "uint8" and meta["dtype"] == "float32"


@pytest.mark.parametrize(
    "method,dtype,expected",
    [
        ("pca", "int64", "float64"),
        ("kpca", "uint8", "float32"),
        ("kpca", "int64", "float64"),
        ("pca", "bool", "float32"),
    ],
)
def test_integer_and_bool_inputs_run_in_their_float_dtype(
    client, prefect_api, tmp_path, capsys, method, dtype, expected
):
    X = np.random.default_rng(2).integers(0, 4, (240, 5)).astype(dtype)
    inp = _zarr(tmp_path / "x.zarr", X, chunk_rows=80)
    out = tmp_path / "out"
    rc, err = _cli(capsys, "--input", inp, "--output", str(out), "--method", method)
    assert rc == 0, err
    store = open_output(str(out))
    assert str(store.read_array("embedding").dtype) == expected
    assert np.unique(store.read_array("embedding")).size > 10  # real coordinates, not 0/1
    assert store.read_json("manifest.json")["input_meta"]["stored_dtype"] == dtype


# ---- what the terminal shows -------------------------------------------------------------------


def test_nonfinite_rows_are_listed_not_spanned():
    from dimred_dask import pca

    X = _data(n=600).astype(np.float64)
    X[[3, 10, 500], 1] = np.nan
    with pytest.raises(InputError, match=r"3 NaN in rows 3, 10 and 500 of"):
        pca(X)
    import dask.array as da

    with pytest.raises(InputError, match=r"3 NaN in rows 3, 10 and 500 of"):
        pca(da.from_array(X, chunks=(100, 6)))


def test_inspect_of_an_input_does_not_suggest_overwrite(good, capsys):
    from flows.cli import main

    inp, _ = good
    assert main(["inspect", inp]) == 2
    err = capsys.readouterr().err
    assert "not a dimred-dask run store" in err and "--overwrite" not in err, err


def test_help_examples_keep_their_line_continuations(capsys):
    from flows.cli import main

    with pytest.raises(SystemExit):
        main(["run", "--help"])
    out = capsys.readouterr().out
    assert "--param kernel=gaussian \\\n      --param width=3.0" in out


def test_progress_clock_runs_on_while_the_iteration_text_changes(monkeypatch):
    import io

    from dimred_dask import _progress

    class Terminal(io.StringIO):
        def isatty(self):
            return True

    for stream in (Terminal(), io.StringIO()):  # a terminal, then a log file
        now = [100.0]
        monkeypatch.setattr(_progress.time, "perf_counter", lambda: now[0])
        bar = _progress.TerminalBar(stream=stream, interval=0.0)
        for it in range(0, 800, 50):
            bar(
                f"embedding 1/1: iteration {min(it, 750)}/750, KL {5 - it / 300:.4f}",
                min(it, 750),
                750,
            )
            now[0] += 1.0
        lines = [x for x in stream.getvalue().splitlines() if x.strip()]
        assert lines[-1].rstrip().endswith("15.0s"), lines  # one stage, one clock: 15 steps
        if not isinstance(stream, Terminal):
            assert len(lines) == 2  # a log gets a line every 10 s and one at the end


# ---- convergence is part of the result ---------------------------------------------------------


def test_a_solve_that_stops_short_is_retried_and_recorded_in_the_manifest(
    client, prefect_api, tmp_path, capsys
):
    from sklearn.datasets import make_swiss_roll

    X, _ = make_swiss_roll(600, random_state=0)
    np.save(tmp_path / "roll.npy", X)
    out = tmp_path / "lle"
    from flows.cli import main

    assert (
        main(
            [
                "run",
                "--input",
                str(tmp_path / "roll.npy"),
                "--output",
                str(out),
                "--method",
                "lle",
                "--param",
                "eigen_solver=lobpcg",
                "--param",
                "max_iter=3",
            ]
        )
        == 0
    )
    printed = capsys.readouterr().out
    manifest = open_output(str(out)).read_json("manifest.json")
    first, *rest = manifest["convergence"]
    assert first["solver"].startswith("lobpcg") and not first["converged"]
    assert first["handled_by"].startswith("retried with") and rest[-1]["converged"]
    assert f"lobpcg-jacobi {first['handled_by']}" in printed, printed
    assert manifest["metrics"]["trustworthiness"] > 0.95


def test_a_solve_that_cannot_be_retried_fails_the_run_cleanly(
    client, prefect_api, tmp_path, capsys
):
    from tests.sdp_data import swiss_roll

    X, _ = swiss_roll(60, seed=0)
    np.save(tmp_path / "roll.npy", X)
    out = tmp_path / "mvu"
    rc, err = _cli(
        capsys,
        "--input",
        str(tmp_path / "roll.npy"),
        "--output",
        str(out),
        "--method",
        "mvu",
        "--param",
        "max_iter=3",
    )
    assert rc == 2 and "SolverError" in err and "max_iter" in err and "Fix:" in err, err
    assert not RunStore(str(out)).committed()


def test_values_too_large_to_square_are_named_not_summed_to_inf():
    from dimred_dask import pca

    X = _data(n=300).astype(np.float64)
    X[[7, 250], 2] = 1e200  # finite, but its square is not
    with pytest.raises(InputError, match=r"reach 1e\+200 \(rows 7 and 250\)"):
        pca(X)
    Y = _data(n=300)
    Y[5, 1] = 1e25  # a float32 whose float32 square overflows: summed in float64 instead
    model = pca(Y, n_components=2)
    ref = PCA(2).fit(Y.astype(np.float64))
    np.testing.assert_allclose(np.abs(model.components), np.abs(ref.components_), atol=1e-6)


def test_the_demo_never_replaces_data_it_did_not_make(client, prefect_api, tmp_path, capsys):
    """`dimred-dask demo --dir` onto a folder whose data.zarr is someone's own (here a Zarr
    v2 array, or one of another size) refuses and leaves it as it was."""
    from flows.cli import main

    data = tmp_path / "data.zarr"
    _zarr(data, _data(100, 4), chunk_rows=50, zarr_format=2)
    before = _tree(data)
    argv = ["demo", "--dir", str(tmp_path), "--rows", "500", "--features", "8"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "OutputExistsError" in err and "not the demo's 500 x 8" in err and "Fix:" in err, err
    assert _tree(data) == before
    assert not (tmp_path / "pca-output").exists()


def test_a_failed_run_leaves_an_output_folder_that_was_there(client, prefect_api, tmp_path, capsys):
    """A run that fails after taking the lease removes the folder only when it made it."""
    rng = np.random.default_rng(0)
    X = np.vstack([rng.normal(size=(40, 3)), rng.normal(size=(30, 3)) + 1000.0])
    inp = _zarr(tmp_path / "apart.zarr", X.astype(np.float32), chunk_rows=70)
    argv = ["--input", inp, "--method", "isomap", "--param", "n_neighbors=5"]
    made = tmp_path / "mine"
    made.mkdir()
    for out in (made, tmp_path / "new"):
        rc, err = _cli(capsys, *argv, "--output", str(out))
        assert rc == 2 and "DisconnectedGraphError" in err, err
    assert made.is_dir() and not any(made.iterdir())
    assert not (tmp_path / "new").exists()
