"""One module per method: a function core plus a scikit-learn style estimator."""
from .kpca import KernelPCA, KernelPCAModel, kernel_pca
from .pca import PCA, PCAModel, pca

__all__ = ["PCA", "PCAModel", "pca", "KernelPCA", "KernelPCAModel", "kernel_pca"]
