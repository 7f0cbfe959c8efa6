"""The embedding flow's last stage: the run's plot and manifest, its commit marker, and the
summary artifacts shown in the Prefect UI."""

from __future__ import annotations

import platform
import time
from importlib import metadata

import numpy as np
from prefect import task
from prefect.artifacts import create_markdown_artifact, create_table_artifact
from prefect.cache_policies import NO_CACHE

import dimred_dask
from dimred_dask._compute import compute
from dimred_dask.io import RunStore, embedding_png
from dimred_dask.runs import MODEL_FORMAT, REFERRING_METHODS, placing_methods

from .guard import stage_guard
from .inputs import open_class_labels
from .request import RunRequest, Validated
from .stages import chunk_sample, in_stage, notify

TASK_OPTS = {"cache_policy": NO_CACHE, "persist_result": False}
PLOT_POINTS = 50_000


def versions() -> dict:
    out = {"python": platform.python_version(), "dimred-dask": dimred_dask.__version__}
    for pkg in ("numpy", "scipy", "dask", "distributed", "zarr", "prefect"):
        try:
            out[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            pass
    return out


def _placement(req: RunRequest, v: Validated, store: RunStore) -> dict:
    """What the run's model keeps for placing new rows (`dimred_dask.runs`): whether it places
    any, its size, and the rows outside its model it refers to."""
    places = req.method in placing_methods()
    refers = None
    if places and req.method in REFERRING_METHODS:
        refers = (
            {"rows": req.input, "in_store": True}
            if req.reads_own_step
            else {"rows": req.input, "fingerprint": v.input_fingerprint["digest"]}
        )
    return {"places_new_rows": places, "model_bytes": store.size("model"), "refers_to": refers}


def _fingerprint_summary(fp: dict) -> dict:
    """The input's fingerprint as the manifest states it: its digest and what was hashed
    (each hashed chunk's digest stays with the run, for naming a change)."""
    return {k: val for k, val in fp.items() if k != "chunks"}


def flow_run_id() -> str | None:
    from prefect.runtime import flow_run

    return str(flow_run.id) if flow_run.id else None


@task(name="publish", **TASK_OPTS)
@in_stage("publish")
def publish(req: RunRequest, v: Validated, stages: dict, cluster: dict, fingerprint: str) -> dict:
    """Writes the plot and the manifest, commits the run (``_COMMITTED``) and publishes the
    summary artifacts to the Prefect UI."""
    t0 = time.perf_counter()

    store = RunStore(req.output)
    Y = store.open_array("embedding").to_dask()
    idx, _ = chunk_sample(Y.chunks[0], PLOT_POINTS, max_chunks=64, seed=1)
    classes = open_class_labels(req, v)
    Yp, *lp = compute(
        Y[idx], *([classes.array[idx]] if classes is not None else []), stage="plot sample"
    )
    store.write_bytes(
        "embedding.png",
        embedding_png(
            Yp,
            title=f"{req.method} of {req.input}",
            n_total=Y.shape[0],
            labels=np.ravel(lp[0]) if lp else None,
        ),
    )
    stages = {**stages, "publish": {"seconds": time.perf_counter() - t0, "reused": False}}
    chain = req.step if req.reads_own_step else None  # a chain's manifest: its final step's
    first = (stages.get("earlier_steps") or [{}])[0]
    manifest = {
        "method": chain.chain if chain else req.method,
        "params": {
            **{s["method"]: s["params"] for s in stages.get("earlier_steps", [])},
            req.method: v.params,
        }
        if chain
        else v.params,
        "input": chain.input if chain else req.input,
        "input_meta": first.get("input_meta", v.input_meta),
        "input_fingerprint": _fingerprint_summary(
            first.get("input_fingerprint", v.input_fingerprint)
        ),
        "chunking": {
            "row_chunk": v.row_chunk,
            "n_chunks": v.n_chunks,
            "chunk_bytes": v.chunk_bytes,
            "worker_memory_limit": v.worker_memory,
        },
        "output": store.url,
        "fingerprint": fingerprint,
        "versions": versions(),
        "cluster": cluster,
        "flow_run_id": flow_run_id(),
        "timings": {k: round(s["seconds"], 4) for k, s in stages.items() if k != "earlier_steps"},
        "stages": {
            k: (
                "not needed"
                if s.get("needed") is False
                else "reused from cache"
                if s.get("source") == "cache"
                else "reused"
                if s.get("reused")
                else "computed"
            )
            for k, s in stages.items()
            if k != "earlier_steps"
        },
        "graph": (
            {q: val for q, val in stages["knn"].items() if q not in ("reused", "seconds")}
            if stages.get("knn", {}).get("needed")
            else None
        ),
        "columns": list(req.columns) if req.columns else None,
        "labels": req.labels,
        "eval_labels": req.eval_labels,
        "actions": req.actions,
        "model_format": MODEL_FORMAT,
        "placement": _placement(req, v, store),
        "model": stages["fit"]["model"],
        "convergence": stages["fit"]["model"].get("convergence") or [],
        "metrics": {
            k: stages["evaluate"][k] for k in stages["evaluate"] if k not in ("seconds", "reused")
        },
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    if chain:  # the final step of a chain: what each step was, and where it is
        manifest["chain"] = {
            "steps": list(chain.steps),
            "step_outputs": {chain.steps[0]: chain.first_output},
            "final_step_input": req.input,
            "final_step_input_meta": v.input_meta,
            "earlier": stages.get("earlier_steps", []),
        }
    store.commit(manifest, guard=stage_guard(req, v, "publish", final=True))
    notify("stage", stage="publish", fingerprint=manifest["fingerprint"], output=req.output)
    _artifacts(manifest)
    return manifest


def _key(method: str) -> str:
    """An artifact key from a method name (Prefect allows lowercase letters, digits, dashes)."""
    return "".join(c if c.isalnum() else "-" for c in method.lower())


def _num(v) -> str:
    return "" if v is None else f"{v:.3g}"


def _artifacts(m: dict) -> None:
    model, met = m["model"], m["metrics"]
    timing_rows = "\n".join(
        f"| {k} | {s:.2f} s | {m['stages'][k]} |" for k, s in m["timings"].items()
    )
    conv_rows = "\n".join(
        f"| {r.get('step')} | {r.get('solver')} | {r.get('status')} | {r.get('iterations')} | "
        f"{_num(r.get('residual'))} | {_num(r.get('tol'))} | {r.get('handled_by') or ''} |"
        for r in m.get("convergence") or []
    )
    conv = (
        (
            f"\n\n| solve | solver | status | iterations | residual | tol | handled by |\n"
            f"|---|---|---|---|---|---|---|\n{conv_rows}\n"
        )
        if conv_rows
        else ""
    )
    metric_rows = "\n".join(f"| {k} | {v:.6g} |" for k, v in met.items() if isinstance(v, float))
    create_markdown_artifact(
        key=f"{_key(m['method'])}-summary",
        description="dimred-dask run summary",
        markdown=(
            f"# {m['method']} embedding\n\n"
            f"- input: `{m['input']}` shape {m['input_meta']['shape']} "
            f"{m['input_meta']['dtype']}\n- output: `{m['output']}`\n"
            f"- parameters: `{m['params']}`\n"
            f"- explained variance (total ratio): "
            f"{model.get('explained_variance_ratio_total', float('nan')):.6f}\n"
            f"- metrics sample: {met.get('sample')}\n"
            f"- Dask dashboard: {m['cluster'].get('dashboard') or 'not running'} "
            f"(scheduler {m['cluster'].get('scheduler')})\n\n"
            f"| stage | wall time | |\n|---|---|---|\n{timing_rows}\n\n"
            f"| metric | value |\n|---|---|\n{metric_rows}\n{conv}"
        ),
    )
    if "explained_variance" in model:
        ratio = np.asarray(model["explained_variance_ratio"])
        create_table_artifact(
            key=f"{_key(m['method'])}-explained-variance",
            description="explained variance by component",
            table=[
                {
                    "component": i + 1,
                    "variance": float(ev),
                    "ratio": float(r),
                    "cumulative": float(c),
                }
                for i, (ev, r, c) in enumerate(
                    zip(model["explained_variance"], ratio, np.cumsum(ratio))
                )
            ],
        )
