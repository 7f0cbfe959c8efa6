"""Linear algebra on NumPy and dask arrays: one-pass moments, PCA solvers."""
from .moments import column_stats, row_blocks
from .pca_solvers import Spectrum, covariance_eigh, dual_eigh, randomized_eigh, tsqr_svd

__all__ = ["column_stats", "row_blocks", "Spectrum", "covariance_eigh", "dual_eigh",
           "randomized_eigh", "tsqr_svd"]
