"""One t-SNE or UMAP optimisation spread over the Dask workers (``optimizer="distributed"``).

The rows are split into B contiguous blocks, one per worker at the start of the fit. Each block
lives in a Dask actor on its worker for the whole fit: its rows of P (t-SNE's joint P or UMAP's
fuzzy graph, built there by `affinity_row_blocks_delayed` without ever being assembled in one
place) and its rows' optimiser state (t-SNE's update and gains, UMAP's per-edge schedules). The
caller's process coordinates: it holds the positions (n x n_components) and, for t-SNE, the
interpolation grid.

- t-SNE, per iteration: the positions go to every block, each puts its rows' charges on the
  grid (whose extent the coordinator fixes from all positions); the charges are summed in block
  order, convolved once, and the grid's potentials (float32, which is what the FFT gives) go
  back with Z (from the grid alone, `GridSpec.potentials`); each block interpolates its rows'
  potentials, adds its rows' attraction over its rows of P and makes its rows' step.
- UMAP, per epoch: the positions of the previous epoch go to every block, each runs the epoch
  over its rows' edges (negative samples drawn from those positions, as the single-worker
  optimiser also does: the staleness is one epoch in both) and sends its rows back with the
  pulls its edges put on their other ends, summed per vertex in fixed point (`pull_sums`, an
  (n, d) int64 array); the coordinator adds those sums (exact integers) and moves every vertex
  by them (`apply_pulls`). Rows are keyed by their global number, so the embedding is the
  single-worker one bit for bit.

What crosses the network per synchronisation is the positions, once down per block and once
up in blocks (for UMAP also each block's n x d int64 pull sums), and for t-SNE the grid's
charges up and potentials down per block: O(n x d + B x grid) (UMAP: O(B x n x d)),
reported as ``bytes_per_iteration`` in the fit's info.

Dask actors rather than tasks: a block's P and state stay in one worker's memory for hundreds
of iterations, and an actor's method call goes from the coordinator straight to that worker
(no scheduler round trip per iteration). The price is that an actor dies with its worker; the
coordinator then rebuilds the blocks on the workers that are left (several blocks may share a
worker: the block count, hence the arithmetic, does not change) and goes on from the last
checkpoint, which ends exactly where an undisturbed run ends. With no worker left, or after
``MAX_RECOVERIES`` losses, the fit stops with a `StageError`; every call has a timeout, so a
lost worker never leaves it waiting.
"""

from __future__ import annotations

import logging
import os
import time

import numpy as np

from .._compute import smallest_worker_memory, workers
from ..blocks.tsne_gradient import GridSpec, Interpolation
from ..blocks.tsne_kernels import fused_step, kl_attractive_part
from ..blocks.umap_kernels import apply_pulls, pull_sums, sgd_epoch
from ..errors import InputError, StageError
from ..graphs import KNNGraph
from ..graphs.affinities import GraphRows
from ._neighbor_runs import delayed_literal, learning_rate_of, threads
from ._umap_parts import edge_schedule, edge_terms

__all__ = [
    "OPTIMIZERS",
    "plan_optimizer",
    "block_bounds",
    "block_graphs",
    "optimize_tsne_distributed",
    "optimize_umap_distributed",
    "STATE_SHARE",
    "MAX_RECOVERIES",
]

log = logging.getLogger("dimred_dask")

OPTIMIZERS = ("auto", "single", "distributed")
# optimizer="auto": distributed when P and the optimiser's state would take more than this
# share of one worker's memory limit (the rest is for the kNN graph, the input's chunks and
# the single-worker optimiser's temporaries) and there are at least two workers
STATE_SHARE = 0.25
MAX_RECOVERIES = 3  # worker losses survived in one fit
CALL_TIMEOUT = 900.0  # seconds for one block's call; a longer silence counts as a loss
WAIT_WORKERS = 60.0  # seconds to wait for workers after a loss
NO_KEYS = np.empty(0, dtype=np.uint64)


class _Lost(Exception):
    """A block's worker went away (or stopped answering) during a call."""


# --------------------------------------------------------------------------- plan


