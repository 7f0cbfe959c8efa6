"""The graph methods: ``python -m bench isomap | lle | spectral``.

isomap: swiss roll n = 20 000 (``sklearn.datasets.make_swiss_roll``, noise 0, float32):
  scikit-learn's ``Isomap(n_neighbors=10)`` in this process against our ``LandmarkIsomap``
  (300 landmarks, exact kNN) with the data as a dask array on a LocalCluster of 2 worker
  processes x 1 thread, in the same run; then landmark Isomap at n = 1 000 000 (NN-descent
  graph on one worker, Dijkstra from the landmarks on both workers). Quality: Spearman's rho
  between the true unrolled coordinate t and the best embedding coordinate.
lle / spectral: LLE and Laplacian eigenmaps at n = 1 000 000 on the swiss roll in 3-D and on
  a 50-D Gaussian mixture (10 overlapping components, so the 10-NN graph is connected), same
  cluster. Quality: Spearman (swiss roll), trustworthiness at k = 10 on 2000 sampled rows
  (mixture). Peak memory: of each worker process and of the client process (where the
  sparse eigensolver runs), sampled every 50 ms.

The kNN graph is built once per data set in a run (its time is reported as its own row and
is part of each method's total). NN-descent's numba code is compiled on the workers before
any timer starts (``warm-up``), as in ``bench knn``.
"""

from __future__ import annotations

import functools
import json
import os
import time

import numpy as np

from ._measure import PeakRSS, machine

K = 10
N_LANDMARKS = 300
TARGET_ISOMAP_RATIO = 0.1
TARGET_SPEARMAN = 0.99
TARGET_SECONDS_1M = 600.0


def swiss_roll(n: int, seed: int = 0):
    from sklearn.datasets import make_swiss_roll

    X, t = make_swiss_roll(n, noise=0.0, random_state=seed)
    return X.astype(np.float32), t


def mixture(n: int, d: int = 50, components: int = 10, seed: int = 0):
    """10 unit Gaussians in R^50 with centres drawn from N(0, 0.3^2 I): neighbouring
    components overlap, so the kNN graph is one component."""
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((components, d)) * 0.3
    lab = rng.integers(0, components, n)
    X = centres[lab] + rng.standard_normal((n, d))
    return X.astype(np.float32), lab


def _spearman(Y, t) -> float:
    from scipy.stats import spearmanr

    Y = np.asarray(Y)
    return float(max(abs(spearmanr(Y[:, c], t)[0]) for c in range(Y.shape[1])))


def _trust(X, Y, rows=2000, seed=0) -> float:
    from dimred_dask import metrics

    idx = np.sort(np.random.default_rng(seed).choice(X.shape[0], size=rows, replace=False))
    return float(metrics.trustworthiness(np.asarray(X)[idx], np.asarray(Y)[idx], 10))


def _warm_nndescent():
    from pynndescent import NNDescent

    x = np.random.default_rng(0).standard_normal((20_000, 5)).astype(np.float32)
    NNDescent(x, n_neighbors=K + 1, random_state=0, compressed=True)


def _cluster(workers: int = 2, memory_limit=None):
    from distributed import Client, LocalCluster

    cluster = LocalCluster(
        n_workers=workers,
        threads_per_worker=1,
        processes=True,
        host="127.0.0.1",
        dashboard_address="127.0.0.1:0",
        **({} if memory_limit is None else {"memory_limit": memory_limit}),
    )
    client = Client(cluster)
    client.wait_for_workers(workers)
    return cluster, client


def _measured(label: str, fn, pids, **extra):
    with PeakRSS(pids, interval=0.05) as mem:
        t0 = time.perf_counter()
        out = fn()
        seconds = time.perf_counter() - t0
    peaks = [mem.per_process_peak[p] for p in pids]
    row = {
        "name": label,
        "seconds": seconds,
        "client_peak": mem.per_process_peak[os.getpid()],
        "worker_peaks": peaks,
        **extra,
    }
    print(
        f"  {label}: {seconds:.1f} s, client peak RSS {row['client_peak'] / 2**20:,.0f} MiB, "
        f"worker peaks {', '.join(f'{p / 2**20:,.0f}' for p in peaks)} MiB",
        flush=True,
    )
    return row, out


