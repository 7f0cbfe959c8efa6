"""The flow process's memory: each method run through the flow, its peak RSS sampled.

``python -m bench flow-peak --methods laplacian,spectral [--rows 1000000]``

In a deployment the flow runs in a small process (a Prefect worker's pod) while the Dask
cluster holds the data. Here each run's flow is a process of its own (spawned: it imports the
flow and calls ``embed``, nothing else), the cluster another (its scheduler and 2 worker
processes by default, ``--workers``; `sparse._ClusterProcess`), and this process samples both
every 0.2 s; the flow process's peak is also given stage by stage (a stage's span ends at its
commit marker's time and lasts its recorded seconds; "outside" is the rest: Prefect's start,
validation, the gaps). The input is the 50-D Gaussian mixture of the graph benchmarks
(`graph.mixture`), float32, written once as Zarr under ``--dir`` (default ``bench/_data``),
its component of each row beside it as ``.npy``: the labels of the supervised methods (spca,
kspca). Runs share one kNN graph cache, so the first graph method computes the graph and
the others read it; each run is a new output (written fresh), deleted afterwards unless ``--keep``.

A method may be given with parameters: ``laplacian:eigen_solver=lobpcg`` (values read as
JSON where they parse, else as strings), e.g. to compare a solve in the flow's process with
the one on the workers on the same graph.
"""

from __future__ import annotations

import json
import os
import shutil
import time

from ._measure import PeakRSS, machine, peak_by_span

DEFAULT_PARAMS = {
    "laplacian": {"n_neighbors": 10},
    "spectral": {"n_clusters": 10, "n_neighbors": 10},
    "lle": {"n_neighbors": 10},
    "isomap": {"n_neighbors": 10},
    "landmark-isomap": {"n_neighbors": 10},
    "umap": {"n_neighbors": 15},
    "tsne": {},
    "pca": {},
    "kpca": {"n_landmarks": 1000},
    "landmark-mds": {"n_landmarks": 1000},
}


def _parse(item: str) -> tuple[str, str, dict]:
    """'method:key=value,key=value' -> (label, method, params)."""
    name, _, rest = item.partition(":")
    params = dict(DEFAULT_PARAMS.get(name, {}))
    for pair in filter(None, rest.split(";")):
        k, _, v = pair.partition("=")
        try:
            params[k] = json.loads(v)
        except ValueError:
            params[k] = v
    return item, name, params


def _flow(conn, path: str, out: str, method: str, params: dict, address: str, cache: str):
    """The flow's process: one ``embed`` call."""
    import traceback

    try:
        from dimred_dask.methods.specs import SPECS
        from flows.embed import embed

        labels = _labels_path(path) if SPECS[method].second_input == "labels" else None
        conn.send(("ready", os.getpid()))
        t0 = time.perf_counter()
        m = embed(
            path,
            out,
            method=method,
            params=params,
            scheduler=address,
            graph_cache=cache,
            labels=labels,
        )
        conn.send(("done", time.perf_counter() - t0, m.get("timings"), m.get("model")))
    except BaseException as exc:  # reported to the parent, which prints it
        conn.send(("error", f"{type(exc).__name__}: {exc}", traceback.format_exc()[-3000:]))


def _peak_by_stage(series, out: str, timings: dict) -> dict:
    """The flow process's peak RSS within each stage's span (from the run's commit markers)
    and outside them."""
    spans = {}
    for stage, seconds in timings.items():
        try:
            with open(os.path.join(out, "_stages", f"{stage}.json")) as f:
                end = json.load(f)["time"]
        except (OSError, ValueError, KeyError):
            continue  # a stage without a marker (publish): in "outside"
        spans[stage] = (end - seconds, end)
    peaks = peak_by_span(series, spans)
    rest = [(t, rss) for t, rss in series if not any(a <= t <= b for a, b in spans.values())]
    if rest:
        peaks["outside"] = max(rss for _, rss in rest)
    return peaks


def _iterations(model: dict) -> str:
    """The iterations of the fit's iterative solves, from the manifest's records."""
    recs = [r for r in model.get("convergence") or [] if isinstance(r, dict)]
    return ", ".join(f"{r.get('step')} {r.get('iterations')}" for r in recs) or "-"


def _labels_path(path: str) -> str:
    return path[: -len(".zarr")] + "-labels.npy"


