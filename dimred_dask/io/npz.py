"""SciPy sparse ``.npz`` files (``scipy.sparse.save_npz``, CSR or CSC) read by row range.

A ``.npz`` is a zip archive of ``.npy`` members (``indptr``, ``indices``, ``data``, ``format``,
``shape``). The opener reads only the zip directory, the small ``format`` and ``shape`` members
and the three arrays' ``.npy`` headers; the tasks read the arrays:

- members stored uncompressed (``save_npz(..., compressed=False)``) are read by byte range:
  a row block reads exactly its slice of ``indptr``, ``indices`` and ``data`` (one ranged
  request each on object storage), whatever the file's size;
- members compressed with deflate (``save_npz``'s default) have no random access: a task
  inflates each member from its start up to the end of its rows (streaming, in bounded
  memory), so reading grows with (row blocks x size). Such files are allowed up to
  ``SCAN_MAX_BYTES`` of inflated arrays and refused above it with the fix (save with
  ``compressed=False``), as are CSC files above that size (scanned once per row block).

Other formats (COO, BSR, DIA ...) and ``.npz`` files of plain arrays (``numpy.savez``) are
refused with the conversion to make.
"""

from __future__ import annotations

import contextlib
import io
import struct
import zipfile

import numpy as np

from ..errors import DimredError, InputError, InputTypeError, is_storage_error, storage_error
from .base import TARGET_CHUNK_BYTES, fs_of, read_errors
from .sparse import (
    SCAN_MAX_BYTES,
    SparseRows,
    plan_sparse_rows,
    scan_limit_error,
    sparse_array,
    sparse_meta,
)
from .uris import Location

NAMES = ("indptr", "indices", "data")
INFLATE_BLOCK = 4 * 2**20


def _npy_header(zf, info) -> tuple[int, tuple, np.dtype]:
    """(header length, shape, dtype) of the .npy member ``info``; reads only its header."""
    with zf.open(info) as member:
        version = np.lib.format.read_magic(member)
        read = (
            np.lib.format.read_array_header_1_0
            if version == (1, 0)
            else np.lib.format.read_array_header_2_0
        )
        shape, _, dtype = read(member)
        return member.tell(), tuple(shape), dtype


def _data_start(handle, info) -> int:
    """Offset in the archive of a member's first byte (after its local file header)."""
    handle.seek(info.header_offset)
    head = handle.read(30)
    if len(head) != 30 or head[:4] != b"PK\x03\x04":
        raise zipfile.BadZipFile(f"no local file header for {info.filename}")
    name_len, extra_len = struct.unpack("<HH", head[26:30])
    return info.header_offset + 30 + name_len + extra_len


class NpzSource:
    """The three arrays of a sparse ``.npz``, opened per read. Picklable: the location and,
    per member, (name, stored?, offset of its values, dtype, length)."""

    def __init__(self, loc: Location, members: dict):
        self.loc, self.members, self.where = loc, members, str(loc)

    @contextlib.contextmanager
    def open(self):
        fs, path = fs_of(self.loc)
        stored = all(m[1] for m in self.members.values())
        if stored:
            yield tuple(
                _Stored(fs, path, self.loc.is_local, self.where, *self.members[k]) for k in NAMES
            )
            return
        with (
            fs.open(path, "rb", block_size=INFLATE_BLOCK, cache_type="readahead") as handle,
            zipfile.ZipFile(handle) as zf,
        ):
            members = [_Inflated(zf, self.where, *self.members[k]) for k in NAMES]
            try:
                yield tuple(members)
            finally:
                for m in members:
                    m.close()


class _Stored:
    """Slices of an uncompressed member, read by byte range."""

    def __init__(self, fs, path, local, where, name, _stored, offset, dtype, length):
        self.fs, self.path, self.local, self.where = fs, path, local, where
        self.name, self.offset, self.dtype, self.length = name, offset, np.dtype(dtype), length

    def __getitem__(self, key: slice):
        start, stop, _ = key.indices(self.length)
        count, size = max(0, stop - start), self.dtype.itemsize
        a = self.offset + start * size
        if self.local:
            with open(self.path, "rb") as fh:
                fh.seek(a)
                out = np.fromfile(fh, dtype=self.dtype, count=count)
        else:
            out = np.frombuffer(
                bytearray(self.fs.cat_file(self.path, start=a, end=a + count * size)), self.dtype
            )
        if len(out) != count:
            raise InputError(
                f"The .npz file {self.where} is truncated: its member "
                f"{self.name} ends before entry {start + len(out)}.",
                "write the file again (an interrupted copy leaves it short).",
            )
        return out


class _Inflated:
    """Slices of a deflated member, inflated from its start (forward reads continue)."""

    def __init__(self, zf, where, name, _stored, offset, dtype, length):
        self.zf, self.where, self.name = zf, where, name
        self.offset, self.dtype, self.length = offset, np.dtype(dtype), length
        self.member = None

    def __getitem__(self, key: slice):
        start, stop, _ = key.indices(self.length)
        count, size = max(0, stop - start), self.dtype.itemsize
        target = self.offset + start * size
        with read_errors(
            self.where,
            lambda exc: InputError(
                f"Could not inflate the member {self.name} of the .npz file {self.where} "
                f"({type(exc).__name__}: {exc}).",
                "the file is damaged: write it again with scipy.sparse.save_npz.",
            ),
        ):
            if self.member is None or self.member.tell() > target:
                self.close()
                self.member = self.zf.open(self.name)
            self.member.seek(target)
            raw = self.member.read(count * size)
        if len(raw) != count * size:
            raise InputError(
                f"The .npz file {self.where} is truncated: its member {self.name} ends early.",
                "write the file again.",
            )
        return np.frombuffer(bytearray(raw), self.dtype)

    def close(self):
        if self.member is not None:
            self.member.close()
            self.member = None