def state_bytes(n: int, nnz: int, d: int) -> int:
    """What one worker holds for a single-worker fit: P (float64 + float32 values, int32
    columns) and the n x d positions, update, gains and the step's output (float64)."""
    return int(nnz) * 16 + int(n) * d * 8 * 4


def plan_optimizer(choice: str, n: int, nnz: int, d: int, client) -> dict:
    """{"optimizer": "single" | "distributed", "blocks": B, "reason": str}."""
    if client is None:
        if choice == "distributed":
            raise InputError(
                "optimizer='distributed' spreads the fit over Dask workers; no "
                "Dask client is active.",
                "start a dask.distributed Client (or "
                "run through the flow), or pass optimizer='single'.",
            )
        return {"optimizer": "single", "blocks": 1, "reason": "no Dask client"}
    n_workers = len(workers(client))
    memory = smallest_worker_memory(client) or 0
    need = state_bytes(n, nnz, d)
    if choice == "distributed":
        return {
            "optimizer": "distributed",
            "blocks": max(1, n_workers),
            "reason": "optimizer='distributed'",
        }
    if choice == "single":
        return {"optimizer": "single", "blocks": 1, "reason": "optimizer='single'"}
    if n_workers >= 2 and memory and need > STATE_SHARE * memory:
        return {
            "optimizer": "distributed",
            "blocks": n_workers,
            "reason": f"P and the optimiser's state ({need / 2**30:.2f} GiB) exceed "
            f"{STATE_SHARE:g} of a worker's memory ({memory / 2**30:.2f} GiB)",
        }
    return {
        "optimizer": "single",
        "blocks": 1,
        "reason": (
            f"P and the optimiser's state ({need / 2**30:.2f} GiB) fit in "
            f"{STATE_SHARE:g} of a worker's memory"
            if memory and n_workers >= 2
            else f"{n_workers} worker(s)"
        ),
    }


def block_bounds(n: int, blocks: int) -> list[tuple[int, int]]:
    """B contiguous row ranges of near-equal size."""
    cuts = np.linspace(0, n, max(1, min(blocks, n)) + 1).round().astype(int)
    return [(int(a), int(b)) for a, b in zip(cuts[:-1], cuts[1:])]


def block_graphs(graph, bounds) -> list:
    """What each block's P tasks read the graph from: a graph source as it is (tasks read
    their rows from the store), an in-memory graph as one literal per block holding only that
    block's rows (no task, and no worker, receives the whole graph)."""
    if not isinstance(graph, KNNGraph):
        return [graph] * len(bounds)
    return [delayed_literal(GraphRows.of(graph, s, e)) for s, e in bounds]


# --------------------------------------------------------------------------- actors


class TSNEBlock:
    """Rows [start, stop) of a t-SNE fit, in a Dask actor: their rows of P and state."""

    def __init__(self, P, start: int, n_threads: int):
        self.indptr, self.indices, self.data = P.indptr, P.indices, P.data
        self.data32 = P.data.astype(np.float32)
        self.start, self.stop = int(start), int(start) + P.shape[0]
        self.nt = int(n_threads)
        self.Y = self.update = self.gains = self.bw = None

    def set_state(self, update, gains) -> None:
        self.update = np.array(update, dtype=np.float64)
        self.gains = np.array(gains, dtype=np.float64)

    def get_state(self):
        return self.update, self.gains

    def charges(self, Y, spec: GridSpec):
        """Keep the positions; the charges of this block's rows on the grid ``spec``."""
        t0 = time.perf_counter()
        self.Y = Y
        Yb = Y[self.start : self.stop]
        with threads(self.nt):
            self.bw = spec.weights(Yb)
            charges = spec.charges(Yb, *self.bw)
        return charges, time.perf_counter() - t0

    def _kl_part(self, Yb):
        rows = np.empty(Yb.shape[0])
        kl_attractive_part(self.indptr, self.indices, self.data, Yb, self.Y, rows)
        return float(rows.sum()), float(self.data.sum())

    def step(
        self,
        spec: GridSpec,
        pot,
        Z: float,
        exaggeration: float,
        momentum: float,
        learning_rate: float,
        min_gain: float,
        max_step: float,
        kl: bool,
    ):
        """This block's rows after one step (and the KL's parts at the current positions)."""
        t0 = time.perf_counter()
        Yb = np.ascontiguousarray(self.Y[self.start : self.stop])
        with threads(self.nt):
            phi = spec.phi(Yb, *self.bw, pot)
            part = self._kl_part(Yb) if kl else None
            Ynew = np.empty_like(Yb)
            fused_step(
                self.indptr,
                self.indices,
                self.data32,
                Yb,
                self.Y,
                phi,
                1.0 / Z,
                exaggeration,
                self.update,
                self.gains,
                momentum,
                learning_rate,
                min_gain,
                max_step,
                Ynew,
            )
        return Ynew, part, time.perf_counter() - t0

    def kl_part(self):
        with threads(self.nt):
            return self._kl_part(np.ascontiguousarray(self.Y[self.start : self.stop]))


