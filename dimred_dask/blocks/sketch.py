"""Mergeable sketches of row blocks for single-pass PCA (``linalg.single_pass``).

For a block of rows x_i and a fixed d x s test matrix Omega, a `Sketch` holds, about a
reference row r (a d-vector):

    ys = sum_i Omega^T (x_i - r)                          (s,)
    Z  = sum_i (x_i - r) (x_i - r)^T Omega                (d, s)   = Xr^T Xr Omega
    G  = sum_i Omega^T (x_i - r) (x_i - r)^T Omega        (s, s)   = Yr^T Yr

with Yr = Xr Omega the block's row sketch, together with the block's count, mean and sums of
squares (`blocks.stats.BlockStats`, which also carries the finiteness check). Moving the
reference from r to r' (t = r - r', w = Omega^T t, xs = n (mean - r)) is exact:

    ys' = ys + n w
    Z'  = Z + xs w^T + t ys^T + n t w^T
    G'  = G + ys w^T + w ys^T + n w w^T

so two sketches merge exactly about their merged mean (as `blocks.stats.merge_stats` merges
scatter matrices; Chan, Golub & LeVeque 1979), and a tree of merges gives Xc^T Xc Omega and
Yc^T Yc of the centred data in one pass. Each block is first shifted by a reference row (its
first panel's mean, rounded to the working dtype, so the shift is exact), so float32 blocks
are multiplied in float32 without cancellation, panel by panel (4096 rows); the panels' sums
are added in float64, as `blocks.stats` does for the covariance solver. G alone is summed in
float64 from each panel's float32 row sketch (s x s, a small product): a float32 sum leaves
errors of ~1e-6 of G's largest entry, which is the variance of components float32 data holds
well (sigma_j ~ j^-2 puts the 32nd at 1e-6 of the first), and they would be lost as rounding.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .sparse import as_csr, csr64, sparse_block_stats
from .stats import PANEL_ROWS, BlockStats, _overflowed, block_stats, merge_stats

__all__ = ["Sketch", "dense_block_sketch", "sparse_block_sketch", "merge_sketches", "rereference"]


@dataclass
class Sketch:
    stats: BlockStats
    ref: np.ndarray | None = None  # (d,) float64: the reference row the sums are taken about
    ys: np.ndarray | None = None  # (s,)
    Z: np.ndarray | None = None  # (d, s)
    G: np.ndarray | None = None  # (s, s)
    # Omega^T r_b of each block's own reference, in row order: the stored row sketch of block b
    # is (X_b - r_b) Omega, so its centred rows are that plus Omega^T (r_b - mean)
    block_refs: tuple = ()
    # the rounding of G relative to its largest entry (`_gram_rounding`; the largest over the
    # merged blocks): directions of Y below about this much of the largest are rounding
    eps: float = float(np.finfo(np.float64).eps)

    @property
    def bad(self) -> bool:
        return bool(self.stats.nonfinite or self.stats.overflow)


def dense_block_sketch(block, omega: np.ndarray, offset: int = 0):
    """(`Sketch`, row sketch (X_b - r_b) Omega) of a dense block; the row sketch is None when
    the block holds NaN / inf or values too large to square (the stats say where).

    One pass over the block, panel by panel, as `blocks.stats.block_stats`: each panel is
    shifted by the reference r_b (the first panel's mean in the working dtype), then its column
    sums and sums of squares, its row sketch and its products are taken while it is in cache.
    Non-finite sums send the block to ``block_stats``, which names the bad rows (or, for finite
    float32 values whose products overflowed, the block is redone in float64)."""
    x = np.asarray(block)
    n, d = x.shape
    if n == 0:
        return Sketch(
            block_stats(x, offset, gram=False),
            np.zeros(d),
            np.zeros(omega.shape[1]),
            np.zeros((d, omega.shape[1])),
            np.zeros((omega.shape[1],) * 2),
            (),
        ), np.zeros((0, omega.shape[1]))
    for work in (np.float32, np.float64) if x.dtype == np.float32 else (np.float64,):
        out = _dense_sums(x, omega, work)
        if out is not None:
            return out
        stats = block_stats(x, offset, gram=False)
        if stats.nonfinite or stats.overflow:
            return Sketch(stats), None
    return Sketch(_overflowed(x, offset)), None  # its products overflow float64


def _dense_sums(x: np.ndarray, omega: np.ndarray, work):
    n, d = x.shape
    s = omega.shape[1]
    with np.errstate(over="ignore", invalid="ignore"):
        # exactly representable in ``work``: x - ref is x shifted by exactly this row
        ref = x[:PANEL_ROWS].mean(axis=0, dtype=np.float64).astype(work)
        om = omega.astype(work)
        Y = np.empty((n, s), dtype=work)
        Z, G, ys = np.zeros((d, s)), np.zeros((s, s)), np.zeros(s)
        s1, s2 = np.zeros(d), np.zeros(d)
        buf = np.empty((min(PANEL_ROWS, n), d), dtype=work)
        ones = np.ones(buf.shape[0], dtype=work)
        y64buf = np.empty((buf.shape[0], s))
        for start in range(0, n, PANEL_ROWS):
            panel = x[start : start + PANEL_ROWS]
            b = buf[: panel.shape[0]]
            np.subtract(panel, ref, out=b, casting="unsafe")
            s1 += ones[: b.shape[0]] @ b  # a panel's sums in the working dtype (BLAS),
            s2 += np.einsum("ij,ij->j", b, b)  # the panels' sums in float64
            y = Y[start : start + panel.shape[0]]
            np.matmul(b, om, out=y)
            Z += b.T @ y
            y64 = y64buf[: y.shape[0]]
            y64[...] = y
            G += y64.T @ y64
            ys += y64.sum(axis=0)
    if not all(np.isfinite(a).all() for a in (s1, s2, Z, G)):
        return None
    ref = ref.astype(np.float64)
    delta = s1 / n
    stats = BlockStats(n, ref + delta, None, s2 - n * delta**2)
    return Sketch(stats, ref, ys, Z, G, (omega.T @ ref,), _gram_rounding(work, d)), Y


def _gram_rounding(work, d: int) -> float:
    """The rounding of G = Y^T Y relative to its largest entry, for a row sketch Y made in
    ``work`` from rows of ``d`` values and G summed in float64: each entry of Y carries an error
    of order sqrt(d) eps(work) of the row's size, so G's directions below about d eps(work)^2 of
    the largest hold rounding (float32 rows of rank-deficient data leave such directions)."""
    e = float(np.finfo(work).eps)
    return max(float(np.finfo(np.float64).eps), d * e * e)


def sparse_block_sketch(block, omega: np.ndarray, offset: int = 0):
    """`dense_block_sketch` for a sparse (CSR) block, centred implicitly in float64:
    (X_b - 1 r^T) Omega = X_b Omega - 1 (Omega^T r)^T with r the block's mean."""
    x = as_csr(block)
    stats = sparse_block_stats(x, offset, gram=False)
    if stats.nonfinite or stats.overflow:
        return Sketch(stats), None
    x = csr64(x)
    ref = stats.mean
    proj = omega.T @ ref
    Y = np.asarray(x @ omega) - proj
    ys = Y.sum(axis=0)
    Z = np.asarray(x.T @ Y) - np.outer(ref, ys)
    return Sketch(stats, ref, ys, Z, Y.T @ Y, (proj,)), Y


def rereference(sk: Sketch, ref: np.ndarray, omega: np.ndarray) -> Sketch:
    """The same sketch about another reference row (exact, see the module docstring)."""
    n = sk.stats.n
    t = sk.ref - ref
    w = omega.T @ t
    xs = n * (sk.stats.mean - sk.ref)
    Z = sk.Z + np.outer(xs, w) + np.outer(t, sk.ys) + n * np.outer(t, w)
    G = sk.G + np.outer(sk.ys, w) + np.outer(w, sk.ys) + n * np.outer(w, w)
    ref = np.array(ref, dtype=np.float64)
    return Sketch(sk.stats, ref, sk.ys + n * w, Z, G, sk.block_refs, sk.eps)


def merge_sketches(a: Sketch, b: Sketch, omega: np.ndarray) -> Sketch:
    """Exact combination of two sketches, about their merged mean; blocks stay in order."""
    stats = merge_stats(a.stats, b.stats)
    if a.bad or b.bad:
        return Sketch(stats)
    if a.stats.n == 0:
        return Sketch(b.stats, b.ref, b.ys, b.Z, b.G, a.block_refs + b.block_refs, b.eps)
    if b.stats.n == 0:
        return Sketch(a.stats, a.ref, a.ys, a.Z, a.G, a.block_refs + b.block_refs, a.eps)
    ra, rb = rereference(a, stats.mean, omega), rereference(b, stats.mean, omega)
    return Sketch(
        stats,
        stats.mean.copy(),
        ra.ys + rb.ys,
        ra.Z + rb.Z,
        ra.G + rb.G,
        a.block_refs + b.block_refs,
        max(a.eps, b.eps),
    )
