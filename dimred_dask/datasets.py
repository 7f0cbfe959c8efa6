"""Synthetic data made blockwise on the workers (no downloads): low rank plus noise."""
from __future__ import annotations

import numpy as np


def _spectrum_basis(d: int, rank: int, seed: int):
    rng = np.random.default_rng([seed, 0])
    basis, _ = np.linalg.qr(rng.standard_normal((d, rank)))
    scales = np.linspace(10.0, 1.0, rank)  # distinct, decreasing component scales
    return (basis * scales).T  # (rank, d)


def _low_rank_block(block_id, rows: int, d: int, rank: int, noise: float, seed: int, dtype,
                    clusters: int = 0):
    rng = np.random.default_rng([seed, 1, block_id])
    w = _spectrum_basis(d, rank, seed)
    z = rng.standard_normal((rows, rank))
    if clusters:  # scores around ``clusters`` centres, 3 standard deviations apart
        centres = np.random.default_rng([seed, 2]).standard_normal((clusters, rank)) * 3.0
        z = z * 0.5 + centres[rng.integers(0, clusters, rows)]
    x = z @ w + noise * rng.standard_normal((rows, d))
    return x.astype(dtype)


def low_rank_plus_noise(n: int, d: int, *, rank: int = 16, noise: float = 0.5,
                        chunk_rows: int = 25_000, dtype="float32", seed: int = 0,
                        clusters: int = 0):
    """A lazy (n, d) dask array: Gaussian scores on ``rank`` orthogonal directions with scales
    10 ... 1 (around ``clusters`` random centres if given), plus isotropic noise. Each block
    has its own seed, so the content does not depend on how many workers make it."""
    import dask.array as da
    from dask import delayed

    blocks, start = [], 0
    for i in range((n + chunk_rows - 1) // chunk_rows):
        rows = min(chunk_rows, n - start)
        blk = delayed(_low_rank_block, pure=True)(i, rows, d, rank, noise, seed, np.dtype(dtype),
                                                  clusters)
        blocks.append(da.from_delayed(blk, shape=(rows, d), dtype=dtype))
        start += rows
    return da.concatenate(blocks, axis=0)
