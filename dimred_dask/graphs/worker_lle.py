"""LLE's operator A = I - W built on the Dask workers from a kNN graph in a run's store.

`reconstruction_weights` and `methods.lle.lle_operator` make the weights and A = I - W in the
caller's process, from the whole kNN graph. Here one task per row block (one block per
worker) reads its rows of the graph where they are stored (a graph source: ``n_samples``,
``n_neighbors``, ``rows(start, stop, k)``), takes the rows of X its neighbours are from the
blocks of X held on the workers (each block cuts the rows another one asks for), solves its
rows' reconstruction weights (Roweis & Saul 2000, the local Gram matrix regularised by
``reg`` times its trace, as `reconstruction_weights`), and makes its rows of A; the entries
are also sent, transposed, to the blocks of their columns, which make their rows of A^T.
The result is a `linalg.worker_lobpcg.WorkerRows` for the worker-side LOBPCG on
M = A^T A, with the constant as its constraint vector; the caller holds O(blocks) numbers.

The blocks are cut in reverse Cuthill-McKee order of the graph (``reorder=True``, as the
in-process solver orders A): a task on one worker reads the graph in runs, orders it, and
block i makes the rows of A at positions [a, b) of that order (``WorkerRows.order``: their
row numbers in X), its columns renumbered to positions too, so that a product's halos are
the few rows near the block's edges instead of rows scattered over every block.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from .._compute import active_client, workers
from .._validation import is_dask
from ..blocks.neighbors import reconstruction_weights_block
from ..errors import InputError
from ..linalg.worker_lobpcg import WorkerRows
from .affinities import graph_rows
from .weights import check_reg

__all__ = ["lle_operator_on_workers"]

WEIGHT_ROWS = 32_768  # rows whose local problems are solved at once (~130 MB at k = 10, d = 50)
READ_ROWS = 262_144  # graph rows read at once by the ordering and the blocks' reads


def _neighbours(source, k: int, a: int, b: int) -> np.ndarray:
    idx = np.asarray(graph_rows(source, a, b, k)[0], np.int64)
    if (idx < 0).any():
        raise InputError(
            "The graph has rows with fewer than k neighbours (index -1).",
            "rebuild it with backend='exact' or 'nndescent'.",
        )
    return idx


def _rcm_order(source, k: int) -> np.ndarray:
    """The graph's reverse Cuthill-McKee order (of its symmetrised structure, as
    `gram_lobpcg` orders A = I - W), the graph read in runs of ``READ_ROWS`` rows."""
    from scipy.sparse.csgraph import reverse_cuthill_mckee

    n = int(source.n_samples)
    cols = np.empty((n, k), np.int32)
    for s in range(0, n, READ_ROWS):
        e = min(n, s + READ_ROWS)
        cols[s:e] = _neighbours(source, k, s, e)
    rows = np.repeat(np.arange(n, dtype=np.int32), k)
    cols = cols.ravel()
    ones = np.ones(2 * rows.size, np.int8)  # the structure only: RCM reads indices and indptr
    S = sp.csr_matrix(
        (ones, (np.concatenate([rows, cols]), np.concatenate([cols, rows]))), shape=(n, n)
    )
    del rows, cols, ones
    return np.asarray(reverse_cuthill_mckee(S, symmetric_mode=True), dtype=np.int64)


def _ids(order, a: int, b: int) -> np.ndarray:
    """Rows of X at positions [a, b): of the order, or a..b without one."""
    return np.arange(a, b, dtype=np.int64) if order is None else np.asarray(order[a:b])


def _neighbours_of(source, k: int, ids: np.ndarray) -> np.ndarray:
    """The graph rows of X's rows ``ids`` (in their order), read in runs over the graph's
    stored order: contiguous ids are one read."""
    if ids.size and ids[-1] - ids[0] == ids.size - 1:
        return _neighbours(source, k, int(ids[0]), int(ids[-1]) + 1)
    out = np.empty((ids.size, k), np.int64)
    n = int(source.n_samples)
    for s in range(0, n, READ_ROWS):
        e = min(n, s + READ_ROWS)
        here = np.flatnonzero((ids >= s) & (ids < e))
        if here.size:
            out[here] = _neighbours(source, k, s, e)[ids[here] - s]
    return out


def _pick(idx: np.ndarray, own: np.ndarray, rows: np.ndarray, a: int, b: int):
    """The rows of block [a, b) of X (``rows``) that ``idx`` or ``own`` list: (sorted ids,
    rows)."""
    ids = np.union1d(idx, own)
    ids = ids[(ids >= a) & (ids < b)]
    return ids, np.asarray(rows)[ids - a]


def _weights(idx, own, reg, *picks):
    """Block rows' reconstruction weights from the rows of X they (``own``) and their
    neighbours (``idx``) are, in runs of ``WEIGHT_ROWS`` rows (a run's local problems hold
    rows x k x d float64 numbers)."""
    uniq = np.concatenate([p[0] for p in picks])  # sorted: the parts are in row order
    rows_x = np.concatenate([p[1] for p in picks])
    out = np.empty(idx.shape)
    for s in range(0, idx.shape[0], WEIGHT_ROWS):
        e = min(idx.shape[0], s + WEIGHT_ROWS)
        out[s:e] = reconstruction_weights_block(
            rows_x[np.searchsorted(uniq, own[s:e])],
            rows_x[np.searchsorted(uniq, idx[s:e])],
            reg,
        )
    return out


def _a_rows(idx, w, a: int, b: int, n: int, bounds, order=None):
    """Rows [a, b) of A = I - W (CSR, global columns: positions of the order when there is
    one), and its entries transposed by the block of their column: (rows local to that
    block, global columns, values)."""
    m, k = idx.shape
    if order is not None:
        inv = np.empty(n, np.int64)
        inv[np.asarray(order)] = np.arange(n)
        idx = inv[idx]
        del inv
    rows = np.repeat(np.arange(m), k)
    W = sp.csr_matrix((w.ravel(), (rows, idx.ravel())), shape=(m, n))
    A = (sp.eye(m, n, k=a, format="csr") - W).tocsr()
    coo = A.tocoo()
    starts = np.array([s for s, _ in bounds])
    dest = np.searchsorted(starts, coo.col, side="right") - 1
    pieces = [
        (coo.col[dest == j] - s, coo.row[dest == j] + a, coo.data[dest == j])
        for j, (s, _) in enumerate(bounds)
    ]
    return A, pieces


def _first(made):
    return made[0]


def _piece(made, j: int):
    return made[1][j]


def _at_rows(a: int, b: int, n: int, *pieces):
    r = np.concatenate([p[0] for p in pieces])
    c = np.concatenate([p[1] for p in pieces])
    v = np.concatenate([p[2] for p in pieces])
    return sp.csr_matrix((v, (r, c)), shape=(b - a, n))


def _ones(m: int) -> np.ndarray:
    return np.ones(m)


def _row_sum_squares(A) -> float:
    """sum_i (A 1)_i^2 over the block's rows: its share of the constant's Rayleigh quotient."""
    return float(np.sum(np.asarray(A.sum(axis=1)).ravel() ** 2))


def lle_operator_on_workers(source, X, *, n_neighbors=None, reg=1e-3, reorder=True, client=None):
    """A = I - W of LLE (Roweis & Saul 2000) built on the Dask workers, one row block per
    worker, from a graph source and the rows of ``X``.

    Parameters
    ----------
    source : graph source
        ``n_samples``, ``n_neighbors`` and ``rows(start, stop, k)``, read in the tasks.
    X : array-like or dask array of shape (n, n_features)
        The rows (held on the workers in the blocks' row ranges while the weights are made).
    n_neighbors : int or None, default None
        The neighbours of each row used (the first ones); None: all the source's.
    reg : float, default 1e-3
        The regularisation of the local Gram matrices, > 0.
    reorder : bool, default True
        Cut the blocks in reverse Cuthill-McKee order of the graph (A's rows and columns
        permuted: ``WorkerRows.order``); False: in X's row order.
    client : distributed.Client or None, default None
        The cluster (None: the current client).

    Returns
    -------
    A : WorkerRows
        Rows of A and of A^T on the workers (``rows``, ``rows_t``), the constant as
        ``null``, the order as ``order`` when ``reorder``.
    first : float
        The constant's Rayleigh quotient of M = A^T A, ||A 1||^2 / n (~0).

    Raises
    ------
    InputError
        ``reg`` out of range, no Dask client, a graph row with fewer than k neighbours.
    """
    import dask.array as da

    reg = check_reg(reg)
    client = client or active_client()
    if client is None:
        raise InputError(
            "LLE's operator on the workers needs a Dask cluster; found no active Client.",
            "start a Client (dimred_dask.cluster), or pass eigen_solver='lobpcg'.",
        )
    n = int(source.n_samples)
    k = int(source.n_neighbors if n_neighbors is None else n_neighbors)
    nb = max(1, min(n // 2, len(workers(client))))
    cuts = np.linspace(0, n, nb + 1).astype(np.int64)
    bounds = [(int(a), int(b)) for a, b in zip(cuts[:-1], cuts[1:])]
    Xd = X if is_dask(X) else da.from_array(np.asarray(X), chunks=(max(1, n // nb), -1))
    Xd = Xd.rechunk({0: tuple(b - a for a, b in bounds), 1: -1})
    parts = client.compute(list(Xd.to_delayed().ravel()))
    order = client.submit(_rcm_order, source, k, pure=False) if reorder else None
    made, ids = [], []
    for i, (a, b) in enumerate(bounds):
        ids.append(client.submit(_ids, order, a, b, pure=False))
        idx = client.submit(_neighbours_of, source, k, ids[i], pure=False)
        picks = [
            client.submit(_pick, idx, ids[i], parts[j], s, e, pure=False)
            for j, (s, e) in enumerate(bounds)
        ]
        w = client.submit(_weights, idx, ids[i], reg, *picks, pure=False)
        made.append(client.submit(_a_rows, idx, w, a, b, n, bounds, order, pure=False))
    rows = [client.submit(_first, m, pure=False) for m in made]
    rows_t = [
        client.submit(
            _at_rows, a, b, n, *[client.submit(_piece, m, j, pure=False) for m in made], pure=False
        )
        for j, (a, b) in enumerate(bounds)
    ]
    null = [client.submit(_ones, b - a, pure=False) for a, b in bounds]
    first = sum(client.gather([client.submit(_row_sum_squares, r, pure=False) for r in rows])) / n
    del parts, made, order
    op = WorkerRows(n, bounds, rows, null=null, rows_t=rows_t, order=ids if reorder else None)
    return op, float(first)
