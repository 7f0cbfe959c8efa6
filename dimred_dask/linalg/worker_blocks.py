"""The worker side of the worker-side LOBPCG (`worker_lobpcg`): each row block's operator
rows and iteration buffers, held in the memory of one worker process for a whole solve, and
the tasks that make, read and drop them.

The caller (`worker_lobpcg._Solve`) pins every task of a block to the block's worker and
orders the tasks that write a buffer after those that read it.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from .gram_lobpcg import start_block

__all__: list = []

SPARSE_ROWS = 0.5  # a part of a block's rows reaching fewer of them holds those rows only
WHOLE_SHARE = 0.5  # a block read at this share of its rows or more is sent whole

# The blocks held by this worker process, by (solve id, block number). A block's buffers are
# written in place (fresh n x 3p arrays every iteration cost more than the arithmetic: page
# faults, as in `gram_lobpcg`), so every task of a block is pinned to its worker, and the
# caller orders the tasks that write a buffer after those that read it.
_BLOCKS: dict = {}


class _Block:
    """One row block's operator rows and LOBPCG buffers: S = [X, W, P] and M S side by
    side in two n_i x 3p arrays (W's slot holds W0 = T R until the search directions are
    made), Y for A W0 on its way to A^T (A W0) (a Gram operator's only). Products with the
    small coefficient matrices go a run of rows at a time into S and M S themselves, so
    that the only other n_i x p array is C, the contiguous copy of a slot of S that a
    sparse product reads. The operator's rows are held cut by the block their columns
    belong to (`_split`), so that a product adds each block's part as it arrives instead of
    stacking the rows it reads."""

    def __init__(self, ops, dinv, q, i, a, b, p, seed):
        self.ops, self.dinv, self.q, self.i, self.p = ops, dinv, q, i, p
        n = b - a
        self.S, self.MS = np.empty((n, 3 * p)), np.empty((n, 3 * p))
        self.S[:, :p] = start_block(a, b, p, seed)
        self.Y = np.empty((n, p)) if len(ops) > 1 else None
        # a slot of S copied whole before a sparse product: SciPy copies a strided V whole
        # for every product with it, i.e. for every run of the operator's rows
        self.C = np.empty((n, p))
        self.m = 2 * p  # columns of S in use: no P before the first update

    def view(self, name):
        p = self.p
        return {
            "X": self.S[:, :p],
            "W": self.S[:, p : 2 * p],
            "P": self.S[:, 2 * p :],
            "MX": self.MS[:, :p],
            "MW": self.MS[:, p : 2 * p],
            "MP": self.MS[:, 2 * p :],
            "Y": self.Y,
        }[name]

    def rows(self, name, sel):
        V = self.view(name)
        return np.array(V) if sel is None else V[sel]

    def apply(self, which, name, out, own_sel, js, *parts):
        """out = (A V)_i or (A^T V)_i (``which``) begun: this block's own part (its rows of V,
        ``name``, the rows ``own_sel``) and the parts of blocks ``js`` (the rows cut from
        them); `add` brings the rest."""
        V, O = self.view(name), self.view(out)
        rows, _ = self.ops[which][self.i]
        if rows is not None:  # the own part does not reach every row
            O[:] = 0.0
        if own_sel is not None:
            V = V[own_sel]  # a copy, contiguous
        elif not V.flags.c_contiguous:
            np.copyto(self.C, V)
            V = self.C
        self._add(which, self.i, V, O, rows is None)
        self.add(which, out, js, *parts)

    def add(self, which, out, js, *parts):
        """out += the parts of blocks ``js``: the rows of V cut from them."""
        O = self.view(out)
        for j, part in zip(js, parts):
            self._add(which, j, part, O, False)

    def _add(self, which, j, V, O, first):
        rows, M = self.ops[which][j]
        for r, run in M.runs:
            at = r if rows is None else rows[r]  # a part reaching few rows: those
            if first:
                O[at] = run @ V
            else:
                O[at] += run @ V

    def moments(self):
        X = self.view("X")
        return X.T @ X, None if self.q is None else self.q.T @ X

    def minus_null(self, coef):
        if self.q is not None:
            self.view("X")[:] -= self.q @ coef

    def start_grams(self):
        X, MX = self.view("X"), self.view("MX")
        return X.T @ X, X.T @ MX

    def start_ritz(self, c, w):
        p = self.p
        for A in (self.S, self.MS):
            for r in _runs(A.shape[0]):
                A[r, :p] = A[r, :p] @ c
        return self.residual(w)

    def residual(self, w):
        """W0 = T R into W's slot (R = M X - X diag(w)); returns the column sums of R^2 and
        X^T W0, q^T W0, X^T q for the caller to sum over the blocks."""
        X, MX, W = self.view("X"), self.view("MX"), self.view("W")
        np.multiply(X, w, out=W)
        np.subtract(MX, W, out=W)
        r2 = np.einsum("ij,ij->j", W, W)
        W *= self.dinv[:, None]
        q = self.q
        return r2, X.T @ W, None if q is None else q.T @ W, None if q is None else X.T @ q

    def grams(self, qW, C):
        """W = W0 - q (q^T W0) - X C and M W = M W0 - M X C (M q = 0) in their slots; returns
        S^T S and S^T M S over the columns in use."""
        X, MX, W, MW = self.view("X"), self.view("MX"), self.view("W"), self.view("MW")
        for r in _runs(W.shape[0]):
            W[r] -= X[r] @ C
            if self.q is not None:
                W[r] -= self.q[r] @ qW
            MW[r] -= MX[r] @ C
        S = self.S[:, : self.m]
        return S.T @ S, S.T @ self.MS[:, : self.m]

    def update(self, c, pnorm, w):
        """X, M X, P, M P from the Rayleigh-Ritz coefficients c (m x p over [X, W, P]) and
        the new P's column norms, then the next `residual` (values w): new P = [W, P] c_WP,
        new X = X c_X + new P, a run of rows at a time."""
        p, m = self.p, self.m
        for A in (self.S, self.MS):
            for r in _runs(A.shape[0]):
                newP = A[r, p:m] @ c[p:]
                A[r, :p] = A[r, :p] @ c[:p] + newP
                A[r, 2 * p :] = newP / pnorm
        self.m = 3 * p
        return self.residual(w)

    def columns(self, k):
        return np.array(self.S[:, :k])


def _runs(n: int, step: int = 16384):
    """Row slices of ``step`` rows covering n rows: the runs the small products go by."""
    return [slice(i, min(i + step, n)) for i in range(0, n, step)]


def _diagonal(rows, a, rows_t=None):
    """The block's rows of M's diagonal: A's own (M = A), or the squared norms of A's
    columns, i.e. of A^T's rows (M = A^T A)."""
    if rows_t is None:
        return sp.csr_matrix(rows).diagonal(k=a)
    At = sp.csr_matrix(rows_t)
    return np.asarray(At.multiply(At).sum(axis=1)).ravel()


