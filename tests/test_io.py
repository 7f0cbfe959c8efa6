"""Readers (Zarr v2/v3, group#path, .npy, Parquet, CSV; local, file://, memory://), the run
store's commit rules, and the URI rules."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import zarr

from dimred_dask import InputError, OutputExistsError, UncommittedOutputError
from dimred_dask.io import (
    RunStore,
    check_output_location,
    open_input,
    open_output,
    parse_uri,
    plan_row_chunk,
    save_array,
)


@pytest.fixture
def X(rng):
    return rng.standard_normal((257, 6)).astype(np.float32)


def test_zarr_v3_and_v2(tmp_path, X):
    for fmt in (3, 2):
        path = tmp_path / f"v{fmt}.zarr"
        z = zarr.create_array(
            str(path), shape=X.shape, chunks=(50, 6), dtype=X.dtype, zarr_format=fmt
        )
        z[:] = X
        inp = open_input(str(path))
        assert inp.meta["zarr_format"] == fmt and inp.array.shape == X.shape
        np.testing.assert_array_equal(inp.array.compute(), X)
        assert all(c % 50 == 0 for c in inp.array.chunks[0][:-1])  # whole stored chunks


def test_zarr_group_fragment_and_file_url(tmp_path, X):
    g = zarr.open_group(str(tmp_path / "g.zarr"), mode="w")
    g.create_array("a", shape=X.shape, dtype=X.dtype)[:] = X
    g.create_array("b", shape=(3,), dtype="f8")
    np.testing.assert_array_equal(open_input(f"file://{tmp_path}/g.zarr#a").array.compute(), X)
    with pytest.raises(InputError, match=r"(?s)is a Zarr group.*\['a', 'b'\].*#a"):
        open_input(str(tmp_path / "g.zarr"))
    with pytest.raises(InputError, match="No array 'zz'"):
        open_input(f"{tmp_path}/g.zarr#zz")
    with pytest.raises(InputError, match="1-D"):
        open_input(f"{tmp_path}/g.zarr#b")


def test_split_feature_chunks_are_joined(tmp_path, X):
    z = zarr.create_array(str(tmp_path / "s.zarr"), shape=X.shape, chunks=(40, 4), dtype=X.dtype)
    z[:] = X
    arr = open_input(str(tmp_path / "s.zarr")).array
    assert arr.numblocks[1] == 1
    np.testing.assert_array_equal(arr.compute(), X)


def test_npy_memmapped_and_by_byte_range(tmp_path, X):
    np.save(tmp_path / "x.npy", X)
    inp = open_input(str(tmp_path / "x.npy"), row_chunk=100)
    assert inp.meta["memory_mapped"] and inp.array.chunks[0] == (100, 100, 57)
    np.testing.assert_array_equal(inp.array.compute(), X)
    import fsspec

    with fsspec.open("memory://npy/x.npy", "wb") as f:
        np.save(f, X.astype(np.float64))
    remote = open_input("memory://npy/x.npy", row_chunk=64)
    assert not remote.meta["memory_mapped"]
    np.testing.assert_array_equal(remote.array.compute(scheduler="sync"), X.astype(np.float64))


def test_npy_of_more_than_two_dimensions_is_refused_without_reading_it(tmp_path):
    """A 3-D .npy whose header promises 2**40 elements (a sparse file, 8 TiB) is refused by its
    shape, before anything is allocated or read."""
    path = tmp_path / "cube.npy"
    with open(path, "wb") as f:
        np.lib.format.write_array_header_1_0(
            f, {"descr": "<f8", "fortran_order": False, "shape": (2**14, 2**13, 2**13)}
        )
        f.seek(8 * 2**40 + 128)
        f.write(b"\0")
    with pytest.raises(InputError, match="3-D"):
        open_input(str(path))


def test_npy_in_fortran_order_is_read_by_rows_and_objects_refused(tmp_path, X):
    import fsspec

    np.save(tmp_path / "f.npy", np.asfortranarray(X))  # as e.g. scikit-learn's generators give
    inp = open_input(str(tmp_path / "f.npy"), row_chunk=100)
    assert inp.meta["order"] == "F"
    np.testing.assert_array_equal(inp.array.compute(scheduler="sync"), X)
    with fsspec.open("memory://npy/f.npy", "wb") as f:  # by byte ranges, one per column
        np.save(f, np.asfortranarray(X))
    remote = open_input("memory://npy/f.npy", row_chunk=64)
    np.testing.assert_array_equal(remote.array.compute(scheduler="sync"), X)
    np.save(tmp_path / "o.npy", np.array([[1, "a"]], dtype=object), allow_pickle=True)
    with pytest.raises(InputError, match="Python objects"):
        open_input(str(tmp_path / "o.npy"))


@pytest.mark.parametrize("fmt", ["parquet", "csv"])
def test_tables_with_columns(tmp_path, X, fmt):
    df = pd.DataFrame(X, columns=list("abcdef"))
    df["label"] = ["x"] * len(df)
    path = tmp_path / f"t.{fmt}"
    df.to_parquet(path) if fmt == "parquet" else df.to_csv(path, index=False)
    inp = open_input(str(path), columns=["b", "d"])
    np.testing.assert_allclose(inp.array.compute(), X[:, [1, 3]], rtol=1e-6)
    assert open_input(str(path)).array.shape == (257, 6)  # numeric columns by default
    with pytest.raises(InputError, match=r"\['label'\].*not numeric"):
        open_input(str(path), columns=["a", "label"])
    with pytest.raises(InputError, match=r"\['zz'\] are not in"):
        open_input(str(path), columns=["zz"])


def test_uri_rules(tmp_path):
    assert parse_uri("memory://b/x.zarr").url == "memory://b/x.zarr"
    assert parse_uri(f"file://{tmp_path}/a").url == f"{tmp_path}/a"
    assert parse_uri("s3://bucket/x.zarr#grp/arr").element == "grp/arr"
    for bad, pattern in [
        ("ftp://h/x", "scheme 'ftp' is not allowed"),
        ("s3://AKIA:secret@bucket/x", "credentials"),
        ("s3://bucket/x?X-Amz-Credential=abc", "credentials"),
        ("s3://bucket/a/../b", r"'\.\.'"),
        (f"{tmp_path}/../x", r"'\.\.'"),
        ("", "path or URL"),
    ]:
        with pytest.raises(InputError, match=pattern):
            parse_uri(bad)
    inp = parse_uri(f"{tmp_path}/in.zarr")
    for out in (f"{tmp_path}/in.zarr", f"{tmp_path}/in.zarr/out", f"{tmp_path}"):
        with pytest.raises(InputError, match="input"):
            check_output_location(parse_uri(out), inp)
    check_output_location(parse_uri(f"{tmp_path}/in.zarr-out"), inp)  # a prefix is not inside
    # file://data/x.zarr names a host "data", not the folder ./data: refused, not read as /x.zarr
    with pytest.raises(InputError, match="names a host") as err:
        parse_uri("file://data/x.zarr")
    assert "file:///data/x.zarr" in str(err.value)
    assert parse_uri(f"file://localhost{tmp_path}/a").url == f"{tmp_path}/a"
    spaced = tmp_path / "my data" / "x 1.npy"  # Path.as_uri percent-encodes the spaces
    assert parse_uri(spaced.as_uri()).url == str(spaced)
    assert parse_uri(str(spaced)).url == str(spaced)  # a plain path is taken as written
    with pytest.raises(InputError, match=r"'\.\.'"):  # an encoded '..' is a '..'
        parse_uri(f"file://{tmp_path}/%2E%2E/x")


def test_run_store_commit_rules(tmp_path):
    store = RunStore(str(tmp_path / "run"))
    assert store.check_writable(False) == "new"
    store.prepare("new", {"method": "pca"})
    store.write_array("model/mean_", np.arange(3.0))
    store.write_attrs("model", {"solver": "covariance"})
    assert store.check_writable(False) == "resume"
    with pytest.raises(UncommittedOutputError, match="_COMMITTED"):
        open_output(str(tmp_path / "run"))
    store.commit({"fingerprint": "abc"}, guard=None)
    with pytest.raises(OutputExistsError, match="--overwrite"):
        store.check_writable(False)
    assert store.check_writable(True) == "overwrite"
    reader = open_output(str(tmp_path / "run"))
    np.testing.assert_array_equal(reader.read_group("model")["mean_"], np.arange(3.0))
    assert reader.read_attrs("model") == {"solver": "covariance"}
    (tmp_path / "foreign").mkdir()
    (tmp_path / "foreign" / "data.txt").write_text("not ours")
    with pytest.raises(OutputExistsError, match="not a dimred-dask run"):
        RunStore(str(tmp_path / "foreign")).check_writable(False)


def test_save_array_and_chunk_plan(tmp_path, X):
    save_array(X, str(tmp_path / "s.zarr"), chunks=(64, 6))
    np.testing.assert_array_equal(open_input(str(tmp_path / "s.zarr")).array.compute(), X)
    with pytest.raises(OutputExistsError):
        save_array(X, str(tmp_path / "s.zarr"))
    # a '#' after an existing store names an element of it, which an array's location never
    # is; after a name that exists as nothing, it is part of the folder's name
    save_array(X, str(tmp_path / "g.zarr"))
    with pytest.raises(InputError, match="(?s)would be the element 'arr'.*%23arr"):
        save_array(X, str(tmp_path / "g.zarr") + "#arr")
    assert not (tmp_path / "g.zarr#arr").exists()
    save_array(X, str(tmp_path / "h.zarr") + "#arr")
    assert (tmp_path / "h.zarr#arr" / "zarr.json").exists() and not (tmp_path / "h.zarr").exists()


def test_save_array_with_irregular_dask_chunks_keeps_every_row(tmp_path, rng):
    """Dask blocks of uneven sizes would share Zarr chunks, written by unlocked parallel
    tasks; the array is written in regular blocks instead, and reads back equal."""
    import dask.array as da

    A = rng.standard_normal((3800, 7))
    for attempt in range(5):  # the race, when present, lost rows in every attempt
        darr = da.from_array(A, chunks=((500,) + (300,) * 11, (7,)))
        out = str(tmp_path / f"irregular{attempt}.zarr")
        save_array(darr, out)
        np.testing.assert_array_equal(zarr.open_array(out, mode="r")[:], A)
    rows = plan_row_chunk(10**7, 512, 4, base=1000, target_bytes=64 * 2**20)
    assert rows % 1000 == 0 and rows * 512 * 4 <= 64 * 2**20
