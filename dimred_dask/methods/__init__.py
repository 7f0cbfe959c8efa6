"""One module per method: a function core plus a scikit-learn style estimator."""
from .pca import PCA, PCAModel, pca

__all__ = ["PCA", "PCAModel", "pca"]
