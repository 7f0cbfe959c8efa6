"""What t-SNE, SNE and UMAP share: sweeps of parameter settings, running each optimisation as
one task on a Dask worker (or in this process), threads, progress relayed from the workers to
the caller, the checkpoint protocol, the PCA initialisation and the kNN graph a fit reads.

Checkpoints. An optimiser given ``checkpoint`` (an object with ``save(state)`` and
``load() -> state | None``) saves its state every ``checkpoint_every`` iterations and, when
``load()`` returns a state, continues from it instead of starting again. A state is a dict:
``iteration`` (done so far), ``embedding``, the optimiser's arrays (t-SNE: ``update``,
``gains``; UMAP: ``next_sample``, ``next_negative``), ``rng`` (the random generator's state:
both optimisers use counter-based streams keyed by (seed, iteration, row), so it is the seed)
and ``loss``. Every iteration is a function of that state and of quantities recomputed
exactly from the inputs, so a resumed run ends bit for bit where an uninterrupted one does.
For a sweep, ``checkpoint`` is a factory ``checkpoint(index, setting) -> object or None``.

Progress. ``callback(index, iteration, total, loss)`` is called in the caller's process
(the optimisers on the workers send their progress as Dask events, relayed here).
"""

from __future__ import annotations

import contextlib
import itertools
import numbers
import os
import queue
import time
import uuid
import warnings
from dataclasses import dataclass, field

import numpy as np

from .._compute import PausedWatch, active_client, compute, wait_done, workers
from .._validation import check_random_state, is_dask
from ..errors import DimredWarning, InputError
from ._base import like_input
from ._graph_common import is_graph_source

__all__ = [
    "expand_sweep",
    "run_tasks",
    "threads",
    "MemoryCheckpoint",
    "pca_init",
    "one_run",
    "graph_ref",
    "delayed_literal",
    "like_input",
    "EmbeddingSet",
    "check_int",
    "check_float",
    "check_choice",
    "check_known",
    "TaskProgress",
    "threads_per_task",
    "check_fit_sample",
    "fit_then_place",
    "fitted_reference",
    "save_due",
    "report_due",
]


# --------------------------------------------------------------------------- parameters


def check_int(name, value, lo, hi=None, method="") -> int:
    if (
        not isinstance(value, numbers.Integral)
        or isinstance(value, bool)
        or value < lo
        or (hi is not None and value > hi)
    ):
        span = f">= {lo}" if hi is None else f"in {lo}..{hi}"
        raise InputError(
            f"{method} needs an int {name} {span}; found {value!r}.", f"pass {name} {span}."
        )
    return int(value)


def check_float(name, value, lo=None, hi=None, method="", open_lo=True) -> float:
    ok = isinstance(value, numbers.Real) and not isinstance(value, bool) and np.isfinite(value)
    if ok and lo is not None:
        ok = value > lo if open_lo else value >= lo
    if ok and hi is not None:
        ok = value <= hi
    if not ok:
        span = ("" if lo is None else f"{'>' if open_lo else '>='} {lo}") + (
            "" if hi is None else f" and <= {hi}"
        )
        raise InputError(
            f"{method} needs a finite number {name} {span}; found {value!r}.",
            f"pass {name} {span}.",
        )
    return float(value)


def check_choice(name, value, choices, method="") -> str:
    if value not in choices:
        raise InputError(
            f"{method} {name} must be one of {', '.join(map(str, choices))}; found {value!r}.",
            f"pass {name}={choices[0]!r}.",
        )
    return value


def check_known(params: dict, defaults: dict, method: str) -> None:
    """`InputError` for any of ``params`` that is not a key of ``defaults``."""
    unknown = sorted(set(params) - set(defaults))
    if unknown:
        raise InputError(
            f"Unknown {method} parameter(s) {unknown}.", f"use only {sorted(defaults)}."
        )


def expand_sweep(params: dict, sweepable: tuple) -> list[dict]:
    """The settings of a sweep: every parameter of ``sweepable`` given as a list is swept,
    several lists make their product (first list varies slowest)."""
    keys = [k for k in sweepable if isinstance(params.get(k), (list, tuple))]
    for k in keys:
        if len(params[k]) == 0:
            raise InputError(f"The sweep over {k} is empty.", f"give {k} at least one value.")
    others = [k for k, v in params.items() if isinstance(v, (list, tuple)) and k not in keys]
    if others:
        raise InputError(
            f"Only {', '.join(sweepable)} can be swept; found lists for {others}.",
            "pass one value for those.",
        )
    if not keys:
        return [dict(params)]
    return [
        {**params, **dict(zip(keys, combo))}
        for combo in itertools.product(*[list(params[k]) for k in keys])
    ]


