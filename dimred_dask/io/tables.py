"""Tables as 2-D arrays: Parquet files (one file, a folder or a glob of them) read with Arrow
by row ranges, and CSV through dask.dataframe.

A Parquet input is read where it is computed (on the workers), one regular row block per task:
a block reads only the row groups that overlap it and only the chosen columns. Column types are
checked from the files' schemas (the same in every file) before any data is read, and an
integer or boolean column whose statistics admit nulls is read as float64 (a null becomes NaN,
which the methods then refuse by name).

Chunks are a whole multiple of the largest row group (``meta["stored_chunks"]``, which a
run's chunk plan follows as it does a Zarr array's chunks): Arrow reads a row group whole, so
a chunk smaller than the row groups would read each of them once per chunk it overlaps. With
row groups of one size a chunk reads exactly its own row groups; otherwise at most one extra
row group at each end. A chunk that takes part of a row group is copied out of it, so it does
not hold the whole row group in memory.

A list or fixed-size-list column of numbers (an embedding per row, ``--columns embedding``)
gives one feature per list entry: Arrow's flat values buffer is reshaped to (rows, length),
never passing through Python lists. A fixed-size list's length comes from the schema; a
variable list's from the first row of the first row group (the only data read when opening).
A row whose list has another length, a null list or a null inside one is refused when read,
naming the file, the row group and the row.
"""

from __future__ import annotations

import numpy as np

from ..errors import InputError, InputTypeError, is_storage_error, storage_error
from .base import read_errors
from .uris import Location

PARQUET_SUFFIXES = (".parquet", ".pq")


def _numeric(arrow_type) -> bool:
    import pyarrow as pa

    return (
        pa.types.is_integer(arrow_type)
        or pa.types.is_floating(arrow_type)
        or pa.types.is_boolean(arrow_type)
    )


def _numeric_list(arrow_type) -> bool:
    import pyarrow as pa

    return (
        pa.types.is_list(arrow_type)
        or pa.types.is_large_list(arrow_type)
        or pa.types.is_fixed_size_list(arrow_type)
    ) and _numeric(arrow_type.value_type)


def choose_columns(
    loc: Location,
    available: list[str],
    numeric: list[str],
    columns,
    describe,
    default: list[str] | None = None,
) -> list[str]:
    """The columns to read: the named ones, checked, or ``default`` (every numeric one)."""
    if columns is None:
        default = numeric if default is None else default
        if not default:
            raise InputTypeError(
                f"Methods need numbers; {loc} has no numeric columns (columns: {available}).",
                "convert the columns you want to numbers.",
            )
        return list(default)
    chosen = list(columns)
    missing = [c for c in chosen if c not in available]
    if missing:
        raise InputError(
            f"Columns {missing} are not in {loc}; it has {available}.", "fix --columns."
        )
    bad = [c for c in chosen if c not in numeric]
    if bad:
        raise InputTypeError(
            f"Columns {bad} of {loc} are not numeric "
            f"({', '.join(f'{c}: {describe(c)}' for c in bad)}).",
            f"choose numeric columns, e.g. --columns {','.join(numeric[:4])}.",
        )
    return chosen


def _parquet_files(fs, path: str) -> list[str]:
    """The data files of a Parquet file or folder; as pyarrow's dataset reader, none under a
    name starting with ``_`` or ``.`` (``_temporary/``, ``.ipynb_checkpoints/``, ``_SUCCESS``)."""
    if not fs.isdir(path):
        return [path]
    root = len(path.rstrip("/")) + 1
    names = [
        p
        for p in fs.find(path)
        if not any(part.startswith(("_", ".")) for part in p[root:].split("/"))
    ]
    suffixed = [p for p in names if p.lower().endswith(PARQUET_SUFFIXES)]
    return sorted(suffixed or names)


