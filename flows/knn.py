"""The knn stage: one kNN graph per dataset and parameter set, shared by every graph method.

A method's adapter asks for a graph with ``adapter.graph(params, shape)`` -> None or a
`dimred_dask.graphs.request.GraphRequest` (n_neighbors, metric and its parameters, backend,
join_components, connected, NN-descent's options, n_partitions, recall_sample, target_recall,
recall_budget), checked once against the input's shape by the validate stage
(`normalize_request`) and carried as that value to the build.

``target_recall`` / ``recall_budget``: NN-descent and the partitioned backend measure their
recall on a sample and build again while short of the target (NN-descent with a denser
search, the partitioned backend with each row in twice as many cells), within the budget
(seconds; default four times the first build; `graphs.knn`). The stage then measures the
recall once more on its own sample (``recall_sample`` rows); a graph that ends short of the
target is kept, and the stage warns and records the shortfall in the manifest.

``connected``: the method needs one component (Isomap, LLE, MVU ...): a disconnected graph is
refused with `DisconnectedGraphError` (sizes and fix), or joined when ``join_components``.

The graph goes to the run's store (``graph/indices``, ``graph/distances``, attributes on
``graph``) with the stage marker ``_stages/knn.json``. Its fingerprint is the input's content
digest, the request (without ``connected``, which is a check, not content) and the package
version. A content-addressed cache shares graphs between runs: ``<cache>/knn-<fingerprint>``,
where ``<cache>`` is the flow's ``graph_cache`` argument, else ``DIMRED_GRAPH_CACHE``, else
``.dimred-cache`` next to the output (``runs/isomap`` -> ``runs/.dimred-cache``); ``none``
turns it off. A second method run on the same data with the same graph parameters reads the
graph from there (the manifest says "reused from cache") instead of computing it; where the
workers would have written it (`writes_from_workers`), a task on a worker copies it into the
run's store a chunk at a time, so the flow's process does not hold it then either.
"""

from __future__ import annotations

import hashlib
import os
import time
import warnings

import numpy as np

import dimred_dask
from dimred_dask._compute import compute
from dimred_dask._validation import is_dask
from dimred_dask.errors import DimredWarning
from dimred_dask.graphs import (
    KNNGraph,
    check_connected,
    graph_components,
    join_components,
    sample_recall,
)
from dimred_dask.graphs.connectivity import disconnected_error, index_components, sizes_text
from dimred_dask.graphs.knn import choose_backend
from dimred_dask.graphs.request import GraphRequest
from dimred_dask.io import Lease, LeaseHeldError, RunStore, digest_of, parse_store, parse_uri

__all__ = [
    "normalize_request",
    "graph_fingerprint",
    "save_graph",
    "stored_chunks",
    "load_graph",
    "StoreGraph",
    "GraphCache",
    "resolve_cache",
    "build_graph",
    "CACHE_ENV",
]

CACHE_ENV = "DIMRED_GRAPH_CACHE"
GRAPH_ROWS_PER_CHUNK = 262_144


def normalize_request(request, shape: tuple, method: str) -> GraphRequest:
    """The request (a `GraphRequest` or a mapping of its fields) with defaults filled in and
    checked against the input's shape, no data read: `GraphRequest.checked`."""
    return GraphRequest.checked(request, shape[0], method)


def graph_fingerprint(input_digest: str, request: GraphRequest) -> str:
    content = {k: v for k, v in request.as_dict().items() if k != "connected"}
    return digest_of("knn", input_digest, content, dimred_dask.__version__)


# --------------------------------------------------------------------------- store


class GraphDigest:
    """A digest of a graph's content (its indices as int64, its distances as float64, in row
    order), the same whatever the blocks it is fed in: a graph-cache entry's proof that what
    is read is what was written."""

    def __init__(self):
        self._idx = hashlib.blake2b(digest_size=16)
        self._dist = hashlib.blake2b(digest_size=16)

    def update(self, indices, distances) -> None:
        self._idx.update(np.ascontiguousarray(indices, dtype=np.int64).tobytes())
        self._dist.update(np.ascontiguousarray(distances, dtype=np.float64).tobytes())

    def hexdigest(self) -> str:
        return self._idx.hexdigest() + self._dist.hexdigest()


