"""Zarr arrays (v2 and v3, a group's array by ``#path``) read by row range, strictly: an absent
chunk object is an error naming it (never fill values, unless allowed), a chunk that does not
decode is named, and the chunk objects can be listed once and compared with the metadata."""

from __future__ import annotations

import numpy as np

from ..errors import InputError, InputTypeError, StoreError, is_storage_error, storage_error
from .base import fs_of as _fs
from .base import missing_chunks_error, plan_row_chunk, read_errors
from .raw_chunks import DAMAGED_FIX, RawRows, RawTiles, raw_layout, tile_layout
from .uris import Location

# rows of uncompressed local arrays are read from their chunk files (``io.raw_chunks``)
RAW_READS = True
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
    inner = (
        LocalStore(loc.url, read_only=True)
        if loc.is_local
        else FsspecStore.from_url(
            loc.url, storage_options=loc.storage_options or None, read_only=True
        )
    )
    return _STRICT(inner, str(loc), allow_missing)


def _zarr_node(loc: Location, allow_missing: bool = False):
    import zarr

    try:
        node = zarr.open(store=strict_store(loc, allow_missing), mode="r")
    except FileNotFoundError:
        raise InputError(
            f"No Zarr array or group at {loc.url}.",
            "point --input at a .zarr folder, a .npy, .parquet or .csv file.",
        ) from None
    except PermissionError as exc:
        raise StoreError(
            f"Access to {loc.url} was denied ({exc}).", "check the credentials."
        ) from None
    except InputError:
        raise
    except Exception as exc:  # zarr raises several types for 'not zarr'
        if is_storage_error(exc):
            raise storage_error(exc, f"Opening {loc.url}", location=loc) from None
        raise InputError(
            f"{loc.url} is not a readable Zarr array or group ({type(exc).__name__}: {exc}).",
            "check that the path is a Zarr store.",
        ) from None
    if loc.element:
        try:
            node = node[loc.element]
        except (KeyError, TypeError):
            raise InputError(
                f"No array {loc.element!r} in the Zarr group {loc.url}.",
                "list the group's arrays (zarr.open(...).tree()) and fix the #path.",
            ) from None
    if isinstance(node, zarr.Group):
        names = sorted(k for k, v in node.arrays())
        raise InputError(
            f"{loc.url} is a Zarr group, not an array; its arrays: {names or 'none'}.",
            f"name one with {loc.with_element('<array>')}, e.g. #{names[0] if names else 'data'}.",
        )
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
    base = path.rstrip("/") + (f"/{loc.element.strip('/')}" if loc.element else "")
    grid, _ = _object_grid(node)
    try:
        listed = fs.find(base)
    except Exception as exc:
        if is_storage_error(exc):
            raise storage_error(exc, f"Listing {loc}", location=loc) from None
        raise
    prefix = base.rstrip("/") + "/"
    present = {p[len(prefix) :] for p in listed if p.startswith(prefix)}
    missing = [
        key
        for key in (
            node.metadata.encode_chunk_key(c) for c in itertools.product(*(range(g) for g in grid))
        )
        if key not in present
    ]
    return {"chunk_objects": int(np.prod(grid)) if grid else 1, "missing": missing}


def _row_span(key, n: int) -> tuple[int, int]:
    """The first and one past the last row a read's key touches."""
    rows = key[0] if isinstance(key, tuple) and key else key
    if isinstance(rows, slice):
        start, stop, _ = rows.indices(n)
        return start, max(start + 1, stop)
    if rows is Ellipsis or rows is None or (isinstance(key, tuple) and not key):
        return 0, n
    idx = np.asarray(rows).ravel()
    if idx.size == 0:
        return 0, 1
    if idx.dtype == bool:
        idx = np.flatnonzero(idx)
    idx = np.where(idx < 0, idx + n, idx)
    return int(idx.min()), int(idx.max()) + 1


