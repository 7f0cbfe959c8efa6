"""NN-descent for the kNN graph (`graphs.knn`, backend ``nndescent``): pynndescent's
NN-descent on rows put in a locality order first, and the rounds that search again, denser,
until the graph reaches a target recall on a sample of rows (or its time budget runs out).

For dask input the rows are gathered into one task on one worker (`_nndescent_any`), which
uses that worker's cores through numba's threads.
"""

from __future__ import annotations

import math
import numbers
import os
import sys
import time

import numpy as np

from .._compute import compute
from .._validation import check_random_state, is_dask
from ..blocks.kernels import METRICS
from ..blocks.neighbors import block_topk, drop_self, exact_kth_distance, recall_at
from ..errors import InputError

TARGET_RECALL = 0.9  # the sample recall a graph should reach (see `_nndescent_to_target`)


def _nndescent_kw(n: int, random_state, extra) -> dict:
    seed = (
        random_state
        if isinstance(random_state, numbers.Integral)
        else int(check_random_state(random_state).integers(2**31 - 1))
    )
    # pynndescent's defaults: an earlier stop (delta 0.01) made no difference on a quiet
    # machine at 1 000 000 x 50 (bench/HISTORY.md, third kNN run)
    return {"random_state": int(seed), **dict(extra or {})}


# NN-descent compares each row with its neighbours' neighbours: with rows in their given order
# those reads jump around the whole array (200 MB at 1 000 000 x 50 float32, far beyond the
# caches). Rows are first put in the leaf order of one random projection tree, so that near
# rows sit near each other in memory; the graph is mapped back to the given row numbers.
# The order costs one tree and one gather of the rows, far less than the reads it saves (see
# bench/HISTORY.md, "kNN stage at 1 000 000 x 50, rows in locality order"). Below this size
# the data fit in the caches and the order buys nothing.
LOCALITY_MIN_BYTES = 32 * 2**20
LOCALITY_LEAF = 256  # rows per leaf of the ordering tree
_GATHER_ROWS = 65_536  # rows per block when the ordered float32 copy is gathered from other input
_ANGULAR = ("cosine", "correlation", "dot", "inner_product", "hellinger", "true_angular")
# pynndescent's metrics (the partitioned cells and NN-descent take these)
NNDESCENT_METRICS = (
    "euclidean",
    "sqeuclidean",
    "cosine",
    "manhattan",
    "chebyshev",
    "minkowski",
    "correlation",
    "hamming",
    "jaccard",
    "canberra",
    "braycurtis",
    "haversine",
    "hellinger",
    "l1",
    "l2",
    "taxicab",
    "linf",
    "dot",
    "inner_product",
    "seuclidean",
    "mahalanobis",
    "wminkowski",
    "spearmanr",
    "true_angular",
    "jensen_shannon",
    "symmetric_kl",
)


def pynndescent_cached():
    """Import pynndescent with numba's on-disk cache on for its compiled functions.

    pynndescent declares most of its numba functions without ``cache=True``, so every fresh
    process (each Dask worker, each run) compiles them again on its first graph; cached, a
    fresh process's first graph takes well under half the time (`bench/RESULTS.md`,
    "pynndescent's compiled functions cached on disk"). The rest is compiled again each
    time: functions that take a distance function as an argument are typed by that
    function's identity, which a cache cannot match across processes. The cache lives where
    numba keeps ``cache=True`` functions (``__pycache__`` beside the package, or
    ``NUMBA_CACHE_DIR``) and is keyed on the source files, so a different pynndescent
    release compiles afresh. ``DIMRED_NUMBA_CACHE=0`` in the environment leaves pynndescent
    as it is.
    """
    global _CACHED
    import pynndescent

    if not _CACHED and os.environ.get("DIMRED_NUMBA_CACHE", "1") != "0":
        _CACHED = True
        try:
            from numba.core.dispatcher import Dispatcher

            for name, mod in list(sys.modules.items()):
                if not name.startswith("pynndescent.") or mod is None:
                    continue
                for obj in list(vars(mod).values()):
                    if (
                        isinstance(obj, Dispatcher)
                        and type(obj._cache).__name__ == "NullCache"
                        and obj.py_func.__name__ not in _UNCACHEABLE
                    ):
                        obj.enable_caching()
        except Exception:  # an optimisation only: without it pynndescent compiles as before
            pass
    return pynndescent


_CACHED = False
# pynndescent's functions that numba refuses to cache (they use dynamic globals: it would warn
# on each compile)
_UNCACHEABLE = frozenset({"nn_descent", "nn_descent_internal"})