def save_graph(store: RunStore, graph, rows_per_chunk: int = GRAPH_ROWS_PER_CHUNK) -> dict:
    """Write the graph (a `KNNGraph`, or a `StoreGraph` read a chunk at a time) to ``graph/``
    of a store; returns ``{"chunks": chunk objects written, "digest": its GraphDigest}``."""
    n, k = graph.n_samples, graph.n_neighbors
    rows = int(max(1, min(n, rows_per_chunk)))
    ia = store.create_array("graph/indices", (n, k), (rows, k), np.int64)
    da_ = store.create_array("graph/distances", (n, k), (rows, k), np.float64)
    digest = GraphDigest()
    for start in range(0, n, rows):  # a chunk at a time: no encoded copy of the whole
        if isinstance(graph, KNNGraph):
            idx, dist = graph.indices[start : start + rows], graph.distances[start : start + rows]
        else:
            idx, dist = graph.rows(start, min(n, start + rows), k)
        digest.update(idx, dist)
        ia[start : start + rows], da_[start : start + rows] = idx, dist
    write_graph_attrs(store, graph)
    return {"chunks": stored_chunks(store), "digest": digest.hexdigest()}


def _save_to(url: str, graph) -> dict:
    return save_graph(RunStore(url), graph)


def write_graph_attrs(store: RunStore, graph) -> None:
    store.write_attrs(
        "graph", {"metric": graph.metric, "backend": graph.backend, "info": graph.info}
    )


def load_graph(store: RunStore) -> KNNGraph:
    attrs = store.read_attrs("graph")
    return KNNGraph(
        np.asarray(store.read_array("graph/indices"), dtype=np.int64),
        np.asarray(store.read_array("graph/distances"), dtype=np.float64),
        attrs["metric"],
        attrs["backend"],
        dict(attrs.get("info") or {}),
    )


class StoreGraph:
    """The graph in a run's store as a graph source (``graphs.affinities.graph_rows``): each
    task that needs rows reads them on its worker, the task graph carries a URL, and the
    process that opens it reads only the arrays' shapes (an n x k graph at n = 3 000 000 is
    0.7 GB in memory). Made with `create`, it is also the sink the partitioned kNN backend
    writes the graph to from its tasks (`dimred_dask.graphs.knn_graph`, ``sink=``)."""

    rows_per_chunk = GRAPH_ROWS_PER_CHUNK

    def __init__(
        self,
        output: str,
        n_samples: int,
        n_neighbors: int,
        metric: str = "euclidean",
        backend: str = "exact",
        info: dict | None = None,
    ):
        self.output, self.n_samples, self.n_neighbors = output, int(n_samples), int(n_neighbors)
        self.metric, self.backend, self.info = metric, backend, dict(info or {})

    @classmethod
    def open(cls, output: str) -> "StoreGraph":
        """The store's graph: its shape, metric, backend and ``info`` (the joining edges,
        the recall), not its rows."""
        store = RunStore(output)
        n, k = store.open_array("graph/indices").shape
        attrs = store.read_attrs("graph")
        return cls(output, n, k, attrs["metric"], attrs["backend"], attrs.get("info"))

    @classmethod
    def create(
        cls, store: RunStore, n_samples: int, n_neighbors: int, rows_per_chunk: int | None = None
    ) -> "StoreGraph":
        """Empty ``graph/`` arrays in a (prepared) store, to be written by `write` a chunk of
        ``rows_per_chunk`` rows (default GRAPH_ROWS_PER_CHUNK) or more at a time."""
        rows = int(rows_per_chunk or cls.rows_per_chunk)
        shape, chunks = (n_samples, n_neighbors), (rows, n_neighbors)
        store.create_array("graph/indices", shape, chunks, np.int64)
        store.create_array("graph/distances", shape, chunks, np.float64)
        graph = cls(store.url, n_samples, n_neighbors)
        graph.rows_per_chunk = rows
        return graph

    def rows(self, start: int, stop: int, k: int):
        store = RunStore(self.output)
        return (
            np.asarray(store.open_array("graph/indices")[start:stop, :k], dtype=np.int64),
            np.asarray(store.open_array("graph/distances")[start:stop, :k], dtype=np.float64),
        )

    def write(self, start: int, stop: int, indices, distances) -> None:
        """Rows [start, stop) (whole chunks, or the last rows): called from the tasks."""
        store = RunStore(self.output)
        store.open_array("graph/indices", writable=True)[start:stop] = indices
        store.open_array("graph/distances", writable=True)[start:stop] = distances

    def take(self, rows: np.ndarray):
        """Indices and distances of the listed rows (sorted). Every stored chunk holding one
        of them is read and decoded whole: call it in a task, not in the flow's process."""
        store = RunStore(self.output)
        rows = np.asarray(rows, dtype=np.int64)
        return (
            np.asarray(store.open_array("graph/indices").oindex[rows, :], dtype=np.int64),
            np.asarray(store.open_array("graph/distances").oindex[rows, :], dtype=np.float64),
        )


