"""HDF5 inputs through h5py: a dataset ``file.h5#group/dataset`` (dense, 1-D or 2-D), or a
group holding a compressed sparse matrix as anndata writes one (``encoding-type``
``csr_matrix`` / ``csc_matrix`` with ``data``, ``indices``, ``indptr``), read by row range.

Each task opens the file itself: a local path with h5py directly, anything else (``s3://``)
as an fsspec file object handed to h5py, read ahead in blocks of ``READ_BLOCK`` bytes, so a
row range costs the HDF5 metadata it needs plus the bytes of its rows. HDF5 reports every
failure as ``OSError``; the fsspec file object is wrapped so that a failure of the storage
under it is told apart (a `StoreError`) from bytes that do not decode (an `InputError`
naming the file, the element and the rows).
"""

from __future__ import annotations

import contextlib

import numpy as np

from ..errors import DimredError, InputError, InputTypeError, is_storage_error, storage_error
from .base import plan_row_chunk, row_range
from .sparse import SparseRows, sparse_array, sparse_meta
from .uris import Location

H5_SUFFIXES = (".h5", ".hdf5", ".hdf", ".he5")
READ_BLOCK = 2**20
SPARSE_ENCODINGS = {"csr_matrix": "csr", "csc_matrix": "csc"}


class _Recorded:
    """A read-only file object that remembers the last exception its reads raised (HDF5
    turns it into a bare ``OSError``)."""

    def __init__(self, raw):
        self.raw, self.error = raw, None

    def _call(self, name, *args):
        try:
            return getattr(self.raw, name)(*args)
        except Exception as exc:
            self.error = exc
            raise

    def read(self, *args):
        return self._call("read", *args)

    def readinto(self, buf):
        return self._call("readinto", buf)

    def seek(self, *args):
        return self._call("seek", *args)

    def tell(self):
        return self._call("tell")

    def close(self):
        self.raw.close()


@contextlib.contextmanager
def h5_file(loc: Location):
    """The open ``h5py.File`` of ``loc`` and its recorder (None for a local file)."""
    import fsspec
    import h5py

    raw = recorder = None
    try:
        if loc.is_local:
            handle = h5py.File(loc.url, "r")
        else:
            fs, path = fsspec.core.url_to_fs(loc.url, **loc.storage_options)
            raw = fs.open(path, "rb", block_size=READ_BLOCK, cache_type="readahead")
            recorder = _Recorded(raw)
            handle = h5py.File(recorder, "r")
    except Exception as exc:
        if raw is not None:
            raw.close()
        raise failure(exc, recorder, str(loc), "the file", opening=True) from None
    try:
        yield handle, recorder
    finally:
        handle.close()
        if raw is not None:
            raw.close()


def failure(exc, recorder, where: str, what: str, opening: bool = False) -> DimredError:
    """The typed error for ``exc`` met while reading ``what`` of ``where`` through h5py."""
    if isinstance(exc, DimredError):
        return exc
    cause = recorder.error if recorder is not None and recorder.error is not None else None
    if (
        cause is not None
        and is_storage_error(cause)
        or (cause is None and type(exc).__module__.startswith(("botocore", "aiobotocore")))
    ):
        return storage_error(cause or exc, f"Reading {where}")
    if isinstance(exc, (FileNotFoundError, PermissionError)) and cause is None and opening:
        return storage_error(exc, f"Opening {where}")
    if opening:
        return InputError(
            f"{where} is not a readable HDF5 file ({type(exc).__name__}: {exc}).",
            "check that the file is HDF5 (written by h5py, anndata or another "
            "HDF5 library) and complete.",
        )
    return InputError(
        f"Could not read {what} of {where} ({type(exc).__name__}: {exc}).",
        "the file is damaged or truncated: write it again from its source.",
    )


class H5Slices:
    """Slices of one open h5py dataset (or of one field of a compound dataset); a failure
    names the element and the range."""

    def __init__(self, dataset, where: str, recorder, field: str | None = None):
        self.dataset, self.where, self.recorder = dataset, where, recorder
        self.view = dataset.fields(field) if field else dataset

    def __getitem__(self, key):
        try:
            return np.asarray(self.view[key])
        except Exception as exc:
            start, stop, _ = row_range(key, self.dataset.shape[0])
            raise failure(
                exc,
                self.recorder,
                self.where,
                f"entries {start}-{stop - 1} of '{self.dataset.name}'",
            ) from None


