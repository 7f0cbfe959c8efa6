"""Affinities of the neighbour-embedding methods, from the shared kNN graph.

- t-SNE: per row the Gaussian precision that gives the target perplexity (bisection to
  ``PERPLEXITY_TOL`` in entropy), p_{j|i} over the row's neighbours, then the joint
  P = (P_cond + P_cond^T) / 2n as a sparse symmetric matrix summing to 1.
- SNE: the conditional P_cond itself (rows sum to 1) and its transpose.
- UMAP: rho_i and sigma_i per row, memberships exp(-max(0, d - rho_i) / sigma_i), the fuzzy
  union p = a + b - ab of the graph and its transpose; ``find_ab`` fits the curve
  1 / (1 + a d^2b) to UMAP's offset exponential from ``min_dist`` and ``spread``.

The per-row work (the bisections) is blockwise: `affinity_block` does a block of rows of the
graph, `affinity_merge` combines the blocks. `affinities` runs them in this process;
`affinities_delayed` builds them as dask tasks (one per block of rows, on the workers, from a
graph scattered once) so that nothing passes through the client.
A `SparseAffinity` is CSR in plain arrays (int64 indptr, int32 indices, float64 data), which is
what the numba optimisers read.
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass

import numpy as np

from ..blocks.affinity_kernels import (
    MERGE_FUZZY,
    MERGE_SUM,
    perplexity_rows,
    reverse_entries,
    smooth_knn_rows,
    symmetric_merge,
    symmetric_merge_rows,
)
from ..blocks.affinity_kernels import (
    membership_rows as _membership,
)
from ..errors import InputError
from .knn import KNNGraph

__all__ = [
    "SparseAffinity",
    "GraphRows",
    "conditional_rows",
    "joint_affinities",
    "tsne_affinities",
    "sne_affinities",
    "fuzzy_rows",
    "fuzzy_affinities",
    "umap_affinities",
    "find_ab",
    "check_perplexity",
    "check_affinity",
    "affinities",
    "affinities_delayed",
    "affinity_block",
    "affinity_merge",
    "affinity_row_blocks_delayed",
    "affinity_rows_merge",
    "graph_rows",
    "AFFINITY_KINDS",
    "PERPLEXITY_TOL",
    "ROW_BLOCK",
]

PERPLEXITY_TOL = 1e-10  # |H_i - log(perplexity)| in nats reached by the bisection
PERPLEXITY_MAX_ITER = 200  # bisection steps: enough for double precision from any start
SMOOTH_K_TOL = 1e-5  # UMAP's tolerance on sum_j exp(...) - log2(k)
MIN_K_DIST_SCALE = 1e-3  # UMAP: sigma_i >= 1e-3 x the row's mean distance
ROW_BLOCK = 100_000  # rows per task when the per-row work runs on the workers


@dataclass
class SparseAffinity:
    """An n x m sparse matrix in CSR arrays."""

    indptr: np.ndarray  # (n + 1,) int64
    indices: np.ndarray  # (nnz,) int32
    data: np.ndarray  # (nnz,) float64
    shape: tuple

    @property
    def nnz(self) -> int:
        return int(self.data.size)

    def to_scipy(self):
        import scipy.sparse as sp

        return sp.csr_matrix((self.data, self.indices, self.indptr), shape=self.shape)

    @classmethod
    def from_scipy(cls, M) -> "SparseAffinity":
        M = M.tocsr()
        M.sort_indices()
        return cls(
            M.indptr.astype(np.int64),
            M.indices.astype(np.int32),
            M.data.astype(np.float64),
            tuple(M.shape),
        )

    def transpose(self) -> "SparseAffinity":
        return SparseAffinity.from_scipy(self.to_scipy().T)

    @classmethod
    def from_rows(cls, indices: np.ndarray, values: np.ndarray, m: int) -> "SparseAffinity":
        """A directed (n, k) neighbour list as CSR (missing neighbours, index -1, dropped)."""
        n, k = indices.shape
        keep = indices >= 0
        counts = keep.sum(axis=1)
        indptr = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
        return cls(indptr, indices[keep].astype(np.int32), values[keep].astype(np.float64), (n, m))


def check_perplexity(perplexity, n: int, k: int | None = None, method: str = "t-SNE") -> float:
    """0 < perplexity < n / 3 (and < k when the graph has only k neighbours)."""
    if (
        not isinstance(perplexity, numbers.Real)
        or isinstance(perplexity, bool)
        or not np.isfinite(perplexity)
        or perplexity <= 0
    ):
        raise InputError(
            f"{method} needs a positive perplexity; found {perplexity!r}.",
            "pass perplexity=30 (5 to 50 is usual).",
        )
    if perplexity >= n / 3:
        raise InputError(
            f"{method} needs perplexity < n_samples / 3 = {n / 3:.4g}; found "
            f"perplexity={perplexity!r} with {n} samples.",
            f"pass a perplexity below {n / 3:.4g} (each point's effective number "
            "of neighbours must leave room for the others).",
        )
    if k is not None and perplexity >= k:
        raise InputError(
            f"{method} with perplexity {perplexity!r} needs more than "
            f"{perplexity!r} neighbours per point; the kNN graph has {k}.",
            f"build the graph with n_neighbors >= {int(np.ceil(3 * perplexity))} "
            "(3 x perplexity), or lower the perplexity.",
        )
    return float(perplexity)


# --------------------------------------------------------------------------- t-SNE / SNE


def conditional_rows(
    distances: np.ndarray, perplexity: float, tol: float = PERPLEXITY_TOL
) -> tuple[np.ndarray, np.ndarray]:
    """(p_{j|i} (rows, k), beta (rows,)) for a block of rows of kNN distances (euclidean or any
    metric; the Gaussian is on squared distances)."""
    d2 = np.ascontiguousarray(distances, dtype=np.float64) ** 2
    P = np.empty_like(d2)
    beta = np.empty(d2.shape[0])
    err = np.empty(d2.shape[0])
    perplexity_rows(d2, float(np.log(perplexity)), float(tol), PERPLEXITY_MAX_ITER, P, beta, err)
    return P, beta


def joint_affinities(indices: np.ndarray, cond: np.ndarray) -> SparseAffinity:
    """P = (P_cond + P_cond^T) / 2n, symmetric, summing to 1."""
    n = indices.shape[0]
    indptr, cols, data = symmetric_merge(indices, cond, n, MERGE_SUM, scale=0.5 / n)
    return SparseAffinity(indptr, cols, data, (n, n))


def tsne_affinities(graph: KNNGraph, perplexity: float) -> SparseAffinity:
    """t-SNE's joint P from the kNN graph (see the module docstring), in this process."""
    return affinities(graph, "tsne", perplexity=perplexity)