def stored_chunks(store: RunStore) -> int:
    """The chunk objects of the store's graph arrays (a stage marker's proof of a whole write)."""
    return store.chunk_count("graph/indices") + store.chunk_count("graph/distances")


class GraphCache:
    """Graphs keyed by fingerprint under one prefix (a folder or s3:// prefix).

    An entry is a store of its own (``<cache>/knn-<fingerprint>``) with the graph, the digest
    of its content and its chunk count in its manifest. An entry that does not match its
    digest or does not decode is never used and never fatal: it is named in a warning (and
    in `problems`), moved to ``<cache>/set-aside/`` and the graph is built again."""

    SET_ASIDE = "set-aside"

    def __init__(self, url: str):
        self.url = url.rstrip("/")
        self.problems: list[str] = []

    def _entry(self, fp: str) -> RunStore:
        return RunStore(f"{self.url}/knn-{fp[:32]}", role="graph cache")

    def find(self, fp: str) -> RunStore | None:
        """The committed entry of this fingerprint with all its chunks (not read), or None."""
        entry = self._entry(fp)
        try:
            if not entry.committed():
                return None
            meta = entry.read_json("manifest.json")
            if meta.get("fingerprint") != fp or stored_chunks(entry) != meta.get("chunks"):
                return None
            return entry
        except (OSError, KeyError, ValueError):
            return None  # a cache is an optimisation: an unreadable entry is recomputed

    def _expected(self, entry: RunStore) -> str | None:
        return entry.read_json("manifest.json").get("digest")

    def _reject(self, entry: RunStore, why: str) -> None:
        """Name a bad entry in a warning and move it out of the way (never deleted)."""
        aside = f"{self.url}/{self.SET_ASIDE}/{_name_of(entry.url)}-{int(time.time())}"
        try:
            entry.fs.mv(entry.root, RunStore(aside).root, recursive=True)
            where = f"moved to {aside}"
        except OSError as exc:
            where = f"left where it is ({type(exc).__name__}: {exc}); it is overwritten"
        message = (
            f"The kNN graph-cache entry {entry.url} {why}; it was not used ({where}) and the "
            "graph is built again."
        )
        self.problems.append(message)
        warnings.warn(DimredWarning(message), stacklevel=3)

    def load(self, fp: str) -> KNNGraph | None:
        """The entry's graph read into this process, checked against its digest; or None."""
        entry = self.find(fp)
        if entry is None:
            return None
        try:
            graph = load_graph(entry)
            expected = self._expected(entry)
        except (OSError, KeyError, ValueError) as exc:
            self._reject(entry, f"could not be read ({getattr(exc, 'problem', exc)})")
            return None
        digest = GraphDigest()
        digest.update(graph.indices, graph.distances)
        if expected is None or digest.hexdigest() != expected:
            self._reject(entry, _mismatch(expected))
            return None
        return graph

    def copy_to(self, fp: str, store: RunStore) -> "StoreGraph | None":
        """The entry's graph copied into ``store`` (prepared) by a task on a worker, a chunk
        at a time, checked against the entry's digest, and opened there; None (nothing left
        in ``store``) when there is no readable, matching entry."""
        from dask import delayed

        entry = self.find(fp)
        if entry is None:
            return None
        try:
            expected = self._expected(entry)
            (copied,) = compute(
                delayed(_save_to)(store.url, StoreGraph.open(entry.url)),
                stage="kNN graph: copy from the cache",
            )
        except (OSError, KeyError, ValueError) as exc:
            store.remove("graph")
            self._reject(entry, f"could not be read ({getattr(exc, 'problem', exc)})")
            return None
        if expected is None or copied["digest"] != expected:
            store.remove("graph")
            self._reject(entry, _mismatch(expected))
            return None
        return StoreGraph.open(store.url)

    # ---- pointers to large arrays kept in the run store that made them (kernel matrices):
    # copying an n x n matrix into the cache would double its size on disk, so the cache
    # records where it is, and a reader checks that store's stage marker still matches.
    def _pointer(self, kind: str, fp: str) -> str:
        return f"{kind}-{fp[:32]}.json"

    def find_array(self, kind: str, fp: str) -> dict | None:
        """{"store": url, "array": name, "info": {...}} of a committed stage elsewhere whose
        marker still has this fingerprint and all its chunks, else None."""
        try:
            ref = RunStore(self.url).read_json(self._pointer(kind, fp))
            if ref.get("fingerprint") != fp:
                return None
            owner = RunStore(ref["store"])
            marker = owner.stage_marker(ref["stage"])
            if not marker or marker.get("fingerprint") != fp:
                return None  # that store was overwritten or resumed with other content
            if owner.chunk_count(ref["array"]) != ref["info"]["stored_chunks"]:
                return None
            return ref
        except (OSError, KeyError, ValueError):
            return None

    def point_to(
        self, kind: str, fp: str, store_url: str, stage: str, array: str, info: dict
    ) -> bool:
        try:
            RunStore(self.url).write_json(
                self._pointer(kind, fp),
                {
                    "fingerprint": fp,
                    "store": store_url,
                    "stage": stage,
                    "array": array,
                    "info": info,
                    "created": time.time(),
                },
            )
            return True
        except OSError:
            return False  # a cache is an optimisation

    def save(self, fp: str, graph) -> bool:
        """Store the graph unless another run is writing the same entry (then skip)."""
        entry = self._entry(fp)
        try:
            lease = Lease(entry, holder="knn graph cache").acquire()
        except LeaseHeldError:
            return False
        try:
            entry.prepare(
                "overwrite" if entry.exists() else "new",
                {"kind": "knn-graph-cache", "version": dimred_dask.__version__},
            )
            if isinstance(graph, StoreGraph):  # copied where it is, a chunk at a time, in a task
                from dask import delayed

                (saved,) = compute(
                    delayed(_save_to)(entry.url, graph), stage="kNN graph: copy to the cache"
                )
            else:
                saved = save_graph(entry, graph)
            entry.commit(
                guard=None,  # a cache entry, no run's store
                manifest={
                    "fingerprint": fp,
                    "chunks": saved["chunks"],
                    "digest": saved["digest"],
                    "n_samples": graph.n_samples,
                    "n_neighbors": graph.n_neighbors,
                    "metric": graph.metric,
                    "backend": graph.backend,
                    "created": time.time(),
                },
            )
            return True
        except OSError:  # an entry we may not replace (foreign files, links): not cached
            return False
        finally:
            lease.release()