def locality_order(x: np.ndarray, seed: int, angular: bool = False) -> np.ndarray | None:
    """A permutation of the rows of ``x`` (float32, C order) in the leaf order of one random
    projection tree (pynndescent's leaf-only forest): rows close in space become close in
    memory. None if that forest builder is unavailable (then rows stay in their order)."""
    try:
        pynndescent_cached()
        from pynndescent.hybrid_forest import make_hybrid_leaf_array
    except ImportError:  # pynndescent < 0.7: no leaf-only builder; the order is optional
        return None
    leaves = make_hybrid_leaf_array(x, 1, LOCALITY_LEAF, int(seed), angular=angular)
    order = leaves.ravel()
    order = order[order >= 0]
    return order if order.size == x.shape[0] else None


def nndescent(x: np.ndarray, k: int, metric: str, metric_kwds: dict, kwds: dict):
    """pynndescent on an in-memory block; (indices (len, k) int64, distances float64) with
    self excluded. Runs where it is called (the client, or a worker's task)."""
    idx, dist, _ = _nndescent_compact(x, k, metric, metric_kwds, kwds)
    return idx.astype(np.int64), dist.astype(np.float64)


def _nndescent_compact(
    x: np.ndarray,
    k: int,
    metric: str,
    metric_kwds: dict,
    kwds: dict,
    locality: bool | None = None,
    target=None,
    budget=None,
):
    """`nndescent` in pynndescent's own dtypes (int32 indices, float32 distances: half the
    bytes to move from a worker to the client; widening float32 to float64 is exact, so
    sorting here gives the same order), and the seconds it took: {"order": the locality
    order (see LOCALITY_MIN_BYTES; ``locality`` None: by size), "nndescent": building the
    graph, "tidy": mapped back, ties ordered, self dropped}."""
    t0 = time.perf_counter()
    if x.shape[0] <= 4 * (k + 1):  # too small for NN-descent's trees: brute force
        x = x if _issparse(x) else np.ascontiguousarray(x)
        idx, dist = block_topk(
            x,
            x,
            k + 1,
            metric=metric if metric in METRICS else "euclidean",
            p=float(metric_kwds.get("p", 2.0)),
        )
        idx, dist = drop_self(idx, dist, np.arange(x.shape[0]), k)
        return idx, dist, {"nndescent": round(time.perf_counter() - t0, 3), "tidy": 0.0}
    x, order = _locality_prepare(x, metric, kwds, locality)
    return _nndescent_to_target(
        x, order, k, metric, metric_kwds, kwds, time.perf_counter() - t0, target, budget
    )


def _locality_prepare(x: np.ndarray, metric: str, kwds: dict, locality: bool | None):
    """(x as float32 in C order, in locality order if asked or big enough; that order or
    None). pynndescent works in float32 (it converts anything else), so the ordered rows are
    float32 and NN-descent makes no copy of its own. At most one float32 copy besides the given
    x is held at a time (never the converted copy and its ordered copy together). The caller
    should drop its reference to the given x, which is then freed before NN-descent starts.
    Sparse x: float32 CSR, in the given order (the ordering tree is built on dense rows)."""
    if _issparse(x):
        return _csr32(x), None
    given, x = x, np.ascontiguousarray(x, dtype=np.float32)
    if locality is None:
        locality = x.nbytes >= LOCALITY_MIN_BYTES
    if not locality:
        return x, None
    seed = kwds.get("random_state", 0)
    order = locality_order(
        x, int(seed) if isinstance(seed, numbers.Integral) else 0, angular=metric in _ANGULAR
    )
    if order is None:
        return x, None
    if x is given:
        return x[order], order
    # x is a converted copy (float64 or non-C input): drop it and gather from the given rows
    # in blocks, so the given array, one float32 copy and a block are held, not two copies
    del x
    out = np.empty(given.shape, dtype=np.float32)
    for lo in range(0, order.size, _GATHER_ROWS):
        out[lo : lo + _GATHER_ROWS] = given[order[lo : lo + _GATHER_ROWS]]
    return out, order


