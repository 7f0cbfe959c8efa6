"""The k-nearest-neighbour graph every graph method shares (Isomap, LLE, Laplacian
eigenmaps, spectral clustering, t-SNE, UMAP, MVU).

``knn_graph(X, n_neighbors)`` returns a `KNNGraph`: for each row its ``n_neighbors`` nearest
other rows (the row itself excluded, also among exact duplicates of it), nearest first, ties
broken by the smaller index. Backends (``backend=``):

- ``exact``: brute force, blockwise. For dask input every (row chunk, column chunk) pair is a
  task that keeps the k + 1 nearest candidates; candidates are merged by a tree over the column
  chunks. O(n^2 d): for validation and for n up to ~100 000.
- ``nndescent``: pynndescent's NN-descent (random projection trees, then neighbour-of-neighbour
  refinement), with pynndescent's defaults. For data too large for the caches
  (``nndescent.LOCALITY_MIN_BYTES`` and up) the rows are first put in the leaf order of one
  random projection tree, so that neighbours' neighbours are read from nearby memory
  (``locality_order``; see bench/HISTORY.md, "kNN stage at 1 000 000 x 50, rows in locality
  order"), and the graph is mapped back to the given row numbers.
  For dask input it runs as one task on one worker, using that worker's cores (numba
  threads); the data are gathered there (n x d must fit in one worker), and the graph comes
  back in pynndescent's int32 / float32 (half the bytes), widened in the client.
- ``partitioned``: for data larger than one worker's memory. Coarse cells are k-means centres
  of a sample; every row belongs to its ``overlap`` (default 2) nearest cells; NN-descent (or
  brute force for small cells) runs inside each cell as its own task, on separate workers; the
  candidates of a row from its cells are merged (`graphs.partitioned`). Points near cell
  borders see both sides; on data of high intrinsic dimension true neighbours fall in other
  cells, so while the recall on a sample is short of ``target_recall`` the graph is built
  again with each row in twice as many cells (within ``recall_budget``).
- ``auto``: exact up to ``EXACT_MAX`` rows, nndescent above.

Sparse input (CSR, or a dask array of CSR row blocks) is taken as it is, never densified, for
the metrics made of inner products (``SPARSE_KNN_METRICS``: euclidean, sqeuclidean, cosine):
the exact backend computes distances from sparse products, NN-descent gets the CSR rows
(pynndescent's sparse code; no locality order). The partitioned backend and other metrics
refuse sparse input (`InputTypeError`).

The graph is held in memory as NumPy (n x k int64 indices and float64 distances: 16 bytes per
edge); the flow stores it in the run's store and reuses it by fingerprint. ``sample_recall``
measures the recall of a graph against exact neighbours on a sample of rows (one pass over the
data).
"""

from __future__ import annotations

import math
import numbers
import time
from dataclasses import dataclass, field

import numpy as np

from .._compute import compute, smallest_worker_memory
from .._validation import check_array, check_random_state, is_dask, is_sparse_input
from ..blocks.kernels import METRICS, SPARSE_METRICS
from ..blocks.neighbors import (
    KDTREE_MAX_DIM,
    KDTREE_MIN_ROWS,
    KDTREE_TASK_BYTES,
    block_topk,
    drop_self,
    kdtree_topk,
    merge_topk,
    recall_at,
)
from ..blocks.sparse import csr64
from ..errors import InputError, InputTypeError
from .nndescent import (
    BUDGET_FACTOR,
    NNDESCENT_METRICS,
    RECALL_SAMPLE,
    TARGET_RECALL,
    _nndescent_any,
    check_target_recall,
)
from .partitioned import CELL_ROWS, _partitioned

__all__ = [
    "KNNGraph",
    "knn_graph",
    "check_n_neighbors",
    "sample_recall",
    "KNN_BACKENDS",
    "EXACT_MAX",
    "SPARSE_KNN_METRICS",
    "check_sparse_knn",
    "TARGET_RECALL",
    "check_target_recall",
    "KNNBackend",
    "BACKENDS",
    "BuildOptions",
    "check_backend",
]

# auto: brute force up to this many rows (n^2 d flops: still a short in-memory product, and the
# graph is exact)
EXACT_MAX = 20_000
SPARSE_KNN_METRICS = SPARSE_METRICS  # euclidean, sqeuclidean, cosine: from inner products


