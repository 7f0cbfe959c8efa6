"""AnnData inputs: ``.h5ad`` files and AnnData-Zarr stores (a Zarr group whose root carries
anndata's ``encoding-type: anndata``, or an older one without it that holds ``obs`` and
``var``), v2 and v3, locally and on object storage.

Every layout anndata itself reads is read, under the paths anndata gives its elements:

- ``#X`` (the default), ``#layers/<name>``, ``#obsm/<name>``, ``#obsp/<name>``,
  ``#varm/<name>``, ``#varp/<name>``, ``#raw/X``, ``#raw/varm/<name>``: a dense array or a
  sparse matrix (CSR or CSC, with anndata's ``encoding-type`` or as an h5sparse group with
  ``h5sparse_format`` and ``h5sparse_shape``).
- The older layout (anndata < 0.7, still common in public data): ``raw.X``, ``raw.var`` and
  ``raw.varm`` at the top level, named with a dot, are read as ``#raw/X``, ``#raw/var``
  and ``#raw/varm/<name>``; ``obsm`` and ``varm`` stored as one compound dataset, one field
  per matrix, give ``#obsm/<field>`` and ``#varm/<field>``;
  the neighbour graphs kept in ``uns/neighbors`` (``distances``, ``connectivities``) are
  ``#obsp/distances`` and ``#obsp/connectivities``, as anndata moves them there on reading.
  A path as stored (``#raw.X``) reads too.
- ``#obs/<column>`` is a column of ``obs`` read as labels (`dimred_dask.io.obs`): in every
  dataframe layout anndata reads, the compound ``obs`` of older files included.

Dense elements are read by row range like any HDF5 dataset or Zarr array (a field of a
compound dataset: only that field, in HDF5); sparse ones through `dimred_dask.io.sparse`:
each task opens the file or store itself and reads only its rows' range of ``indptr``,
``indices`` and ``data``. A CSC element is read by scanning it once per row block (anndata's
own ``CSCDataset[a:b]`` would load all of it in every task), so it is allowed up to
``SCAN_MAX_BYTES`` and refused above with the fix (convert it to CSR once). A path that
names nothing is refused with every matrix the file holds, under the path that reads it.

Zarr-based elements keep the Zarr rules: their chunk objects are listed once when
``check_chunks``, and an absent chunk is refused by name unless missing chunks are allowed.
"""

from __future__ import annotations

import numpy as np

from ..errors import (
    InputError,
    InputTypeError,
    StoreError,
    is_storage_error,
    storage_error,
)
from .anndata_layout import Element, check_anndata, check_raw, child, elements, locate
from .hdf5 import (
    H5Rows,
    H5Sparse,
    dense_dataset,
    field_layout,
    h5_file,
    is_array,
    open_sparse_group,
    refuse_non_numeric,
    sparse_layout,
    text_attr,
)
from .obs import open_column
from .sparse import Ranges
from .uris import Location


def _resolve(root, loc: Location, kind: str) -> tuple[Element, object]:
    """(element, node) named by ``loc``'s #path (X by default); refused by name."""
    check_anndata(root, loc, kind)
    element = (loc.element or "X").strip("/")
    if element.startswith("raw/"):
        check_raw(root, f"The AnnData {kind} {loc.url}")
    found = locate(root, element, strict=True)
    if found is None:
        listed = elements(root)
        if element == "X":
            raise InputError(
                f"The AnnData {kind} {loc.url} has no X (written with X=None); "
                f"its matrices: {listed or 'none'}.",
                f"name one with {loc.with_element('<path>')}, e.g. "
                f"#{listed[0] if listed else 'layers/counts'}.",
            )
        raise InputError(
            f"No element {element!r} in the AnnData {kind} {loc.url}; its "
            f"matrices: {listed or 'none'}.",
            f"fix the #path, e.g. {loc.with_element(listed[0] if listed else 'X')}.",
        )
    node = child(root, found.stored, strict=True)
    where = loc.with_element(element)
    if found.field or sparse_layout(node):
        return found, node
    fix = (
        "name a numeric matrix with #path (e.g. #X or #obsm/X_pca), a column of obs as "
        "labels with #obs/<column>, or store the columns wanted as an array."
    )
    if not is_array(node):
        encoding = text_attr(node, "encoding-type") or "group"
        extra = (
            f" with columns {list(node.attrs.get('column-order', []))[:10]}"
            if encoding == "dataframe"
            else ""
        )
        raise InputTypeError(
            f"The element {where} is a {encoding}{extra}, not a numeric "
            f"matrix; matrices of the {kind}: {elements(root) or 'none'}.",
            fix,
        )
    if np.dtype(node.dtype).names:  # a compound dataset: a table of anndata < 0.7
        raise InputTypeError(
            f"The element {where} is a table of records (fields "
            f"{list(np.dtype(node.dtype).names)[:10]}), not a numeric matrix; matrices of "
            f"the {kind}: {elements(root) or 'none'}.",
            fix,
        )
    refuse_non_numeric(node.dtype, where, "element")
    return found, node


