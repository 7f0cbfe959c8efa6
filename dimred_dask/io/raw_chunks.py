"""Rows of a local, uncompressed Zarr array read straight from its chunk files.

Reading a chunk through zarr copies it several times (the file into a bytes object, that into
a buffer, the buffer into the output) into freshly allocated memory; on the benchmark machine
this made a cold read of an uncompressed array cost about 5x the system time of ``cat`` on
the same files, so a pass over data on local disk was bound by the read's CPU, not the disk.
For arrays whose chunk files are exactly the C-ordered bytes of the chunk (a layout fixed by
the metadata), `RawRows` reads the wanted rows of each chunk file with one ``os.preadv`` into
the output array: the bytes are copied once, by the kernel, or not at all (O_DIRECT, for
arrays too large for the page cache). Every other array (compressed, filtered, sharded,
chunked across columns or in chunks wider than the array, big-endian, object storage) is read
by zarr, and `raw_layout` says why not in ``reason``. `RawTiles` does the same for blocks of
a matrix stored in square chunks (a run's kernel or distance matrix, `tile_layout`).

Strict as the zarr path (``io.zarr_arrays``): an absent chunk file is an `InputError` naming
it (fill values only with ``allow_missing``), a chunk file of the wrong size is named as
damaged, and a failing disk is a `StoreError`.
"""

from __future__ import annotations

import errno
import os
import sys
import threading
from dataclasses import dataclass

import numpy as np

from ..errors import InputError
from .base import missing_chunks_error, read_errors, row_range

__all__ = ["RawLayout", "RawRows", "RawTiles", "TileLayout", "raw_layout", "tile_layout"]

# Whole chunks of an array larger than DIRECT_SHARE of the machine's memory are read with
# O_DIRECT: from the disk into the output without the page cache, which such an array cannot
# stay in anyway, and the kernel's copy out of the page cache costs system time that the
# pass's compute needs (bench/HISTORY.md, the read path).
# Smaller arrays are read through the page cache (a second pass finds them there).
DIRECT_READS = True
DIRECT_SHARE = 0.5
ALIGN = 4096
# Blocks are read into buffers this process keeps and hands out again once nothing refers to
# them any more (no array, view or task result): a fresh buffer of a block's size comes from
# the system as new pages, which the kernel zeroes on first touch, a system-time cost of the
# order of the read itself when the read bypasses the page cache. At most POOL_BUFFERS are
# kept, the least recently used dropped first; POOL_BUFFERS = 0 turns the reuse off.
POOL_BUFFERS = 4
# what to do about a chunk that cannot be read, on every read path
DAMAGED_FIX = (
    "the chunk is damaged or truncated: re-copy or re-write the array from its source (an "
    "array a run wrote, e.g. its kernel matrix: re-run the run that wrote that store with "
    "--overwrite)."
)


@dataclass(frozen=True)
class RawLayout:
    root: str  # the array's folder
    shape: tuple
    dtype: np.dtype
    chunk_rows: int
    keys: tuple  # the chunk key of each row chunk, in order ("c/5/0", "5.0", ...)
    fill_value: object


def _plain_bytes(node) -> str | None:
    """None when the chunk files of ``node`` hold the chunk's raw C-ordered bytes in the
    machine's byte order; else why not."""
    if node.shards is not None:
        return "sharded"
    if tuple(node.compressors or ()) or tuple(node.filters or ()):
        return "compressed or filtered"
    dtype = np.dtype(node.dtype)
    if dtype.kind not in "biuf":
        return f"dtype {dtype}"
    if node.metadata.zarr_format == 3:
        endian = getattr(getattr(node.serializer, "endian", None), "value", None)
        if dtype.itemsize > 1 and endian != ("little" if np.little_endian else "big"):
            return f"byte order {endian}"
    else:
        if getattr(node, "order", "C") != "C":
            return "Fortran order"
        if not dtype.isnative:
            return "byte order"
    return None


