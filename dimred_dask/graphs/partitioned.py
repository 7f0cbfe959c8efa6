"""The partitioned backend of the kNN graph (`graphs.knn`, ``backend="partitioned"``): for
data larger than one worker's memory.

Coarse cells are k-means centres of a sample; every row belongs to its ``overlap`` nearest
cells; NN-descent (brute force for cells up to ``SMALL_CELL`` rows) runs inside each cell as
its own task; the candidates of a row from its cells are merged by row range on the workers.
Points near cell borders see both sides; on data of high intrinsic dimension a row's true
neighbours still fall in other cells, and the recall grows with the overlap (each doubling
about doubles the work; `graphs.knn` searches over it towards a target recall).
"""

from __future__ import annotations

import math
import numbers

import numpy as np

from .._compute import active_client, compute
from .._validation import check_random_state, is_dask
from ..blocks.landmarks import kmeans
from ..blocks.neighbors import block_topk, drop_self, merge_candidates
from ..errors import InputError
from .nndescent import NNDESCENT_METRICS, _nndescent_compact, _nndescent_kw

SMALL_CELL = 5_000  # cells up to this size are searched by brute force

# partitioned: default rows per cell (before the overlap). A cell's NN-descent task holds
# several times the cell's own data in worker memory, and k-means cells of clustered data come
# out unequal (the largest well above the mean), so cells are kept small enough that the
# largest still fits a worker.
CELL_ROWS = 100_000
MERGE_ROWS = 250_000  # partitioned on a cluster: rows whose candidates are merged in one task


def _nearest_cells(block: np.ndarray, centres: np.ndarray, overlap: int) -> np.ndarray:
    from ..blocks.kernels import sqeuclidean_block

    d = sqeuclidean_block(np.asarray(block, np.float64), centres)
    part = (
        np.argpartition(d, overlap - 1, axis=1)[:, :overlap]
        if overlap < d.shape[1]
        else np.tile(np.arange(d.shape[1]), (d.shape[0], 1))
    )
    return part.astype(np.int32)


def _cell_knn(
    rows: np.ndarray, members: np.ndarray, k: int, metric: str, metric_kwds: dict, kwds: dict
):
    """kNN inside one cell; (point, neighbour, distance) triples in global row numbers, int32
    / float32 from NN-descent where the row numbers allow (12 bytes an edge instead of 24)."""
    kk = min(k, rows.shape[0] - 1)
    if kk < 1:
        return (np.empty(0, np.int64),) * 2 + (np.empty(0),)
    if rows.shape[0] <= SMALL_CELL or metric not in NNDESCENT_METRICS:
        idx, dist = block_topk(
            rows, rows, kk + 1, metric=metric, p=float(metric_kwds.get("p", 2.0))
        )
        idx, dist = drop_self(idx, dist, np.arange(rows.shape[0]), kk)
    else:
        idx, dist, _ = _nndescent_compact(rows, kk, metric, metric_kwds, kwds)
    if members.size and members[-1] < np.iinfo(np.int32).max:
        members = members.astype(np.int32)
    valid = idx >= 0
    point = np.repeat(members, kk).reshape(-1, kk)[valid]
    return point, members[idx[valid]], dist[valid]


def _split_by_rows(part, cuts: np.ndarray) -> list:
    """A cell's (point, neighbour, distance) triples cut by the row ranges ``cuts`` of their
    point (the points come in order: the cell's sorted members, k each)."""
    at = np.searchsorted(part[0], cuts)
    return [tuple(q[at[b] : at[b + 1]] for q in part) for b in range(len(cuts) - 1)]


def _merge_range(lo: int, hi: int, k: int, *pieces):
    """The best k neighbours of rows [lo, hi) from the cells' triples of those rows."""
    if not pieces:
        return np.full((hi - lo, k), -1, np.int64), np.full((hi - lo, k), np.inf)
    return merge_candidates(
        np.concatenate([q[0] for q in pieces]).astype(np.int64) - lo,
        np.concatenate([q[1] for q in pieces]),
        np.concatenate([q[2] for q in pieces]),
        hi - lo,
        k,
        offset=lo,
    )