def _is_column(loc: Location) -> bool:
    return (loc.element or "").strip("/").startswith("obs/")


def open_h5ad(loc: Location, opts):
    """(dask array, meta) of an element of an ``.h5ad`` file."""
    with h5_file(loc) as (f, _):
        if _is_column(loc):
            check_anndata(f, loc, "file")

            def rows_of(stored: str, field: str | None):
                node = f[stored]
                shape, dtype = (
                    field_layout(node, field) if field else (tuple(node.shape), node.dtype)
                )
                return H5Rows(loc, stored, shape, dtype, field)

            return open_column(f, loc, opts, "file", rows_of, lambda stored: None)
        found, node = _resolve(f, loc, "file")
        meta = found.meta()
        if sparse_layout(node):
            source = H5Sparse(loc, found.stored)
            return open_sparse_group(node, loc, found.stored, source, opts, meta)
        return dense_dataset(node, loc, found.stored, opts, meta, found.field)


def _zarr_root(loc: Location, allow_missing: bool):
    import zarr

    from .zarr_arrays import strict_store

    try:
        return zarr.open_group(
            store=strict_store(Location(loc.url, None, loc.storage_options), allow_missing),
            mode="r",
        )
    except (InputError, StoreError):
        raise
    except Exception as exc:
        if is_storage_error(exc) and not isinstance(exc, FileNotFoundError):
            raise storage_error(exc, f"Opening {loc.url}", location=loc) from None
        raise InputError(
            f"{loc.url} is not a readable AnnData-Zarr store ({type(exc).__name__}: {exc}).",
            "check that the path is a Zarr group written by anndata.",
        ) from None


class FieldRows:
    """Row-range reader of one field of a compound array, through a reader of its records.
    Picklable when that reader is."""

    def __init__(self, records, field: str):
        self.records, self.field = records, field
        sub = np.dtype(records.dtype).fields[field][0]
        self.shape = tuple(records.shape) + tuple(sub.shape)
        self.dtype, self.ndim = np.dtype(sub.base), len(self.shape)

    def __getitem__(self, key):
        rows, rest = (key[0], key[1:]) if isinstance(key, tuple) else (key, ())
        block = np.asarray(self.records[rows])[self.field]
        return block[(slice(None),) + rest] if rest and self.ndim > 1 else block


def open_anndata_zarr(loc: Location, opts):
    """(dask array, meta) of an element of an AnnData-Zarr store."""
    from .zarr_arrays import _ZarrRows, open_zarr, refuse_object_codecs

    root = _zarr_root(loc, opts.allow_missing)
    if _is_column(loc):
        check_anndata(root, loc, "store")

        def rows_of(stored: str, field: str | None):
            node = root[stored]
            where = loc.with_element(stored)
            refuse_object_codecs(node, where)
            reader = _ZarrRows(node, where)
            return FieldRows(reader, field) if field else reader

        def check(stored: list[str]):
            parts = [(root[s], Location(loc.url, s, loc.storage_options)) for s in stored]
            where = loc.with_element(loc.element.strip("/"))
            return lambda: _check_arrays(parts, where, opts.allow_missing)

        arr, meta = open_column(root, loc, opts, "store", rows_of, check)
        return arr, {**meta, "zarr_format": root.metadata.zarr_format}
    found, node = _resolve(root, loc, "store")
    meta = {**found.meta(), "zarr_format": root.metadata.zarr_format}
    if not sparse_layout(node):
        arr, zmeta = open_zarr(Location(loc.url, found.stored, loc.storage_options), opts)
        if found.field:  # a field of a compound array: the records' reader is no row reader
            arr = arr[found.field]
            zmeta.pop("_reader", None)
        return arr, {**zmeta, **meta, "sparse": False}
    where = loc.with_element(found.stored)
    names = ("indptr", "indices", "data")
    source = Ranges(where, [_ZarrRows(node[k], f"{where}/{k}") for k in names])
    arr, smeta = open_sparse_group(node, loc, found.stored, source, opts, meta)
    if opts.check_chunks:
        parts = [
            (node[k], Location(loc.url, f"{found.stored}/{k}", loc.storage_options)) for k in names
        ]
        smeta["_check"] = lambda: _check_arrays(parts, where, opts.allow_missing)
    return arr, smeta


def _check_arrays(parts, where: str, allow_missing: bool) -> dict:
    """The chunk inventory of an element's arrays (one listing each)."""
    from .zarr_arrays import chunk_inventory, missing_chunks_error

    total, missing = 0, []
    for node, part in parts:
        inventory = chunk_inventory(node, part)
        total += inventory["chunk_objects"]
        missing += [f"{part.element}/{key}" for key in inventory["missing"]]
    if missing and not allow_missing:
        raise missing_chunks_error(where, missing, total)
    return {
        "chunk_objects": total,
        "missing_chunks": len(missing),
        **({"missing_chunk_keys": missing[:20]} if missing else {}),
    }