@dataclass
class KNNGraph:
    """A directed kNN graph: row i's neighbours ``indices[i]`` at ``distances[i]`` (ascending)."""

    indices: np.ndarray  # (n, k) int64, self excluded
    distances: np.ndarray  # (n, k) float64, ascending per row
    metric: str = "euclidean"
    backend: str = "exact"
    info: dict = field(default_factory=dict)

    @property
    def n_samples(self) -> int:
        return int(self.indices.shape[0])

    @property
    def n_neighbors(self) -> int:
        return int(self.indices.shape[1])

    def to_csr(self, mode: str = "distance"):
        """The directed graph as an n x n CSR matrix: distances (``mode="distance"``; an exact
        duplicate's edge is stored as a tiny positive number so it is not dropped as a zero) or
        ones (``"connectivity"``)."""
        import scipy.sparse as sp

        n, k = self.indices.shape
        data = (
            np.ones(n * k)
            if mode == "connectivity"
            else np.maximum(self.distances.ravel(), np.finfo(np.float64).tiny)
        )
        valid = self.indices.ravel() >= 0
        rows = np.repeat(np.arange(n), k)[valid]
        return sp.csr_matrix((data[valid], (rows, self.indices.ravel()[valid])), shape=(n, n))

    def subset(self, k: int) -> "KNNGraph":
        """The graph of the ``k`` nearest neighbours (k <= n_neighbors): a stored graph with
        more neighbours serves any method that needs fewer."""
        if k > self.n_neighbors:
            raise InputError(
                f"This graph has {self.n_neighbors} neighbours per row; asked for {k}.",
                f"build a graph with n_neighbors >= {k}.",
            )
        return KNNGraph(
            self.indices[:, :k].copy(),
            self.distances[:, :k].copy(),
            self.metric,
            self.backend,
            dict(self.info),
        )


def check_n_neighbors(n_neighbors, n: int, method: str = "the kNN graph") -> int:
    """Check that 1 <= ``n_neighbors`` < ``n`` and return it as an int.

    Parameters
    ----------
    n_neighbors : int
        The neighbours per row asked for (a bool is refused).
    n : int
        The number of rows.
    method : str, default "the kNN graph"
        What needs the neighbours, named in the error message.

    Returns
    -------
    int
        ``n_neighbors``.

    Raises
    ------
    InputError
        ``n_neighbors`` is not an integer, or not in [1, n - 1].
    """
    if (
        not isinstance(n_neighbors, numbers.Integral)
        or isinstance(n_neighbors, bool)
        or not 1 <= n_neighbors < n
    ):
        raise InputError(
            f"{method} needs an int n_neighbors with 1 <= n_neighbors < n_samples "
            f"= {n}; found {n_neighbors!r}.",
            f"pass n_neighbors between 1 and {n - 1} (5 to 30 is usual).",
        )
    return int(n_neighbors)


@dataclass(frozen=True)
class BuildOptions:
    """What a build takes besides the rows, k and the metric (`knn_graph`'s keywords)."""

    random_state: object = 0
    n_partitions: int | None = None
    overlap: int = 2
    nndescent_kwds: dict | None = None
    target_recall: float | None = TARGET_RECALL
    recall_budget: float | None = None
    sink: object = None


