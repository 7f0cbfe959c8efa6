"""Spectral clustering with a Gaussian affinity: ``python -m bench clustering``.

Data: ``sklearn.datasets.make_blobs(n, 10, centers=6, cluster_std=1.5, random_state=0)``
(float64). Affinity exp(-gamma ||x - x'||^2), gamma by the median heuristic
(``bench.kpca.median_gamma``: 1 / median of ||x_i - x_j||^2 over the pairs of a seeded
sample of 1000 rows), normalised cut, 6 clusters.

- At n = ``--rows`` (default 10 000), in this process, taking turns for ``--repeat`` rounds:
  scikit-learn's ``SpectralClustering(affinity="rbf")`` (the dense n x n affinity, ARPACK,
  k-means on the embedding) against ours, ``SpectralClustering(affinity="gaussian")`` (the
  Nyström affinity with ``--landmarks`` k-means++ landmarks, default 1000, never n x n).
- Ours alone at 20 x ``--rows`` (scikit-learn's dense affinity would need 20^2 = 400 x the
  memory), ``--repeat`` runs, with the peak RSS rise of this process.

Quality: adjusted Rand index against the true blob labels, and between the two labelings.
"""

from __future__ import annotations

import os

from ._measure import machine, timed, timed_in_turns
from .kpca import median_gamma

D, CENTERS = 10, 6


def make_data(n: int):
    from sklearn.datasets import make_blobs

    return make_blobs(n, D, centers=CENTERS, cluster_std=1.5, random_state=0)


def main(args) -> int:
    from sklearn.cluster import SpectralClustering as SkSpectralClustering
    from sklearn.metrics import adjusted_rand_score

    from dimred_dask import SpectralClustering

    n = args.rows or 10_000
    m = args.landmarks or 1000
    X, truth = make_data(n)
    gamma = median_gamma(X)
    print(
        f"# bench clustering: blobs {n} x {D}, {CENTERS} centres, gamma = {gamma:.4g} "
        f"(median heuristic), normalised cut; ours Nyström m = {m}; {machine()}; "
        f"load {os.getloadavg()[0]:.2f}",
        flush=True,
    )

    def peer():
        return (
            SkSpectralClustering(CENTERS, affinity="rbf", gamma=gamma, random_state=0)
            .fit(X)
            .labels_
        )

    def ours(data=X):
        return (
            SpectralClustering(
                CENTERS, affinity="gaussian", gamma=gamma, n_landmarks=m, random_state=0
            )
            .fit(data)
            .labels_
        )

    def round_done(r, t):
        print(
            f"  round {r + 1}: scikit-learn {t['peer']:.2f} s, ours {t['ours']:.2f} s "
            f"({t['ours'] / t['peer']:.3f}x)",
            flush=True,
        )

    res = timed_in_turns(
        [("peer", peer, args.repeat), ("ours", ours, args.repeat)], on_round=round_done
    )
    (p_med, p_times, p_peak, p_lab), (o_med, o_times, o_peak, o_lab) = res["peer"], res["ours"]
    print("\n| implementation | median (s) | runs (s) | peak RSS rise (MiB) | ARI vs truth |")
    print("|---|---|---|---|---|")
    for name, med, times, peak, lab in (
        ("scikit-learn SpectralClustering rbf (dense n x n)", p_med, p_times, p_peak, p_lab),
        (
            f"dimred-dask SpectralClustering gaussian (Nyström m = {m})",
            o_med,
            o_times,
            o_peak,
            o_lab,
        ),
    ):
        print(
            f"| {name} | {med:.2f} | {', '.join(f'{t:.2f}' for t in times)} | "
            f"{peak / 2**20:.0f} | {adjusted_rand_score(truth, lab):.4f} |"
        )
    per_round = [a / b for a, b in zip(o_times, p_times)]
    print(
        f"\nours / scikit-learn: {o_med / p_med:.3f}x on the medians (per round "
        f"{', '.join(f'{q:.3f}' for q in per_round)}); ARI between the two labelings "
        f"{adjusted_rand_score(p_lab, o_lab):.4f}"
    )
    big = 20 * n
    Xb, truth_b = make_data(big)
    print(f"\nours alone at n = {big:,} (same generator, same gamma and m):", flush=True)
    med, times, peak, lab = timed(lambda: ours(Xb), args.repeat)
    print(
        f"  median {med:.2f} s (runs {', '.join(f'{t:.2f}' for t in times)}), peak RSS rise "
        f"{peak / 2**20:.0f} MiB (the data: {Xb.nbytes / 2**20:.0f} MiB, C = k(X, L): "
        f"{big * m * 8 / 2**20:.0f} MiB), ARI vs truth "
        f"{adjusted_rand_score(truth_b, lab):.4f}"
    )
    return 0
