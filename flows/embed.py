"""The embedding flow: validate -> fit -> transform + write -> evaluate -> publish.

Tasks pass URIs and small dicts, never arrays; the heavy work runs on the Dask cluster the
flow connects to (``dimred_dask.cluster.cluster_client``). Each stage writes its results,
then a marker ``_stages/<stage>.json`` with its fingerprint; re-running the same command
after a crash reuses every stage whose marker matches. ``_COMMITTED`` is written last.
"""

from __future__ import annotations

import time

import numpy as np
from prefect import flow, get_run_logger, task

import dimred_dask
from dimred_dask import metrics
from dimred_dask._compute import compute
from dimred_dask.cluster import cluster_client, describe_cluster
from dimred_dask.errors import StageError
from dimred_dask.graphs.knn import TARGET_RECALL
from dimred_dask.io import (
    RunStore,
    digest_of,
    open_matrix,
    run_storage_options,
)

from .chain import chain_steps
from .guard import stage_guard
from .inputs import (
    open_actions,
    open_class_labels,
    open_judged_input,
    open_labels,
    open_run_input,
)
from .knn import (
    StoreGraph,
    build_graph,
    check_stored,
    connect,
    graph_fingerprint,
    graph_summary,
    load_graph,
    resolve_cache,
    save_graph,
    stored_chunks,
    write_graph_attrs,
    writes_from_workers,
)
from .methods import SCRATCH, get_method
from .publish import TASK_OPTS, publish
from .request import RunRequest, Validated
from .running import block_credentials, leased, scheduled_start
from .stages import (
    check_observer,
    chunk_sample,
    in_stage,
    notify,
    stage_progress,
    stage_reusable,
)
from .validate import check_final_step_labels, validate


def _fingerprints(req: RunRequest, v: Validated) -> dict:
    fit = digest_of(
        "fit",
        v.input_fingerprint["digest"],
        req.method,
        v.params,
        dimred_dask.__version__,
        v.labels_fingerprint,
        (v.kernel or {}).get("fingerprint"),
        (v.knn or {}).get("fingerprint"),
        # only when given, so that runs without actions keep their fingerprints
        *([v.actions_fingerprint] if v.actions_fingerprint else []),
    )
    transform = digest_of("transform", fit)
    evaluate = digest_of(
        "evaluate",
        transform,
        req.sample_size,
        MEASURES,
        v.eval_labels_fingerprint,
    )
    return {"fit": fit, "transform": transform, "evaluate": evaluate}


@task(name="knn", **TASK_OPTS)
@in_stage("knn")
def knn_stage(req: RunRequest, v: Validated) -> dict:
    """The kNN graph the method needs (flows/knn.py): reused from this run's store, from the
    shared cache, or computed; checked for connectivity before anything is written."""
    t0 = time.perf_counter()
    request = v.graph_request
    if request is None:
        return {"needed": False, "reused": False, "seconds": time.perf_counter() - t0}
    store = RunStore(req.output)
    fp = graph_fingerprint(v.input_fingerprint["digest"], request)
    marker = stage_reusable(store, v.mode, "knn", fp)
    if (
        marker is not None and stored_chunks(store) == marker["info"]["stored_chunks"]
    ):  # this run's own copy, wherever the stage first had it from
        info = {**marker["info"], "source": "run store"}
        return {**info, "reused": True, "seconds": time.perf_counter() - t0}
    inp = open_run_input(req, v)
    cache = resolve_cache(req.graph_cache, req.output, inp.location)
    from_workers = writes_from_workers(inp.array, request)
    graph = None if cache is None or from_workers else cache.load(fp)
    attrs = {"method": req.method, "version": dimred_dask.__version__}
    prepared = from_workers
    if prepared:
        store.prepare(v.mode, attrs)
        if cache is not None:  # copied on a worker: the graph never comes here
            graph = cache.copy_to(fp, store)
    source = "cache" if graph is not None else None
    if graph is None:
        sink = None
        if prepared:  # the partitioned backend writes the graph; it never comes here
            sink = StoreGraph.create(store, inp.array.shape[0], request.n_neighbors)
        with stage_progress(f"kNN graph ({request.n_neighbors} neighbours)"):
            graph, quality = build_graph(inp.array, request, sink=sink)
        if quality.get("warning"):
            get_run_logger().warning("%s", quality["warning"])
    components = None
    if isinstance(graph, StoreGraph):  # written from the workers, checked there
        components = check_stored(graph, store, request, req.method)  # may refuse
        write_graph_attrs(store, graph)
        chunks = stored_chunks(store)
    else:
        graph = connect(graph, inp.array, request, req.method)  # may refuse
        if not prepared:  # nothing was written before a refusal
            store.prepare(v.mode, attrs)
        chunks = save_graph(store, graph)["chunks"]
    problems = cache.problems if cache is not None else []
    for problem in problems:  # a bad cache entry: named, set aside, the graph rebuilt
        get_run_logger().warning("%s", problem)
    info = {
        "needed": True,
        "fingerprint": fp,
        "stored_chunks": chunks,
        "source": source or "computed",
        "cache": cache.url if cache else None,
        **({"cache_problems": problems} if problems else {}),
        "written_from_workers": isinstance(graph, StoreGraph),
        **graph_summary(graph, components),
    }
    store.mark_stage("knn", fp, {"info": info}, guard=stage_guard(req, v, "knn"))
    if cache is not None and source is None:
        info["cached"] = cache.save(fp, graph)
    notify("stage", stage="knn", fingerprint=fp, output=req.output)
    return {**info, "reused": source == "cache", "seconds": time.perf_counter() - t0}


