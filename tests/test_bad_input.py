"""Bad input gets a typed error saying what to fix, through the API, the flow and the CLI,
and nothing is written to the output."""

from __future__ import annotations

import os

import numpy as np
import pytest
import zarr

from dimred_dask import InputError, InputTypeError, OutputExistsError, pca


def _good(n=60, d=5):
    return np.random.default_rng(0).standard_normal((n, d)).astype(np.float32)


def _with(value, rows):
    x = _good()
    x[rows, 1] = value
    return x


def _strings():
    return np.array([["a", "b"], ["c", "d"], ["e", "f"]])


# (id, array for the API and the file, params, error type, message pattern)
ARRAY_CASES = [
    ("nan", _with(np.nan, [5, 6, 7]), {}, InputError, r"finite values; found 3 NaN in rows 5-7"),
    ("inf", _with(np.inf, [9]), {}, InputError, r"finite values; found 1 inf in row 9"),
    ("strings", _strings(), {}, InputTypeError, r"need(s)? numbers"),
    ("zero-rows", np.zeros((0, 5), np.float32), {}, InputError, r"found 0 rows"),
    ("one-row", _good(1), {"n_components": 1}, InputError, r"found 1 sample"),
    ("one-dimensional", np.arange(10.0), {}, InputError, r"2-D"),
    (
        "k-too-large",
        _good(),
        {"n_components": 6},
        InputError,
        r"n_components <= min\(n_samples, n_features\) = 5",
    ),
    ("k-zero", _good(), {"n_components": 0}, InputError, r"found n_components=0"),
    ("k-negative", _good(), {"n_components": -2}, InputError, r"found n_components=-2"),
    ("complex", _good().astype(np.complex64), {}, InputError, r"Complex data not supported"),
    ("n-by-1", _good(d=1), {}, InputError, r"n_components <= min\(n_samples, n_features\) = 1"),
]


def _write_pickle_codec(tmp_path, name: str) -> str:
    """A Zarr v2 array of Python objects behind a pickle filter (reading would unpickle)."""
    import json
    import pickle

    path = tmp_path / f"{name}.zarr"
    path.mkdir()
    (path / ".zarray").write_text(
        json.dumps(
            {
                "zarr_format": 2,
                "shape": [3, 2],
                "chunks": [3, 2],
                "dtype": "|O",
                "order": "C",
                "compressor": None,
                "fill_value": None,
                "filters": [{"id": "pickle", "protocol": 5}],
            }
        )
    )
    (path / "0.0").write_bytes(pickle.dumps(np.array([[1, 2], [3, 4], [5, 6]], dtype=object)))
    return str(path)


def _write(tmp_path, X, name="in") -> str:
    if X.dtype.kind == "U":  # text: a CSV whose only columns are strings
        path = tmp_path / f"{name}.csv"
        np.savetxt(path, X, fmt="%s", delimiter=",", header="a,b", comments="")
        return str(path)
    path = tmp_path / f"{name}.zarr"
    zarr.create_array(
        str(path), shape=X.shape, dtype=X.dtype, chunks=tuple(max(1, s) for s in X.shape)
    )[...] = X
    return str(path)


@pytest.mark.parametrize("case", ARRAY_CASES, ids=[c[0] for c in ARRAY_CASES])
def test_api(case):
    _, X, params, err, pattern = case
    with pytest.raises(err, match=pattern) as info:
        pca(X, **{"n_components": 2, **params})
    assert "Fix:" in str(info.value)


def _uri_cases(tmp_path):
    good = _write(tmp_path, _good())
    committed = tmp_path / "done.zarr"
    return [  # (id, input, output, overwrite, error type, pattern)
        (
            "missing-input",
            str(tmp_path / "nope.zarr"),
            str(tmp_path / "o1"),
            InputError,
            "does not exist",
        ),
        (
            "unknown-scheme",
            "ftp://example.org/x.zarr",
            str(tmp_path / "o2"),
            InputError,
            "scheme 'ftp' is not allowed",
        ),
        (
            "credentials-in-url",
            "s3://AKIAXX:secret@bucket/x.zarr",
            str(tmp_path / "o3"),
            InputError,
            "credentials",
        ),
        ("output-is-input", good, good, InputError, "is the input itself"),
        ("output-inside-input", good, good + "/out", InputError, "inside the input"),
        ("existing-output", good, str(committed), OutputExistsError, "committed run already"),
        (
            "pickle-codec",
            _write_pickle_codec(tmp_path, "pickled"),
            str(tmp_path / "o4"),
            InputTypeError,
            "pickle codec",
        ),
        # a URL: the CLI resolves '..' in plain local paths typed at a shell, URLs it passes on
        (
            "dot-dot-traversal",
            f"file://{tmp_path}/sub/../in.zarr",
            str(tmp_path / "o5"),
            InputError,
            r"'\.\.' segment",
        ),
    ]