class H5Rows:
    """Row-range reader of a dense HDF5 dataset, or of one field of a compound dataset (the
    ``obsm`` / ``varm`` of anndata < 0.7: one field per matrix). Picklable: a location, a
    dataset name and the field."""

    def __init__(self, loc: Location, name: str, shape, dtype, field: str | None = None):
        self.loc, self.name, self.shape = loc, name, tuple(int(s) for s in shape)
        self.dtype, self.ndim, self.field = np.dtype(dtype), len(self.shape), field

    def __getitem__(self, key):
        start, stop, cols = row_range(key, self.shape[0])
        where = self.loc.with_element(self.name.lstrip("/"))
        with h5_file(self.loc) as (f, recorder):
            block = H5Slices(f[self.name], where, recorder, self.field)[start:stop]
        return block if self.ndim == 1 else block[:, cols]


class H5Sparse:
    """The ``(indptr, indices, data)`` datasets of a sparse group, opened per read."""

    def __init__(self, loc: Location, name: str):
        self.loc, self.name = loc, name
        self.where = loc.with_element(name.lstrip("/"))

    @contextlib.contextmanager
    def open(self):
        with h5_file(self.loc) as (f, recorder):
            group = f[self.name]
            yield tuple(
                H5Slices(group[k], self.where, recorder) for k in ("indptr", "indices", "data")
            )


def text_attr(node, key: str) -> str:
    value = node.attrs.get(key, "")
    if isinstance(value, bytes):
        value = value.decode("utf-8", "replace")
    return value if isinstance(value, str) else str(value)


def is_array(node) -> bool:
    return hasattr(node, "shape") and hasattr(node, "dtype") and not hasattr(node, "keys")


def sparse_layout(node) -> str | None:
    """'csr' / 'csc' for a group holding a compressed sparse matrix as anndata writes it."""
    if is_array(node) or not hasattr(node, "attrs"):
        return None
    old = text_attr(node, "h5sparse_format")
    return SPARSE_ENCODINGS.get(text_attr(node, "encoding-type")) or (old or None)


def sparse_info(group, where: str) -> tuple[str, tuple[int, int], np.dtype, int]:
    """(layout, shape, dtype, nnz) of a sparse group, checked with anndata's reader of such
    groups (``anndata.io.sparse_dataset``); nnz is the last entry of ``indptr``."""
    from anndata.io import sparse_dataset

    try:
        dataset = sparse_dataset(group, should_cache_indptr=False)
        layout, shape, dtype = dataset.format, tuple(dataset.shape), np.dtype(dataset.dtype)
        indptr = group["indptr"]
        major = shape[0] if layout == "csr" else shape[1]
        if indptr.shape != (major + 1,) or group["indices"].shape != group["data"].shape:
            raise ValueError(
                f"indptr has {indptr.shape[0]} entries for {major} "
                f"{'rows' if layout == 'csr' else 'columns'}, indices "
                f"{group['indices'].shape[0]} and data {group['data'].shape[0]}"
            )
        nnz = int(indptr[-1]) if major else 0
    except DimredError:
        raise
    except Exception as exc:
        if is_storage_error(exc) and not type(exc).__module__.startswith("h5py"):
            raise storage_error(exc, f"Opening {where}") from None
        raise InputError(
            f"{where} is not a readable sparse matrix ({type(exc).__name__}: {exc}).",
            "write it again with anndata or scipy.",
        ) from None
    if nnz > group["data"].shape[0] or nnz < 0:
        raise InputError(
            f"The sparse matrix {where} is damaged: its indptr ends at {nnz}, "
            f"past its {group['data'].shape[0]} stored values.",
            "write it again from its source.",
        )
    refuse_non_numeric(dtype, where)
    return layout, shape, dtype, nnz


def refuse_non_numeric(dtype, where: str, what: str = "array") -> None:
    dtype = np.dtype(dtype)
    if dtype.kind not in "fiubc":
        raise InputTypeError(
            f"The {what} {where} holds {dtype} values (text, objects or "
            "records); methods need real numbers.",
            "name a numeric element, or store the data as float32 / float64.",
        )


def list_datasets(f, limit: int = 20) -> list[str]:
    """Paths of the numeric datasets and sparse groups in an HDF5 file (the first ``limit``)."""
    found: list[str] = []

    def visit(name, node):
        if len(found) >= limit:
            return True
        if sparse_layout(node) or (is_array(node) and np.dtype(node.dtype).kind in "fiub"):
            found.append(name)
        return None

    f.visititems(visit)
    return found


