"""LOBPCG with the operator and the iteration's n x p blocks on the Dask workers.

The same iteration as `gram_lobpcg` (Knyazev 2001: Rayleigh-Ritz on span[X, W, P], a Jacobi
preconditioner, guard vectors in the block, a constraint vector projected out), laid out for a
cluster: the rows are split into contiguous blocks, and each block's rows of the operator and
of every n x p array (X, M X, P, M P, the residual's preconditioned W and M W) live on one
worker for the whole solve. What the caller's process holds and computes is p x p and
3p x 3p: the column sums, the Gram matrices S^T S and S^T M S of S = [X, W, P] summed over
the blocks, and the Rayleigh-Ritz coefficients it sends back. The answer's k columns are
gathered at the end.

The constraint vector (``null``) must be in M's null space (M q = 0, as the constant is for
LLE's M): M W is formed from M W0 by subtracting M X C only.

Operators (``kind=``):

- ``"gram"``: M = A^T A from the rows of A (LLE's A = I - W): M X = A^T (A X), two products,
  M never formed.
- ``"symmetric"``: M = A, A symmetric (a normalised graph Laplacian): one product.

A product needs, for block i, the rows of X at the columns its rows of A touch: each block
keeps its rows of A cut by the block their columns belong to (each part's columns renumbered
to the ones it touches), and for every other block the list of that block's rows it needs; a
small task on the owning worker cuts those rows out (once for all blocks that read a block
whole) and the scheduler moves them worker to worker (the halo). The block adds each part's
product into its rows of M X as the rows arrive, taking in at most its own rows' worth (or
``PART_BYTES``) a task, so it never stacks what it reads: in random row order every block
reads every other whole. Rows given in a locality order (reverse Cuthill-McKee, as in
`gram_lobpcg`) keep the halos small. ``reorder`` defaults to it for the Gram kind only (LLE,
as the in-process solver does): on the kNN graph of wide data it did not make a product
faster, and for the Laplacian it cost the caller memory without changing the solve's time
(bench/HISTORY.md, "Sparse eigensolvers on the workers").

Arithmetic: every step is the in-process solver's (the same tolerance, refresh of the
recurrences every ``REFRESH`` iterations, the same Gram cut-off); the sums over blocks are
taken in block order in the caller, so a solve with the same blocks gives the same bits.
The start vectors are drawn per ``gram_lobpcg.START_ROWS`` rows from the seed, so they do
not depend on the block count either. The blocks' own side (their buffers and tasks) is
`worker_blocks`.

The operator may also come as `WorkerRows`: its row blocks already made by tasks on the
workers (e.g. a graph Laplacian built from a kNN graph in a run's store), so that no process
outside the cluster ever holds it (rows given in the caller are sent to the blocks so). The
caller receives only the sizes of the halos. Rows made in a permuted order (LLE's blocks in
reverse Cuthill-McKee order) carry their original numbers (``order``), and the answer's rows
are placed back by them.

A worker lost during the solve takes its blocks with it (they live in its memory and are
updated in place, so no task can make them again). The solve then starts again on the
workers that are left, with the same blocks and seed, so its answer is the undisturbed one; at
most ``MAX_RESTARTS`` times, then `StageError`. The blocks are removed from the workers when
the solve ends or fails.
"""

from __future__ import annotations

import logging
import time
import warnings

import numpy as np
import scipy.linalg
import scipy.sparse as sp

from .._compute import smallest_worker_memory, wait_done, workers
from .._progress import report
from .._validation import check_random_state
from ..errors import ConvergenceWarning, DimredWarning, InputError, StageError
from .convergence import NOT_RUN_MEMORY, record
from .eigen import Eigen
from .gram_lobpcg import MAXITER, REFRESH, _orth_coef, _rcm
from .worker_blocks import (
    _alive,
    _call,
    _create_from_rows,
    _drop,
    _halo,
    _rows_summary,
)
from .worker_memory import MEMORY_SHARE, memory_note, one_worker_need

__all__ = ["bottom_eigsh_lobpcg_workers", "WorkerRows", "WORKER_KINDS", "MAX_RESTARTS"]

log = logging.getLogger("dimred_dask")

