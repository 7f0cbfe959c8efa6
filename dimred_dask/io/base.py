"""What every reader shares: the planned row chunk and the filesystem of a location."""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass

import fsspec

from ..errors import DimredError, InputError, StoreError, is_storage_error, storage_error
from .uris import Location

TARGET_CHUNK_BYTES = 64 * 2**20


def plan_row_chunk(
    n: int, d: int, itemsize: int, base: int = 1, target_bytes: int = TARGET_CHUNK_BYTES
) -> int:
    """Rows per dask chunk: about ``target_bytes`` per chunk, a multiple of the stored chunk.

    Parameters
    ----------
    n : int
        The rows of the array.
    d : int
        Its columns (values per row).
    itemsize : int
        Bytes per value.
    base : int, default 1
        The stored chunk's rows: the result is a multiple of it (at least ``base``) unless
        the array has fewer rows.
    target_bytes : int, default TARGET_CHUNK_BYTES
        The bytes a chunk should hold (64 MiB).

    Returns
    -------
    int
        Rows per chunk, between 1 and max(``n``, 1).
    """
    rows = max(1, target_bytes // max(1, d * itemsize))
    rows = max(base, (rows // base) * base)
    return int(min(max(n, 1), rows))


def fs_of(loc: Location):
    """(filesystem, path) of ``loc``; a missing storage extra is a `StoreError` with its fix."""
    try:
        return fsspec.core.url_to_fs(loc.url, **loc.storage_options)
    except ImportError as exc:
        raise StoreError(
            f"Cannot open {loc.url}: {exc}.",
            "install the extra for that storage, e.g. pip install 'dimred-dask[s3]'.",
        )


@contextmanager
def read_errors(where, damaged, *, doing: str = "Reading", decoder_module: str | None = None):
    """The errors of reading rows of ``where``: our own errors pass; a failure of the storage
    (network, permissions, a vanished object) is the `StoreError` "``doing`` ``where``";
    anything else is the data itself, ``damaged(exc)`` (an `InputError` naming what to
    rewrite). ``decoder_module``: errors raised from that library's modules (its decoder's
    own OSErrors) count as damaged data, not storage."""
    try:
        yield
    except DimredError:
        raise
    except Exception as exc:
        foreign = decoder_module and type(exc).__module__.startswith(decoder_module)
        if is_storage_error(exc) and not foreign:
            located = where if isinstance(where, Location) else None
            raise storage_error(exc, f"{doing} {where}", location=located) from None
        raise damaged(exc) from None


def exists(loc: Location) -> bool:
    return _ask(loc, "exists")


def is_folder(loc: Location) -> bool:
    return _ask(loc, "isdir")


def _ask(loc: Location, question: str) -> bool:
    """``fs.<question>(path)`` of the location's filesystem; a storage failure is a
    `StoreError`."""
    fs, path = fs_of(loc)
    try:
        return getattr(fs, question)(path)
    except Exception as exc:
        if is_storage_error(exc):
            raise storage_error(exc, f"Opening {loc.url}", location=loc) from None
        raise


def row_range(key, n: int, d: int | None = None) -> tuple[int, int, object]:
    """(start, stop, column key) of a reader's ``[rows, cols]`` or ``[rows]`` key; the column
    key is ``slice(None)`` when it takes all ``d`` columns (dask's usual key)."""
    rows, cols = (tuple(key) + (slice(None),))[:2] if isinstance(key, tuple) else (key, slice(None))
    start, stop, _ = rows.indices(n)
    if d is not None and isinstance(cols, slice) and cols.indices(d) == (0, d, 1):
        cols = slice(None)
    return start, stop, cols


@dataclass(frozen=True)
class OpenOptions:
    """What `open_input` passes to every opener."""

    columns: tuple | None = None
    row_chunk: int | None = None
    check_chunks: bool = True
    allow_missing: bool = False
    allow_1d: bool = False  # labels, actions: a 1-D array (an obs column) is what is wanted
    role: str = "input"


def missing_chunks_error(where: str, keys: list[str], total: int | None) -> InputError:
    shown = ", ".join(keys[:10]) + (f" and {len(keys) - 10} more" if len(keys) > 10 else "")
    of = f" of its {total} chunk objects" if total else ""
    return InputError(
        f"The Zarr array {where} is incomplete: {len(keys)}{of} missing ({shown}). Reading "
        "them would give fill values, not data.",
        "restore the missing chunks (re-copy the array); or, if zarr left them out because "
        "they held only the fill value (write_empty_chunks=False), pass "
        "--allow-missing-chunks to read them as the fill value.",
    )