class UMAPBlock:
    """Rows [start, stop) of a UMAP fit, in a Dask actor: their edges and schedules."""

    def __init__(self, P, start: int, n_threads: int):
        self.P = P
        self.start, self.stop = int(start), int(start) + P.shape[0]
        self.nt = int(n_threads)

    def max_weight(self) -> float:
        return float(self.P.data.max()) if self.P.data.size else 0.0

    def edges(self, w_max: float, n_epochs: int, negative_sample_rate: int) -> int:
        """This block's edges with the epochs per sample relative to the strongest edge of the
        whole graph (`umap._edges` on these rows); the number kept."""
        self.indptr, self.indices, self.eps, self.eps_neg = edge_schedule(
            self.P, n_epochs, negative_sample_rate, w_max=w_max
        )
        return int(self.indices.size)

    def set_state(self, nxt, nxt_neg) -> None:
        self.nxt, self.nxt_neg = np.array(nxt), np.array(nxt_neg)

    def initial_state(self):
        return self.eps.copy(), self.eps_neg.copy()

    def get_state(self):
        return self.nxt, self.nxt_neg

    def epoch(self, Yref, a, b, gamma, alpha, epoch: int, seed: int):
        t0 = time.perf_counter()
        Yb = Yref[self.start : self.stop].copy()
        shape = (self.indices.size, Yb.shape[1])
        if getattr(self, "pulls", None) is None or self.pulls.shape != shape:
            self.pulls = np.zeros(shape, dtype=np.float32)
        with threads(self.nt):
            sgd_epoch(
                Yb,
                Yref,
                self.indptr,
                self.indices,
                self.eps,
                self.nxt,
                self.eps_neg,
                self.nxt_neg,
                a,
                b,
                gamma,
                alpha,
                epoch,
                seed,
                self.start,
                NO_KEYS,
                np.float32(1.0),
                True,
                self.pulls,
            )
            sums = pull_sums(self.indices, self.pulls, Yref.shape[0])
        return Yb, sums, time.perf_counter() - t0

    def ce_part(self, Y, a: float, b: float):
        return edge_terms(self.P, self.start, Y, a, b)