KERNEL_ARRAY = "kernel/matrix"
KERNEL_CHUNK_BYTES = 64 * 2**20  # square chunks of the stored matrix: 4096 x 4096 float32


def _kernel_store(store: RunStore, info: dict) -> RunStore:
    """The store holding the stage's matrix: this run's, or the earlier run's it reuses."""
    return RunStore(info["store"]) if info.get("store") else store


def _kernel_intact(store: RunStore, info: dict) -> bool:
    return _kernel_store(store, info).chunk_count(info["array"]) == info["stored_chunks"]


@task(name="kernel", **TASK_OPTS)
@in_stage("kernel")
def kernel_stage(req: RunRequest, v: Validated) -> dict:
    """Write the n x n kernel or distance matrix the method's solver reads several times
    (square chunks, in the run's store), or say that the method does not need one.

    A matrix with the same fingerprint (input content, kernel parameters, version) that an
    earlier run committed in its own store is read there instead (the run cache, the one the
    kNN graphs use, points to it; the pointer is checked against that store's stage marker
    and chunk count, so an overwritten or damaged store is never read)."""
    t0 = time.perf_counter()
    adapter, store = get_method(req.method), RunStore(req.output)
    need = adapter.matrix(v.params, tuple(v.shape)) if adapter.matrix else None
    if need is None:
        return {"needed": False, "reused": False, "seconds": time.perf_counter() - t0}
    import dask.array as da

    from dimred_dask.pairwise import pairwise_distances, pairwise_kernels

    fp = digest_of("kernel", v.input_fingerprint["digest"], need, dimred_dask.__version__)
    marker = stage_reusable(store, v.mode, "kernel", fp)
    if marker is not None and _kernel_intact(store, marker["info"]):
        return {**marker["info"], "reused": True, "seconds": time.perf_counter() - t0}
    inp = open_run_input(req, v)
    cache = resolve_cache(req.graph_cache, req.output, inp.location)
    found = cache.find_array("kernel", fp) if cache is not None else None
    if found is not None and found["store"] != store.url:
        # the same matrix, committed by an earlier run in its own store: read it there
        store.prepare(v.mode, {"method": req.method, "version": dimred_dask.__version__})
        info = {**found["info"], "store": found["store"], "source": "cache"}
        store.mark_stage("kernel", fp, {"info": info}, guard=stage_guard(req, v, "kernel"))
        return {**info, "reused": True, "seconds": time.perf_counter() - t0}
    itemsize = inp.array.dtype.itemsize
    side = int(max(256, min(v.shape[0], (KERNEL_CHUNK_BYTES // itemsize) ** 0.5)))
    params = {k: val for k, val in need.items() if k != "kind"}
    if need["kind"] == "kernel":
        M = pairwise_kernels(inp.array, square_chunks=side, **params)
    else:
        M = pairwise_distances(inp.array, square_chunks=side, **params)
    store.prepare(v.mode, {"method": req.method, "version": dimred_dask.__version__})
    # raw chunks: zstd keeps 85-93 % of a kernel or distance matrix's bytes, and the
    # solver would decode the whole matrix again on each of its passes
    target = store.create_array(KERNEL_ARRAY, M.shape, (side, side), M.dtype, compressors=None)
    with stage_progress(f"{need['kind']} matrix -> store"):
        compute(da.store(M, target, lock=False, compute=False), stage="kernel matrix")
    info = {
        "needed": True,
        "array": KERNEL_ARRAY,
        "kind": need["kind"],
        "shape": list(M.shape),
        "chunk": side,
        "dtype": str(M.dtype),
        "bytes": int(M.nbytes),
        "stored_chunks": int(target.nchunks),
        "fingerprint": fp,
    }
    store.mark_stage("kernel", fp, {"info": info}, guard=stage_guard(req, v, "kernel"))
    if cache is not None:
        info["cached"] = cache.point_to("kernel", fp, store.url, "kernel", KERNEL_ARRAY, info)
    notify("stage", stage="kernel", fingerprint=fp, output=req.output)
    return {**info, "reused": False, "seconds": time.perf_counter() - t0}


@task(name="fit", **TASK_OPTS)
@in_stage("fit")
def fit(req: RunRequest, v: Validated) -> dict:
    t0 = time.perf_counter()

    adapter, store = get_method(req.method), RunStore(req.output)
    fp = _fingerprints(req, v)["fit"]
    if (marker := stage_reusable(store, v.mode, "fit", fp)) is not None:
        return {**marker["info"], "reused": True, "seconds": time.perf_counter() - t0}
    inp = open_run_input(req, v)
    extras = {}
    if adapter.needs_labels:
        extras["labels"] = open_labels(req, v).array
    if (v.kernel or {}).get("array"):
        owner = _kernel_store(store, v.kernel)
        # square blocks, read as the input is: a local store's raw chunks from their files
        extras["matrix"] = open_matrix(
            owner.array_url(v.kernel["array"]),
            storage_options=owner.location.storage_options,
            role="kernel stage's matrix",
        ).array
    if (v.knn or {}).get("needed"):
        extras["graph"] = (
            StoreGraph.open(req.output) if adapter.graph_in_store else load_graph(store)
        )
    if adapter.run_context:
        extras["run"] = {"output": req.output, "fingerprint": fp}
    if adapter.needs_actions:
        extras["actions"] = open_actions(req).array
    with stage_progress(f"fit {req.method}"):
        model = adapter.fit(inp.array, v.params, **extras)  # first pass checks finiteness
    summary = adapter.summary(model)
    _refuse_unconverged(req.method, summary.get("convergence") or [])
    if (summary.get("sketch") or {}).get("warning"):  # single-pass PCA short of its accuracy
        get_run_logger().warning("%s", summary["sketch"]["warning"])
    choice = summary.get("solver_choice") or {}  # PCA's solver="auto" with max_error
    if choice.get("max_error") is not None:
        get_run_logger().info(
            "solver %s: %s%s",
            choice["solver"],
            choice["why"],
            f"; then {choice['fallback']}" if choice.get("fallback") else "",
        )
    store.prepare(
        v.mode,
        {"method": req.method, "version": dimred_dask.__version__},
        keep=(SCRATCH,),
    )  # what this fit wrote for the transform stage
    adapter.save(model, store)
    info = {"model": summary}
    store.mark_stage("fit", fp, {"info": info}, guard=stage_guard(req, v, "fit"))
    notify("stage", stage="fit", fingerprint=fp, output=req.output)
    return {**info, "reused": False, "seconds": time.perf_counter() - t0}


def _refuse_unconverged(method: str, records: list[dict]) -> None:
    """A fit is committed only when every solve it depends on converged, or was replaced by
    one that did (``handled_by``): never a silently worse embedding."""
    from dimred_dask.linalg.convergence import unconverged_error

    for rec in records:
        if not rec.get("converged") and not rec.get("handled_by"):
            raise unconverged_error(
                method,
                [rec],
                "raise the method's max_iter (--param "
                "max_iter=...; n_iter for randomized solvers) or loosen "
                "its tol; or choose its robust "
                "solver (e.g. --param eigen_solver=arpack).",
            )


def write_rows(store: RunStore, name: str, Y, stage: str) -> dict:
    """Compute the lazy rows ``Y`` on the workers into the store's array ``name`` (raw chunks
    of Y's rows: coordinates hardly compress, zstd keeps over 90 % of their bytes, and
    compressing them takes CPU the pass needs), one task per stored chunk; what the stage's
    marker records of it. A write that left chunks out is a `StageError`."""
    import dask.array as da

    if len(set(Y.chunks[0][:-1])) > 1 or Y.chunks[0][-1] > Y.chunks[0][0]:
        Y = Y.rechunk({0: max(Y.chunks[0])})  # one task per stored chunk: no shared writes
    chunks = (Y.chunks[0][0], *Y.shape[1:])
    target = store.create_array(name, Y.shape, chunks, Y.dtype, compressors=None)
    with stage_progress(f"{stage} + write {name}"):
        compute(da.store(Y, target, lock=False, compute=False), stage=f"{stage} + write")
    info = {
        f"{name}_shape": list(Y.shape),
        f"{name}_dtype": str(Y.dtype),
        f"{name}_chunks": [int(c) for c in chunks],
        "stored_chunks": int(target.nchunks),
    }
    if store.chunk_count(name) != info["stored_chunks"]:
        raise StageError(
            f"Stage {stage!r}: {store.chunk_count(name)} of {info['stored_chunks']} {name} "
            "chunks are in the store.",
            "re-run the same command; the stage will be redone.",
        )
    return info


@task(name="transform-write", **TASK_OPTS)
@in_stage("transform")
def transform_write(req: RunRequest, v: Validated) -> dict:
    t0 = time.perf_counter()
    adapter, store = get_method(req.method), RunStore(req.output)
    fp = _fingerprints(req, v)["transform"]
    marker = stage_reusable(store, "resume", "transform", fp)
    if marker is not None and store.chunk_count("embedding") == marker["info"]["stored_chunks"]:
        return {**marker["info"], "reused": True, "seconds": time.perf_counter() - t0}

    inp = open_run_input(req, v)
    Y = adapter.transform(adapter.load(store), inp.array)
    info = write_rows(store, "embedding", Y, "transform")
    store.mark_stage("transform", fp, {"info": info}, guard=stage_guard(req, v, "transform"))
    store.remove(SCRATCH)  # single-pass PCA's row sketch: the embedding is made from it
    notify("stage", stage="transform", fingerprint=fp, output=req.output)
    return {**info, "reused": False, "seconds": time.perf_counter() - t0}


# the measures of the evaluate stage (in its fingerprint: a store evaluated with fewer is
# evaluated again)
MEASURES = ("trustworthiness", "knn_recall", "cpd", "knc", "knn_accuracy")


@task(name="evaluate", **TASK_OPTS)
@in_stage("evaluate")
def evaluate(req: RunRequest, v: Validated) -> dict:
    t0 = time.perf_counter()
    adapter, store = get_method(req.method), RunStore(req.output)
    fp = _fingerprints(req, v)["evaluate"]
    if (marker := stage_reusable(store, "resume", "evaluate", fp)) is not None:
        return {**marker["info"], "reused": True, "seconds": time.perf_counter() - t0}

    inp = open_run_input(req, v)
    idx, how = chunk_sample(inp.array.chunks[0], req.sample_size)
    Y = store.open_array("embedding").to_dask()
    original = open_judged_input(req, inp)  # a chain's final step: against the chain's input
    labels = open_class_labels(req, v)
    Xs, Ys, Xo, *ls = compute(
        inp.array[idx],
        Y[idx],
        original.array[idx],
        *([labels.array[idx]] if labels is not None else []),
        stage="sample",
    )
    k = int(min(10, max(1, len(idx) // 2 - 1)))
    result = {
        "sample": how,
        "sample_size": int(len(idx)),
        "n_neighbors": k,  # a sparse
        "trustworthiness": metrics.trustworthiness(Xo, Ys, k),  # sample's distances:
        "knn_recall": metrics.knn_recall(Xo, Ys, k),  # sparse products, not densified
        "cpd": metrics.cpd(Xo, Ys),
        "cpd_points": int(min(metrics.CPD_POINTS, len(idx))),
        **adapter.sample_metrics(adapter.load(store), Xs, Ys),
    }
    if labels is not None:
        result["class_labels"] = str(labels.location)
        result.update(metrics.label_metrics(Xo, Ys, np.ravel(ls[0])))
    store.mark_stage("evaluate", fp, {"info": result}, guard=stage_guard(req, v, "evaluate"))
    notify("stage", stage="evaluate", fingerprint=fp, output=req.output)
    return {**result, "reused": False, "seconds": time.perf_counter() - t0}


# log_prints stays off (whatever PREFECT_LOGGING_LOG_PRINTS says): Prefect then replaces
# builtins.print, and numba refuses to compile code that calls print (pynndescent's
# NN-descent, compiled in this process on its first graph, does)
@flow(name="embed", log_prints=False)
def embed(
    input: str,
    output: str,
    method: str = "pca",
    params: dict | None = None,
    scheduler: str | None = None,
    overwrite: bool = False,
    columns: list[str] | None = None,
    sample_size: int = 2000,
    chunk_rows: int | None = None,
    credentials_block: str | None = None,
    labels: str | None = None,
    graph_cache: str | None = None,
    actions: str | None = None,
    allow_missing_chunks: bool = False,
    knn_target_recall: float | None = TARGET_RECALL,
    knn_recall_budget: float | None = None,
    eval_labels: str | None = None,
) -> dict:
    """Embed the array at ``input`` with ``method`` and write the run's store at ``output``.

    Credentials never come in as parameters (Prefect stores parameters): they come from the
    environment of the flow and of the Dask workers, or from the Prefect Secret block named by
    ``credentials_block`` (object storage credentials for this run only). ``labels``: the
    URI of the labels / targets of the supervised methods (spca, kspca), one per input row.
    ``graph_cache``: where kNN graphs are shared between runs (flows/knn.py; default
    ``.dimred-cache`` next to the output, ``"none"`` to turn it off). ``actions``: the URI of
    the actions of a sequence method (are): n - 1 labels, action i taken between rows i and
    i + 1. ``eval_labels``: the URI of class labels the embedding is judged by, one per
    input row (a 1-D array, a column, an AnnData ``#obs/<column>``), for any method: the
    manifest then holds KNC and the kNN classification accuracy, and the picture is coloured
    by them. ``method`` may be a chain, ``pca+<method>`` (flows/chain.py): PCA, then the method
    on PCA's embedding, in one run store; ``params`` then address a step as
    ``pca.n_components`` / ``umap.n_neighbors`` (a name without a step is the final step's).
    ``output`` may hold ``{date}``, replaced by the run's UTC date (its scheduled start for a
    deployment's run), so that a nightly job does not replace yesterday's result.
    ``allow_missing_chunks``: read absent chunks of a Zarr input as its fill value
    (zarr leaves out chunks that hold only the fill value) instead of refusing the input; the
    manifest counts them. ``knn_target_recall`` / ``knn_recall_budget``: the recall the kNN
    stage's NN-descent graph should reach (None: no check) and the seconds it may spend
    improving a graph short of it (default: four times its first build); a graph that ends
    short is kept with a warning in the log and the manifest (flows/knn.py).
    """
    req = RunRequest.build(
        input=input,
        output=output,
        method=method,
        params=params,
        overwrite=overwrite,
        columns=columns,
        sample_size=sample_size,
        chunk_rows=chunk_rows,
        labels=labels,
        eval_labels=eval_labels,
        graph_cache=graph_cache,
        actions=actions,
        allow_missing_chunks=allow_missing_chunks,
        knn_target_recall=knn_target_recall,
        knn_recall_budget=knn_recall_budget,
        when=scheduled_start(),
    )
    if credentials_block:
        with run_storage_options("s3", block_credentials(credentials_block)):
            return _embed(req, scheduler)
    return _embed(req, scheduler)


def _embed(req: RunRequest, scheduler) -> dict:
    from .methods import METHODS

    steps = chain_steps(req, METHODS)
    check_observer()  # a DIMRED_HOOK that cannot be imported is refused before any work
    with cluster_client(scheduler) as client:
        if len(steps) == 1:
            v = validate(req)
            manifest = leased(
                req.output,
                lambda lease: _run_stages(req, _mode_now(req, v).but(lease=lease), client),
            )
        else:
            manifest = _run_chain(req, steps, client)
    get_run_logger().info("committed %s (%s)", manifest["output"], manifest["timings"])
    return manifest


def _mode_now(req: RunRequest, v: Validated) -> Validated:
    """``v`` with the output's mode as it is once the lease is held: another run may have
    committed the output, or left it unfinished, since the validate stage looked."""
    store = RunStore(req.output)
    return v.but(mode=store.check_writable(req.overwrite, committed_ok=req.inner_step))


def _run_stages(req: RunRequest, v: Validated, client, earlier: list | None = None) -> dict:
    """knn -> kernel -> fit -> transform + write -> evaluate -> publish, for a validated run."""
    stages = {"validate": {"seconds": v.seconds, "reused": False}}
    stages["knn"] = knn_stage(req, v)
    if stages["knn"]["needed"]:
        v = v.but(knn=stages["knn"], mode="resume")
    stages["kernel"] = kernel_stage(req, v)
    if stages["kernel"]["needed"]:
        # the kernel stage prepared the store: later stages resume in it
        v = v.but(kernel=stages["kernel"], mode="resume")
    stages["fit"] = fit(req, v)
    stages["transform"] = transform_write(req, v)
    stages["evaluate"] = evaluate(req, v)
    if earlier:
        stages["earlier_steps"] = earlier
    fingerprint = _fingerprints(req, v)["evaluate"]
    return publish(req, v, stages, describe_cluster(client), fingerprint)


def _run_chain(req: RunRequest, steps: list[RunRequest], client) -> dict:
    """PCA, then the final method on PCA's embedding, in one run store (flows/chain.py).

    Everything that can be checked before the first step runs is checked first: the input,
    every location, the PCA step's parameters, and the final step's parameters against the
    shape PCA will give it when its number of components is fixed."""
    first, last = steps
    v1 = validate(first)
    k = v1.params["n_components"]
    if isinstance(k, int):
        get_method(last.method).check(last.params, (v1.shape[0], k))
    check_final_step_labels(last, v1.shape[0])
    root = RunStore(req.output)
    root.check_writable(req.overwrite)  # refused before the lease is taken
    attrs = {"method": req.method, "version": dimred_dask.__version__}

    def body(lease):
        nonlocal v1
        now = root.check_writable(req.overwrite)  # again, now that the lease is held
        if now in ("new", "overwrite"):
            root.prepare(now, attrs)  # the chain's store first, its steps inside
            v1 = v1.but(mode="new", lease=lease)
        else:
            v1 = _mode_now(first, v1).but(lease=lease)
        m1 = _run_stages(first, v1, client)
        v2 = validate(last)
        # the final step also checks the chain's own input (its evaluation reads it)
        v2 = v2.but(lease=lease, sources=v2.sources + v1.sources)
        summary = {
            "method": m1["method"],
            "output": m1["output"],
            "params": m1["params"],
            "input_meta": m1["input_meta"],
            "input_fingerprint": m1["input_fingerprint"],
            "timings": m1["timings"],
            "stages": m1["stages"],
            "convergence": m1.get("convergence", []),
            "explained_variance_ratio_total": m1["model"].get("explained_variance_ratio_total"),
        }
        return _run_stages(last, v2, client, earlier=[summary])

    return leased(req.output, body)
