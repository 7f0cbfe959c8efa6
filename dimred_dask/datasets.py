"""Synthetic data made blockwise on the workers (no downloads): low rank plus noise."""

from __future__ import annotations

import numpy as np


def _spectrum_basis(d: int, rank: int, seed: int):
    rng = np.random.default_rng([seed, 0])
    basis, _ = np.linalg.qr(rng.standard_normal((d, rank)))
    scales = np.linspace(10.0, 1.0, rank)  # distinct, decreasing component scales
    return (basis * scales).T  # (rank, d)


def _low_rank_block(
    block_id, rows: int, d: int, rank: int, noise: float, seed: int, dtype, clusters: int = 0
):
    rng = np.random.default_rng([seed, 1, block_id])
    w = _spectrum_basis(d, rank, seed)
    z = rng.standard_normal((rows, rank))
    if clusters:  # scores around ``clusters`` centres, 3 standard deviations apart
        centres = np.random.default_rng([seed, 2]).standard_normal((clusters, rank)) * 3.0
        z = z * 0.5 + centres[rng.integers(0, clusters, rows)]
    x = z @ w + noise * rng.standard_normal((rows, d))
    return x.astype(dtype)


def low_rank_plus_noise(
    n: int,
    d: int,
    *,
    rank: int = 16,
    noise: float = 0.5,
    chunk_rows: int = 25_000,
    dtype="float32",
    seed: int = 0,
    clusters: int = 0,
):
    """A lazy (n, d) dask array: Gaussian scores on ``rank`` orthogonal directions with scales
    10 ... 1 (around ``clusters`` random centres if given), plus isotropic noise. Each block
    has its own seed, so the content does not depend on how many workers make it."""
    import dask.array as da
    from dask import delayed

    blocks, start = [], 0
    for i in range((n + chunk_rows - 1) // chunk_rows):
        rows = min(chunk_rows, n - start)
        blk = delayed(_low_rank_block, pure=True)(
            i, rows, d, rank, noise, seed, np.dtype(dtype), clusters
        )
        blocks.append(da.from_delayed(blk, shape=(rows, d), dtype=dtype))
        start += rows
    return da.concatenate(blocks, axis=0)


def _counts_block(block_id, rows: int, genes: int, types: int, density: float, seed: int):
    """Rows of a sparse count matrix (CSR, float32 log1p counts): each cell belongs to one of
    ``types`` cell types; about ``density`` of its genes are non-zero, half drawn from its
    type's marker genes (5 % of all genes), half from every gene; counts are 1 + Poisson."""
    import scipy.sparse as sp

    rng = np.random.default_rng([seed, 3, block_id])
    markers = (
        np.random.default_rng([seed, 4])
        .permutation(genes)[: max(1, types * max(1, genes // 20))]
        .reshape(types, -1)
    )
    kind = rng.integers(0, types, rows)
    per_row = rng.poisson(density * genes, rows).clip(1, genes)
    nnz = int(per_row.sum())
    owner = np.repeat(np.arange(rows), per_row)
    from_marker = rng.random(nnz) < 0.5
    cols = rng.integers(0, genes, nnz)
    pick = rng.integers(0, markers.shape[1], nnz)
    cols[from_marker] = markers[kind[owner[from_marker]], pick[from_marker]]
    vals = np.log1p(1.0 + rng.poisson(2.0 + 3.0 * from_marker)).astype(np.float32)
    X = sp.csr_matrix((vals, (owner, cols)), shape=(rows, genes), dtype=np.float32)
    X.sum_duplicates()
    return X, kind


def sparse_counts(
    n: int,
    genes: int,
    *,
    types: int = 8,
    density: float = 0.02,
    chunk_rows: int = 50_000,
    seed: int = 0,
):
    """(X, cell_type): an in-memory CSR matrix of log1p counts with cell-type structure and
    each cell's type, made block by block (the content does not depend on ``chunk_rows``'s
    blocks being made in any order)."""
    import scipy.sparse as sp

    parts = [
        _counts_block(i, min(chunk_rows, n - start), genes, types, density, seed)
        for i, start in enumerate(range(0, n, chunk_rows))
    ]
    return (sp.vstack([p[0] for p in parts], format="csr"), np.concatenate([p[1] for p in parts]))