def _merge_range_to(sink, lo: int, hi: int, k: int, *pieces) -> dict:
    """`_merge_range`, written to ``sink``; what the caller needs of those rows."""
    idx, dist = _merge_range(lo, hi, k, *pieces)
    sink.write(lo, hi, idx, dist)
    return {
        "short": int((idx < 0).any(axis=1).sum()),
        "duplicates": int((dist[:, 0] == 0).sum()) if dist.size else 0,
        "finite": bool(np.isfinite(dist).all()),
        "max": float(dist.max()) if dist.size else 0.0,
    }


def _range_cuts(n: int, sink) -> np.ndarray:
    """Row ranges of about MERGE_ROWS; on the sink's chunk rows when there is one (a range's
    writes then touch chunks of its own only)."""
    if sink is None:
        return np.linspace(0, n, max(1, math.ceil(n / MERGE_ROWS)) + 1).astype(np.int64)
    step = max(1, round(MERGE_ROWS / sink.rows_per_chunk)) * int(sink.rows_per_chunk)
    return np.append(np.arange(0, n, step), n).astype(np.int64)


def _cell_counts(cells: np.ndarray, n_partitions: int) -> np.ndarray:
    """How many rows of a block of ``cells`` (each row's nearest cells) each cell has."""
    out = np.zeros(n_partitions, np.int64)
    for j in range(cells.shape[1]):  # a row's cells are distinct: no row counted twice
        out += np.bincount(cells[:, j], minlength=n_partitions)
    return out[None, :]


def _cell_rows(block, cells: np.ndarray, c: int, start: int):
    """The rows of one block of X in cell ``c``, with their global row numbers."""
    sel = np.nonzero((cells == c).any(axis=1))[0]
    return np.asarray(block)[sel], sel + start


def _cell_knn_of_pieces(k, metric, metric_kwds, kwds, *pieces):
    """`_cell_knn` of a cell whose rows come from several blocks of X, in row order."""
    rows = np.concatenate([p[0] for p in pieces])
    members = np.concatenate([p[1] for p in pieces])
    return _cell_knn(rows, members, k, metric, metric_kwds, kwds)


def _cells_merged_on_workers(Xc, cells, counts, k, metric, metric_kwds, kw, sink=None):
    """The cells' kNN and their merge, all as tasks: each cell gathers its rows from the
    blocks of X that hold some (``cells``, each row's nearest cells, stays on the workers;
    ``counts`` says which blocks), its triples are cut by row ranges of MERGE_ROWS on its
    worker and each range merged there, so that the caller receives the n x k graph only
    (not the overlap x n x k triples, nor the cells' member lists in the task graph); with a
    ``sink``, each range is written from its task and the caller receives the ranges'
    summaries."""
    from dask import delayed

    n = Xc.shape[0]
    cuts = _range_cuts(n, sink)
    nb = len(cuts) - 1
    x_blocks = Xc.to_delayed().ravel()
    c_blocks = cells.to_delayed().ravel()
    starts = np.concatenate([[0], np.cumsum(Xc.chunks[0])[:-1]]).astype(int)
    take = delayed(_cell_rows, pure=True)
    cell = delayed(_cell_knn_of_pieces, pure=True)
    split = delayed(_split_by_rows, pure=True, nout=nb)
    pieces = []
    for c in range(counts.shape[1]):
        holding = np.nonzero(counts[:, c])[0]
        if holding.size:
            rows = [take(x_blocks[b], c_blocks[b], c, int(starts[b])) for b in holding]
            pieces.append(split(cell(k, metric, metric_kwds, kw, *rows), cuts))
    bounds = [(int(cuts[b]), int(cuts[b + 1])) for b in range(nb)]
    stage = f"partition ({cells.shape[1]} cells a row): kNN inside each cell, merged by row range"
    if sink is not None:
        merge = delayed(_merge_range_to, pure=False)
        merged = [
            merge(sink, lo, hi, k, *[p[b] for p in pieces]) for b, (lo, hi) in enumerate(bounds)
        ]
        return None, None, list(compute(*merged, stage=stage + ", written"))
    merge = delayed(_merge_range, pure=True)
    merged = [merge(lo, hi, k, *[p[b] for p in pieces]) for b, (lo, hi) in enumerate(bounds)]
    done = list(compute(*merged, stage=stage))
    idx, dist = np.empty((n, k), np.int64), np.empty((n, k))
    for b in range(nb):  # each range dropped once copied: ~one graph's worth held at a time
        idx[cuts[b] : cuts[b + 1]], dist[cuts[b] : cuts[b + 1]] = done[b]
        done[b] = None
    return idx, dist, None