WORKER_KINDS = ("gram", "symmetric")
MAX_RESTARTS = 2  # worker losses survived by one solve
# ``stall=True``: from STALL_AFTER iterations on, once every STALL_WINDOW, a solve whose
# largest wanted residual, at its rate over the last window, would not reach the tolerance
# by maxiter stops (its caller continues with a robust solver rather than wait for maxiter)
STALL_AFTER = 200
STALL_WINDOW = 100
GATHER_TIMEOUT = 900.0  # seconds for one round of small results; longer counts as a loss
# a product's task takes in the rows cut from other blocks up to the larger of this and its
# own block's rows; past that, further tasks add the rest (one part at a time)
PART_BYTES = 64 * 2**20


class WorkerRows:
    """An n x n operator held on the workers as row blocks: a symmetric A (M = A), or A
    with the rows of its transpose (M = A^T A).

    Parameters
    ----------
    n : int
        The operator's order.
    bounds : list of (int, int)
        The blocks' row ranges, contiguous from 0 to n.
    rows : list of distributed.Future
        Per block, its rows of A as a scipy sparse matrix of shape (b - a, n), global
        columns.
    null : list of distributed.Future or None, default None
        Per block, its rows of a constraint vector in M's null space.
    rows_t : list of distributed.Future or None, default None
        Per block, its rows of A^T (the same shape): M = A^T A is solved (``kind="gram"``).
    order : list of distributed.Future or None, default None
        Per block, the original numbers of its rows (int64, b - a of them) when the operator
        is held permuted (row and column i of the blocks are the original order[i]); the
        solver's vectors and `gather` come back in the original numbering. None: no
        permutation.
    """

    def __init__(self, n: int, bounds, rows, null=None, rows_t=None, order=None):
        self.n, self.bounds, self.rows, self.null = int(n), list(bounds), list(rows), null
        self.rows_t = None if rows_t is None else list(rows_t)
        self.order = None if order is None else list(order)
        if len(self.rows) != len(self.bounds) or self.bounds[-1][1] != self.n:
            raise ValueError("WorkerRows: one row block per bound, the bounds covering n rows")

    @property
    def shape(self) -> tuple[int, int]:
        return (self.n, self.n)

    @property
    def kind(self) -> str:
        return "symmetric" if self.rows_t is None else "gram"

    def gather(self, client):
        """A in this process (CSR, the original numbering), for the in-process solvers."""
        order = None if self.order is None else client.gather(self.order)
        return _assembled(client.gather(self.rows), order, self.n)

    def nbytes(self, client) -> int:
        """The bytes of A's row blocks' CSR arrays, measured where the blocks are (once
        they are made)."""
        return int(sum(client.gather(client.map(_csr_bytes, self.rows, pure=False))))

    def room_on_a_worker(self, client, solver: str, k: int) -> dict | None:
        """None when ``solver`` on A assembled on one worker (`on_a_worker`, ``k``
        eigenpairs) fits there (or no worker has a memory limit); else the convergence record
        of a solve not run (``not_run=NOT_RUN_MEMORY``), its status saying why: the estimate
        (`one_worker_need`) is above ``MEMORY_SHARE`` of the smallest worker's limit."""
        limit = smallest_worker_memory(client)
        if not limit:
            return None
        need = one_worker_need(solver, self.kind, self.n, self.nbytes(client), k)
        if need <= MEMORY_SHARE * limit:
            return None
        status = (
            f"not run: the operator assembled on one worker and {solver}'s working memory "
            f"would take about {need / 2**30:.2f} GiB there, more than "
            f"{MEMORY_SHARE:.0%} of the smallest worker's memory limit "
            f"({limit / 2**30:.2f} GiB)"
        )
        return record("", solver, converged=False, status=status, not_run=NOT_RUN_MEMORY)

    def on_a_worker(self, client, fn):
        """``fn(A)`` run on one worker, A assembled there (CSR, the original numbering) from
        the blocks the workers hold: an in-process solver on the whole operator without
        bringing it into this process, which receives what ``fn`` returns."""
        return client.submit(_solve_assembled, fn, self.rows, self.order, self.n).result()


def _csr_bytes(block) -> int:
    return int(block.data.nbytes + block.indices.nbytes + block.indptr.nbytes)


def _assembled(rows, order, n: int):
    A = sp.vstack(rows, format="csr")
    if order is None:
        return A
    inv = np.empty(n, np.int64)
    inv[np.concatenate(order)] = np.arange(n)
    return A[inv][:, inv].tocsr()


