"""AnnData inputs: ``.h5ad`` files and AnnData-Zarr stores (a Zarr group whose root carries
anndata's ``encoding-type: anndata``), v2 and v3, locally and on object storage.

The element read is ``X`` unless the URI names another: ``cells.h5ad#layers/counts``,
``#obsm/X_pca``, ``#raw/X`` (any dense array or sparse matrix of the file). Dense elements are
read by row range like any HDF5 dataset or Zarr array; sparse ones (CSR and CSC, as anndata
writes them) through `dimred_dask.io.sparse`: each task opens the file or store itself and
reads only its rows' range of ``indptr``, ``indices`` and ``data``. A CSC element is read by
scanning it once per row block (anndata's own ``CSCDataset[a:b]`` would load all of it in every
task), so it is allowed up to ``SCAN_MAX_BYTES`` and refused above with the fix (convert it to
CSR once). Observation and variable tables (``obs``, ``var``) are never read.

Zarr-based elements keep the Zarr rules: their chunk objects are listed once when
``check_chunks``, and an absent chunk is refused by name unless missing chunks are allowed.
"""

from __future__ import annotations

from ..errors import InputError, InputTypeError, StoreError, is_storage_error, storage_error
from .hdf5 import (
    H5Sparse,
    dense_dataset,
    h5_file,
    is_array,
    open_sparse_group,
    refuse_non_numeric,
    sparse_layout,
    text_attr,
)
from .sparse import Ranges
from .uris import Location

SLOTS = ("layers", "obsm", "obsp", "varm", "varp")


def is_matrix(node) -> bool:
    import numpy as np

    return bool(sparse_layout(node)) or (is_array(node) and np.dtype(node.dtype).kind in "fiub")


def elements(root) -> list[str]:
    """The matrices an AnnData file holds, as #paths: X, layers/..., obsm/..., raw/X ..."""
    found = ["X"] if "X" in root and is_matrix(root["X"]) else []
    for slot in SLOTS:
        if slot in root and not is_array(root[slot]):
            found += [f"{slot}/{k}" for k in sorted(root[slot].keys()) if is_matrix(root[slot][k])]
    if "raw" in root and not is_array(root["raw"]) and "X" in root["raw"]:
        found.append("raw/X")
    return found


def _resolve(root, loc: Location, kind: str):
    """(element path, node) named by ``loc``'s #path (X by default); refused by name."""
    if text_attr(root, "encoding-type") != "anndata" and not ("obs" in root and "var" in root):
        raise InputError(
            f"{loc.url} is not an AnnData {kind} (its root has no "
            "encoding-type 'anndata', nor obs and var).",
            "write it with anndata, or read a plain array: a .h5 / .zarr path "
            "with #path naming the dataset.",
        )
    element = (loc.element or "X").strip("/")
    if element not in root:
        found = elements(root)
        if element == "X":
            raise InputError(
                f"The AnnData {kind} {loc.url} has no X (written with X=None); "
                f"its matrices: {found or 'none'}.",
                f"name one with {loc.with_element('<path>')}, e.g. "
                f"#{found[0] if found else 'layers/counts'}.",
            )
        raise InputError(
            f"No element {element!r} in the AnnData {kind} {loc.url}; its "
            f"matrices: {found or 'none'}.",
            f"fix the #path, e.g. {loc.with_element(found[0] if found else 'X')}.",
        )
    node = root[element]
    where = loc.with_element(element)
    if sparse_layout(node):
        return element, node
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
            "name a numeric matrix with #path (e.g. #X or #obsm/X_pca), or "
            "store the columns wanted as an array.",
        )
    refuse_non_numeric(node.dtype, where, "element")
    return element, node


def open_h5ad(loc: Location, opts):
    """(dask array, meta) of an element of an ``.h5ad`` file."""
    with h5_file(loc) as (f, _):
        element, node = _resolve(f, loc, "file")
        meta = {"element": element}
        if sparse_layout(node):
            return open_sparse_group(node, loc, element, H5Sparse(loc, element), opts, meta)
        return dense_dataset(node, loc, element, opts, meta)


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


def open_anndata_zarr(loc: Location, opts):
    """(dask array, meta) of an element of an AnnData-Zarr store."""
    from .zarr_arrays import _ZarrRows, open_zarr

    root = _zarr_root(loc, opts.allow_missing)
    element, node = _resolve(root, loc, "store")
    meta = {"element": element, "zarr_format": root.metadata.zarr_format}
    if not sparse_layout(node):
        arr, zmeta = open_zarr(Location(loc.url, element, loc.storage_options), opts)
        return arr, {**zmeta, **meta, "sparse": False}
    where = loc.with_element(element)
    names = ("indptr", "indices", "data")
    source = Ranges(where, [_ZarrRows(node[k], f"{where}/{k}") for k in names])
    arr, smeta = open_sparse_group(node, loc, element, source, opts, meta)
    if opts.check_chunks:
        parts = [(node[k], Location(loc.url, f"{element}/{k}", loc.storage_options)) for k in names]
        smeta["_check"] = lambda: _check_arrays(parts, where, opts.allow_missing)
    return arr, smeta


def _check_arrays(parts, where: str, allow_missing: bool) -> dict:
    """The chunk inventory of a sparse element's three arrays (one listing each)."""
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
