"""The validate stage of a run, and the same checks made before a run starts.

`check_run` makes every check that reads no more than metadata (and the small labels or
actions); `validate` (the flow's first task) adds the row-chunk plan from the workers' memory
and the input's fingerprint; `preflight` runs `check_run` with no Prefect flow run and no
Dask cluster, so that the CLI refuses bad input in about a second.
"""

from __future__ import annotations

import numbers
import os
import time
from types import SimpleNamespace

import numpy as np
from prefect import get_run_logger, task

from dimred_dask._compute import compute, smallest_worker_memory
from dimred_dask._validation import check_array
from dimred_dask.errors import InputError, StageError
from dimred_dask.io import (
    RunStore,
    array_fingerprint,
    check_output_location,
    parse_store,
    parse_uri,
    plan_row_chunk,
)
from dimred_dask.io.base import TARGET_CHUNK_BYTES
from dimred_dask.methods import accepts_sparse, check_sparse_input

from .chain import PCA_DEFAULT_COMPONENTS, chain_steps
from .guard import sources_of
from .inputs import open_actions, open_eval_labels, open_labels, open_run_input
from .knn import normalize_request, resolve_cache
from .methods import get_method
from .publish import TASK_OPTS
from .request import Checked, RunRequest, Validated
from .stages import check_observer

# A chunk may use at most this share of a worker's memory: the kernels hold the chunk, a
# panel buffer and their output, and the worker may run two tasks at once.
CHUNK_MEMORY_SHARE = 0.25


def plan_chunks(req: RunRequest, inp) -> tuple[int, int | None]:
    """Rows per chunk from the workers' memory, or the forced ``chunk_rows`` if it fits."""
    n, d = inp.shape
    itemsize = inp.array.dtype.itemsize
    if inp.meta.get("sparse"):  # a stored value costs its value and its column index
        d = max(1, int(round(inp.meta.get("density", 1.0) * d)))
        itemsize += 4
    memory = smallest_worker_memory()
    if req.chunk_rows:
        rows = int(req.chunk_rows)
        largest = min(rows, n) * d * itemsize  # a chunk holds at most the input's rows
        if memory and largest > CHUNK_MEMORY_SHARE * memory:
            raise StageError(
                f"Stage 'validate': chunks of {rows} rows are {largest / 2**20:,.0f} "
                f"MiB, more than {CHUNK_MEMORY_SHARE:.0%} of a worker's memory limit "
                f"({memory / 2**20:,.0f} MiB); the workers would be killed for memory.",
                f"leave --chunk-rows out (planned from memory), or pass at most "
                f"{int(CHUNK_MEMORY_SHARE * memory / (d * itemsize))}.",
            )
        return rows, memory
    target = (
        TARGET_CHUNK_BYTES
        if not memory
        else min(TARGET_CHUNK_BYTES, int(CHUNK_MEMORY_SHARE * memory))
    )
    base = (inp.meta.get("stored_chunks") or [1])[0]
    return plan_row_chunk(n, d, itemsize, base=base, target_bytes=target), memory


def check_run(req: RunRequest) -> Checked:
    """Every check of a run that reads no more than the inputs' metadata (and the labels or
    actions, which are small); write nothing. Raises the typed error of the first check
    that fails. Returns what the checks found, for `validate`."""
    adapter = get_method(req.method)
    rows = req.chunk_rows
    if rows is not None and (
        isinstance(rows, bool) or not isinstance(rows, numbers.Integral) or rows < 1
    ):
        raise InputError(
            f"chunk_rows must be a positive number of rows; found {rows!r}.",
            "leave --chunk-rows out (planned from the workers' memory), or pass e.g. "
            "--chunk-rows 10000.",
        )
    inp = open_run_input(req, check_chunks=True)
    _check_locations(req, inp)
    where = f"'{inp.location}'"
    check_sparse_input(req.method, inp.array, req.params, where=where)  # fix: a chain
    check_array(
        inp.array,
        method=req.method.upper(),
        where=where,  # metadata only
        accept_sparse=accepts_sparse(req.method),
    )
    if req.sample_size < 10:
        raise InputError(
            f"sample_size must be at least 10; found {req.sample_size}.",
            "pass --sample-size 2000 (the default) or more.",
        )
    params = dict(req.params)
    if req.default_components:  # a chain's PCA step: 50 components, or fewer if need be
        params["n_components"] = min(PCA_DEFAULT_COMPONENTS, *inp.shape)
    params = adapter.check(params, inp.shape)
    matrix = adapter.matrix(params, inp.shape) if adapter.matrix else None
    if matrix is not None:
        _check_room_for_matrix(req, matrix["kind"], inp.shape[0], inp.array.dtype.itemsize)
    request = adapter.graph(params, inp.shape) if adapter.graph else None
    graph_request = (
        normalize_request(request.but(**req.recall_request), inp.shape, req.method)
        if request is not None
        else None
    )
    labels_fp = _check_labels(req, adapter, inp)
    actions_fp = _check_actions(req, adapter, inp)
    eval_fp = _check_eval_labels(req, inp)
    need, what = _output_bytes(params, inp, graph_request, matrix)
    RunStore(req.root).check_room(need, what=what)  # a chain: all of it
    mode = RunStore(req.output).check_writable(req.overwrite, committed_ok=req.inner_step)
    return Checked(inp, params, mode, graph_request, labels_fp, actions_fp, eval_fp)


