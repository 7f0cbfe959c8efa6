"""A run's store: a Zarr v3 group with the embedding, the model, the graph, the manifest,
the picture, per-stage commit markers, and ``_COMMITTED`` written last (docs/design.md section 5).

    <output>/embedding            (n, k), row chunks as the input
    <output>/model/<name>         the model's arrays
    <output>/manifest.json
    <output>/embedding.png
    <output>/_stages/<stage>.json a stage's marker: its fingerprint and what it wrote
    <output>/_COMMITTED           last; readers refuse an output without it
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import time
import uuid

import fsspec
import numpy as np

from ..errors import (
    OutputExistsError,
    StoreError,
    UncommittedOutputError,
    is_storage_error,
    storage_error,
)
from .stored_rows import StoredRows, model_chunks
from .uris import parse_store
from .zarr_arrays import open_stored

COMMITTED = "_COMMITTED"
MANIFEST = "manifest.json"
STAGES = "_stages"
STORE_ATTR = "dimred_dask_run"
LEASE = "_LEASE"
# Every top-level entry a run writes (the lease and its helper objects start with LEASE).
# --overwrite replaces a run store only when it holds nothing else.
RUN_ENTRIES = frozenset(
    {
        "zarr.json",
        "embedding",
        "model",
        "graph",
        "kernel",
        "checkpoints",
        "sketch",
        MANIFEST,
        "embedding.png",
        STAGES,
        COMMITTED,
        "steps",
    }
)  # a chain's earlier steps, each a run store of its own
ROOT_DOC = "zarr.json"
# zarr leaves out chunks that hold only the fill value unless told: every array written here
# stores all its chunks, so a count of stored chunks proves a write complete
ALL_CHUNKS = {"write_empty_chunks": True}


def _name(entry: str) -> str:
    return entry.rstrip("/").rsplit("/", 1)[-1]


def _inside(path: str, root: str) -> bool:
    """Whether ``path`` lies under ``root`` once symbolic links in both are resolved."""
    real_root, real = os.path.realpath(root), os.path.realpath(path)
    return real == real_root or real.startswith(real_root.rstrip(os.sep) + os.sep)


def _link_error(path: str, root: str) -> StoreError:
    return StoreError(
        f"{path} is, or lies behind, a symbolic link leading out of the run store "
        f"{root}; a run never writes or deletes through links.",
        "remove the link from the run store (or choose another output).",
    )


def _local_store_class():
    from zarr.storage import LocalStore

    class NoFollowLocalStore(LocalStore):
        """zarr's LocalStore that never writes or deletes through a symbolic link: a key whose
        folder resolves outside the store, or that is itself a link, is refused."""

        def _guard(self, key: str) -> str:
            path = os.path.join(str(self.root), key)
            if os.path.islink(path) or not _inside(os.path.dirname(path), str(self.root)):
                raise _link_error(path, str(self.root))
            return path

        async def _set(self, key, value, exclusive=False):
            self._guard(key)
            return await super()._set(key, value, exclusive=exclusive)

        async def delete(self, key):
            self._guard(key)
            return await super().delete(key)

        async def delete_dir(self, prefix):
            self._guard(prefix.rstrip("/"))
            return await super().delete_dir(prefix)

    NoFollowLocalStore.__qualname__ = NoFollowLocalStore.__name__
    return NoFollowLocalStore


_NOFOLLOW = None


def nofollow_local_store(root: str, *, read_only: bool = False):
    """A zarr store on the local folder ``root`` that refuses writes through symbolic links."""
    global _NOFOLLOW
    if _NOFOLLOW is None:
        _NOFOLLOW = _local_store_class()
    return _NOFOLLOW(root, read_only=read_only)


class RunStore:
    """Reads and writes one run's output. Holds a URL and options only: cheap to pickle."""

    def __init__(self, uri, *, storage_options: dict | None = None, role: str = "output"):
        self.location = parse_store(uri, role=role, storage_options=storage_options)
        self.fs, self.root = fsspec.core.url_to_fs(
            self.location.url, **self.location.storage_options
        )

    @property
    def url(self) -> str:
        """The store's location in canonical form (`Location`: parsed again, the same store;
        a local path with ``#`` in its name is written ``file://...%23...``)."""
        return str(self.location)

    def array_url(self, name: str) -> str:
        """The URL of the array ``name`` in this store, for the input readers (`open_input`,
        `open_matrix`) with ``storage_options=self.location.storage_options``."""
        return str(self.location.child(name))

    def _path(self, name: str) -> str:
        return f"{self.root.rstrip('/')}/{name}"

    @contextlib.contextmanager
    def _storage(self, doing: str):
        """A failure of the storage under this store (unreachable, denied, a disk full) as
        the `StoreError` whose fix fits the kind of location; absent paths pass as they are."""
        try:
            yield
        except (FileNotFoundError, NotADirectoryError):
            raise
        except StoreError:
            raise
        except Exception as exc:
            if not is_storage_error(exc):
                raise
            raise storage_error(exc, f"{doing} {self.url}", location=self.location) from None

    # ---- state -----------------------------------------------------------------------------
    def _entries(self) -> list[str]:
        try:
            with self._storage("Listing"):
                listed = self.fs.ls(self.root, detail=False)
        except (FileNotFoundError, NotADirectoryError):
            return []
        return [e for e in listed if not _name(e).startswith(LEASE)]

    def exists(self) -> bool:
        """Whether the location holds anything but a lease."""
        if (
            self.location.is_local
            and os.path.lexists(self.root)
            and not (os.path.isdir(self.root) and not os.path.islink(self.root))
        ):
            return True  # a file, or a link: something is there
        return bool(self._entries())

    def chunk_count(self, name: str) -> int:
        """Stored chunk objects of the array ``name`` (Zarr v3 keys under ``<name>/c/``)."""
        try:
            with self._storage("Listing"):
                return len(self.fs.find(self._path(f"{name}/c")))
        except FileNotFoundError:
            return 0

    def committed(self) -> bool:
        with self._storage("Reading"):
            return self.fs.exists(self._path(COMMITTED))

    def is_run_store(self) -> bool:
        try:
            return STORE_ATTR in self.read_json(ROOT_DOC).get("attributes", {})
        except (FileNotFoundError, NotADirectoryError, ValueError, KeyError, AttributeError):
            return False

    def symlinks(self, limit: int = 5) -> list[str]:
        """Symbolic links at or inside a local run store (the root included), at most ``limit``.
        Object storage has none."""
        if not self.location.is_local:
            return []
        if os.path.islink(self.root):
            return [self.root]
        found = []
        for folder, dirs, files in os.walk(self.root):  # never descends into linked folders
            for name in dirs + files:
                path = os.path.join(folder, name)
                if os.path.islink(path):
                    found.append(f"{path} -> {os.readlink(path)}")
                    if len(found) >= limit:
                        return found
        return found

    def foreign_entries(self) -> list[str]:
        """Top-level entries that no run writes (a user's files put into the store)."""
        return sorted(n for n in map(_name, self._entries()) if n not in RUN_ENTRIES)

    def check_writable(self, overwrite: bool, *, committed_ok: bool = False) -> str:
        """Say what writing here would do; raise `OutputExistsError` if it is not allowed.

        Returns "new", "resume" (an unfinished run of ours: committed stages are reused) or
        "overwrite". Nothing is written or deleted here. A run writes only into a new
        location or into a run store of this project (its ``zarr.json`` carries the run
        attribute): never into someone else's data, never through a symbolic link, and
        ``overwrite`` replaces a run store only if it holds nothing a run does not write.
        ``committed_ok``: a committed store is resumed (its stages reused) rather than refused:
        a chain's own intermediate step.
        """
        if self.location.is_local and os.path.islink(self.root):
            raise OutputExistsError(
                f"The output {self.url} is a symbolic link (to {os.readlink(self.root)}); a run "
                "never writes or deletes through links.",
                "give the path of a new folder (or of a run store itself), not a link to it.",
            )
        if not self.exists():
            return "new"
        if self.location.is_local and not os.path.isdir(self.root):
            raise OutputExistsError(
                f"The output {self.url} is an existing file, not a run store.",
                "choose a new folder for the output.",
            )
        if not self.is_run_store():
            raise OutputExistsError(
                f"The output {self.url} exists and is not a dimred-dask run store (no "
                f"{ROOT_DOC} with the run attribute); refusing to write into, or delete, "
                "someone else's data"
                + (" (--overwrite replaces only run stores)." if overwrite else "."),
                "choose a new or empty location for the output.",
            )
        links = self.symlinks()
        if links:
            raise OutputExistsError(
                f"The run store {self.url} contains symbolic links ({'; '.join(links)}); a run "
                "never writes or deletes through links.",
                "remove the links, or choose another output.",
            )
        if not overwrite:
            if self.committed() and not committed_ok:
                raise OutputExistsError(
                    f"The output {self.url} holds a committed run already.",
                    "pass --overwrite to replace it, or choose another output.",
                )
            return "resume"
        foreign = self.foreign_entries()
        if foreign:
            raise OutputExistsError(
                f"The run store {self.url} also holds {foreign[:10]}, which no run writes; "
                "--overwrite would delete them.",
                "move those out of the run store first, or choose another output.",
            )
        return "overwrite"

    def check_room(self, need_bytes: int = 0, *, what: str = "the run's results") -> None:
        """Refuse, before anything is written, an output the run could not write: on a local
        disk a folder that is read-only, not writable for this user or without
        ``need_bytes`` free; on object storage an endpoint that does not answer, a missing
        bucket or a denied write (a probe object ``_LEASE.probe-*`` written and removed in
        the output's own prefix). ``what``: what the bytes are, for the message."""
        if self.location.is_local:
            self._check_local_room(need_bytes, what)
        elif self.location.scheme in ("s3", "s3a"):
            self._check_remote_room()

    def _check_local_room(self, need: int, what: str) -> None:
        if os.path.lexists(self.root) and not os.path.isdir(self.root):
            return  # something else is there: check_writable says what
        folder = self.root
        while not os.path.lexists(folder) and os.path.dirname(folder) != folder:
            folder = os.path.dirname(folder)
        where = f"The output {self.url}"
        if not os.path.isdir(folder):
            raise StoreError(
                f"{where} cannot be made: {folder} is a file, not a folder.",
                "choose an output whose parent is a folder.",
            )
        st = os.statvfs(folder)
        if st.f_flag & getattr(os, "ST_RDONLY", 1):
            raise StoreError(
                f"{where} is on a read-only filesystem ({folder}).",
                "choose an output on a writable disk (or mount this one read-write).",
            )
        if not os.access(folder, os.W_OK | os.X_OK):
            raise StoreError(
                f"{where} cannot be written: permission denied on {folder}.",
                "give this user write access to that folder (ls -ld shows who may write), or "
                "choose another output.",
            )
        free = st.f_bavail * st.f_frsize
        if need > free:
            raise StoreError(
                f"{where} needs about {_size(need)} for {what}; the disk of {folder} has "
                f"{_size(free)} free.",
                "free space on that disk (df -h shows it) or choose an output on another disk.",
            )

    def _check_remote_room(self) -> None:
        import socket
        from urllib.parse import urlsplit

        endpoint = (self.location.storage_options.get("client_kwargs") or {}).get("endpoint_url")
        if endpoint:  # a quick answer, not the retries' half minute
            parts = urlsplit(endpoint)
            port = parts.port or (443 if parts.scheme == "https" else 80)
            try:
                socket.create_connection((parts.hostname, port), timeout=5).close()
            except OSError as exc:
                raise StoreError(
                    f"The output {self.url}: could not reach the storage endpoint {endpoint} "
                    f"({type(exc).__name__}: {exc}).",
                    "check the endpoint (AWS_ENDPOINT_URL), that the server is up and "
                    "reachable from this machine and the workers, then re-run.",
                ) from None
        probe = self._path(f"{LEASE}.probe-{uuid.uuid4().hex}")
        try:
            with self.fs.open(probe, "wb") as f:
                f.write(b"")
            self.fs.rm_file(probe)
        except Exception as exc:
            if not is_storage_error(exc):
                raise
            raise storage_error(
                exc, f"Writing to the output {self.url}", location=self.location
            ) from None

    def remove(self, name: str) -> None:
        """Delete the entry ``name`` of this store (a folder with what is in it). Local: a
        symbolic link is removed itself, never followed; a path resolving outside is refused."""
        path = self._path(name)
        if not self.location.is_local:
            try:
                self.fs.rm(path, recursive=True)
            except FileNotFoundError:
                pass
            return
        if os.path.islink(path):
            os.unlink(path)
        elif not os.path.lexists(path):
            return
        elif not _inside(path, self.root):
            raise _link_error(path, self.root)
        elif os.path.isdir(path):
            shutil.rmtree(path)  # removes links inside as links, never what they point to
        else:
            os.unlink(path)

    def prepare(self, mode: str, attrs: dict, keep: tuple = ()) -> None:
        """Make the location this run's store: in ``overwrite`` mode, remove what an earlier
        run wrote (`RUN_ENTRIES`, never anything else) except the entries ``keep`` (written
        by this run already); record ``attrs``."""
        import zarr

        if mode == "overwrite":  # what a run writes, never anything else; the root doc last
            self.check_writable(True)
            names = sorted(
                set(map(_name, self._entries())) & RUN_ENTRIES - set(keep),
                key=lambda n: n == ROOT_DOC,
            )
            for name in names:
                self.remove(name)
        if mode == "resume":
            return
        g = zarr.open_group(
            store=self._zarr_store(), mode="a", zarr_format=3, storage_options=self._zarr_options()
        )
        g.attrs.update({STORE_ATTR: attrs})

    # ---- arrays ----------------------------------------------------------------------------
    def _zarr_store(self, read_only: bool = False):
        if self.location.is_local:
            return nofollow_local_store(self.root, read_only=read_only)
        return self.url

    def _zarr_options(self):
        return None if self.location.is_local else (self.location.storage_options or None)

    def _group(self, mode="a"):
        import zarr

        return zarr.open_group(
            store=self._zarr_store(read_only=mode == "r"),
            mode=mode,
            zarr_format=3,
            storage_options=self._zarr_options(),
        )

    def write_array(self, name: str, value) -> None:
        """A small array, or a model's (row chunks of `stored_rows.MODEL_CHUNK_BYTES`, so a
        transform reads the rows it needs). A dask array is written by the workers, chunk by
        chunk, never passing through this process."""
        lazy = hasattr(value, "dask") and hasattr(value, "chunks")
        if not lazy:
            value = np.asarray(value)
        chunks = model_chunks(value.shape, value.dtype)
        arr = self._group().create_array(
            name,
            shape=value.shape,
            dtype=value.dtype,
            chunks=chunks,
            overwrite=True,
            config=ALL_CHUNKS,
        )
        if not lazy:
            arr[...] = value
            return
        import dask.array as da

        from .._compute import compute

        target = value.rechunk(chunks) if chunks else value
        compute(da.store(target, arr, lock=False, compute=False), stage=f"write {name}")

    def create_array(self, name: str, shape, chunks, dtype, compressors="auto"):
        """An array every chunk of which is stored when written, even one holding only the
        fill value: the stage markers count stored chunks to prove a write complete.
        ``compressors``: zarr's default, or None for raw chunks (data that does not compress,
        read back soon)."""
        return self._group().create_array(
            name,
            shape=tuple(shape),
            chunks=tuple(chunks),
            dtype=dtype,
            overwrite=True,
            config=ALL_CHUNKS,
            compressors=compressors,
        )

    def open_array(self, name: str, *, writable: bool = False):
        """The stored array ``name``: a `StoredArray` read strictly (an absent or damaged
        chunk is an error naming the array and the chunk, never fill values); with
        ``writable``, the zarr array itself, for a task writing its part of an array the
        stage created."""
        if writable:
            return self._group("a")[name]
        return open_stored(self.location.child(name))

    def read_array(self, name: str) -> np.ndarray:
        return self.open_array(name)[...]

    def write_attrs(self, name: str, attrs: dict) -> None:
        """Set JSON attributes on the group ``name`` (created if missing)."""
        g = self._group().require_group(name)
        g.attrs.update(json.loads(json.dumps(attrs, default=_jsonable)))

    def read_attrs(self, name: str) -> dict:
        return dict(self._group("r")[name].attrs)

    def read_group(self, name: str, lazy=()) -> dict:
        """The group's arrays: in memory, except those named in ``lazy`` (of at least one
        dimension), which stay in the store as `StoredRows`."""
        g = self._group("r")[name]
        out = {}
        for key, _ in g.arrays():
            arr = self.open_array(f"{name}/{key}")
            out[key] = StoredRows(arr) if key in lazy and arr.ndim else arr[...]
        return out

    # ---- files -----------------------------------------------------------------------------
    def write_bytes(self, name: str, data: bytes) -> None:
        """Write a small file; locally into a temporary name then renamed over the target, so a
        symbolic link in its place is replaced, never written through."""
        path = self._path(name)
        parent = path.rsplit("/", 1)[0]
        self.fs.makedirs(parent, exist_ok=True)
        if not self.location.is_local:
            with self.fs.open(path, "wb") as f:
                f.write(data)
            return
        if not _inside(parent, self.root):
            raise _link_error(path, self.root)
        tmp = f"{parent}/.{_name(path)}.{uuid.uuid4().hex}.partial"
        fd = os.open(
            tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o644
        )
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.replace(tmp, path)
        except BaseException:
            if os.path.lexists(tmp):
                os.unlink(tmp)
            raise

    def read_bytes(self, name: str) -> bytes:
        """A small file of the store; absent: `FileNotFoundError`; a failing storage: a
        `StoreError` whose fix fits the kind of location."""
        try:
            with self.fs.open(self._path(name), "rb") as f:
                return f.read()
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
            raise FileNotFoundError(self._path(name)) from None
        except OSError as exc:
            raise storage_error(
                exc, f"Reading {self.location.child(name)}", location=self.location
            ) from None

    def write_json(self, name: str, obj) -> None:
        self.write_bytes(
            name, json.dumps(obj, indent=2, sort_keys=True, default=_jsonable).encode()
        )

    def read_json(self, name: str):
        return json.loads(self.read_bytes(name))

    # ---- stages and commit -----------------------------------------------------------------
    def stage_marker(self, stage: str) -> dict | None:
        """The stage's marker; None when absent or not readable JSON (a marker cut short:
        the stage is redone)."""
        try:
            marker = self.read_json(f"{STAGES}/{stage}.json")
        except (FileNotFoundError, ValueError):
            return None
        return marker if isinstance(marker, dict) else None

    def mark_stage(self, stage: str, fingerprint: str, info: dict, *, guard) -> None:
        """Commit ``stage``: its marker, written once ``guard()`` (the run's check that it
        still holds the lease and reads the input it validated; None where no run is
        concerned, e.g. a graph-cache entry) has passed."""
        if guard is not None:
            guard()
        self.write_json(
            f"{STAGES}/{stage}.json",
            {"stage": stage, "fingerprint": fingerprint, "time": time.time(), **info},
        )

    def commit(self, manifest: dict, *, guard) -> None:
        """Write the manifest, then ``_COMMITTED``, once ``guard()`` has passed (see
        `mark_stage`)."""
        if guard is not None:
            guard()
        self.write_json(MANIFEST, manifest)
        self.write_json(
            COMMITTED, {"fingerprint": manifest.get("fingerprint"), "time": time.time()}
        )

    def size(self, name: str) -> int:
        """Bytes stored under the entry ``name`` (0 when absent)."""
        try:
            with self._storage("Listing"):
                return int(self.fs.du(self._path(name)))
        except (FileNotFoundError, NotADirectoryError):
            return 0

    def stages_done(self) -> list[dict]:
        """The markers of the committed stages (name, fingerprint, time), oldest first."""
        try:
            names = self.fs.ls(self._path(STAGES), detail=False)
        except (FileNotFoundError, NotADirectoryError):
            return []
        out = []
        for name in names:
            if name.endswith(".json"):
                try:
                    out.append(self.read_json(f"{STAGES}/{_name(name)}"))
                except (OSError, ValueError):
                    continue
        return sorted(out, key=lambda m: m.get("time", 0))


