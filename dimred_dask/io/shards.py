"""Many files as one array: a folder of shards, or a glob (``shards/*.npy``,
``s3://b/emb/part-*.h5ad#layers/counts``).

Rows come in sorted path order (plain string order: ``part-10`` sorts before ``part-2``, so
number shards with zeros, ``part-00002``). Every shard is opened first (metadata only, a few
at a time) and their widths, dtypes and kinds (dense or sparse) are compared before any data
is read; the first shard that differs from the first one is named. A ``#path`` applies to
every shard. The shards' row readers are then read as one array in regular row chunks, a
chunk that straddles shards reading its part of each.

A folder of Parquet files is one Parquet input (`dimred_dask.io.tables`); CSV shards are read
by dask.dataframe after their header lines are compared.
"""

from __future__ import annotations

import posixpath
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from ..errors import InputError, is_storage_error, storage_error
from .base import TARGET_CHUNK_BYTES, fs_of, plan_row_chunk, row_range
from .uris import Location

GLOB_CHARS = "*?["
OPEN_THREADS = 8


def is_glob(url: str) -> bool:
    return any(c in url for c in GLOB_CHARS)


def _hidden(path: str) -> bool:
    return posixpath.basename(path.rstrip("/")).startswith(("_", "."))


def shard_paths(loc: Location) -> list[str]:
    """The paths (of ``loc``'s filesystem) a glob matches, or a folder's visible entries."""
    fs, path = fs_of(loc)
    try:
        if is_glob(loc.url):
            found = fs.glob(path)
        else:
            found = [p for p in fs.ls(path, detail=False) if not _hidden(p)]
    except Exception as exc:
        if is_storage_error(exc) and not isinstance(exc, FileNotFoundError):
            raise storage_error(exc, f"Listing {loc.url}", location=loc) from None
        found = []
    return sorted(p.rstrip("/") for p in found)


def shard_location(loc: Location, path: str) -> Location:
    fs, _ = fs_of(loc)
    url = path if loc.is_local else fs.unstrip_protocol(path)
    return Location(url, loc.element, loc.storage_options)


def classify(loc: Location, suffix_format) -> tuple[str, list[str]]:
    """(format of the shards, their paths) of a glob or folder; refused when it matches
    nothing or mixes formats. ``suffix_format(path)`` gives a path's format or None."""
    paths = shard_paths(loc)
    kinds = {p: suffix_format(p) for p in paths}
    known = sorted({k for k in kinds.values() if k})
    what = "The glob" if is_glob(loc.url) else "The folder"
    if not paths:
        raise InputError(
            f"{what} {loc.url} matches no file."
            if is_glob(loc.url)
            else f"The folder {loc.url} is empty.",
            "check the pattern and the path (and AWS_ENDPOINT_URL for object storage).",
        )
    if not known and not is_glob(loc.url):  # a partitioned Parquet dataset: year=2024/...
        deep = _deep_parquet(loc)
        if deep:
            return "parquet", deep
    if not known:
        raise InputError(
            f"{what} {loc.url} holds no readable arrays (found "
            f"{[posixpath.basename(p) for p in paths[:5]]}).",
            "point --input at .npy, .npz, .h5, .h5ad, .zarr, .parquet or .csv "
            "files, or a glob matching them.",
        )
    if len(known) > 1:
        raise InputError(
            f"{what} {loc.url} mixes formats ({', '.join(known)}); shards must share one.",
            "narrow the glob, e.g. part-*.npy.",
        )
    return known[0], [p for p in paths if kinds[p]]


def _deep_parquet(loc: Location) -> list[str]:
    from .tables import PARQUET_SUFFIXES

    fs, path = fs_of(loc)
    try:
        found = fs.find(path)
    except Exception as exc:
        if is_storage_error(exc) and not isinstance(exc, FileNotFoundError):
            raise storage_error(exc, f"Listing {loc.url}", location=loc) from None
        return []
    return sorted(
        p
        for p in found
        if p.lower().endswith(PARQUET_SUFFIXES)
        and not any(
            part.startswith(("_", ".")) for part in p[len(path.rstrip("/")) + 1 :].split("/")
        )
    )


class ShardRows:
    """Row-range reader over several shards' row readers, in order. Picklable."""

    def __init__(self, readers: list, sparse: bool, dtype):
        self.readers, self.sparse, self.dtype = readers, sparse, np.dtype(dtype)
        sizes = [r.shape[0] for r in readers]
        self.starts = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
        first = readers[0].shape
        self.shape = (int(self.starts[-1]),) + tuple(first[1:])
        self.ndim = len(self.shape)

    def __getitem__(self, key):
        start, stop, cols = row_range(key, self.shape[0], (self.shape + (1,))[1])
        parts = []
        i = int(np.searchsorted(self.starts, start, side="right") - 1)
        pos = start
        while pos < stop and i < len(self.readers):
            a, b = (
                pos - int(self.starts[i]),
                min(stop, int(self.starts[i + 1])) - int(self.starts[i]),
            )
            if b > a:
                parts.append(self.readers[i][a:b])
                pos += b - a
            i += 1
        block = self._join(parts)
        return block if self.ndim == 1 or cols == slice(None) else block[:, cols]

    def _join(self, parts):
        if self.sparse:
            import scipy.sparse as sp

            if not parts:
                return sp.csr_matrix((0, self.shape[1]), dtype=self.dtype)
            return parts[0] if len(parts) == 1 else sp.vstack(parts, format="csr")
        if not parts:
            return np.empty((0,) + self.shape[1:], self.dtype)
        return parts[0] if len(parts) == 1 else np.concatenate(parts)