def _scan_header(loc: Location):
    """(format, shape, {name: member tuple}) from the zip directory and the .npy headers."""
    fs, path = fs_of(loc)
    with fs.open(path, "rb") as handle:
        try:
            zf = zipfile.ZipFile(handle)
        except zipfile.BadZipFile as exc:
            raise InputError(
                f"{loc} is not a valid .npz file ({exc}).", "write it with scipy.sparse.save_npz."
            ) from None
        with zf:
            infos = {i.filename: i for i in zf.infolist()}
            needed = {"format.npy", "shape.npy", *(f"{k}.npy" for k in NAMES)}
            if not needed <= set(infos):
                raise InputError(
                    f"{loc} is not a scipy.sparse .npz (members: "
                    f"{sorted(infos)[:10]}); CSR or CSC with indptr, indices "
                    "and data is expected.",
                    "save a sparse matrix with scipy.sparse.save_npz(path, "
                    "m.tocsr()), or a dense 2-D array with numpy.save(.npy).",
                )
            fmt = np.load(io.BytesIO(zf.read("format.npy")), allow_pickle=False).item()
            fmt = fmt.decode() if isinstance(fmt, bytes) else str(fmt)
            shape = tuple(
                int(s) for s in np.load(io.BytesIO(zf.read("shape.npy")), allow_pickle=False)
            )
            if fmt not in ("csr", "csc"):
                raise InputError(
                    f"The .npz file {loc} holds a {fmt.upper()} matrix; rows are "
                    "read from CSR (or, up to a size, CSC).",
                    "save it as CSR: scipy.sparse.save_npz(path, m.tocsr()).",
                )
            members = {k: _member(loc, handle, zf, infos[f"{k}.npy"]) for k in NAMES}
    return fmt, shape, members


def _member(loc, handle, zf, info) -> tuple:
    header, shape, dtype = _npy_header(zf, info)
    if dtype.hasobject or len(shape) != 1:
        raise InputTypeError(
            f"The member {info.filename} of {loc} is a {shape} {dtype} "
            "array, not the 1-D numeric array of a sparse matrix.",
            "write the file again with scipy.sparse.save_npz.",
        )
    if info.file_size < header + shape[0] * dtype.itemsize:
        raise InputError(
            f"The .npz file {loc} is damaged: its member {info.filename} is "
            f"shorter than its header says.",
            "write the file again.",
        )
    stored = info.compress_type == zipfile.ZIP_STORED
    offset = _data_start(handle, info) + header if stored else header
    return (info.filename, stored, offset, dtype, shape[0])


def open_npz(loc: Location, opts):
    """(dask array, meta) of a scipy.sparse ``.npz``; reads its directory and headers."""
    from dask.base import tokenize

    try:
        fmt, shape, members = _scan_header(loc)
    except DimredError:
        raise
    except Exception as exc:
        if is_storage_error(exc) and not isinstance(exc, zipfile.BadZipFile):
            raise storage_error(exc, f"Opening {loc}", location=loc) from None
        raise InputError(
            f"Could not read {loc} as a .npz file ({type(exc).__name__}: {exc}).",
            "write it with scipy.sparse.save_npz.",
        ) from None
    dtype, nnz = members["data"][3], members["data"][4]
    if (
        len(shape) != 2
        or members["indices"][4] != nnz
        or members["indptr"][4] != (shape[0] if fmt == "csr" else shape[1]) + 1
    ):
        raise InputError(
            f"The .npz file {loc} is inconsistent: shape {shape}, {nnz} values, "
            f"{members['indices'][4]} indices, {members['indptr'][4]} indptr "
            "entries.",
            "write it again with scipy.sparse.save_npz.",
        )
    entry = dtype.itemsize + members["indices"][3].itemsize
    inflated = sum(m[4] * m[3].itemsize for m in members.values())
    if not all(m[1] for m in members.values()) and inflated > SCAN_MAX_BYTES:
        raise scan_limit_error(
            str(loc),
            inflated,
            "compressed (deflate, without random access)",
            "save it uncompressed, whose rows are read by byte "
            "range: scipy.sparse.save_npz(path, m, compressed=False).",
        )
    if fmt == "csc" and nnz * entry > SCAN_MAX_BYTES:
        raise scan_limit_error(
            str(loc),
            nnz * entry,
            "stored by columns (CSC)",
            "save it as CSR: scipy.sparse.save_npz(path, m.tocsr(), compressed=False).",
        )
    reader = SparseRows(NpzSource(loc, members), shape, dtype, fmt, nnz)
    rows = opts.row_chunk or plan_sparse_rows(shape[0], nnz, entry, TARGET_CHUNK_BYTES)
    arr = sparse_array(reader, rows, "npz-" + tokenize(loc.url, shape, fmt, members))
    stored = all(m[1] for m in members.values())
    return arr, {**sparse_meta(shape, nnz, fmt), "compressed": not stored, "_reader": reader}