class ParquetRows:
    """Row-range reader over the row groups of one or more Parquet files, in path order.
    ``widths``: 1 for a scalar column, the list length for a list column. Picklable: it
    carries the URL, the options and the row-group table, never data."""

    def __init__(
        self,
        loc: Location,
        files: list[str],
        groups: list[tuple[int, int, int]],
        columns: list[str],
        dtype,
        widths: list[int] | None = None,
        lists: frozenset = frozenset(),
    ):
        self.loc, self.files, self.columns = loc, files, columns
        self.widths = list(widths) if widths is not None else [1] * len(columns)
        self.lists = frozenset(lists)
        self.groups = np.asarray(groups, dtype=np.int64).reshape(-1, 3)  # (file, group, rows)
        self.starts = np.concatenate([[0], np.cumsum(self.groups[:, 2])])
        self.shape = (int(self.starts[-1]), int(sum(self.widths)))
        self.dtype, self.ndim = np.dtype(dtype), 2

    def __getitem__(self, key):
        import fsspec

        rows = key[0] if isinstance(key, tuple) else key
        start, stop, _ = rows.indices(self.shape[0])
        if stop <= start:  # e.g. dask's probe for the array's type: nothing to read
            return np.empty((0, self.shape[1]), self.dtype)
        first = int(np.searchsorted(self.starts, start, side="right") - 1)
        last = int(np.searchsorted(self.starts, max(start, stop - 1), side="right") - 1)
        fs, _ = fsspec.core.url_to_fs(self.loc.url, **self.loc.storage_options)
        parts, opened, at = [], {}, [first]

        def damaged(exc):
            f, rg = int(self.groups[at[0], 0]), int(self.groups[at[0], 1])
            return InputError(
                f"Could not decode row group {rg} of the Parquet file "
                f"{self.files[f]} ({type(exc).__name__}: {exc}).",
                "the file is damaged or truncated: write it again from its source.",
            )

        try:
            with read_errors(self.loc, damaged, decoder_module="pyarrow"):
                for g in range(first, min(last, len(self.groups) - 1) + 1):
                    at[0] = g
                    f, rg = int(self.groups[g, 0]), int(self.groups[g, 1])
                    if f not in opened:
                        for handle in opened.values():  # one file open at a time
                            handle.close()
                        opened = {f: self._open(fs, self.files[f])}
                    table = _parquet_file(opened[f]).read_row_group(rg, columns=self.columns)
                    parts.append(self._block(table, g))
        finally:
            for handle in opened.values():
                handle.close()
        block = np.concatenate(parts) if parts else np.empty((0, self.shape[1]), self.dtype)
        lo = start - int(self.starts[first])
        rows_of = block[lo : lo + (stop - start)]
        return rows_of if len(rows_of) == len(block) else rows_of.copy()  # not a view of it all

    def _open(self, fs, name: str):
        """A local file as Arrow's own file (its reads land in Arrow's memory pool, not in
        Python bytes that the allocator may hand back to the system after each read), else
        through fsspec."""
        if self.loc.is_local:
            import pyarrow as pa

            return pa.OSFile(name, "rb")
        return fs.open(name, "rb")

    def _block(self, table, g: int) -> np.ndarray:
        if not self.columns:
            return np.empty((table.num_rows, 0), self.dtype)
        cols = []
        for c, width in zip(self.columns, self.widths):
            if c in self.lists:
                cols.append(self._list_values(table.column(c), c, width, g))
            else:
                cols.append(_to_numpy(table.column(c), self.dtype)[:, None])
        return cols[0] if len(cols) == 1 else np.hstack(cols)

    def _list_values(self, column, name: str, width: int, g: int) -> np.ndarray:
        """(rows, width) from a list column's flat values buffer; refused by row group."""
        import pyarrow as pa
        import pyarrow.compute as pc

        arr = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
        f, rg = int(self.groups[g, 0]), int(self.groups[g, 1])
        where = f"the list column {name!r} of the Parquet file {self.files[f]}, row group {rg}"
        if arr.null_count:
            row = int(np.flatnonzero(arr.is_null().to_numpy(zero_copy_only=False))[0])
            raise self._list_error(where, _count(arr.null_count, "null list"), row, g)
        if not pa.types.is_fixed_size_list(arr.type):
            lengths = pc.list_value_length(arr).to_numpy(zero_copy_only=False)
            bad = np.flatnonzero(lengths != width)
            if bad.size:
                raise self._list_error(
                    where,
                    f"{_count(bad.size, 'list')} whose length is not "
                    f"{width} (e.g. {int(lengths[bad[0]])})",
                    int(bad[0]),
                    g,
                )
        values = arr.flatten()
        if values.null_count:
            row = int(np.flatnonzero(values.is_null().to_numpy(zero_copy_only=False))[0]) // width
            raise self._list_error(
                where, f"{_count(values.null_count, 'null value')} inside its lists", row, g
            )
        out = np.asarray(values.to_numpy(zero_copy_only=False), dtype=self.dtype)
        return out.reshape(len(arr), width)

    def _list_error(self, where: str, what: str, row: int, g: int) -> InputError:
        return InputError(
            f"{where[0].upper()}{where[1:]} has {what} (first at row "
            f"{int(self.starts[g]) + row} of the input); each row needs one "
            "list of the same length, without nulls.",
            "fill or drop those rows (or pad the lists to one length) and write the file again.",
        )


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


