"""Writing inputs in the formats users keep them in (for the demo, benchmarks and tests):
AnnData ``.h5ad`` through anndata itself."""

from __future__ import annotations

import os
import warnings

__all__ = ["save_h5ad"]


def save_h5ad(X, path: str, *, obs: dict | None = None, overwrite: bool = False) -> str:
    """Write ``X`` (dense or scipy sparse) as the ``X`` of an AnnData ``.h5ad`` file at the
    local ``path``, with ``obs`` columns (e.g. cell types) if given."""
    import anndata
    import pandas as pd

    from ..errors import OutputExistsError

    if os.path.exists(path) and not overwrite:
        raise OutputExistsError(f"{path} exists already.", "pass overwrite=True or another path.")
    # anndata 0.12 writes names only as object strings, not pandas 3's default string dtype
    with warnings.catch_warnings():
        # pandas 3 says that option goes away in pandas 4
        warnings.filterwarnings("ignore", message=".*future.infer_string")
        with pd.option_context("future.infer_string", False):
            frame = pd.DataFrame(
                obs or {}, index=pd.Index([str(i) for i in range(X.shape[0])], dtype=object)
            )
            anndata.AnnData(X=X, obs=frame).write_h5ad(path)
    return path
