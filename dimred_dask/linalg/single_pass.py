"""PCA from one read of the data: a randomized range sketch and its exact co-range product.

One pass over the row blocks gives, for a Gaussian d x s test matrix Omega (s = k + p), the
row sketch Y = Xc Omega (n x s, written where the caller says: the run's store, or memory),
Z = Xc^T Y (d x s) and G = Y^T Y (s x s), all of the centred data Xc (mergeable block
summaries, ``blocks.sketch``). With Q = Y G^(-1/2) an orthonormal basis of the range of Y,

    Q^T Xc = G^(-1/2) Z^T                    (s x d: no second pass needed)
    Xc^  = Q Q^T Xc = Q U S V^T              (SVD of the s x d matrix above)

so the components are the rows of V^T, the variances S^2 / (n - 1), and the embedding of the
training rows is Xc^ V = Y (G^(-1/2) U S): the stored row sketch times an s x k matrix. This
is the randomized range finder without power iterations (Halko, Martinsson & Tropp 2011,
"Finding structure with randomness", algorithms 4.1 and 5.1) computed in one pass: because a
pass sees each block of rows whole, Q^T Xc comes from Xc^T Y exactly, where a stream of
arbitrary linear updates needs a second, co-range sketch (Tropp, Yurtsever, Udell & Cevher
2017, "Practical sketching algorithms for low-rank matrix approximation").

Its error, reported with the result:
- ``captured_variance``: ||Xc^||_F^2 / ||Xc||_F^2, exact (Xc^ is an orthogonal projection of
  Xc, so the rest is exactly the variance outside the sketch);
- ``embedding_error_estimate``: the relative difference ||Y (M - M')||_F / ||Y M||_F between
  the embedding from the whole sketch and from its first k + p/2 columns, computed from G alone.
  It estimates the error of the smaller sketch, so it is on the side of caution for the
  larger; like all a posteriori estimates it is a measurement, not a bound.
The approximation is good where the spectrum decays past k: the error of each component falls
with (sigma_{s+1} / sigma_j)^2. On a flat spectrum (noise beyond the signal, sparse counts)
the components past the signal are not determined by one pass; use solver="covariance" or
"randomized" there.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial

import numpy as np
import scipy.linalg

from .._compute import compute
from .._validation import check_random_state, is_dask, is_sparse_input
from ..blocks.sketch import (
    Sketch,
    dense_block_sketch,
    merge_sketches,
    rereference,
    sparse_block_sketch,
)
from ..blocks.stats import tree_reduce
from .moments import NUMPY_BLOCK_ROWS, block_tasks, check_stats, row_blocks
from .pca_solvers import Spectrum, _constant

__all__ = ["SketchResult", "single_pass_eigh", "sketch_width"]


@dataclass
class SketchResult:
    width: int  # s, the sketch's columns
    embed_map: np.ndarray  # (s, k): the embedding of the training rows is Yc @ embed_map
    block_offsets: np.ndarray  # (blocks, s): Yc of block b = stored rows + block_offsets[b]
    block_rows: list  # rows per block of the stored row sketch
    rows: np.ndarray | None  # the row sketch itself for in-memory input (n x s), else None
    captured_variance: float
    embedding_error_estimate: float
    component_error_estimate: list  # the same, per component


def sketch_width(n_components: int, n_oversamples: int, n: int, d: int) -> int:
    """Columns of the sketch: k + max(p, k), at most min(n, d)."""
    return int(min(n, d, n_components + max(int(n_oversamples), n_components)))


def sketch_block(block, offset, omega, target, sparse):
    """One block's sketch; its row sketch written to ``target[offset:...]`` when given."""
    kernel = sparse_block_sketch if sparse else dense_block_sketch
    sk, rows = kernel(block, omega, offset)
    if target is not None and rows is not None:
        target[offset : offset + rows.shape[0]] = rows.astype(target.dtype, copy=False)
    return sk


