"""A fitted model's large array left in its run store: rows are read when a transform needs
them, so loading a model costs the model's small arrays, not its training data.

`StoredRows` wraps one Zarr array of a run store's ``model/`` group. It is small to pickle
(the array's store and path, not its data), so the tasks of a transform carry it to the
workers, which read the rows themselves, from a local folder or from object storage. The
methods' transforms see it through two calls (``take_rows``, ``row_blocks``; see
``methods._base.rows_at`` and ``row_blocks``) and fall back to NumPy indexing for arrays in
memory. ``np.asarray`` on it reads the whole array.
"""

from __future__ import annotations

import numpy as np

__all__ = ["StoredRows", "MODEL_CHUNK_BYTES", "model_chunks"]

MODEL_CHUNK_BYTES = 16 * 2**20  # a model array's row chunk: what a transform reads at once


def model_chunks(shape: tuple, dtype) -> tuple:
    """Row chunks of about ``MODEL_CHUNK_BYTES`` for a model array (``()``, whole, for a 0-d
    one)."""
    if not shape:
        return ()
    row = int(np.prod(shape[1:], dtype=np.int64)) * np.dtype(dtype).itemsize
    rows = max(1, min(int(shape[0]), MODEL_CHUNK_BYTES // max(1, row)))
    return (rows, *shape[1:])


class StoredRows:
    """A model array in a run store, read by rows on demand.

    Parameters
    ----------
    array : StoredArray
        The stored array (at least 1-D), read strictly (`io.zarr_arrays.StoredArray`).
    """

    def __init__(self, array):
        self._array = array
        self.shape = tuple(int(s) for s in array.shape)
        self.dtype = np.dtype(array.dtype)
        self.ndim = len(self.shape)
        self.size = int(np.prod(self.shape, dtype=np.int64))
        self.nbytes = self.size * self.dtype.itemsize
        self.chunk_rows = int(array.chunks[0]) if self.ndim else 1

    def __repr__(self) -> str:
        return f"StoredRows(shape={self.shape}, dtype={self.dtype}, store={self._array.store})"

    def __len__(self) -> int:
        return self.shape[0]

    def __array__(self, dtype=None, copy=None):
        out = np.asarray(self._array[...])
        return out if dtype is None else out.astype(dtype, copy=False)

    def astype(self, dtype, copy=True):
        """The whole array in memory as ``dtype``."""
        return np.asarray(self).astype(dtype, copy=False)

    def __getitem__(self, key):
        """NumPy indexing; integer arrays of rows through `take_rows`."""
        if isinstance(key, (list, np.ndarray)) and np.asarray(key).dtype.kind in "iu":
            return self.take_rows(key)
        return np.asarray(self._array[key])

    def take_rows(self, idx) -> np.ndarray:
        """``array[idx]`` for integer row numbers of any shape: each stored chunk that holds
        one of them is read once."""
        idx = np.asarray(idx, dtype=np.int64)
        if idx.size == 0:
            return np.empty(idx.shape + self.shape[1:], dtype=self.dtype)
        uniq, inverse = np.unique(idx.ravel(), return_inverse=True)
        if uniq[0] < 0 or uniq[-1] >= self.shape[0]:
            raise IndexError(f"row numbers out of range for {self.shape[0]} stored rows")
        got = self._array.get_orthogonal_selection((uniq,) + (slice(None),) * (self.ndim - 1))
        return np.asarray(got)[inverse].reshape(idx.shape + self.shape[1:])

    def rows(self, start: int, stop: int) -> np.ndarray:
        """Rows ``start:stop``."""
        return np.asarray(self._array[start:stop])

    def row_blocks(self, rows: int | None = None):
        """``(offset, rows)`` for consecutive blocks of the stored chunks' height (or ``rows``),
        read one at a time."""
        step = max(1, int(rows or self.chunk_rows))
        for lo in range(0, self.shape[0], step):
            yield lo, self.rows(lo, min(lo + step, self.shape[0]))

    def to_dask(self, rows: int | None = None):
        """A dask array over the stored chunks (or row blocks of ``rows``)."""
        out = self._array.to_dask()
        return out if rows is None else out.rechunk({0: rows})
