"""Bad inputs in the formats users keep data in (AnnData, shards, Parquet list columns, SciPy
sparse): a typed error with a fix through the flow and the CLI, and nothing written to the
output. The readers' own refusals are in test_io_formats.py."""

from __future__ import annotations

import os
import re

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import scipy.sparse as sp

from dimred_dask import InputError
from dimred_dask.errors import InputTypeError
from dimred_dask.io.write import save_h5ad

from .test_bad_input import _snapshot
from .test_io_formats import _adata, _write


def _counts(n=120, d=12, seed=0):
    return sp.random(n, d, density=0.3, format="csr", random_state=seed, dtype=np.float32)


def _list_column(tmp_path, name, values):
    path = tmp_path / f"{name}.parquet"
    pq.write_table(pa.table({"embedding": pa.array(values)}), path, row_group_size=50)
    return str(path)


def _case(tmp_path, cid):
    """(input, method, error type, message pattern) of one bad input, written to tmp_path."""
    if cid == "h5ad-without-X":
        import pandas as pd

        from .test_io_formats import _object_strings

        with _object_strings():
            obs = pd.DataFrame(index=[f"c{i}" for i in range(50)])
        _write(_adata(None, obs=obs, obsm={"X_pca": np.ones((50, 3))}), tmp_path / "nox.h5ad")
        return str(tmp_path / "nox.h5ad"), "pca", InputError, r"has no X.*#obsm/X_pca"
    if cid == "h5ad-strings":
        _write(_adata(np.array([["a", "b"]] * 20, dtype=object)), tmp_path / "strings.h5ad")
        return str(tmp_path / "strings.h5ad"), "pca", InputTypeError, "real numbers"
    if cid == "no-such-element":
        path = save_h5ad(_counts(), str(tmp_path / "cells.h5ad"))
        return f"{path}#layers/counts", "pca", InputError, r"No element 'layers/counts'"
    if cid == "obs-column-as-input":
        import pandas as pd

        types = pd.Index(["B", "T"], dtype=object)  # anndata 0.12.6 writes object strings
        obs = {"cell_type": pd.Categorical.from_codes(np.arange(120) % 2, categories=types)}
        path = save_h5ad(_counts(), str(tmp_path / "cells.h5ad"), obs=obs)
        return f"{path}#obs/cell_type", "pca", InputTypeError, r"column of obs.*--labels.*#X"
    if cid == "glob-matches-nothing":
        (tmp_path / "sh").mkdir()
        np.save(tmp_path / "sh" / "part-0.npy", np.ones((30, 4), np.float32))
        return f"{tmp_path}/sh/part-*.parquet", "pca", InputError, "matches no file"
    if cid in ("shard-widths", "shard-dtypes"):
        (tmp_path / "sh").mkdir()
        np.save(tmp_path / "sh" / "part-0.npy", np.ones((30, 4), np.float32))
        other = np.ones((30, 5), np.float32) if cid == "shard-widths" else np.ones((30, 4))
        np.save(tmp_path / "sh" / "part-1.npy", other)
        pattern = "has 5 columns" if cid == "shard-widths" else "has 4 columns of float64"
        return f"{tmp_path}/sh", "pca", InputError, pattern
    if cid == "ragged-list-column":
        vals = [[1.0, 2.0, 3.0]] * 70 + [[1.0]] + [[4.0, 5.0, 6.0]] * 29
        return (
            _list_column(tmp_path, "ragged", vals) + "?columns=embedding",
            "pca",
            InputError,
            r"row group 1 has 1 .*first at row 70",
        )
    if cid == "null-in-list-column":
        vals = [[1.0, 2.0, 3.0]] * 70 + [None] + [[4.0, 5.0, 6.0]] * 29
        return (
            _list_column(tmp_path, "nulls", vals) + "?columns=embedding",
            "pca",
            InputError,
            r"row group 1 has 1 .*first at row 70",
        )
    if cid in ("sparse-nan", "sparse-inf"):
        X = _counts().tolil()
        X[7, 3] = np.nan if cid == "sparse-nan" else np.inf
        sp.save_npz(tmp_path / "bad.npz", X.tocsr())
        word = "NaN" if cid == "sparse-nan" else "inf"
        return str(tmp_path / "bad.npz"), "pca", InputError, rf"found 1 {word} in row 7"
    if cid == "sparse-to-tsne":
        path = save_h5ad(_counts(), str(tmp_path / "cells.h5ad"))
        return path, "tsne", InputTypeError, r"does not take sparse input.*--method pca\+tsne"
    raise KeyError(cid)


CASES = [
    "h5ad-without-X",
    "h5ad-strings",
    "no-such-element",
    "obs-column-as-input",
    "glob-matches-nothing",
    "shard-widths",
    "shard-dtypes",
    "ragged-list-column",
    "null-in-list-column",
    "sparse-nan",
    "sparse-inf",
    "sparse-to-tsne",
]


def _split_columns(uri):
    return uri.split("?columns=") if "?columns=" in uri else (uri, None)


@pytest.mark.parametrize("cid", CASES)
def test_flow_and_cli(cid, tmp_path, client, prefect_api, capsys):
    from flows.cli import main
    from flows.embed import embed

    uri, method, err, pattern = _case(tmp_path, cid)
    uri, columns = _split_columns(uri)
    out = str(tmp_path / "out")
    with pytest.raises(err, match=f"(?s){pattern}") as info:
        embed(
            uri,
            out,
            method=method,
            params={"n_components": 2},
            columns=columns.split(",") if columns else None,
        )
    assert "Fix:" in str(info.value)
    assert not os.path.exists(out), "a refused run must not write its output"
    argv = ["run", "--input", uri, "--output", out, "--method", method, "--n-components", "2"]
    argv += ["--columns", columns] if columns else []
    assert main(argv) == 2
    stderr = capsys.readouterr().err
    assert err.__name__ in stderr and "Fix:" in stderr, stderr
    assert re.search(f"(?s){pattern}", stderr), stderr
    assert "Traceback" not in stderr
    assert _snapshot(out) is None
