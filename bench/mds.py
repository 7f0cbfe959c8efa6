"""Landmark MDS: this project at n = 1 000 000 on memory-limited workers, and against exact
classical MDS (ours and scikit-learn's ``ClassicalMDS``) at a small n, in one run.

Data: the kernel PCA benchmark's (``bench.kpca.make_data``): float32 rows of R^50, Gaussian
scores around 6 cluster centres in a 10-D subspace (scales 10 ... 1) plus isotropic noise 0.5.
Euclidean distances, 2 components. Landmark MDS: ``LandmarkMDS(2, n_landmarks=m)``, m = 1000
max-min landmarks (de Silva & Tenenbaum's choice, on a uniform sample of 10 m rows), with the
final alignment (PCA of the triangulated points).

1. Small n (5000, in process, NumPy in and out): timed ``fit`` + ``embedding_``
   - ours ``LandmarkMDS`` (m = 1000), ``--repeat`` runs;
   - ours ``MDS(solver="dense")`` (exact classical MDS) and scikit-learn 1.9's
     ``ClassicalMDS`` (full ``eigh`` of the n x n B), ``--peer-repeat`` runs (default 1).
   Exact reference: a float64 NumPy oracle. For Euclidean distances classical MDS is PCA:
   the embedding is U_2 S_2 of the SVD of the centred rows, and the eigenvalues of B are S^2.
   Quality: Procrustes disparity (``scipy.spatial.procrustes``) of each embedding against
   the oracle's, and the relative error of the top-2 eigenvalues of B estimated from the
   embedding (squared norms of its centred columns: exact for exact MDS).

2. n = 1 000 000 (``--rows``): the data made lazily on the workers in chunks of 50 000
   rows (regenerated on every pass); a LocalCluster of 2 worker processes limited to 4 GiB
   each. Timed: ``fit`` (landmark sample, m x m classical MDS, one alignment pass, stress on
   2000 sampled rows) + writing ``embedding_`` (n x 2 float32) to Zarr. No exact peer: the
   n x n distance matrix is 4 TB in float32 and scikit-learn's ``ClassicalMDS`` holds it in
   float64 and diagonalises it densely. Quality check outside the timer: exact classical MDS
   of Euclidean data is its PCA scores, so ours ``PCA(2)`` (one pass, exact covariance) gives
   the exact embedding of 20 000 sampled rows, compared by Procrustes with the rows of the
   written embedding.
"""

from __future__ import annotations

import json
import os
import shutil
import time

import numpy as np

from ._measure import PeakRSS, machine, timed
from .kpca import (
    WORKER_MEMORY,
    _chunk_rows,
    _gib,
    _table,
    disparity,
    limited_cluster,
    make_data,
    restart_report,
    worker_pids,
)

K = 2
TARGET_BIG_S = 300.0
TARGET_PROCRUSTES = 0.01  # the kernel PCA benchmark's; the issue states none for MDS
CHECK_ROWS = 20_000


def oracle(X: np.ndarray):
    """Exact classical MDS of Euclidean data in float64: (eigenvalues of B, embedding)."""
    Xc = X.astype(np.float64)
    Xc -= Xc.mean(axis=0)
    u, s, _ = np.linalg.svd(Xc, full_matrices=False)
    return s[:K] ** 2, u[:, :K] * s[:K]


def embedded_eigenvalues(emb) -> np.ndarray:
    e = np.asarray(emb, np.float64)
    e = e - e.mean(axis=0)
    return (e * e).sum(axis=0)


