"""Graph-side pieces of the semidefinite embeddings (MVU, action respecting embedding).

- ``edge_list``: the undirected edges (i < j) of a kNN graph with their distances (the MVU
  constraints), joined components' extra edges included.
- ``bandwidth_order``: reverse Cuthill-McKee order of the graph. The SDP is written in this
  order so that neighbours have nearby indices; the sparse basis built on top of it then keeps
  the sparsity pattern of the linear matrix inequality banded, which is what lets Clarabel's
  chordal decomposition split one n x n cone into small ones.
- ``maximal_cliques`` (Bron-Kerbosch with pivoting) and ``clique_dependencies``: in a clique
  every pairwise distance is fixed, so its centred Gram matrix G_C = -1/2 J D_C J is fixed;
  each null vector v of G_C orthogonal to 1 is an affine dependency sum_i v_i p_i = 0 that every
  realisation p of the distances must satisfy. Five or more points of 3-D data always have one
  (d + 2 points in R^d are affinely dependent), so the MVU SDP of low-dimensional data has no
  strictly feasible point (Slater fails) and interior-point solvers stall at "inaccurate"
  (Krislock & Wolkowicz 2010 describe this degeneracy for sensor network localisation). The
  dependencies give the face of the PSD cone the solution lives on (``linalg.sdp.face_basis``).
  A clique whose G_C has a clearly negative eigenvalue has distances no Euclidean
  configuration realises: the equality problem is infeasible, and the clique is named.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
from scipy.sparse.csgraph import reverse_cuthill_mckee

from .connectivity import graph_csr
from .knn import KNNGraph

__all__ = ["edge_list", "bandwidth_order", "maximal_cliques", "clique_dependencies", "CliqueFace"]


def edge_list(graph: KNNGraph) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The undirected edges of a kNN graph and their distances: the MVU constraints.

    Parameters
    ----------
    graph : KNNGraph
        The graph, symmetrised by the ``max`` rule with its extra edges (`graph_csr`).

    Returns
    -------
    I, J : numpy.ndarray of int64, shape (e,)
        The edges' ends, i < j, sorted by (i, j).
    d : numpy.ndarray of float64, shape (e,)
        Their distances; exact duplicates' edges have distance 0.
    """
    S = sp.triu(graph_csr(graph), k=1).tocoo()
    order = np.lexsort((S.col, S.row))
    d = S.data[order].astype(np.float64)
    d[d <= np.finfo(np.float64).tiny] = 0.0  # exact duplicates were stored as tiny
    return S.row[order].astype(np.int64), S.col[order].astype(np.int64), d


def bandwidth_order(n: int, I: np.ndarray, J: np.ndarray) -> np.ndarray:
    """A reverse Cuthill-McKee order of a graph, which keeps neighbours close.

    Parameters
    ----------
    n : int
        The number of vertices.
    I, J : numpy.ndarray of int, shape (e,)
        The edges' ends; the graph is read as undirected.

    Returns
    -------
    numpy.ndarray of int64, shape (n,)
        The permutation: entry t is the old index of the vertex at new position t.
    """
    A = sp.csr_matrix((np.ones(I.size), (I, J)), shape=(n, n))
    return np.asarray(reverse_cuthill_mckee((A + A.T).tocsr(), symmetric_mode=True), dtype=np.int64)


