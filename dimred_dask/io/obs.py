"""Columns of an AnnData's ``obs`` as labels: ``cells.h5ad#obs/louvain`` is a 1-D array, one
value per cell, read from every dataframe layout anndata reads:

- the current one (dataframe 0.2.0): a categorical (``codes`` and ``categories``), a string
  array, a numeric or boolean array, a nullable integer, boolean or string column
  (``values`` and ``mask``);
- anndata 0.7's (dataframe 0.1.0): a categorical's codes, whose ``categories`` attribute
  names the dataset of its categories;
- anndata < 0.7's: ``obs`` as one compound dataset, a field per column (the first one is the
  index); a categorical column is stored as its codes, its categories in
  ``uns/<column>_categories``, and is read as categorical when every code falls among them
  (anndata's own rule).

A categorical is read as its codes (-1 marks a missing value, as in pandas); a string column
as the codes of its distinct values in sorted order (what ``pd.Categorical`` makes of it).
``meta["categories"]`` holds the categories in code order, ``meta["ordered"]`` whether they
are ordered. Numbers and booleans are read as stored; a missing entry of a nullable integer or
boolean column is refused, naming its rows, when it is read.

Each task reads its rows' range of the column from the file or store itself. Opening reads
the categories; a string column's distinct values are found by one pass over it where dask
runs (the workers), which returns only them; an older file's codes are checked against their
categories the same way. A column is labels, never an input: as the input it is refused, with
the matrices to name instead.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import InputError, InputTypeError
from .anndata_layout import Element, child, elements
from .base import plan_row_chunk, row_range
from .hdf5 import is_array, text_attr
from .uris import Location

NULLABLE = ("nullable-integer", "nullable-boolean", "nullable-string-array")
READABLE = ("categorical", "array", "string-array", *NULLABLE)


@dataclass(frozen=True)
class Column:
    """An obs column: how anndata encodes it, the stored arrays a row block reads (values;
    codes; or values and mask), the field of a compound ``obs``, its categories."""

    name: str
    encoding: str
    parts: tuple[str, ...]
    field: str | None = None
    categories: tuple | None = None
    ordered: bool = False
    legacy: bool = False  # anndata < 0.7: categories from uns, kept when the codes fit


def _decode(value):
    return value.decode("utf-8") if isinstance(value, bytes) else value


def is_text(dtype) -> bool:
    return np.dtype(dtype).kind in "SUTO"


def as_text(block, where: str = "", start: int = 0) -> np.ndarray:
    """A block of stored text (fixed or variable length, bytes or str) as Python strings."""
    block = np.asarray(block)
    kind = block.dtype.kind
    if kind == "S":
        return np.char.decode(block, "utf-8").astype(object)
    if kind in "UT":
        return block.astype(object)
    if kind != "O":
        return block.astype(object)
    out = np.empty(block.shape, dtype=object)
    for i, value in enumerate(block.ravel()):
        value = _decode(value)
        if not isinstance(value, str):
            raise InputTypeError(
                f"The column {where} holds a {type(value).__name__} at row {start + i}; an obs "
                "column read as labels holds text, categories or numbers.",
                "store the column as strings, a categorical or numbers.",
            )
        out.flat[i] = value
    return out


def values(node) -> list:
    """All values of a small array (categories) as Python values."""
    arr = np.asarray(node[...]).reshape(-1)
    if is_text(arr.dtype):
        return [str(v) for v in as_text(arr)]
    return arr.tolist()


def columns(root) -> list[str]:
    """The columns of ``obs``, in order (not its index)."""
    obs = child(root, "obs")
    if obs is None:
        return []
    if is_array(obs):
        return list(np.dtype(obs.dtype).names or ())[1:]
    order = np.atleast_1d(np.asarray(obs.attrs.get("column-order", []), dtype=object))
    return [str(_decode(c)) for c in order]


def describe(root, name: str) -> Column | None:
    """The column ``name`` of ``obs`` in any layout anndata reads, or None."""
    obs = child(root, "obs", strict=True)
    if obs is None:
        return None
    if is_array(obs):  # anndata < 0.7: a compound dataset, the index its first field
        dtype = np.dtype(obs.dtype)
        if name not in (dtype.names or ())[1:]:
            return None
        kind = dtype.fields[name][0]
        if kind.shape:
            return Column(name, f"field of shape {kind.shape}", ("obs",), name)
        if is_text(kind):
            return Column(name, "string-array", ("obs",), name)
        cats = child(root, f"uns/{name}_categories")
        if cats is not None and is_array(cats) and kind.kind in "iu":
            return Column(name, "categorical", ("obs",), name, tuple(values(cats)), legacy=True)
        return Column(name, "array", ("obs",), name)
    if name not in columns(root):
        return None
    stored = f"obs/{name}"
    node = child(root, stored, strict=True)
    if node is None:
        return None
    if is_array(node):
        ref = node.attrs.get("categories")
        if ref is not None:  # dataframe 0.1.0: the codes; the categories in obs/__categories
            cats = child(obs, str(_decode(ref))) if isinstance(ref, (str, bytes)) else obs[ref]
            ordered = bool(cats.attrs.get("ordered", False))
            return Column(name, "categorical", (stored,), None, tuple(values(cats)), ordered)
        return Column(name, "string-array" if is_text(node.dtype) else "array", (stored,))
    encoding = text_attr(node, "encoding-type") or "group"
    if encoding == "categorical":
        ordered = bool(node.attrs.get("ordered", False))
        cats = tuple(values(node["categories"]))
        return Column(name, encoding, (f"{stored}/codes",), None, cats, ordered)
    if encoding in NULLABLE:
        return Column(name, encoding, (f"{stored}/values", f"{stored}/mask"))
    return Column(name, encoding, ())


class ColumnRows:
    """Row-range reader of an obs column as labels (``how``): ``"values"``, the stored
    numbers (a masked entry refused); ``"text"``, stored text as the codes of
    ``categories`` (-1 for a masked or unknown value). ``parts`` are row readers of the
    stored arrays: values, or values and mask. Picklable when they are."""

    def __init__(self, parts, how: str, dtype, where: str, categories=None):
        self.parts, self.how, self.where = list(parts), how, where
        self.dtype, self.shape, self.ndim = np.dtype(dtype), (int(parts[0].shape[0]),), 1
        self.categories = None if categories is None else np.asarray(categories, dtype=object)

    def _blocks(self, start: int, stop: int) -> list[np.ndarray]:
        return [np.asarray(part[start:stop]) for part in self.parts]

    def text(self, start: int, stop: int) -> np.ndarray:
        """Rows ``start:stop`` as Python strings, None where masked."""
        blocks = self._blocks(start, stop)
        text = as_text(blocks[0], self.where, start)
        if len(blocks) > 1:
            text[blocks[1].astype(bool)] = None
        return text

    def __getitem__(self, key):
        start, stop, _ = row_range(key, self.shape[0])
        if self.how == "text":
            return codes_of(self.text(start, stop), self.categories).astype(self.dtype)
        blocks = self._blocks(start, stop)
        if len(blocks) > 1 and blocks[1].astype(bool).any():
            rows = np.flatnonzero(blocks[1].astype(bool)) + start
            shown = ", ".join(str(r) for r in rows[:10]) + (" ..." if len(rows) > 10 else "")
            raise InputError(
                f"The column {self.where} has missing (NA) values at rows {shown}.",
                "fill or drop those cells first (e.g. adata.obs[col].fillna(...)), or name a "
                "column without missing values.",
            )
        return blocks[0].astype(self.dtype, copy=False)


def codes_of(text: np.ndarray, categories: np.ndarray) -> np.ndarray:
    """The positions of ``text`` in the sorted ``categories``; -1 for None and the unknown."""
    out = np.full(len(text), -1, dtype=np.int64)
    present = np.flatnonzero(np.array([v is not None for v in text], dtype=bool))
    if len(categories) and len(present):
        found = text[present]
        pos = np.searchsorted(categories, found)
        hit = categories[np.minimum(pos, len(categories) - 1)] == found
        out[present[hit]] = pos[hit]
    return out


def _distinct(reader: ColumnRows, start: int, stop: int) -> set:
    return {v for v in reader.text(start, stop) if v is not None}


def _distinct_values(reader: ColumnRows, rows: int) -> list[str]:
    """A text column's distinct values, sorted: one pass where dask runs, per row block."""
    import dask

    from .._compute import compute

    n = reader.shape[0]
    tasks = [dask.delayed(_distinct)(reader, a, min(a + rows, n)) for a in range(0, n, rows)]
    found = compute(*tasks, stage="labels") if tasks else ()
    return sorted(set().union(*found))