def sne_affinities(graph: KNNGraph, perplexity: float) -> tuple[SparseAffinity, SparseAffinity]:
    """SNE's conditional P (rows sum to 1) and its transpose, in this process."""
    return affinities(graph, "sne", perplexity=perplexity)


# --------------------------------------------------------------------------- UMAP


def fuzzy_rows(
    distances: np.ndarray, k_eff: float, local_connectivity: float = 1.0, bandwidth: float = 1.0
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(memberships (rows, k), rho, sigma) of a block of rows of kNN distances (self
    excluded; ``k_eff`` counts the point itself, as UMAP's n_neighbors does)."""
    dist = np.ascontiguousarray(distances, dtype=np.float64)
    n = dist.shape[0]
    rho, sigma = np.empty(n), np.empty(n)
    smooth_knn_rows(
        dist,
        float(k_eff),
        float(local_connectivity),
        float(bandwidth),
        64,
        SMOOTH_K_TOL,
        MIN_K_DIST_SCALE,
        rho,
        sigma,
    )
    vals = np.empty_like(dist)
    _membership(dist, rho, sigma, vals)
    return vals, rho, sigma


def fuzzy_affinities(
    indices: np.ndarray, memberships: np.ndarray, set_op_mix_ratio: float = 1.0
) -> SparseAffinity:
    """The fuzzy union (``set_op_mix_ratio`` 1) / intersection (0) of the directed memberships
    and their transpose."""
    n = indices.shape[0]
    indptr, cols, data = symmetric_merge(
        indices, memberships, n, MERGE_FUZZY, mix=float(set_op_mix_ratio)
    )
    return SparseAffinity(indptr, cols, data, (n, n))


def umap_affinities(
    graph: KNNGraph,
    n_neighbors: int | None = None,
    local_connectivity: float = 1.0,
    set_op_mix_ratio: float = 1.0,
) -> SparseAffinity:
    """UMAP's fuzzy graph from the kNN graph, in this process: ``n_neighbors`` counts the
    point itself (UMAP's convention), so the graph's first n_neighbors - 1 neighbours are used."""
    return affinities(
        graph,
        "umap",
        n_neighbors=n_neighbors,
        local_connectivity=local_connectivity,
        set_op_mix_ratio=set_op_mix_ratio,
    )


# --------------------------------------------------------------------------- blockwise


AFFINITY_KINDS = ("tsne", "sne", "umap")


def check_affinity(kind: str, n: int, k: int, params: dict) -> dict:
    """The affinity parameters, checked against a graph of n rows and k neighbours."""
    if kind in ("tsne", "sne"):
        name = "t-SNE" if kind == "tsne" else "SNE"
        perp = check_perplexity(params["perplexity"], n, k, name)
        kk = params.get("n_neighbors") or min(k, int(np.ceil(3 * perp)))
        if not perp < kk <= k:
            raise InputError(
                f"{name} with perplexity {perp} needs between {perp} and {k} "
                f"neighbours per point; found n_neighbors={kk}.",
                "leave n_neighbors out (3 x perplexity).",
            )
        return {"perplexity": perp, "n_neighbors": int(kk)}
    nn = params.get("n_neighbors")
    kk = k if nn is None else int(nn) - 1
    if not 1 <= kk <= k:
        raise InputError(
            f"UMAP with n_neighbors={nn} needs a kNN graph with {kk} neighbours "
            f"per point (self excluded); it has {k}.",
            f"build the graph with n_neighbors >= {kk}.",
        )
    return {
        "n_neighbors": kk + 1,
        "local_connectivity": float(params.get("local_connectivity", 1.0)),
        "set_op_mix_ratio": float(params.get("set_op_mix_ratio", 1.0)),
    }


def is_graph_source(graph) -> bool:
    """A graph source (`graph_rows`): tasks read its rows one block at a time, the whole
    graph is never in one place (a `KNNGraph` has rows too, but is in memory)."""
    return not isinstance(graph, KNNGraph) and all(
        hasattr(graph, a) for a in ("n_samples", "n_neighbors", "rows")
    )


def graph_rows(graph, start: int, stop: int, k: int) -> tuple[np.ndarray, np.ndarray]:
    """(indices, distances) of rows [start, stop), first k neighbours, of a `KNNGraph` or of
    a graph source: any object with ``n_samples``, ``n_neighbors`` and
    ``rows(start, stop, k)`` (e.g. the flow's reader of the graph in a run's store, so that
    tasks read their rows from the store instead of receiving the graph)."""
    if isinstance(graph, KNNGraph):
        return graph.indices[start:stop, :k], graph.distances[start:stop, :k]
    return graph.rows(start, stop, k)


def _k_of(kind: str, params: dict) -> int:
    return params["n_neighbors"] - (1 if kind == "umap" else 0)


def affinity_block(graph, start: int, stop: int, kind: str, params: dict):
    """The per-row part of the affinities for rows [start, stop) of the graph."""
    k = _k_of(kind, params)
    _, dist = graph_rows(graph, start, stop, k)
    if kind in ("tsne", "sne"):
        return conditional_rows(dist, params["perplexity"])[0]
    return fuzzy_rows(dist, float(k + 1), params["local_connectivity"])[0]


def affinity_merge(graph, kind: str, params: dict, *blocks):
    """Combine the row blocks: t-SNE's joint P, SNE's (P, P^T), UMAP's fuzzy union."""
    vals = np.concatenate(blocks) if len(blocks) > 1 else blocks[0]
    indices = np.ascontiguousarray(graph_rows(graph, 0, graph.n_samples, _k_of(kind, params))[0])
    if kind == "tsne":
        return joint_affinities(indices, vals)
    if kind == "sne":
        P = SparseAffinity.from_rows(indices, vals, indices.shape[0])
        return P, P.transpose()
    return fuzzy_affinities(indices, vals, params["set_op_mix_ratio"])


def _bounds(n: int, rows: int):
    return [(s, min(n, s + rows)) for s in range(0, n, rows)]


def affinities(graph: KNNGraph, kind: str, *, row_block: int = ROW_BLOCK, **params):
    """The affinities of ``kind`` (tsne / sne / umap) from the graph, in this process."""
    params = check_affinity(kind, graph.n_samples, graph.n_neighbors, params)
    blocks = [
        affinity_block(graph, s, e, kind, params) for s, e in _bounds(graph.n_samples, row_block)
    ]
    return affinity_merge(graph, kind, params, *blocks)


def affinities_delayed(
    graph_ref, n: int, k: int, kind: str, *, row_block: int = ROW_BLOCK, **params
):
    """The same as a lazy dask graph: one task per block of ``row_block`` rows (on the
    workers), then one merge task. ``graph_ref``: a graph source (tasks read their rows),
    or the graph as a dask delayed literal (one key, kept by the scheduler: a worker that dies
    loses nothing that cannot be recomputed)."""
    from dask import delayed

    params = check_affinity(kind, n, k, params)
    block = delayed(affinity_block, pure=True)
    blocks = [block(graph_ref, s, e, kind, params) for s, e in _bounds(n, row_block)]
    return delayed(affinity_merge, pure=True)(graph_ref, kind, params, *blocks)


def _reverse_pieces(graph, start: int, stop: int, kind: str, params: dict, vals, bounds):
    indices = graph_rows(graph, start, stop, _k_of(kind, params))[0]
    return reverse_entries(indices, vals, start, bounds)


def affinity_rows_merge(
    graph, start: int, stop: int, kind: str, params: dict, vals, *reverse
) -> SparseAffinity:
    """Rows [start, stop) of t-SNE's joint P or UMAP's fuzzy union (those of
    `affinity_merge`, bit for bit) as an (stop - start) x n `SparseAffinity`, from the block's
    own directed values and the reverse entries every block sends it."""
    n = graph.n_samples
    indices = graph_rows(graph, start, stop, _k_of(kind, params))[0]
    if kind == "tsne":
        mode, scale, mix = MERGE_SUM, 0.5 / n, 1.0
    elif kind == "umap":
        mode, scale, mix = MERGE_FUZZY, 1.0, params["set_op_mix_ratio"]
    else:
        raise ValueError(f"no row-block merge for {kind!r} affinities")
    indptr, cols, data = symmetric_merge_rows(
        indices, vals, start, list(reverse), mode, scale=scale, mix=mix
    )
    return SparseAffinity(indptr, cols, data, (stop - start, n))


@dataclass
class GraphRows:
    """Rows [start, start + len(indices)) of a kNN graph of ``n_samples`` rows, as a graph
    source (``rows(start, stop, k)``) for tasks that read only those rows. Kept as int32 /
    float32, which loses nothing of a graph built by NN-descent or the exact backend (their
    distances are float32 widened)."""

    indices: np.ndarray
    distances: np.ndarray
    start: int
    n_samples: int

    @classmethod
    def of(cls, graph: KNNGraph, start: int, stop: int) -> "GraphRows":
        d32 = graph.distances[start:stop].astype(np.float32)
        exact = np.array_equal(d32, graph.distances[start:stop])
        return cls(
            graph.indices[start:stop].astype(np.int32),
            d32 if exact else graph.distances[start:stop].copy(),
            int(start),
            graph.n_samples,
        )

    @property
    def n_neighbors(self) -> int:
        return int(self.indices.shape[1])

    def rows(self, start: int, stop: int, k: int):
        a, b = start - self.start, stop - self.start
        if a < 0 or b > self.indices.shape[0]:
            raise ValueError(f"rows [{start}, {stop}) outside this block of the graph")
        return (self.indices[a:b, :k].astype(np.int64), self.distances[a:b, :k].astype(np.float64))


def affinity_row_blocks_delayed(graph_ref, n: int, k: int, kind: str, bounds, **params):
    """t-SNE's joint P or UMAP's fuzzy graph as lazy row blocks (one per ``bounds`` entry,
    never assembled in one place): per block its directed values, the reverse entries it
    sends to every block, then its rows of the symmetric matrix (a shuffle of the edges
    between the blocks, each task holding ~nnz / len(bounds) of them). ``graph_ref``: one
    graph source (or literal) for all blocks, or a list of one per block holding at least
    that block's rows (`GraphRows`), so that no task receives the whole graph."""
    from dask import delayed

    params = check_affinity(kind, n, k, params)
    bounds = [(int(s), int(e)) for s, e in bounds]
    refs = list(graph_ref) if isinstance(graph_ref, (list, tuple)) else [graph_ref] * len(bounds)
    vals = [
        delayed(affinity_block, pure=True)(ref, s, e, kind, params)
        for ref, (s, e) in zip(refs, bounds)
    ]
    pieces = [
        delayed(_reverse_pieces, pure=True, nout=len(bounds))(ref, s, e, kind, params, v, bounds)
        for ref, (s, e), v in zip(refs, bounds, vals)
    ]
    merge = delayed(affinity_rows_merge, pure=True)
    return [
        merge(refs[b], s, e, kind, params, vals[b], *[p[b] for p in pieces])
        for b, (s, e) in enumerate(bounds)
    ]


def find_ab(spread: float = 1.0, min_dist: float = 0.1) -> tuple[float, float]:
    """a, b of 1 / (1 + a x^2b) fitted (least squares) to 1 for x < min_dist and
    exp(-(x - min_dist) / spread) beyond, on 300 points of [0, 3 spread] (UMAP's fit)."""
    from scipy.optimize import curve_fit

    def curve(x, a, b):
        return 1.0 / (1.0 + a * x ** (2 * b))

    x = np.linspace(0, spread * 3, 300)
    y = np.where(x < min_dist, 1.0, np.exp(-(x - min_dist) / spread))
    (a, b), _ = curve_fit(curve, x, y)
    return float(a), float(b)
