"""What the command line prints of a run store: a finished run's manifest (`print_summary`),
a placement's (`print_placement`), an unfinished run's progress (`unfinished_report`,
`print_unfinished`)."""

from __future__ import annotations

import json
import sys

__all__ = ["print_summary", "print_placement", "unfinished_report", "print_unfinished"]


def print_summary(m: dict, stream=None) -> None:
    met, model = m.get("metrics", {}), m.get("model", {})
    w = (stream or sys.stdout).write  # looked up per call: sys.stdout may have been replaced
    w(f"output      {m['output']}\n")
    w(f"method      {m['method']}  params {json.dumps(m['params'], sort_keys=True)}\n")
    w(f"input       {m['input']}  shape {m['input_meta']['shape']} {m['input_meta']['dtype']}\n")
    w(f"            {_input_kind(m['input_meta'])}\n")
    for step in (m.get("chain") or {}).get("earlier", []):
        w(
            f"step        {step['method']} -> {step['output']}  "
            f"({', '.join(f'{k} {v:.2f}s' for k, v in step['timings'].items())})\n"
        )
    if "explained_variance_ratio_total" in model:
        w(
            f"explained variance ratio (total of {model['n_components']}): "
            f"{model['explained_variance_ratio_total']:.6f}\n"
        )
    choice = model.get("solver_choice") or {}
    if choice.get("max_error") is not None:  # PCA's solver="auto" weighing single-pass
        w(f"solver      {choice['solver']}: {choice['why']}\n")
        if choice.get("fallback"):
            w(f"            then {choice['fallback']}\n")
    sketch = model.get("sketch")
    if sketch:  # single-pass PCA
        est = sketch.get("embedding_error_estimate")
        w(
            f"single-pass sketch of {sketch['width']} columns: captured variance "
            f"{sketch['captured_variance']:.6f}, embedding error estimate "
            + (f"{est:.2e}" if est is not None else "not available")
            + "\n"
        )
        if sketch.get("warning"):
            w(f"warning     {sketch['warning']}\n")
    for k in ("trustworthiness", "knn_recall", "cpd", "reconstruction_error"):
        if met.get(k) is not None:
            w(f"{k:<22}{met[k]:.6f}\n")
    if met.get("class_labels"):
        knc = met.get("knc")
        w(
            f"classes               {met['n_classes']} in {met['class_labels']}: knn_accuracy "
            f"{met['knn_accuracy']:.6f} (k = {met['knn_accuracy_neighbors']}), knc "
            + (f"{knc:.6f} (k = {met['knc_neighbors']})" if knc is not None else "not defined")
            + "\n"
        )
    graph = m.get("graph") or {}
    if graph:
        search = graph.get("recall_search") or {}
        recall = graph.get("recall")
        w(
            f"knn graph   {graph.get('n_neighbors')} neighbours, {graph.get('backend')}, "
            f"{graph.get('components')} component(s), recall "
            + (f"{recall:.3f}" if recall is not None else "not measured")
            + (
                f" (target {search['target']:g}, {len(search['rounds'])} build(s))"
                if search.get("rounds")
                else ""
            )
            + f", {graph.get('source')}\n"
        )
        if graph.get("recall_warning"):
            w(f"warning     {graph['recall_warning']}\n")
    if "sample" in met:
        w(f"metrics sample        {met['sample']} (k = {met.get('n_neighbors')})\n")
    for e in model.get("embeddings", []):  # t-SNE / UMAP / SNE: one line per setting
        sample = e.get("fit_sample")
        w(
            f"embedding {e['index']:<3} {json.dumps(e['params'], sort_keys=True)}  "
            f"{e['loss_name']} {e['loss']:.4f}  trustworthiness {e['trustworthiness']:.4f}  "
            f"({e['array']})"
            + (
                f"; fit on {sample['rows']} of {sample['of']} rows (seed {sample['seed']}), the "
                f"others placed in {sample['place_seconds']:.1f} s"
                if sample
                else ""
            )
            + "\n"
        )
    records = m.get("convergence") or []
    if records:
        handled = [f"{r.get('solver')} {r['handled_by']}" for r in records if r.get("handled_by")]
        w(
            f"convergence {len(records)} solve(s): "
            f"{sum(bool(r.get('converged')) for r in records)} converged"
            + (f"; {'; '.join(handled)}" if handled else "")
            + "\n"
        )
    w(
        "timings     "
        + ", ".join(f"{k} {v:.2f}s ({m['stages'][k]})" for k, v in m["timings"].items())
        + "\n"
    )
    if m.get("flow_run_id"):
        w(f"flow run    {m['flow_run_id']}\n")


