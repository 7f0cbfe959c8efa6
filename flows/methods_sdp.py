"""Adapters of the semidefinite embeddings: ``mvu``, ``landmark-mvu`` and ``are`` (action
respecting embedding; the actions come from ``--actions URI``). Each asks the shared kNN stage
for its graph (connected: a disconnected graph is refused before anything is written, or
joined with ``join_components=true``); the manifest's ``model`` section carries the solver's
status, the objective, the largest relative distance violation and ``convergence`` (every
solve's record: the SDP attempts with Clarabel's gap and residuals, the eigensolves)."""

from __future__ import annotations

import numpy as np

from dimred_dask.errors import InputError
from dimred_dask.graphs import check_reg
from dimred_dask.methods.are import action_respecting_embedding
from dimred_dask.methods.landmark_mvu import check_landmark_params, landmark_mvu
from dimred_dask.methods.mvu import EXACT_MAX, SDPEmbeddingModel, check_sdp_params, mvu
from dimred_dask.methods.specs import SPECS

from .adapter import MethodAdapter, check_known, model_loader

__all__ = ["METHODS"]

MVU_DEFAULTS = SPECS["mvu"].flow_defaults()
ARE_DEFAULTS = SPECS["are"].flow_defaults()
LMVU_DEFAULTS = SPECS["landmark-mvu"].flow_defaults()


def _bool(p: dict, name: str) -> None:
    if not isinstance(p[name], bool):
        raise InputError(
            f"{name} must be true or false; found {p[name]!r}.", f"pass --param {name}=true."
        )


def _check(name: str, defaults: dict):
    def check(params: dict, shape: tuple) -> dict:
        p = check_known(name, params, defaults)
        n = shape[0]
        for b in ("allow_inaccurate", "join_components") + (
            ("face_reduction",) if "face_reduction" in p else ()
        ):
            _bool(p, b)
        label = {
            "mvu": "MVU",
            "are": "Action respecting embedding",
            "landmark-mvu": "Landmark MVU",
        }[name]
        got = check_sdp_params(
            n,
            n_components=p["n_components"],
            n_neighbors=p["n_neighbors"],
            constraints=p.get("constraints", "slack"),
            slack_penalty=p.get("slack_penalty", 10.0),
            formulation=p.get("formulation", "dual"),
            solver=p["solver"],
            tol=p["tol"],
            max_iter=p["max_iter"],
            method=label,
        )
        check_reg(p["reg"])
        if name == "landmark-mvu":
            check_landmark_params(
                n,
                n_components=p["n_components"],
                n_landmarks=p["n_landmarks"],
                basis=p["basis"],
                landmarks=p["landmarks"],
                penalty=p["penalty"],
            )
        elif n > EXACT_MAX:
            raise InputError(
                f"{label} solves an n x n SDP; n = {n} is above {EXACT_MAX}.",
                "use --method landmark-mvu for large n.",
            )
        return {**p, "n_neighbors": got["n_neighbors"]}

    return check


def _graph(p: dict, shape: tuple) -> dict:
    return {
        "n_neighbors": p["n_neighbors"],
        "metric": p["metric"],
        "backend": p["knn_backend"],
        "join_components": p["join_components"],
        "connected": True,
        "random_state": p["random_state"],
    }


def _fit_mvu(X, p: dict, graph=None, **_):
    return mvu(X, graph=graph, **p)


def _fit_landmark(X, p: dict, graph=None, **_):
    return landmark_mvu(X, graph=graph, keep_training_rows=False, **p)


def _fit_are(X, p: dict, graph=None, actions=None, **_):
    return action_respecting_embedding(X, actions, graph=graph, **p)


def _transform(model: SDPEmbeddingModel, X):
    import dask.array as da  # the training embedding is the result

    return da.from_array(
        np.asarray(model.embedding, dtype=X.dtype), chunks=(X.chunks[0], model.n_components)
    )


def _summary(model: SDPEmbeddingModel) -> dict:
    lam = np.asarray(model.eigenvalues, dtype=np.float64)
    info = {k: v for k, v in model.scalars().items() if k != "landmarks"}
    return {
        "n_components": int(lam.size),
        "eigenvalues": lam.tolist(),
        **info,
        "convergence": model.convergence,
    }


def _adapter(name: str, defaults: dict, fit, needs_actions: bool = False) -> MethodAdapter:
    return MethodAdapter(
        name=name,
        defaults=defaults,
        check=_check(name, defaults),
        fit=fit,
        load=model_loader(SDPEmbeddingModel),
        transform=_transform,
        summary=_summary,
        graph=_graph,
        needs_actions=needs_actions,
    )


METHODS = {
    "mvu": _adapter("mvu", MVU_DEFAULTS, _fit_mvu),
    "landmark-mvu": _adapter("landmark-mvu", LMVU_DEFAULTS, _fit_landmark),
    "are": _adapter("are", ARE_DEFAULTS, _fit_are, needs_actions=True),
}
