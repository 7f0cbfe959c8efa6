"""Small synthetic data sets shared by the tests."""

from __future__ import annotations

import hashlib
import os

import numpy as np


def low_rank(rng, n=600, d=20, rank=5, dtype=np.float64, offset=3.0):
    """Low rank plus small noise, shifted away from the origin (means matter)."""
    w = rng.standard_normal((rank, d)) * np.linspace(5, 1, rank)[:, None]
    x = rng.standard_normal((n, rank)) @ w + 0.1 * rng.standard_normal((n, d)) + offset
    return x.astype(dtype)


def zarr_input(tmp_path, rng, *, n: int, d: int, chunk_rows: int):
    """A float32 low-rank array saved as ``<tmp_path>/in.zarr``; returns (uri, array)."""
    from dimred_dask.io import save_array

    X = low_rank(rng, n=n, d=d, dtype=np.float32)
    uri = str(tmp_path / "in.zarr")
    save_array(X, uri, chunks=(chunk_rows, d))
    return uri, X


def tree(path) -> dict:
    """Every file and link under ``path`` (links not followed) with its content's digest: two
    calls compare equal exactly when nothing under ``path`` changed."""
    out = {}
    for folder, dirs, files in os.walk(path):
        for name in dirs + files:
            full = os.path.join(folder, name)
            rel = os.path.relpath(full, path)
            if os.path.islink(full):
                out[rel] = ("link", os.readlink(full))
            elif os.path.isfile(full):
                with open(full, "rb") as f:
                    out[rel] = hashlib.sha256(f.read()).hexdigest()
    return out
