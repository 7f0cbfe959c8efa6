"""Open a 2-D numeric array lazily from Zarr (v2/v3), .npy, Parquet or CSV at any allowed URI.

Everything returned is a dask array whose chunks are read where they are computed (on the
workers), so no data passes through the process that opens it.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import fsspec
import numpy as np

from ..errors import (DimredError, InputError, InputTypeError, StoreError,
                      is_storage_error, storage_error)
from .._validation import float_dtype
from .tables import open_csv, open_parquet
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
    except Exception as exc:
        if is_storage_error(exc):
            raise storage_error(exc, f"Opening {loc.url}") from None
        raise


def detect_format(loc: Location) -> str:
    low = loc.url.lower().rstrip("/")
    if low.endswith(".npy"):
        return "npy"
    for suffix, fmt in TABLE_SUFFIXES.items():
        if low.endswith(suffix):
            return fmt
    return "zarr"


def open_input(uri, *, columns=None, storage_options=None, row_chunk: int | None = None,
               allow_1d: bool = False, role: str = "input", as_float: bool = False,
               check_chunks: bool = True, allow_missing_chunks: bool = False) -> InputArray:
    """Open ``uri`` as a lazy 2-D dask array; refuse what cannot be embedded, reading no data.

    ``allow_1d``: a 1-D array (labels, targets) is returned as one column.
    ``as_float``: integer and boolean data are read as the floating dtype every method computes
    in (`dimred_dask._validation.float_dtype`: float32 up to 16-bit integers, else float64);
    ``meta["stored_dtype"]`` keeps what was stored.
    ``check_chunks``: a Zarr array's chunk objects are listed once and an absent one is refused
    (`InputError` naming it) unless ``allow_missing_chunks``; reads refuse absent chunks either
    way, so a chunk lost after this check is never read as fill values.
    """
    loc = parse_uri(uri, role=role, storage_options=storage_options)
    if not _exists(loc):
        raise InputError(f"The {role} {loc} does not exist.",
                         "check the path or URL (and AWS_ENDPOINT_URL for object storage).")
    fmt = detect_format(loc)
    if columns is not None and fmt not in ("parquet", "csv"):
        raise InputError(f"--columns applies to Parquet and CSV input; {loc} is {fmt}.",
                         "drop --columns, or select columns when writing the array.")
    opener = {"zarr": _open_zarr, "npy": _open_npy, "parquet": _open_table, "csv": _open_table}[fmt]
    options = {"check_chunks": check_chunks, "allow_missing": allow_missing_chunks} \
        if fmt == "zarr" else {}
    arr, meta = opener(loc, columns=columns, fmt=fmt, row_chunk=row_chunk, **options)
    if allow_1d and arr.ndim == 1:
        arr = arr[:, None]
    if arr.ndim != 2:
        raise InputError(f"The {role} {loc} is {arr.ndim}-D with shape {arr.shape}; methods "
                         "need a 2-D array of samples x features.",
                         "reshape it to (n_samples, n_features) when writing, or pick another array.")
    kind = np.dtype(arr.dtype).kind
    if kind == "c":
        raise InputError(f"Complex data not supported: {loc} has dtype {arr.dtype}.",
                         "store the real part and the modulus as separate real columns.")
    if kind not in "fiub":
        raise InputTypeError(f"The {role} {loc} has dtype {arr.dtype}; methods need real numbers.",
                             "store a numeric dtype (float32/float64), or select numeric columns.")
    if arr.numblocks[1] != 1:  # irregular or split feature axis: one chunk across features
        arr = arr.rechunk({1: -1})
    sizes = arr.chunks[0]
    if len(set(sizes[:-1])) > 1 or sizes[-1] > sizes[0]:  # e.g. CSV partitions
        arr = arr.rechunk({0: max(sizes)})  # regular row chunks: outputs align with them
    check = meta.pop("_check", None)
    meta = {"format": fmt, "shape": list(arr.shape), "dtype": str(arr.dtype), **meta,
            **(check() if check else {})}
    if as_float and float_dtype(arr.dtype) != arr.dtype:
        arr = arr.astype(float_dtype(arr.dtype))
        meta.update(stored_dtype=meta["dtype"], dtype=str(arr.dtype))
    return InputArray(arr, loc, fmt, meta)


METADATA_KEYS = ("zarr.json", ".zarray", ".zattrs", ".zgroup", ".zmetadata")


def _strict_store_class():
    from zarr.storage import WrapperStore

    class StrictStore(WrapperStore):
        """Reads through the wrapped zarr store, but a chunk object that is absent raises
        `InputError` naming it instead of reading as the fill value (unless ``allow_missing``:
        chunks that zarr never wrote because they held only the fill value)."""

        def __init__(self, store, where: str = "", allow_missing: bool = False):
            super().__init__(store)
            self.where, self.allow_missing = where, allow_missing

        def _with_store(self, store):
            return type(self)(store, self.where, self.allow_missing)

        def _check(self, key: str, buf):
            if buf is None and not self.allow_missing and not key.endswith(METADATA_KEYS):
                raise missing_chunks_error(self.where, [key], None)
            return buf

        async def get(self, key, prototype, byte_range=None):
            return self._check(key, await self._store.get(key, prototype, byte_range))

        async def get_partial_values(self, prototype, key_ranges):
            key_ranges = list(key_ranges)
            bufs = await self._store.get_partial_values(prototype, key_ranges)
            return [self._check(k, b) for (k, _), b in zip(key_ranges, bufs)]

    StrictStore.__qualname__ = StrictStore.__name__
    return StrictStore


_STRICT = None


def strict_store(loc: Location, allow_missing: bool = False):
    """A read-only zarr store for ``loc`` whose absent chunks raise (see StrictStore)."""
    global _STRICT
    from zarr.storage import FsspecStore, LocalStore

    if _STRICT is None:
        _STRICT = _strict_store_class()
    inner = (LocalStore(loc.url, read_only=True) if loc.is_local else
             FsspecStore.from_url(loc.url, storage_options=loc.storage_options or None,
                                  read_only=True))
    return _STRICT(inner, str(loc), allow_missing)


def missing_chunks_error(where: str, keys: list[str], total: int | None) -> InputError:
    shown = ", ".join(keys[:10]) + (f" and {len(keys) - 10} more" if len(keys) > 10 else "")
    of = f" of its {total} chunk objects" if total else ""
    return InputError(
        f"The Zarr array {where} is incomplete: {len(keys)}{of} missing ({shown}). Reading "
        "them would give fill values, not data.",
        "restore the missing chunks (re-copy the array); or, if zarr left them out because "
        "they held only the fill value (write_empty_chunks=False), pass "
        "--allow-missing-chunks to read them as the fill value.")


def _zarr_node(loc: Location, allow_missing: bool = False):
    import zarr

    try:
        node = zarr.open(store=strict_store(loc, allow_missing), mode="r")
    except FileNotFoundError:
        raise InputError(f"No Zarr array or group at {loc.url}.",
                         "point --input at a .zarr folder, a .npy, .parquet or .csv file.") from None
    except PermissionError as exc:
        raise StoreError(f"Access to {loc.url} was denied ({exc}).", "check the credentials.") from None
    except InputError:
        raise
    except Exception as exc:  # zarr raises several types for 'not zarr'
        if is_storage_error(exc):
            raise storage_error(exc, f"Opening {loc.url}") from None
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


def _object_grid(node) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(shape of the grid of stored objects, extent of one object): shards if sharded."""
    extent = tuple(node.shards or node.chunks)
    return tuple(-(-s // c) for s, c in zip(node.shape, extent)), extent


def chunk_inventory(node, loc: Location) -> dict:
    """Compare the chunk objects the array's metadata implies with one listing of the store
    (one recursive LIST on object storage, not one request per chunk)."""
    import itertools

    fs, path = _fs(loc)
    base = path.rstrip("/") + (f"/{loc.fragment.strip('/')}" if loc.fragment else "")
    grid, _ = _object_grid(node)
    try:
        listed = fs.find(base)
    except Exception as exc:
        if is_storage_error(exc):
            raise storage_error(exc, f"Listing {loc}") from None
        raise
    prefix = base.rstrip("/") + "/"
    present = {p[len(prefix):] for p in listed if p.startswith(prefix)}
    missing = [key for key in (node.metadata.encode_chunk_key(c)
                               for c in itertools.product(*(range(g) for g in grid)))
               if key not in present]
    return {"chunk_objects": int(np.prod(grid)) if grid else 1, "missing": missing}


class _ZarrRows:
    """Row-range reader of a Zarr array whose failures name the chunk: an absent chunk object
    (StrictStore) or one that does not decode is an `InputError` with its key, never fill
    values or a codec's bare error. Picklable (the zarr array holds a store and a path)."""

    def __init__(self, node, where: str):
        self.node, self.where = node, where
        self.shape, self.dtype, self.ndim = tuple(node.shape), node.dtype, node.ndim

    def __getitem__(self, key):
        try:
            return np.asarray(self.node[key])
        except DimredError:
            raise
        except Exception as exc:
            if is_storage_error(exc):
                raise storage_error(exc, f"Reading {self.where}") from None
            raise self._decode_error(key, exc) from None

    def _decode_error(self, key, exc) -> InputError:
        """Find the stored object that fails (only on the failure path) and name it."""
        import itertools

        grid, extent = _object_grid(self.node)
        rows = key[0] if isinstance(key, tuple) else key
        start, stop, _ = rows.indices(self.shape[0])
        bad = None
        first, last = start // extent[0], max(start, stop - 1) // extent[0]
        for coords in itertools.product(range(first, last + 1), *(range(g) for g in grid[1:])):
            region = tuple(slice(c * e, min((c + 1) * e, s))
                           for c, e, s in zip(coords, extent, self.shape))
            try:
                self.node[region]
            except Exception:
                bad = self.node.metadata.encode_chunk_key(coords)
                break
        what = f"chunk {bad!r}" if bad else f"rows {start}-{stop - 1}"
        return InputError(f"Could not decode {what} of the Zarr array {self.where} "
                          f"({type(exc).__name__}: {exc}).",
                          "the chunk is damaged or truncated: re-copy or re-write the array from "
                          "its source.")


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


def _open_zarr(loc: Location, *, columns, fmt, row_chunk, check_chunks=True, allow_missing=False):
    import dask.array as da
    from dask.base import tokenize

    _refuse_pickle(None, loc)  # from the raw metadata, before zarr would build any codec
    node = _zarr_node(loc, allow_missing)
    _refuse_pickle(node, loc)
    if node.ndim not in (1, 2):
        return da.from_array(np.empty(node.shape, node.dtype)), {}
    n, d = (tuple(node.shape) + (1,))[:2]
    rows = row_chunk or plan_row_chunk(n, d, node.dtype.itemsize,
                                       base=(node.shards or node.chunks)[0])
    name = "zarr-" + tokenize(loc.url, loc.fragment, tuple(node.shape), str(node.dtype),
                              node.metadata.to_dict(), allow_missing)
    arr = da.from_array(_ZarrRows(node, str(loc)), chunks=(rows,) + tuple(node.shape[1:]),
                        asarray=False, fancy=False, lock=False, name=name)  # whole rows per task
    meta = {"zarr_format": node.metadata.zarr_format, "stored_chunks": list(node.chunks)}
    if check_chunks:  # run by open_input once the shape and dtype are known to be right
        meta["_check"] = lambda: _check_inventory(node, loc, allow_missing)
    return arr, meta


def _check_inventory(node, loc: Location, allow_missing: bool) -> dict:
    inventory = chunk_inventory(node, loc)
    missing = inventory["missing"]
    if missing and not allow_missing:
        raise missing_chunks_error(str(loc), missing, inventory["chunk_objects"])
    return {"chunk_objects": inventory["chunk_objects"], "missing_chunks": len(missing),
            **({"missing_chunk_keys": missing[:20]} if missing else {})}


class _NpyRows:
    """Row-range reader for a C-order .npy file: local files are memory-mapped, remote ones are
    read by byte range. Picklable (it carries a URL and options, never data)."""

    def __init__(self, loc: Location, shape, dtype, offset: int, fortran: bool = False):
        self.loc, self.shape, self.dtype, self.offset = loc, tuple(shape), np.dtype(dtype), offset
        self.ndim, self.fortran = len(self.shape), bool(fortran) and len(shape) == 2

    def __getitem__(self, key):
        rows, cols = (key + (slice(None),))[:2] if isinstance(key, tuple) else (key, slice(None))
        start, stop, _ = rows.indices(self.shape[0])
        try:
            block = self._read(start, stop)
        except Exception as exc:
            if is_storage_error(exc):
                raise storage_error(exc, f"Reading {self.loc}") from None
            raise InputError(f"Could not read rows {start}-{stop - 1} of the .npy file "
                             f"{self.loc} ({type(exc).__name__}: {exc}).",
                             "the file changed or was truncated after the run started: write "
                             "it again and re-run.") from None
        return block[(slice(None), cols)] if self.ndim == 2 else block

    def _read(self, start: int, stop: int) -> np.ndarray:
        rowbytes = int(np.prod(self.shape[1:])) * self.dtype.itemsize
        if self.loc.is_local:
            mm = np.memmap(self.loc.url, dtype=self.dtype, mode="r", offset=self.offset,
                           shape=self.shape, order="F" if self.fortran else "C")
            return np.ascontiguousarray(mm[start:stop])
        fs, path = fsspec.core.url_to_fs(self.loc.url, **self.loc.storage_options)
        if self.fortran:  # column-major: one byte range per column
            n, d, size = self.shape[0], self.shape[1], self.dtype.itemsize
            starts = [self.offset + (j * n + start) * size for j in range(d)]
            parts = fs.cat_ranges([path] * d, starts, [a + (stop - start) * size for a in starts])
            return np.ascontiguousarray(np.stack(
                [np.frombuffer(p, dtype=self.dtype) for p in parts], axis=1))
        raw = fs.cat_file(path, start=self.offset + start * rowbytes,
                          end=self.offset + stop * rowbytes)
        return np.frombuffer(raw, dtype=self.dtype).reshape((stop - start,) + self.shape[1:])


def _open_npy(loc: Location, *, columns, fmt, row_chunk):
    import dask.array as da
    from dask.base import tokenize

    fs, path = _fs(loc)
    try:
        with fs.open(path, "rb") as f:
            try:
                version = np.lib.format.read_magic(f)
                read_header = (np.lib.format.read_array_header_1_0 if version == (1, 0)
                               else np.lib.format.read_array_header_2_0)
                shape, fortran, dtype = read_header(f)
            except (ValueError, EOFError) as exc:
                raise InputError(f"{loc} is not a valid .npy file ({exc}).",
                                 "write it with numpy.save.") from None
            offset = f.tell()
        size = fs.size(path)
    except DimredError:
        raise
    except Exception as exc:
        if is_storage_error(exc):
            raise storage_error(exc, f"Opening {loc}") from None
        raise
    if dtype.hasobject:
        raise InputTypeError(f"The .npy file {loc} holds Python objects (loading would unpickle).",
                         "save a numeric array instead.")
    if fortran and len(shape) > 2:
        raise InputError(f"The .npy file {loc} is a {len(shape)}-D array in Fortran order.",
                         "save a 2-D array (samples x features).")
    expected = offset + int(np.prod(shape)) * dtype.itemsize
    if size < expected:
        raise InputError(f"The .npy file {loc} is truncated: its header promises {shape} "
                         f"{dtype} ({expected:,} bytes with the header), the file has {size:,}.",
                         "write the file again (an interrupted copy or save leaves it short).")
    if len(shape) not in (1, 2):
        return da.from_array(np.empty(shape, dtype)), {}
    n, d = (tuple(shape) + (1,))[:2]
    rows = row_chunk or plan_row_chunk(n, d, dtype.itemsize)
    reader = _NpyRows(loc, shape, dtype, offset, fortran)
    arr = da.from_array(reader, chunks=(rows,) + tuple(shape[1:]), asarray=False, fancy=False,
                        lock=False,
                        name="npy-" + tokenize(loc.url, offset, shape, str(dtype), fortran))
    return arr, {"memory_mapped": loc.is_local, **({"order": "F"} if fortran else {})}


def _open_table(loc: Location, *, columns, fmt, row_chunk):
    if fmt == "parquet":
        fs, path = _fs(loc)
        return open_parquet(loc, fs, path, columns, row_chunk, plan_row_chunk)
    return open_csv(loc, columns, row_chunk)
