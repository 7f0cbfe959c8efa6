"""The transform flow: place the rows of a new input on a finished run's map.

    validate -> place (the new rows' embedding, one task per row chunk, on the workers)
             -> drift (each new row's distance to its nearest training rows, against the
                training rows' own) -> publish (picture, manifest, _COMMITTED)

The output is a run store of its own, with the run's rules: its lease, a marker per stage
(a placement stopped part way resumes: a committed stage is reused, the others are redone
from the start, giving what an uninterrupted run gives), the same overwrite and data-safety
rules, the commit guard (the new input unchanged while it is read). The model is the
committed run's (`dimred_dask.load_model`): its training rows, when it refers to them, are
checked against their fingerprint before anything is placed; a chain places through every
step. Placement does not depend on how the new rows are chunked, ordered or batched (each
row's position depends on the row and the map alone; t-SNE's and UMAP's search index is
built once per worker process, with a fixed seed).
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass

import numpy as np
from prefect import flow, get_run_logger, task

import dimred_dask
from dimred_dask._compute import compute
from dimred_dask._validation import check_array
from dimred_dask.cluster import cluster_client, describe_cluster
from dimred_dask.errors import InputError
from dimred_dask.io import (
    RunStore,
    array_fingerprint,
    check_output_location,
    digest_of,
    embedding_png,
    open_output,
    parse_store,
    parse_uri,
    run_storage_options,
)
from dimred_dask.runs import Reference, load_model, training_reference

from .embed import write_rows
from .guard import sources_of, stage_guard
from .inputs import open_run_input
from .publish import TASK_OPTS, flow_run_id, versions
from .request import Validated, expand_output
from .running import block_credentials, leased, scheduled_start
from .stages import chunk_sample, in_stage, notify, stage_reusable
from .validate import plan_chunks

__all__ = ["transform", "PlaceRequest", "check_placement", "DRIFT_WARN"]

# the share of new rows beyond the training rows' own 99th percentile of distance to their
# nearest training rows above which a placement warns: 1 % of rows like the training data
# lie beyond it by definition, five times that means new data unlike what the map was
# fitted on
DRIFT_WARN = 0.05
DRIFT_QUANTILE = 0.99
DRIFT_REFERENCE_MAX = 100_000  # training rows the drift is measured against (a sample above)
BASELINE_ROWS = 2000  # training rows whose own distances make the baseline
PLOT_TRAINING = 20_000  # training map points drawn in grey
PLOT_NEW = 50_000


@dataclass(frozen=True)
class PlaceRequest:
    """What a placement was asked to do, every location in canonical form (`build`)."""

    model: str
    input: str
    output: str
    overwrite: bool = False
    columns: tuple | None = None
    chunk_rows: int | None = None
    allow_missing_chunks: bool = False
    drift_warn: float = DRIFT_WARN
    # what the shared input openers and the commit guard ask of a run's request
    labels = None
    actions = None
    eval_labels = None
    step = None
    reads_own_step = False

    @classmethod
    def build(
        cls,
        *,
        model,
        input,
        output,
        overwrite: bool = False,
        columns=None,
        chunk_rows: int | None = None,
        allow_missing_chunks: bool = False,
        drift_warn: float = DRIFT_WARN,
        when=None,
    ) -> "PlaceRequest":
        """``{date}`` in the input and the output becomes the run's UTC date (``when``: a
        deployment's scheduled start; None: now)."""
        return cls(
            model=str(parse_store(model, role="model")),
            input=str(parse_uri(expand_output(input, when))),
            output=str(parse_store(expand_output(output, when))),
            overwrite=bool(overwrite),
            columns=tuple(columns) if columns is not None else None,
            chunk_rows=chunk_rows,
            allow_missing_chunks=bool(allow_missing_chunks),
            drift_warn=float(drift_warn),
        )

    @property
    def root(self) -> str:
        return self.output