def open_column(root, loc: Location, opts, kind: str, rows_of, check):
    """(dask array, meta) of the obs column ``loc`` names (``#obs/<column>``).

    ``rows_of(stored, field)`` gives a row reader of a stored array (of one field of a
    compound one); ``check(stored)`` the chunk check of those arrays, or None."""
    import dask.array as da
    from dask.base import tokenize

    element = loc.element.strip("/")
    name, where = element[len("obs/") :], loc.with_element(element)
    if not opts.allow_1d:
        listed = elements(root)
        raise InputTypeError(
            f"The {opts.role} {where} is a column of obs (one annotation per cell), not a "
            "matrix of samples x features.",
            "pass it as --labels (a categorical or text column is read as its codes); as "
            f"the {opts.role}, name a matrix of the {kind}: {listed or 'none'}, e.g. "
            f"{loc.with_element(listed[0] if listed else 'X')}.",
        )
    col = describe(root, name)
    if col is None:
        found = columns(root)
        shown = f"{found[:30]}{' ...' if len(found) > 30 else ''}" if found else "none"
        raise InputError(
            f"No column {name!r} in the obs of the AnnData {kind} {loc.url}; its columns: {shown}.",
            f"fix the #path, e.g. {loc.with_element('obs/' + (found[0] if found else name))}"
            + ("." if found else " with a column the file has."),
        )
    if col.encoding not in READABLE:
        raise InputTypeError(
            f"The column {where} is a {col.encoding}; labels are read from categorical, "
            "string, numeric, boolean and nullable columns.",
            "name another column, or store this one as one of those.",
        )
    parts = [rows_of(stored, col.field) for stored in col.parts]
    stored_dtype = np.dtype(parts[0].dtype)
    text = col.encoding in ("string-array", "nullable-string-array") or (
        col.encoding == "array" and is_text(stored_dtype)
    )
    if not text and stored_dtype.kind not in ("iu" if col.encoding == "categorical" else "fiub"):
        raise InputTypeError(
            f"The column {where} holds {stored_dtype} values; labels are categories, text "
            "or real numbers.",
            "store the column as a categorical, strings or numbers.",
        )
    n = int(parts[0].shape[0])
    rows = max(1, opts.row_chunk or plan_row_chunk(n, 1, 8))
    dtype = np.int32 if text else stored_dtype
    reader = ColumnRows(parts, "text" if text else "values", dtype, where)
    categories = list(col.categories) if col.categories is not None else None
    if text:
        categories = _distinct_values(reader, rows)
        reader.categories = np.asarray(categories, dtype=object)
    arr = da.from_array(
        reader,
        chunks=(rows,),
        asarray=False,
        fancy=False,
        lock=False,
        name="obs-" + tokenize(loc.url, element, col.parts, col.field, col.encoding, n, categories),
    )
    encoding = col.encoding
    if col.legacy and n:  # anndata keeps uns' categories only when every code is among them
        from .._compute import compute

        (top,) = compute(arr.max(), stage="labels")
        if int(top) >= len(categories):
            categories, encoding = None, "array"
    meta = {
        **Element(element, "obs" if col.field else element, col.field).meta(),
        "column": name,
        "encoding": encoding,
        **(
            {"categories": categories, "ordered": bool(col.ordered and not text)}
            if categories is not None
            else {}
        ),
        "_reader": reader,
    }
    checked = check(list(col.parts)) if opts.check_chunks else None
    if checked is not None:
        meta["_check"] = checked
    return arr, meta