def _name_of(url: str) -> str:
    return url.rstrip("/").rsplit("/", 1)[-1]


def _mismatch(expected: str | None) -> str:
    if expected is None:
        return "carries no digest of its content (written by an older version)"
    return "does not match the digest of its content written with it (changed or damaged)"


def resolve_cache(graph_cache: str | None, output: str, input_url) -> GraphCache | None:
    """The cache to use, or None when turned off (``none``) or impossible (no parent).
    ``input_url``: the run's input (a `Location` or its canonical form); a cache inside it
    is never used."""
    value = graph_cache if graph_cache is not None else os.environ.get(CACHE_ENV)
    if value is not None and str(value).strip().lower() in ("", "none", "off", "false"):
        return None
    if value is None:
        parent = parse_store(output).parent()
        if parent is None:
            return None  # an output at a bucket's root has no parent folder
        cache = parent.child(".dimred-cache")
    else:
        cache = parse_store(value, role="graph cache")
    source = parse_uri(input_url)
    if cache.url.rstrip("/").startswith(source.url.rstrip("/") + "/"):
        return None  # never write into the input's own folder
    return GraphCache(str(cache))


# --------------------------------------------------------------------------- compute


def build_graph(X, request: GraphRequest, sink: StoreGraph | None = None) -> tuple:
    """Compute the graph of ``X`` for a checked request; (graph, {"recall": ...}). With a
    ``sink`` the partitioned backend writes it there from the workers and returns the sink."""
    graph = request.build(X, sink=sink)
    quality = {}
    if graph.backend != "exact" and request.recall_sample:
        quality = sample_recall(
            X, graph, int(request.recall_sample), random_state=request.random_state
        )
    elif graph.backend == "exact":
        quality = {"recall": 1.0, "why": "exact backend"}
    short = recall_shortfall(graph, quality, request.target_recall)
    if short:
        quality["warning"] = short
        warnings.warn(DimredWarning(short), stacklevel=2)
    graph.info["recall"] = quality
    return graph, quality