def check_placement(req: PlaceRequest):
    """Every check of a placement that reads no more than metadata (and the model's small
    arrays, and the fingerprint of the training rows it refers to); writes nothing. Returns
    (the model, its run's manifest, the opened input, the output's mode)."""
    if not isinstance(req.drift_warn, float) or not 0.0 < req.drift_warn < 1.0:
        raise InputError(
            f"The drift warning threshold must be a share of rows in (0, 1); found "
            f"{req.drift_warn!r}.",
            f"pass --drift-warn {DRIFT_WARN} (the default) or leave it out.",
        )
    run = open_output(req.model)
    manifest = run.read_json("manifest.json")
    model = load_model(req.model)  # refuses a method that places no rows, changed references
    inp = open_run_input(req, check_chunks=True)
    where = f"'{inp.location}'"
    first = model.method.split("+")[0]
    from dimred_dask.methods import accepts_sparse

    check_array(inp.array, method=first.upper(), where=where, accept_sparse=accepts_sparse(first))
    if model.n_features is not None and inp.shape[1] != model.n_features:
        raise InputError(
            f"The {model.method} run at {run.url} was fitted on {model.n_features} columns; "
            f"the input {inp.location} has {inp.shape[1]}.",
            "place rows with the training data's columns, in its order (--columns for a table).",
        )
    check_output_location(parse_store(req.output), ("input", inp.location), ("model", run.location))
    store = RunStore(req.output)
    k = _placed_width(model)
    store.check_room(inp.shape[0] * (k * inp.array.dtype.itemsize + 8), what="the placed rows")
    mode = store.check_writable(req.overwrite)
    return model, manifest, inp, mode


def _placed_width(model) -> int:
    last = model.steps[-1]
    setting = getattr(last, "setting", None)
    if setting is not None:
        return int(setting.get("n_components", 2))
    if hasattr(last, "centres"):
        return int(last.centres.shape[1])
    return int(getattr(last, "n_components", 2))