def main_small(args, n: int, m: int) -> int:
    from sklearn.manifold import ClassicalMDS

    from dimred_dask import MDS, LandmarkMDS

    X = make_data(n, chunk_rows=max(1, -(-n // 8))).compute(scheduler="threads")
    exact_vals, exact_emb = oracle(X)
    print(
        f"# bench mds (small): {n} x 50 float32, euclidean, k = {K}, landmark MDS m = {m}; "
        f"{machine()}",
        flush=True,
    )
    rows = []

    def add(name, fn, repeat):
        med, times, peak, emb = timed(fn, repeat)
        ev = embedded_eigenvalues(emb)
        rows.append(
            {
                "name": name,
                "median": med,
                "times": times,
                "peak": peak,
                "eig": float(np.max(np.abs(ev - exact_vals) / exact_vals)),
                "proc": disparity(exact_emb, emb),
            }
        )
        print(
            f"  {name:<52} {med:8.3f} s  disparity {rows[-1]['proc']:.2e}  (1-min load "
            f"average after: {os.getloadavg()[0]:.2f})",
            flush=True,
        )

    ours_name = f"dimred-dask LandmarkMDS m={m} (in process)"
    add(
        ours_name,
        lambda: LandmarkMDS(K, n_landmarks=m, random_state=0).fit(X).embedding_,
        args.repeat,
    )
    add(
        "dimred-dask MDS dense, exact (in process)",
        lambda: MDS(K, solver="dense").fit(X).embedding_,
        args.peer_repeat,
    )
    add(
        "scikit-learn ClassicalMDS (in process)",
        lambda: ClassicalMDS(K).fit_transform(X),
        args.peer_repeat,
    )
    print()
    print(_table(rows, ours_name))
    ours = next(r for r in rows if r["name"] == ours_name)
    peer = next(r for r in rows if r["name"].startswith("scikit-learn"))
    print(
        f"\nexact top-{K} eigenvalues of B (float64 SVD oracle): {np.round(exact_vals, 1).tolist()}"
    )
    print(
        f"ours / scikit-learn ClassicalMDS: {ours['median'] / peer['median']:.3f}; landmark "
        f"MDS Procrustes disparity {ours['proc']:.2e} (the kernel PCA target <= "
        f"{TARGET_PROCRUSTES}: {'met' if ours['proc'] <= TARGET_PROCRUSTES else 'NOT met'})",
        flush=True,
    )
    return 0


def main_big(args, n: int, m: int) -> int:
    from distributed import Client

    from dimred_dask import PCA, LandmarkMDS
    from dimred_dask.io import save_array
    from dimred_dask.linalg import take_rows

    chunk = _chunk_rows(n, 50_000)
    folder = os.path.abspath(args.dir or os.path.join(os.path.dirname(__file__), "_data"))
    os.makedirs(folder, exist_ok=True)
    out = os.path.join(folder, "mds-big-embedding.zarr")
    print(
        f"\n# bench mds (big): {n} x 50 float32 made lazily on the workers in chunks of "
        f"{chunk} rows, landmark MDS m = {m}, k = {K}; {machine()}; workers "
        f"{args.workers or 2} x {args.threads} threads, memory_limit {WORKER_MEMORY}",
        flush=True,
    )
    with limited_cluster(args) as cluster, Client(cluster) as client:
        client.wait_for_workers(args.workers or 2)
        X = make_data(n, chunk)
        before = worker_pids(client)
        est = LandmarkMDS(K, n_landmarks=m, random_state=0)
        with PeakRSS(list(before.values()), interval=0.25) as rss:
            t0 = time.perf_counter()
            est.fit(X)
            t_fit = time.perf_counter() - t0
            save_array(est.embedding_, out, overwrite=True)
            total = time.perf_counter() - t0
        print(f"  fit {t_fit:.1f} s, fit + write {total:.1f} s", flush=True)
        restarts = restart_report(client, before)
        # quality outside the timer: exact classical MDS = PCA scores (Euclidean distances)
        t0 = time.perf_counter()
        pca = PCA(K, solver="covariance").fit(X)
        idx = np.sort(np.random.default_rng(3).choice(n, size=min(CHECK_ROWS, n), replace=False))
        xs = take_rows(X, idx, "check rows").astype(np.float64)
        t_check = time.perf_counter() - t0
    import zarr

    emb = zarr.open_array(out, mode="r")
    ours = np.asarray(emb.oindex[idx, :])
    exact = (xs - pca.mean_) @ np.asarray(pca.components_, np.float64).T
    proc = disparity(exact, ours)
    peaks = [rss.per_process_peak[p] for p in before.values()]
    ok = total <= TARGET_BIG_S and not restarts["restarted"]
    result = {
        "rows": n,
        "landmarks": m,
        "fit_s": round(t_fit, 1),
        "write_embedding_s": round(total - t_fit, 1),
        "total_s": round(total, 1),
        "passes": est._model.info.get("passes"),
        "landmark_eigenvalues": est.eigenvalues_.tolist(),
        "stress": est.stress_,
        "stress_rows": est._model.info.get("stress_rows"),
        "embedding": {"shape": list(emb.shape), "dtype": str(emb.dtype)},
        "procrustes_vs_exact_on_sampled_rows": proc,
        "check_rows": int(idx.size),
        "check_s": round(t_check, 1),
        "worker_peak_rss_gib": [_gib(p) for p in peaks],
        "client_peak_rss_gib": _gib(rss.per_process_peak[os.getpid()]),
        **restarts,
        "target_s": TARGET_BIG_S,
        "target_met": ok,
    }
    print(json.dumps(result, indent=1))
    print(
        f"\ntime {total:.1f} s (target <= {TARGET_BIG_S:.0f} s: "
        f"{'met' if total <= TARGET_BIG_S else 'NOT met'}); worker peak RSS "
        f"{', '.join(str(_gib(p)) for p in peaks)} GiB of {WORKER_MEMORY}; worker restarted: "
        f"{restarts['restarted']}; Procrustes vs exact on {idx.size} rows {proc:.2e}"
    )
    print(f"no peer: the n x n float32 distance matrix is {n * n * 4 / 1e12:.1f} TB")
    if not args.keep:
        shutil.rmtree(out, ignore_errors=True)
    return 0


def main(args) -> int:
    n = args.rows or 1_000_000
    m = args.landmarks or 1000
    small = min(5000, n)
    main_small(args, small, min(m, small))
    return main_big(args, n, min(m, n))
