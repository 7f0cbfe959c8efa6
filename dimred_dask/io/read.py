"""Open a 2-D numeric array lazily from Zarr (v2/v3), .npy, Parquet or CSV at any allowed URI.

Everything returned is a dask array whose chunks are read where they are computed (on the
workers), so no data passes through the process that opens it.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import fsspec
import numpy as np

from ..errors import ChunkingError, InputError, InputTypeError, StoreError, storage_error
from .uris import Location, parse_uri

TARGET_CHUNK_BYTES = 64 * 2**20
TABLE_SUFFIXES = {".parquet": "parquet", ".pq": "parquet", ".csv": "csv"}


@dataclass
class InputArray:
    array: object  # dask.array.Array, (n, d), chunks (rows, d)
    location: Location
    format: str
    meta: dict = field(default_factory=dict)

    @property
    def shape(self):
        return self.array.shape


def plan_row_chunk(n: int, d: int, itemsize: int, base: int = 1,
                   target_bytes: int = TARGET_CHUNK_BYTES) -> int:
    """Rows per dask chunk: about ``target_bytes`` per chunk, a multiple of the stored chunk."""
    rows = max(1, target_bytes // max(1, d * itemsize))
    rows = max(base, (rows // base) * base)
    return int(min(max(n, 1), rows))


def _fs(loc: Location):
    try:
        return fsspec.core.url_to_fs(loc.url, **loc.storage_options)
    except ImportError as exc:
        raise StoreError(f"Cannot open {loc.url}: {exc}.",
                         "install the extra for that storage, e.g. pip install 'dimred-dask[s3]'.")


def _exists(loc: Location) -> bool:
    fs, path = _fs(loc)
    try:
        return fs.exists(path)
    except OSError as exc:
        raise storage_error(exc, f"Opening {loc.url}") from None


def detect_format(loc: Location) -> str:
    low = loc.url.lower().rstrip("/")
    if low.endswith(".npy"):
        return "npy"
    for suffix, fmt in TABLE_SUFFIXES.items():
        if low.endswith(suffix):
            return fmt
    return "zarr"


def open_input(uri, *, columns=None, storage_options=None, row_chunk: int | None = None,
               allow_1d: bool = False, role: str = "input") -> InputArray:
    """Open ``uri`` as a lazy 2-D dask array; refuse what cannot be embedded, reading no data.

    ``allow_1d``: a 1-D array (labels, targets) is returned as one column.
    """
    loc = parse_uri(uri, role="input", storage_options=storage_options)
    if not _exists(loc):
        raise InputError(f"The input {loc} does not exist.",
                         "check the path or URL (and AWS_ENDPOINT_URL for object storage).")
    fmt = detect_format(loc)
    if columns is not None and fmt not in ("parquet", "csv"):
        raise InputError(f"--columns applies to Parquet and CSV input; {loc} is {fmt}.",
                         "drop --columns, or select columns when writing the array.")
    opener = {"zarr": _open_zarr, "npy": _open_npy, "parquet": _open_table, "csv": _open_table}[fmt]
    arr, meta = opener(loc, columns=columns, fmt=fmt, row_chunk=row_chunk)
    if allow_1d and arr.ndim == 1:
        arr = arr[:, None]
    if arr.ndim != 2:
        raise InputError(f"The input {loc} is {arr.ndim}-D with shape {arr.shape}; methods need a "
                         "2-D array of samples x features.",
                         "reshape it to (n_samples, n_features) when writing, or pick another array.")
    kind = np.dtype(arr.dtype).kind
    if kind == "c":
        raise InputError(f"Complex data not supported: {loc} has dtype {arr.dtype}.",
                         "store the real part and the modulus as separate real columns.")
    if kind not in "fiub":
        raise InputTypeError(f"The input {loc} has dtype {arr.dtype}; methods need real numbers.",
                         "store a numeric dtype (float32/float64), or select numeric columns.")
    if arr.numblocks[1] != 1:  # irregular or split feature axis: one chunk across features
        arr = arr.rechunk({1: -1})
    return InputArray(arr, loc, fmt, {"format": fmt, "shape": list(arr.shape),
                                      "dtype": str(arr.dtype), **meta})


def _zarr_node(loc: Location):
    import zarr

    try:
        node = zarr.open(store=loc.url, mode="r", storage_options=loc.storage_options or None)
    except FileNotFoundError:
        raise InputError(f"No Zarr array or group at {loc.url}.",
                         "point --input at a .zarr folder, a .npy, .parquet or .csv file.") from None
    except PermissionError as exc:
        raise StoreError(f"Access to {loc.url} was denied ({exc}).", "check the credentials.") from None
    except Exception as exc:  # zarr raises several types for 'not zarr'
        raise InputError(f"{loc.url} is not a readable Zarr array or group ({type(exc).__name__}: "
                         f"{exc}).", "check that the path is a Zarr store.") from None
    if loc.fragment:
        try:
            node = node[loc.fragment]
        except (KeyError, TypeError):
            raise InputError(f"No array {loc.fragment!r} in the Zarr group {loc.url}.",
                             "list the group's arrays (zarr.open(...).tree()) and fix the #path.") from None
    if isinstance(node, zarr.Group):
        names = sorted(k for k, v in node.arrays())
        raise InputError(f"{loc.url} is a Zarr group, not an array; its arrays: {names or 'none'}.",
                         f"name one with {loc.url}#<array>, e.g. #{names[0] if names else 'data'}.")
    return node


def _raw_metadata(loc: Location) -> str:
    """The array's metadata document as text (v3 zarr.json or v2 .zarray), or ''."""
    fs, path = _fs(loc)
    base = path.rstrip("/") + (f"/{loc.fragment.strip('/')}" if loc.fragment else "")
    for name in ("zarr.json", ".zarray"):
        try:
            return fs.cat_file(f"{base}/{name}").decode("utf-8", "replace")
        except (FileNotFoundError, OSError):
            continue
    return ""