class _Blocks:
    """The actors of one fit: made from the P row blocks, called together, rebuilt after a
    worker is lost."""

    def __init__(self, client, cls, P_blocks, bounds, n_threads):
        self.client, self.cls, self.P_blocks, self.bounds = client, cls, P_blocks, bounds
        self.n_threads, self.actors, self.recoveries = n_threads, [], 0
        self.sent = 0  # bytes sent to and received from the blocks

    def create(self) -> None:
        from distributed import wait

        client = self.client
        try:
            client.wait_for_workers(1, timeout=WAIT_WORKERS)
        except (TimeoutError, OSError) as exc:
            raise StageError(
                f"The distributed optimiser has no Dask worker left to place "
                f"its {len(self.bounds)} blocks on.",
                "restart the workers (or "
                "the cluster) and run again; the fit resumes from its last "
                "checkpoint.",
            ) from exc
        futures = client.compute(self.P_blocks)
        wait(futures, timeout=CALL_TIMEOUT)
        holders = client.who_has(futures)
        listed = sorted(workers(client))
        load = {w: 0 for w in listed}
        actors = []
        for b, fut in enumerate(futures):
            own = [w for w in holders.get(fut.key, ()) if w in load]
            free = [w for w in own if load[w] == min(load.values())]
            w = free[0] if free else min(listed, key=lambda x: (load[x], x))
            load[w] += 1
            actors.append(
                client.submit(
                    self.cls,
                    fut,
                    self.bounds[b][0],
                    self.n_threads,
                    actor=True,
                    workers=[w],
                    allow_other_workers=True,
                    pure=False,
                )
            )
        self.actors = [a.result(timeout=CALL_TIMEOUT) for a in actors]
        self._futures = actors  # keeps the actors alive
        self.placement = [load[w] for w in listed]

    def call(self, method: str, *args, per_block=None):
        """``method(*args, *per_block[b])`` on every block at once; the results in block
        order. `_Lost` when a block's worker is gone or silent."""
        try:
            futs = [
                getattr(a, method)(*args, *(per_block[b] if per_block else ()))
                for b, a in enumerate(self.actors)
            ]
            return [f.result(timeout=CALL_TIMEOUT) for f in futs]
        except (OSError, TimeoutError, RuntimeError) as exc:
            if isinstance(exc, RuntimeError) and "lost" not in str(exc).lower():
                raise
            raise _Lost(f"{type(exc).__name__}: {exc}") from exc

    def state(self) -> tuple:
        """The blocks' optimiser state (two arrays), concatenated in row order."""
        parts = self.call("get_state")
        return tuple(np.concatenate([p[i] for p in parts]) for i in range(2))

    def recover(self, exc: Exception, what: str) -> None:
        self.recoveries += 1
        if self.recoveries > MAX_RECOVERIES:
            raise StageError(
                f"The distributed {what} lost a worker {self.recoveries} times ({exc}).",
                "check the workers' logs (memory limits, "
                "preemption) and run again; the fit resumes from its last "
                "checkpoint.",
            ) from exc
        log.warning(
            "%s: a block's worker was lost (%s); rebuilding the %d blocks on the "
            "workers left and resuming from the last checkpoint",
            what,
            exc,
            len(self.bounds),
        )
        self.actors, self._futures = [], []
        self.create()

    def close(self) -> None:
        self.actors, self._futures = [], []


def _nbytes(*arrays) -> int:
    return int(sum(np.asarray(a).nbytes for a in arrays if a is not None))


def _per_iteration(clock: dict, iters: int) -> dict:
    """Where an iteration's time went: the slowest block's compute, the coordinator's own
    work, and the rest (transfers, serialisation, waiting)."""
    k = max(1, iters)
    rest = clock["wall"] - clock["blocks"] - clock["coordinator"]
    return {
        "wall": round(clock["wall"] / k, 4),
        "blocks": round(clock["blocks"] / k, 4),
        "coordinator": round(clock["coordinator"] / k, 4),
        "transfer_and_wait": round(rest / k, 4),
    }


def _split(arr, bounds):
    return [arr[s:e] for s, e in bounds]


# --------------------------------------------------------------------------- t-SNE


