"""Flow adapters of the graph methods: isomap, landmark-isomap, lle, laplacian, spectral.

Each asks the knn stage for its graph (``MethodAdapter.graph``) and gets ``graph=<KNNGraph>``
in ``fit``; two methods with the same graph parameters on the same data share one graph (the
second run reads it from the graph cache, and its manifest says so)."""

from __future__ import annotations

import numpy as np

from dimred_dask.errors import InputError
from dimred_dask.graphs import KNN_BACKENDS, check_n_neighbors
from dimred_dask.methods import (
    IsomapModel,
    LaplacianEigenmapsModel,
    LLEModel,
    SpectralClusteringModel,
    laplacian_eigenmaps,
    lle,
    spectral_clustering,
)
from dimred_dask.methods.isomap import isomap_on_workers, landmark_isomap_on_workers
from dimred_dask.methods.specs import SPECS

from .adapter import MethodAdapter, check_known, model_loader, training_embedding

__all__ = ["METHODS", "ISOMAP_FLOW_MAX"]

ISOMAP_FLOW_MAX = 20_000  # full Isomap: n x n geodesics on the workers (3.2 GB at 20 000)
DEFAULTS = {
    name: SPECS[name].flow_defaults()
    for name in ("isomap", "landmark-isomap", "lle", "laplacian", "spectral")
}
# landmark Isomap in the flow: its m x n geodesics stay on the workers, and the model's
# reference and training rows are written to the run store from there
FUNCTIONS = {
    "isomap": isomap_on_workers,
    "landmark-isomap": landmark_isomap_on_workers,
    "lle": lle,
    "laplacian": laplacian_eigenmaps,
    "spectral": spectral_clustering,
}


def _check(name: str):
    def check(params: dict, shape: tuple) -> dict:
        p = check_known(name, params, DEFAULTS[name])
        n = shape[0]
        check_n_neighbors(p["n_neighbors"], n, name)
        if p["knn_backend"] not in KNN_BACKENDS:
            raise InputError(
                f"knn_backend must be one of {', '.join(KNN_BACKENDS)}; found "
                f"{p['knn_backend']!r}.",
                "pass --param knn_backend=auto.",
            )
        key = "n_clusters" if name == "spectral" else "n_components"
        limit = n - 1 if name == "isomap" else n - 2
        low = 1
        v = p[key]
        if not isinstance(v, int) or isinstance(v, bool) or not low <= v <= limit:
            raise InputError(
                f"{name} needs {low} <= {key} <= {limit} (n_samples = {n}); found {v!r}.",
                f"pass --param {key}= a value between {low} and {limit}.",
            )
        if name == "isomap" and n > ISOMAP_FLOW_MAX:
            raise InputError(
                f"isomap holds the n x n geodesic matrix; n_samples = {n} is above "
                f"{ISOMAP_FLOW_MAX}.",
                "use --method landmark-isomap (Dijkstra from a few hundred landmarks only).",
            )
        return p

    return check


def _graph(params: dict, shape: tuple) -> dict:
    return {
        "n_neighbors": params["n_neighbors"],
        "metric": params["metric"],
        "backend": params["knn_backend"],
        "join_components": params["join_components"],
        "random_state": params["random_state"],
        # spectral clustering cuts a disconnected graph along its components
        "connected": "n_clusters" not in params,
    }


def _fit(name: str):
    def fit(X, p: dict, graph=None, **_):
        return FUNCTIONS[name](X, graph=graph, **p)

    return fit


def _transform(model, X):
    return training_embedding(model.embedding, X)  # part of the model


def _summary(model) -> dict:
    out = {
        k: v
        for k, v in model.scalars().items()
        if isinstance(v, (int, float, str, bool, dict)) or v is None
    }
    vals = getattr(model, "eigenvalues", None)
    if vals is not None:
        out["eigenvalues"] = np.asarray(vals, dtype=float).tolist()
    if isinstance(model, IsomapModel):
        mds = model.mds
        out.update(
            {
                "negative_mass": mds.negative_mass,
                "negative_ratio": mds.negative_ratio,
                "stress": float(mds.stress),
                "explained_variance_ratio": np.asarray(
                    mds.explained_variance_ratio, dtype=float
                ).tolist(),
            }
        )
    if isinstance(model, SpectralClusteringModel):
        out["cluster_sizes"] = np.bincount(np.asarray(model.labels)).tolist()
    out["convergence"] = model.convergence
    return out


MODELS = {
    "isomap": IsomapModel,
    "landmark-isomap": IsomapModel,
    "lle": LLEModel,
    "laplacian": LaplacianEigenmapsModel,
    "spectral": SpectralClusteringModel,
}

METHODS = {
    name: MethodAdapter(
        name=name,
        defaults=DEFAULTS[name],
        check=_check(name),
        fit=_fit(name),
        load=model_loader(MODELS[name]),
        transform=_transform,
        summary=_summary,
        graph=_graph,
    )
    for name in DEFAULTS
}
