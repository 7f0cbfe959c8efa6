"""Linear algebra on NumPy and dask arrays: one-pass moments, PCA solvers, symmetric
eigensolvers, Nyström, SDPs. Every iterative solve leaves a convergence record
(``linalg.convergence``)."""

from .amg import AMG, amg_hierarchy
from .eigen import (
    DENSE_MAX,
    EIGEN_SOLVERS,
    Eigen,
    choose_eigen_solver,
    top_and_bottom_eigh,
    top_eigh,
)
from .gram_eigen import GRAM_SHIFT, bottom_eigsh_gram
from .gram_lobpcg import PRECONDITIONERS, bottom_eigsh_lobpcg
from .landmarks import (
    LANDMARK_METHODS,
    LANDMARK_ROWS,
    choose_landmarks,
    resolve_landmark_method,
    take_rows,
)
from .moments import column_stats, row_blocks
from .nystrom import (
    NystromMap,
    nystrom_error,
    nystrom_features,
    nystrom_kernel,
    nystrom_map,
    nystrom_top_eigh,
)
from .pca_solvers import Spectrum, covariance_eigh, dual_eigh, randomized_eigh, tsqr_svd
from .sdp import SDP_SOLVERS, face_basis, haar_basis, max_trace_sdp
from .sparse_eigen import (
    ARPACK_MAX,
    DENSE_MAX_SPARSE,
    SPARSE_EIGEN_SOLVERS,
    bottom_eigsh,
    bottom_eigsh_checked,
    fallback_solvers,
)

__all__ = [
    "column_stats",
    "row_blocks",
    "Spectrum",
    "covariance_eigh",
    "dual_eigh",
    "randomized_eigh",
    "tsqr_svd",
    "DENSE_MAX",
    "EIGEN_SOLVERS",
    "Eigen",
    "choose_eigen_solver",
    "top_eigh",
    "top_and_bottom_eigh",
    "LANDMARK_METHODS",
    "LANDMARK_ROWS",
    "NystromMap",
    "choose_landmarks",
    "nystrom_error",
    "nystrom_features",
    "nystrom_kernel",
    "nystrom_map",
    "nystrom_top_eigh",
    "resolve_landmark_method",
    "take_rows",
    "bottom_eigsh",
    "bottom_eigsh_checked",
    "fallback_solvers",
    "SPARSE_EIGEN_SOLVERS",
    "DENSE_MAX_SPARSE",
    "ARPACK_MAX",
    "bottom_eigsh_gram",
    "GRAM_SHIFT",
    "bottom_eigsh_lobpcg",
    "PRECONDITIONERS",
    "AMG",
    "amg_hierarchy",
    "SDP_SOLVERS",
    "face_basis",
    "haar_basis",
    "max_trace_sdp",
]