def open_sparse_group(group, loc: Location, name: str, source, opts, fmt_meta: dict):
    """(dask array, meta) of a sparse group whose arrays ``source`` reads per task."""
    from dask.base import tokenize

    from .base import TARGET_CHUNK_BYTES  # looked up per call (tests lower them)
    from .sparse import SCAN_MAX_BYTES, plan_sparse_rows, scan_limit_error

    where = source.where
    layout, shape, dtype, nnz = sparse_info(group, where)
    entry = dtype.itemsize + np.dtype(group["indices"].dtype).itemsize
    if layout == "csc" and nnz * entry > SCAN_MAX_BYTES:
        raise scan_limit_error(
            where,
            nnz * entry,
            "stored by columns (CSC)",
            "convert it to CSR once: with anndata, adata.X = adata.X.tocsr() "
            "(or the layer) and write_h5ad / write_zarr again; with scipy, "
            "m.tocsr().",
        )
    reader = SparseRows(source, shape, dtype, layout, nnz)
    rows = opts.row_chunk or plan_sparse_rows(shape[0], nnz, entry, TARGET_CHUNK_BYTES)
    arr = sparse_array(
        reader, rows, "sparse-" + tokenize(loc.url, name, shape, str(dtype), layout, nnz, fmt_meta)
    )
    return arr, {**fmt_meta, **sparse_meta(shape, nnz, layout), "_reader": reader}


def open_hdf5(loc: Location, opts):
    """(dask array, meta) of the HDF5 dataset or sparse group named by ``loc``'s #path."""
    with h5_file(loc) as (f, recorder):
        name = (loc.element or "").strip("/")
        if not name or name not in f:
            found = list_datasets(f)
            what = (
                f"No dataset {name!r} in the HDF5 file {loc.url}"
                if name
                else f"{loc.url} is an HDF5 file; name the dataset to read"
            )
            raise InputError(
                f"{what}; its numeric datasets: {found or 'none'}.",
                f"name one with {loc.with_element('<path>')}, e.g. "
                f"#{found[0] if found else 'group/dataset'}.",
            )
        node = f[name]
        if sparse_layout(node):
            return open_sparse_group(node, loc, name, H5Sparse(loc, name), opts, {})
        if not is_array(node):
            found = list_datasets(node)
            raise InputError(
                f"{loc} is an HDF5 group, not a dataset; its numeric datasets: {found or 'none'}.",
                f"name one with {loc.with_element(name + '/<dataset>')}.",
            )
        return dense_dataset(node, loc, name, opts, {})


def field_layout(node, field: str) -> tuple[tuple[int, ...], np.dtype]:
    """(shape, dtype) of one field of a compound dataset: its rows times the field's own
    shape (``('X_pca', '<f4', (50,))`` in a dataset of n records is an n x 50 matrix)."""
    sub = np.dtype(node.dtype).fields[field][0]
    return tuple(node.shape) + tuple(sub.shape), np.dtype(sub.base)


def dense_dataset(node, loc: Location, name: str, opts, fmt_meta: dict, field: str | None = None):
    """(dask array, meta) of a dense h5py dataset (or of its ``field``, for a compound one)
    read by rows from the file at ``loc``."""
    import dask.array as da
    from dask.base import tokenize

    where = loc.with_element(name) + (f"[{field!r}]" if field else "")
    if field:
        shape, dtype = field_layout(node, field)
    else:
        shape, dtype = tuple(node.shape), np.dtype(node.dtype)
    refuse_non_numeric(dtype, where, "dataset")
    if len(shape) not in (1, 2):
        return da.empty(shape, dtype=dtype, chunks=-1), {}
    n, d = (shape + (1,))[:2]
    base = node.chunks[0] if node.chunks else 1
    rows = opts.row_chunk or plan_row_chunk(n, d, dtype.itemsize, base=base)
    reader = H5Rows(loc, name, shape, dtype, field)
    arr = da.from_array(
        reader,
        chunks=(rows,) + shape[1:],
        asarray=False,
        fancy=False,
        lock=False,
        name="hdf5-" + tokenize(loc.url, name, shape, str(dtype), *([field] if field else [])),
    )
    return arr, {
        **fmt_meta,
        "sparse": False,
        "_reader": reader,
        **({"stored_chunks": list(node.chunks)} if node.chunks else {}),
    }