class KNNBackend:
    """One way of building the kNN graph: its name, the metrics it computes, whether it takes
    sparse rows, and `build` (the first graph and, for the approximate backends, the search
    for a stated recall on a sample of rows). The registry is `BACKENDS`."""

    name = ""
    metrics: tuple = ()
    takes_sparse = True
    sparse_fix = ""  # the fix of the refusal of sparse rows, for a backend that takes none

    def check(self, metric, metric_kwds: dict, sparse: bool = False, where: str = "X") -> None:
        """Refuse (`InputError`, `InputTypeError`) a metric, its parameters or sparse rows
        this backend cannot take."""
        if metric not in self.metrics:
            raise self.unknown_metric(metric)
        if metric == "minkowski" and float(metric_kwds.get("p", 2.0)) < 1:
            raise InputError(
                f"The minkowski metric needs p >= 1; found p={metric_kwds['p']!r}.",
                "pass metric_kwds={'p': 2}.",
            )
        if sparse:
            self.check_sparse(metric, where)

    def unknown_metric(self, metric) -> InputError:
        return InputError(
            f"Unknown kNN metric {metric!r}; the metrics are {', '.join(NNDESCENT_METRICS)}.",
            "pass metric='euclidean'.",
        )

    def check_sparse(self, metric, where: str = "X") -> None:
        if metric not in SPARSE_KNN_METRICS:
            raise InputTypeError(
                f"The kNN graph of sparse input is built for the metrics "
                f"{', '.join(SPARSE_KNN_METRICS)} (from sparse inner products); found "
                f"metric={metric!r} with sparse {where}.",
                "pass metric='euclidean' or 'cosine', or reduce with PCA first (--method "
                "pca+<method>) and use any metric on the dense embedding.",
            )
        if not self.takes_sparse:
            raise InputTypeError(
                f"The {self.name} kNN backend needs dense rows (k-means cells); found sparse "
                f"{where}.",
                self.sparse_fix,
            )

    def build(self, X, k: int, metric: str, metric_kwds: dict, options: BuildOptions):
        """(indices, distances, info); distances None when the graph was written to the
        options' sink (its ranges' summaries in ``info["ranges"]``)."""
        raise NotImplementedError


class ExactBackend(KNNBackend):
    """Brute force, blockwise (a k-d tree for low-dimensional euclidean rows)."""

    name = "exact"
    metrics = tuple(METRICS)

    def unknown_metric(self, metric) -> InputError:
        return InputError(
            f"The exact kNN backend supports the metrics {', '.join(METRICS)}; found {metric!r}.",
            "pass backend='nndescent' for other metrics.",
        )

    def build(self, X, k, metric, metric_kwds, options):
        idx, dist = _exact(X, k, metric, metric_kwds)
        return idx, dist, {}


class NNDescentBackend(KNNBackend):
    """pynndescent's NN-descent in one task, rebuilt denser until the recall target."""

    name = "nndescent"
    metrics = tuple(NNDESCENT_METRICS)

    def build(self, X, k, metric, metric_kwds, options):
        o = options
        return _nndescent_any(
            X,
            k,
            metric,
            metric_kwds,
            o.random_state,
            o.nndescent_kwds,
            o.target_recall,
            o.recall_budget,
        )


class PartitionedBackend(KNNBackend):
    """NN-descent in k-means cells, one task a cell, each row in ``overlap`` cells (doubled
    until the recall target); writes the graph to a sink from the tasks on dask input."""

    name = "partitioned"
    metrics = tuple(NNDESCENT_METRICS)
    takes_sparse = False
    sparse_fix = (
        "pass backend='nndescent' (takes CSR rows) or 'exact', or reduce "
        "with PCA first (--method pca+<method>)."
    )

    def build(self, X, k, metric, metric_kwds, options):
        o = options
        sink = o.sink if is_dask(X) else None
        return _partitioned_to_target(
            X,
            k,
            metric,
            metric_kwds,
            o.random_state,
            (o.n_partitions, o.overlap),
            o.nndescent_kwds,
            sink,
            (o.target_recall, o.recall_budget),
        )


BACKENDS: dict[str, KNNBackend] = {
    b.name: b for b in (ExactBackend(), NNDescentBackend(), PartitionedBackend())
}
KNN_BACKENDS = ("auto", *BACKENDS)


def check_backend(backend, option: str = "backend") -> str:
    """``backend`` if it is ``auto`` or a registered backend, else `InputError` (``option``:
    the option's name as the caller spells it, e.g. ``knn_backend``)."""
    if backend not in KNN_BACKENDS:
        raise InputError(
            f"{option} must be one of {', '.join(KNN_BACKENDS)}; found {backend!r}.",
            f"pass {option}='auto' (exact up to {EXACT_MAX} rows, nndescent above).",
        )
    return backend


def check_sparse_knn(metric: str, backend: str, where: str = "X") -> None:
    """Refuse (`InputTypeError`) a metric or backend that cannot take sparse rows."""
    BACKENDS.get(backend, BACKENDS["exact"]).check_sparse(metric, where)


# auto: NN-descent gathers X into one task; above this share of the smallest worker's memory
# limit (by `nndescent_task_bytes`) the partitioned backend is used instead (dense input)
GATHER_SHARE = 0.5


