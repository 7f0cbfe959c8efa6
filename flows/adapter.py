"""The contract between the embedding flow and a method: `MethodAdapter`, the adapter derived
from a method's spec (`adapter_from_spec`), and the helpers the hand-written adapters share. A
family whose methods need more than their specs say registers its adapters in its own module
(``flows/methods_<family>.py``, a dict ``METHODS``) and ``flows/methods.py`` merges them."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Callable

import numpy as np

from dimred_dask.errors import InputError
from dimred_dask.graphs.request import GraphRequest
from dimred_dask.runs import STORED_ARRAYS

__all__ = [
    "MethodAdapter",
    "adapter_from_spec",
    "model_summary",
    "model_transform",
    "no_metrics",
    "parse_param_value",
    "check_known",
    "save_model",
    "model_loader",
    "training_embedding",
    "STORED_ARRAYS",
]


def parse_param_value(text: str):
    """CLI values: JSON where it parses (numbers, true/false, null, lists), else the string."""
    try:
        return json.loads(text)
    except (json.JSONDecodeError, TypeError):
        low = str(text).lower()
        return {"true": True, "false": False, "none": None}.get(low, text)


def check_known(name: str, params: dict, defaults: dict) -> dict:
    unknown = sorted(set(params) - set(defaults))
    if unknown:
        raise InputError(
            f"Unknown parameter(s) {unknown} for method {name!r}; it takes {sorted(defaults)}.",
            "fix the --param names.",
        )
    return {**defaults, **params}


def save_model(model, store) -> None:
    for name, value in model.arrays().items():
        store.write_array(f"model/{name}", value)
    store.write_attrs("model", model.scalars())


def model_loader(cls):
    return lambda store: cls.from_arrays(
        store.read_group("model", lazy=STORED_ARRAYS), store.read_attrs("model")
    )


def training_embedding(Y, X):
    """The fit's embedding of the training rows as the transform stage's result: a lazy read
    of the stored array in X's row chunks, or the array in memory in X's row chunks, persisted
    on a cluster (sent once: its write and the evaluation refer to its chunks)."""
    import dask.array as da

    from dimred_dask._compute import persisted

    if hasattr(Y, "to_dask"):
        return Y.to_dask().rechunk((X.chunks[0], Y.shape[1])).astype(X.dtype)
    return persisted(da.from_array(np.asarray(Y, dtype=X.dtype), chunks=(X.chunks[0], Y.shape[1])))


@dataclass(frozen=True, kw_only=True)
class MethodAdapter:
    """How the flow drives a method. Most methods' adapters come from their specs
    (`adapter_from_spec`); a method family that needs more (the kernel stage, checkpoints)
    writes its own in ``flows/methods_<family>.py``."""

    name: str
    defaults: dict
    check: Callable[[dict, tuple], dict]  # (params, shape) -> params, raising InputError
    fit: Callable  # (X, params, **context) -> model
    load: Callable  # (store) -> model
    summary: Callable = None  # (model) -> dict for the manifest; None: `model_summary`
    save: Callable = None  # (model, store) -> None; None: `save_model`
    transform: Callable = None  # (model, X) -> lazy embedding; None: the model's transform
    sample_metrics: Callable = None  # (model, X_sample (NumPy/sparse), Y_sample) -> dict
    # the n x n matrix the method's solver reads several times, written to the run's store by
    # the kernel stage: (params, shape) -> None or {"kind": "kernel"|"distance", ...}
    matrix: Callable | None = None
    needs_labels: bool = False  # supervised: the flow passes labels=<dask array>
    # the kNN graph the method needs (flows/knn.py): (params, shape) -> None or a request
    # {"n_neighbors": ..., "metric": ..., "backend": ..., "join_components": ..., "connected": ...};
    # the flow passes graph=<KNNGraph> to fit, or with graph_in_store a `flows.knn.StoreGraph`
    # (the run store's graph, read row block by row block where it is used)
    graph: Callable | None = None
    graph_in_store: bool = False
    # the flow passes run={"output": <run store URL>, "fingerprint": <fit fingerprint>} to fit,
    # for methods that checkpoint long optimisations into the run's store
    run_context: bool = False
    # sequence methods (action respecting embedding): the flow passes actions=<dask array>,
    # one action between each pair of consecutive rows (n - 1), from --actions URI
    needs_actions: bool = False

    def __post_init__(self):
        for field_name, default in (
            ("summary", model_summary),
            ("save", save_model),
            ("transform", model_transform),
            ("sample_metrics", no_metrics),
        ):
            if getattr(self, field_name) is None:
                object.__setattr__(self, field_name, default)


def model_summary(model) -> dict:
    """What the manifest records of a fit: the model's own ``summary()``, else its scalars
    and the records of its iterative solves."""
    if hasattr(model, "summary"):
        return model.summary()
    scalars = {
        k: v
        for k, v in model.scalars().items()
        if isinstance(v, (int, float, str, bool)) or v is None
    }
    return {**scalars, "convergence": list(getattr(model, "convergence", None) or [])}


def model_transform(model, X):
    """The embedding of X's rows (the rows the fit saw): the fit's own embedding where the
    model keeps one in memory, else the model's ``transform`` (lazy for dask X)."""
    if getattr(model, "embedding", None) is not None:
        return training_embedding(model.embedding, X)
    return model.transform(X)


def no_metrics(model, X_sample, Y_sample) -> dict:
    """A method without metrics of its own (the flow's quality metrics apply to all)."""
    return {}


def adapter_from_spec(spec) -> MethodAdapter:
    """The flow's adapter of a method whose spec names its ``model`` and its ``check``: the
    spec's flow defaults, the method's own parameter checks (before anything is written),
    the kNN graph it needs (``knn_graph``: the kNN stage builds it and the fit gets it as
    ``graph=``), its function (or ``flow_function``) as the fit, and its model saved and
    loaded through the run store.

    Parameters
    ----------
    spec : dimred_dask.methods.MethodSpec
        The method's spec.

    Returns
    -------
    MethodAdapter
    """
    if spec.model is None or spec.check is None:
        raise ValueError(
            f"method {spec.name!r} has no flow adapter: give its spec model= and check=, "
            "or write one in flows/methods_<family>.py"
        )
    defaults = spec.flow_defaults()
    function = spec.flow_function or spec.function

    def check(params: dict, shape: tuple) -> dict:
        p = check_known(spec.name, params, defaults)
        spec.check(p, shape)
        return p

    def fit(X, p: dict, labels=None, actions=None, graph=None, **_):
        if spec.knn_graph:
            p = {**p, "graph": graph}
        if spec.second_input == "labels":  # a column of labels as a vector
            y = labels[:, 0] if labels.ndim == 2 and labels.shape[1] == 1 else labels
            return function(X, y, **p)
        if spec.second_input == "actions":
            return function(X, actions, **p)
        return function(X, **p)

    return MethodAdapter(
        name=spec.name,
        defaults=defaults,
        check=check,
        fit=fit,
        load=model_loader(spec.model),
        needs_labels=spec.second_input == "labels",
        needs_actions=spec.second_input == "actions",
        graph=_graph_request(spec.knn_graph) if spec.knn_graph else None,
        graph_in_store=spec.graph_in_store,
    )


def _graph_request(need):
    """The adapter's ``graph``: the kNN stage's request from the method's parameters."""

    def graph(params: dict, shape: tuple) -> GraphRequest | None:
        kind = need(params) if callable(need) else need
        return GraphRequest.of_params(params, kind == "connected") if kind else None

    return graph
