"""Rows of uncompressed local Zarr arrays read from their chunk files (``io.raw_chunks``)
against zarr's own reads, byte for byte: v3 and v2, both chunk-key separators, partial edge
chunks, dask chunks that straddle stored ones, integer and 1-D arrays, a group's array; the
arrays it leaves to zarr (compressed, sharded, split across columns, in chunks wider than the
array); fill values; absent and truncated chunks refused on both paths."""

from __future__ import annotations

import os

import numpy as np
import pytest
import zarr

from dimred_dask import InputError
from dimred_dask.io import open_input, open_matrix, zarr_arrays


def _same_bytes(a: np.ndarray, b: np.ndarray) -> bool:
    a, b = np.ascontiguousarray(a), np.ascontiguousarray(b)
    return (
        a.dtype == b.dtype
        and a.shape == b.shape
        and a.view(np.uint8).tobytes() == b.view(np.uint8).tobytes()
    )


def _read(uri, **kw):
    inp = open_input(uri, **kw)
    return inp.array.compute(scheduler="sync"), inp.meta


def _write(path, X, **kw):
    arr = zarr.create_array(str(path), shape=X.shape, dtype=X.dtype, overwrite=True, **kw)
    arr[...] = X
    return arr


CASES = {
    "v3": dict(chunks=(60, 7), compressors=None),
    "v3 dot keys": dict(
        chunks=(60, 7), compressors=None, chunk_key_encoding={"name": "default", "separator": "."}
    ),
    "v2": dict(chunks=(60, 7), compressors=None, zarr_format=2),
    "v2 slash keys": dict(
        chunks=(60, 7),
        compressors=None,
        zarr_format=2,
        chunk_key_encoding={"name": "v2", "separator": "/"},
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int16])
def test_chunk_files_read_byte_for_byte_as_zarr_reads(tmp_path, rng, case, dtype):
    X = (rng.standard_normal((250, 7)) * 100).astype(dtype)  # 250 = 4 chunks + a partial one
    path = tmp_path / "a.zarr"
    _write(path, X, **CASES[case])
    for row_chunk in (None, 70, 13):  # stored chunks, straddling ones, several per chunk
        Y, meta = _read(str(path), row_chunk=row_chunk)
        assert meta["read_path"] == "chunk files"
        assert _same_bytes(Y, zarr.open_array(str(path), mode="r")[...])
    assert _same_bytes(open_input(str(path)).array[55:131].compute(scheduler="sync"), X[55:131])


def test_one_dimensional_and_a_groups_array(tmp_path, rng):
    g = zarr.open_group(str(tmp_path / "g.zarr"), mode="w")
    x = g.create_array("inner/vec", shape=(101,), chunks=(25,), dtype="f8", compressors=None)
    x[...] = rng.standard_normal(101)
    inp = open_input(str(tmp_path / "g.zarr") + "#inner/vec", allow_1d=True)
    assert inp.meta["read_path"] == "chunk files"
    assert _same_bytes(inp.array.compute(scheduler="sync")[:, 0], x[...])


@pytest.mark.parametrize(
    "kind, why",
    [
        ("zstd", "compressed"),
        ("sharded", "sharded"),
        ("columns", "chunked across columns"),
        ("wide", "chunks wider than the array"),  # each chunk file row holds 12 values, not 8
    ],
)
def test_other_layouts_are_read_by_zarr(tmp_path, rng, kind, why):
    X = rng.standard_normal((240, 8)).astype(np.float32)
    kw = {
        "zstd": dict(chunks=(60, 8)),
        "sharded": dict(chunks=(30, 8), shards=(60, 8), compressors=None),
        "columns": dict(chunks=(60, 4), compressors=None),
        "wide": dict(chunks=(60, 12), compressors=None),
    }[kind]
    _write(tmp_path / "a.zarr", X, **kw)
    Y, meta = _read(str(tmp_path / "a.zarr"))
    assert meta["read_path"].startswith("zarr (") and why in meta["read_path"]
    assert _same_bytes(Y, X)


@pytest.fixture(params=["chunk files", "zarr"])
def read_path(request, monkeypatch):
    """Each damage case on both read paths (in this process: dask's sync scheduler)."""
    monkeypatch.setattr(zarr_arrays, "RAW_READS", request.param == "chunk files")
    return request.param