class _ZarrRows:
    """Row-range reader of a Zarr array whose failures name the chunk: an absent chunk object
    (StrictStore) or one that does not decode is an `InputError` with its key, never fill
    values or a codec's bare error. Picklable (the zarr array holds a store and a path)."""

    def __init__(self, node, where: str, location: Location | None = None):
        self.node, self.where, self.location = node, where, location
        self.shape, self.dtype, self.ndim = tuple(node.shape), node.dtype, node.ndim

    def __getitem__(self, key):
        with read_errors(self.location or self.where, lambda exc: self._decode_error(key, exc)):
            return np.asarray(self.node[key])

    def _decode_error(self, key, exc) -> InputError:
        """Find the stored object that fails (only on the failure path) and name it."""
        import itertools

        grid, extent = _object_grid(self.node)
        if not self.shape:  # a 0-d array: one chunk
            return InputError(
                f"Could not decode the Zarr array {self.where} ({type(exc).__name__}: {exc}).",
                DAMAGED_FIX,
            )
        start, stop = _row_span(key, self.shape[0])
        bad = None
        first, last = start // extent[0], max(start, stop - 1) // extent[0]
        for coords in itertools.product(range(first, last + 1), *(range(g) for g in grid[1:])):
            region = tuple(
                slice(c * e, min((c + 1) * e, s)) for c, e, s in zip(coords, extent, self.shape)
            )
            try:
                self.node[region]
            except Exception:
                bad = self.node.metadata.encode_chunk_key(coords)
                break
        what = f"chunk {bad!r}" if bad else f"rows {start}-{stop - 1}"
        return InputError(
            f"Could not decode {what} of the Zarr array {self.where} "
            f"({type(exc).__name__}: {exc}).",
            DAMAGED_FIX,
        )


class StoredArray(_ZarrRows):
    """A Zarr array a run wrote (its embedding, model, graph, checkpoints, a graph-cache
    entry), read strictly as an input is: an absent chunk is an error (never fill values), a
    chunk that does not decode is an `InputError` naming the array and the chunk, a failing
    storage a `StoreError` whose fix fits the kind of location. NumPy-style reads by slice
    (``a[...]``, ``a[lo:hi]``), by listed rows (``a.oindex[rows, :]``,
    `get_orthogonal_selection`); picklable (the zarr array holds a store and a path)."""

    def __init__(self, node, loc: Location):
        super().__init__(node, str(loc), loc)
        self.chunks = tuple(node.chunks)
        self.nchunks = int(node.nchunks)
        self.store = node.store

    def __getattr__(self, name):
        """The zarr array's metadata (``compressors``, ``attrs``, ``fill_value`` ...)."""
        if name.startswith("_") or "node" not in self.__dict__:
            raise AttributeError(name)
        return getattr(self.node, name)

    def get_orthogonal_selection(self, selection):
        with read_errors(self.location, lambda exc: self._decode_error(selection, exc)):
            return np.asarray(self.node.get_orthogonal_selection(selection))

    @property
    def oindex(self):
        return _OIndex(self)

    def to_dask(self):
        """A lazy dask array in the stored chunks, each read on the worker that runs it."""
        import dask.array as da

        return da.from_array(
            self, chunks=self.chunks, asarray=False, fancy=False, lock=False, name=False
        )


class _OIndex:
    def __init__(self, array: StoredArray):
        self.array = array

    def __getitem__(self, selection):
        selection = selection if isinstance(selection, tuple) else (selection,)
        return self.array.get_orthogonal_selection(selection)


def open_stored(loc: Location) -> StoredArray:
    """The array at ``loc`` (a run store's ``<store>/<name>``) as a `StoredArray`; refused
    (`InputError`) when there is none or it holds Python objects."""
    return StoredArray(_safe_node(loc), loc)


def _raw_metadata(loc: Location) -> str:
    """The array's metadata document as text (v3 zarr.json or v2 .zarray), or ''."""
    fs, path = _fs(loc)
    base = path.rstrip("/") + (f"/{loc.element.strip('/')}" if loc.element else "")
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
        raise InputTypeError(
            f"The Zarr array {loc} uses an object dtype or a pickle "
            "codec; unpickling "
            "would run code from the data.",
            "rewrite the array with a numeric dtype (e.g. float32) and no object codec.",
        )