def nndescent_task_bytes(n: int, d: int, itemsize: int, k: int) -> int:
    """Estimated peak of the one-worker NN-descent task: the gathered rows, their float32
    ordered copy and pynndescent's graph and candidate arrays (measured ~1.2 KB a row at
    k = 15: 75 bytes per kept neighbour)."""
    return int(n * d * itemsize + 4 * n * d + 75 * n * (k + 1))


def choose_backend(backend: str, n: int, X=None, k: int = 15, metric: str = "euclidean") -> str:
    """The backend for ``backend`` (``auto``: exact up to EXACT_MAX rows; NN-descent above,
    unless dense dask X would take more than GATHER_SHARE of a worker's memory in its one
    task: then partitioned)."""
    if check_backend(backend) != "auto":
        return backend
    if n <= EXACT_MAX:
        return "exact"
    if X is not None and is_dask(X) and not is_sparse_input(X) and metric in METRICS:
        limit = smallest_worker_memory()
        need = nndescent_task_bytes(n, X.shape[1], X.dtype.itemsize, k)
        if limit and need > GATHER_SHARE * limit:
            return "partitioned"
    return "nndescent"


def knn_graph(
    X,
    n_neighbors: int = 15,
    *,
    metric: str = "euclidean",
    metric_kwds=None,
    backend: str = "auto",
    random_state=0,
    n_partitions=None,
    overlap: int = 2,
    nndescent_kwds=None,
    target_recall=TARGET_RECALL,
    recall_budget=None,
    where: str = "X",
    sink=None,
):
    """The k-nearest-neighbour graph of the rows of ``X``; see the module docstring.

    Each row's ``n_neighbors`` nearest other rows, nearest first. In-memory input is
    searched in this process, dask input in tasks (on the workers when there is a client);
    the graph comes back in memory.

    Parameters
    ----------
    X : array-like, dask array or sparse matrix of shape (n_samples, n_features)
        The rows. Sparse input (CSR, or a dask array of CSR row blocks) is never densified:
        only the metrics ``SPARSE_KNN_METRICS`` and the exact and NN-descent backends take it.
    n_neighbors : int, default 15
        Neighbours per row, 1 <= ``n_neighbors`` < n_samples.
    metric : str, default "euclidean"
        The distance: one of ``blocks.kernels.METRICS`` for the exact backend, of
        pynndescent's metrics for the others.
    metric_kwds : dict or None, default None
        The metric's parameters (``{"p": 3}`` for minkowski, p >= 1).
    backend : {"auto", "exact", "nndescent", "partitioned"}, default "auto"
        ``auto``: exact up to `EXACT_MAX` rows, NN-descent above, partitioned when dense
        dask ``X`` gathered into one NN-descent task would take more than half of the
        smallest worker's memory.
    random_state : int, numpy Generator or None, default 0
        Seeds NN-descent and the partitioned backend's cells.
    n_partitions : int or None, default None
        Partitioned backend: the number of cells, 2 <= ``n_partitions`` <= n / 2; None:
        about 100 000 rows per cell, each row counted ``overlap`` times.
    overlap : int, default 2
        Partitioned backend: the cells each row belongs to (in the first build, see
        ``target_recall``), 1 <= ``overlap`` <= ``n_partitions``.
    nndescent_kwds : dict or None, default None
        Extra arguments of ``pynndescent.NNDescent`` (``n_trees``, ``n_iters``,
        ``max_candidates``, ...).
    target_recall : float in (0, 1] or None, default TARGET_RECALL
        NN-descent and partitioned with a metric of ``blocks.kernels.METRICS``: the recall
        (0.9) the graph should reach on a sample of rows against exact neighbours; short of
        it, NN-descent builds again with a denser search graph, the partitioned backend with
        each row in twice as many cells (up to ``MAX_OVERLAP``). None: no check.
    recall_budget : float or None, default None
        Seconds the rebuilds may take; None: four times the first build.
    where : str, default "X"
        The name of the input in error messages.
    sink : object or None, default None
        Where the partitioned backend on dask input writes the graph from the tasks that
        merge it, so that no n x k array reaches this process: an object (picklable) with
        ``n_samples``, ``n_neighbors``, ``rows_per_chunk``, ``info`` (a dict),
        ``write(start, stop, indices, distances)``, called in the tasks on row ranges that
        start on a multiple of ``rows_per_chunk``, and ``take(rows)``, the listed rows'
        indices and distances. Other backends and in-memory input ignore it.

    Returns
    -------
    KNNGraph or the sink
        n x k int64 indices and float64 distances; ``info`` holds the seconds, the rows with
        an exact duplicate, the recall rounds (``info["recall_search"]``) and, for the
        partitioned backend, its cells and rows left short of k (index -1). When the graph
        was written to ``sink``, the sink itself, with that ``info``.

    Raises
    ------
    InputError
        ``X`` is not a finite 2-D numeric array; ``n_neighbors``, ``backend``, ``metric``,
        ``metric_kwds``, ``target_recall``, ``recall_budget``, ``n_partitions`` or
        ``overlap`` is out of range; every row has at least k exact duplicates.
    InputTypeError
        ``X`` is not numeric; sparse ``X`` with a metric outside ``SPARSE_KNN_METRICS`` or
        the partitioned backend.
    """
    X = check_array(X, method="The kNN graph", where=where, accept_sparse=True)
    n = X.shape[0]
    k = check_n_neighbors(n_neighbors, n)
    check_target_recall(target_recall, recall_budget)
    metric_kwds = dict(metric_kwds or {})
    asked, backend = backend, choose_backend(backend, n, X, k, metric)
    builder = BACKENDS[backend]
    builder.check(metric, metric_kwds, is_sparse_input(X), where)
    options = BuildOptions(
        random_state, n_partitions, overlap, nndescent_kwds, target_recall, recall_budget, sink
    )
    t0 = time.perf_counter()
    idx, dist, info = builder.build(X, k, metric, metric_kwds, options)
    if dist is None:  # written to the sink: the ranges' summaries stand for the arrays
        ranges = info.pop("ranges")
        zero = all(r["finite"] for r in ranges) and max(r["max"] for r in ranges) == 0
        _refuse_all_duplicates(zero, n, k, where)
        duplicates = sum(r["duplicates"] for r in ranges)
    else:
        _refuse_all_duplicates(bool(np.isfinite(dist).all() and dist.max() == 0), n, k, where)
        duplicates = int((dist[:, 0] == 0).sum())
    if asked == "auto" and backend == "partitioned":
        need = nndescent_task_bytes(n, X.shape[1], X.dtype.itemsize, k) / 2**30
        info["why_partitioned"] = (
            f"NN-descent in one task would need about {need:.1f} GiB, "
            f"over {GATHER_SHARE:g} of the smallest worker's memory"
        )
    info.update(
        {
            "n_neighbors": k,
            "seconds": round(time.perf_counter() - t0, 3),
            "n_rows_with_duplicates": duplicates,
            **({"metric_kwds": metric_kwds} if metric_kwds else {}),
        }
    )
    if dist is None:
        sink.metric, sink.backend = metric, backend
        sink.info.update(info)
        return sink
    return KNNGraph(idx, dist, metric, backend, info)