def _array_folder(loc) -> str:
    """The local folder of the array at ``loc`` (its ``#path`` in a group included)."""
    root = loc.url[len("file://") :] if loc.url.startswith("file://") else loc.url
    if loc.element:
        root = os.path.join(root, loc.element.strip("/"))
    return os.path.abspath(root)


def raw_layout(node, loc) -> tuple[RawLayout | None, str]:
    """(layout, '') when rows of the Zarr array ``node`` at ``loc`` can be read from its chunk
    files directly, else (None, the reason)."""
    if not loc.is_local:
        return None, "not a local path"
    if node.ndim not in (1, 2):
        return None, f"{node.ndim} dimensions"
    if node.ndim == 2 and node.chunks[1] < node.shape[1]:
        return None, "chunked across columns"
    if node.ndim == 2 and node.chunks[1] > node.shape[1]:  # a chunk file's rows are longer
        return None, "chunks wider than the array"
    why = _plain_bytes(node)
    if why:
        return None, why
    rows = int(node.chunks[0])
    n_chunks = -(-int(node.shape[0]) // rows) if node.shape[0] else 0
    tail = (0,) * (node.ndim - 1)
    keys = tuple(node.metadata.encode_chunk_key((i,) + tail) for i in range(n_chunks))
    return RawLayout(
        _array_folder(loc),
        tuple(int(s) for s in node.shape),
        np.dtype(node.dtype),
        rows,
        keys,
        node.fill_value,
    ), ""


class _ChunkFiles:
    """What the readers of chunk files share: the O_DIRECT decision, and a byte range of one
    chunk file read into a buffer, strictly. Picklable."""

    def __init__(self, layout, fallback, where: str, allow_missing: bool = False):
        self.layout, self.fallback, self.where = layout, fallback, where
        self.allow_missing = allow_missing
        self.shape, self.dtype, self.ndim = layout.shape, layout.dtype, len(layout.shape)
        self._use_direct = None

    def _direct(self) -> bool:
        """Whether this process reads with O_DIRECT (see DIRECT_SHARE), decided once."""
        if self._use_direct is None:
            try:
                import psutil

                memory = psutil.virtual_memory().total
            except ImportError:
                memory = None
            nbytes = int(np.prod(self.shape)) * self.dtype.itemsize
            self._use_direct = bool(
                DIRECT_READS
                and hasattr(os, "O_DIRECT")
                and memory
                and nbytes > DIRECT_SHARE * memory
            )
        return self._use_direct

    def __getstate__(self):
        return {**self.__dict__, "_use_direct": None}  # decided again where it is read

    def _read_chunk(self, key: str, dest: memoryview, offset: int, size: int, address: int) -> None:
        """Bytes ``offset:offset + len(dest)`` of the chunk file ``key`` (``size`` bytes in
        all) into ``dest``, which starts at the memory address ``address``."""
        path = os.path.join(self.layout.root, key)
        direct = self._direct() and not (offset % ALIGN or len(dest) % ALIGN or address % ALIGN)
        with read_errors(self.where, lambda exc: _damaged(key, self.where, exc)):
            self._read_file(key, path, dest, offset, size, direct)

    def _read_file(
        self, key: str, path: str, dest: memoryview, offset: int, size: int, direct: bool
    ):
        try:
            fd = _open(path, direct)
        except FileNotFoundError:
            if not self.allow_missing:
                raise missing_chunks_error(self.where, [key], None) from None
            fill = self.layout.fill_value
            np.frombuffer(dest, dtype=self.dtype)[...] = 0 if fill is None else fill
            return
        try:
            found = os.fstat(fd).st_size
            if found != size:
                raise InputError(
                    f"Could not decode chunk {key!r} of the Zarr array {self.where}: its file "
                    f"has {found} bytes, an uncompressed chunk of this array has {size}.",
                    DAMAGED_FIX,
                )
            done = 0
            while done < len(dest):
                got = os.preadv(fd, [dest[done:]], offset + done)
                if got <= 0:
                    raise InputError(
                        f"Could not read chunk {key!r} of the Zarr array "
                        f"{self.where}: it ended early.",
                        "re-copy the array.",
                    )
                done += got
                if direct and done < len(dest) and done % ALIGN:  # the rest unaligned
                    os.close(fd)
                    fd, direct = os.open(path, os.O_RDONLY), False
        finally:
            os.close(fd)


class RawRows(_ChunkFiles):
    """Row ranges of an array with a `RawLayout`, read with ``preadv`` into the output;
    any other key is read by ``fallback`` (the zarr reader). Picklable."""

    def __getitem__(self, key):
        d = self.shape[1] if self.ndim == 2 else None
        start, stop, cols = row_range(key, self.shape[0], d)
        rows = key[0] if isinstance(key, tuple) else key
        if cols != slice(None) or not isinstance(rows, slice) or rows.step not in (None, 1):
            return self.fallback[key]
        out = _aligned_empty((max(stop - start, 0),) + tuple(self.shape[1:]), self.dtype)
        self.read_into(out, start)
        return out

    def read_into(self, out: np.ndarray, start: int) -> None:
        lay = self.layout
        row_bytes = out.itemsize * (int(np.prod(lay.shape[1:])) if len(lay.shape) > 1 else 1)
        view = memoryview(out.reshape(-1).view(np.uint8))
        address = out.ctypes.data  # a local: the reader is shared by a worker's threads
        stop, pos = start + out.shape[0], start
        while pos < stop:
            i = pos // lay.chunk_rows
            lo = pos - i * lay.chunk_rows
            hi = min(stop, (i + 1) * lay.chunk_rows) - i * lay.chunk_rows
            dest = view[(pos - start) * row_bytes : (pos - start + hi - lo) * row_bytes]
            self._read_chunk(
                lay.keys[i],
                dest,
                lo * row_bytes,
                lay.chunk_rows * row_bytes,
                address + (pos - start) * row_bytes,
            )
            pos += hi - lo


@dataclass(frozen=True)
class TileLayout:
    root: str  # the array's folder
    shape: tuple  # (rows, columns)
    dtype: np.dtype
    chunks: tuple  # (rows, columns) of a stored chunk; edge chunks are stored whole
    keys: tuple  # keys[i][j]: the key of chunk (i, j)
    fill_value: object


def tile_layout(node, loc) -> tuple[TileLayout | None, str]:
    """(layout, '') when blocks of the 2-D Zarr array ``node`` at ``loc``, chunked along both
    axes (a kernel or distance matrix in square chunks), can be read from its chunk files
    directly, else (None, the reason)."""
    if not loc.is_local:
        return None, "not a local path"
    if node.ndim != 2:
        return None, f"{node.ndim} dimensions"
    why = _plain_bytes(node)
    if why:
        return None, why
    chunks = tuple(int(c) for c in node.chunks)
    grid = [-(-int(s) // c) if s else 0 for s, c in zip(node.shape, chunks)]
    encode = node.metadata.encode_chunk_key
    keys = tuple(tuple(encode((i, j)) for j in range(grid[1])) for i in range(grid[0]))
    return TileLayout(
        _array_folder(loc),
        tuple(int(s) for s in node.shape),
        np.dtype(node.dtype),
        chunks,
        keys,
        node.fill_value,
    ), ""


class RawTiles(_ChunkFiles):
    """Blocks ``[rows, columns]`` of an array with a `TileLayout`, read from the chunk files:
    the rows of a chunk are contiguous in its file, so a block's part in one chunk is one
    ``preadv`` straight into the output when it spans the chunk's full width and the output
    is that wide (a block of dask's chunks that are the stored ones, edge column excepted),
    else one ``preadv`` into a reused buffer and a copy of its columns. Any other key is read
    by ``fallback`` (the zarr reader). Picklable."""

    def __getitem__(self, key):
        key = key if isinstance(key, tuple) else (key,)
        key = key + (slice(None),) * (2 - len(key))
        if len(key) != 2 or not all(isinstance(k, slice) and k.step in (None, 1) for k in key):
            return self.fallback[key]
        (r0, r1, _), (c0, c1, _) = (k.indices(s) for k, s in zip(key, self.shape))
        out = _aligned_empty((max(r1 - r0, 0), max(c1 - c0, 0)), self.dtype)
        if out.size:
            self._read_block(out, r0, c0)
        return out

    def _read_block(self, out: np.ndarray, r0: int, c0: int) -> None:
        (R, C), item = self.layout.chunks, self.dtype.itemsize
        r1, c1 = r0 + out.shape[0], c0 + out.shape[1]
        size = R * C * item  # every chunk file, edge chunks included
        for i in range(r0 // R, (r1 - 1) // R + 1):
            lo, hi = max(r0, i * R), min(r1, (i + 1) * R)
            for j in range(c0 // C, (c1 - 1) // C + 1):
                a, b = max(c0, j * C), min(c1, (j + 1) * C)
                whole = b - a == C and out.shape[1] == C  # its rows are contiguous in both
                dest = out[lo - r0 : hi - r0] if whole else _aligned_empty((hi - lo, C), self.dtype)
                self._read_chunk(
                    self.layout.keys[i][j],
                    memoryview(dest.reshape(-1).view(np.uint8)),
                    (lo - i * R) * C * item,
                    size,
                    dest.ctypes.data,
                )
                if not whole:
                    out[lo - r0 : hi - r0, a - c0 : b - c0] = dest[:, a - j * C : b - j * C]


def _open(path: str, direct: bool) -> int:
    """A read-only descriptor of ``path``, with O_DIRECT when asked and the file system takes
    it (tmpfs and some network file systems refuse it: then a buffered one)."""
    if direct:
        try:
            return os.open(path, os.O_RDONLY | os.O_DIRECT)
        except OSError as exc:
            if exc.errno != errno.EINVAL:
                raise
    return os.open(path, os.O_RDONLY)


class _BufferPool:
    """Aligned byte buffers of this process, reused once unreferenced (see POOL_BUFFERS).

    A buffer is free when the pool's list holds its only reference: every array handed out is
    a view of it, and a view (or a view of a view) keeps its base alive, so a block still held
    anywhere (a task's result, a persisted chunk, the caller's copy) is never written over."""

    def __init__(self):
        self._lock = threading.Lock()
        self._buffers: list[np.ndarray] = []

    def take(self, nbytes: int) -> np.ndarray:
        size = nbytes + ALIGN
        with self._lock:
            for i in range(len(self._buffers)):
                # references: the list, ``raw`` and getrefcount's argument (not enumerate: its
                # reused result tuple would hold one more)
                raw = self._buffers[i]
                if raw.nbytes == size and sys.getrefcount(raw) == 3:
                    self._buffers.append(self._buffers.pop(i))  # most recently used last
                    return raw
            raw = np.empty(size, dtype=np.uint8)
            if POOL_BUFFERS > 0:
                self._buffers.append(raw)
                del self._buffers[:-POOL_BUFFERS]
            return raw

    def clear(self) -> None:
        with self._lock:
            self._buffers.clear()


_POOL = _BufferPool()


def _aligned_empty(shape: tuple, dtype: np.dtype) -> np.ndarray:
    """An uninitialised C-ordered array whose data starts on an ALIGN boundary (O_DIRECT
    reads need it), in a buffer of the pool when one of the size is free."""
    nbytes = int(np.prod(shape)) * np.dtype(dtype).itemsize
    raw = _POOL.take(nbytes)
    start = -raw.ctypes.data % ALIGN
    return raw[start : start + nbytes].view(dtype).reshape(shape)


def _damaged(key: str, where: str, exc: BaseException) -> InputError:
    return InputError(
        f"Could not read chunk {key!r} of the Zarr array {where} ({type(exc).__name__}: {exc}).",
        DAMAGED_FIX,
    )