def single_pass_eigh(
    X,
    n_components: int,
    *,
    n_oversamples: int = 10,
    random_state=None,
    row_sketch=None,
    method="PCA",
    where="X",
):
    """(`Spectrum`, `SketchResult`) of ``X`` from one pass (module docstring).

    ``row_sketch``: where the row sketch goes, an array (zarr or NumPy) of shape (n, s) whose
    row chunks are ``X``'s; for NumPy input it is kept in memory when not given, for dask
    input it is not kept (the embedding then needs ``transform``, a second pass)."""
    n, d = X.shape
    s = sketch_width(n_components, n_oversamples, n, d)
    omega = check_random_state(random_state).standard_normal((d, s))
    sparse = is_sparse_input(X)
    if is_dask(X):
        sk, block_rows = _dask_pass(X, omega, row_sketch, sparse)
        rows = None
    else:
        rows = row_sketch
        if rows is None:
            rows = np.empty((n, s), dtype=np.float32 if X.dtype == np.float32 else np.float64)
        blocks = row_blocks(n, NUMPY_BLOCK_ROWS)
        sk = tree_reduce(
            (sketch_block(X[a:b], a, omega, rows, sparse) for a, b in blocks),
            partial(merge_sketches, omega=omega),
        )
        block_rows = [b - a for a, b in blocks]
    check_stats(sk.stats, method, where)
    mean = sk.stats.mean
    sk = rereference(sk, mean, omega)
    comps, sv, embed_map, in_sketch = _factor(sk.G, sk.Z, n_components, sk.eps)
    total_ss = float(sk.stats.sumsq.sum())
    captured = in_sketch / total_ss if total_ss > 0 else 1.0
    err, per = _estimate(sk, comps, embed_map, n_components, s)
    offsets = np.stack(sk.block_refs) - omega.T @ mean
    spec = Spectrum(
        mean,
        comps,
        sv**2 / max(n - 1, 1),
        total_ss / max(n - 1, 1),
        n,
        False,
        1,
        _constant(sk.stats),
    )
    return spec, SketchResult(
        s,
        embed_map,
        offsets,
        block_rows,
        rows if not is_dask(X) else None,
        min(captured, 1.0),
        err,
        per,
    )


def _dask_pass(X, omega, target, sparse):
    from dask import delayed

    if X.numblocks[1] != 1:
        X = X.rechunk({1: -1})
    chunks = X.chunks[0]
    if target is not None and (len(set(chunks[:-1])) > 1 or chunks[-1] > chunks[0]):
        X = X.rechunk({0: max(chunks)})  # one writer per stored chunk of the row sketch
        chunks = X.chunks[0]
    om = delayed(omega, pure=True)  # one copy in the graph, not one per block
    leaves = block_tasks(X, sketch_block, om, target, sparse)
    merge = delayed(merge_sketches, pure=True)
    (sk,) = compute(tree_reduce(leaves, lambda a, b: merge(a, b, om)), stage="single-pass sketch")
    return sk, list(chunks)


def _factor(G: np.ndarray, Z: np.ndarray, k: int, eps: float):
    """Components (k x d), singular values (k,), the embedding map (s x k) and ||Xc^||_F^2
    (the variance in the sketch's range, all s directions) from the sketch's Gram
    G = Yc^T Yc and Z = Xc^T Yc (module docstring), G rounded to ``eps`` of its largest entry
    (`blocks.sketch`); missing components are completed with zero variance.

    Directions of Y whose variance is below s * eps of the largest are dropped: G's
    eigenvalues below that are rounding (float32 rows of rank-deficient data give such
    eigenvalues, of either sign), and G^(-1/2) would magnify Z's rounding along them into the
    components."""
    g, E = scipy.linalg.eigh((G + G.T) / 2)
    g, E = g[::-1], E[:, ::-1]
    floor = max(g[0], 0.0) * G.shape[0] * eps
    keep = g > floor if g[0] > 0 else np.zeros(g.shape, dtype=bool)
    gih = E[:, keep] / np.sqrt(g[keep])  # Q = Yc gih has orthonormal columns
    d = Z.shape[0]
    if not keep.any():
        comps = np.eye(d)[:k]
        return comps, np.zeros(k), np.zeros((G.shape[0], k)), 0.0
    u, sv, vt = np.linalg.svd(gih.T @ Z.T, full_matrices=False)
    r = min(k, sv.size)
    comps, svk = vt[:r], sv[:r]
    emap = gih @ (u[:, :r] * svk)
    if r < k:  # the sketch has rank < k: the rest of the directions have no variance
        from .pca_solvers import _complete_basis

        comps = _complete_basis(comps, k)
        svk = np.concatenate([svk, np.zeros(k - r)])
        emap = np.hstack([emap, np.zeros((G.shape[0], k - r))])
    return comps, svk, emap, float(np.sum(sv**2))


def _estimate(sk: Sketch, comps, emap, k: int, s: int):
    """The relative difference between the embedding from all s columns and from the first
    k + (s - k) // 2 (overall and per component), from G alone: ||Yc D||^2 = tr(D^T G D)."""
    s2 = k + (s - k) // 2
    if s2 <= k or s2 >= s:
        return float("nan"), []
    c2, _, m2, _ = _factor(sk.G[:s2, :s2], sk.Z[:, :s2], k, sk.eps)
    signs = np.sign(np.sum(comps * c2, axis=1))
    signs[signs == 0] = 1.0
    D = emap.copy()
    D[:s2] -= m2 * signs
    G = sk.G
    num = np.einsum("ij,ij->j", D, G @ D)
    den = np.einsum("ij,ij->j", emap, G @ emap)
    per = np.sqrt(np.clip(num, 0, None) / np.where(den > 0, den, np.inf))
    total = float(np.sqrt(max(num.sum(), 0.0) / den.sum())) if den.sum() > 0 else 0.0
    return total, [float(x) for x in per]
