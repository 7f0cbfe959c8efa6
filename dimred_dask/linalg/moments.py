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
from ..errors import InputError
from ..blocks.sparse import sparse_block_stats
from ..blocks.stats import BlockStats, block_stats, merge_many, merge_stats, tree_reduce

NUMPY_BLOCK_ROWS = 32768


def row_blocks(n: int, size: int):
    return [(s, min(n, s + size)) for s in range(0, n, size)]


def column_stats(X, *, gram: bool = True, method: str = "PCA", where: str = "X",
                 stage: str = "moments") -> BlockStats:
    """Mean, scatter and per-column sum of squares of ``X`` in float64, in one pass.

    Raises `InputError` naming the rows when ``X`` holds NaN or inf.
    """
    kernel = sparse_block_stats if is_sparse_input(X) else block_stats
    if is_dask(X):
        stats = _dask_stats(X, gram=gram, stage=stage, kernel=kernel)
    else:
        stats = merge_many(kernel(X[a:b], a, gram=gram)
                           for a, b in row_blocks(X.shape[0], NUMPY_BLOCK_ROWS))
    check_stats(stats, method, where)
    return stats


def check_stats(stats: BlockStats, method: str, where: str) -> None:
    """Raise `InputError` naming the rows when a pass found NaN / inf, or values too large to
    square in float64."""
    if stats.nonfinite:
        raise nonfinite_error(method, np.array(stats.bad_rows), stats.n_nan,
                              stats.nonfinite - stats.n_nan, where, n_rows=stats.n_bad_rows)
    if stats.overflow:
        raise InputError(
            f"{method} cannot square and sum the values of {where}: they reach "
            f"{stats.overflow:.3g} ({format_rows(stats.bad_rows, stats.n_bad_rows)}), beyond "
            "what float64 holds once squared.",
            "check those rows (values this large are usually damaged data), or rescale the "
            "columns before the run.")


def _dask_stats(X, *, gram: bool, stage: str, kernel=block_stats) -> BlockStats:
    from dask import delayed

    if X.numblocks[1] != 1:
        X = X.rechunk({1: -1})
    offsets = np.concatenate([[0], np.cumsum(X.chunks[0])[:-1]])
    # the merge order is fixed by this list, so results do not depend on the schedule
    leaves = [delayed(kernel, pure=True)(blk, int(off), gram=gram)
              for blk, off in zip(X.to_delayed().ravel(), offsets)]
    (stats,) = compute(tree_reduce(leaves, delayed(merge_stats, pure=True)), stage=stage)
    return stats
