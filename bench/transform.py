"""python -m bench transform: placing new rows on a finished map, ours through the transform
flow (as `dimred-dask transform` runs it) against umap-learn's and openTSNE's ``transform``.

The data: `bench.knn.make_data(2 * rows)` (50 columns, 20 clusters in a 10-D subspace),
the first half the training rows, the second the new rows, as Zarr arrays. Each map is
fitted once (ours through the flow; the peers in this process, with their defaults), then
``--repeat`` rounds in turns time the placement of the new rows: ours end to end through the
flow on the cluster (validate, place, drift, publish), each peer's ``transform``. Reported:
medians and per-round ratios, the placed rows' trustworthiness (k = 10, on 2000 of them)
for each, our workers' peak memory, the model's size against the input's.

``--big``: 1 000 000 + 1 000 000 rows, ours only (the peers' transform is timed at
``--rows``, default 200 000). ``--fit-sample N --new-rows M``: a map fitted on a sample of N of
``--rows`` rows, then M rows placed (ours only). ``--maps umap``: the UMAP map only.
"""

from __future__ import annotations

import os
import shutil
import statistics
import tempfile
import time
import warnings

import numpy as np

from ._measure import PeakRSS, machine

TRUST_SAMPLE = 2000


def _write(path, X) -> str:
    """Write the dask rows X from the workers (the bench's process never holds them)."""
    from dimred_dask.io import save_array

    save_array(X, path, compressors=None)
    return path


def _trust(X_new, Y_new) -> float:
    """Trustworthiness (k = 10) of TRUST_SAMPLE placed rows (seed 0) of X_new."""
    from sklearn.manifold import trustworthiness

    idx = np.sort(np.random.default_rng(0).choice(len(X_new), TRUST_SAMPLE, replace=False))
    Xs = np.asarray(X_new[idx]) if isinstance(X_new, np.ndarray) else X_new[idx].compute()
    return float(trustworthiness(Xs, np.asarray(Y_new[idx]), n_neighbors=10))


def _ours(client, model, new, out):
    from dimred_dask.io import open_output
    from flows.transform import transform

    shutil.rmtree(out, ignore_errors=True)
    pids = list(client.run(os.getpid).values())
    with PeakRSS(pids, interval=0.2) as mem:
        t0 = time.perf_counter()
        m = transform(model=model, input=new, output=out)
        seconds = time.perf_counter() - t0
    peaks = mem.per_process_peak
    workers = max(v for k, v in peaks.items() if k != os.getpid())
    return (
        seconds,
        open_output(out).open_array("embedding").to_dask(),
        m,
        (workers, peaks[os.getpid()]),
    )


def main(args) -> int:
    from bench.knn import make_data
    from dimred_dask.cluster import cluster_client
    from flows.embed import embed

    rows = args.rows or (1_000_000 if args.big else 200_000)
    new_rows = getattr(args, "new_rows", None) or rows
    fit_sample = getattr(args, "fit_sample", None)
    peers = not args.big and not fit_sample
    top = tempfile.mkdtemp(prefix="bench-transform-", dir=args.dir or None)
    print(machine())
    print(
        f"training rows {rows}, new rows {new_rows}, fit sample {fit_sample}; load "
        f"{os.getloadavg()}",
        flush=True,
    )
    try:
        with cluster_client(args.scheduler if hasattr(args, "scheduler") else None) as client:
            data = make_data(rows + new_rows, chunk_rows=50_000)
            train = _write(f"{top}/train.zarr", data[:rows])
            new = _write(f"{top}/new.zarr", data[rows:])
            train_bytes = rows * data.shape[1] * data.dtype.itemsize
            from dimred_dask.io import open_input

            Xn = open_input(new).array
            Xt = np.asarray(open_input(train).array.compute()) if peers else None
            methods = tuple(
                getattr(args, "maps", None) or (("umap",) if fit_sample else ("umap", "tsne"))
            )
            maps, fitted = {}, {}
            for method in methods:
                params = {"fit_sample": fit_sample} if fit_sample else {}
                t0 = time.perf_counter()
                m = embed(
                    train, f"{top}/map-{method}", method=method, params=params, graph_cache="none"
                )
                maps[method] = f"{top}/map-{method}"
                size = m["placement"]["model_bytes"]
                print(
                    f"fit ours {method}: {time.perf_counter() - t0:.1f} s; model "
                    f"{size / 2**20:.1f} MiB = {size / train_bytes:.4f} of the input",
                    flush=True,
                )
                if peers:
                    fitted[method] = _fit_peer(method, Xt)
            Xnp = np.asarray(Xn.compute()) if peers else None
            times = {k: [] for k in methods}
            peer_times = {k: [] for k in fitted}
            for r in range(args.repeat):
                for method in methods:
                    s, Y, m, workers = _ours(client, maps[method], new, f"{top}/placed-{method}")
                    times[method].append(s)
                    stages = ", ".join(f"{k} {v:.1f}s" for k, v in m["timings"].items())
                    print(
                        f"round {r} ours {method}: {s:.1f} s ({stages}); a worker at most "
                        f"{workers[0] / 2**20:,.0f} MiB, this process {workers[1] / 2**20:,.0f} "
                        f"MiB; drift {m['drift']['beyond_p99']:.4f}; "
                        f"trustworthiness {_trust(Xn, Y):.4f}",
                        flush=True,
                    )
                    if method in fitted:
                        t0 = time.perf_counter()
                        with warnings.catch_warnings():
                            warnings.simplefilter("ignore")
                            Yp = np.asarray(fitted[method].transform(Xnp))
                        peer_times[method].append(time.perf_counter() - t0)
                        print(
                            f"round {r} peer {method}: {peer_times[method][-1]:.1f} s; "
                            f"trustworthiness {_trust(Xnp, Yp):.4f}; ratio "
                            f"{times[method][-1] / peer_times[method][-1]:.3f}",
                            flush=True,
                        )
            for method in methods:
                line = f"{method}: ours median {statistics.median(times[method]):.1f} s"
                if method in peer_times:
                    ours, theirs = (
                        statistics.median(times[method]),
                        statistics.median(peer_times[method]),
                    )
                    line += f", peer {theirs:.1f} s, ratio of medians {ours / theirs:.3f}"
                print(line)
    finally:
        shutil.rmtree(top, ignore_errors=True)
    return 0


def _fit_peer(method: str, X):
    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if method == "umap":
            import umap

            model = umap.UMAP(n_jobs=2).fit(X)  # a seed would force one thread
        else:
            import openTSNE

            model = openTSNE.TSNE(random_state=0, n_jobs=2).fit(X)
    print(f"fit peer {method}: {time.perf_counter() - t0:.1f} s", flush=True)
    return model
