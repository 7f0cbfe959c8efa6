"""Shared estimator plumbing (scikit-learn's protocol: get_params, set_params, clone)."""

from __future__ import annotations

import numpy as np
from sklearn.base import BaseEstimator, TransformerMixin

from .._validation import (
    check_array,
    check_is_fitted,
    check_n_features,
    is_dask,
    is_sparse_input,
    nonfinite_error,
)
from ..blocks.sparse import sparse_matmul
from ..blocks.stats import PANEL_ROWS


class DimredEstimator(TransformerMixin, BaseEstimator):
    """Base of every estimator. scikit-learn is used for its protocol only, not its numerics."""

    # whether fit and transform take sparse X (``sparse_support.SPARSE_METHODS`` by flow name)
    accepts_sparse = False
    # scikit-learn's estimator checks (tests/test_estimator_checks.py finds every estimator
    # the package exports): the parameter sets they run with, and the checks that cannot
    # apply to the method, each with its reason; no parameter sets: the checks cannot run
    # at all, and _check_not_run says why
    _check_params: tuple = ({},)
    _check_exempt: dict = {}
    _check_not_run = ""

    # the method's name in error messages (None: the class name), and the attribute a fit sets
    _method: str | None = None
    _fitted_attr = "embedding_"

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.allow_nan = False
        tags.input_tags.sparse = False
        return tags

    def _keep_params(self, values: dict) -> None:
        """``__init__``'s arguments (its ``locals()``) as the estimator's attributes, as
        scikit-learn's ``get_params`` reads them (the signature stays written out)."""
        for key, value in values.items():
            if key not in ("self", "__class__"):
                setattr(self, key, value)

    def _new_rows(self, X, method: str | None = None):
        """New rows for ``transform``, checked: the estimator is fitted, X is a finite 2-D
        numeric array (NumPy; dask is checked in its first pass) with the fit's columns."""
        check_is_fitted(self, self._fitted_attr)
        X = check_array(X, method=method or self._method or type(self).__name__, min_samples=1)
        check_n_features(self, X, self.n_features_in_)
        return X


class ModelTransform:
    """``transform`` of an estimator whose fit keeps its model in ``_model``: the checked new
    rows through ``_model.transform`` (NumPy, or lazily for dask input)."""

    def transform(self, X):
        """Embed new rows of X with the fitted model.

        Parameters
        ----------
        X : array-like or dask array of shape (n_samples, n_features)
            New rows, with the fit's columns.

        Returns
        -------
        ndarray or dask array of shape (n_samples, n_components)
            Their embedding: NumPy for NumPy input, lazy and chunked like X for dask input.
        """
        X = self._new_rows(X)  # first: an unfitted estimator has no _model
        return self._model.transform(X)


class HasConvergence:
    """``convergence``: the records of the fit's iterative solves (``info["convergence"]``,
    see ``linalg.convergence``); empty when nothing was iterative."""

    @property
    def convergence(self) -> list:
        return list((getattr(self, "info", None) or {}).get("convergence") or [])


# ---- a fitted model's large arrays: in memory, or left in a run store (io.StoredRows), whose
# rows a transform reads when it needs them (on the worker that runs the task)


def is_stored(A) -> bool:
    """Whether ``A`` is a model array left in a run store (``io.StoredRows``)."""
    return hasattr(A, "take_rows") and hasattr(A, "row_blocks")


def rows_at(A, idx) -> np.ndarray:
    """``A[idx]`` for integer row numbers, reading only those rows of a stored array."""
    return A.take_rows(idx) if is_stored(A) else np.asarray(A)[idx]


def row_blocks(A, rows: int | None = None):
    """``(offset, rows)`` blocks of ``A``: one block for an array in memory, the stored
    chunks (read one at a time) for a stored one."""
    if is_stored(A):
        yield from A.row_blocks(rows)
    else:
        yield 0, np.asarray(A)


def row_range(A, start: int, stop: int) -> np.ndarray:
    """Rows ``start:stop`` of ``A`` (in memory or stored)."""
    return A.rows(start, stop) if is_stored(A) else np.asarray(A)[start:stop]


def kept(v):
    """A model array as `from_arrays` keeps it: a stored one stays in its store."""
    return v if is_stored(v) else np.asarray(v)


def like_input(Y: np.ndarray, X, *, cast: bool = False):
    """``Y`` (NumPy, X's rows) in the input's kind: a dask array in X's row chunks when X is
    dask, else NumPy; in X's dtype with ``cast``."""
    if cast:
        Y = np.asarray(Y).astype(X.dtype, copy=False)
    if not is_dask(X):
        return Y
    import dask.array as da

    return da.from_array(Y, chunks=(X.chunks[0],) + tuple(Y.shape[1:]))


