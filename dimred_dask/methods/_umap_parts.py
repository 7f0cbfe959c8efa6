"""The pieces of UMAP's optimisation that the one-worker fit (`methods.umap`) and the fit over
all workers (`methods._distributed`) share: the edges' sampling schedule, a setting's SGD
epoch (`sgd_step`, the transform's too) and the fuzzy cross-entropy, exact over the graph's
edges, the non-edges summed exactly up to ``CE_EXACT_MAX`` points and estimated from
``CE_PAIRS`` random pairs above."""

from __future__ import annotations

import numpy as np

from ..blocks.umap_kernels import sgd_epoch

__all__ = ["edge_schedule", "sgd_step", "cross_entropy", "edge_terms", "combine_cross_entropy"]

CE_EXACT_MAX = 3000
CE_PAIRS = 200_000


def edge_schedule(P, n_epochs: int, negative_sample_rate: int, w_max: float | None = None):
    """The graph's edges as CSR with epochs per sample; edges weaker than max / n_epochs
    would never be sampled and are dropped (umap-learn does the same). ``w_max``: the
    strongest edge of the whole graph when P is a block of its rows."""
    w = P.data
    w_max = w.max() if w_max is None else w_max
    keep = w >= w_max / float(n_epochs)
    kept = np.concatenate([[0], np.cumsum(keep)])
    indptr = np.concatenate([[0], np.cumsum(kept[P.indptr[1:]] - kept[P.indptr[:-1]])])
    indptr = indptr.astype(np.int64)
    indices = np.ascontiguousarray(P.indices[keep], dtype=np.int64)
    eps = w_max / w[keep]
    eps_neg = eps / negative_sample_rate if negative_sample_rate > 0 else np.full_like(eps, np.inf)
    return indptr, indices, eps, eps_neg


def sgd_step(Y, Yref, edges: tuple, s: dict, alpha, epoch: int, keys, skip_self, pulls) -> None:
    """`sgd_epoch` of the rows of ``Y`` over ``edges`` (indptr, indices, eps, next_sample,
    eps_neg, next_neg: the last three of `edge_schedule`'s with the next-due epochs, updated in
    place) with setting ``s``'s a, b, repulsion strength and seed (rows keyed by ``keys``, or
    numbered from 0 when empty), each attraction taken once."""
    sgd_epoch(
        Y,
        Yref,
        *edges,
        np.float32(s["a"]),
        np.float32(s["b"]),
        np.float32(s["repulsion_strength"]),
        alpha,
        epoch,
        s["random_state"],
        0,
        keys,
        np.float32(1.0),
        skip_self,
        pulls,
    )


def _neg_log_one_minus_q(Y, i, j, a, b):
    d2 = ((Y[i] - Y[j]) ** 2).sum(axis=1)
    return -np.log1p(-np.clip(1.0 / (1.0 + a * d2**b), 0.0, 1.0 - 1e-12))


def cross_entropy(P, Y, a: float, b: float, random_state=0) -> tuple[float, str]:
    """(CE over unordered pairs, how the non-edge part was computed); see the module docstring.

    CE = sum_{i<j} p log(p/q) + (1 - p) log((1 - p)/(1 - q)), q = 1 / (1 + a d^2b): exact over
    the graph's edges; the non-edges (p = 0) summed exactly up to ``CE_EXACT_MAX`` points and
    estimated from ``CE_PAIRS`` random pairs above.

    Parameters
    ----------
    P : scipy.sparse.csr_matrix of shape (n, n)
        The fuzzy graph (symmetric; weights in [0, 1]).
    Y : array-like of shape (n, n_components)
        The embedding.
    a : float
        The curve parameter a of q.
    b : float
        The curve parameter b of q.
    random_state : int, numpy Generator or None, default 0
        Seeds the random pairs of the estimate (above ``CE_EXACT_MAX`` points).

    Returns
    -------
    ce : float
        The cross-entropy.
    how : str
        "exact", or how many random pairs estimated the non-edge part.
    """
    return combine_cross_entropy([edge_terms(P, 0, Y, a, b)], Y, a, b, random_state)


def edge_terms(P, row_offset: int, Y, a: float, b: float) -> tuple[float, float, int]:
    """Over the entries (i, j), i < j, of P's rows (numbered from ``row_offset``): (the sum of
    their cross-entropy terms, the sum of their -log(1 - q), their count)."""
    Y = np.asarray(Y, dtype=np.float64)
    rows = row_offset + np.repeat(np.arange(P.shape[0]), np.diff(P.indptr))
    cols = P.indices.astype(np.int64)
    upper = rows < cols
    ei, ej = rows[upper], cols[upper]
    p = np.clip(P.data[upper], 0.0, 1.0)
    d2 = ((Y[ei] - Y[ej]) ** 2).sum(axis=1)
    q = np.clip(1.0 / (1.0 + a * d2**b), 1e-12, 1.0 - 1e-12)
    with np.errstate(divide="ignore", invalid="ignore"):
        edge = np.where(p > 0, p * np.log(p / q), 0.0) + np.where(
            p < 1, (1 - p) * np.log((1 - p) / (1 - q)), 0.0
        )
    return float(edge.sum()), float(_neg_log_one_minus_q(Y, ei, ej, a, b).sum()), int(ei.size)


def combine_cross_entropy(terms, Y, a: float, b: float, random_state=0) -> tuple[float, str]:
    """`cross_entropy` from the `edge_terms` of P's row blocks."""
    Y = np.asarray(Y, dtype=np.float64)
    n = Y.shape[0]
    edge, edge_neg = sum(t[0] for t in terms), sum(t[1] for t in terms)
    m = sum(t[2] for t in terms)
    if n <= CE_EXACT_MAX:
        i, j = np.triu_indices(n, 1)
        non_edge = _neg_log_one_minus_q(Y, i, j, a, b).sum() - edge_neg
        return float(edge + non_edge), "exact"
    rng = np.random.default_rng(random_state)
    i, j = rng.integers(0, n, CE_PAIRS), rng.integers(0, n, CE_PAIRS)
    keep = i != j
    pairs = n * (n - 1) / 2 - m
    non_edge = _neg_log_one_minus_q(Y, i[keep], j[keep], a, b).mean() * pairs
    return float(edge + non_edge), f"non-edge pairs estimated from {int(keep.sum())} random pairs"