def refuse_object_codecs(node, where: str) -> None:
    """Refuse an array decoded into Python objects by anything but zarr's text codecs: text
    (``vlen-utf8`` / ``vlen-bytes``, zarr's string dtype) passes; a pickle codec (or any other
    object codec) would build whatever the data says, so it is refused before any chunk is
    read."""
    text = str(node.metadata.to_dict()).lower()
    kind = np.dtype(node.dtype).kind
    if "pickle" in text or (kind == "O" and not ("vlen-utf8" in text or "vlen-bytes" in text)):
        raise InputTypeError(
            f"The Zarr array {where} holds Python objects decoded by a pickle or another "
            "object codec; decoding it would run code from the data.",
            "rewrite it with a numeric or a string dtype (anndata writes text as vlen-utf8).",
        )


def _safe_node(loc: Location, allow_missing: bool = False):
    """The strict zarr array at ``loc``, refused if it holds Python objects or a pickle codec:
    checked in the raw metadata before zarr would build any codec, then in zarr's."""
    _refuse_pickle(None, loc)
    node = _zarr_node(loc, allow_missing)
    _refuse_pickle(node, loc)
    return node


def open_zarr(loc: Location, opts):
    """(dask array, meta) of the Zarr array at ``loc`` (``#path`` in a group)."""
    import dask.array as da
    from dask.base import tokenize

    row_chunk, allow_missing = opts.row_chunk, opts.allow_missing
    node = _safe_node(loc, allow_missing)
    if node.ndim not in (1, 2):
        return da.empty(node.shape, dtype=node.dtype, chunks=-1), {}
    n, d = (tuple(node.shape) + (1,))[:2]
    rows = row_chunk or plan_row_chunk(
        n, d, node.dtype.itemsize, base=(node.shards or node.chunks)[0]
    )
    name = "zarr-" + tokenize(
        loc.url,
        loc.element,
        tuple(node.shape),
        str(node.dtype),
        node.metadata.to_dict(),
        allow_missing,
    )
    reader = _ZarrRows(node, str(loc))
    layout, why = raw_layout(node, loc) if RAW_READS else (None, "disabled")
    if layout is not None:  # uncompressed local chunk files: read them directly
        reader = RawRows(layout, reader, str(loc), allow_missing)
    arr = da.from_array(
        reader,
        chunks=(rows,) + tuple(node.shape[1:]),
        asarray=False,
        fancy=False,
        lock=False,
        name=name,
    )  # whole rows per task
    meta = {
        "zarr_format": node.metadata.zarr_format,
        "stored_chunks": list(node.chunks),
        "read_path": "chunk files" if layout is not None else f"zarr ({why})",
        "_reader": reader,
    }
    if opts.check_chunks:  # run by open_input once the shape and dtype are known to be right
        meta["_check"] = lambda: _check_inventory(node, loc, allow_missing)
    return arr, meta


def _check_inventory(node, loc: Location, allow_missing: bool) -> dict:
    inventory = chunk_inventory(node, loc)
    missing = inventory["missing"]
    if missing and not allow_missing:
        raise missing_chunks_error(str(loc), missing, inventory["chunk_objects"])
    return {
        "chunk_objects": inventory["chunk_objects"],
        "missing_chunks": len(missing),
        **({"missing_chunk_keys": missing[:20]} if missing else {}),
    }


def open_zarr_tiles(loc: Location):
    """(dask array, meta) of the 2-D Zarr array at ``loc`` in its stored chunks, both axes
    (a kernel or distance matrix in square chunks): read from the chunk files when they hold
    raw bytes on a local disk (`RawTiles`), else through zarr; strict either way (an absent
    chunk is named, never read as fill values)."""
    import dask.array as da

    node = _safe_node(loc)
    if node.ndim != 2:
        raise InputError(
            f"The matrix {loc} is {node.ndim}-D with shape {tuple(node.shape)}; a 2-D array "
            "was expected.",
            "point at the stored n x n matrix.",
        )
    reader = _ZarrRows(node, str(loc))
    layout, why = tile_layout(node, loc) if RAW_READS else (None, "disabled")
    if layout is not None:
        reader = RawTiles(layout, reader, str(loc))
    # a fresh name on every open: the store's matrix is rewritten by a later run
    arr = da.from_array(
        reader, chunks=tuple(node.chunks), asarray=False, fancy=False, lock=False, name=False
    )
    return arr, {"read_path": "chunk files" if layout is not None else f"zarr ({why})"}