def _size(n: int) -> str:
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= scale:
            return f"{n / scale:,.1f} {unit}"
    return f"{n} bytes"


def _jsonable(o):
    if isinstance(o, np.generic):
        return o.item()
    if isinstance(o, np.ndarray):
        return o.tolist()
    return str(o)


def open_run_store(uri, *, storage_options: dict | None = None) -> RunStore:
    """Open a run's store, finished or not (`open_output` also requires ``_COMMITTED``).

    Parameters
    ----------
    uri : str, os.PathLike or Location
        The run's output location (`parse_store`).
    storage_options : dict or None, default None
        fsspec options of the storage, over those of the environment.

    Returns
    -------
    RunStore
        The store.

    Raises
    ------
    StoreError
        Nothing is at ``uri``, or it is not a dimred-dask run store.
    """
    store = RunStore(uri, storage_options=storage_options, role="run store")
    if not store.exists():
        raise StoreError(f"No run output at {store.url}.", "check the path.")
    if not store.is_run_store():
        raise StoreError(
            f"{store.url} is not a dimred-dask run store (no {ROOT_DOC} with the "
            "run attribute); it reads the outputs of `dimred-dask run`.",
            "give the --output of a run.",
        )
    return store


def open_output(uri, *, storage_options: dict | None = None) -> RunStore:
    """Open a finished run's store for reading.

    Parameters
    ----------
    uri : str, os.PathLike or Location
        The run's output location (`parse_uri`).
    storage_options : dict or None, default None
        fsspec options of the storage, over those of the environment.

    Returns
    -------
    RunStore
        The store.

    Raises
    ------
    InputError
        ``uri`` is not an allowed location.
    StoreError
        Nothing is at ``uri``, or it is not a dimred-dask run store.
    UncommittedOutputError
        The store has no ``_COMMITTED`` marker: its run did not finish.
    """
    store = open_run_store(uri, storage_options=storage_options)
    if not store.committed():
        raise UncommittedOutputError(
            f"The output {store.url} has no {COMMITTED} marker: its run did not finish, so its "
            "contents may be partial.",
            "run the same command again to finish it (committed stages are reused).",
        )
    return store