MAX_OVERLAP = 32  # partitioned: the most cells a row is searched in by the recall search


def _partitioned_to_target(X, k, metric, metric_kwds, random_state, cells, extra, sink, goal):
    """The partitioned backend, built again with each row in twice as many cells while its
    recall on a sample of rows is short of the target (the recall grows with the overlap,
    each doubling about doubles the work): ``cells`` is (n_partitions, overlap), ``goal``
    (target, budget). Without ``n_partitions`` each round's cells keep ~CELL_ROWS rows (their
    count grows with the overlap), so that a cell's task needs the memory of the first
    round's. ``info["recall_search"]``: the rounds and why the search stopped."""
    (n_partitions, overlap), (target, budget) = cells, goal
    t0 = time.perf_counter()
    idx, dist, info = _partitioned(
        X, k, metric, metric_kwds, random_state, n_partitions, overlap, extra, sink
    )
    first = time.perf_counter() - t0
    if target is None or metric not in METRICS:
        return idx, dist, info
    n, seed = X.shape[0], random_state if isinstance(random_state, numbers.Integral) else 0

    def measured(idx, dist):
        if dist is None:  # read where it was written
            graph = sink
            sink.metric, sink.backend = metric, "partitioned"
            sink.info.update({"metric_kwds": metric_kwds} if metric_kwds else {})
        else:
            graph = KNNGraph(idx, dist, metric, "partitioned", {"metric_kwds": metric_kwds})
        got = sample_recall(X, graph, RECALL_SAMPLE, random_state=int(seed) + 7919)
        return got["recall"], got["sample_rows"]

    t1 = time.perf_counter()
    recall, rows = measured(idx, dist)
    rounds = [
        {
            "overlap": int(overlap),
            "n_partitions": info["n_partitions"],
            "seconds": round(first, 3),
            "recall": recall,
        }
    ]
    budget = BUDGET_FACTOR * first if budget is None else float(budget)
    spent, stop = time.perf_counter() - t1, None
    while recall < target:
        last = rounds[-1]
        nxt = 2 * last["overlap"]
        count = n_partitions or max(2, math.ceil(nxt * n / CELL_ROWS))
        if nxt > MAX_OVERLAP or nxt >= count or count > n // 2:
            stop = (
                f"overlap at its maximum ({last['overlap']} cells a row, of {last['n_partitions']})"
            )
            break
        # the last build's time, times the growth of the rows searched (the first build's
        # includes the start: numba's compile, the sample's k-means)
        predicted = last["seconds"] * nxt / last["overlap"]
        if spent + predicted > budget:
            stop = (
                f"time budget: the next round (about {predicted:.0f} s) would exceed {budget:.0f} s"
            )
            break
        t2 = time.perf_counter()
        i2, d2, info2 = _partitioned(
            X, k, metric, metric_kwds, random_state, n_partitions, nxt, extra, sink
        )
        r2, _ = measured(i2, d2)
        took = time.perf_counter() - t2
        spent += took
        rounds.append(
            {
                "overlap": nxt,
                "n_partitions": info2["n_partitions"],
                "seconds": round(took, 3),
                "recall": r2,
            }
        )
        # a graph written to the sink is replaced by the new one; one in memory is kept if better
        if d2 is None or r2 > recall:
            idx, dist, info, recall = i2, d2, info2, r2
        del i2, d2
    info["recall_search"] = {
        "target": float(target),
        "estimate": recall,
        "sample_rows": rows,
        "met": recall >= target,
        "rounds": rounds,
        "budget_seconds": round(budget, 3),
        **({"stopped": stop} if stop and recall < target else {}),
    }
    return idx, dist, info