def _to_numpy(column, dtype):
    import pyarrow as pa

    if column.null_count and not pa.types.is_floating(column.type):
        column = column.cast(pa.float64())
    return np.asarray(column.to_numpy(), dtype=dtype)


def _parquet_file(handle):
    import pyarrow.parquet as pq

    return pq.ParquetFile(handle)


def _leaf_index(meta, name: str) -> int:
    """Index of the Parquet leaf column of the top-level scalar column ``name`` (its path is
    the name itself, which may hold dots)."""
    schema = meta.schema
    return next(i for i in range(len(schema)) if schema.column(i).path == name)


def _may_have_nulls(meta, index: int) -> bool:
    for rg in range(meta.num_row_groups):
        stats = meta.row_group(rg).column(index).statistics
        if stats is None or not stats.has_null_count or stats.null_count:
            return True
    return False


def _list_width(loc: Location, fs, files: list[str], groups, name: str, arrow_type) -> int:
    """A list column's length: from the schema (fixed size), else from its first row."""
    import pyarrow as pa

    if pa.types.is_fixed_size_list(arrow_type):
        return int(arrow_type.list_size)
    for f, rg, count in groups:
        if count:
            with fs.open(files[f], "rb") as handle:
                batch = next(
                    _parquet_file(handle).iter_batches(
                        batch_size=1, row_groups=[rg], columns=[name]
                    )
                )
            first = batch.column(0)[0]
            if not first.is_valid:
                raise InputError(
                    f"The list column {name!r} of the Parquet file {files[f]}, row "
                    f"group {rg} has a null list in its first row.",
                    "fill or drop that row and write the file again.",
                )
            return len(first)
    return 0


def _pandas_index(schema) -> set[str]:
    """The columns holding a pandas index (``to_parquet`` stores one that is not a range)."""
    try:
        entries = (schema.pandas_metadata or {}).get("index_columns", [])
    except (ValueError, TypeError):
        return set()
    return {e for e in entries if isinstance(e, str)}


def _schema_columns(loc, schema, columns) -> tuple[list[str], set[str]]:
    """(the chosen columns, those that are lists) from the first file's schema; by default
    not a pandas index, which labels the rows rather than measures them."""
    available = list(schema.names)
    scalars = [c for c in available if _numeric(schema.field(c).type)]
    lists = [c for c in available if _numeric_list(schema.field(c).type)]
    index = _pandas_index(schema)

    def describe(c):
        return schema.field(c).type

    data = [c for c in scalars if c not in index] or [c for c in lists if c not in index]
    chosen = choose_columns(loc, available, scalars + lists, columns, describe, default=data)
    return chosen, {c for c in chosen if c in lists}


def _file_metadata(fs, name: str):
    try:
        with fs.open(name, "rb") as handle:
            return _parquet_file(handle).metadata
    except Exception as exc:
        if is_storage_error(exc) and not type(exc).__module__.startswith("pyarrow"):
            raise storage_error(exc, f"Opening {name}") from None
        raise InputError(
            f"Could not read {name} as Parquet ({type(exc).__name__}: {exc}).",
            "check that it is a valid Parquet file.",
        ) from None


