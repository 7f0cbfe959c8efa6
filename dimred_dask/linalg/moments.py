"""One pass over the rows: count, mean, centred scatter (optional) and a finiteness check.

The finiteness check rides on this pass (a block with NaN/inf reports where they are instead
of its statistics), so validating the values of a dask array costs no pass of its own.
Sparse input (`_validation.is_sparse_input`) takes the same pass with the sparse block kernel
(``blocks.sparse.sparse_block_stats``: centred implicitly, NaN / inf among the stored values).
"""

from __future__ import annotations

import numpy as np

from .._compute import compute
from .._validation import format_rows, is_dask, is_sparse_input, nonfinite_error
from ..blocks.sparse import sparse_block_stats
from ..blocks.stats import BlockStats, block_stats, merge_many, merge_stats, tree_reduce
from ..errors import InputError

NUMPY_BLOCK_ROWS = 32768


def row_blocks(n: int, size: int):
    """The consecutive row ranges of ``size`` rows that cover ``n`` rows.

    Parameters
    ----------
    n : int
        The number of rows.
    size : int
        Rows per block, > 0.

    Returns
    -------
    list of tuple of int
        ``(start, stop)`` half-open ranges in order; the last one may be shorter, and the
        list is empty for n = 0.
    """
    return [(s, min(n, s + size)) for s in range(0, n, size)]


def column_stats(
    X, *, gram: bool = True, method: str = "PCA", where: str = "X", stage: str = "moments"
) -> BlockStats:
    """Mean, scatter and per-column sum of squares of ``X`` in float64, in one pass.

    Row blocks are summarised separately and merged exactly (Chan, Golub & LeVeque 1979).
    NumPy or in-memory sparse ``X`` is read here in blocks of ``NUMPY_BLOCK_ROWS`` rows. A
    dask ``X`` (columns rechunked to one chunk) gets one task per row chunk, merged in a
    fixed tree on the active distributed client (else dask's threaded scheduler), so the
    result does not depend on the schedule. Sparse rows (``scipy.sparse``, or dask chunks of
    CSR blocks) use the sparse kernel, centred implicitly. The finiteness check rides on
    the same pass.

    Parameters
    ----------
    X : array-like, dask array or sparse matrix of shape (n_samples, n_features)
        The data rows; an in-memory sparse ``X`` must allow row slicing (CSR).
    gram : bool, default True
        Also the d x d centred scatter matrix; False: only the mean and the per-column sums
        of squares.
    method : str, default "PCA"
        The method's name in error messages.
    where : str, default "X"
        The name of the input in error messages.
    stage : str, default "moments"
        The dask computation's stage name in progress reports.

    Returns
    -------
    BlockStats
        ``n`` (rows), ``mean`` (d,), ``m2`` = (X - mean)ᵀ (X - mean) of shape (d, d) or None
        when ``gram`` is False, ``sumsq`` (d,) the centred sums of squares; all float64.

    Raises
    ------
    InputError
        ``X`` holds NaN or inf (the message names the first rows), or values too large to
        square and sum in float64.
    """
    kernel = sparse_block_stats if is_sparse_input(X) else block_stats
    if is_dask(X):
        stats = _dask_stats(X, gram=gram, stage=stage, kernel=kernel)
    else:
        stats = merge_many(
            kernel(X[a:b], a, gram=gram) for a, b in row_blocks(X.shape[0], NUMPY_BLOCK_ROWS)
        )
    check_stats(stats, method, where)
    return stats


def check_stats(stats: BlockStats, method: str, where: str) -> None:
    """Raise `InputError` naming the rows when a pass found NaN / inf, or values too large to
    square in float64."""
    if stats.nonfinite:
        raise nonfinite_error(
            method,
            np.array(stats.bad_rows),
            stats.n_nan,
            stats.nonfinite - stats.n_nan,
            where,
            n_rows=stats.n_bad_rows,
        )
    if stats.overflow:
        raise InputError(
            f"{method} cannot square and sum the values of {where}: they reach "
            f"{stats.overflow:.3g} ({format_rows(stats.bad_rows, stats.n_bad_rows)}), beyond "
            "what float64 holds once squared.",
            "check those rows (values this large are usually damaged data), or rescale the "
            "columns before the run.",
        )


def _in_cell(block, *args, fn=None, block_info=None):
    out = np.empty((1, 1), dtype=object)
    out[0, 0] = fn(block, int(block_info[0]["array-location"][0][0]), *args)
    return out


def _cell(x):
    return x[0, 0]


def block_tasks(X, fn, *args) -> list:
    """One delayed ``fn(block, offset, *args)`` per row block of the dask array ``X`` (whole
    rows), in row order; ``args`` may hold Delayed objects (one copy each in the graph).

    The read of each block and ``fn`` run in one task (dask fuses the block's getter into it),
    so a worker's threads each read then compute, out of step with one another, and the block
    is freed when its task ends: with a read task and a kernel task per block, a pass took
    about the sum of its read and its compute, as the workers read and computed in lockstep
    (bench/HISTORY.md, PCA out of core in one pass)."""
    from dask import delayed

    if X.numblocks[1] != 1:
        X = X.rechunk({1: -1})
    from dask.base import tokenize

    kernel = getattr(fn, "func", fn)  # the tasks are named after the kernel (a partial's too)
    cells = X.map_blocks(
        _in_cell,
        *args,
        fn=fn,
        dtype=object,
        chunks=((1,) * X.numblocks[0], (1,)),
        meta=np.empty((0, 0), dtype=object),
        name=f"{kernel.__name__}-{tokenize(X, fn, *args)}",
    )
    return [delayed(_cell, pure=True)(c) for c in cells.to_delayed().ravel()]


def _dask_stats(X, *, gram: bool, stage: str, kernel=block_stats) -> BlockStats:
    from functools import partial

    from dask import delayed

    # the merge order is fixed by this list, so results do not depend on the schedule
    leaves = block_tasks(X, partial(kernel, gram=gram))
    (stats,) = compute(tree_reduce(leaves, delayed(merge_stats, pure=True)), stage=stage)
    return stats
