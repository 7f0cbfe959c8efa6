"""Blockwise distance and kernel matrices between chunked arrays, and double centering."""

from ..blocks.kernels import KERNELS, METRICS
from .matrix import (
    CentredOperator,
    blockwise,
    center_stats,
    double_center,
    pairwise_distances,
    pairwise_kernels,
)
from .params import check_kernel, check_metric

__all__ = [
    "KERNELS",
    "METRICS",
    "check_kernel",
    "check_metric",
    "CentredOperator",
    "blockwise",
    "center_stats",
    "double_center",
    "pairwise_distances",
    "pairwise_kernels",
]