def one_run(
    sweep, name: str, sweepable: tuple, X, graph, checkpoint, callback, n_jobs, params: dict
):
    """The single-embedding form of ``sweep`` (tsne, umap, sne): lists are refused, the
    checkpoint is one object with save/load, ``callback(iteration, total, loss)``."""
    swept = [k for k in sweepable if isinstance(params.get(k), (list, tuple))]
    if swept:
        raise InputError(
            f"{name} makes one embedding; found lists for {swept}.",
            f"use {name}_sweep for several settings.",
        )
    ck = (lambda i, s: checkpoint) if checkpoint is not None else None
    cb = (lambda i, it, total, loss: callback(it, total, loss)) if callback else None
    return sweep(X, graph=graph, checkpoint=ck, callback=cb, n_jobs=n_jobs, **params)[0]


# --------------------------------------------------------------------------- sample fit


def check_fit_sample(value, n: int, method: str, graph=None, init=None) -> int | None:
    """The number of rows to fit on, or None (fit on all): ``fit_sample`` None or >= n."""
    if value is None:
        return None
    if not isinstance(value, numbers.Integral) or isinstance(value, bool) or value < 10:
        raise InputError(
            f"{method} fit_sample must be an int >= 10 (rows to fit on) or None; found {value!r}.",
            "pass fit_sample=100000 (fit on 100 000 rows, "
            "place the others with transform), or leave it out.",
        )
    if value >= n:
        return None
    if graph is not None:
        raise InputError(
            f"{method} with fit_sample={value} builds the kNN graph of the "
            f"sampled rows; a graph of all {n} rows was given.",
            "leave graph out, or leave fit_sample out.",
        )
    if isinstance(init, np.ndarray):
        raise InputError(
            f"{method} with fit_sample={value} cannot take an init array of {init.shape[0]} rows.",
            "pass init='pca' (or 'spectral' for UMAP), or leave fit_sample out.",
        )
    return int(value)


def fit_sample_rows(n: int, size: int, seed: int) -> np.ndarray:
    """The sorted rows a fit on ``size`` of ``n`` rows with ``seed`` is made on (`fit_then_place`;
    a run's model finds them again from its recorded sample)."""
    return np.sort(np.random.default_rng(seed).choice(n, size=size, replace=False))


def fit_then_place(sweep, place, X, size: int, seed: int, stage: str, **kw) -> list:
    """`sweep` on ``size`` rows of X drawn without replacement with ``seed`` (recorded), then
    every row placed into each embedding by ``place(X_fit, Y_fit, X, params)`` (dask X: one
    task per row chunk, on all workers); the sampled rows keep their fitted positions. Each
    model gains ``fit_rows``, ``fit_X`` (those rows, what ``transform`` places against) and
    ``info["fit_sample"]``."""
    from ..linalg.landmarks import take_rows

    n = X.shape[0]
    rows = fit_sample_rows(n, size, seed)
    Xs = np.asarray(take_rows(X, rows, "fit sample"))
    models = sweep(Xs, fit_sample=None, **kw)
    for m in models:
        t0 = time.perf_counter()
        Y = place(Xs, m.embedding, X, m.params)
        if is_dask(Y):
            (Y,) = compute(Y, stage=f"{stage}: placing {n - size} rows")
        Y = np.asarray(Y, dtype=m.embedding.dtype)
        Y[rows] = m.embedding
        m.info["fit_sample"] = {
            "rows": int(size),
            "of": int(n),
            "seed": int(seed),
            "placed_rows": int(n - size),
            "place_seconds": round(time.perf_counter() - t0, 3),
        }
        m.embedding, m.fit_rows, m.fit_X = Y, rows, Xs
    return models


def fitted_reference(X, model):
    """(rows, embedding) that ``transform`` places new points against: the fit sample's when
    the model was fitted on one, else all of X."""
    if model.fit_rows is None:
        return X, model.embedding
    return model.fit_X, model.embedding[model.fit_rows]


# --------------------------------------------------------------------------- graph


