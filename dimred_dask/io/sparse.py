"""Sparse inputs as dask arrays of CSR row blocks, read by row range on the workers.

A sparse input is a dask array whose chunks are ``scipy.sparse.csr_matrix`` row blocks holding
all the columns (``chunks=(rows, (d,))``, ``meta=csr_matrix((0, d), dtype)``). Every reader
here works from the three arrays of a compressed sparse matrix (``indptr``, ``indices``,
``data``) wherever they are stored: datasets of an HDF5 file, arrays of a Zarr group, members
of a ``.npz`` file. Each task opens its source itself and reads only what its rows need:

- CSR: ``indptr[a:b+1]``, then ``indices`` and ``data`` between its first and last value
  (what anndata's ``CSRDataset[a:b]`` reads).
- CSC: the rows of a block are spread over every column, so a block is found by scanning
  ``indices`` in slabs of ``SLAB_ENTRIES`` and keeping the entries of its rows (memory stays
  bounded; the cost is one pass over the element per row block). The openers allow that up to
  ``SCAN_MAX_BYTES`` of stored indices and data, and refuse a larger CSC element with the fix
  (convert it to CSR once), because its read would grow with the square of its size.

Damaged structure (an ``indptr`` that decreases or points past the data, column indices out
of range) is an `InputError` naming the element and the rows; NaN and inf among the stored
values are refused by the reader, naming their rows, when the block is read.
"""

from __future__ import annotations

import contextlib

import numpy as np

from .._validation import describe_nonfinite
from ..errors import InputError
from .base import read_errors, row_range

SCAN_MAX_BYTES = 512 * 2**20  # a CSC element (or a deflated .npz) read by scanning, at most
SLAB_ENTRIES = 1 << 22  # entries per slab of a CSC scan (about 48 MiB of indices and data)