def _refuse_pickle(node, loc: Location) -> None:
    text = (str(node.metadata.to_dict()) if node is not None else _raw_metadata(loc)).lower()
    kind = np.dtype(node.dtype).kind if node is not None else ""
    if "pickle" in text or kind == "O" or '"|o"' in text:
        raise InputTypeError(f"The Zarr array {loc} uses an object dtype or a pickle codec; unpickling "
                         "would run code from the data.",
                         "rewrite the array with a numeric dtype (e.g. float32) and no object codec.")


def _open_zarr(loc: Location, *, columns, fmt, row_chunk):
    import dask.array as da

    _refuse_pickle(None, loc)  # from the raw metadata, before zarr would build any codec
    node = _zarr_node(loc)
    _refuse_pickle(node, loc)
    if node.ndim != 2:
        return da.from_zarr(node), {}
    n, d = node.shape
    rows = row_chunk or plan_row_chunk(n, d, node.dtype.itemsize, base=node.chunks[0])
    arr = da.from_zarr(node, chunks=(rows, d))  # whole rows per task, even if stored split
    return arr, {"zarr_format": node.metadata.zarr_format, "stored_chunks": list(node.chunks)}


class _NpyRows:
    """Row-range reader for a C-order .npy file: local files are memory-mapped, remote ones are
    read by byte range. Picklable (it carries a URL and options, never data)."""

    def __init__(self, loc: Location, shape, dtype, offset: int):
        self.loc, self.shape, self.dtype, self.offset = loc, tuple(shape), np.dtype(dtype), offset
        self.ndim = len(self.shape)

    def __getitem__(self, key):
        rows, cols = (key + (slice(None),))[:2] if isinstance(key, tuple) else (key, slice(None))
        start, stop, _ = rows.indices(self.shape[0])
        rowbytes = int(np.prod(self.shape[1:])) * self.dtype.itemsize
        if self.loc.is_local:
            mm = np.memmap(self.loc.url, dtype=self.dtype, mode="r", offset=self.offset,
                           shape=self.shape)
            block = np.array(mm[start:stop])
        else:
            fs, path = fsspec.core.url_to_fs(self.loc.url, **self.loc.storage_options)
            raw = fs.cat_file(path, start=self.offset + start * rowbytes,
                              end=self.offset + stop * rowbytes)
            block = np.frombuffer(raw, dtype=self.dtype).reshape((stop - start,) + self.shape[1:])
        return block[(slice(None), cols)] if self.ndim == 2 else block