def _write_input(path: str, n: int) -> None:
    import numpy as np

    from dimred_dask.io import save_array

    from .graph import mixture

    X, lab = mixture(n)
    np.save(_labels_path(path) + ".partial.npy", lab.astype(np.int32))
    os.rename(_labels_path(path) + ".partial.npy", _labels_path(path))
    save_array(X, path + ".partial", chunks=(min(n, 125_000), X.shape[1]))
    os.rename(path + ".partial", path)


def main(args) -> int:
    import multiprocessing

    from distributed import Client

    from .sparse import _ClusterProcess

    n = args.rows or 1_000_000
    folder = args.dir or os.path.join(os.path.dirname(__file__), "_data")
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, f"mixture-{n}x50.zarr")
    items = [_parse(s) for s in (args.methods or "laplacian,spectral").split(",")]
    n_workers = args.workers or 2
    limit = args.worker_memory or "8GiB"
    print(
        f"# bench flow-peak: {n:,} x 50 float32 (50-D mixture), each method's flow in a "
        f"process of its own, {n_workers} worker processes x 1 thread at {limit}; {machine()}; "
        f"load {os.getloadavg()[0]:.2f}",
        flush=True,
    )
    if not (os.path.exists(path) and os.path.exists(_labels_path(path))):
        shutil.rmtree(path, ignore_errors=True)
        ctx = multiprocessing.get_context("spawn")
        writer = ctx.Process(target=_write_input, args=(path, n))
        writer.start()
        writer.join()
        if writer.exitcode:
            raise SystemExit(f"writing {path} failed (exit code {writer.exitcode})")
    cache = args.graph_cache or os.path.join(folder, f"flow-peak-cache-{os.getpid()}")
    rows = []
    with _ClusterProcess(n_workers, limit) as address, Client(address) as client:
        workers = sorted(client.run(os.getpid).values())
        for label, method, params in items:
            out = os.path.join(folder, f"flow-peak-{method}-{os.getpid()}")
            ctx = multiprocessing.get_context("spawn")
            conn, child = ctx.Pipe()
            proc = ctx.Process(
                target=_flow, args=(child, path, out, method, params, address, cache)
            )
            proc.start()
            first = conn.recv()
            if first[0] != "ready":
                print(f"  {label}: {first[1]}\n{first[2]}", flush=True)
                continue
            with PeakRSS([first[1], *workers], interval=0.2, record=[first[1]]) as mem:
                while not conn.poll(0.5):
                    if not proc.is_alive():
                        break
                msg = conn.recv() if conn.poll(1) else ("error", "the flow process died", "")
            proc.join(60)
            flow_peak = mem.per_process_peak[first[1]]
            w = [mem.per_process_peak[p] for p in workers]
            if msg[0] != "done":
                print(f"  {label}: FAILED {msg[1]}\n{msg[2]}", flush=True)
                rows.append((label, None, flow_peak, w, {}, {}))
                if not args.keep:  # a failed run's store too (kept with --keep, to resume)
                    shutil.rmtree(out, ignore_errors=True)
                continue
            _, seconds, timings, model = msg
            rows.append((label, seconds, flow_peak, w, timings or {}, model or {}))
            by_stage = _peak_by_stage(mem.series[first[1]], out, timings or {})
            print(
                f"  {label}: {seconds:.1f} s; flow process peak {flow_peak / 2**20:,.0f} MiB; "
                f"workers {', '.join(f'{p / 2**20:,.0f}' for p in w)} MiB; solver "
                f"{model.get('solver')}; iterations {_iterations(model)}; stages "
                + ", ".join(
                    f"{k} {v:.1f}" for k, v in (timings or {}).items() if isinstance(v, float)
                )
                + "; flow process peak by stage (MiB) "
                + ", ".join(f"{k} {v / 2**20:,.0f}" for k, v in by_stage.items()),
                flush=True,
            )
            if not args.keep:
                shutil.rmtree(out, ignore_errors=True)
    if not args.graph_cache:
        shutil.rmtree(cache, ignore_errors=True)
    print(
        "\n| method (parameters) | time (s) | flow process peak RSS (MiB) | worker peaks "
        "(MiB) | solver |\n|---|---|---|---|---|"
    )
    for label, seconds, fp, w, _, model in rows:
        print(
            f"| `{label}` | {'failed' if seconds is None else f'{seconds:.1f}'} | "
            f"{fp / 2**20:,.0f} | {', '.join(f'{p / 2**20:,.0f}' for p in w)} | "
            f"{model.get('solver', '')} |"
        )
    print(f"load average at the end {os.getloadavg()[0]:.2f}")
    return 0