def save_array(
    arr,
    uri,
    *,
    overwrite: bool = False,
    storage_options: dict | None = None,
    chunks=None,
    compressors="auto",
) -> str:
    """Write a dask or NumPy array to a Zarr v3 array at ``uri``.

    A dask array is computed and written chunk by chunk by the workers (the local threaded
    scheduler without a client); a NumPy array is wrapped in one first. Every chunk is
    stored, even one that holds only the fill value, so that a reader can tell a complete
    array from a damaged one. The Zarr chunk shape is the dask array's first chunk.

    Parameters
    ----------
    arr : array-like or dask array
        The array.
    uri : str, os.PathLike or Location
        Where the Zarr array goes (`parse_uri`).
    overwrite : bool, default False
        Replace what is at ``uri``.
    storage_options : dict or None, default None
        fsspec options of the storage, over those of the environment.
    chunks : tuple, int, str or None, default None
        Dask chunks to rechunk to before writing; None keeps a dask array's chunks (NumPy
        input: dask's ``"auto"``).
    compressors : "auto" or None, default "auto"
        Zarr's default compressors, or None for raw chunks (data that does not compress,
        such as noise, only costs CPU to compress).

    Returns
    -------
    str
        The URL written (``uri`` checked and normalised).

    Raises
    ------
    InputError
        ``uri`` is not an allowed location.
    OutputExistsError
        Something is at ``uri`` and ``overwrite`` is False.
    """
    import dask.array as da
    import zarr

    loc = parse_store(uri, role="array's location", storage_options=storage_options)
    fs, root = fsspec.core.url_to_fs(loc.url, **loc.storage_options)
    if fs.exists(root) and not overwrite:
        raise OutputExistsError(f"{loc} exists already.", "pass overwrite=True or another path.")
    darr = arr if hasattr(arr, "dask") else da.from_array(np.asarray(arr), chunks=chunks or "auto")
    if chunks is not None:
        darr = darr.rechunk(chunks)
    # one Zarr chunk per dask block: blocks of the first one's shape (irregular dask chunks
    # would put two blocks in one Zarr chunk, and their unlocked writes would race)
    darr = darr.rechunk(tuple(max(c[0], 1) for c in darr.chunks))
    target = zarr.create_array(
        store=loc.url,
        shape=darr.shape,
        dtype=darr.dtype,
        chunks=tuple(c[0] for c in darr.chunks),
        overwrite=True,
        zarr_format=3,
        compressors=compressors,
        config=ALL_CHUNKS,
        storage_options=loc.storage_options or None,
    )
    from .._compute import compute

    compute(da.store(darr, target, lock=False, compute=False), stage="write array")
    return loc.url
