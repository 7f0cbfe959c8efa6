"""Open a 2-D numeric array lazily from any supported format at any allowed URI.

Formats (`detect_format`, from the suffix, and for a folder from what it holds):

- Zarr v3 / v2 arrays, or an array in a group (``uri#path``); AnnData-Zarr stores (a Zarr
  group whose root says ``encoding-type: anndata``, or that holds ``obs`` and ``var``) and
  ``.h5ad`` files in every layout anndata reads, element X or the one named by
  ``#layers/counts``, ``#obsm/X_pca``, ``#raw/X`` (`dimred_dask.io.anndata`), a column of
  obs as labels by ``#obs/louvain`` (`dimred_dask.io.obs`);
- HDF5 datasets ``file.h5#group/dataset`` (`dimred_dask.io.hdf5`);
- ``.npy`` files; SciPy sparse ``.npz`` files (`dimred_dask.io.npz`);
- Parquet (a file or a folder; scalar and list columns) and CSV (`dimred_dask.io.tables`);
- many files as one array: a glob or a folder of shards of one format, rows in sorted path
  order (`dimred_dask.io.shards`).

Everything returned is a dask array whose chunks are read where they are computed (on the
workers), so no data passes through the process that opens it. Sparse inputs are dask arrays
of ``scipy.sparse.csr_matrix`` row blocks holding all columns (`dimred_dask.io.sparse`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import fsspec
import numpy as np

from .._validation import float_dtype
from ..errors import DimredError, InputError, InputTypeError, is_storage_error, storage_error
from .anndata import open_anndata_zarr, open_h5ad
from .base import (
    OpenOptions,
    plan_row_chunk,
    read_errors,
    row_range,
)
from .base import (
    exists as _exists,
)
from .base import (
    fs_of as _fs,
)
from .base import (
    is_folder as _is_folder,
)
from .hdf5 import H5_SUFFIXES, open_hdf5
from .npz import open_npz
from .shards import classify, csv_headers_alike, is_glob, open_shards, shard_location
from .tables import open_csv, open_parquet
from .uris import Location, parse_uri
from .zarr_arrays import open_zarr

SUFFIXES = {
    ".npy": "npy",
    ".npz": "npz",
    ".h5ad": "h5ad",
    ".parquet": "parquet",
    ".pq": "parquet",
    ".csv": "csv",
    ".zarr": "zarr",
    **{suffix: "hdf5" for suffix in H5_SUFFIXES},
}
TABLES = ("parquet", "csv", "csv-shards")
FILE_FORMATS = ("npy", "npz", "h5ad", "hdf5", "csv")  # one file each, never a folder
ZARR_META = ("zarr.json", ".zgroup", ".zarray")


@dataclass
class InputArray:
    array: object  # dask.array.Array, (n, d), chunks (rows, d); CSR chunks when sparse
    location: Location
    format: str
    meta: dict = field(default_factory=dict)

    @property
    def shape(self):
        return self.array.shape


def suffix_format(path: str) -> str | None:
    low = path.lower().rstrip("/")
    return next((fmt for suffix, fmt in SUFFIXES.items() if low.endswith(suffix)), None)


def _zarr_document(loc: Location, names) -> tuple[str, object] | None:
    """(name, parsed JSON) of the first of the metadata documents ``names`` at ``loc.url``."""
    fs, path = _fs(loc)
    for name in names:
        try:
            return name, json.loads(fs.cat_file(f"{path.rstrip('/')}/{name}"))
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError, ValueError):
            continue
        except Exception as exc:
            if is_storage_error(exc):
                raise storage_error(exc, f"Opening {loc.url}", location=loc) from None
            raise
    return None


def _root_attributes(loc: Location) -> tuple[dict, bool] | None:
    """(attributes, whether it is a group) of the Zarr node at ``loc.url`` (v3 or v2), or
    None if it is none."""
    found = _zarr_document(loc, ("zarr.json", ".zattrs", ".zgroup", ".zarray"))
    if found is None:
        return None
    name, doc = found
    doc = doc if isinstance(doc, dict) else {}
    if name == "zarr.json":
        return doc.get("attributes", {}), doc.get("node_type") == "group"
    if name == ".zattrs":
        return doc, _zarr_document(loc, (".zgroup",)) is not None
    return {}, name == ".zgroup"


def _older_anndata(loc: Location) -> bool:
    """Whether a Zarr group without anndata's root attributes holds ``obs`` and ``var`` (an
    AnnData-Zarr store anndata < 0.7 wrote)."""
    return all(
        _zarr_document(
            Location(f"{loc.url.rstrip('/')}/{part}", None, loc.storage_options),
            ("zarr.json", ".zarray", ".zgroup"),
        )
        is not None
        for part in ("obs", "var")
    )


def detect_format(loc: Location) -> str:
    """The format of ``loc``: from its suffix; for a folder, a Zarr store (AnnData-Zarr if its
    root says so), else shards of the one format its files have (``"<format>-shards"``, or
    ``"parquet"`` for Parquet files); a glob is the shards of what it matches."""
    if is_glob(loc.url):
        fmt, _ = classify(loc, suffix_format)
        return fmt if fmt == "parquet" else f"{fmt}-shards"
    fmt = suffix_format(loc.url)
    if fmt not in (None, "zarr"):
        return fmt
    root = _root_attributes(loc)
    if root is not None:
        attrs, group = root
        if attrs.get("encoding-type") == "anndata" or (group and _older_anndata(loc)):
            return "anndata-zarr"
        return "zarr"
    fs, path = _fs(loc)
    if fmt is None and fs.isdir(path):
        found, _ = classify(loc, suffix_format)
        return found if found == "parquet" else f"{found}-shards"
    return "zarr"  # the Zarr reader names what is wrong


def open_input(
    uri,
    *,
    columns=None,
    storage_options=None,
    row_chunk: int | None = None,
    allow_1d: bool = False,
    role: str = "input",
    as_float: bool = False,
    check_chunks: bool = True,
    allow_missing_chunks: bool = False,
) -> InputArray:
    """Open ``uri`` as a lazy 2-D dask array; refuse what cannot be embedded, reading no data.

    The format comes from the suffix, or for a folder from what it holds (see the module
    docstring). Only metadata is read here; the chunks are read where they are computed.
    The feature axis is one chunk and the row chunks are made regular.

    Parameters
    ----------
    uri : str, os.PathLike or Location
        A local path or an allowed URL (`parse_uri`), ``#path`` naming an array inside a
        Zarr group, HDF5 file or AnnData store; a glob reads its matches as shards.
    columns : sequence of str or None, default None
        Parquet and CSV only: the columns to read, in this order; None: every numeric one.
    storage_options : dict or None, default None
        fsspec options of the storage, over those of the environment.
    row_chunk : int or None, default None
        Rows per dask chunk; None: about 64 MiB per chunk (`plan_row_chunk`), a multiple of
        the stored chunk.
    allow_1d : bool, default False
        Return a 1-D array (labels, targets) as one column; an AnnData obs column
        (``#obs/<column>``) is read only so.
    role : str, default "input"
        What the array is, named in error messages.
    as_float : bool, default False
        Read integer and boolean data as the floating dtype every method computes in
        (`dimred_dask._validation.float_dtype`: float32 up to 16-bit integers, else float64);
        ``meta["stored_dtype"]`` keeps what was stored.
    check_chunks : bool, default True
        List a Zarr array's chunk objects (those of Zarr-based formats too) once and refuse
        an absent one. Reads refuse absent chunks whether or not they were listed, so a chunk
        lost after this check is never read as fill values.
    allow_missing_chunks : bool, default False
        Read absent chunks as the fill value instead of refusing them.

    Returns
    -------
    InputArray
        The dask array (of ``scipy.sparse.csr_matrix`` row blocks for sparse input), its
        `Location`, its format and ``meta``: ``format``, ``shape``, ``dtype``, ``sparse``;
        for sparse input ``nnz``, ``density`` and ``layout`` (csr / csc as stored); for
        AnnData ``element`` (and ``stored_as`` / ``field`` where an older layout keeps it
        elsewhere), for an obs column ``column``, ``encoding`` and, coded, ``categories``;
        for shards ``shards`` (their count).

    Raises
    ------
    InputError
        A URI that is not allowed; nothing at ``uri``; ``columns`` for a format that is not
        a table; an array that is not 2-D (1-D without ``allow_1d``) or is complex; a file
        that is damaged or truncated; absent chunks (without ``allow_missing_chunks``).
    InputTypeError
        Data that are not real numbers (text, Python objects).
    StoreError
        The storage failed or could not be reached (network, permissions, credentials), or
        its fsspec extra is not installed.
    """
    loc = parse_uri(uri, role=role, storage_options=storage_options)
    if not is_glob(loc.url) and not _exists(loc):
        raise InputError(
            f"The {role} {loc} does not exist"
            + (
                " (a '#' in a local path is part of the name unless what precedes it is an "
                "existing file or Zarr store, whose element it then names)."
                if loc.is_local and "#" in loc.url
                else "."
            ),
            "check the path or URL (and AWS_ENDPOINT_URL for object storage).",
        )
    fmt = detect_format(loc)
    if fmt in FILE_FORMATS and not is_glob(loc.url) and _is_folder(loc):
        suffix = "." + loc.url.rsplit(".", 1)[-1]
        raise InputError(
            f"The {role} {loc.url} is a folder; a {suffix} input is a file.",
            f"name the file itself, or read the files in the folder as shards with a glob, "
            f"e.g. {loc.url}/*{suffix}.",
        )
    if columns is not None and fmt not in TABLES:
        raise InputError(
            f"--columns applies to Parquet and CSV input; {loc} is {fmt}.",
            "drop --columns, or select columns when writing the array.",
        )
    opts = OpenOptions(
        tuple(columns) if columns is not None else None,
        row_chunk,
        check_chunks,
        allow_missing_chunks,
        allow_1d,
        role,
    )
    arr, meta = _open(loc, fmt, opts)
    meta.pop("_reader", None)
    arr = _checked(arr, loc, role, allow_1d)
    check = meta.pop("_check", None)
    meta = {
        "format": fmt,
        "shape": list(arr.shape),
        "dtype": str(arr.dtype),
        "sparse": False,
        **meta,
        **(check() if check else {}),
    }
    # in the machine's byte order (float_dtype's): big-endian float32 stays float32
    target = float_dtype(arr.dtype) if as_float else arr.dtype
    if target != arr.dtype:
        arr = arr.astype(target)  # chunkwise, CSR chunks included
        meta.update(stored_dtype=meta["dtype"], dtype=str(arr.dtype))
    return InputArray(arr, loc, fmt, meta)


OPENERS = {}  # format -> opener(loc, opts) -> (dask array, meta); filled below


def _open(loc: Location, fmt: str, opts: OpenOptions):
    if fmt in TABLES:
        return _open_table(loc, fmt, opts)
    if fmt.endswith("-shards"):
        single = fmt[: -len("-shards")]
        _, paths = classify(loc, suffix_format)
        return open_shards(loc, single, paths, OPENERS[single], opts)
    return OPENERS[fmt](loc, opts)


def _checked(arr, loc: Location, role: str, allow_1d: bool):
    """``arr`` as a 2-D real array in regular row chunks with one chunk across features."""
    if allow_1d and arr.ndim == 1:
        arr = arr[:, None]
    if arr.ndim != 2:
        raise InputError(
            f"The {role} {loc} is {arr.ndim}-D with shape {arr.shape}; methods "
            "need a 2-D array of samples x features.",
            "reshape it to (n_samples, n_features) when writing, or pick another array.",
        )
    kind = np.dtype(arr.dtype).kind
    if kind == "c":
        raise InputError(
            f"Complex data not supported: {loc} has dtype {arr.dtype}.",
            "store the real part and the modulus as separate real columns.",
        )
    if kind not in "fiub":
        raise InputTypeError(
            f"The {role} {loc} has dtype {arr.dtype}; methods need real numbers.",
            "store a numeric dtype (float32/float64), or select numeric columns.",
        )
    if arr.numblocks[1] != 1:  # irregular or split feature axis: one chunk across features
        arr = arr.rechunk({1: -1})
    sizes = arr.chunks[0]
    if len(set(sizes[:-1])) > 1 or sizes[-1] > sizes[0]:  # e.g. CSV partitions
        arr = arr.rechunk({0: max(sizes)})  # regular row chunks: outputs align with them
    return arr


class _NpyRows:
    """Row-range reader for a C-order .npy file: local files are memory-mapped, remote ones are
    read by byte range. Picklable (it carries a URL and options, never data)."""

    def __init__(self, loc: Location, shape, dtype, offset: int, fortran: bool = False):
        self.loc, self.shape, self.dtype, self.offset = loc, tuple(shape), np.dtype(dtype), offset
        self.ndim, self.fortran = len(self.shape), bool(fortran) and len(shape) == 2

    def __getitem__(self, key):
        start, stop, cols = row_range(key, self.shape[0])
        with read_errors(
            self.loc,
            lambda exc: InputError(
                f"Could not read rows {start}-{stop - 1} of the .npy file {self.loc} "
                f"({type(exc).__name__}: {exc}).",
                "the file changed or was truncated after "
                "the run started: write it again and re-run.",
            ),
        ):
            block = self._read(start, stop)
        return block[(slice(None), cols)] if self.ndim == 2 else block

    def _read(self, start: int, stop: int) -> np.ndarray:
        rowbytes = int(np.prod(self.shape[1:])) * self.dtype.itemsize
        if self.loc.is_local:
            mm = np.memmap(
                self.loc.url,
                dtype=self.dtype,
                mode="r",
                offset=self.offset,
                shape=self.shape,
                order="F" if self.fortran else "C",
            )
            return np.ascontiguousarray(mm[start:stop])
        fs, path = fsspec.core.url_to_fs(self.loc.url, **self.loc.storage_options)
        if self.fortran:  # column-major: one byte range per column
            n, d, size = self.shape[0], self.shape[1], self.dtype.itemsize
            starts = [self.offset + (j * n + start) * size for j in range(d)]
            parts = fs.cat_ranges([path] * d, starts, [a + (stop - start) * size for a in starts])
            return np.ascontiguousarray(
                np.stack([np.frombuffer(p, dtype=self.dtype) for p in parts], axis=1)
            )
        raw = fs.cat_file(
            path, start=self.offset + start * rowbytes, end=self.offset + stop * rowbytes
        )
        return np.frombuffer(raw, dtype=self.dtype).reshape((stop - start,) + self.shape[1:])


def _open_npy(loc: Location, opts: OpenOptions):
    import dask.array as da
    from dask.base import tokenize

    fs, path = _fs(loc)
    try:
        with fs.open(path, "rb") as f:
            try:
                version = np.lib.format.read_magic(f)
                read_header = (
                    np.lib.format.read_array_header_1_0
                    if version == (1, 0)
                    else np.lib.format.read_array_header_2_0
                )
                shape, fortran, dtype = read_header(f)
            except (ValueError, EOFError) as exc:
                raise InputError(
                    f"{loc} is not a valid .npy file ({exc}).", "write it with numpy.save."
                ) from None
            offset = f.tell()
        size = fs.size(path)
    except DimredError:
        raise
    except Exception as exc:
        if is_storage_error(exc):
            raise storage_error(exc, f"Opening {loc}", location=loc) from None
        raise
    if dtype.hasobject:
        raise InputTypeError(
            f"The .npy file {loc} holds Python objects (loading would unpickle).",
            "save a numeric array instead.",
        )
    if fortran and len(shape) > 2:
        raise InputError(
            f"The .npy file {loc} is a {len(shape)}-D array in Fortran order.",
            "save a 2-D array (samples x features).",
        )
    expected = offset + int(np.prod(shape)) * dtype.itemsize
    if size < expected:
        raise InputError(
            f"The .npy file {loc} is truncated: its header promises {shape} "
            f"{dtype} ({expected:,} bytes with the header), the file has {size:,}.",
            "write the file again (an interrupted copy or save leaves it short).",
        )
    if len(shape) not in (1, 2):  # refused by the caller, by its shape: nothing is allocated
        return da.empty(shape, dtype=dtype, chunks=shape or ()), {}
    n, d = (tuple(shape) + (1,))[:2]
    rows = opts.row_chunk or plan_row_chunk(n, d, dtype.itemsize)
    reader = _NpyRows(loc, shape, dtype, offset, fortran)
    arr = da.from_array(
        reader,
        chunks=(rows,) + tuple(shape[1:]),
        asarray=False,
        fancy=False,
        lock=False,
        name="npy-" + tokenize(loc.url, offset, shape, str(dtype), fortran),
    )
    return arr, {
        "memory_mapped": loc.is_local,
        **({"order": "F"} if fortran else {}),
        "_reader": reader,
    }


def _open_table(loc: Location, fmt: str, opts: OpenOptions):
    columns = list(opts.columns) if opts.columns is not None else None
    if fmt == "parquet":
        fs, path = _fs(loc)
        files = classify(loc, suffix_format)[1] if is_glob(loc.url) else None
        arr, meta = open_parquet(loc, fs, path, columns, opts.row_chunk, plan_row_chunk, files)
        return arr, {**meta, **({"shards": len(files)} if files else {})}
    if fmt == "csv-shards":
        paths = classify(loc, suffix_format)[1]
        shards = [shard_location(loc, p) for p in paths]
        csv_headers_alike(loc, shards)
        arr, meta = open_csv(loc, columns, opts.row_chunk, [s.url for s in shards])
        return arr, {**meta, "shards": len(shards)}
    return open_csv(loc, columns, opts.row_chunk)


OPENERS.update(
    {
        "zarr": open_zarr,
        "anndata-zarr": open_anndata_zarr,
        "h5ad": open_h5ad,
        "hdf5": open_hdf5,
        "npz": open_npz,
        "npy": _open_npy,
    }
)


def open_matrix(uri, *, storage_options=None, role: str = "matrix"):
    """Open the 2-D Zarr array at ``uri`` (a kernel or distance matrix a run stored) as a lazy
    dask array in its stored chunks, square blocks kept; reading no data.

    Parameters
    ----------
    uri : str, os.PathLike or Location
        A Zarr array (``#path`` for one inside a group), local or an allowed URL.
    storage_options : dict or None, default None
        fsspec options of the storage, over those of the environment.
    role : str, default "matrix"
        What the array is, named in error messages.

    Returns
    -------
    InputArray
        The dask array (one task per stored chunk; raw local chunks read from their files),
        its `Location`, ``"zarr"`` and ``meta``: ``shape``, ``dtype``, ``read_path``.

    Raises
    ------
    InputError
        Nothing at ``uri``, not a 2-D Zarr array; when read, an absent or damaged chunk.
    StoreError
        The storage failed or could not be reached.
    """
    from .zarr_arrays import open_zarr_tiles

    loc = parse_uri(uri, role=role, storage_options=storage_options)
    if not _exists(loc):
        raise InputError(f"The {role} {loc} does not exist.", "check the path or URL.")
    arr, meta = open_zarr_tiles(loc)
    return InputArray(arr, loc, "zarr", {"shape": list(arr.shape), "dtype": str(arr.dtype), **meta})