@task(name="validate", **TASK_OPTS)
def validate(req: PlaceRequest) -> Validated:
    """The checks of `check_placement`, the row-chunk plan and the new input's fingerprint."""
    t0 = time.perf_counter()
    sources = sources_of(req)
    model, manifest, inp, mode = check_placement(req)
    row_chunk, memory = plan_chunks(req, inp)
    checked = inp.meta
    inp = open_run_input(req, row_chunk=row_chunk)
    inp.meta = {**checked, **inp.meta}
    fp = array_fingerprint(inp.array, {"source": inp.meta})
    get_run_logger().info(
        "placing %s rows of %s on the %s map of %s",
        inp.shape[0],
        inp.location,
        model.method,
        req.model,
    )
    return Validated(
        params={
            "model": req.model,
            "method": model.method,
            "model_fingerprint": manifest.get("fingerprint"),
            "width": _placed_width(model),
        },
        mode=mode,
        graph_request=None,
        labels_fingerprint=None,
        actions_fingerprint=None,
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


def _fingerprints(v: Validated) -> dict:
    place = digest_of(
        "place",
        v.params["model_fingerprint"],
        v.input_fingerprint["digest"],
        dimred_dask.__version__,
    )
    return {"place": place, "drift": digest_of("drift", place)}


def _reduced(req: PlaceRequest, v: Validated):
    """The new rows as the map's last step takes them (a chain's: after its PCA), lazy."""
    model = load_model(req.model, verify=False)  # checked by validate
    return model, model.reduce(model.check(open_run_input(req, v).array))


@task(name="place", **TASK_OPTS)
@in_stage("place")
def place(req: PlaceRequest, v: Validated) -> dict:
    t0 = time.perf_counter()
    store = RunStore(req.output)
    fp = _fingerprints(v)["place"]
    marker = stage_reusable(store, v.mode, "place", fp)
    if marker is not None and store.chunk_count("embedding") == marker["info"]["stored_chunks"]:
        return {**marker["info"], "reused": True, "seconds": time.perf_counter() - t0}
    model, Z = _reduced(req, v)
    last = model.steps[-1]
    store.prepare(v.mode, {"method": "transform", "version": dimred_dask.__version__})
    info = write_rows(store, "embedding", last.transform(Z), "place")
    if hasattr(last, "predict"):  # spectral clustering: the new rows' clusters too
        labels = write_rows(store, "labels", last.predict(Z), "place")
        info["labels_chunks"] = labels["stored_chunks"]
    store.mark_stage("place", fp, {"info": info}, guard=stage_guard(req, v, "place"))
    notify("stage", stage="place", fingerprint=fp, output=req.output)
    return {**info, "reused": False, "seconds": time.perf_counter() - t0}


def drift_reference(model_uri: str) -> Reference:
    """The training rows the drift is measured against: those of the map's last step (a
    chain's reduced rows). A map that places rows by their neighbours among the training
    rows (t-SNE, UMAP, SNE, spectral clustering) gives its own reference, so that the search
    index each worker built for the placement serves the drift too (same rows, same key:
    found in the worker's cache, not built again); another map's rows are sampled to
    `DRIFT_REFERENCE_MAX` above that size."""
    last = load_model(model_uri, verify=False).steps[-1]  # validate checked the rows
    if isinstance(getattr(last, "reference", None), Reference):
        return last.reference
    store = open_output(model_uri)
    manifest = store.read_json("manifest.json")
    chain = manifest.get("chain")
    inner = None
    if chain:
        inner = (RunStore(store.location.child(f"steps/{chain['steps'][0]}")), "embedding")
    ref = training_reference(store, manifest, "embedding", inner, False, None)
    n = int(store.open_array("embedding").shape[0])  # a row of the map per training row
    if n > DRIFT_REFERENCE_MAX:
        ref = dataclasses.replace(ref, sample=(n, DRIFT_REFERENCE_MAX, 0))
    return ref


def _baseline(reference: Reference) -> list:
    return reference.own_distances(BASELINE_ROWS).tolist()


@task(name="drift", **TASK_OPTS)
@in_stage("drift")
def drift(req: PlaceRequest, v: Validated) -> dict:
    """Each new row's mean distance to its nearest training rows (``drift/distance``), and
    the share beyond the training rows' own 99th percentile of that distance."""
    import dask.array as da
    from dask import delayed

    t0 = time.perf_counter()
    store = RunStore(req.output)
    fp = _fingerprints(v)["drift"]
    marker = stage_reusable(store, "resume", "drift", fp)
    if marker is not None:
        return {**marker["info"], "reused": True, "seconds": time.perf_counter() - t0}
    reference = drift_reference(req.model)
    _, Z = _reduced(req, v)
    Z = Z if Z.numblocks[1] == 1 else Z.rechunk({1: -1})
    distance = Z.map_blocks(
        lambda z: reference.nearest_distance(z).astype(np.float32),
        drop_axis=1,
        chunks=(Z.chunks[0],),
        dtype=np.float32,
    )
    write_rows(store, "drift/distance", distance, "drift")
    (own,) = compute(delayed(_baseline)(reference), stage="drift: the training rows' own")
    limit = float(np.quantile(own, DRIFT_QUANTILE))
    stored = store.open_array("drift/distance").to_dask()
    beyond, median = compute(
        (stored > limit).sum(), da.percentile(stored, 50), stage="drift: summary"
    )
    share = float(beyond) / max(1, v.shape[0])
    info = {
        "neighbours": 5,
        "training_rows": reference.sample[1] if reference.sample else None,
        "training_p99": limit,
        "training_median": float(np.median(own)),
        "new_median": float(np.asarray(median).ravel()[0]),
        "beyond_p99": share,
        "warn_above": req.drift_warn,
        "warning": None,
    }
    if share > req.drift_warn:
        info["warning"] = (
            f"{100 * share:.1f} % of the new rows lie farther from their nearest training rows "
            f"than 99 % of the training rows do (threshold {100 * req.drift_warn:.0f} %): "
            "the new data differ from what the map was fitted on, and their places on it "
            "say less. Fix: fit a new map on data that includes rows like these."
        )
        get_run_logger().warning("%s", info["warning"])
    store.mark_stage("drift", fp, {"info": info}, guard=stage_guard(req, v, "drift"))
    notify("stage", stage="drift", fingerprint=fp, output=req.output)
    return {**info, "reused": False, "seconds": time.perf_counter() - t0}


@task(name="publish", **TASK_OPTS)
@in_stage("publish")
def publish(req: PlaceRequest, v: Validated, stages: dict, cluster: dict) -> dict:
    t0 = time.perf_counter()
    store = RunStore(req.output)
    run = open_output(req.model)
    Y = store.open_array("embedding").to_dask()
    train = run.open_array("embedding").to_dask()
    idx, _ = chunk_sample(Y.chunks[0], PLOT_NEW, max_chunks=64, seed=1)
    tidx, _ = chunk_sample(train.chunks[0], PLOT_TRAINING, max_chunks=64, seed=1)
    Yp, Tp = compute(Y[idx], train[tidx], stage="plot sample")
    store.write_bytes(
        "embedding.png",
        embedding_png(
            Yp,
            title=f"{v.shape[0]} rows of {req.input} on the {v.params['method']} map",
            n_total=Y.shape[0],
            background=Tp,
        ),
    )
    stages = {**stages, "publish": {"seconds": time.perf_counter() - t0, "reused": False}}
    fp = _fingerprints(v)
    manifest = {
        "kind": "placement",
        "method": v.params["method"],
        "model": req.model,
        "model_fingerprint": v.params["model_fingerprint"],
        "input": req.input,
        "columns": list(req.columns) if req.columns else None,
        "input_meta": v.input_meta,
        "input_fingerprint": {k: x for k, x in v.input_fingerprint.items() if k != "chunks"},
        "output": store.url,
        "fingerprint": fp["drift"],
        "chunking": {"row_chunk": v.row_chunk, "n_chunks": v.n_chunks},
        "embedding": {"shape": [v.shape[0], v.params["width"]]},
        "drift": {k: x for k, x in stages["drift"].items() if k not in ("seconds", "reused")},
        "versions": versions(),
        "cluster": cluster,
        "flow_run_id": flow_run_id(),
        "timings": {k: round(s["seconds"], 4) for k, s in stages.items()},
        "stages": {k: "reused" if s.get("reused") else "computed" for k, s in stages.items()},
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    store.commit(manifest, guard=stage_guard(req, v, "publish", final=True))
    notify("stage", stage="publish", fingerprint=manifest["fingerprint"], output=req.output)
    _artifact(manifest)
    return manifest


def _artifact(m: dict) -> None:
    from prefect.artifacts import create_markdown_artifact

    d = m["drift"]
    try:
        create_markdown_artifact(
            key="placement",
            markdown=(
                f"### {m['embedding']['shape'][0]} rows placed on the {m['method']} map\n\n"
                f"- model: `{m['model']}`\n- input: `{m['input']}`\n- output: `{m['output']}`\n"
                f"- drift: {100 * d['beyond_p99']:.2f} % of the rows beyond the training "
                f"rows' 99th percentile (warns above {100 * d['warn_above']:.0f} %)\n"
                + (f"- **warning**: {d['warning']}\n" if d.get("warning") else "")
            ),
            description="dimred-dask placement",
        )
    except Exception:  # outside a flow run, or the API is unreachable: the summary is optional
        pass


# log_prints off, as the embed flow's (numba cannot compile under a replaced print)
@flow(name="transform", log_prints=False)
def transform(
    model: str,
    input: str,
    output: str,
    overwrite: bool = False,
    columns: list[str] | None = None,
    chunk_rows: int | None = None,
    allow_missing_chunks: bool = False,
    drift_warn: float = DRIFT_WARN,
    scheduler: str | None = None,
    credentials_block: str | None = None,
) -> dict:
    """Place the rows at ``input`` on the map of the committed run ``model`` and write a run
    store of the placement at ``output``: ``embedding`` (the new rows' positions; for
    spectral clustering also ``labels``), ``drift/distance`` (each row's mean distance to
    its 5 nearest training rows), the picture (the new rows over the training map, in grey)
    and the manifest (the drift: the share of rows beyond the training rows' own 99th
    percentile, a warning above ``drift_warn``). ``{date}`` in ``input`` and ``output``
    becomes the run's UTC date. Credentials come from the environment or the Prefect Secret
    block ``credentials_block``, as for `flows.embed.embed`."""
    req = PlaceRequest.build(
        model=model,
        input=input,
        output=output,
        overwrite=overwrite,
        columns=columns,
        chunk_rows=chunk_rows,
        allow_missing_chunks=allow_missing_chunks,
        drift_warn=drift_warn,
        when=scheduled_start(),
    )
    if credentials_block:
        with run_storage_options("s3", block_credentials(credentials_block)):
            return _transform(req, scheduler)
    return _transform(req, scheduler)


def _transform(req: PlaceRequest, scheduler) -> dict:
    from .stages import check_observer

    check_observer()
    with cluster_client(scheduler) as client:
        v = validate(req)

        def body(lease):
            now = RunStore(req.output).check_writable(req.overwrite)
            w = v.but(mode=now, lease=lease)
            stages = {"validate": {"seconds": w.seconds, "reused": False}}
            stages["place"] = place(req, w)
            w = w.but(mode="resume")
            stages["drift"] = drift(req, w)
            return publish(req, w, stages, describe_cluster(client))

        manifest = leased(req.output, body)
    get_run_logger().info("committed %s (%s)", manifest["output"], manifest["timings"])
    return manifest