def _nndescent_ordered(
    x: np.ndarray,
    order,
    k: int,
    metric: str,
    metric_kwds: dict,
    kwds: dict,
    seconds_order: float,
    search_k: int | None = None,
):
    """NN-descent on float32 ``x`` whose row i is given row ``order[i]`` (None: the given
    order); the graph in the given row numbers. ``search_k`` > k: the search keeps that many
    neighbours per row (a denser graph to walk: higher recall on hard data) and the nearest k
    are returned."""
    NNDescent = pynndescent_cached().NNDescent

    n = x.shape[0]
    t_order = time.perf_counter()
    index = NNDescent(
        x,
        n_neighbors=max(k, search_k or k) + 1,
        metric=metric,
        metric_kwds=metric_kwds or None,
        compressed=True,
        **kwds,
    )
    idx, dist = index.neighbor_graph
    del index, x
    t1 = time.perf_counter()
    if order is not None:  # back to the given row numbers: row order[i] is row i here
        back_idx = np.empty_like(idx)
        back_idx[order] = np.where(idx >= 0, order.astype(idx.dtype)[idx], -1)
        back_dist = np.empty_like(dist)
        back_dist[order] = dist
        idx, dist = back_idx, back_dist
    else:  # pynndescent's arrays may be read-only views
        dist = np.array(dist)
    idx = idx.astype(np.int64 if n > np.iinfo(np.int32).max else np.int32, copy=False)
    if dist.dtype != np.float32:
        dist = dist.astype(np.float64, copy=False)
    # NN-descent may leave -1 where it found fewer candidates; treat them as far away
    dist[idx < 0] = np.inf
    # NN-descent lists each row by distance; only rows with a tie (or out of order) need the
    # sort by (distance, index), so the few such rows are sorted, not the whole array
    step = np.diff(dist, axis=1)
    redo = np.nonzero((step <= 0).any(axis=1))[0]
    if redo.size:
        srt = np.lexsort((idx[redo], dist[redo]), axis=1)
        idx[redo] = np.take_along_axis(idx[redo], srt, 1)
        dist[redo] = np.take_along_axis(dist[redo], srt, 1)
    idx, dist = drop_self(idx, dist, np.arange(n), k)
    return (
        idx,
        dist,
        {
            "order": round(seconds_order, 3),
            "nndescent": round(t1 - t_order, 3),
            "tidy": round(time.perf_counter() - t1, 3),
        },
    )


# ---- a stated recall: NN-descent's recall falls with the data's intrinsic dimension (on
# isotropic high-dimensional blobs it ends well short of TARGET_RECALL with pynndescent's
# defaults; bench/RESULTS.md, kNN). After the first build
# the task measures its recall on a sample against exact neighbours; while short of the target
# it builds again with a denser search graph (more neighbours kept per row, more candidates per
# join), and keeps the best graph, until the target or the time budget is met.
RECALL_SAMPLE = 500  # rows of the in-task estimate (the flow's stage measures 1000 again)
SEARCH_GROWTH = 1.5  # search neighbours per row, per improvement round
SEARCH_MAX_CANDIDATES = 60  # pynndescent's candidates per join in improvement rounds
SEARCH_MAX_NEIGHBORS = 128
BUDGET_FACTOR = 4.0  # default time budget of the improvement rounds: times the first build
COST_EXPONENT = 1.6  # a round's predicted time: first build x (search / k) ** this


def check_target_recall(target_recall, recall_budget) -> None:
    ok = target_recall is None or (
        isinstance(target_recall, numbers.Real)
        and not isinstance(target_recall, bool)
        and 0 < float(target_recall) <= 1
    )
    if not ok:
        raise InputError(
            f"target_recall must be a number in (0, 1] or None; found {target_recall!r}.",
            f"pass target_recall={TARGET_RECALL} (the "
            "share of true neighbours the graph should list), or None to skip "
            "the check.",
        )
    ok = recall_budget is None or (
        isinstance(recall_budget, numbers.Real)
        and not isinstance(recall_budget, bool)
        and float(recall_budget) >= 0
    )
    if not ok:
        raise InputError(
            f"recall_budget must be a number of seconds >= 0 or None; found {recall_budget!r}.",
            f"leave it out (up to {BUDGET_FACTOR:g} times "
            "the first build's time is spent improving a graph short of the "
            "target), or pass seconds.",
        )


# A pilot predicts the recall of the first build on hard data, so that its cost is not spent
# on a graph that will be built again: NN-descent on two random subsets (the larger of 30 000
# rows and n / 25, and a quarter of that), each one's recall measured exactly on 300 of its
# rows, extrapolated in log(rows) to n (recall falls with n). The subsets are small against n,
# so the pilot costs a small part of the first build, and less the larger n is. A subset of a
# few thousand rows has a recall near 1 even on data hard at n (no signal to extrapolate),
# hence the minimum n. The extrapolation is optimistic: a graph still short after the first
# build is built again as without a pilot.
PILOT_MIN_ROWS = 200_000
PILOT_ROWS = 30_000
PILOT_SHARES = (1 / 100, 1 / 25)
PILOT_SAMPLE = 300