URI_IDS = [
    "missing-input",
    "unknown-scheme",
    "credentials-in-url",
    "output-is-input",
    "output-inside-input",
    "existing-output",
    "pickle-codec",
    "dot-dot-traversal",
]


def _make_committed(path):
    from dimred_dask.io import RunStore

    store = RunStore(str(path))
    store.prepare("new", {"method": "pca"})
    store.commit({"fingerprint": "earlier"}, guard=None)


def _snapshot(path):
    if not os.path.exists(path):
        return None
    return sorted(
        (os.path.relpath(os.path.join(r, f), path), os.path.getmtime(os.path.join(r, f)))
        for r, _, fs in os.walk(path)
        for f in fs
    )


def _cases_for_run(tmp_path):
    out = []
    for cid, X, params, err, pattern in ARRAY_CASES:
        out.append(
            (
                cid,
                _write(tmp_path, X, cid),
                str(tmp_path / f"out-{cid}"),
                {"n_components": 2, **params},
                err,
                pattern,
            )
        )
    for cid, inp, outp, err, pattern in _uri_cases(tmp_path):
        out.append((cid, inp, outp, {"n_components": 2}, err, pattern))
    good = _write(tmp_path, _good(), "good")
    out.append(
        (
            "unknown-parameter",
            good,
            str(tmp_path / "o6"),
            {"n_components": 2, "colour": 1},
            InputError,
            r"Unknown parameter\(s\) \['colour'\]",
        )
    )
    out.append(
        (
            "sample-size-too-small",
            good,
            str(tmp_path / "o7"),
            {"n_components": 2, "__sample_size": 3},
            InputError,
            "sample_size must be at least 10",
        )
    )
    _make_committed(tmp_path / "done.zarr")
    return out


ALL_IDS = [c[0] for c in ARRAY_CASES] + URI_IDS + ["unknown-parameter", "sample-size-too-small"]


@pytest.mark.parametrize("cid", ALL_IDS)
def test_flow_and_cli(cid, tmp_path, client, prefect_api, capsys):
    from flows.cli import main
    from flows.embed import embed

    case = {c[0]: c for c in _cases_for_run(tmp_path)}[cid]
    _, inp, out, params, err, pattern = case
    params = dict(params)
    sample_size = params.pop("__sample_size", 2000)
    before = _snapshot(out)
    with pytest.raises(err, match=pattern):
        embed(inp, out, method="pca", params=params, sample_size=sample_size)
    assert _snapshot(out) == before, "a refused run must not write to its output"
    argv = [
        "run",
        "--input",
        inp,
        "--output",
        out,
        "--method",
        "pca",
        "--sample-size",
        str(sample_size),
    ]
    argv += [a for k, v in params.items() for a in ("--param", f"{k}={v}")]
    assert main(argv) == 2
    stderr = capsys.readouterr().err
    assert err.__name__ in stderr and "Fix:" in stderr
    assert __import__("re").search(pattern, stderr), stderr
    assert _snapshot(out) == before


def test_unknown_method_refused(client, prefect_api, tmp_path):
    from flows.cli import main
    from flows.embed import embed

    good = _write(tmp_path, _good(), "good")
    with pytest.raises(
        InputError, match=r"Unknown method 'tsnee'; available: \[.*'kpca'.*'pca'.*\]"
    ):
        embed(good, str(tmp_path / "o"), method="tsnee")
    assert main(["run", "--input", good, "--output", str(tmp_path / "o"), "--method", "x"]) == 2
    assert not (tmp_path / "o").exists()


def test_zero_variance_columns_warn_but_run(client, prefect_api, tmp_path, caplog):
    """A constant column is harmless for PCA: a warning, not a failure."""
    from dimred_dask import DimredWarning
    from flows.embed import embed

    X = _good(200, 6)
    X[:, [2, 4]] = 7.0
    with pytest.warns(DimredWarning, match=r"2 of 6 columns .* zero variance \(columns 2, 4\)"):
        model = pca(X, n_components=3)
    assert np.allclose(model.components[:, [2, 4]], 0.0)
    m = embed(_write(tmp_path, X, "constant"), str(tmp_path / "o"), params={"n_components": 3})
    assert m["model"]["n_components"] == 3


