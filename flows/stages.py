"""Stage helpers for the flows: progress artifacts, stage markers, row samples."""

from __future__ import annotations

import contextlib
import functools
import os
import time

import numpy as np

from dimred_dask._progress import TerminalBar, reporting

TERMINAL_ENV = "DIMRED_TERMINAL_PROGRESS"


@contextlib.contextmanager
def stage_progress(title: str, *, min_interval: float = 1.0):
    """Report progress of a stage to a Prefect progress artifact (and the terminal if the CLI
    asked for it). The artifact moves at most once per ``min_interval`` seconds."""
    from prefect.artifacts import create_progress_artifact, update_progress_artifact

    try:
        artifact_id = create_progress_artifact(progress=0.0, description=title)
    except Exception:  # outside a run, or the API is unreachable: progress is optional
        artifact_id = None
    bar = TerminalBar() if os.environ.get(TERMINAL_ENV) else None
    state = {"last": 0.0, "pct": 0.0}

    def callback(stage: str, done: float, total: float):
        if bar is not None:
            bar(f"{title}: {stage}", done, total)
        pct = 100.0 * done / total if total else 0.0
        now = time.monotonic()
        if artifact_id is not None and (now - state["last"] >= min_interval or pct >= 100.0):
            state["last"], state["pct"] = now, pct
            update_progress_artifact(
                artifact_id, progress=min(pct, 100.0), description=f"{title}: {stage}"
            )

    with reporting(callback):
        yield
    if artifact_id is not None:
        update_progress_artifact(artifact_id, progress=100.0, description=f"{title}: done")


def chunk_sample(
    chunks, size: int, *, max_chunks: int = 8, seed: int = 0
) -> tuple[np.ndarray, str]:
    """Sorted row indices of a sample of ``size`` rows drawn from at most ``max_chunks`` row
    chunks, so that sampling reads a few chunks rather than the whole array."""
    rng = np.random.default_rng(seed)
    sizes = np.asarray(chunks, dtype=np.int64)
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    n = int(sizes.sum())
    if size >= n:
        return np.arange(n), f"all {n} rows"
    picked = np.sort(rng.choice(len(sizes), size=min(max_chunks, len(sizes)), replace=False))
    pool = np.concatenate([np.arange(starts[i], starts[i] + sizes[i]) for i in picked])
    idx = np.sort(rng.choice(pool, size=min(size, len(pool)), replace=False))
    return idx, f"{len(idx)} rows from {len(picked)} of {len(sizes)} chunks (seed {seed})"


def stage_reusable(store, mode: str, stage: str, fingerprint: str) -> dict | None:
    """The stage's marker if it was committed for this exact fingerprint, else None."""
    if mode != "resume":
        return None
    marker = store.stage_marker(stage)
    if marker and marker.get("fingerprint") == fingerprint:
        return marker
    return None


HOOK_ENV = "DIMRED_HOOK"


def notify(event: str, **details) -> None:
    """Call the observer that ``DIMRED_HOOK=package.module:function`` names, if it is set, as
    ``function(event, **details)``. Events: ``"stage"`` right after a stage committed
    (``stage``, ``fingerprint``, ``output``; in the flow's process) and ``"checkpoint"`` right
    after an optimisation wrote a checkpoint (``output``, ``prefix``, ``iteration``, ``count``;
    in the worker that wrote it). For audit trails and notifications; the test suite's observer
    (``tests/hooks.py``) counts executions and kills processes at exact points. An observer
    that cannot be imported, or that raises, fails the run: it was asked for."""
    spec = os.environ.get(HOOK_ENV)
    if spec:
        _observer(spec)(event, **details)


def check_observer() -> None:
    """InputError now if ``DIMRED_HOOK`` is set and names nothing importable."""
    if os.environ.get(HOOK_ENV):
        _observer(os.environ[HOOK_ENV])


@functools.lru_cache(maxsize=4)
def _observer(spec: str):
    import importlib

    from dimred_dask.errors import InputError

    module, _, name = spec.partition(":")
    try:
        fn = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError, ValueError) as e:
        raise InputError(
            f"{HOOK_ENV}={spec!r} names no importable function ({e}).",
            f"set {HOOK_ENV} to package.module:function, or unset it.",
        ) from None
    if not callable(fn):
        raise InputError(
            f"{HOOK_ENV}={spec!r} names a {type(fn).__name__}, not a function.",
            f"set {HOOK_ENV} to package.module:function, or unset it.",
        )
    return fn


def _fmt_bytes(n) -> str:
    return "unknown" if not n else f"{n / 2**20:,.0f} MiB"


def stage_context(req, v) -> dict:
    """`stage_errors`' context of a run's stage (a request and what validate found): the
    workers' memory, the chunks, the output."""
    return {"worker_memory": v.worker_memory, "chunk_bytes": v.chunk_bytes, "output": req.output}


def in_stage(stage: str):
    """Run a stage's task body ``fn(req, v, ...)`` inside `stage_errors`: every failure of
    the stage, its writes to the run store included, reaches the caller typed."""

    def wrap(fn):
        @functools.wraps(fn)
        def body(req, v, *args, **kwargs):
            with stage_errors(stage, **stage_context(req, v)):
                return fn(req, v, *args, **kwargs)

        return body

    return wrap


@contextlib.contextmanager
def stage_errors(stage: str, *, output=None, worker_memory=None, chunk_bytes=None):
    """Turn infrastructure failures inside a stage into errors that name the stage, the
    memory and the fix. Typed errors of our own pass through unchanged. ``output``: the run
    store's location, whose kind (a local disk, object storage) a storage failure's fix
    fits (the readers type their own failures before they reach here)."""
    from distributed.scheduler import KilledWorker

    from dimred_dask.errors import (
        DimredError,
        InputError,
        StageError,
        is_storage_error,
        storage_error,
    )
    from dimred_dask.io import parse_store

    try:
        yield
    except DimredError:
        raise
    except KilledWorker as exc:
        raise StageError(
            f"Stage {stage!r} failed: Dask worker processes died repeatedly while running "
            f"{getattr(exc, 'task', '?')!r} (each worker may use {_fmt_bytes(worker_memory)}; the "
            f"input chunks are {_fmt_bytes(chunk_bytes)} each).",
            "if they ran out of memory, pass a smaller --chunk-rows or give the workers more "
            "memory; the worker logs say why they died.",
        ) from exc
    except Exception as exc:
        if is_storage_error(exc) and not _decoder_error(exc):
            where = f"Stage {stage!r} writing {output}" if output else f"Stage {stage!r}"
            located = parse_store(output) if output else None
            raise storage_error(exc, where, location=located) from exc
        if _decoder_error(exc):
            raise InputError(
                f"Stage {stage!r} could not read the input ({type(exc).__name__}: {exc}).",
                "the input is damaged or changed while the run read it: "
                "check it (or write it again) and re-run.",
            ) from exc
        if isinstance(exc, (ValueError, FloatingPointError)) and "inf" in str(exc).lower():
            raise InputError(
                f"Stage {stage!r} met inf or NaN inside the computation "
                f"({type(exc).__name__}: {exc}): values of the input too large "
                "for floating point (their squares or sums overflow).",
                "check the input for damaged rows, or rescale its columns.",
            ) from exc
        raise


_DECODERS = ("pyarrow", "numcodecs", "zarr.codecs", "pandas.errors", "zstandard", "blosc")


def _decoder_error(exc: BaseException) -> bool:
    """An error raised while decoding data (a damaged file), not by the storage under it."""
    return type(exc).__module__.startswith(_DECODERS)
