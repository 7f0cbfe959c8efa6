"""A run's store: a Zarr v3 group with the embedding, the model, the graph, the manifest,
the picture, per-stage commit markers, and ``_COMMITTED`` written last (DESIGN.md section 4).

    <output>/embedding            (n, k), row chunks as the input
    <output>/model/<name>         the model's arrays
    <output>/manifest.json
    <output>/embedding.png
    <output>/_stages/<stage>.json a stage's marker: its fingerprint and what it wrote
    <output>/_COMMITTED           last; readers refuse an output without it
"""
from __future__ import annotations

import json
import time

import fsspec
import numpy as np

from ..errors import OutputExistsError, StoreError, UncommittedOutputError
from .uris import parse_uri

COMMITTED = "_COMMITTED"
MANIFEST = "manifest.json"
STAGES = "_stages"
STORE_ATTR = "dimred_dask_run"
LEASE = "_LEASE"


class RunStore:
    """Reads and writes one run's output. Holds a URL and options only: cheap to pickle."""

    def __init__(self, uri, *, storage_options: dict | None = None):
        self.location = parse_uri(uri, role="output", storage_options=storage_options)
        self.fs, self.root = fsspec.core.url_to_fs(self.location.url,
                                                   **self.location.storage_options)

    @property
    def url(self) -> str:
        return self.location.url

    def _path(self, name: str) -> str:
        return f"{self.root.rstrip('/')}/{name}"

    # ---- state -----------------------------------------------------------------------------
    def _entries(self) -> list[str]:
        try:
            return [e for e in self.fs.ls(self.root, detail=False)
                    if e.rstrip("/").rsplit("/", 1)[-1] != LEASE]
        except FileNotFoundError:
            return []

    def exists(self) -> bool:
        """Whether the location holds anything but a lease."""
        return bool(self._entries())

    def chunk_count(self, name: str) -> int:
        """Stored chunk objects of the array ``name`` (Zarr v3 keys under ``<name>/c/``)."""
        try:
            return len(self.fs.find(self._path(f"{name}/c")))
        except FileNotFoundError:
            return 0

    def committed(self) -> bool:
        return self.fs.exists(self._path(COMMITTED))

    def is_run_store(self) -> bool:
        try:
            return STORE_ATTR in self.read_json("zarr.json").get("attributes", {})
        except (FileNotFoundError, ValueError, KeyError):
            return False

    def check_writable(self, overwrite: bool) -> str:
        """Say what writing here would do; raise `OutputExistsError` if it is not allowed.

        Returns "new", "resume" (an unfinished run of ours: committed stages are reused) or
        "overwrite". Nothing is written or deleted here.
        """
        if not self.exists():
            return "new"
        if overwrite:
            return "overwrite"
        if self.committed():
            raise OutputExistsError(f"The output {self.url} holds a committed run already.",
                                    "pass --overwrite to replace it, or choose another output.")
        if not self.is_run_store():
            raise OutputExistsError(f"The output {self.url} exists and is not a dimred-dask run "
                                    "(refusing to write into someone else's data).",
                                    "choose an empty or new location, or pass --overwrite.")
        return "resume"

    def prepare(self, mode: str, attrs: dict) -> None:
        import zarr

        if mode == "overwrite":  # everything but the lease this run holds
            for entry in self._entries():
                self.fs.rm(entry, recursive=True)
        if mode == "resume":
            return
        g = zarr.open_group(store=self.url, mode="a", zarr_format=3,
                            storage_options=self.location.storage_options or None)
        g.attrs.update({STORE_ATTR: attrs})

    # ---- arrays ----------------------------------------------------------------------------
    def _group(self, mode="a"):
        import zarr

        return zarr.open_group(store=self.url, mode=mode, zarr_format=3,
                               storage_options=self.location.storage_options or None)

    def write_array(self, name: str, value: np.ndarray) -> None:
        value = np.asarray(value)
        arr = self._group().create_array(name, shape=value.shape, dtype=value.dtype,
                                         chunks=value.shape or None, overwrite=True)
        arr[...] = value

    def create_array(self, name: str, shape, chunks, dtype):
        return self._group().create_array(name, shape=tuple(shape), chunks=tuple(chunks),
                                          dtype=dtype, overwrite=True)

    def open_array(self, name: str):
        return self._group("r")[name]

    def read_array(self, name: str) -> np.ndarray:
        return self.open_array(name)[...]

    def write_attrs(self, name: str, attrs: dict) -> None:
        """Set JSON attributes on the group ``name`` (created if missing)."""
        g = self._group().require_group(name)
        g.attrs.update(json.loads(json.dumps(attrs, default=_jsonable)))

    def read_attrs(self, name: str) -> dict:
        return dict(self._group("r")[name].attrs)

    def read_group(self, name: str) -> dict[str, np.ndarray]:
        g = self._group("r")[name]
        return {k: v[...] for k, v in g.arrays()}

    # ---- files -----------------------------------------------------------------------------
    def write_bytes(self, name: str, data: bytes) -> None:
        parent = self._path(name).rsplit("/", 1)[0]
        self.fs.makedirs(parent, exist_ok=True)
        with self.fs.open(self._path(name), "wb") as f:
            f.write(data)

    def read_bytes(self, name: str) -> bytes:
        with self.fs.open(self._path(name), "rb") as f:
            return f.read()

    def write_json(self, name: str, obj) -> None:
        self.write_bytes(name, json.dumps(obj, indent=2, sort_keys=True, default=_jsonable).encode())

    def read_json(self, name: str):
        return json.loads(self.read_bytes(name))

    # ---- stages and commit -----------------------------------------------------------------
    def stage_marker(self, stage: str) -> dict | None:
        try:
            return self.read_json(f"{STAGES}/{stage}.json")
        except FileNotFoundError:
            return None

    def mark_stage(self, stage: str, fingerprint: str, info: dict) -> None:
        self.write_json(f"{STAGES}/{stage}.json",
                        {"stage": stage, "fingerprint": fingerprint, "time": time.time(), **info})

    def commit(self, manifest: dict) -> None:
        self.write_json(MANIFEST, manifest)
        self.write_json(COMMITTED, {"fingerprint": manifest.get("fingerprint"),
                                    "time": time.time()})