def _refuse_all_duplicates(all_zero: bool, n: int, k: int, where: str) -> None:
    """Refuse a graph whose every distance is 0 (``all_zero``)."""
    if all_zero:
        raise InputError(
            f"Every row of {where} has at least {k} exact duplicates "
            f"(all {n} rows may be identical): a neighbour graph of them has no "
            "structure to embed.",
            "remove duplicate rows (np.unique(X, axis=0)) "
            "or check that the input was read correctly.",
        )


# --------------------------------------------------------------------------- exact


def _exact(X, k: int, metric: str, kw: dict):
    p = float(kw.get("p", 2.0))
    n, d = X.shape
    if (
        metric == "euclidean"
        and not is_sparse_input(X)
        and d <= KDTREE_MAX_DIM
        and n >= KDTREE_MIN_ROWS
        and (not is_dask(X) or 8 * n * (d + 2 * (k + 5)) <= KDTREE_TASK_BYTES)
    ):
        from dask import delayed

        ids = np.arange(X.shape[0])
        if not is_dask(X):
            return drop_self(*kdtree_topk(X, k + 1), ids, k)
        (found,) = compute(delayed(kdtree_topk, pure=True)(X, k + 1), stage="exact kNN graph")
        return drop_self(*found, ids, k)
    if not is_dask(X):
        idx, dist = block_topk(X, X, k + 1, metric=metric, p=p)
        return drop_self(idx, dist, np.arange(X.shape[0]), k)
    from dask import delayed

    X = X if X.numblocks[1] == 1 else X.rechunk({1: -1})
    blocks = X.to_delayed().ravel()
    offsets = np.concatenate([[0], np.cumsum(X.chunks[0])[:-1]]).astype(int)
    topk = delayed(block_topk, pure=True)
    merge = delayed(merge_topk, pure=True)
    finish = delayed(drop_self, pure=True)
    rows = []
    for i, xi in enumerate(blocks):
        cands = [
            topk(xi, xj, k + 1, b_offset=int(offsets[j]), metric=metric, p=p)
            for j, xj in enumerate(blocks)
        ]
        while len(cands) > 1:  # tree merge over the column chunks
            cands = [
                merge(cands[t], cands[t + 1], k + 1) if t + 1 < len(cands) else cands[t]
                for t in range(0, len(cands), 2)
            ]
        ids = np.arange(offsets[i], offsets[i] + X.chunks[0][i])
        rows.append(finish(cands[0][0], cands[0][1], ids, k))
    parts = compute(*rows, stage="exact kNN graph")
    return (np.concatenate([q[0] for q in parts]), np.concatenate([q[1] for q in parts]))