def test_fill_values_of_absent_chunks_only_when_allowed(tmp_path, rng, read_path):
    X = rng.standard_normal((240, 5)).astype(np.float32)
    X[60:120] = 7.5  # only the fill value: zarr leaves this chunk out
    path = tmp_path / "a.zarr"
    _write(
        path,
        X,
        chunks=(60, 5),
        compressors=None,
        fill_value=7.5,
        config={"write_empty_chunks": False},
    )
    assert not os.path.exists(path / "c" / "1" / "0")
    with pytest.raises(InputError, match="c/1/0"):  # the listing at open
        open_input(str(path))
    with pytest.raises(InputError, match="c/1/0"):  # the read itself, without the listing
        _read(str(path), check_chunks=False)
    Y, meta = _read(str(path), allow_missing_chunks=True)
    assert meta["read_path"].startswith(read_path)
    assert _same_bytes(Y, zarr.open_array(str(path), mode="r")[...]) and _same_bytes(Y, X)


def test_truncated_chunk_refused_naming_it(tmp_path, rng, read_path):
    X = rng.standard_normal((240, 5)).astype(np.float32)
    path = tmp_path / "a.zarr"
    _write(path, X, chunks=(60, 5), compressors=None)
    chunk = path / "c" / "2" / "0"
    with open(chunk, "r+b") as f:
        f.truncate(os.path.getsize(chunk) - 12)
    with pytest.raises(InputError, match="c/2/0"):
        _read(str(path))


def test_direct_reads_of_whole_aligned_chunks(tmp_path, rng, monkeypatch):
    """An array 'larger than memory' (DIRECT_SHARE = 0): whole chunks of 4 KiB multiples are
    read with O_DIRECT where the file system takes it, row ranges inside a chunk and the edge
    chunk's rows through the page cache; the bytes are zarr's either way."""
    from dimred_dask.io import raw_chunks

    monkeypatch.setattr(raw_chunks, "DIRECT_SHARE", 0.0)
    opened = []
    real = raw_chunks._open
    monkeypatch.setattr(
        raw_chunks, "_open", lambda p, direct: opened.append(direct) or real(p, direct)
    )
    X = rng.standard_normal((256 * 3 + 100, 8)).astype(np.float32)  # 8 KiB chunks + an edge
    path = tmp_path / "a.zarr"
    _write(path, X, chunks=(256, 8), compressors=None)
    for row_chunk in (None, 100):
        opened.clear()
        Y, _ = _read(str(path), row_chunk=row_chunk)
        assert _same_bytes(Y, X)
        assert any(opened) == (row_chunk is None) and not all(opened)


def test_read_buffers_reused_only_once_unreferenced(tmp_path, rng):
    """Blocks are read into the process's pooled buffers: a block still held anywhere (here
    every block of a persisted array, and a view of one) is never written over by later
    reads, and a block nothing refers to any more gives its buffer to the next read."""
    from dimred_dask.io import raw_chunks

    X = rng.standard_normal((600, 16)).astype(np.float32)
    path = tmp_path / "a.zarr"
    _write(path, X, chunks=(100, 16), compressors=None)
    arr = open_input(str(path), row_chunk=100).array
    held = arr.persist(scheduler="sync")  # six blocks alive at once
    view = arr.blocks[2].compute(scheduler="sync")[10:20]
    for _ in range(3):
        assert _same_bytes(arr.compute(scheduler="sync"), X)
    assert _same_bytes(held.compute(scheduler="sync"), X)
    assert _same_bytes(view, X[210:220])
    # the reader itself (dask's compute copies a single block's result, so a computed block
    # is never the pool's buffer)
    (rows,) = [v for v in dict(arr.__dask_graph__()).values() if isinstance(v, raw_chunks.RawRows)]
    raw_chunks._POOL.clear()
    first = rows[0:100]
    address = first.ctypes.data
    del first
    again = rows[100:200]
    assert again.ctypes.data == address and _same_bytes(again, X[100:200])
    other = rows[200:300]  # `again` is still held: another buffer
    assert other.ctypes.data != again.ctypes.data and _same_bytes(again, X[100:200])
    assert _same_bytes(other, X[200:300])


# -- square-chunked matrices (a run's kernel or distance matrix): `open_matrix`, `RawTiles` --