def _open_npy(loc: Location, *, columns, fmt, row_chunk):
    import dask.array as da

    fs, path = _fs(loc)
    with fs.open(path, "rb") as f:
        try:
            version = np.lib.format.read_magic(f)
            read_header = (np.lib.format.read_array_header_1_0 if version == (1, 0)
                           else np.lib.format.read_array_header_2_0)
            shape, fortran, dtype = read_header(f)
        except ValueError as exc:
            raise InputError(f"{loc} is not a valid .npy file ({exc}).",
                             "write it with numpy.save.") from None
        offset = f.tell()
    if dtype.hasobject:
        raise InputTypeError(f"The .npy file {loc} holds Python objects (loading would unpickle).",
                         "save a numeric array instead.")
    if fortran and len(shape) > 1:
        raise InputError(f"The .npy file {loc} is in Fortran order; rows cannot be read in chunks.",
                         "save it with numpy.save(np.ascontiguousarray(X)).")
    if len(shape) != 2:
        return da.from_array(np.empty(shape, dtype)), {}
    rows = row_chunk or plan_row_chunk(shape[0], shape[1], dtype.itemsize)
    reader = _NpyRows(loc, shape, dtype, offset)
    arr = da.from_array(reader, chunks=(rows, shape[1]), asarray=False, fancy=False, lock=False,
                        name=f"npy-{abs(hash((loc.url, offset, shape, str(dtype))))}")
    return arr, {"memory_mapped": loc.is_local}


def _open_table(loc: Location, *, columns, fmt, row_chunk):
    import dask.dataframe as dd

    so = loc.storage_options or None
    try:
        if fmt == "parquet":
            df = dd.read_parquet(loc.url, storage_options=so)
        else:
            df = dd.read_csv(loc.url, storage_options=so, blocksize="64MB")
    except Exception as exc:
        raise InputError(f"Could not read {loc} as {fmt} ({type(exc).__name__}: {exc}).",
                         f"check that it is a valid {fmt} file.") from None
    available = list(df.columns)
    from pandas.api.types import is_complex_dtype, is_numeric_dtype

    numeric = [c for c in available
               if is_numeric_dtype(df[c].dtype) and not is_complex_dtype(df[c].dtype)]
    if columns is None:
        chosen = numeric
        if not chosen:
            raise InputTypeError(f"Methods need numbers; {loc} has no numeric columns "
                                 f"(columns: {available}).",
                             "convert the columns you want to numbers.")
    else:
        chosen = list(columns)
        missing = [c for c in chosen if c not in available]
        if missing:
            raise InputError(f"Columns {missing} are not in {loc}; it has {available}.",
                             "fix --columns.")
        bad = [c for c in chosen if c not in numeric]
        if bad:
            raise InputTypeError(f"Columns {bad} of {loc} are not numeric "
                             f"({', '.join(f'{c}: {df[c].dtype}' for c in bad)}).",
                             f"choose numeric columns, e.g. --columns {','.join(numeric[:4])}.")
    arr = df[chosen].to_dask_array(lengths=True)
    if any(np.isnan(c) for c in arr.chunks[0]):
        raise ChunkingError(f"Could not size the partitions of {loc}.", "re-write the table.")
    return arr, {"columns": chosen}