def optimize_tsne_distributed(
    P_blocks,
    bounds,
    initial,
    s: dict,
    client,
    *,
    checkpoint=None,
    progress=None,
    n_threads: int = 1,
):
    """The t-SNE gradient descent of `tsne.optimize_tsne` over row blocks on the workers.
    ``P_blocks``: lazy row blocks of P (``bounds``); ``initial``: (iteration, Y, update,
    gains) to start from. Returns (Y, kl, info)."""
    if s["gradient"] != "fft":
        raise InputError(
            "optimizer='distributed' computes t-SNE's repulsion on an "
            f"interpolation grid; found gradient={s['gradient']!r}.",
            "pass gradient='fft' (or optimizer='single').",
        )
    n = bounds[-1][1]
    interp = Interpolation(
        s["n_interpolation_points"], s["min_num_intervals"], s["ints_in_interval"]
    )
    fft_threads = os.cpu_count() or 1
    blocks = _Blocks(client, TSNEBlock, P_blocks, bounds, n_threads)
    start, Y, update, gains = initial
    saved = (start, Y.copy(), update.copy(), gains.copy())
    total, every = s["n_iter"], s["callback_every"]
    ck_every = s["checkpoint_every"] or 50
    t0, iters, moved, kl = time.perf_counter(), 0, 0, None

    def restore(state):
        it, Yr, up, ga = state
        blocks.call("set_state", per_block=list(zip(_split(up, bounds), _split(ga, bounds))))
        return it, Yr.copy()

    clock = {"blocks": 0.0, "coordinator": 0.0, "wall": 0.0}

    def grid(Y):
        spec = GridSpec.around(Y.min(axis=0), Y.max(axis=0), interp)
        out = blocks.call("charges", Y, spec)
        ch = [c for c, _ in out]
        t1 = time.perf_counter()
        charges = ch[0].copy()
        for c in ch[1:]:
            charges += c
        pot, Z = spec.potentials(charges, n, fft_threads)
        pot = pot.astype(np.float32)
        clock["coordinator"] += time.perf_counter() - t1
        clock["blocks"] += max(t for _, t in out)
        return spec, pot, Z, _nbytes(*ch) + Y.nbytes * len(bounds)

    blocks.create()
    it, Y = restore(saved)
    while True:
        try:
            while it < total:
                early = it < s["early_exaggeration_iter"]
                exag = s["early_exaggeration"] if early else s["exaggeration"]
                report = progress is not None and every and (it % every == 0)
                t_it = time.perf_counter()
                spec, pot, Z, nb = grid(Y)
                res = blocks.call(
                    "step",
                    spec,
                    pot,
                    Z,
                    exag,
                    s["momentum"] if early else s["final_momentum"],
                    learning_rate_of(s, n, exag),
                    s["min_gain"],
                    s["max_step_norm"],
                    bool(report),
                )
                Y = np.concatenate([r[0] for r in res])
                Y -= Y.mean(axis=0)
                clock["blocks"] += max(r[2] for r in res)
                clock["wall"] += time.perf_counter() - t_it
                moved += nb + pot.nbytes * len(bounds) + Y.nbytes
                iters += 1
                if report:
                    kl = sum(r[1][0] for r in res) + sum(r[1][1] for r in res) * np.log(Z)
                    progress(it, total, kl)
                it += 1
                if it % ck_every == 0 and it < total:
                    update, gains = blocks.state()
                    saved = (it, Y.copy(), update, gains)
                    if checkpoint is not None and s["checkpoint_every"]:
                        checkpoint.save(
                            {
                                "iteration": it,
                                "embedding": Y,
                                "update": update,
                                "gains": gains,
                                "rng": {"seed": s["random_state"]},
                                "loss": kl,
                            }
                        )
            spec, pot, Z, _ = grid(Y)
            parts = blocks.call("kl_part")
            break
        except _Lost as exc:
            blocks.recover(exc, "t-SNE optimisation")
            it, Y = restore(saved)
    kl = sum(p[0] for p in parts) + sum(p[1] for p in parts) * np.log(Z)
    if progress is not None:
        progress(total, total, kl)
    info = {
        "seconds": round(time.perf_counter() - t0, 3),
        "resumed_from": initial[0],
        "gradient": "fft",
        "optimizer": "distributed",
        "blocks": len(bounds),
        "blocks_per_worker": blocks.placement,
        "recoveries": blocks.recoveries,
        "bytes_per_iteration": int(moved / max(1, iters)),
        "seconds_per_iteration": _per_iteration(clock, iters),
    }
    blocks.close()
    return Y, float(kl), info


# --------------------------------------------------------------------------- UMAP