def graph_ref(graph):
    """What the tasks receive for the graph: a graph source as it is (each task reads its
    rows), an in-memory graph as one dask literal (the scheduler keeps it, so a dead worker
    loses nothing that cannot be recomputed; never scattered to a single worker)."""
    return graph if is_graph_source(graph) else delayed_literal(graph)


def delayed_literal(value):
    from dask import delayed

    return delayed(value, pure=True, traverse=False)


# --------------------------------------------------------------------------- init


def pca_init(X, n_components: int, random_state=0) -> np.ndarray:
    """The first ``n_components`` principal component scores of X (float64, NumPy).

    X with fewer features (or rows) than ``n_components`` has only that many scores; the
    remaining coordinates start as small Gaussian noise (1e-4 of the first score's standard
    deviation): exact zeros would get no gradient and stay zero."""
    from .pca import pca

    k = min(n_components, *X.shape)
    with warnings.catch_warnings():  # constant columns: worth a warning for PCA, not here
        warnings.filterwarnings("ignore", message=".*zero variance", category=DimredWarning)
        model = pca(X, n_components=k, random_state=random_state)
    Y = model.transform(X)
    if is_dask(Y):
        (Y,) = compute(Y, stage="PCA initialisation")
    Y = np.asarray(Y, dtype=np.float64)
    if k < n_components:
        scale = 1e-4 * (float(Y[:, 0].std()) or 1.0)
        noise = check_random_state(random_state).normal(0.0, scale, (Y.shape[0], n_components - k))
        Y = np.hstack([Y, noise])
    return Y


def random_init(n: int, n_components: int, scale: float, random_state) -> np.ndarray:
    return check_random_state(random_state).normal(0.0, scale, (n, n_components))


# --------------------------------------------------------------------------- checkpoints


class MemoryCheckpoint:
    """Checkpoints kept in memory (copies): for tests and interactive use. ``fail_after``
    makes the n-th save raise `InterruptedError` after storing, to simulate a crash."""

    def __init__(self, fail_after: int | None = None):
        self.states: list[dict] = []
        self.fail_after = fail_after

    def save(self, state: dict) -> None:
        self.states.append(
            {
                k: (np.array(v, copy=True) if isinstance(v, np.ndarray) else v)
                for k, v in state.items()
            }
        )
        if self.fail_after is not None and len(self.states) >= self.fail_after:
            self.fail_after = None
            raise InterruptedError(f"simulated crash after checkpoint {len(self.states)}")

    def load(self) -> dict | None:
        return dict(self.states[-1]) if self.states else None


def save_due(checkpoint, s: dict, done: int, total: int, embedding, loss, **arrays) -> None:
    """Save the state after ``done`` of ``total`` iterations when a checkpoint is due (every
    ``checkpoint_every`` of setting ``s``, none after the last): ``iteration``,
    ``embedding``, the optimiser's ``arrays``, ``rng`` (the seed) and ``loss``."""
    if (
        checkpoint is not None
        and s["checkpoint_every"]
        and done % s["checkpoint_every"] == 0
        and done < total
    ):
        checkpoint.save(
            {
                "iteration": done,
                "embedding": embedding,
                **arrays,
                "rng": {"seed": s["random_state"]},
                "loss": loss,
            }
        )


def report_due(progress, s: dict, done: int, total: int, loss) -> None:
    """``progress(done, total, loss)`` every ``callback_every`` iterations of setting ``s``."""
    if progress is not None and s["callback_every"] and done % s["callback_every"] == 0:
        progress(done, total, loss)


# --------------------------------------------------------------------------- threads


@contextlib.contextmanager
def threads(n: int | None):
    """numba's threads for this thread of the process (numba's setting is thread-local)."""
    import numba

    if not n:
        yield numba.get_num_threads()
        return
    old = numba.get_num_threads()
    numba.set_num_threads(int(max(1, min(n, numba.config.NUMBA_NUM_THREADS))))
    try:
        yield numba.get_num_threads()
    finally:
        numba.set_num_threads(old)