def maximal_cliques(n: int, I: np.ndarray, J: np.ndarray, min_size: int = 4) -> list:
    """The maximal cliques of an undirected graph with at least ``min_size`` vertices.

    Bron-Kerbosch (Bron & Kerbosch 1973) with Tomita's pivoting (Tomita, Tanaka & Takahashi
    2006), started from the vertices in ascending order of degree; kNN graphs have small
    cliques, so this stays cheap.

    Parameters
    ----------
    n : int
        The number of vertices.
    I, J : numpy.ndarray of int, shape (e,)
        The edges' ends; self-loops are ignored.
    min_size : int, default 4
        The fewest vertices of a clique returned.

    Returns
    -------
    list of numpy.ndarray of int64
        Each clique's vertices, sorted.
    """
    nbrs = [set() for _ in range(n)]
    for i, j in zip(I.tolist(), J.tolist()):
        if i != j:
            nbrs[i].add(j)
            nbrs[j].add(i)
    out = []

    def expand(R, P, X):
        if not P and not X:
            if len(R) >= min_size:
                out.append(np.array(sorted(R), dtype=np.int64))
            return
        if len(R) + len(P) < min_size:
            return
        pivot = max(P | X, key=lambda u: len(P & nbrs[u]))
        for v in list(P - nbrs[pivot]):
            expand(R | {v}, P & nbrs[v], X & nbrs[v])
            P.remove(v)
            X.add(v)

    done = set()
    for v in sorted(range(n), key=lambda u: len(nbrs[u])):
        expand({v}, nbrs[v] - done, nbrs[v] & done)
        done.add(v)
    return out


@dataclass
class CliqueFace:
    """Affine dependencies found in cliques: ``rows``/``coef`` hold, for dependency t, the
    vertices ``rows[t]`` and coefficients ``coef[t]`` (unit norm, summing to 0)."""

    rows: list
    coef: list
    n_cliques: int  # cliques examined (size >= min_size)
    worst: float  # most negative eigenvalue of a clique Gram, relative to its largest
    worst_clique: np.ndarray | None


def clique_dependencies(
    n: int, I: np.ndarray, J: np.ndarray, d2: np.ndarray, *, tol: float = 1e-9, min_size: int = 4
) -> CliqueFace:
    """The affine dependencies of every maximal clique; see the module docstring.

    For each clique C (`maximal_cliques`), the null vectors orthogonal to 1 of its centred
    Gram matrix G_C = -1/2 J D_C J, from the squared distances of its edges.

    Parameters
    ----------
    n : int
        The number of vertices.
    I, J : numpy.ndarray of int, shape (e,)
        The edges' ends, each undirected edge once.
    d2 : numpy.ndarray of shape (e,)
        The edges' squared distances.
    tol : float, default 1e-9
        An eigenvalue of G_C of magnitude at most ``tol`` times its largest counts as zero
        (exact data give about 1e-15).
    min_size : int, default 4
        The fewest vertices of a clique examined.

    Returns
    -------
    CliqueFace
        The dependencies (each clique's rows and unit-norm coefficients summing to 0), the
        number of cliques examined and the most negative eigenvalue of a G_C relative to its
        largest (``worst``, 0 if none) with its clique: clearly negative means distances no
        Euclidean configuration realises.
    """
    D2 = sp.csr_matrix((d2, (I, J)), shape=(n, n))
    D2 = (D2 + D2.T).tocsr()
    rows, coef = [], []
    worst, worst_clique = 0.0, None
    cliques = maximal_cliques(n, I, J, min_size)
    for C in cliques:
        c = C.size
        Dc = D2[C][:, C].toarray()
        Jc = np.eye(c) - 1.0 / c
        w, V = np.linalg.eigh(-0.5 * Jc @ Dc @ Jc)
        top = max(float(w[-1]), np.finfo(np.float64).tiny)
        if w[0] / top < worst:
            worst, worst_clique = float(w[0] / top), C
        null = V[:, np.abs(w) <= tol * top]
        null = null - np.outer(np.full(c, 1.0 / c), null.sum(axis=0))  # drop the 1 direction
        if null.shape[1] == 0:
            continue
        u, s, _ = np.linalg.svd(null, full_matrices=False)
        for t in range(int((s > 0.5).sum())):
            rows.append(C)
            coef.append(u[:, t] / np.linalg.norm(u[:, t]))
    return CliqueFace(rows, coef, len(cliques), worst, worst_clique)
