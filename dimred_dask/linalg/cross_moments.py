"""One pass over the rows of F (n x p) and D (n x r): counts, means, the centred co-moment
Fc^T Dc and the centred column sums of squares of F, in float64.

Each block gives its summary, merged pairwise in a fixed tree (Chan, Golub & LeVeque's update,
the co-moment analogue of ``blocks.stats``): the value of F^T D - n mu_F mu_D^T without its
cancellation. NaN / inf in either array are reported by the rows that hold them.

Sparse F (CSR rows, or a dask array of CSR row blocks) is centred implicitly: a block's
co-moment is F^T (D - 1 mu_D^T), exactly (Fc^T Dc = F^T Dc, since 1^T Dc = 0), and its sums
of squares the exact centred ones of ``blocks.sparse``; only D's block is dense.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .._compute import compute
from .._validation import format_rows, is_dask, is_sparse_input, nonfinite_error
from ..blocks.sparse import _column_moments, csr64, nonfinite_rows
from ..blocks.stats import MAX_LISTED_ROWS, merge_row_lists, tree_reduce
from ..errors import InputError
from .moments import NUMPY_BLOCK_ROWS, row_blocks

__all__ = ["CrossStats", "cross_stats", "bad_labels"]


def bad_labels(method: str, what: str) -> InputError:
    return InputError(
        f"{method} needs finite labels; found {what}.",
        "impute or drop those rows of X and y together.",
    )


@dataclass
class CrossStats:
    n: int
    mean_x: np.ndarray  # (p,)
    mean_d: np.ndarray  # (r,)
    cross: np.ndarray | None  # (p, r) centred co-moment (X - 1 mean_x^T)^T (Delta - 1 mean_d^T)
    sumsq: np.ndarray  # (p,) centred sum of squares of each column of X
    bad: tuple | None = None  # (which, n_nan, n_inf, listed rows, rows in all) of non-finite values


def _bad_block(x, dl, offset):
    for which, a in (("X", x), ("y", dl)):
        finite = np.isfinite(a)
        if not finite.all():
            rows = np.nonzero(~finite.all(axis=1))[0]
            n_nan = int(np.isnan(a).sum())
            return (
                which,
                n_nan,
                int((~finite).sum()) - n_nan,
                tuple(offset + int(r) for r in rows[:MAX_LISTED_ROWS]),
                int(rows.size),
            )
    return None


def _cross_block(x, dl, offset: int = 0) -> CrossStats:
    x, dl = np.asarray(x, dtype=np.float64), np.asarray(dl, dtype=np.float64)
    p, r = x.shape[1], dl.shape[1]
    if x.shape[0] == 0:
        return CrossStats(0, np.zeros(p), np.zeros(r), np.zeros((p, r)), np.zeros(p))
    with np.errstate(invalid="ignore", over="ignore"):
        mx, md = x.mean(axis=0), dl.mean(axis=0)
        xc = x - mx
        cross, sumsq = xc.T @ (dl - md), np.einsum("ij,ij->j", xc, xc)
    if not (np.isfinite(cross).all() and np.isfinite(sumsq).all()):
        bad = _bad_block(x, dl, offset)
        if bad is not None:
            return CrossStats(x.shape[0], np.zeros(p), np.zeros(r), None, np.zeros(p), bad)
    return CrossStats(x.shape[0], mx, md, cross, sumsq)


def _sparse_cross_block(x, dl, offset: int = 0) -> CrossStats:
    """`_cross_block` of a sparse row block x: F^T (D - 1 mu_D^T), never centring F."""
    dl = np.asarray(dl, dtype=np.float64)
    n, p, r = x.shape[0], x.shape[1], dl.shape[1]
    if n == 0:
        return CrossStats(0, np.zeros(p), np.zeros(r), np.zeros((p, r)), np.zeros(p))
    bad = nonfinite_rows(x, offset)
    if bad is not None:
        return CrossStats(
            n,
            np.zeros(p),
            np.zeros(r),
            None,
            np.zeros(p),
            ("X", bad[1], bad[0] - bad[1], bad[2], bad[3]),
        )
    x = csr64(x)
    with np.errstate(invalid="ignore", over="ignore"):
        md = dl.mean(axis=0)
        mx, sumsq = _column_moments(x)
        cross = x.T @ (dl - md)
    if not (np.isfinite(cross).all() and np.isfinite(sumsq).all()):
        bad = _bad_block(np.zeros((n, 0)), dl, offset)
        if bad is not None:
            return CrossStats(n, np.zeros(p), np.zeros(r), None, np.zeros(p), bad)
    return CrossStats(n, mx, md, np.asarray(cross), sumsq)


def _merge_cross(a: CrossStats, b: CrossStats) -> CrossStats:
    if a.bad or b.bad:
        if a.bad and b.bad and a.bad[0] == b.bad[0]:
            bad = (
                a.bad[0],
                a.bad[1] + b.bad[1],
                a.bad[2] + b.bad[2],
                merge_row_lists(a.bad[3], b.bad[3]),
                a.bad[4] + b.bad[4],
            )
        else:
            bad = a.bad if a.bad and (a.bad[0] == "X" or not b.bad) else b.bad
        return CrossStats(a.n + b.n, a.mean_x, a.mean_d, None, a.sumsq, bad)
    if a.n == 0 or b.n == 0:
        return b if a.n == 0 else a
    n = a.n + b.n
    dx, dd, w = b.mean_x - a.mean_x, b.mean_d - a.mean_d, a.n * b.n / n
    return CrossStats(
        n,
        a.mean_x + dx * (b.n / n),
        a.mean_d + dd * (b.n / n),
        a.cross + b.cross + w * np.outer(dx, dd),
        a.sumsq + b.sumsq + w * dx**2,
    )


def cross_stats(F, D, *, method: str, where: str = "X", stage: str = "X^T H Delta pass"):
    """Means, centred co-moment F_c^T Delta and column sums of squares of F, in one pass."""
    block = _sparse_cross_block if is_sparse_input(F) else _cross_block
    if is_dask(F):
        from dask import delayed

        F = F if F.numblocks[1] == 1 else F.rechunk({1: -1})
        D = D.rechunk({0: F.chunks[0], 1: -1})
        offsets = np.concatenate([[0], np.cumsum(F.chunks[0])[:-1]])
        leaves = [
            delayed(block, pure=True)(f, dl, int(o))
            for f, dl, o in zip(F.to_delayed().ravel(), D.to_delayed().ravel(), offsets)
        ]
        (st,) = compute(tree_reduce(leaves, delayed(_merge_cross, pure=True)), stage=stage)
    else:
        st = tree_reduce(
            [block(F[a:b], D[a:b], a) for a, b in row_blocks(F.shape[0], NUMPY_BLOCK_ROWS)],
            _merge_cross,
        )
    if st.bad is not None:
        which, n_nan, n_inf, rows, n_rows = st.bad
        if which == "X":
            raise nonfinite_error(method, np.array(rows), n_nan, n_inf, where, n_rows=n_rows)
        raise bad_labels(method, f"NaN or inf in the labels ({format_rows(rows, n_rows)} of y)")
    return st