def _solve_assembled(fn, rows, order, n: int):
    return fn(_assembled(rows, order, n))


def _rayleigh_ritz(G, H, p):
    """(values, coefficients) of the p smallest Ritz pairs, the basis's columns scaled to
    unit norm first (as the in-process solver normalises W and P)."""
    d = 1.0 / np.sqrt(np.maximum(np.diag(G), 1e-300))
    G, H = d[:, None] * G * d, d[:, None] * H * d
    Z = _orth_coef(G)
    T = Z.T @ H @ Z
    w, c = scipy.linalg.eigh((T + T.T) / 2)
    return w[:p], d[:, None] * (Z @ c[:, :p])


def _sum(parts):
    """Block sums of (G, H) pairs, in block order."""
    G = parts[0][0].copy()
    H = parts[0][1].copy()
    for g, h in parts[1:]:
        G += g
        H += h
    return G, H


class _Lost(Exception):
    pass


def _losses() -> tuple:
    """The exceptions a lost worker surfaces as (its data cancelled, its tasks killed, a
    closed connection); a task's own error is not among them."""
    from concurrent.futures import CancelledError

    from distributed import KilledWorker
    from distributed.comm import CommClosedError

    return (CancelledError, KilledWorker, CommClosedError)


class _Solve:
    """One attempt: the blocks made on the workers, the iteration driven from here."""

    def __init__(self, client, A, At, bounds, q, p, seed):
        import uuid

        self.client, self.bounds, self.p = client, bounds, p
        self.id = uuid.uuid4().hex
        listed = sorted(workers(client))
        # a worker that just died may still be listed: place blocks only on those that answer
        answers = client.run(_alive, workers=listed, on_error="return") if listed else {}
        up = [w for w in listed if answers.get(w) is True]
        if not up:
            raise _Lost("no worker answers")
        nb = len(bounds)
        self.where = [up[i % len(up)] for i in range(nb)]
        self.keys = [(self.id, i) for i in range(nb)]
        self.cuts, self.sizes = {"A": [], "At": []}, {"A": [], "At": []}
        self.order = A.order if isinstance(A, WorkerRows) else None
        if not isinstance(A, WorkerRows):  # rows in this process (q unit): sent to their blocks

            def send(M):
                blocks = enumerate(bounds)
                return None if M is None else [self._put(M[a:b], i) for i, (a, b) in blocks]

            A = WorkerRows(A.shape[0], bounds, send(A), send(q), send(At))
            q = None if q is None else 1.0
        self._from_rows(A, q, p, seed)

    def _from_rows(self, op, qnorm, p, seed):
        """Blocks made on their workers from `WorkerRows` (``qnorm``: the constraint
        vector's norm); the halos' row numbers stay on the worker that computed them and
        go from there to the block that cuts them."""
        nb = len(self.bounds)
        rows_t, null = op.rows_t or [None] * nb, op.null or [None] * nb
        args = [(self.keys[i], op.rows[i], rows_t[i], self.bounds, i, null[i]) for i in range(nb)]
        sizes = self.gather(
            [self.submit(i, _create_from_rows, *args[i], qnorm, p, seed) for i in range(nb)]
        )
        self.kinds = ["A"] if op.rows_t is None else ["A", "At"]
        for which in self.kinds:
            for i in range(nb):
                own = sizes[i][which]
                self.cuts[which].append([self._cut(i, which, j, s) for j, s in enumerate(own)])
                self.sizes[which].append(own)

    def _cut(self, i, which, j, size):
        """How block i reads block j's rows: None (not), "all", or a future of the rows."""
        a, b = self.bounds[j]
        if size in (0, b - a):
            return "all" if size else None
        return self.submit(i, _halo, self.keys[i], which, j)

    def _put(self, value, i):
        return self.client.scatter(value, workers=[self.where[i]], hash=False)

    def submit(self, i, fn, *args):
        return self.client.submit(
            fn, *args, workers=[self.where[i]], allow_other_workers=False, pure=False
        )

    def call(self, i, method, after, *args):
        return self.submit(i, _call, self.keys[i], method, after, *args)

    def each(self, method, after, *args):
        return [
            self.call(i, method, after[i] if after else None, *args)
            for i in range(len(self.bounds))
        ]

    def gather(self, futures, fetch=True):
        """The futures' results (``fetch``; else the futures, once done); a worker of ours
        gone (its pinned tasks would wait for it forever) or a lost-data error is a
        `_Lost`."""
        losses = _losses()
        start = time.monotonic()
        try:
            while not wait_done(futures, 1.0):
                alive = set(workers(self.client))
                gone = [w for w in set(self.where) if w not in alive]
                if gone:
                    raise _Lost(f"worker {gone[0]} left")
                if time.monotonic() - start > GATHER_TIMEOUT:
                    raise _Lost(f"no answer in {GATHER_TIMEOUT:.0f} s")
            if fetch:
                return self.client.gather(futures)
            for f in futures:
                if f.status != "finished":
                    f.result()  # raises the task's error
            return futures
        except losses as exc:
            raise _Lost(f"{type(exc).__name__}: {exc}") from exc

    def product(self, name, out, after):
        """M V into slot ``out`` (V in slot ``name``): A's rows, then A^T's for a Gram
        operator, each block's halo cut on its own worker and sent to the blocks that
        need it (a whole block's rows cut once for all that read them all). A block takes
        in up to `PART_BYTES` (at least its own rows' worth) of other blocks' rows a task;
        further tasks add the rest. Returns the last tasks (one a block)."""
        src = name
        for step, which in enumerate(self.kinds):
            dst = out if step == len(self.kinds) - 1 else "Y"
            whole, done = {}, []
            for i, cuts in enumerate(self.cuts[which]):
                if cuts[i] is None:
                    raise AssertionError("a row block touches none of its own columns")
                a, b = self.bounds[i]
                room = max(PART_BYTES // (8 * self.p), b - a)
                groups, held = [[]], 0
                for j, c in enumerate(cuts):
                    if c is None or j == i:
                        continue
                    if c == "all":
                        if j not in whole:
                            whole[j] = self.call(j, "rows", after[j], src, None)
                        part = whole[j]
                    else:
                        part = self.call(j, "rows", after[j], src, c)
                    size = self.sizes[which][i][j]
                    if groups[-1] and held + size > room:
                        groups.append([])
                        held = 0
                    groups[-1].append((j, part))
                    held += size
                own = None if cuts[i] == "all" else cuts[i]
                js, parts = [j for j, _ in groups[0]], [f for _, f in groups[0]]
                task = self.call(i, "apply", after[i], which, src, dst, own, js, *parts)
                for g in groups[1:]:
                    js, parts = [j for j, _ in g], [f for _, f in g]
                    task = self.call(i, "add", task, which, dst, js, *parts)
                done.append(task)
            after, src = [done] * len(done), dst  # the next step reads what all wrote
        return done

    def away(self, after):
        """X with the constraint vector projected out (block sums of q^T X)."""
        mom = self.gather(self.each("moments", after))
        if mom[0][1] is None:
            return after
        qX = sum(m[1] for m in mom)
        return self.each("minus_null", None, qX)

    def run(self, k, tol_abs, maxiter, progress, keep=False, stall=False):
        """The iteration; returns (values, vectors, iterations, residuals), the vectors
        gathered here (n x k) or, ``keep``, one future a row block left on the workers.
        ``stall``: stop early when the residuals' rate over the last ``STALL_WINDOW``
        iterations would not reach ``tol_abs`` within ``maxiter`` (`_stalled`)."""
        p, nb = self.p, len(self.bounds)
        history = []
        after = self.away(None)
        after = self.product("X", "MX", [after] * nb)
        G, H = _sum(self.gather(self.each("start_grams", [after] * nb)))
        w, c = _rayleigh_ritz(G, H, p)
        resid = self.each("start_ritz", None, c, w)  # each returns its residual's sums
        it = 0
        while True:
            # M W0 goes on while the sums come back and the coefficients are made
            mw = self.product("W", "MW", [resid] * nb)
            small = self.gather(resid)
            res = np.sqrt(sum(s[0] for s in small))
            if progress is not None:
                progress(it, res[:k])
            history.append(float(res[:k].max()))
            if (
                (res[:k] <= tol_abs).all()
                or it >= maxiter
                or (stall and _stalled(history, tol_abs, maxiter))
            ):
                self.gather(mw)
                break
            XW = sum(s[1] for s in small)
            if small[0][2] is None:
                qW, C = None, XW
            else:
                qW = sum(s[2] for s in small)
                C = XW - sum(s[3] for s in small) @ qW
            G, H = _sum(self.gather(self.each("grams", [mw] * nb, qW, C)))
            w, c = _rayleigh_ritz(G, H, p)
            m = G.shape[0]
            cw = c[p:m]
            pnorm = np.sqrt(np.maximum(np.einsum("ij,ik,kj->j", cw, G[p:m, p:m], cw), 0.0))
            resid = self.each("update", None, c, np.maximum(pnorm, 1e-300), w)
            it += 1
            if it % REFRESH == 0:  # products updated by recurrence drift: recompute them
                after = self.away([resid] * nb)
                after = self.product("X", "MX", [after] * nb)
                after = self.product("P", "MP", [after] * nb)
                resid = self.each("residual", [after] * nb, w)
        if keep:  # the blocks' k columns stay where they are, as futures
            return w, self.gather(self.each("columns", None, k), fetch=False), it, res
        # the k columns, one block at a time into their place: no second n x k copy
        vectors = np.empty((self.bounds[-1][1], k))
        for i, ((a, b), part) in enumerate(zip(self.bounds, self.each("columns", None, k))):
            if self.order is None:
                vectors[a:b] = self.gather([part])[0]
            else:  # rows held permuted: into their original places
                at, values = self.gather([self.order[i], part])
                vectors[at] = values
        return w, vectors, it, res

    def close(self):
        try:
            self.client.run(_drop, self.id)
        except Exception:  # a worker gone already holds nothing
            pass


def _stalled(history, tol_abs: float, maxiter: int) -> bool:
    """Whether the largest wanted residual, at the rate it fell over the last STALL_WINDOW
    iterations, would still be above ``tol_abs`` at ``maxiter`` (checked once a window,
    from STALL_AFTER iterations on)."""
    it = len(history) - 1
    if it < STALL_AFTER or it % STALL_WINDOW:
        return False
    then, now = history[it - STALL_WINDOW], history[it]
    if now <= tol_abs:
        return False
    rate = np.log(max(then, 1e-300) / max(now, 1e-300)) / STALL_WINDOW  # per iteration
    return rate <= 0 or it + np.log(now / tol_abs) / rate > maxiter


def bottom_eigsh_lobpcg_workers(
    A,
    k: int,
    *,
    kind: str = "gram",
    null=None,
    tol: float = 1e-8,
    maxiter: int | None = None,
    block: int | None = None,
    blocks: int | None = None,
    random_state=0,
    reorder: bool | None = None,
    client=None,
    progress=None,
    keep: bool = False,
    stall: bool = False,
) -> Eigen:
    """The ``k`` smallest eigenpairs of M (``kind="gram"``: M = A^T A; ``"symmetric"``:
    M = A) orthogonal to ``null``, by LOBPCG with its blocks on the Dask workers.

    Parameters
    ----------
    A : scipy.sparse matrix of shape (n, n) or WorkerRows
        The operator's rows (see ``kind``); cut into row blocks and sent to the workers. A
        `WorkerRows` (its ``kind`` given) is solved in its own blocks and order, its
        ``null`` as the constraint (``null``, ``blocks`` and ``reorder`` are then unused).
    k : int
        The number of eigenpairs, 1 <= k < n - 1.
    kind : {"gram", "symmetric"}, default "gram"
        M = A^T A (two products an iteration) or M = A (A symmetric, one product).
    null : array of shape (n,) or None, default None
        A constraint vector in M's null space, left out (e.g. the constant for LLE).
    tol : float, default 1e-8
        Stop when every wanted residual ||M x - lambda x|| is at most tol times the mean
        diagonal of M.
    maxiter : int or None, default None
        The iteration limit (None: 1000).
    block : int or None, default None
        Columns in the block, at least k (None: max(k + 6, 2k), as in-process).
    blocks : int or None, default None
        Row blocks (None: one per worker at the start).
    random_state : int, numpy Generator or None, default 0
        Seeds the start vectors.
    reorder : bool or None, default None
        Solve in reverse Cuthill-McKee order of A's graph (smaller halos); None: for
        ``kind="gram"`` only.
    client : distributed.Client or None, default None
        The cluster (None: the current client).
    progress : callable or None, default None
        Called as progress(iteration, wanted residuals) once an iteration; None: reported
        to the caller's progress reporter (the CLI's bar, the flow's progress artifact) as
        the iteration against ``maxiter`` and the largest wanted residual against the
        tolerance.
    stall : bool, default False
        Stop early, unconverged, once the largest wanted residual falls too slowly to reach
        the tolerance within ``maxiter``: judged every ``STALL_WINDOW`` iterations from
        ``STALL_AFTER`` on, by its rate over the last window (for a caller with a robust
        solver to continue with: the record's status says "stalled").
    keep : bool, default False
        Leave the vectors on the workers: ``Eigen.vectors`` is then a dask array of one
        chunk a row block, each the result of a task held where the block was solved
        (computing it moves the blocks, not this process). Only without a permutation (a
        `WorkerRows` without ``order``, or ``reorder`` False).

    Returns
    -------
    Eigen
        Values ascending, vectors (n x k, float64; a dask array with ``keep``), ``info``
        with the iterations, the residuals, the blocks and the restarts, and the
        convergence record.

    Raises
    ------
    InputError
        A is not square, k out of range, an unknown ``kind``, or no Dask client.
    StageError
        Workers were lost more than ``MAX_RESTARTS`` times.
    """
    if kind not in WORKER_KINDS:
        raise InputError(
            f"kind must be one of {', '.join(WORKER_KINDS)}; found {kind!r}.",
            "pass kind='gram' (M = A^T A) or 'symmetric' (M = A).",
        )
    n = A.shape[0]
    if isinstance(A, WorkerRows) and kind != A.kind:
        raise InputError(
            f"this operator held on the workers (WorkerRows) is solved with kind={A.kind!r}; "
            f"found kind={kind!r}.",
            f"pass kind={A.kind!r} (rows of A^T given: 'gram'), or give A as a scipy "
            "sparse matrix.",
        )
    if A.shape != (n, n) or not 1 <= k < n - 1:
        raise InputError(
            f"the worker-side LOBPCG needs a square A and 1 <= k < n - 1; found "
            f"shape {A.shape}, k = {k}.",
            "pass the n x n A and a smaller k.",
        )
    if client is None:
        from .._compute import active_client

        client = active_client()
    if client is None:
        raise InputError(
            "the worker-side LOBPCG needs a Dask cluster; found no active distributed.Client.",
            "start a Client (dimred_dask.cluster), or "
            "solve in this process (eigen_solver='lobpcg').",
        )
    if isinstance(A, WorkerRows):  # rows made on the workers: solved in their order
        reorder, perm, At, bounds = A.order is not None, None, None, A.bounds
        sums = client.gather(
            [
                client.submit(
                    _rows_summary,
                    r,
                    a,
                    None if A.null is None else A.null[i],
                    None if A.rows_t is None else A.rows_t[i],
                )
                for i, (r, (a, _)) in enumerate(zip(A.rows, bounds))
            ]
        )
        diag_mean = sum(s[0] for s in sums) / n
        q = None if A.null is None else float(np.sqrt(sum(s[2] for s in sums)))  # its norm
        nb = len(bounds)
    else:
        A = sp.csr_matrix(A, dtype=np.float64)
        reorder = kind == "gram" if reorder is None else bool(reorder)
        perm = _rcm(A) if reorder else np.arange(n)
        A = A[perm][:, perm].tocsr()
        At = A.T.tocsr() if kind == "gram" else None
        diag = np.asarray(A.multiply(A).sum(axis=0)).ravel() if kind == "gram" else A.diagonal()
        diag_mean = float(diag.mean())
        q = None if null is None else np.asarray(null, np.float64).reshape(n, 1)[perm]
        q = None if q is None else q / np.linalg.norm(q)
        nb = int(blocks or max(1, len(workers(client))))
        bounds = [
            (int(a), int(b))
            for a, b in zip(
                np.linspace(0, n, nb + 1).astype(np.int64)[:-1],
                np.linspace(0, n, nb + 1).astype(np.int64)[1:],
            )
        ]
    if keep and reorder:
        raise InputError(
            "the worker-side LOBPCG leaves its vectors on the workers (keep=True) only in "
            "the operator's own row order; found a permuted operator.",
            "pass reorder=False, or keep=False to gather the vectors.",
        )
    p = min(n - 2, max(k + 6, 2 * k) if block is None else max(block, k))
    seed = int(check_random_state(random_state).integers(2**63))
    limit = maxiter or MAXITER
    tol_abs = tol * diag_mean
    note, tight = memory_note(bounds, p, smallest_worker_memory(client), kind == "gram")
    if tight:
        warnings.warn(
            f"The worker-side LOBPCG may not fit: {note}, and the operator's rows and the "
            "worker's own memory come on top. Fix: more workers (smaller blocks), workers "
            "with more memory, or fewer components.",
            DimredWarning,
            stacklevel=2,
        )
    t0, restarts = time.perf_counter(), 0
    while True:
        solve = None
        try:
            solve = _Solve(client, A, At, bounds, q, p, seed)
            w, v, it, res = solve.run(
                k, tol_abs, limit, progress or _reporter(k, tol_abs, limit), keep, stall
            )
            break
        except _Lost as exc:
            restarts += 1
            if restarts > MAX_RESTARTS:
                raise StageError(
                    f"The worker-side LOBPCG lost a worker {restarts} times ({exc}); {note}.",
                    "check the workers' memory limits and logs: more workers (smaller "
                    "blocks) or more memory per worker, or solve in this process "
                    "(eigen_solver='lobpcg').",
                ) from exc
            log.warning("worker-side LOBPCG: a worker was lost (%s); starting again", exc)
            time.sleep(1.0)  # let the scheduler drop the dead worker
            _wait_for_workers(client)
        finally:
            if solve is not None:
                solve.close()
    converged = bool((res[:k] <= tol_abs).all())
    if not converged:
        warnings.warn(
            f"LOBPCG on the workers stopped after {it} iterations with residuals "
            f"{np.array2string(res[:k], precision=2)} (wanted <= {tol_abs:.1e}).",
            ConvergenceWarning,
            stacklevel=2,
        )
    info = {
        "iterations": it,
        "block": p,
        "blocks": nb,
        "restarts": restarts,
        "residuals": res.tolist(),
        "tol_abs": tol_abs,
        "reordered": reorder,
        "kind": kind,
        "seconds": time.perf_counter() - t0,
        "preconditioner": "jacobi",
    }
    rec = record(
        f"bottom {k} eigenpairs",
        "lobpcg-workers",
        converged=converged,
        iterations=it,
        residual=float(res[:k].max()),
        tol=tol_abs,
        status="converged"
        if converged
        else f"stopped at maxiter={limit}"
        if it >= limit
        else f"stalled at iteration {it}: its rate would not reach the tolerance by {limit}",
        maxiter=limit,
        block=p,
        blocks=nb,
        restarts=restarts,
        measure="max ||M x - lambda x|| of the wanted pairs (absolute: tol times the "
        "mean diagonal of M)",
    )
    if keep:
        vectors = _kept(v, bounds, k)
    elif perm is None:
        vectors = v  # the blocks' own order: n x k already
    else:
        vectors = np.empty((n, k))
        vectors[perm] = v[:, :k]
    return Eigen(np.asarray(w[:k]), vectors, "lobpcg-workers", 0, info=info, convergence=rec)


def _reporter(k: int, tol_abs: float, limit: int):
    """progress(iteration, residuals) for `report`: the iteration out of the limit."""

    def progress(it, res):
        worst = float(np.max(res)) if len(res) else 0.0
        report(
            f"LOBPCG on the workers: {k} eigenpairs, residual {worst:.1e} (to reach "
            f"{tol_abs:.1e}), iterations",
            it,
            limit,
        )

    return progress


def _kept(futures, bounds, k: int):
    """The row blocks' futures as one dask array of n x k float64, a chunk a block."""
    import dask.array as da
    from dask import delayed

    return da.concatenate(
        [
            da.from_delayed(delayed(f), shape=(b - a, k), dtype=np.float64)
            for f, (a, b) in zip(futures, bounds)
        ]
    )


def _wait_for_workers(client, timeout: float = 60.0) -> None:
    t = time.monotonic()
    while not workers(client):
        if time.monotonic() - t > timeout:
            raise StageError(
                "The worker-side LOBPCG has no workers left.",
                "restart the cluster's workers and run again.",
            )
        time.sleep(0.5)