def _open_all(locations: list[Location], opener, opts) -> list:
    """Each shard's (array, meta), opened a few at a time; the first failing shard's error."""

    def one(shard):
        try:
            return opener(shard, opts), None
        except Exception as exc:  # re-raised below, in shard order
            return None, exc

    with ThreadPoolExecutor(max_workers=min(OPEN_THREADS, len(locations))) as pool:
        results = list(pool.map(one, locations))
    for result, exc in results:
        if exc is not None:
            raise exc
    return [r for r, _ in results]


def _describe(arr, meta) -> str:
    kind = "sparse" if meta.get("sparse") else "dense"
    width = f"{arr.shape[1]} columns" if arr.ndim == 2 else f"{arr.ndim}-D"
    return f"{width} of {arr.dtype} ({kind}, {arr.shape[0]} rows)"


def _check_alike(locations, opened, loc: Location) -> None:
    (arr0, meta0), first = opened[0], locations[0]
    for shard, (arr, meta) in zip(locations[1:], opened[1:]):
        if (
            arr.shape[1:] != arr0.shape[1:]
            or arr.dtype != arr0.dtype
            or bool(meta.get("sparse")) != bool(meta0.get("sparse"))
        ):
            raise InputError(
                f"The shards of {loc} differ: {shard} has {_describe(arr, meta)}, "
                f"the first shard {first} has {_describe(arr0, meta0)}.",
                "write every shard with the same columns and dtype (and the same "
                "sparse or dense storage), or leave the odd shard out of the glob.",
            )


def _check_categories(locations, opened, loc: Location) -> None:
    """Codes (an obs column read as labels) mean the same classes in every shard."""
    first = opened[0][1].get("categories")
    for shard, (_, meta) in zip(locations[1:], opened[1:]):
        if meta.get("categories") != first:

            def shown(cats):
                return "none" if cats is None else f"{cats[:10]}{' ...' if len(cats) > 10 else ''}"

            raise InputError(
                f"The shards of {loc} code their column differently: {shard} has the "
                f"categories {shown(meta.get('categories'))}, the first shard "
                f"{locations[0]} {shown(first)}, so one code would mean different classes.",
                "write every shard with the same categories (e.g. adata.obs[col] = "
                "adata.obs[col].cat.set_categories(all_categories) before writing), or read "
                "the labels from one file.",
            )


def open_shards(loc: Location, fmt: str, paths: list[str], opener, opts):
    """(dask array, meta) of the shards ``paths`` of format ``fmt``, in order."""
    import dask.array as da
    from dask.base import tokenize

    locations = [shard_location(loc, p) for p in paths]
    opened = _open_all(locations, opener, opts)
    _check_alike(locations, opened, loc)
    _check_categories(locations, opened, loc)
    readers = [meta.get("_reader") for _, meta in opened]
    metas = [meta for _, meta in opened]
    arr0, meta0 = opened[0]
    kept = ("element", "layout", "zarr_format", "compressed", "column", "categories", "ordered")
    common = {k: v for k, v in meta0.items() if k in kept}
    common.update(shards=len(paths), first_shard=str(locations[0]), last_shard=str(locations[-1]))
    checks = [m.pop("_check") for m in metas if "_check" in m]
    if checks:
        common["_check"] = lambda: _combined_checks(checks)
    if any(r is None for r in readers):  # no row reader: join the shards' dask arrays
        return da.concatenate([a for a, _ in opened]), {**common, "sparse": False}
    sparse = bool(meta0.get("sparse"))
    reader = ShardRows(readers, sparse, arr0.dtype)
    name = f"{fmt}-shards-" + tokenize(
        [str(x) for x in locations],
        [r.shape for r in readers],
        str(arr0.dtype),
        [m.get("nnz") for m in metas],
    )
    if sparse:
        from .sparse import plan_sparse_rows, sparse_array, sparse_meta

        nnz = sum(int(m["nnz"]) for m in metas)
        entry = arr0.dtype.itemsize + 8
        rows = opts.row_chunk or plan_sparse_rows(reader.shape[0], nnz, entry, TARGET_CHUNK_BYTES)
        smeta = sparse_meta(reader.shape, nnz, meta0.get("layout", "csr"))
        return sparse_array(reader, rows, name), {**common, **smeta, "_reader": reader}
    n, d = (reader.shape + (1,))[:2]
    rows = opts.row_chunk or plan_row_chunk(n, d, arr0.dtype.itemsize)
    arr = da.from_array(
        reader, chunks=(rows,) + reader.shape[1:], asarray=False, fancy=False, lock=False, name=name
    )
    return arr, {**common, "sparse": False, "_reader": reader}


def _combined_checks(checks) -> dict:
    out = {"chunk_objects": 0, "missing_chunks": 0}
    for check in checks:
        part = check()
        out["chunk_objects"] += part.get("chunk_objects", 0)
        out["missing_chunks"] += part.get("missing_chunks", 0)
    return out


def csv_headers_alike(loc: Location, locations: list[Location]) -> None:
    """Compare the header lines of CSV shards (first line only) before reading any data."""

    def header(shard):
        fs, path = fs_of(shard)
        with fs.open(path, "rb") as f:
            return f.readline().decode("utf-8", "replace").strip()

    try:
        with ThreadPoolExecutor(max_workers=min(OPEN_THREADS, len(locations))) as pool:
            heads = list(pool.map(header, locations))
    except Exception as exc:
        if is_storage_error(exc):
            raise storage_error(exc, f"Opening the shards of {loc}", location=loc) from None
        raise
    for shard, head in zip(locations[1:], heads[1:]):
        if head != heads[0]:
            raise InputError(
                f"The CSV shards of {loc} differ: {shard} has the header "
                f"{head[:200]!r}, the first shard {locations[0]} has "
                f"{heads[0][:200]!r}.",
                "write every shard with the same columns, or leave the odd shard out of the glob.",
            )
