"""The inputs of a run as its stages open them: the input in its planned row chunks, the
labels and the actions (one opener each, shared by validate, the stages and the commit
guard)."""

from __future__ import annotations

from dimred_dask.io import open_input

__all__ = ["open_actions", "open_labels", "open_run_input"]


def open_run_input(spec: dict, v: dict | None = None, *, check_chunks: bool = False):
    """The run's input as the methods see it: floating point (integers and booleans converted
    by one rule, `float_dtype`), in the planned row chunks. Absent Zarr chunks are refused on
    every read; ``check_chunks`` also lists them all at once (the validate stage)."""
    return open_input(
        spec["input"],
        columns=spec.get("columns"),
        row_chunk=(v or {}).get("row_chunk") or spec.get("chunk_rows"),
        as_float=True,
        check_chunks=check_chunks,
        allow_missing_chunks=bool(spec.get("allow_missing_chunks")),
    )


def open_labels(spec: dict, v: dict | None = None):
    return open_input(
        spec["labels"],
        allow_1d=True,
        role="labels",
        row_chunk=(v or {}).get("row_chunk"),
        allow_missing_chunks=bool(spec.get("allow_missing_chunks")),
    )


def open_actions(spec: dict):
    return open_input(
        spec["actions"],
        allow_1d=True,
        role="actions",
        allow_missing_chunks=bool(spec.get("allow_missing_chunks")),
    )
