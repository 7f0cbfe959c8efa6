"""A run as typed values: what was asked (`RunRequest`, with its place in a chain,
`ChainStep`), what the checks found (`Checked`) and what the validate stage established
(`Validated`). Frozen: a stage that learns more makes a new value (`Validated.but`), never
changes the one it was given.

`RunRequest.build` is the one place a run's arguments become a request: every location is
parsed there once into its canonical form (`dimred_dask.io.parse_uri`), ``{date}`` in the
output replaced, the scalar options coerced.
"""

from __future__ import annotations

import dataclasses
import datetime
from dataclasses import dataclass, field

from dimred_dask.graphs.knn import TARGET_RECALL
from dimred_dask.graphs.request import GraphRequest
from dimred_dask.io import parse_store, parse_uri

__all__ = ["ChainStep", "Checked", "RunRequest", "Validated", "expand_output"]

OFF = ("", "none", "off", "false")  # a graph cache turned off


def expand_output(output: str, when: datetime.datetime | None = None) -> str:
    """``{date}`` in an output path becomes the run's UTC date (YYYY-MM-DD), so that a
    scheduled job writes each night's result next to yesterday's instead of over it."""
    if "{date}" not in str(output):
        return output
    when = when or datetime.datetime.now(datetime.timezone.utc)
    return str(output).replace(
        "{date}", when.astimezone(datetime.timezone.utc).strftime("%Y-%m-%d")
    )


@dataclass(frozen=True)
class ChainStep:
    """A step's place in a chain (``pca+umap``): the chain, its own store and input, and
    where its first step's store is (``flows/chain.py``)."""

    chain: str  # the chain's method, e.g. "pca+umap"
    steps: tuple  # its steps' methods, e.g. ("pca", "umap")
    root: str  # the chain's own store (the final step's)
    input: str  # the chain's input, which the final step is judged against
    columns: tuple | None  # the chain's input's columns (Parquet, CSV)
    first_output: str  # the first step's run store, inside the root
    final: bool  # the final step (whose input is the first step's embedding)


@dataclass(frozen=True)
class RunRequest:
    """What a run was asked to do, every location in canonical form. Build it with `build`."""

    input: str
    output: str
    method: str = "pca"
    params: dict = field(default_factory=dict)
    overwrite: bool = False
    columns: tuple | None = None
    sample_size: int = 2000
    chunk_rows: int | None = None
    labels: str | None = None
    eval_labels: str | None = None  # labels the embedding is judged by (KNC, kNN accuracy)
    graph_cache: str | None = None
    actions: str | None = None
    allow_missing_chunks: bool = False
    knn_target_recall: float | None = TARGET_RECALL
    knn_recall_budget: float | None = None
    step: ChainStep | None = None  # a step of a chain
    default_components: bool = False  # a chain's PCA step given no n_components

    @classmethod
    def build(
        cls,
        *,
        input,
        output,
        method: str = "pca",
        params: dict | None = None,
        overwrite: bool = False,
        columns=None,
        sample_size: int = 2000,
        chunk_rows: int | None = None,
        labels=None,
        eval_labels=None,
        graph_cache=None,
        actions=None,
        allow_missing_chunks: bool = False,
        knn_target_recall: float | None = TARGET_RECALL,
        knn_recall_budget: float | None = None,
        when: datetime.datetime | None = None,
    ) -> "RunRequest":
        """The request of `flows.embed.embed`'s arguments (the scheduler and the credentials
        block aside): locations parsed and put in canonical form (what the stages use,
        print and write in the manifest is what was parsed), ``{date}`` in the output
        replaced by the UTC date of ``when`` (a deployment's scheduled start; None: now).
        Raises `InputError` for a location that is not allowed."""
        cache = graph_cache
        if cache is not None and str(cache).strip().lower() not in OFF:
            cache = str(parse_store(cache, role="graph cache"))
        return cls(
            input=str(parse_uri(input)),
            output=str(parse_store(expand_output(output, when))),
            method=method,
            params=dict(params or {}),
            overwrite=bool(overwrite),
            columns=tuple(columns) if columns is not None else None,
            sample_size=int(sample_size),
            chunk_rows=chunk_rows,
            labels=str(parse_uri(labels, role="labels")) if labels else None,
            eval_labels=str(parse_uri(eval_labels, role="eval labels")) if eval_labels else None,
            graph_cache=cache,
            actions=str(parse_uri(actions, role="actions")) if actions else None,
            allow_missing_chunks=bool(allow_missing_chunks),
            knn_target_recall=knn_target_recall,
            knn_recall_budget=knn_recall_budget,
        )

    def but(self, **changes) -> "RunRequest":
        """A copy with ``changes``."""
        return dataclasses.replace(self, **changes)

    @property
    def root(self) -> str:
        """The store the run owns as a whole: a chain's own store, else the output."""
        return self.step.root if self.step else self.output

    @property
    def inner_step(self) -> bool:
        """A chain's first step: a store inside the chain's, resumed even when committed."""
        return bool(self.step and not self.step.final)

    @property
    def reads_own_step(self) -> bool:
        """A chain's final step: its input is the chain's first step's embedding."""
        return bool(self.step and self.step.final)

    @property
    def recall_request(self) -> dict:
        """The kNN stage's recall target and budget."""
        return {"target_recall": self.knn_target_recall, "recall_budget": self.knn_recall_budget}


@dataclass(frozen=True)
class Checked:
    """What `flows.validate.check_run` found, reading no more than metadata."""

    input: object  # the opened input (`dimred_dask.io.InputArray`)
    params: dict
    mode: str  # "new", "resume" or "overwrite"
    graph_request: GraphRequest | None
    labels_fingerprint: str | None
    actions_fingerprint: str | None
    eval_labels_fingerprint: str | None


@dataclass(frozen=True)
class Validated:
    """What the validate stage established, and what later stages add (`but`)."""

    params: dict
    mode: str
    graph_request: GraphRequest | None
    labels_fingerprint: str | None
    actions_fingerprint: str | None
    input_meta: dict
    input_fingerprint: dict
    input_bytes: int
    sources: tuple  # the inputs' file listings (`flows.guard.sources_of`)
    shape: tuple
    row_chunk: int
    worker_memory: int | None
    chunk_bytes: int
    n_chunks: int
    seconds: float
    eval_labels_fingerprint: str | None = None  # a run's labels for evaluation
    lease: dict | None = None  # {"store", "token"} once the run holds the lease
    knn: dict | None = None  # the kNN stage's result
    kernel: dict | None = None  # the kernel stage's result

    def but(self, **changes) -> "Validated":
        """A copy with ``changes``."""
        return dataclasses.replace(self, **changes)