def _output_bytes(params: dict, inp, graph_request, matrix) -> tuple[int, str]:
    """What the run will write that can be known before it runs, in bytes and in words: the
    embedding (n x k at the input's float width), the kNN graph (n x k int64 and float64)
    and the kernel or distance matrix (n x n); the model is not counted."""
    n, d = inp.shape
    itemsize = inp.array.dtype.itemsize
    k = params.get("n_components")
    k = k if isinstance(k, int) and not isinstance(k, bool) else d
    parts = [(n * k * itemsize, f"the {n} x {k} embedding")]
    if graph_request is not None:
        parts.append((n * graph_request.n_neighbors * 16, "the kNN graph"))
    if matrix is not None:
        parts.append((n * n * itemsize, f"the {n} x {n} {matrix['kind']} matrix"))
    return sum(b for b, _ in parts), " and ".join(w for _, w in parts)


def _check_room_for_matrix(req: RunRequest, kind: str, n: int, itemsize: int) -> None:
    """Refuse a kernel stage whose n x n matrix would not fit on the output's local disk
    (its free space now; an object store's room is not known, so not checked there)."""
    import shutil

    out = parse_store(req.output)
    if not out.is_local:
        return
    need = n * n * itemsize
    folder = os.path.abspath(out.url)
    while not os.path.exists(folder) and os.path.dirname(folder) != folder:
        folder = os.path.dirname(folder)
    free = shutil.disk_usage(folder).free
    if need > free:
        raise InputError(
            f"{req.method} writes the {n} x {n} {kind} matrix to the run store: "
            f"{need / 2**30:,.1f} GiB, more than the {free / 2**30:,.1f} GiB free on the "
            f"disk of {out.url}.",
            "use the method's landmark route (kpca --param solver=nystrom, --method "
            "landmark-mds), which never forms the matrix; or fewer rows; or an output "
            "with room for it.",
        )


def preflight(req: RunRequest) -> None:
    """The checks of a run's validate stage, made before a Prefect flow run or a Dask cluster
    exists (the CLI makes them first, so that a mistyped parameter or path is refused in a
    second, not after a cluster has started). Raises what `validate` would raise; the flow
    makes the same checks again in its validate stage. A chain's later step is checked
    against the shape its first step will give it, as the flow does."""
    from .methods import METHODS

    steps = chain_steps(req, METHODS)
    check_observer()
    found = check_run(steps[0])
    if len(steps) == 2:  # the chain's own store, as `_run_chain` checks it
        RunStore(req.output).check_writable(req.overwrite)
        k = found.params["n_components"]
        if isinstance(k, int):
            get_method(steps[1].method).check(steps[1].params, (found.input.shape[0], k))


@task(name="validate", **TASK_OPTS)
def validate(req: RunRequest) -> Validated:
    """Check everything that can be checked without a full pass; plan the row chunks from
    the workers' memory; fingerprint the input. Writes nothing."""
    t0 = time.perf_counter()
    sources = sources_of(req)  # before anything is read: a later change shows against it
    found = check_run(req)
    inp = found.input
    row_chunk, memory = plan_chunks(req, inp)
    checked = inp.meta  # the chunk inventory is taken once, by the first open
    inp = open_run_input(req, row_chunk=row_chunk)
    inp.meta = {**checked, **inp.meta}
    fp = array_fingerprint(inp.array, {"source": inp.meta})
    get_run_logger().info(
        "input %s: shape %s %s, fingerprint %s (%s); output mode %s",
        inp.location,
        inp.shape,
        inp.array.dtype,
        fp["digest"],
        fp["hashed"],
        found.mode,
    )
    return Validated(
        params=found.params,
        mode=found.mode,
        graph_request=found.graph_request,
        labels_fingerprint=found.labels_fingerprint,
        actions_fingerprint=found.actions_fingerprint,
        eval_labels_fingerprint=found.eval_labels_fingerprint,
        input_meta=inp.meta,
        input_fingerprint=fp,
        input_bytes=int(inp.array.nbytes),
        sources=tuple(sources),
        shape=tuple(inp.shape),
        row_chunk=row_chunk,
        worker_memory=memory,
        chunk_bytes=row_chunk * inp.shape[1] * inp.array.dtype.itemsize,
        n_chunks=len(inp.array.chunks[0]),
        seconds=time.perf_counter() - t0,
    )