def _jsonable(o):
    if isinstance(o, np.generic):
        return o.item()
    if isinstance(o, np.ndarray):
        return o.tolist()
    return str(o)


def open_output(uri, *, storage_options: dict | None = None) -> RunStore:
    """Open a finished run for reading; refuse one without ``_COMMITTED``."""
    store = RunStore(uri, storage_options=storage_options)
    if not store.exists():
        raise StoreError(f"No run output at {store.url}.", "check the path.")
    if not store.committed():
        raise UncommittedOutputError(
            f"The output {store.url} has no {COMMITTED} marker: its run did not finish, so its "
            "contents may be partial.", "re-run the same command to finish it (committed stages "
            "are reused), or run with --overwrite.")
    return store


def save_array(arr, uri, *, overwrite: bool = False, storage_options: dict | None = None,
               chunks=None, compressors="auto") -> str:
    """Write a dask or NumPy array to a Zarr v3 array at ``uri`` (computed on the workers).

    ``compressors``: zarr's default ("auto"), or None for raw chunks (data that does not
    compress, such as noise, only costs CPU to compress)."""
    import dask.array as da
    import zarr

    loc = parse_uri(uri, role="output", storage_options=storage_options)
    fs, root = fsspec.core.url_to_fs(loc.url, **loc.storage_options)
    if fs.exists(root) and not overwrite:
        raise OutputExistsError(f"{loc.url} exists already.", "pass overwrite=True or another path.")
    darr = arr if hasattr(arr, "dask") else da.from_array(np.asarray(arr), chunks=chunks or "auto")
    if chunks is not None:
        darr = darr.rechunk(chunks)
    target = zarr.create_array(store=loc.url, shape=darr.shape, dtype=darr.dtype,
                               chunks=tuple(c[0] for c in darr.chunks), overwrite=True,
                               zarr_format=3, compressors=compressors, storage_options=loc.storage_options or None)
    from .._compute import compute

    compute(da.store(darr, target, lock=False, compute=False), stage="write array")
    return loc.url
