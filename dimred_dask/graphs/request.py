"""The kNN graph a run asks for, as one checked value (`GraphRequest`): made once from a
method's parameters and the run's recall options, checked once against the input's shape,
fingerprinted, and built (`GraphRequest.build`) by the backend it names (`knn.BACKENDS`)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from ..errors import InputError
from .knn import TARGET_RECALL, check_backend, check_n_neighbors, check_target_recall, knn_graph

__all__ = ["GraphRequest"]


@dataclass(frozen=True)
class GraphRequest:
    """A kNN graph's options: what `knn_graph` takes, and the run's rules for the graph it
    gets (``join_components``: join a graph of several components; ``connected``: refuse one
    that stays in pieces; ``recall_sample``: rows its recall is measured on)."""

    n_neighbors: int = 15
    metric: str = "euclidean"
    metric_kwds: dict = field(default_factory=dict)
    backend: str = "auto"
    join_components: bool = False
    connected: bool = True
    nndescent_kwds: dict = field(default_factory=dict)
    n_partitions: int | None = None
    recall_sample: int = 1000
    random_state: int = 0
    target_recall: float | None = TARGET_RECALL
    recall_budget: float | None = None

    @classmethod
    def of_params(cls, params: dict, connected: bool, **recall) -> GraphRequest:
        """The request of a method's checked parameters (``n_neighbors``, ``metric``,
        ``knn_backend``, ``join_components``, ``random_state``) and the run's recall options
        (``target_recall``, ``recall_budget``); not yet checked against a shape."""
        return cls(
            n_neighbors=params["n_neighbors"],
            metric=params["metric"],
            backend=params["knn_backend"],
            join_components=params["join_components"],
            random_state=params["random_state"],
            connected=connected,
            **recall,
        )

    @classmethod
    def checked(cls, options, n_samples: int, method: str) -> GraphRequest:
        """A request from ``options`` (a `GraphRequest` or a mapping of its fields; the
        others take their defaults), checked for ``n_samples`` rows: `InputError` naming
        ``method`` for an unknown option or a value out of range. No data are read."""
        if isinstance(options, GraphRequest):
            options = options.as_dict()
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(options) - names)
        if unknown:
            raise InputError(
                f"Unknown kNN graph option(s) {unknown} from method {method!r}.",
                f"use only {sorted(names)}.",
            )
        r = cls(**options)
        check_backend(r.backend, "knn_backend")
        check_target_recall(r.target_recall, r.recall_budget)
        if not isinstance(r.join_components, bool):
            raise InputError(
                f"join_components must be true or false; found {r.join_components!r}.",
                "pass --param join_components=true.",
            )
        return dataclasses.replace(
            r,
            n_neighbors=check_n_neighbors(r.n_neighbors, n_samples, method),
            metric_kwds=dict(r.metric_kwds or {}),
            nndescent_kwds=dict(r.nndescent_kwds or {}),
        )

    def as_dict(self) -> dict:
        """Its fields as a dict (what a graph's fingerprint and the manifest hold)."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}

    def but(self, **changes) -> GraphRequest:
        """A copy with ``changes``."""
        return dataclasses.replace(self, **changes)

    def build(self, X, sink=None):
        """The graph of ``X`` by `knn_graph` (its recall search included); with a ``sink``
        the partitioned backend on dask input writes it there and returns the sink."""
        return knn_graph(
            X,
            self.n_neighbors,
            metric=self.metric,
            metric_kwds=self.metric_kwds or None,
            backend=self.backend,
            random_state=self.random_state,
            n_partitions=self.n_partitions,
            nndescent_kwds=self.nndescent_kwds or None,
            target_recall=self.target_recall,
            recall_budget=self.recall_budget,
            sink=sink,
        )