def _check_locations(req: RunRequest, inp) -> None:
    """The output is none of the run's inputs, lies in none and contains none (after symbolic
    links): the input, the labels, the actions and the shared graph cache."""
    out = parse_store(req.root)  # a chain: all of it
    others = [("labels", req.labels), ("actions", req.actions), ("eval labels", req.eval_labels)]
    inputs = [(role, parse_uri(uri, role=role)) for role, uri in others if uri]
    if not req.reads_own_step:  # a chain's later step reads its own earlier step
        inputs.insert(0, ("input", inp.location))
    cache = resolve_cache(req.graph_cache, req.root, inp.location)
    if cache is not None:
        inputs.append(("graph cache", parse_store(cache.url, role="graph cache")))
    check_output_location(out, *inputs)


def check_final_step_labels(req: RunRequest, n_rows: int) -> None:
    """A chain's final step's labels, before the chain's first step writes: present exactly
    when its method needs them, one per row of the chain's input (``n_rows``)."""
    _check_labels(req, get_method(req.method), SimpleNamespace(shape=(n_rows,)))


def _check_labels(req: RunRequest, adapter, inp) -> str | None:
    """Labels (supervised methods): present exactly when needed, one row per input row."""
    if not adapter.needs_labels:
        if req.labels:
            raise InputError(
                f"Method {req.method!r} is unsupervised; found --labels {req.labels}.",
                "drop --labels, or use --method spca/kspca.",
            )
        return None
    if not req.labels:
        raise InputError(
            f"Method {req.method!r} needs labels (one per row of the input); found none.",
            "pass --labels URI (a 1-D array or one column).",
        )
    lab = open_labels(req)
    if lab.shape[0] != inp.shape[0]:
        raise InputError(
            f"The labels {lab.location} have {lab.shape[0]} rows; the input has {inp.shape[0]}.",
            "pass the labels of exactly these rows, in order.",
        )
    return array_fingerprint(lab.array, {"source": lab.meta})["digest"]


def _check_eval_labels(req: RunRequest, inp) -> str | None:
    """Labels for evaluation (any method): one per input row, of a type a class can be."""
    if not req.eval_labels:
        return None
    lab = open_eval_labels(req)
    columns = lab.shape[1] if lab.array.ndim == 2 else 1
    if lab.shape[0] != inp.shape[0] or columns != 1:
        found = (
            f"{columns} columns"
            if columns != 1
            else f"{lab.shape[0]} rows; the input has {inp.shape[0]}"
        )
        raise InputError(
            f"The labels for evaluation {lab.location} have {found}: one label per input row "
            "is needed.",
            "pass --eval-labels with a 1-D array or one column (an AnnData file: "
            "#obs/<column>) holding the class of exactly these rows, in order.",
        )
    kind = np.dtype(lab.array.dtype).kind
    if kind not in "biu":
        raise InputError(
            f"The labels for evaluation {lab.location} are of dtype {lab.array.dtype}; classes "
            "are needed (integers, booleans, or the categories or strings of an AnnData obs "
            "column, read as their codes).",
            "pass a column of class labels (float labels: store them as integers); a continuous "
            "value cannot be counted as classes.",
        )
    return array_fingerprint(lab.array, {"source": lab.meta})["digest"]


def _check_actions(req: RunRequest, adapter, inp) -> str | None:
    """Actions (sequence methods): present exactly when needed, n - 1 of them, labels."""
    if not adapter.needs_actions:
        if req.actions:
            raise InputError(
                f"Method {req.method!r} takes no actions; found --actions {req.actions}.",
                "drop --actions, or use --method are.",
            )
        return None
    if not req.actions:
        raise InputError(
            f"Method {req.method!r} needs the actions taken between "
            f"consecutive rows ({inp.shape[0] - 1} for {inp.shape[0]} rows); "
            "found none.",
            "pass --actions URI (a 1-D array of n - 1 labels).",
        )
    from dimred_dask.methods.are import check_actions

    act = open_actions(req)
    (values,) = compute(act.array, stage="actions")  # n - 1 labels: small
    check_actions(values, inp.shape[0], where=str(act.location))
    return array_fingerprint(act.array, {"source": act.meta})["digest"]