def _tiles(path):
    from dimred_dask.io import raw_chunks

    arr = open_matrix(str(path)).array
    (tiles,) = [
        v for v in dict(arr.__dask_graph__()).values() if isinstance(v, raw_chunks.RawTiles)
    ]
    return tiles


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int16])
def test_square_chunks_read_byte_for_byte_as_zarr_reads(tmp_path, rng, case, dtype):
    X = (rng.standard_normal((130, 110)) * 100).astype(dtype)  # 3 x 3 chunks, partial edges
    path = tmp_path / "m.zarr"
    _write(path, X, **{**CASES[case], "chunks": (50, 50)})
    inp = open_matrix(str(path))
    assert inp.meta["read_path"] == "chunk files" and inp.array.chunks[0] == (50, 50, 30)
    assert _same_bytes(inp.array.compute(scheduler="sync"), zarr.open_array(str(path))[...])
    tiles = _tiles(path)
    # blocks that are not the stored chunks: across chunk edges, inside one, the edge column,
    # whole rows, empty
    for rows, cols in [
        (slice(20, 120), slice(30, 101)),
        (slice(55, 60), slice(51, 52)),
        (slice(100, 130), slice(100, 110)),
        (slice(0, 50), slice(None)),
        (slice(None), slice(50, 100)),
        (slice(7, 7), slice(0, 50)),
    ]:
        assert _same_bytes(tiles[rows, cols], X[rows, cols])
    assert _same_bytes(tiles[[3, 1], 4:9], X[[3, 1], 4:9])  # fancy keys go to zarr


@pytest.mark.parametrize(
    "kind, why",
    [("zstd", "compressed"), ("sharded", "sharded"), ("v2 blosc", "compressed")],
)
def test_other_matrix_layouts_are_read_by_zarr(tmp_path, rng, kind, why):
    X = rng.standard_normal((120, 120)).astype(np.float32)
    kw = {
        "zstd": dict(chunks=(50, 50)),
        "sharded": dict(chunks=(25, 25), shards=(50, 50), compressors=None),
        "v2 blosc": dict(chunks=(50, 50), zarr_format=2),
    }[kind]
    _write(tmp_path / "m.zarr", X, **kw)
    inp = open_matrix(str(tmp_path / "m.zarr"))
    assert inp.meta["read_path"].startswith("zarr (") and why in inp.meta["read_path"]
    assert _same_bytes(inp.array.compute(scheduler="sync"), X)


def test_matrix_absent_or_truncated_chunk_refused_naming_it(tmp_path, rng, read_path):
    X = rng.standard_normal((100, 100)).astype(np.float32)
    path = tmp_path / "m.zarr"
    _write(path, X, chunks=(50, 50), compressors=None)
    os.remove(path / "c" / "1" / "0")
    chunk = path / "c" / "0" / "1"
    with open(chunk, "r+b") as f:
        f.truncate(os.path.getsize(chunk) - 12)
    arr = open_matrix(str(path)).array
    assert open_matrix(str(path)).meta["read_path"].startswith(read_path)
    with pytest.raises(InputError, match="c/1/0"):
        arr.blocks[1, 0].compute(scheduler="sync")
    with pytest.raises(InputError, match="c/0/1"):
        arr.blocks[0, 1].compute(scheduler="sync")
    assert _same_bytes(arr.blocks[0, 0].compute(scheduler="sync"), X[:50, :50])
    with pytest.raises(InputError, match="does not exist"):
        open_matrix(str(tmp_path / "nothing.zarr"))


def test_matrix_whole_chunks_read_with_direct_io(tmp_path, rng, monkeypatch):
    """A matrix 'larger than memory': whole rows of its chunks (64 x 64 float32, 16 KiB) are
    read with O_DIRECT, straight into the block or, for the edge column, into a buffer the
    block's columns are copied from; the edge row's 22 rows (5.5 KiB) through the page
    cache."""
    from dimred_dask.io import raw_chunks

    monkeypatch.setattr(raw_chunks, "DIRECT_SHARE", 0.0)
    opened = []
    real = raw_chunks._open
    monkeypatch.setattr(
        raw_chunks, "_open", lambda p, direct: opened.append((p, direct)) or real(p, direct)
    )
    X = rng.standard_normal((150, 150)).astype(np.float32)
    path = tmp_path / "m.zarr"
    _write(path, X, chunks=(64, 64), compressors=None)
    assert _same_bytes(open_matrix(str(path)).array.compute(scheduler="sync"), X)
    direct = {os.path.relpath(p, path) for p, d in opened if d}
    assert direct == {f"c/{i}/{j}" for i in range(2) for j in range(3)}
