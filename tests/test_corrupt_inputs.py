"""Random bad bytes in one chunk of an input, for every input format: the run ends with a typed
error, or commits the embedding of exactly what the format's own library reads from the damaged
file; never an untyped exception, never a committed wrong embedding.

Seeded trials (a property test with a fixed sample of cases, so that a failure reproduces):
each writes a clean file, overwrites 1-16 random bytes inside one chunk (a Zarr chunk object, a
row range of a .npy, a row group of a Parquet file, a few lines of a CSV), then runs PCA
through the flow and compares with PCA of the reference read (zarr, numpy, pyarrow, pandas)."""

from __future__ import annotations

import os

import numpy as np
import pandas as pd
import pytest
import zarr

from dimred_dask import PCA, DimredError
from dimred_dask.io import RunStore, open_output

FORMATS = ("zarr3", "zarr2", "npy", "parquet", "csv")
TRIALS = 3
N, D, CHUNK = 240, 5, 60
# PCA of the same numbers in float32 on the workers against float64 here: the embedding
# agrees to ~1e-5 of the data's scale (float32 rounding of products accumulated in float64)
REL_TOL = 1e-4


def _write(fmt: str, folder, X: np.ndarray) -> tuple[str, tuple[str, int, int]]:
    """The input's URI and one chunk's bytes: (file, start, end)."""
    if fmt.startswith("zarr"):
        path = folder / "in.zarr"
        arr = zarr.create_array(
            str(path),
            shape=X.shape,
            dtype=X.dtype,
            chunks=(CHUNK, D),
            zarr_format=3 if fmt == "zarr3" else 2,
        )
        arr[...] = X
        chunk = os.path.join(path, "c", "1", "0") if fmt == "zarr3" else os.path.join(path, "1.0")
        return str(path), (chunk, 0, os.path.getsize(chunk))
    if fmt == "npy":
        path = folder / "in.npy"
        np.save(path, X)
        header = os.path.getsize(path) - X.nbytes
        row = D * X.dtype.itemsize
        return str(path), (str(path), header + CHUNK * row, header + 2 * CHUNK * row)
    if fmt == "parquet":
        import pyarrow as pa
        import pyarrow.parquet as pq

        path = folder / "in.parquet"
        pq.write_table(pa.table({f"c{j}": X[:, j] for j in range(D)}), path, row_group_size=CHUNK)
        col = pq.ParquetFile(path).metadata.row_group(1)
        start = col.column(0).data_page_offset
        end = col.column(D - 1).data_page_offset + col.column(D - 1).total_compressed_size
        return str(path), (str(path), start, end)
    path = folder / "in.csv"
    pd.DataFrame(X, columns=[f"c{j}" for j in range(D)]).to_csv(path, index=False)
    text = path.read_bytes()
    lines = np.cumsum([len(x) + 1 for x in text.split(b"\n")])
    return str(path), (str(path), int(lines[CHUNK]), int(lines[2 * CHUNK]))


def _corrupt(rng, where) -> None:
    path, start, end = where
    raw = bytearray(open(path, "rb").read())
    for _ in range(int(rng.integers(1, 17))):
        raw[int(rng.integers(start, end))] = int(rng.integers(0, 256))
    with open(path, "wb") as f:
        f.write(bytes(raw))


def _reference(fmt: str, uri: str) -> np.ndarray | None:
    """What the format's own library reads, or None when it refuses the file."""
    try:
        if fmt.startswith("zarr"):
            return np.asarray(zarr.open_array(uri, mode="r")[...], dtype=np.float64)
        if fmt == "npy":
            return np.load(uri).astype(np.float64)
        if fmt == "parquet":
            return pd.read_parquet(uri).to_numpy(dtype=np.float64)
        df = pd.read_csv(uri)
        return df.to_numpy(dtype=np.float64) if df.shape == (N, D) else None
    except Exception:
        return None


@pytest.mark.parametrize("trial", range(TRIALS))
@pytest.mark.parametrize("fmt", FORMATS)
def test_damaged_chunk_gives_a_typed_error_or_the_right_embedding(
    client, prefect_api, tmp_path, fmt, trial
):
    from flows.embed import embed

    rng = np.random.default_rng([FORMATS.index(fmt), trial])
    X = (
        rng.standard_normal((N, 2)) @ rng.standard_normal((2, D)) * 3 + rng.standard_normal((N, D))
    ).astype(np.float32)
    uri, chunk = _write(fmt, tmp_path, X)
    _corrupt(rng, chunk)
    ref = _reference(fmt, uri)
    out = str(tmp_path / "out")
    try:
        embed(uri, out, method="pca", params={"n_components": 2}, sample_size=50)
    except DimredError as exc:  # a typed error: fine, if nothing was committed
        assert not RunStore(out).committed(), exc
        return
    assert ref is not None and np.isfinite(ref).all(), "committed what the library cannot read"
    Y = open_output(out).read_array("embedding").astype(np.float64)
    expected = PCA(2).fit_transform(ref)
    scale = np.abs(expected).max()
    signs = np.sign(np.sum(Y * expected, axis=0))
    np.testing.assert_allclose(Y * signs, expected, atol=REL_TOL * scale)
