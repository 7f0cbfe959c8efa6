"""Readers on inputs at the edges of their formats, written by the formats' own libraries:
Parquet from pandas (its index stored as a column), column names with dots, Parquet folders
with hidden and underscore folders, CSV with boolean and number columns side by side, a
folder where a file is expected, big-endian floats; and a 0-d model array in a run store."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from dimred_dask import InputError
from dimred_dask.io import open_input


def _read(uri, **kw):
    inp = open_input(str(uri), **kw)
    return inp.array.compute(scheduler="sync"), inp.meta


def test_parquet_index_written_by_pandas_is_not_a_feature(tmp_path, rng):
    X = rng.standard_normal((20, 3))
    df = pd.DataFrame(X, columns=list("abc"))
    rows = [1, 2, 5, 11, 17]
    kept = df.iloc[rows]  # a filtered frame: pandas stores its index as a column
    kept.to_parquet(tmp_path / "unnamed.parquet")
    kept.rename_axis("cell").to_parquet(tmp_path / "named.parquet")
    assert "__index_level_0__" in pq.read_schema(tmp_path / "unnamed.parquet").names
    for name in ("unnamed", "named"):
        Y, meta = _read(tmp_path / f"{name}.parquet")
        assert meta["columns"] == ["a", "b", "c"]
        np.testing.assert_array_equal(Y, X[rows])
    Y, _ = _read(tmp_path / "named.parquet", columns=["cell", "a"])  # still there when named
    np.testing.assert_array_equal(Y, np.column_stack([rows, X[rows, 0]]))


def test_parquet_column_names_with_dots(tmp_path):
    table = pa.table(
        {
            "gene.1": pa.array([1, None, 3], pa.int64()),
            "s": pa.array([{"p": 1}, {"p": 2}, {"p": 3}]),
            "x.y": pa.array([0.5, 1.5, 2.5]),
        }
    )
    pq.write_table(table, tmp_path / "dots.parquet")
    Y, meta = _read(tmp_path / "dots.parquet")
    assert meta["columns"] == ["gene.1", "x.y"]
    np.testing.assert_array_equal(Y, [[1.0, 0.5], [np.nan, 1.5], [3.0, 2.5]])


def test_csv_with_boolean_and_number_columns(tmp_path):
    (tmp_path / "t.csv").write_text("a,flag,n\n1.5,True,1\n2.5,False,2\n")
    Y, meta = _read(tmp_path / "t.csv")
    assert meta["columns"] == ["a", "flag", "n"]
    np.testing.assert_array_equal(Y, [[1.5, 1.0, 1.0], [2.5, 0.0, 2.0]])
    Y, _ = _read(tmp_path / "t.csv", columns=["flag", "n"])
    assert Y.dtype == np.int64
    np.testing.assert_array_equal(Y, [[1, 1], [0, 2]])


@pytest.mark.parametrize("suffix", [".npy", ".npz", ".csv", ".h5", ".h5ad"])
def test_a_folder_where_a_file_is_expected(tmp_path, suffix):
    folder = tmp_path / f"data{suffix}"
    folder.mkdir()
    (folder / "part-0.txt").write_text("x")
    with pytest.raises(InputError, match="is a folder") as err:
        open_input(str(folder))
    assert type(err.value) is InputError and f"{folder}/*{suffix}" in str(err.value)


def test_big_endian_float32_stays_float32(tmp_path, rng):
    X = rng.standard_normal((30, 4)).astype(">f4")
    np.save(tmp_path / "be.npy", X)
    inp = open_input(str(tmp_path / "be.npy"), as_float=True)
    assert inp.array.dtype == np.float32 and inp.meta["stored_dtype"] == ">f4"
    np.testing.assert_array_equal(inp.array.compute(scheduler="sync"), X.astype(np.float32))


def test_run_store_writes_a_0d_model_array(tmp_path):
    from dimred_dask.io import RunStore

    store = RunStore(str(tmp_path / "run"))
    store.prepare("new", {})
    store.write_array("model/noise_variance_", np.float32(0.25))
    store.write_array("model/mean_", np.arange(3.0))
    arrays = store.read_group("model", lazy=("noise_variance_", "mean_"))
    assert arrays["noise_variance_"].shape == () and arrays["noise_variance_"] == np.float32(0.25)
    np.testing.assert_array_equal(np.asarray(arrays["mean_"]), np.arange(3.0))


def test_parquet_folder_leaves_out_hidden_and_underscore_folders(tmp_path):
    """As pyarrow's own dataset reader: a job's leftover ``_temporary`` files and notebook
    checkpoints are not rows of the data."""
    folder = tmp_path / "out.parquet"
    for sub in ("_temporary/0", ".ipynb_checkpoints"):
        (folder / sub).mkdir(parents=True)
    pq.write_table(pa.table({"a": [1.0, 2.0]}), folder / "part-0.parquet")
    pq.write_table(pa.table({"a": [3.0]}), folder / "part-1.parquet")
    pq.write_table(pa.table({"a": [9.0]}), folder / "_temporary" / "0" / "part-1.parquet")
    pq.write_table(pa.table({"a": [8.0]}), folder / ".ipynb_checkpoints" / "part-0.parquet")
    expected = pq.read_table(folder)["a"].to_numpy()
    Y, meta = _read(folder)
    assert meta["files"] == 2
    np.testing.assert_array_equal(Y[:, 0], expected)
    Y, meta = _read(folder.rename(tmp_path / "out"))  # a folder without the suffix
    assert meta["files"] == 2
    np.testing.assert_array_equal(Y[:, 0], expected)