def _graph(Xd, n, pids, backend):
    from dimred_dask.graphs import knn_graph

    return _measured(
        f"kNN graph ({backend}, k = {K}, n = {n:,})",
        lambda: knn_graph(Xd, K, backend=backend, random_state=0),
        pids,
    )


def _table(rows, quality_name: str) -> None:
    print(
        f"\n| run | time (s) | client peak RSS (MiB) | worker peak RSS (MiB) | "
        f"{quality_name} | notes |\n|---|---|---|---|---|---|"
    )
    for r in rows:
        q = r.get("quality")
        print(
            f"| {r['name']} | {r['seconds']:.1f} | {r['client_peak'] / 2**20:,.0f} | "
            f"{', '.join(f'{p / 2**20:,.0f}' for p in r['worker_peaks'])} | "
            f"{'' if q is None else f'{q:.4f}'} | {r.get('notes', '')} |"
        )


# --------------------------------------------------------------------------- isomap


def main_isomap(args) -> int:
    import dask.array as da
    from distributed import wait

    from dimred_dask import LandmarkIsomap

    n_small = args.rows or 20_000
    print(
        f"# bench isomap: swiss roll n = {n_small:,} vs scikit-learn, then n = 1 000 000; "
        f"{machine()}; load {os.getloadavg()}",
        flush=True,
    )
    X, t = swiss_roll(n_small)
    rows = []
    from sklearn.manifold import Isomap as SkIsomap

    row, Y = _measured(
        "scikit-learn Isomap (in process)",
        lambda: SkIsomap(n_neighbors=K, n_components=2).fit_transform(X),
        [],
    )
    row["quality"] = _spearman(Y, t)
    rows.append(row)
    cluster, client = _cluster()
    try:
        client.run(_warm_nndescent)
        pids = list(client.run(os.getpid).values())
        Xd = da.from_array(X, chunks=(5_000, 3)).persist()
        wait(Xd)
        fit = lambda: LandmarkIsomap(2, n_neighbors=K, n_landmarks=N_LANDMARKS).fit(Xd)  # noqa
        row, est = _measured(
            f"dimred-dask LandmarkIsomap, {N_LANDMARKS} landmarks (2 workers)", fit, pids
        )
        row["quality"] = _spearman(est.embedding_, t)
        rows.append(row)
        big = 1_000_000 if not args.skip_big else 0
        if big:
            Xb, tb = swiss_roll(big, seed=1)
            Xbd = da.from_array(Xb, chunks=(100_000, 3)).persist()
            wait(Xbd)

            def fit():
                return LandmarkIsomap(
                    2, n_neighbors=K, n_landmarks=N_LANDMARKS, knn_backend="nndescent"
                ).fit(Xbd)

            row, est = _measured(
                f"dimred-dask LandmarkIsomap n = {big:,}, {N_LANDMARKS} landmarks (2 workers)",
                fit,
                pids,
            )
            row["quality"] = _spearman(est.embedding_, tb)
            rows.append(row)
    finally:
        client.close()
        cluster.close()
    _table(rows, "Spearman(t, best coordinate)")
    ratio = rows[1]["seconds"] / rows[0]["seconds"]
    print(
        f"\nn = {n_small:,}: ours / scikit-learn = {ratio:.3f} (target <= "
        f"{TARGET_ISOMAP_RATIO}: {'met' if ratio <= TARGET_ISOMAP_RATIO else 'NOT met'}); "
        f"Spearman {rows[1]['quality']:.4f} (target >= {TARGET_SPEARMAN}: "
        f"{'met' if rows[1]['quality'] >= TARGET_SPEARMAN else 'NOT met'})"
    )
    if len(rows) > 2:
        r = rows[2]
        print(
            f"n = 1 000 000: {r['seconds']:.0f} s (target <= {TARGET_SECONDS_1M:.0f}: "
            f"{'met' if r['seconds'] <= TARGET_SECONDS_1M else 'NOT met'}), Spearman "
            f"{r['quality']:.4f}"
        )
    print(f"load after: {os.getloadavg()}")
    print(json.dumps({"rows": rows}, default=float))
    return 0


