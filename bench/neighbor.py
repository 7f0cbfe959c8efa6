"""UMAP and t-SNE against umap-learn and openTSNE, on the same data in the same run.

Data: ``bench.knn.make_data(n)`` (20 clusters in a 10-D subspace of R^50 plus isotropic
noise, float32, seed 0), n = 50 000 by default, in memory.

- ``python -m bench umap``: ours ``umap(X, random_state=0)`` (kNN by NN-descent + fuzzy graph +
  spectral init + SGD, numba threads = the cores) against ``umap.UMAP(random_state=0)``
  (umap-learn seeded: deterministic, single-threaded SGD, as ours is deterministic) and
  ``umap.UMAP(n_jobs=-1)`` (unseeded, parallel SGD). Target: ours <= 0.5 x umap-learn's time,
  trustworthiness >= umap-learn's - 0.01.
- ``python -m bench tsne``: ours ``tsne(X, random_state=0)`` against
  ``openTSNE.TSNE(n_jobs=<cores>, random_state=0)`` (its defaults otherwise: Annoy kNN, FFT
  gradients). Target: ours <= 1.0 x openTSNE's time, trustworthiness >= openTSNE's - 0.01, KL
  within 5 %.

Everything is end to end (kNN included), after a warm-up that compiles every numba function
in this process (ours and the peers'); medians of ``--repeat`` runs. Trustworthiness (k = 15)
on the same 5 000 sampled rows for every embedding. ``--first-run``: the same end-to-end call
in a fresh process with an empty numba cache (what a first run on a fresh install pays),
ours and the peer. ``--big``: 1 000 000 x 50 (``--rows``) end to end on a LocalCluster of 2
(``--workers``) worker processes of one thread (dask input, kNN on one worker, affinities
blockwise on the workers, the optimisation one task, or spread over every worker with
``--optimizer distributed``), wall time, peak RSS of each worker and of this process (the
coordinator of a distributed fit), trustworthiness (k = 15, 5 000 rows), the loss and the
optimiser's info. ``--compare-optimizers``: the one-worker and the distributed optimiser in
turns on the same persisted data (``--big-repeat`` rounds), with per-round ratios.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

from ._measure import PeakRSS, machine, timed
from .knn import D, make_data

SAMPLE = 5000
TARGETS = {
    "umap": {"ratio": 0.5, "trust": 0.01, "big_minutes": 15},
    "tsne": {"ratio": 1.0, "trust": 0.01, "kl": 0.05, "big_minutes": 30},
}


def _load() -> str:
    return f"{os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} {os.getloadavg()[2]:.2f}"


def _ours(name: str):
    if name == "umap":
        from dimred_dask.methods.umap import umap

        def run(X):
            m = umap(X, random_state=0)
            return m.embedding, m.cross_entropy
    else:
        from dimred_dask.methods.tsne import tsne

        def run(X):
            m = tsne(X, random_state=0)
            return m.embedding, m.kl_divergence

    return run


def _peers(name: str) -> dict:
    cores = os.cpu_count() or 1
    if name == "umap":
        import umap as umap_learn

        return {
            "umap-learn seeded (random_state=0)": lambda X: (
                umap_learn.UMAP(random_state=0).fit_transform(X),
                None,
            ),
            "umap-learn unseeded (n_jobs=-1, parallel SGD)": lambda X: (
                umap_learn.UMAP(n_jobs=-1).fit_transform(X),
                None,
            ),
        }
    from openTSNE import TSNE

    def open_tsne(X):
        e = TSNE(n_jobs=cores, random_state=0).fit(X)
        return np.asarray(e), float(e.kl_divergence)

    return {f"openTSNE (n_jobs={cores}, random_state=0)": open_tsne}


def _trust(X, Y, idx) -> float:
    from dimred_dask.metrics import trustworthiness

    return trustworthiness(X[idx], np.asarray(Y)[idx], 15)


def _first_run(name: str, X: np.ndarray) -> dict:
    """Seconds of one end-to-end call in a fresh process with an empty numba cache."""
    out = {}
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "X.npy")
        np.save(path, X)
        peer = (
            "umap-learn seeded (random_state=0)"
            if name == "umap"
            else f"openTSNE (n_jobs={os.cpu_count()}, random_state=0)"
        )
        for who, key in (("ours", "ours"), (peer, "peer")):
            code = (
                "import time, numpy as np, sys; sys.path.insert(0, '.');"
                f"from bench.neighbor import _ours, _peers; X = np.load({path!r});"
                f"f = _ours({name!r}) if {key!r} == 'ours' else _peers({name!r})[{who!r}];"
                "t = time.perf_counter(); f(X); print(time.perf_counter() - t)"
            )
            env = {**os.environ, "NUMBA_CACHE_DIR": os.path.join(tmp, f"numba-{key}")}
            res = subprocess.run(
                [sys.executable, "-c", code],
                capture_output=True,
                text=True,
                env=env,
                cwd=os.path.dirname(os.path.dirname(__file__)),
            )
            lines = res.stdout.strip().splitlines()
            out[who] = float(lines[-1]) if res.returncode == 0 and lines else None
            if out[who] is None:
                print(res.stderr[-2000:], file=sys.stderr)
    return out


def main(args) -> int:
    name = args.name
    if args.big:
        return main_big(args)
    n = args.rows or 50_000
    print(
        f"# bench {name}: {n} x {D} float32 (20 clusters in 10-D + noise); {machine()}; "
        f"load average {_load()}",
        flush=True,
    )
    X = make_data(n).compute(scheduler="threads")
    idx = np.sort(np.random.default_rng(0).choice(n, size=min(n, SAMPLE), replace=False))
    ours, peers = _ours(name), _peers(name)
    t0 = time.perf_counter()
    small = X[:5000]
    ours(small)
    for f in peers.values():
        f(small)
    print(
        f"  warm-up (compile, 5 000 rows, all implementations): {time.perf_counter() - t0:.1f} s",
        flush=True,
    )
    rows = []
    for label, f in [("dimred-dask (function form, in process)", ours), *peers.items()]:
        med, times, peak, (Y, loss) = timed(lambda: f(X), args.repeat)
        rows.append(
            {
                "name": label,
                "seconds": med,
                "times": times,
                "peak": peak,
                "trust": _trust(X, Y, idx),
                "loss": loss,
            }
        )
        print(
            f"  {rows[-1]['name']}: {med:.1f} s {['%.1f' % t for t in times]}, "
            f"trustworthiness {rows[-1]['trust']:.4f}, loss {loss}",
            flush=True,
        )
    first = _first_run(name, X) if args.first_run else None
    _report(name, rows, first, n)
    return 0


def _report(name: str, rows: list, first, n: int) -> None:
    tgt = TARGETS[name]
    ours, peers = rows[0], rows[1:]
    print(f"\nload average after: {_load()}\n")
    print(
        "| implementation | median (s) | runs (s) | peak RSS delta (MiB) | "
        "trustworthiness (k=15, 5000 rows) | loss | ours / this |"
    )
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        loss = "" if r["loss"] is None else f"{r['loss']:.4f}"
        print(
            f"| {r['name']} | {r['seconds']:.1f} | {', '.join('%.1f' % t for t in r['times'])}"
            f" | {r['peak'] / 2**20:,.0f} | {r['trust']:.4f} | {loss} | "
            f"{ours['seconds'] / r['seconds']:.2f} |"
        )
    ref = peers[0]
    ratio = ours["seconds"] / ref["seconds"]
    print(
        f"\ntime: ours / {ref['name']} = {ratio:.2f} (target <= {tgt['ratio']}: "
        f"{'met' if ratio <= tgt['ratio'] else 'NOT met'})"
    )
    dt = ours["trust"] - ref["trust"]
    print(
        f"trustworthiness: ours {ours['trust']:.4f} vs {ref['trust']:.4f} (target >= peer - "
        f"{tgt['trust']}: {'met' if dt >= -tgt['trust'] else 'NOT met'})"
    )
    if "kl" in tgt and ref["loss"]:
        rel = abs(ours["loss"] - ref["loss"]) / ref["loss"]
        print(
            f"KL: ours {ours['loss']:.4f} vs {ref['loss']:.4f}, {rel:.1%} apart (target "
            f"<= {tgt['kl']:.0%}: {'met' if rel <= tgt['kl'] else 'NOT met'})"
        )
    if first:
        print(
            "first run in a fresh process with an empty numba cache (compilation "
            "included): "
            + ", ".join(f"{k} {v:.1f} s" if v else f"{k} failed" for k, v in first.items())
        )
    print(json.dumps({"rows": rows, "first_run": first}, default=float))


def _warm(name: str) -> None:
    from dimred_dask.graphs import knn_graph

    X = make_data(5000).compute(scheduler="sync")
    knn_graph(X, 15, backend="nndescent")
    _ours(name)(X)


def _big_run(client, X, name: str, n: int, params: dict, pids: list) -> dict:
    """One end-to-end fit of X (persisted on the workers) with the peaks of every process."""
    from dimred_dask.linalg import take_rows
    from dimred_dask.metrics import trustworthiness

    steps = []

    def cb(i, it, total, loss):  # printed as it comes: a killed run still shows its pace
        steps.append((time.perf_counter(), it, total))
        shown = "-" if loss is None else f"{loss:.4f}"  # UMAP: only at the end
        print(
            f"  {steps[-1][0] - t0:8.1f} s  iteration {it}/{total}  loss {shown}  load {_load()}",
            flush=True,
        )

    if name == "umap":
        from dimred_dask.methods.umap import umap_sweep as sweep
    else:
        from dimred_dask.methods.tsne import tsne_sweep as sweep
    with PeakRSS(pids, interval=0.5) as mem:
        t0 = time.perf_counter()
        (model,) = sweep(X, random_state=0, callback=cb, **params)
        seconds = time.perf_counter() - t0
    idx = np.sort(np.random.default_rng(0).choice(n, size=SAMPLE, replace=False))
    trust = trustworthiness(take_rows(X, idx, "sample"), model.embedding[idx], 15)
    first = steps[0][0] - t0 if steps else None
    return {
        "seconds": seconds,
        "model": model,
        "trust": trust,
        "first_progress": first,
        "per_worker": [mem.per_process_peak[p] / 2**20 for p in pids],
        "this_process": mem.per_process_peak[os.getpid()] / 2**20,
        "loss": getattr(model, "kl_divergence", None) or model.cross_entropy,
        "info": {k: v for k, v in model.info.items() if k != "convergence"},
    }


def _print_big(name: str, n: int, label: str, r: dict) -> None:
    info = r["info"]
    moved = info.get("bytes_per_iteration")
    print(
        f"\n| {name} {n:,} x {D}, {label} | {r['seconds'] / 60:.2f} min end to end "
        f"(optimisation {info.get('seconds', 0):.0f} s; first progress at "
        f"{r['first_progress'] or 0:.0f} s) | peak RSS per worker "
        f"{', '.join(f'{p:,.0f}' for p in r['per_worker'])} MiB; this process "
        f"{r['this_process']:,.0f} MiB | trustworthiness {r['trust']:.4f} (5000 rows) | "
        f"loss {r['loss']:.4f} | "
        f"{'' if moved is None else f'{moved / 2**20:.1f} MiB moved per iteration | '}"
        f"load average after {_load()} |",
        flush=True,
    )
    print("  info: " + json.dumps(info, default=str), flush=True)


def main_big(args) -> int:
    """n x 50 (default 1 000 000) end to end on a LocalCluster of worker processes;
    ``--compare-optimizers``: the one-worker and the distributed optimiser in turns."""
    from distributed import Client, LocalCluster, wait

    name, n = args.name, args.rows or 1_000_000
    workers = args.workers or 2
    print(
        f"# bench {name} --big: {n} x {D} float32 on {workers} worker processes; {machine()};"
        f" load average {_load()}",
        flush=True,
    )
    base = {"fit_sample": args.fit_sample} if args.fit_sample else {}
    if args.compare_optimizers:
        runs = [
            (o, {**base, "optimizer": o})
            for _ in range(args.big_repeat)
            for o in ("single", "distributed")
        ]
    else:
        runs = [(args.optimizer, {**base, "optimizer": args.optimizer})]
    with (
        LocalCluster(
            n_workers=workers,
            threads_per_worker=1,
            processes=True,
            host="127.0.0.1",
            dashboard_address="127.0.0.1:0",
        ) as cluster,
        Client(cluster) as client,
    ):
        client.wait_for_workers(workers)
        client.run(_warm, name)  # compile ours and pynndescent on every worker
        X = make_data(n).persist()
        wait(X)
        pids = list(client.run(os.getpid).values())
        results = []
        for label, params in runs:
            print(f"## optimizer={label}", flush=True)
            results.append((label, _big_run(client, X, name, n, params, pids)))
            _print_big(name, n, label, results[-1][1])
    limit = TARGETS[name]["big_minutes"]
    for label, r in results:
        fs = r["info"].get("fit_sample")
        if fs:
            print(
                f"{label}: fit on {fs['rows']:,} of {fs['of']:,} rows (seed {fs['seed']}); the"
                f" other {fs['placed_rows']:,} placed by transform in "
                f"{fs['place_seconds']:.1f} s"
            )
        print(
            f"{label}: {r['seconds'] / 60:.2f} min; target <= {limit} min: "
            f"{'met' if r['seconds'] <= 60 * limit else 'NOT met'}"
        )
    if args.compare_optimizers:
        one = [r for lbl, r in results if lbl == "single"]
        many = [r for lbl, r in results if lbl == "distributed"]
        for k, (a, b) in enumerate(zip(one, many)):
            print(
                f"round {k + 1}: distributed / single time {b['seconds'] / a['seconds']:.2f}; "
                f"trustworthiness {b['trust'] - a['trust']:+.4f}; loss "
                f"{(b['loss'] - a['loss']) / a['loss']:+.2%}; largest worker peak "
                f"{max(b['per_worker']) / max(a['per_worker']):.2f}x"
            )
    return 0