def recall_shortfall(graph: KNNGraph, quality: dict, target) -> str | None:
    """A warning that says how far the graph's measured recall is below the target and what
    to do, or None (target met, no target, or no measure)."""
    recall = quality.get("recall")
    if target is None or recall is None or recall >= target:
        return None
    search = graph.info.get("recall_search") or {}
    rounds = search.get("rounds") or []
    tried = ""
    if rounds and search.get("stopped"):
        if graph.backend == "partitioned":
            what = f"partitioned build(s) up to {rounds[-1]['overlap']} cells a row"
        else:
            what = f"NN-descent build(s) up to {rounds[-1]['search_neighbors']} search neighbours"
        tried = f" after {len(rounds)} {what} ({search['stopped']})"
    if graph.backend == "partitioned":  # its cells decide the recall
        why = graph.info.get("why_partitioned")
        fix = (
            "The partitioned backend searches each point's neighbours only in its "
            f"{graph.info.get('overlap', 2)} nearest of {graph.info.get('n_partitions')} "
            "cells, which splits true neighbours apart on data of high intrinsic dimension"
            + (f" (chosen because {why})" if why else "")
            + ". Fix: pass a larger --knn-recall-budget (seconds; each doubling of the cells "
            "a row is searched in about doubles the time), give the workers the memory for "
            "NN-descent in one task (auto then picks it) or pass --param "
            "knn_backend=nndescent, or reduce the data's dimension first "
            "(--method pca+<method>); --knn-target-recall sets the target."
        )
    else:
        fix = (
            "Fix: pass a larger --knn-recall-budget (seconds), or --param knn_backend=exact "
            "(O(n^2) distances), or reduce the data's dimension first "
            "(--method pca+<method>); --knn-target-recall sets the target."
        )
    return (
        f"The kNN graph's recall is {recall:.3f} on {quality.get('sample_rows')} sampled "
        f"rows, below the target {target:g}{tried}: about {100 * (1 - recall):.0f} % of "
        f"the listed neighbours are not among the true {graph.n_neighbors} nearest "
        f"({graph.backend} backend, {graph.n_samples} rows). {fix}"
    )


def connect(graph: KNNGraph, X, request: GraphRequest, method: str) -> KNNGraph:
    """Apply the request's connectivity rule: join, refuse, or leave as it is."""
    if request.join_components and not graph.info.get("joined_components"):
        count, _ = graph_components(graph)
        if count > 1:
            graph, _ = join_components(graph, X)
            graph.info["components_before_join"] = int(count)
    if request.connected and not graph.info.get("extra_edges"):
        check_connected(graph, method=method)  # DisconnectedGraphError: sizes and the fix
    return graph


def writes_from_workers(X, request: GraphRequest) -> bool:
    """Whether the graph is written from the tasks that make it: the partitioned backend on
    dask input, unless components are to be joined (that changes the graph before it is
    written). A connectivity check is made where the stored graph is (`check_stored`)."""
    if not is_dask(X) or request.join_components:
        return False
    chosen = choose_backend(request.backend, X.shape[0], X, request.n_neighbors, request.metric)
    return chosen == "partitioned"


def _stored_components(graph: StoreGraph) -> tuple[int, str]:
    """(components, their sizes as `check_connected` states them) of a stored graph."""
    count, labels = index_components(RunStore(graph.output).open_array("graph/indices")[:])
    return count, sizes_text(labels)


def check_stored(graph: StoreGraph, store: RunStore, request: GraphRequest, method: str) -> int:
    """The connectivity rule for a graph written from the workers: its components counted in
    a task (one worker reads the indices, not this process); a disconnected graph, when the
    method needs one component, is removed from the store (this run wrote it) and refused
    with `DisconnectedGraphError`. Returns the count."""
    from dask import delayed

    (out,) = compute(delayed(_stored_components)(graph), stage="kNN graph: components")
    count, sizes = out
    if count > 1 and request.connected:
        store.remove("graph")
        raise disconnected_error(method, graph.n_neighbors, graph.n_samples, sizes)
    return count


def graph_summary(graph, components: int | None = None) -> dict:
    """The manifest's ``graph`` section; ``components``: the count `check_stored` made where
    a stored graph is (counted here for a `KNNGraph` when None)."""
    count = components if components is not None else graph_components(graph)[0]
    return {
        "n_samples": graph.n_samples,
        "n_neighbors": graph.n_neighbors,
        "metric": graph.metric,
        "backend": graph.backend,
        "components": int(count),
        "extra_edges": len(graph.info.get("extra_edges", [])),
        "recall": (graph.info.get("recall") or {}).get("recall"),
        "recall_sample_rows": (graph.info.get("recall") or {}).get("sample_rows"),
        "recall_warning": (graph.info.get("recall") or {}).get("warning"),
        "recall_search": graph.info.get("recall_search"),
        "n_rows_with_duplicates": graph.info.get("n_rows_with_duplicates"),
        "build_seconds": graph.info.get("seconds"),
    }
