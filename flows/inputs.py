"""The inputs of a run as its stages open them: the input in its planned row chunks, the
labels and the actions (one opener each, shared by validate, the stages and the commit
guard)."""

from __future__ import annotations

import numpy as np

from dimred_dask.io import open_input

from .request import RunRequest, Validated

__all__ = ["open_actions", "open_labels", "open_run_input", "open_judged_input"]


def open_run_input(
    req: RunRequest, v: Validated | None = None, *, row_chunk=None, check_chunks: bool = False
):
    """The run's input as the methods see it: floating point (integers and booleans converted
    by one rule, `float_dtype`), in the planned row chunks (``v``'s, or ``row_chunk``).
    Absent Zarr chunks are refused on every read; ``check_chunks`` also lists them all at
    once (the validate stage)."""
    return open_input(
        req.input,
        columns=list(req.columns) if req.columns is not None else None,
        row_chunk=(v.row_chunk if v is not None else row_chunk) or req.chunk_rows,
        as_float=True,
        check_chunks=check_chunks,
        allow_missing_chunks=req.allow_missing_chunks,
    )


def open_judged_input(req: RunRequest, inp):
    """What the embedding is judged against: the run's own input (for a chain's final step,
    the chain's input rather than the first step's embedding; else ``inp``)."""
    if not req.reads_own_step:
        return inp
    return open_input(
        req.step.input,
        columns=list(req.step.columns) if req.step.columns is not None else None,
        as_float=True,
        check_chunks=False,
        allow_missing_chunks=True,
    )


def _open_labels(uri: str, role: str, req: RunRequest, v: Validated | None):
    """A 1-D input of one value per input row (labels of either kind), in the run's chunks."""
    return open_input(
        uri,
        allow_1d=True,
        role=role,
        row_chunk=v.row_chunk if v is not None else None,
        allow_missing_chunks=req.allow_missing_chunks,
    )


def open_labels(req: RunRequest, v: Validated | None = None):
    return _open_labels(req.labels, "labels", req, v)


def open_eval_labels(req: RunRequest, v: Validated | None = None):
    """The labels the embedding is judged by (``--eval-labels``), one per input row."""
    return _open_labels(req.eval_labels, "eval labels", req, v)


def open_class_labels(req: RunRequest, v: Validated):
    """The classes a run's embedding is judged by and its picture coloured by: the labels for
    evaluation, else a supervised method's labels when they are classes (integers or
    booleans; a regression's targets are not); None without either. (Validation refuses
    ``--labels`` for a method that takes none, so labels here are a supervised method's.)"""
    if req.eval_labels:
        return open_eval_labels(req, v)
    if req.labels:
        lab = open_labels(req, v)
        return lab if np.dtype(lab.array.dtype).kind in "biu" else None
    return None


def open_actions(req: RunRequest):
    return open_input(
        req.actions,
        allow_1d=True,
        role="actions",
        allow_missing_chunks=req.allow_missing_chunks,
    )
