"""Neighbour graphs: the shared kNN graph (exact, NN-descent, partitioned), symmetrising,
connectivity, edge weights and Laplacians."""

from .connectivity import (
    SYMMETRIZE,
    check_connected,
    connected_components,
    graph_components,
    graph_csr,
    join_components,
    symmetrize,
)
from .geodesic import (
    dijkstra_block,
    geodesic_matrix,
    geodesic_matrix_on_workers,
    geodesic_rows,
    geodesic_rows_on_workers,
    geodesics_through_neighbours,
)
from .knn import EXACT_MAX, KNN_BACKENDS, KNNGraph, check_n_neighbors, knn_graph, sample_recall
from .landmark import edge_normals, laplacian_basis, reconstruction_basis
from .laplacian import WEIGHTS, graph_weights, laplacian
from .sdp import bandwidth_order, clique_dependencies, edge_list, maximal_cliques
from .spectral import SpectralResult, spectral_embedding
from .weights import check_reg, reconstruction_weights

__all__ = [
    "KNNGraph",
    "knn_graph",
    "check_n_neighbors",
    "sample_recall",
    "KNN_BACKENDS",
    "EXACT_MAX",
    "symmetrize",
    "connected_components",
    "graph_components",
    "check_connected",
    "join_components",
    "graph_csr",
    "SYMMETRIZE",
    "graph_weights",
    "laplacian",
    "WEIGHTS",
    "reconstruction_weights",
    "check_reg",
    "dijkstra_block",
    "geodesic_matrix",
    "geodesic_rows",
    "geodesic_matrix_on_workers",
    "geodesic_rows_on_workers",
    "geodesics_through_neighbours",
    "spectral_embedding",
    "SpectralResult",
    "WEIGHTS",
    "reconstruction_weights",
    "check_reg",
    "edge_list",
    "bandwidth_order",
    "maximal_cliques",
    "clique_dependencies",
    "reconstruction_basis",
    "laplacian_basis",
    "edge_normals",
]
