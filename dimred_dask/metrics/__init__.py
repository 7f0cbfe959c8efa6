"""Quality measures of an embedding, computed on row samples of in-memory arrays: the
neighbourhoods kept (`quality`), the global and class structure kept (`structure`)."""

from .quality import (
    explained_variance_summary,
    knn_recall,
    reconstruction_error,
    sample_rows,
    trustworthiness,
)
from .structure import CPD_POINTS, cpd, knc, knc_neighbors, knn_accuracy, label_metrics

__all__ = [
    "CPD_POINTS",
    "cpd",
    "explained_variance_summary",
    "knc",
    "knc_neighbors",
    "knn_accuracy",
    "knn_recall",
    "label_metrics",
    "reconstruction_error",
    "sample_rows",
    "trustworthiness",
]