def _flow_run_count() -> int:
    from prefect.client.orchestration import get_client

    with get_client(sync_client=True) as c:
        return c.count_flow_runs()


def test_cli_refuses_before_a_flow_run_or_a_cluster_starts(prefect_api, tmp_path, capsys):
    """The CLI makes the validate stage's checks first: a mistyped parameter, a missing input
    or an output inside the input is refused without a Prefect flow run (and without
    starting a Dask cluster, which is what makes the refusal take a second)."""
    from flows.cli import main

    good = _write(tmp_path, _good(), "good")
    before = _flow_run_count()
    cases = [
        ["--input", good, "--output", str(tmp_path / "o"), "--param", "bogus=1"],
        ["--input", str(tmp_path / "absent.npy"), "--output", str(tmp_path / "o")],
        ["--input", good, "--output", str(tmp_path / "o"), "--method", "pca+umap",
         "--param", "pca.n_components=3", "--param", "umap.n_neighbors=0"],
        ["--input", good, "--output", str(tmp_path / "o"), "--param", "whiten"],
    ]  # fmt: skip
    for argv in cases:
        assert main(["run", *argv]) == 2
        err = capsys.readouterr().err
        assert err.startswith("error: InputError") and "Fix:" in err, err
    assert _flow_run_count() == before
    assert not (tmp_path / "o").exists()
    # a good run still goes through the flow
    assert main(["run", "--input", good, "--output", str(tmp_path / "o")]) == 0
    assert _flow_run_count() == before + 1


def test_a_chain_onto_an_occupied_output_is_refused_before_a_flow_run(
    prefect_api, tmp_path, capsys
):
    """A chain's own store is checked with its first step's: an output that is a file or a
    folder of someone else's is refused before Prefect or Dask start, and left as it was."""
    from flows.cli import main

    good = _write(tmp_path, _good(), "good")
    folder = tmp_path / "mine"
    folder.mkdir()
    (folder / "notes.txt").write_text("mine")
    afile = tmp_path / "a.txt"
    afile.write_text("mine too")
    before = _flow_run_count()
    for out, found in ((folder, "not a dimred-dask run store"), (afile, "an existing file")):
        for extra in ([], ["--overwrite"]):
            argv = ["run", "--input", good, "--output", str(out), "--method", "pca+umap"]
            assert main([*argv, *extra]) == 2
            err = capsys.readouterr().err
            assert err.startswith("error: OutputExistsError") and found in err, err
            assert "Fix:" in err
    assert _flow_run_count() == before
    assert sorted(p.name for p in folder.iterdir()) == ["notes.txt"]
    assert afile.read_text() == "mine too"


@pytest.mark.parametrize("rows", [-5, 0])
def test_chunk_rows_below_one_is_refused(rows, client, prefect_api, tmp_path, capsys):
    from flows.cli import main
    from flows.embed import embed

    good = _write(tmp_path, _good(), "good")
    out = tmp_path / "o"
    with pytest.raises(InputError, match=rf"chunk_rows must be a positive .* found {rows}"):
        embed(good, str(out), params={"n_components": 2}, chunk_rows=rows)
    assert not out.exists()
    argv = ["run", "--input", good, "--output", str(out), "--chunk-rows", str(rows)]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: InputError: chunk_rows must be") and "Fix:" in err, err
    assert not out.exists()


def test_chunk_rows_beyond_the_input_is_not_judged_by_rows_it_does_not_have(
    client, prefect_api, tmp_path
):
    """A chunk holds at most the input's rows: a --chunk-rows past them fits any worker."""
    from flows.embed import embed

    good = _write(tmp_path, _good(), "good")
    m = embed(good, str(tmp_path / "o"), params={"n_components": 2}, chunk_rows=10**12)
    assert m["chunking"]["n_chunks"] == 1


def test_cli_output_into_a_closed_pipe_is_not_a_failure(tmp_path):
    """``dimred-dask methods | head -1``: the reader closing the pipe ends the command quietly
    (exit 141, as a shell reports SIGPIPE), not with the message of an unexplained failure."""
    import subprocess
    import sys

    code = (
        "import os, sys\n"
        "r, w = os.pipe(); os.close(r); os.dup2(w, 1)\n"
        "from flows.cli import main\n"
        "sys.exit(main(['methods']))\n"
    )
    root = str(__import__("pathlib").Path(__file__).parents[1])
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=root)
    assert res.returncode == 141 and res.stderr == "", (res.returncode, res.stderr)