def _denser(kwds: dict) -> dict:
    """NN-descent's settings with SEARCH_MAX_CANDIDATES candidates per join (at least)."""
    return {
        **kwds,
        "max_candidates": max(int(kwds.get("max_candidates") or 0), SEARCH_MAX_CANDIDATES),
    }


def _sample_kth(x, pos, listed, k, metric, p) -> np.ndarray:
    """Exact k-th distances of rows ``pos`` of x, bounded by their listed k-th distances (k
    real rows; float32 rounding allowed for)."""
    last = listed[:, -1]
    bound = np.where(np.isfinite(last), last * (1 + 1e-4) + 1e-12, np.inf)
    return exact_kth_distance(x, pos, k, metric, p, bound)


def _pilot(x, k, metric, metric_kwds, kwds, p) -> dict:
    t0 = time.perf_counter()
    n = x.shape[0]
    rng = np.random.default_rng(int(kwds.get("random_state", 0)) + 104_729)
    sizes, recalls = [], []
    big = max(PILOT_ROWS, int(n * PILOT_SHARES[1]))
    for m in (int(big * PILOT_SHARES[0] / PILOT_SHARES[1]), big):
        xs = x[np.sort(rng.choice(n, m, replace=False))]
        _, dist, _ = _nndescent_ordered(xs, None, k, metric, metric_kwds, kwds, 0.0)
        rows = np.sort(rng.choice(m, min(m, PILOT_SAMPLE), replace=False))
        kth = _sample_kth(xs, rows, dist[rows], k, metric, p)
        sizes.append(m)
        recalls.append(recall_at(dist[rows], kth))
    slope = max(0.0, (recalls[0] - recalls[1]) / math.log(sizes[1] / sizes[0]))
    return {
        "rows": sizes,
        "recall": recalls,
        "predicted": recalls[1] - slope * math.log(n / sizes[1]),
        "seconds": round(time.perf_counter() - t0, 3),
    }


def _round_bytes(n: int, search: int) -> int:
    """pynndescent's arrays for a search of ``search`` neighbours with SEARCH_MAX_CANDIDATES
    candidates: the heap (index, distance, flag) and the new / old candidate lists."""
    return int(n * ((search + 1) * 9 + 4 * SEARCH_MAX_CANDIDATES * 8))


def _room_left() -> int | None:
    """Bytes below 90 % of this worker's memory limit, or None outside a worker / no limit."""
    try:
        import psutil
        from distributed import get_worker

        limit = get_worker().memory_manager.memory_limit
    except (ImportError, ValueError, AttributeError):
        return None
    if not limit:
        return None
    return int(0.9 * limit - psutil.Process().memory_info().rss)