def _partitioned(X, k, metric, metric_kwds, random_state, n_partitions, overlap, extra, sink):
    n = X.shape[0]
    rng = check_random_state(random_state)
    if n_partitions is None:
        n_partitions = max(2, math.ceil(overlap * n / CELL_ROWS))
    if (
        not isinstance(n_partitions, numbers.Integral)
        or not 2 <= n_partitions <= n // 2
        or not isinstance(overlap, numbers.Integral)
        or not 1 <= overlap <= n_partitions
    ):
        raise InputError(
            f"The partitioned kNN backend needs 2 <= n_partitions <= n/2 and "
            f"1 <= overlap <= n_partitions; found n_partitions={n_partitions!r}, "
            f"overlap={overlap!r} (n = {n}).",
            "leave n_partitions out (cells of ~100 000 rows) and overlap=2.",
        )
    from ..linalg.landmarks import take_rows

    sample_idx = np.sort(rng.choice(n, size=min(n, 50 * n_partitions, 100_000), replace=False))
    centres = kmeans(
        take_rows(X, sample_idx, "partition sample").astype(np.float64), int(n_partitions), rng
    ).astype(np.float64)
    kw = _nndescent_kw(n, random_state, extra)
    ranges = None
    if is_dask(X):
        Xc = X if X.numblocks[1] == 1 else X.rechunk({1: -1})
        cells = Xc.map_blocks(
            _nearest_cells, centres, overlap, chunks=(Xc.chunks[0], (overlap,)), dtype=np.int32
        )
        client = active_client()
        if client is not None:  # computed once, kept where it is for the cells' tasks
            cells = client.persist(cells)
        counts = cells.map_blocks(
            _cell_counts,
            n_partitions,
            chunks=((1,) * Xc.numblocks[0], (n_partitions,)),
            dtype=np.int64,
        )
        (counts,) = compute(counts, stage=f"partition ({overlap} cells a row): nearest cells")
        idx, dist, ranges = _cells_merged_on_workers(
            Xc, cells, counts, k, metric, metric_kwds, kw, sink
        )
        sizes = [int(s) for s in counts.sum(axis=0)]
        del cells
    else:
        cells = _nearest_cells(X, centres, overlap)
        members = [np.sort(np.nonzero((cells == c).any(axis=1))[0]) for c in range(n_partitions)]
        parts = [_cell_knn(X[m], m, k, metric, metric_kwds, kw) for m in members if m.size]
        idx, dist = _merge_range(0, n, k, *parts)
        sizes = [int(m.size) for m in members]
    info = {
        "n_partitions": int(n_partitions),
        "overlap": int(overlap),
        "cell_rows": {"min": min(sizes), "max": max(sizes)},
    }
    if ranges is None:
        info["rows_short_of_k"] = int((idx < 0).any(axis=1).sum())
    else:
        info["rows_short_of_k"] = sum(r["short"] for r in ranges)
        info["ranges"] = ranges
    return idx, dist, info