def open_parquet(loc: Location, fs, path: str, columns, row_chunk, plan, files=None):
    """(dask array, meta) for the Parquet file, folder or list of ``files`` at ``path``;
    reads metadata only (and a variable list column's first row)."""
    import dask.array as da
    from dask.base import tokenize

    files = list(files) if files is not None else _parquet_files(fs, path)
    if not files:
        raise InputError(
            f"The folder {loc} holds no Parquet files.",
            "point --input at a .parquet file or a folder of them.",
        )
    schema, groups, nullable = None, [], set()
    for i, name in enumerate(files):
        meta = _file_metadata(fs, name)
        file_schema = meta.schema.to_arrow_schema()
        if schema is None:
            schema = file_schema
            chosen, lists = _schema_columns(loc, schema, columns)
        mismatched = [
            c
            for c in chosen
            if c not in file_schema.names or file_schema.field(c).type != schema.field(c).type
        ]
        if mismatched:
            theirs = [
                str(file_schema.field(c).type) if c in file_schema.names else "none"
                for c in mismatched
            ]
            raise InputError(
                f"The Parquet files of {loc} disagree on columns {mismatched}: "
                f"{files[0]} has {[str(schema.field(c).type) for c in mismatched]}, "
                f"{name} has {theirs}.",
                "write every file with the same schema, or choose other columns.",
            )
        nullable |= {
            c
            for c in chosen
            if c not in lists
            and meta.num_row_groups
            and _may_have_nulls(meta, _leaf_index(meta, c))
        }
        groups += [(i, rg, meta.row_group(rg).num_rows) for rg in range(meta.num_row_groups)]
    types = [
        schema.field(c).type.value_type if c in lists else schema.field(c).type for c in chosen
    ]
    dtype = (
        np.result_type(*[np.dtype(t.to_pandas_dtype()) for t in types])
        if types
        else np.dtype(np.float64)
    )
    if dtype.kind in "iub" and nullable:
        dtype = np.dtype(np.float64)  # nulls become NaN (refused later, by row)
    widths = [
        _list_width(loc, fs, files, groups, c, schema.field(c).type) if c in lists else 1
        for c in chosen
    ]
    reader = ParquetRows(loc, files, groups, chosen, dtype, widths, frozenset(lists))
    n, d = reader.shape
    largest = max((count for _, _, count in groups), default=0)
    rows = row_chunk or plan(n, d, dtype.itemsize, base=max(1, largest))
    name = "parquet-" + tokenize(loc.url, files, groups, chosen, widths, str(dtype))
    arr = da.from_array(
        reader,
        chunks=(max(1, min(rows, max(n, 1))), d),
        asarray=False,
        fancy=False,
        lock=False,
        name=name,
    )
    return arr, {
        "columns": chosen,
        "files": len(files),
        "row_groups": len(groups),
        **({"stored_chunks": [largest, d]} if largest else {}),
        **({"list_columns": {c: w for c, w in zip(chosen, widths) if c in lists}} if lists else {}),
        "_reader": reader,
    }


def open_csv(loc: Location, columns, row_chunk, urls: list[str] | None = None):
    """(dask array, meta) for a CSV file, or the CSV shards ``urls`` in order, through
    dask.dataframe (their lengths are counted here, which reads them once: a value that does
    not parse is reported now, by column)."""
    import dask.dataframe as dd
    from pandas.api.types import is_complex_dtype, is_numeric_dtype

    try:
        df = dd.read_csv(
            urls or loc.url, storage_options=loc.storage_options or None, blocksize="64MB"
        )
    except Exception as exc:
        if is_storage_error(exc):
            raise storage_error(exc, f"Opening {loc}", location=loc) from None
        raise InputError(
            f"Could not read {loc} as CSV ({type(exc).__name__}: {exc}).",
            "check that it is a valid CSV file.",
        ) from None
    available = list(df.columns)
    numeric = [
        c for c in available if is_numeric_dtype(df[c].dtype) and not is_complex_dtype(df[c].dtype)
    ]
    chosen = choose_columns(loc, available, numeric, columns, lambda c: df[c].dtype)
    dtypes = [df[c].dtype for c in chosen]
    frame = df[chosen]
    if len(set(dtypes)) > 1 and all(isinstance(t, np.dtype) for t in dtypes):
        frame = frame.astype(np.result_type(*dtypes))  # pandas joins bool and numbers as objects
    try:
        arr = frame.to_dask_array(lengths=True)
    except Exception as exc:
        if is_storage_error(exc):
            raise storage_error(exc, f"Reading {loc}", location=loc) from None
        raise _csv_value_error(loc, chosen, exc) from None
    if row_chunk:
        arr = arr.rechunk({0: row_chunk})
    return arr, {"columns": chosen}


def _csv_value_error(loc: Location, chosen: list[str], exc: Exception) -> InputError:
    """What dask/pandas say about a CSV that does not parse, in the user's terms."""
    import re

    text = str(exc)
    if isinstance(exc, UnicodeDecodeError):
        return InputError(
            f"{loc} is not UTF-8 text ({exc.reason} at byte {exc.start} of a block).",
            "check the file (damaged, or another encoding: convert it to UTF-8).",
        )
    named = [
        c
        for c in chosen
        if re.search(rf"\|\s*{re.escape(str(c))}\s*\|", text)
        or re.search(rf"^- {re.escape(str(c))}$", text, re.M)
    ]
    values = re.findall(r"could not convert string to float: '([^']*)'", text)
    if named or values:
        where = f"column(s) {named}" if named else "a column"
        example = f" (e.g. {values[0]!r})" if values else ""
        return InputTypeError(
            f"{where} of {loc} hold values that are not numbers{example}, "
            "past the rows used to guess the column types.",
            "fix or remove those values, or leave the column(s) out with --columns.",
        )
    first = text.strip().splitlines()[0] if text.strip() else type(exc).__name__
    return InputError(
        f"Could not parse {loc} as CSV ({type(exc).__name__}: {first}).",
        "check the file: every line needs the header's number of fields.",
    )
