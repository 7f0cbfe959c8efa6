"""One module per method: a function core plus a scikit-learn style estimator."""

from .isomap import Isomap, IsomapModel, LandmarkIsomap, isomap, landmark_isomap
from .kpca import KernelPCA, KernelPCAModel, kernel_pca
from .laplacian_eigenmaps import LaplacianEigenmaps, LaplacianEigenmapsModel, laplacian_eigenmaps
from .lle import LLEModel, LocallyLinearEmbedding, lle
from .mds import (
    MDS,
    LandmarkMDS,
    LandmarkMDSModel,
    MDSModel,
    check_distance_matrix,
    classical_mds,
    landmark_mds,
)
from .pca import PCA, PCAModel, pca
from .spectral_clustering import SpectralClustering, SpectralClusteringModel, spectral_clustering
from .mvu import MaximumVarianceUnfolding, SDPEmbeddingModel, mvu
from .are import ActionRespectingEmbedding, action_respecting_embedding
from .landmark_mvu import LandmarkMVU, landmark_mvu
from .spca import (
    KernelSupervisedPCA,
    KernelSupervisedPCAModel,
    SupervisedPCA,
    SupervisedPCAModel,
    kernel_supervised_pca,
    supervised_pca,
)
from .hsic import HSICResult, hsic
from .sne import SNE, sne, sne_sweep
from .tsne import TSNE, TSNEModel, tsne, tsne_sweep
from .umap import UMAP, UMAPModel, umap, umap_sweep
from .chain import make_chain
from .sparse_support import SPARSE_METHODS, accepts_sparse, check_sparse_input
from .specs import SPECS, MethodSpec

__all__ = [
    "SPECS",
    "MethodSpec",
    "SPARSE_METHODS",
    "accepts_sparse",
    "check_sparse_input",
    "make_chain",
    "PCA",
    "PCAModel",
    "pca",
    "KernelPCA",
    "KernelPCAModel",
    "kernel_pca",
    "MDS",
    "LandmarkMDS",
    "MDSModel",
    "LandmarkMDSModel",
    "classical_mds",
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
    "Isomap",
    "LandmarkIsomap",
    "IsomapModel",
    "isomap",
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
    "HSICResult",
    "MaximumVarianceUnfolding",
    "SDPEmbeddingModel",
    "mvu",
    "ActionRespectingEmbedding",
    "action_respecting_embedding",
    "LandmarkMVU",
    "landmark_mvu",
    "TSNE",
    "TSNEModel",
    "tsne",
    "tsne_sweep",
    "SNE",
    "sne",
    "sne_sweep",
    "UMAP",
    "UMAPModel",
    "umap",
    "umap_sweep",
]
