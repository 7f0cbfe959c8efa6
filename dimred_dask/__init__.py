"""dimred-dask: distributed dimensionality reduction on chunked arrays."""

from typing import TYPE_CHECKING

from .errors import (
    ChunkingError,
    ConvergenceWarning,
    DimredError,
    DimredWarning,
    DisconnectedGraphError,
    InputError,
    InputTypeError,
    NotFittedError,
    OutputExistsError,
    StageError,
    StoreError,
    UncommittedOutputError,
)
from .errors import InfeasibleError, SolverError

# The estimators and functions are imported on first use (PEP 562): `import dimred_dask` and
# its errors stay cheap for the CLI's commands that need no method (inspect, --help) and for
# the modules that import only the errors.
_METHOD_NAMES = frozenset(
    {
        "ActionRespectingEmbedding",
        "HSICResult",
        "Isomap",
        "IsomapModel",
        "KernelPCA",
        "KernelPCAModel",
        "KernelSupervisedPCA",
        "KernelSupervisedPCAModel",
        "LLEModel",
        "LandmarkIsomap",
        "LandmarkMDS",
        "LandmarkMDSModel",
        "LandmarkMVU",
        "LaplacianEigenmaps",
        "LaplacianEigenmapsModel",
        "LocallyLinearEmbedding",
        "MDS",
        "MDSModel",
        "MaximumVarianceUnfolding",
        "PCA",
        "PCAModel",
        "SDPEmbeddingModel",
        "SNE",
        "SpectralClustering",
        "SpectralClusteringModel",
        "SupervisedPCA",
        "SupervisedPCAModel",
        "TSNE",
        "TSNEModel",
        "UMAP",
        "UMAPModel",
        "action_respecting_embedding",
        "check_distance_matrix",
        "classical_mds",
        "hsic",
        "isomap",
        "kernel_pca",
        "kernel_supervised_pca",
        "landmark_isomap",
        "landmark_mds",
        "landmark_mvu",
        "laplacian_eigenmaps",
        "lle",
        "make_chain",
        "mvu",
        "pca",
        "sne",
        "spectral_clustering",
        "supervised_pca",
        "tsne",
        "tsne_sweep",
        "umap",
        "umap_sweep",
    }
)


def __getattr__(name: str):
    if name in _METHOD_NAMES:
        from . import methods

        value = getattr(methods, name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(__all__))


if TYPE_CHECKING:  # the names as static analysis and documentation tools should see them
    from .methods import (
        MDS,
        PCA,
        KernelPCA,
        KernelPCAModel,
        LandmarkMDS,
        LandmarkMDSModel,
        MDSModel,
        PCAModel,
        check_distance_matrix,
        classical_mds,
        kernel_pca,
        landmark_mds,
        pca,
    )
    from .methods import (
        HSICResult,
        KernelSupervisedPCA,
        KernelSupervisedPCAModel,
        SupervisedPCA,
        SupervisedPCAModel,
        hsic,
        kernel_supervised_pca,
        supervised_pca,
    )
    from .methods import (
        SNE,
        TSNE,
        UMAP,
        TSNEModel,
        UMAPModel,
        sne,
        tsne,
        tsne_sweep,
        umap,
        umap_sweep,
    )
    from .methods import (
        Isomap,
        IsomapModel,
        LandmarkIsomap,
        LaplacianEigenmaps,
        LaplacianEigenmapsModel,
        LLEModel,
        LocallyLinearEmbedding,
        SpectralClustering,
        SpectralClusteringModel,
        isomap,
        landmark_isomap,
        laplacian_eigenmaps,
        lle,
        spectral_clustering,
    )
    from .methods import (
        ActionRespectingEmbedding,
        LandmarkMVU,
        MaximumVarianceUnfolding,
        SDPEmbeddingModel,
        action_respecting_embedding,
        landmark_mvu,
        mvu,
    )
    from .methods import make_chain


__version__ = "0.1.0"

__all__ = [
    "PCA",
    "PCAModel",
    "pca",
    "KernelPCA",
    "KernelPCAModel",
    "kernel_pca",
    "MDS",
    "MDSModel",
    "classical_mds",
    "LandmarkMDS",
    "LandmarkMDSModel",
    "landmark_mds",
    "check_distance_matrix",
    "SupervisedPCA",
    "SupervisedPCAModel",
    "supervised_pca",
    "KernelSupervisedPCA",
    "KernelSupervisedPCAModel",
    "kernel_supervised_pca",
    "hsic",
    "HSICResult",
    "TSNE",
    "TSNEModel",
    "tsne",
    "tsne_sweep",
    "SNE",
    "sne",
    "UMAP",
    "UMAPModel",
    "umap",
    "umap_sweep",
    "Isomap",
    "IsomapModel",
    "isomap",
    "LandmarkIsomap",
    "landmark_isomap",
    "LocallyLinearEmbedding",
    "LLEModel",
    "lle",
    "LaplacianEigenmaps",
    "LaplacianEigenmapsModel",
    "laplacian_eigenmaps",
    "SpectralClustering",
    "SpectralClusteringModel",
    "spectral_clustering",
    "DimredError",
    "InputError",
    "InputTypeError",
    "ChunkingError",
    "StoreError",
    "OutputExistsError",
    "UncommittedOutputError",
    "DisconnectedGraphError",
    "NotFittedError",
    "ConvergenceWarning",
    "DimredWarning",
    "StageError",
    "InfeasibleError",
    "SolverError",
    "MaximumVarianceUnfolding",
    "mvu",
    "LandmarkMVU",
    "landmark_mvu",
    "ActionRespectingEmbedding",
    "action_respecting_embedding",
    "SDPEmbeddingModel",
    "make_chain",
    "__version__",
]
