"""Quality measures of an embedding, computed on row samples of in-memory arrays."""

from .quality import (
    explained_variance_summary,
    knn_recall,
    reconstruction_error,
    sample_rows,
    trustworthiness,
)

__all__ = [
    "explained_variance_summary",
    "knn_recall",
    "reconstruction_error",
    "sample_rows",
    "trustworthiness",
]