def main_isomap_workers(args) -> int:
    """Landmark Isomap at ``--rows`` (default 1 000 000), or with ``--exact`` exact Isomap
    (default 20 000 rows), on one kNN graph, its geodesics in this process (the estimator's
    path) and left on the workers (the flow's path), in turns: time, this process's peak RSS
    (the flow's process in a run), the workers' peaks, and the largest difference between the
    two embeddings."""
    import dask.array as da
    from distributed import wait

    from dimred_dask.graphs import knn_graph
    from dimred_dask.methods.isomap import (
        isomap,
        isomap_on_workers,
        landmark_isomap,
        landmark_isomap_on_workers,
    )

    exact = bool(getattr(args, "exact", False))
    n = args.rows or (20_000 if exact else 1_000_000)
    what = "exact Isomap" if exact else f"{N_LANDMARKS} landmarks"
    print(
        f"# bench isomap --compare-workers: swiss roll n = {n:,}, {what}, "
        f"k = {K}; {machine()}; load {os.getloadavg()}",
        flush=True,
    )
    X, t = swiss_roll(n, seed=1)
    cluster, client = _cluster()
    rows = []
    try:
        pids = list(client.run(os.getpid).values())
        Xd = da.from_array(X, chunks=(n // 4 if exact else 100_000, 3)).persist()
        wait(Xd)
        g = knn_graph(Xd, K, backend="exact" if n <= 50_000 else "nndescent", random_state=0)
        kw = {"n_neighbors": K, "graph": g, "random_state": 0}
        if exact:
            ways = (
                ("geodesics in this process", isomap),
                ("geodesics on the workers", isomap_on_workers),
            )
        else:
            kw["n_landmarks"] = N_LANDMARKS
            ways = (
                ("geodesics in this process", landmark_isomap),
                ("geodesics on the workers", landmark_isomap_on_workers),
            )
        embeddings = {}
        for r in range(max(1, args.repeat)):
            for label, fit in ways:
                row, model = _measured(f"{label} (round {r + 1})", lambda: fit(Xd, **kw), pids)
                row["quality"] = _spearman(model.embedding, t)
                embeddings[label] = np.asarray(model.embedding, np.float64)
                rows.append(row)
                del model
            print(
                f"  round {r + 1}: workers / this process = "
                f"{rows[-1]['seconds'] / rows[-2]['seconds']:.2f} (time), "
                f"{rows[-1]['client_peak'] / rows[-2]['client_peak']:.2f} (client peak)",
                flush=True,
            )
        a, b = embeddings.values()
        print(
            f"largest difference between the embeddings: {np.abs(a - b).max():.3g} "
            f"(scale {np.abs(a).max():.3g})"
        )
    finally:
        client.close()
        cluster.close()
    _table(rows, "Spearman(t, best coordinate)")
    print(f"load after: {os.getloadavg()}")
    return 0


TARGET_EXACT_RATIO = 0.5
TARGET_EXACT_PROCRUSTES = 1e-6


def main_isomap_exact(args) -> int:
    """Exact Isomap (all n x n geodesics, classical MDS) against scikit-learn's on the same
    swiss roll, in turns, ``--repeat`` rounds per n: scikit-learn's and the estimator's in
    this process (ours with a client of the 2-worker cluster attached: the geodesics and the
    MDS run here, where the matrix is used), then `isomap_on_workers` (the flow's: the
    geodesics made and kept on the workers, the MDS reading them there) on the rows
    persisted on the workers. The embeddings are compared by Procrustes disparity."""
    import dask.array as da
    from distributed import wait
    from scipy.spatial import procrustes
    from sklearn.manifold import Isomap as SkIsomap

    from dimred_dask import Isomap
    from dimred_dask.methods.isomap import isomap_on_workers

    sizes = [args.rows] if args.rows else [10_000, 20_000]
    print(
        f"# bench isomap --exact: swiss roll n = {', '.join(f'{n:,}' for n in sizes)}, "
        f"k = {K}, {args.repeat} rounds in turns; {machine()}; load {os.getloadavg()}",
        flush=True,
    )
    cluster, client = _cluster()
    summary = []
    try:
        pids = list(client.run(os.getpid).values())
        Isomap(2, n_neighbors=K).fit(swiss_roll(600)[0])  # numba kernels loaded on both sides
        for n in sizes:
            X, t = swiss_roll(n)
            ratios, worker_ratios, rows = [], [], []
            for r in range(args.repeat):
                sk, Ys = _measured(
                    f"n = {n:,}, round {r + 1}: scikit-learn Isomap (in process)",
                    lambda: SkIsomap(n_neighbors=K, n_components=2, n_jobs=-1).fit_transform(X),
                    pids,
                )
                ours, est = _measured(
                    f"n = {n:,}, round {r + 1}: dimred-dask Isomap (in process)",
                    lambda: Isomap(2, n_neighbors=K).fit(X),
                    pids,
                )
                Xd = client.persist(da.from_array(X, chunks=(n // 4, X.shape[1])))
                wait(Xd)
                there, model = _measured(
                    f"n = {n:,}, round {r + 1}: dimred-dask Isomap on the workers (the flow's)",
                    lambda: isomap_on_workers(Xd, n_components=2, n_neighbors=K),
                    pids,
                )
                ours["quality"] = procrustes(Ys, np.asarray(est.embedding_))[2]
                there["quality"] = procrustes(Ys, np.asarray(model.embedding))[2]
                sk["quality"] = _spearman(Ys, t)
                for row, Y in ((ours, est.embedding_), (there, model.embedding)):
                    row["notes"] = (
                        f"ratio {row['seconds'] / sk['seconds']:.3f}; "
                        f"Spearman {_spearman(np.asarray(Y), t):.5f}"
                    )
                ratios.append(ours["seconds"] / sk["seconds"])
                worker_ratios.append(there["seconds"] / sk["seconds"])
                rows += [sk, ours, there]
                del est, Ys, model
            _table(rows, "Procrustes vs scikit-learn (ours) / Spearman (scikit-learn)")
            worst = max(r["quality"] for i, r in enumerate(rows) if i % 3)
            for label, rs, col in (("in process", ratios, 1), ("on the workers", worker_ratios, 2)):
                med = float(np.median(rs))
                print(
                    f"n = {n:,}, ours {label}: per-round ratios "
                    f"{', '.join(f'{x:.3f}' for x in rs)}; median {med:.3f} (target <= "
                    f"{TARGET_EXACT_RATIO}: {'met' if med <= TARGET_EXACT_RATIO else 'NOT met'}); "
                    f"median times {np.median([r['seconds'] for r in rows[0::3]]):.1f} s "
                    f"(scikit-learn), {np.median([r['seconds'] for r in rows[col::3]]):.1f} s "
                    f"(ours)",
                    flush=True,
                )
            print(
                f"n = {n:,}: largest Procrustes {worst:.2e} (target <= "
                f"{TARGET_EXACT_PROCRUSTES:g}: "
                f"{'met' if worst <= TARGET_EXACT_PROCRUSTES else 'NOT met'})",
                flush=True,
            )
            summary.append(
                {
                    "n": n,
                    "ratios": ratios,
                    "worker_ratios": worker_ratios,
                    "procrustes": worst,
                    "rows": rows,
                }
            )
    finally:
        client.close()
        cluster.close()
    print(f"load after: {os.getloadavg()}")
    print(json.dumps(summary, default=float))
    return 0


# --------------------------------------------------------------------------- lle, spectral


def _method_runs(name: str, fit, datasets, client, pids, solvers: dict, rounds: int = 1):
    """For each data set: the graph once, then the method given that graph, once per solver
    of ``solvers[label]`` (a comma-separated list: in turns, ``rounds`` rounds, the ratio of
    each to the first printed per round)."""
    import dask.array as da
    from distributed import wait

    rows = []
    for label, (X, truth), backend in datasets:
        n = X.shape[0]
        Xd = da.from_array(X, chunks=(100_000, X.shape[1])).persist()
        wait(Xd)
        grow, g = _graph(Xd, n, pids, backend)
        grow["name"] = f"{label}: {grow['name']}"
        rows.append(grow)
        names = solvers[label].split(",")
        for r in range(rounds if len(names) > 1 else 1):
            first = None
            for solver in names:
                row, model = _measured(
                    f"{label}: {name} ({solver}), given the graph",
                    functools.partial(fit, Xd, g, solver),
                    pids,
                )
                Y = np.asarray(model.embedding)
                row["quality"] = _spearman(Y, truth) if label == "swiss roll" else _trust(X, Y)
                row["total_seconds"] = grow["seconds"] + row["seconds"]
                row["round"] = r + 1
                first = row["seconds"] if first is None else first
                ratio = row["seconds"] / first
                met = "met" if row["total_seconds"] <= TARGET_SECONDS_1M else "NOT met"
                row["notes"] = (
                    f"round {r + 1}; {ratio:.2f}x the {names[0]} run; graph + "
                    f"{name} = {row['total_seconds']:.0f} s (target <= "
                    f"{TARGET_SECONDS_1M:.0f}: {met})"
                    f"; eigenvalues {[float(f'{v:.3g}') for v in model.eigenvalues]}"
                    f"; solver {getattr(model, 'solver', solver)}{_factored(model)}"
                )
                rows.append(row)
                del model
        del Xd, g
    return rows


def _factored(model) -> str:
    info = getattr(model, "info", {})
    if "residuals" in info:
        levels = info.get("levels")
        return (
            f" ({info['iterations']} iterations in {info['seconds']:.0f} s, block "
            f"{info['block']}, residuals "
            f"{[float(f'{r:.2g}') for r in info['residuals'][: len(model.eigenvalues)]]}"
            f"{'' if levels is None else f', AMG levels {levels}'})"
        )
    if "factor_nnz" not in info:
        return ""
    return (
        f" ({info['iterations']} iterations, LU of I - W with "
        f"{info['factor_nnz'] / 1e6:.0f} M entries)"
    )


def main_graph_method(args, which: str) -> int:
    import warnings

    from dimred_dask import laplacian_eigenmaps, lle

    n = args.rows or 1_000_000
    sets = [("swiss roll", swiss_roll(n), "nndescent"), ("50-D mixture", mixture(n), "nndescent")]
    if args.only:
        sets = [s for s in sets if s[0].startswith(args.only)]
    print(
        f"# bench {which}: n = {n:,}, k = {K}, tol {args.tol:g}; {machine()}; load "
        f"{os.getloadavg()}",
        flush=True,
    )
    # LLE: "auto" = the factored solver (LU of I - W) on the 3-D roll above 200 000 rows,
    # LOBPCG on products with I - W (Jacobi) on the 50-D mixture
    roll_solver = "auto" if which == "lle" else "arpack"
    mix_solver = "auto" if which == "lle" else "lobpcg"
    solvers = {"swiss roll": args.solver or roll_solver, "50-D mixture": args.solver or mix_solver}
    solve, name = (lle, "LLE") if which == "lle" else (laplacian_eigenmaps, "Laplacian eigenmaps")

    def fit(Xd, g, s):
        return solve(Xd, n_components=2, n_neighbors=K, graph=g, eigen_solver=s, tol=args.tol)

    cluster, client = _cluster(getattr(args, "workers", None) or 2, args.worker_memory)
    try:
        client.run(_warm_nndescent)
        pids = list(client.run(os.getpid).values())
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            rows = _method_runs(name, fit, sets, client, pids, solvers, args.repeat)
        for w in caught:
            print(f"  warning: {w.category.__name__}: {w.message}")
    finally:
        client.close()
        cluster.close()
    _table(rows, "Spearman (roll) / trustworthiness (mixture)")
    print(f"load after: {os.getloadavg()}")
    print(json.dumps({"rows": rows}, default=float))
    return 0
