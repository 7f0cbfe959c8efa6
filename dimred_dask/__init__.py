"""dimred-dask: distributed dimensionality reduction on chunked arrays."""
from .errors import (ChunkingError, ConvergenceWarning, DimredError, DimredWarning,
                     DisconnectedGraphError,
                     InputError, InputTypeError, NotFittedError, OutputExistsError, StageError,
                     StoreError,
                     UncommittedOutputError)
from .errors import InfeasibleError, SolverError
from .methods import (MDS, PCA, KernelPCA, KernelPCAModel, LandmarkMDS, LandmarkMDSModel,
                      MDSModel, PCAModel, check_distance_matrix, classical_mds, kernel_pca,
                      landmark_mds, pca)
from .methods import (HSICResult, KernelSupervisedPCA, KernelSupervisedPCAModel, SupervisedPCA,
                      SupervisedPCAModel, hsic, kernel_supervised_pca, supervised_pca)
from .methods import SNE, TSNE, UMAP, TSNEModel, UMAPModel, sne, tsne, tsne_sweep, umap, umap_sweep
from .methods import (Isomap, IsomapModel, LandmarkIsomap, LaplacianEigenmaps,
                      LaplacianEigenmapsModel, LLEModel, LocallyLinearEmbedding,
                      SpectralClustering, SpectralClusteringModel, isomap, landmark_isomap,
                      laplacian_eigenmaps, lle, spectral_clustering)
from .methods import (ActionRespectingEmbedding, LandmarkMVU, MaximumVarianceUnfolding,
                      SDPEmbeddingModel, action_respecting_embedding, landmark_mvu, mvu)
from .methods import make_chain

__version__ = "0.1.0"

__all__ = [
    "PCA", "PCAModel", "pca", "KernelPCA", "KernelPCAModel", "kernel_pca",
    "MDS", "MDSModel", "classical_mds", "LandmarkMDS", "LandmarkMDSModel", "landmark_mds",
    "check_distance_matrix",
    "SupervisedPCA", "SupervisedPCAModel", "supervised_pca", "KernelSupervisedPCA",
    "KernelSupervisedPCAModel", "kernel_supervised_pca", "hsic", "HSICResult",
    "TSNE", "TSNEModel", "tsne", "tsne_sweep", "SNE", "sne", "UMAP", "UMAPModel", "umap",
    "umap_sweep",
    "Isomap", "IsomapModel", "isomap", "LandmarkIsomap", "landmark_isomap",
    "LocallyLinearEmbedding", "LLEModel", "lle", "LaplacianEigenmaps", "LaplacianEigenmapsModel",
    "laplacian_eigenmaps", "SpectralClustering", "SpectralClusteringModel",
    "spectral_clustering",
    "DimredError", "InputError", "InputTypeError", "ChunkingError", "StoreError",
    "OutputExistsError",
    "UncommittedOutputError", "DisconnectedGraphError", "NotFittedError", "ConvergenceWarning",
    "DimredWarning", "StageError", "InfeasibleError", "SolverError",
    "MaximumVarianceUnfolding", "mvu", "LandmarkMVU", "landmark_mvu",
    "ActionRespectingEmbedding", "action_respecting_embedding", "SDPEmbeddingModel",
    "make_chain", "__version__",
]