def _input_kind(meta: dict) -> str:
    """How the input is kept: its format, dense or sparse (density), shards, element."""
    parts = [meta.get("format", "?")]
    if meta.get("element"):
        parts.append(f"element {meta['element']}")
    if meta.get("sparse"):
        parts.append(
            f"sparse, {meta.get('nnz', 0):,} stored values "
            f"(density {100 * meta.get('density', 0):.2f} %)"
        )
    else:
        parts.append("dense")
    if meta.get("shards"):
        parts.append(f"{meta['shards']} shards")
    if meta.get("stored_dtype"):
        parts.append(f"stored as {meta['stored_dtype']}")
    if meta.get("missing_chunks"):
        parts.append(f"{meta['missing_chunks']} missing chunks read as fill value")
    return ", ".join(parts)


def print_placement(m: dict, stream=None) -> None:
    """The summary of a placement's manifest (`dimred-dask transform`, `inspect`)."""
    w = (stream or sys.stdout).write
    d = m["drift"]
    w(f"output      {m['output']}\n")
    w(f"placed      {m['embedding']['shape'][0]} rows on the {m['method']} map of {m['model']}\n")
    w(f"input       {m['input']}  shape {m['input_meta']['shape']} {m['input_meta']['dtype']}\n")
    w(f"            {_input_kind(m['input_meta'])}\n")
    w(
        f"drift       {100 * d['beyond_p99']:.2f} % of the rows beyond the training rows' 99th "
        f"percentile of distance to their {d['neighbours']} nearest training rows (median "
        f"{d['new_median']:.4g} against {d['training_median']:.4g}; warns above "
        f"{100 * d['warn_above']:.0f} %)\n"
    )
    if d.get("warning"):
        w(f"warning     {d['warning']}\n")
    w(
        "timings     "
        + ", ".join(f"{k} {v:.2f}s ({m['stages'][k]})" for k, v in m["timings"].items())
        + "\n"
    )
    w(f"embedding   {m['output']}/embedding  (Zarr array)\n")
    if m.get("flow_run_id"):
        w(f"flow run    {m['flow_run_id']}\n")


def unfinished_report(store) -> dict:
    """Where an unfinished run stands: its committed stages (of its steps too, for a chain)
    and its lease (holder, how it is judged), from the store alone."""
    import time

    from dimred_dask.io import Lease, RunStore

    def stages(s):
        return [
            {"stage": m.get("stage"), "time": m.get("time"), "fingerprint": m.get("fingerprint")}
            for m in s.stages_done()
        ]

    steps = {}
    try:
        names = store.fs.ls(store._path("steps"), detail=False)
    except (FileNotFoundError, NotADirectoryError):
        names = []
    for entry in sorted(names):
        name = entry.rstrip("/").rsplit("/", 1)[-1]
        steps[name] = stages(RunStore(store.location.child(f"steps/{name}")))
    lease = Lease(store).status()
    return {
        "output": store.url,
        "committed": False,
        "stages": stages(store),
        "steps": steps,
        "lease": lease and {k: v for k, v in lease.items() if k not in ("token", "digest")},
        "now": time.time(),
    }


def print_unfinished(report: dict, stream=None) -> None:
    import time

    w = (stream or sys.stdout).write

    def listed(stages):
        if not stages:
            return "none"
        return ", ".join(
            f"{s['stage']} ({time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(s['time']))})"
            if s.get("time")
            else str(s["stage"])
            for s in stages
        )

    w(f"output      {report['output']}\n")
    w("status      unfinished: no _COMMITTED marker (its contents may be partial)\n")
    for name, stages in report["steps"].items():
        w(f"step {name:<7}stages committed: {listed(stages)}\n")
    w(f"stages      committed: {listed(report['stages'])}\n")
    lease = report["lease"]
    if lease is None:
        w("lease       none: no run is writing it\n")
        w("next        run the same command again to finish it (committed stages are reused)\n")
        return
    holder = (
        f"{lease.get('holder')} (host {lease.get('host')}, pid {lease.get('pid')}; "
        f"{lease.get('why')})"
    )
    if lease["stale"]:
        w(f"lease       stale, left by {holder}\n")
        w("next        run the same command again: it takes the stale lease over\n")
    else:
        w(f"lease       held by {holder}\n")
        w(
            "next        that run is still writing it; if it is gone (its machine was "
            f"lost), dimred-dask unlock {report['output']}\n"
        )