# --------------------------------------------------------------------------- recall


def _sample(X, rows: np.ndarray):
    """Rows ``rows`` (sorted) of X in float64: NumPy, or CSR for sparse input."""
    if is_sparse_input(X):
        if is_dask(X):
            (part,) = compute(X[rows], stage="recall sample")
        else:
            part = X[rows]
        return csr64(part)
    from ..linalg.landmarks import take_rows

    return take_rows(X, rows, "recall sample").astype(np.float64)


def sample_recall(X, graph: KNNGraph, n_samples: int = 1000, random_state=0) -> dict:
    """The recall of a kNN graph against exact neighbours, on a random sample of rows.

    The recall is the share of a row's listed neighbours that lie within its exact k-th
    neighbour distance (so ties and duplicates count as found). One pass over ``X``: the
    sample against all rows, one task per row chunk for dask input.

    Parameters
    ----------
    X : array-like, dask array or sparse matrix of shape (n_samples, n_features)
        The rows the graph was built from.
    graph : KNNGraph or a graph written to a sink (see `knn_graph`)
        The graph to measure; of a sink only the sampled rows are read.
    n_samples : int, default 1000
        Rows sampled (all rows when there are fewer).
    random_state : int, numpy Generator or None, default 0
        Seeds the sample.

    Returns
    -------
    dict
        ``recall``, ``sample_rows`` and ``exact_recall_by_index`` (the share of the exact
        neighbours' indices that are listed). For a metric without an exact reference here
        (not in ``blocks.kernels.METRICS``): ``recall`` None and ``why``.
    """
    n, k = graph.n_samples, graph.n_neighbors
    if graph.metric not in METRICS:
        return {"recall": None, "why": f"no exact reference for metric {graph.metric!r}"}
    rng = check_random_state(random_state)
    rows = np.sort(rng.choice(n, size=min(n, n_samples), replace=False))
    sample = _sample(X, rows)
    p = float(graph.info.get("metric_kwds", {}).get("p", 2.0))
    if is_dask(X):
        from dask import delayed

        Xc = X if X.numblocks[1] == 1 else X.rechunk({1: -1})
        offsets = np.concatenate([[0], np.cumsum(Xc.chunks[0])[:-1]]).astype(int)
        topk = delayed(block_topk, pure=True)
        cands = [
            topk(sample, xj, k + 1, b_offset=int(o), metric=graph.metric, p=p)
            for xj, o in zip(Xc.to_delayed().ravel(), offsets)
        ]
        cands = list(compute(*cands, stage="recall: exact neighbours of the sample"))
        while len(cands) > 1:
            cands = [
                merge_topk(cands[t], cands[t + 1], k + 1) if t + 1 < len(cands) else cands[t]
                for t in range(0, len(cands), 2)
            ]
        ex_i, ex_d = cands[0]
    else:
        ex_i, ex_d = block_topk(sample, X, k + 1, metric=graph.metric, p=p)
    ex_i, ex_d = drop_self(ex_i, ex_d, rows, k)
    if isinstance(graph, KNNGraph):
        got_i, got_d = graph.indices[rows], graph.distances[rows]
    else:  # read where the graph is: scattered rows decode every stored chunk they touch
        from dask import delayed

        ((got_i, got_d),) = compute(
            delayed(graph.take)(rows), stage="recall: the sample's listed neighbours"
        )
    return {
        "recall": recall_at(got_d, ex_d[:, -1]),
        "sample_rows": int(rows.size),
        "exact_recall_by_index": float(
            np.mean([len(set(a) & set(b)) / k for a, b in zip(got_i, ex_i)])
        ),
    }