def _nndescent_to_target(x, order, k, metric, metric_kwds, kwds, seconds_order, target, budget):
    """`_nndescent_ordered`, then improvement rounds while the sample recall is short of
    ``target`` (None: no check); the seconds dict gains "recall": the rounds and verdict."""
    if target is None or metric not in METRICS:
        return _nndescent_ordered(x, order, k, metric, metric_kwds, kwds, seconds_order)
    n, p = x.shape[0], float(metric_kwds.get("p", 2.0))
    seed = int(kwds.get("random_state", 0))
    pilot = _pilot(x, k, metric, metric_kwds, kwds, p) if n >= PILOT_MIN_ROWS else None
    search = k
    if pilot is not None and pilot["predicted"] < target:  # hard data: start denser
        search, kwds = math.ceil(k * SEARCH_GROWTH), _denser(kwds)
    t0 = time.perf_counter()
    idx, dist, seconds = _nndescent_ordered(
        x, order, k, metric, metric_kwds, kwds, seconds_order, search
    )
    first, first_search = time.perf_counter() - t0, search
    rows = np.sort(
        np.random.default_rng(seed + 7919).choice(n, min(n, RECALL_SAMPLE), replace=False)
    )
    t1 = time.perf_counter()
    pos = rows
    if order is not None:  # rows of x are in locality order: given row r is x[inv[r]]
        inv = np.empty_like(order)
        inv[order] = np.arange(order.size, dtype=order.dtype)
        pos = inv[rows]
    kth = _sample_kth(x, pos, dist[rows], k, metric, p)
    recall = recall_at(dist[rows], kth)
    rounds = [
        {
            "search_neighbors": search,
            "max_candidates": kwds.get("max_candidates"),
            "seconds": round(first, 3),
            "recall": recall,
        }
    ]
    budget = BUDGET_FACTOR * first if budget is None else float(budget)
    spent, stop = time.perf_counter() - t1, None
    while recall < target:
        nxt = min(SEARCH_MAX_NEIGHBORS, max(search + 1, math.ceil(search * SEARCH_GROWTH)))
        if nxt <= search:
            stop = f"search neighbours at their maximum ({SEARCH_MAX_NEIGHBORS})"
            break
        predicted = first * ((nxt + 1) / (first_search + 1)) ** COST_EXPONENT
        if spent + predicted > budget:
            stop = (
                f"time budget: the next round (about {predicted:.0f} s) would exceed {budget:.0f} s"
            )
            break
        room = _room_left()
        if room is not None and _round_bytes(n, nxt) > room:
            stop = (
                f"worker memory: the next round needs about "
                f"{_round_bytes(n, nxt) / 2**30:.1f} GiB, {room / 2**30:.1f} GiB are left"
            )
            break
        search = nxt
        kw = {**_denser(kwds), "random_state": seed + len(rounds)}
        t2 = time.perf_counter()
        i2, d2, _ = _nndescent_ordered(x, order, k, metric, metric_kwds, kw, 0.0, search)
        r2 = recall_at(d2[rows], kth)
        took = time.perf_counter() - t2
        spent += took
        rounds.append(
            {
                "search_neighbors": search,
                "max_candidates": kw["max_candidates"],
                "seconds": round(took, 3),
                "recall": r2,
            }
        )
        if r2 > recall:
            idx, dist, recall = i2, d2, r2
        del i2, d2
    seconds["recall"] = {
        "target": float(target),
        "estimate": recall,
        "sample_rows": int(rows.size),
        "met": recall >= target,
        "rounds": rounds,
        "budget_seconds": round(budget, 3),
        **({"pilot": pilot} if pilot else {}),
        **({"stopped": stop} if stop and recall < target else {}),
    }
    return idx, dist, seconds


def _issparse(x) -> bool:
    import scipy.sparse as sp

    return sp.issparse(x)


def _csr32(x):
    """CSR rows in float32 (pynndescent's dtype), the index arrays shared."""
    import scipy.sparse as sp

    x = x.tocsr()
    if x.dtype == np.float32:
        return x
    return sp.csr_matrix((x.data.astype(np.float32), x.indices, x.indptr), shape=x.shape)


def _stack(chunks):
    """Row chunks as one array (CSR for sparse chunks)."""
    if len(chunks) == 1:
        return chunks[0]
    if _issparse(chunks[0]):
        import scipy.sparse as sp

        return sp.vstack(chunks, format="csr")
    return np.concatenate(chunks)


def _gathered_nndescent(k, metric, metric_kwds, kwds, target, budget, *chunks):
    x = _stack(chunks)
    if x.shape[0] <= 4 * (k + 1):
        return _nndescent_compact(x, k, metric, metric_kwds, kwds)
    t0 = time.perf_counter()
    # the gathered copy is freed here, not held through NN-descent (a second copy of the data
    # for the whole run otherwise)
    x, order = _locality_prepare(x, metric, kwds, None)
    idx, dist, seconds = _nndescent_to_target(
        x, order, k, metric, metric_kwds, kwds, time.perf_counter() - t0, target, budget
    )
    # the graph's own dtypes made here, so that the caller receives no copy to convert (at
    # 3 000 000 x 15 the int64 and float64 arrays are 0.7 GB)
    return idx.astype(np.int64), dist.astype(np.float64), seconds


def _nndescent_any(X, k, metric, metric_kwds, random_state, extra, target=None, budget=None):
    """(indices int64, distances float64, info with the seconds of each step and, with a
    target, the recall rounds)."""
    kw = _nndescent_kw(X.shape[0], random_state, extra)
    if not is_dask(X):
        idx, dist, seconds = _nndescent_compact(
            X, k, metric, metric_kwds, kw, target=target, budget=budget
        )
    else:
        from dask import delayed

        X = X if X.numblocks[1] == 1 else X.rechunk({1: -1})
        task = delayed(_gathered_nndescent, pure=True)(
            k, metric, metric_kwds, kw, target, budget, *X.to_delayed().ravel()
        )
        (out,) = compute(task, stage="NN-descent kNN graph (one worker)")
        idx, dist, seconds = out
    info = {"seconds_in_task": seconds}
    if "recall" in seconds:
        info["recall_search"] = seconds.pop("recall")
    return (idx.astype(np.int64, copy=False), dist.astype(np.float64, copy=False), info)