def plan_sparse_rows(n: int, nnz: int, entry_bytes: int, target_bytes: int) -> int:
    """Rows per chunk so that a chunk holds about ``target_bytes`` of data and indices."""
    per_row = max(nnz, 1) / max(n, 1) * entry_bytes + 8  # + the row's indptr entry
    return int(min(max(n, 1), max(1, target_bytes // per_row)))


def sparse_meta(shape, nnz: int, layout: str) -> dict:
    n, d = shape
    return {
        "sparse": True,
        "nnz": int(nnz),
        "layout": layout,
        "density": float(nnz) / (n * d) if n and d else 0.0,
    }


class SparseRows:
    """Row-range reader giving ``csr_matrix`` blocks from a compressed sparse ``source``.

    ``source`` has ``where`` (a name for messages) and ``open()``, a context manager giving
    ``(indptr, indices, data)``: objects sliced with ``[start:stop]`` into NumPy arrays, which
    raise `InputError` / `StoreError` naming what failed. Picklable when the source is."""

    def __init__(self, source, shape, dtype, layout: str, nnz: int):
        self.source, self.shape, self.dtype = source, tuple(int(s) for s in shape), np.dtype(dtype)
        self.layout, self.nnz, self.ndim = layout, int(nnz), 2

    def __getitem__(self, key):
        start, stop, cols = row_range(key, self.shape[0], self.shape[1])
        with (
            read_errors(
                self.source.where,
                lambda exc: InputError(
                    f"Could not read rows {start}-{stop - 1} of the sparse matrix "
                    f"{self.source.where} ({type(exc).__name__}: {exc}).",
                    "the file is damaged or was changed after the run started: write it again "
                    "from its source.",
                ),
            ),
            self.source.open() as (indptr, indices, data),
        ):
            read = self._csr_rows if self.layout == "csr" else self._csc_rows
            block = read(start, stop, indptr, indices, data)
        self._check_finite(block, start)
        return block if cols == slice(None) else block[:, cols]

    def _damaged(self, start: int, stop: int, what: str) -> InputError:
        return InputError(
            f"The sparse matrix {self.source.where} is damaged: {what} (rows {start}-{stop - 1}).",
            "write the matrix again from its source (an interrupted copy or "
            "write leaves it inconsistent).",
        )

    def _csr_rows(self, start, stop, indptr, indices, data):
        import scipy.sparse as sp

        ptr = np.asarray(indptr[start : stop + 1], dtype=np.int64)
        if (
            len(ptr) != stop - start + 1
            or (len(ptr) and (ptr[0] < 0 or ptr[-1] > self.nnz))
            or np.any(np.diff(ptr) < 0)
        ):
            raise self._damaged(
                start,
                stop,
                f"its indptr is not a non-decreasing run of "
                f"offsets within its {self.nnz} stored values",
            )
        p0, p1 = (int(ptr[0]), int(ptr[-1])) if len(ptr) else (0, 0)
        idx, val = np.asarray(indices[p0:p1]), np.asarray(data[p0:p1])
        self._check_indices(idx, val, p1 - p0, self.shape[1], start, stop)
        return sp.csr_matrix(
            (val.astype(self.dtype, copy=False), idx, ptr - p0), shape=(stop - start, self.shape[1])
        )

    def _csc_rows(self, start, stop, indptr, indices, data):
        import scipy.sparse as sp

        d = self.shape[1]
        ptr = np.asarray(indptr[0 : d + 1], dtype=np.int64)
        if len(ptr) != d + 1 or np.any(np.diff(ptr) < 0) or ptr[0] != 0 or ptr[-1] > self.nnz:
            raise self._damaged(
                start,
                stop,
                "its column indptr is not a non-decreasing run "
                f"of offsets within its {self.nnz} stored values",
            )
        rows, cols, vals = [], [], []
        for p in range(0, int(ptr[-1]), SLAB_ENTRIES):
            q = min(p + SLAB_ENTRIES, int(ptr[-1]))
            idx = np.asarray(indices[p:q])
            self._check_indices(idx, idx, q - p, self.shape[0], start, stop)
            keep = (idx >= start) & (idx < stop)
            if keep.any():
                val = np.asarray(data[p:q])
                self._check_indices(idx, val, q - p, self.shape[0], start, stop)
                where = np.flatnonzero(keep)
                rows.append(idx[where] - start)
                cols.append(np.searchsorted(ptr, where + p, side="right") - 1)
                vals.append(val[where])

        def cat(parts, dt):
            return np.concatenate(parts) if parts else np.empty(0, dt)

        return sp.csr_matrix(
            (
                cat(vals, self.dtype).astype(self.dtype, copy=False),
                (cat(rows, np.int64), cat(cols, np.int64)),
            ),
            shape=(stop - start, d),
        )

    def _check_indices(self, idx, val, expected: int, bound: int, start: int, stop: int):
        if len(idx) != expected or len(val) != expected:
            raise self._damaged(
                start, stop, f"{expected} stored values expected, {min(len(idx), len(val))} found"
            )
        if idx.size and (idx.min() < 0 or idx.max() >= bound):
            raise self._damaged(
                start, stop, f"an index lies outside the matrix's shape {self.shape}"
            )

    def _check_finite(self, block, start: int) -> None:
        if block.dtype.kind != "f" or not block.nnz:
            return
        bad = ~np.isfinite(block.data)
        if not bad.any():
            return
        where = np.flatnonzero(bad)
        rows = np.searchsorted(block.indptr, where, side="right") - 1 + start
        n_nan = int(np.isnan(block.data[where]).sum())
        raise InputError(
            f"Methods need finite values; found "
            f"{describe_nonfinite(rows, n_nan, len(where) - n_nan, self.source.where)} "
            "among its stored (nonzero) values.",
            "impute or drop those rows before the run (NaN and inf cannot be embedded).",
        )


def sparse_array(reader: SparseRows, rows: int, name: str):
    """The dask array of ``reader``'s CSR row blocks, ``rows`` rows each (the last fewer)."""
    import dask.array as da
    import scipy.sparse as sp

    n, d = reader.shape
    rows = max(1, min(int(rows), max(n, 1)))
    return da.from_array(
        reader,
        chunks=(rows, d),
        asarray=False,
        fancy=False,
        lock=False,
        name=name,
        meta=sp.csr_matrix((0, d), dtype=reader.dtype),
    )


def scan_limit_error(where: str, stored_bytes: int, why: str, fix: str) -> InputError:
    return InputError(
        f"The sparse matrix {where} is {why}: reading it by rows scans all of it once per row "
        f"block, allowed up to {SCAN_MAX_BYTES / 2**20:,.0f} MiB; it holds "
        f"{stored_bytes / 2**20:,.0f} MiB.",
        fix,
    )


class Ranges:
    """``(indptr, indices, data)`` accessors of one source, opened together (``open()``)."""

    def __init__(self, where: str, arrays):
        self.where, self.arrays = where, tuple(arrays)

    @contextlib.contextmanager
    def open(self):
        yield self.arrays