def optimize_umap_distributed(
    P_blocks, bounds, Y0, s: dict, client, *, checkpoint=None, progress=None, n_threads: int = 1
):
    """The SGD epochs of `umap.optimize_umap` over row blocks on the workers (the same
    embedding bit for bit); (Y, (edge terms per block), info)."""
    n_epochs = s["n_epochs"]
    blocks = _Blocks(client, UMAPBlock, P_blocks, bounds, n_threads)
    state = checkpoint.load() if checkpoint is not None else None
    ck_every = s["checkpoint_every"] or 20
    a, b = np.float32(s["a"]), np.float32(s["b"])
    gamma = np.float32(s["repulsion_strength"])

    def prepare():
        w_max = max(blocks.call("max_weight"))
        counts = blocks.call("edges", w_max, n_epochs, s["negative_sample_rate"])
        return np.concatenate([[0], np.cumsum(counts)])

    def restore(saved):
        start, Y, nxt, nxt_neg = saved
        if nxt is None:
            blocks.call("set_state", per_block=blocks.call("initial_state"))
        else:
            per = [
                (nxt[cuts[i] : cuts[i + 1]], nxt_neg[cuts[i] : cuts[i + 1]])
                for i in range(len(bounds))
            ]
            blocks.call("set_state", per_block=per)
        return start, np.array(Y, dtype=np.float32)

    first = int(state["iteration"]) if state is not None else 0
    if state is not None:
        saved = (
            int(state["iteration"]),
            np.array(state["embedding"], np.float32),
            np.asarray(state["next_sample"]),
            np.asarray(state["next_negative"]),
        )
    else:
        saved = (0, np.array(Y0, dtype=np.float32), None, None)
    t0, epochs, moved = time.perf_counter(), 0, 0
    clock = {"blocks": 0.0, "coordinator": 0.0, "wall": 0.0}
    blocks.create()
    cuts = prepare()
    epoch, Y = restore(saved)
    while True:
        try:
            while epoch < n_epochs:
                alpha = np.float32(s["learning_rate"] * (1.0 - epoch / n_epochs))
                t_it = time.perf_counter()
                out = blocks.call("epoch", Y, a, b, gamma, alpha, epoch, s["random_state"])
                t1 = time.perf_counter()
                Y = np.concatenate([y for y, _, _ in out])
                sums = out[0][1].copy()
                for _, part, _ in out[1:]:
                    sums += part  # int64 fixed point: exact, the single worker's integers
                apply_pulls(Y, sums, alpha)
                clock["coordinator"] += time.perf_counter() - t1
                clock["blocks"] += max(t for _, _, t in out)
                clock["wall"] += time.perf_counter() - t_it
                moved += Y.nbytes * (len(bounds) + 1) + sum(p.nbytes for _, p, _ in out)
                epochs += 1
                epoch += 1
                if (
                    progress is not None
                    and s["callback_every"]
                    and epoch % s["callback_every"] == 0
                ):
                    progress(epoch, n_epochs, None)
                if epoch % ck_every == 0 and epoch < n_epochs:
                    nxt, nxt_neg = blocks.state()
                    saved = (epoch, Y.copy(), nxt, nxt_neg)
                    if checkpoint is not None and s["checkpoint_every"]:
                        checkpoint.save(
                            {
                                "iteration": epoch,
                                "embedding": Y,
                                "next_sample": nxt,
                                "next_negative": nxt_neg,
                                "rng": {"seed": s["random_state"]},
                                "loss": None,
                            }
                        )
            terms = blocks.call("ce_part", Y, float(s["a"]), float(s["b"]))
            edges = int(cuts[-1])
            break
        except _Lost as exc:
            blocks.recover(exc, "UMAP optimisation")
            cuts = prepare()
            epoch, Y = restore(saved)
    info = {
        "seconds": round(time.perf_counter() - t0, 3),
        "resumed_from": first,
        "edges": edges,
        "optimizer": "distributed",
        "blocks": len(bounds),
        "blocks_per_worker": blocks.placement,
        "recoveries": blocks.recoveries,
        "bytes_per_iteration": int(moved / max(1, epochs)),
        "seconds_per_iteration": _per_iteration(clock, epochs),
    }
    blocks.close()
    return Y, terms, info