def _create_from_rows(key, rows, rows_t, bounds, i, q, qnorm, p, seed):
    """Block i made on its worker from its rows of A (and of A^T for M = A^T A; global
    columns): the rows cut by the block of their columns, the Jacobi scaling from M's
    diagonal, the constraint vector's rows scaled by its norm. Returns, per operator, the
    row count each block must send it (its halo)."""
    a, b = bounds[i]
    diag = _diagonal(rows, a, rows_t)
    dinv = 1.0 / np.where(diag > 0, diag, 1.0)
    q = None if q is None else np.asarray(q, np.float64).reshape(-1, 1) / qnorm
    ops, sels = {}, {}
    for which, r in (("A", rows), ("At", rows_t)):
        if r is not None:
            ops[which], sels[which] = _split(r, bounds)
    _BLOCKS[key] = _Block(ops, dinv, q, i, a, b, p, seed)
    _BLOCKS[key].sels = sels
    return {which: [len(s) for s in sel] for which, sel in sels.items()}


def _halo(key, which, j):
    """The rows of block j that block ``key``'s rows of ``which`` read (block-local)."""
    return _BLOCKS[key].sels[which][j]


def _rows_summary(rows, a, q, rows_t=None):
    """(sum of M's diagonal, rows, q^T q) of one block of a `WorkerRows` operator."""
    qq = 0.0 if q is None else float(np.dot(np.ravel(q), np.ravel(q)))
    return float(_diagonal(rows, a, rows_t).sum()), sp.csr_matrix(rows).shape[0], qq


def _call(key, method, after, *args):
    """Block ``key``'s ``method``; ``after``: the tasks it must follow (not used)."""
    return getattr(_BLOCKS[key], method)(*args)


def _alive() -> bool:
    return True


def _drop(prefix) -> int:
    keys = [k for k in _BLOCKS if k[0] == prefix]
    for k in keys:
        del _BLOCKS[k]
    return len(keys)


def _split(rows, bounds):
    """Rows of A cut by the block their columns belong to: {j: (rows, part)} for the blocks
    touched, a part's columns renumbered to the ones it touches (to all of block j's when
    that is `WHOLE_SHARE` of them or more), ``rows`` the rows it reaches when under
    `SPARSE_ROWS` of them (the part holding those only; else None); and per block the
    sorted, block-local rows of it read."""
    rows = sp.csr_matrix(rows)
    parts, sels = {}, []
    for j, (a, b) in enumerate(bounds):
        part = rows[:, a:b]
        cols = np.unique(part.indices)
        if len(cols) >= WHOLE_SHARE * (b - a):  # read whole: one copy serves all readers
            cols = np.arange(b - a)
        sels.append(cols)
        if len(cols) == 0:
            continue
        if len(cols) < b - a:
            part = sp.csr_matrix(
                (part.data, np.searchsorted(cols, part.indices), part.indptr),
                shape=(part.shape[0], len(cols)),
            )
        reached = np.flatnonzero(np.diff(part.indptr))
        few = len(reached) < SPARSE_ROWS * part.shape[0]
        parts[j] = (reached, RowRuns(part[reached])) if few else (None, RowRuns(part))
    return parts, sels


class RowRuns:
    """A CSR matrix held as runs of rows (`_runs`), each a CSR matrix of its own, so that a
    product goes a run at a time (no n_i x p temporary) without slicing, i.e. copying, the
    matrix for every product."""

    def __init__(self, M):
        M = sp.csr_matrix(M)
        self.shape = M.shape
        self.runs = [(r, M[r]) for r in _runs(M.shape[0])]

    def __matmul__(self, V):
        V = np.ascontiguousarray(V)
        if not self.runs:
            return np.zeros((0, *V.shape[1:]))
        return np.concatenate([run @ V for _, run in self.runs])