def threads_per_task(n_tasks: int, client) -> int | None:
    """Split a host's cores between the tasks that will run on it at once."""
    hosts: dict = {}
    for w in workers(client).values():
        hosts[w.get("host")] = hosts.get(w.get("host"), 0) + 1
    per_host = max(hosts.values()) if hosts else 1
    cores = os.cpu_count() or 1
    return max(1, cores // max(1, min(n_tasks, per_host)))


# --------------------------------------------------------------------------- tasks


@dataclass
class TaskProgress:
    """Progress of one optimisation: in this process a direct call of the caller's callback;
    in a Dask task a worker event on ``topic`` (relayed to the caller by `run_tasks`)."""

    index: int
    topic: str | None = None
    callback: object = None

    def __call__(self, iteration: int, total: int, loss) -> None:
        if self.topic is None:
            if self.callback is not None:
                self.callback(self.index, iteration, total, loss)
            return
        try:
            from distributed import get_worker

            get_worker().log_event(
                self.topic,
                (self.index, int(iteration), int(total), None if loss is None else float(loss)),
            )
        except (ImportError, ValueError):
            pass


def run_tasks(
    fn, jobs: list[tuple], *, shared: dict, callback=None, n_jobs=None, stage: str = "optimise"
) -> list:
    """``fn(*job, progress=TaskProgress, n_jobs=threads, **shared)`` for each job: one task
    per job on the Dask workers when a client is active (``shared`` values scattered once or
    given as dask delayed objects), else one after the other in this process."""
    client = active_client()
    if client is None:
        return [
            fn(*job, progress=TaskProgress(i, None, callback), n_jobs=n_jobs, **shared)
            for i, job in enumerate(jobs)
        ]
    from dask import delayed

    n_threads = n_jobs or threads_per_task(len(jobs), client)
    topic = f"dimred-progress-{uuid.uuid4().hex}"
    events: queue.Queue = queue.Queue()
    if callback is not None:
        client.subscribe_topic(topic, lambda ev: events.put(ev[1]))
    task = delayed(fn, pure=False)
    tasks = [
        task(*job, progress=TaskProgress(i, topic), n_jobs=n_threads, **shared)
        for i, job in enumerate(jobs)
    ]
    try:
        futures = client.compute(tasks)
        _wait_relaying(futures, events, callback, PausedWatch(client, stage))
        return client.gather(futures)
    finally:
        if callback is not None:
            client.unsubscribe_topic(topic)


def _wait_relaying(futures, events: queue.Queue, callback, watch, poll: float = 0.5) -> None:
    """Wait for ``futures``, relaying their progress events to ``callback``; fails (the
    `PausedWatch`) when every worker stays paused for memory."""

    def drain():
        while True:
            try:
                msg = events.get_nowait()
            except queue.Empty:
                return
            if callback is not None:
                callback(*msg)

    while not wait_done(futures, poll):
        drain()
        watch.check()
    drain()


# --------------------------------------------------------------------------- results


@dataclass
class EmbeddingSet:
    """Several embeddings of the same rows (a sweep): what the flow saves and reloads."""

    method: str
    embeddings: list  # of (n, d) arrays
    settings: list  # of dicts: the parameters of each embedding
    losses: list  # of floats (KL for t-SNE / SNE, cross-entropy for UMAP)
    info: list = field(default_factory=list)  # per embedding: iterations, timings, ...

    @property
    def convergence(self) -> list:
        """Every embedding's convergence records, each with its ``embedding`` index."""
        return [
            {**r, "embedding": i}
            for i, info in enumerate(self.info)
            for r in (info or {}).get("convergence") or []
        ]

    def arrays(self) -> dict:
        return {f"embedding_{i}": np.asarray(Y) for i, Y in enumerate(self.embeddings)}

    def scalars(self) -> dict:
        return {
            "method": self.method,
            "settings": self.settings,
            "losses": [float(v) for v in self.losses],
            "info": self.info,
            "n_embeddings": len(self.embeddings),
        }

    @classmethod
    def from_arrays(cls, arrays: dict, scalars: dict) -> "EmbeddingSet":
        m = int(scalars["n_embeddings"])
        return cls(
            scalars["method"],
            [np.asarray(arrays[f"embedding_{i}"]) for i in range(m)],
            list(scalars["settings"]),
            list(scalars["losses"]),
            list(scalars.get("info") or []),
        )


def learning_rate_of(s: dict, n: int, exaggeration: float) -> float:
    """t-SNE's step: n / exaggeration for ``learning_rate="auto"`` (as openTSNE), else the
    setting's."""
    return n / exaggeration if s["learning_rate"] == "auto" else float(s["learning_rate"])