def sign_fix(rows: np.ndarray) -> np.ndarray:
    """Flip each row so that its entry of largest magnitude is positive (deterministic signs)."""
    rows = np.array(rows, dtype=np.float64, copy=True)
    if rows.size == 0:
        return rows
    idx = np.argmax(np.abs(rows), axis=1)
    signs = np.sign(rows[np.arange(rows.shape[0]), idx])
    signs[signs == 0] = 1.0
    return rows * signs[:, None]


def column_signs(vectors: np.ndarray) -> np.ndarray:
    """The +-1 per column that `sign_fix` would apply to ``vectors.T`` (largest entry positive)."""
    v = np.asarray(vectors)
    if v.size == 0:
        return np.ones(v.shape[1] if v.ndim == 2 else 0)
    signs = np.sign(v[np.argmax(np.abs(v), axis=0), np.arange(v.shape[1])])
    signs[signs == 0] = 1.0
    return signs


def refuse_nonfinite_block(block: np.ndarray, method: str, block_info=None) -> None:
    """`InputError` for NaN or inf in a block of dask input's rows (``block_info``: dask's
    ``map_blocks`` description of the block, for the rows' numbers in the whole array)."""
    bad = ~np.isfinite(block)
    if bad.any():
        start = block_info[0]["array-location"][0][0] if block_info else 0
        n_nan = int(np.isnan(block).sum())
        rows = start + np.flatnonzero(bad.any(axis=1))
        raise nonfinite_error(method, rows, n_nan, int(bad.sum()) - n_nan, "X")


class PortableFn:
    """A block function as a lazy result holds it in its graph: picklable by the standard
    ``pickle`` too (through cloudpickle, as dask ships functions), so that an estimator whose
    fitted attributes include a lazy array (``embedding_`` of dask input) pickles."""

    def __init__(self, fn):
        self.fn = fn

    def __call__(self, block):
        return self.fn(block)

    def __reduce__(self):
        import cloudpickle

        return _portable, (cloudpickle.dumps(self.fn),)

    def __dask_tokenize__(self):
        from dask.base import tokenize

        return tokenize(self.fn)


def _portable(payload: bytes) -> PortableFn:
    import cloudpickle

    return PortableFn(cloudpickle.loads(payload))


def rowwise(X, fn, n_out: int, dtype):
    """Apply ``fn`` (a block of rows -> (rows, n_out)) lazily to dask input, eagerly to NumPy."""
    if not is_dask(X):
        return fn(X)
    if X.numblocks[1] != 1:
        X = X.rechunk({1: -1})
    return X.map_blocks(PortableFn(fn), chunks=(X.chunks[0], (n_out,)), dtype=dtype)


def centred_product(block, mu: np.ndarray, w: np.ndarray, shift: np.ndarray, dtype):
    """(block - mu) @ w + shift in ``dtype``, a panel of rows at a time (``PANEL_ROWS``, as the
    first pass's kernels take them): the centred rows are made in one reused buffer of a few
    MiB that the product reads while it is in cache, where the expression makes a block-sized
    temporary (new pages from the system for each block, and one more pass over memory).
    Equal to the expression up to rounding: BLAS may order the sums of a panel's product
    differently from a whole block's."""
    x = np.asarray(block)
    n = x.shape[0]
    out = np.empty((n, w.shape[1]), dtype=dtype)
    buf = np.empty((min(PANEL_ROWS, n), x.shape[1]), dtype=dtype)
    for start in range(0, n, PANEL_ROWS):
        panel = x[start : start + PANEL_ROWS]
        b = buf[: panel.shape[0]]
        np.subtract(panel, mu, out=b, dtype=dtype, casting="unsafe")
        np.matmul(b, w, out=out[start : start + panel.shape[0]])
    out += shift
    return out


def sparse_affine(X, w: np.ndarray, mean: np.ndarray, dtype):
    """(X - 1 mean^T) w for sparse ``X`` (CSR, or dask of CSR row blocks) without centring X:
    X w - 1 (mean^T w), the product in X's float dtype (`blocks.sparse.sparse_matmul`), the
    result dense in ``dtype``; lazy for dask input (chunked like its rows), NumPy otherwise."""
    w = np.asarray(w, dtype=np.float64)
    shift = np.asarray(mean, dtype=np.float64) @ w

    def encode(block):
        return (sparse_matmul(block, w) - shift).astype(dtype, copy=False)

    if not is_dask(X):
        return encode(X)
    if X.numblocks[1] != 1:
        X = X.rechunk({1: -1})
    return X.map_blocks(
        encode, chunks=(X.chunks[0], (w.shape[1],)), dtype=dtype, meta=np.empty((0, 0), dtype=dtype)
    )


def affine(X, w: np.ndarray, mean: np.ndarray, dtype, dense_encode):
    """``dense_encode`` row by row for dense X (`rowwise`), `sparse_affine` for sparse X."""
    if is_sparse_input(X):
        return sparse_affine(X, w, mean, dtype)
    return rowwise(X, dense_encode, w.shape[1], dtype)
