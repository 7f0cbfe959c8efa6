"""dimred-dask: distributed dimensionality reduction on chunked arrays."""
from .errors import (ChunkingError, ConvergenceWarning, DimredError, DimredWarning, DisconnectedGraphError,
                     InputError, InputTypeError, NotFittedError, OutputExistsError, StageError,
                     StoreError,
                     UncommittedOutputError)
from .methods import PCA, KernelPCA, KernelPCAModel, PCAModel, kernel_pca, pca

__version__ = "0.1.0"

__all__ = [
    "PCA", "PCAModel", "pca", "KernelPCA", "KernelPCAModel", "kernel_pca",
    "DimredError", "InputError", "InputTypeError", "ChunkingError", "StoreError", "OutputExistsError",
    "UncommittedOutputError", "DisconnectedGraphError", "NotFittedError", "ConvergenceWarning",
    "DimredWarning", "StageError",
    "__version__",
]
