"""What an input is made of on its storage, cheaply: every file or object under its location
with its size and its modification stamp, so that a run can tell, before it commits a stage,
whether its input changed since it was validated (`source_files`, `changed_sources`).

A local file is known by its size, its modification time in nanoseconds and its inode (a
file replaced by a rename gets a new one); an object by its size and its ETag (or its last
modification time where the store gives no ETag). A Zarr array is its folder (the
metadata document and every chunk object), an element of a Zarr store the element's
folder, a file of another format that file, a folder or glob of shards every shard. One
listing (one recursive LIST on object storage), no data read.
"""

from __future__ import annotations

import os

from ..errors import is_storage_error, storage_error
from .base import fs_of
from .shards import is_glob
from .uris import Location

__all__ = ["source_files", "changed_sources"]


def _local_stamp(st: os.stat_result) -> str:
    return f"{st.st_size}:{st.st_mtime_ns}:{st.st_ino}"


def _local_files(root: str) -> dict[str, str]:
    if not os.path.isdir(root):
        return {"": _local_stamp(os.stat(root))}
    out = {}
    for folder, dirs, files in os.walk(root):
        dirs.sort()
        for name in files:
            path = os.path.join(folder, name)
            try:
                out[os.path.relpath(path, root)] = _local_stamp(os.stat(path))
            except FileNotFoundError:  # removed while listed: absent, as it is now
                continue
    return out


def _remote_stamp(info: dict) -> str:
    tag = info.get("ETag") or info.get("etag") or info.get("LastModified") or info.get("mtime")
    return f"{info.get('size')}:{tag}"


def _remote_files(fs, path: str) -> dict[str, str]:
    found = fs.find(path, detail=True)
    if not found:  # a single object
        return {"": _remote_stamp(fs.info(path))}
    prefix = path.rstrip("/") + "/"
    return {
        (p[len(prefix) :] if p.startswith(prefix) else p): _remote_stamp(info)
        for p, info in found.items()
    }


def source_files(loc: Location, element_folder: bool = True) -> dict[str, str]:
    """Every file or object of the input at ``loc`` with its stamp (size and modification
    stamp), keyed by its path relative to the location (``""`` for a single file).

    Parameters
    ----------
    loc : Location
        The input. A glob lists its matches; a folder everything under it; the element of a
        Zarr store (``store.zarr#group/array``) the element's folder, when
        ``element_folder`` and it is one; a file (an ``.h5ad`` with an element included)
        the file.
    element_folder : bool, default True
        Narrow a Zarr store's listing to the element's folder.

    Returns
    -------
    dict
        ``{relative path: stamp}``; stamps are opaque strings, equal exactly when the file
        is unchanged (up to a rewrite that keeps its size, modification time and inode).

    Raises
    ------
    StoreError
        The storage failed or could not be reached.
    """
    fs, path = fs_of(loc)
    try:
        if is_glob(loc.url):
            out = {}
            for match in sorted(fs.glob(path)):
                sub = Location(match if loc.is_local else fs.unstrip_protocol(match))
                out.update({f"{match}/{k}".rstrip("/"): v for k, v in source_files(sub).items()})
            return out
        if element_folder and loc.element:
            inner = f"{path.rstrip('/')}/{loc.element.strip('/')}"
            if fs.isdir(inner):
                path = inner
        if loc.is_local:
            return _local_files(path)
        return _remote_files(fs, path)
    except FileNotFoundError:
        return {}
    except Exception as exc:
        if is_storage_error(exc):
            raise storage_error(exc, f"Listing {loc}", location=loc) from None
        raise


def changed_sources(before: dict, after: dict, limit: int = 5) -> list[str]:
    """What differs between two `source_files` listings, in words (at most ``limit`` files
    of each kind named); an empty list when they are equal."""
    gone = sorted(set(before) - set(after))
    new = sorted(set(after) - set(before))
    rewritten = sorted(k for k in set(before) & set(after) if before[k] != after[k])

    def names(keys):
        shown = ", ".join(repr(k or ".") for k in keys[:limit])
        return shown + (f" and {len(keys) - limit} more" if len(keys) > limit else "")

    out = []
    if rewritten:
        out.append(f"{len(rewritten)} file(s) rewritten ({names(rewritten)})")
    if gone:
        out.append(f"{len(gone)} file(s) removed ({names(gone)})")
    if new:
        out.append(f"{len(new)} file(s) added ({names(new)})")
    return out
