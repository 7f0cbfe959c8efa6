"""Spectral clustering (Shi & Malik 2000; Ng, Jordan & Weiss 2002; von Luxburg 2007).

Affinity: the symmetrised kNN graph with binary or heat weights (``affinity="knn"``), or a
Gaussian kernel over all pairs approximated by Nyström (``affinity="gaussian"``, for dense
affinities: K ~ Phi Phi^T with m landmarks, never n x n).

Cut: ``ratio`` (min f^T L f with f^T f = n, von Luxburg's relaxation: the bottom eigenvectors of
L = D - W) or ``normalized`` (L y = lambda D y). ``n_clusters`` eigenvectors (a connected
graph's first one is constant and harmless; with several components the bottom ones are
their indicators, which is what k-means should see) are the spectral embedding; k-means
(k-means++ starts, best of ``n_init`` Lloyd runs) on its rows gives ``labels_``.

Nyström normalised cut: with d = Phi (Phi^T 1) and Psi = D^-1/2 Phi, D^-1/2 K D^-1/2 =
Psi Psi^T, whose top eigenvectors come from the r x r matrix Psi^T Psi (two passes over the
rows: column sums, then the Gram matrix); y = D^-1/2 u. Phi = C R^-1 (C = k(X, L), W = R^T R)
is not formed: every step is written with C (see `_nystrom_ncut`). Dask input keeps the
embedding lazy and clusters it by mini-batch k-means on a sample of rows, labels assigned
blockwise.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field

import numpy as np
from sklearn.base import BaseEstimator, ClusterMixin

from .._compute import compute, persisted
from .._validation import check_array, check_random_state, is_dask
from ..blocks.kmeans import assign, kmeans_best_of, minibatch_update
from ..blocks.landmarks import kmeans_plusplus
from ..errors import ConvergenceWarning, InputError
from ..graphs import check_n_neighbors, graph_csr, graph_weights, spectral_embedding
from ..graphs.worker_laplacian import spectral_embedding_workers
from ..linalg import LANDMARK_METHODS, choose_landmarks, nystrom_kernel, nystrom_map, take_rows
from ..linalg.convergence import completed, record
from ..linalg.sparse_eigen import choose_sparse_solver
from ..pairwise import check_kernel
from ._base import PortableFn, like_input
from ._graph_common import (
    ArrayModel,
    check_eigen_solver,
    check_weights,
    estimator_of,
    graph_for_fit,
    graph_info,
    graph_spec,
    is_int_in,
)

__all__ = [
    "SpectralClustering",
    "SpectralClusteringModel",
    "spectral_clustering",
    "AFFINITIES",
    "CUTS",
    "check_spectral_params",
    "place_spectral_rows",
]

AFFINITIES = ("knn", "gaussian")
CUTS = ("normalized", "ratio")
MINIBATCH_SAMPLE = 100_000  # dask input: mini-batch k-means draws its batches from these rows
BATCH_SIZE = 4096
MINIBATCH_STEPS = 100


@dataclass
class SpectralClusteringModel(ArrayModel):
    embedding: np.ndarray  # (n, n_clusters) spectral embedding (NumPy, or lazy dask)
    labels: np.ndarray  # (n,) int64 (NumPy, or lazy dask)
    centres: np.ndarray  # (n_clusters, n_clusters) k-means centres in the embedding
    eigenvalues: np.ndarray  # (n_clusters,) of the Laplacian, ascending
    affinity: str
    cut: str
    inertia: float
    solver: str
    info: dict = field(default_factory=dict)

    _ARRAYS = ("embedding", "labels", "centres", "eigenvalues")

    @property
    def n_clusters(self) -> int:
        return int(self.centres.shape[0])

    def summary(self) -> dict:
        """`ArrayModel.summary` and the size of each cluster."""
        return {**super().summary(), "cluster_sizes": np.bincount(np.asarray(self.labels)).tolist()}


def place_spectral_rows(
    X_new, X_train, embedding, centres, n_neighbors: int, metric: str, key=None
):
    """A new row's place in a spectral clustering: its position in the spectral embedding
    is the mean of its ``n_neighbors`` nearest training rows' positions, weighted by a
    Gaussian of their distances (its width the row's median neighbour distance: the
    out-of-sample extension of a Laplacian embedding by its graph, Bengio et al. 2004), and
    its cluster the nearest of the k-means ``centres`` there, as the training rows'.

    Parameters
    ----------
    X_new : numpy.ndarray, shape (m, d)
        The new rows.
    X_train : numpy.ndarray, shape (n, d)
        The training rows.
    embedding : numpy.ndarray, shape (n, k)
        The training rows' spectral embedding (the one the centres were found in).
    centres : numpy.ndarray, shape (n_clusters, k)
        The k-means centres.
    n_neighbors : int
        Training rows each new row is placed by.
    metric : str
        The distance between rows.
    key : object or None, default None
        Names the training rows for the search index (`graphs.query.reference_topk`).

    Returns
    -------
    Y : numpy.ndarray, shape (m, k)
        The new rows' positions.
    labels : numpy.ndarray of int64, shape (m,)
        Their clusters.
    """
    from ..graphs.query import reference_topk

    k = int(min(n_neighbors, X_train.shape[0]))
    idx, dist = reference_topk(np.asarray(X_new, np.float64), X_train, k, metric=metric, key=key)
    width = np.maximum(np.median(dist, axis=1, keepdims=True), 1e-12)
    w = np.exp(-((dist / width) ** 2))
    w /= np.maximum(w.sum(axis=1, keepdims=True), 1e-300)
    Y = (w[:, :, None] * np.asarray(embedding, np.float64)[idx]).sum(axis=1)
    labels, _ = assign(Y, centres)
    return Y, labels


def check_spectral_params(params: dict, shape: tuple) -> None:
    """Refuse, before anything runs, `spectral_clustering` parameters that cannot apply to an
    input of ``shape``: the function's own checks and messages.

    Parameters
    ----------
    params : dict
        `spectral_clustering`'s keywords but ``graph``.
    shape : tuple of int
        The input's ``(n_samples, n_features)``.

    Raises
    ------
    InputError
        ``n_clusters``, ``affinity``, ``cut``, ``n_init``, ``eigen_solver``, ``weights`` or
        ``t`` out of range.
    """
    _check(shape[0], params)
    if params["affinity"] == "knn":
        check_weights(params["weights"], params["t"])


def _graph_needed(params: dict) -> str:
    """The kNN graph a run builds first: with ``affinity="knn"``, cut along its components
    (a disconnected graph is not refused); none for the Nyström affinity."""
    return "components" if params["affinity"] == "knn" else ""


def _check(n, p: dict) -> None:
    """The checks of ``n_clusters``, ``affinity``, ``cut``, ``n_init`` and ``eigen_solver``."""
    n_clusters, affinity, cut, n_init = p["n_clusters"], p["affinity"], p["cut"], p["n_init"]
    if not is_int_in(n_clusters, 1, n - 1):
        raise InputError(
            f"SpectralClustering needs n_clusters as an int in [1, {n - 1}]; found {n_clusters!r}.",
            "pass n_clusters=2 or more, below n_samples.",
        )
    if affinity not in AFFINITIES:
        raise InputError(
            f"affinity must be one of {', '.join(AFFINITIES)}; found {affinity!r}.",
            "pass affinity='knn' (sparse kNN graph) or 'gaussian' (Nyström).",
        )
    if cut not in CUTS:
        raise InputError(
            f"cut must be one of {', '.join(CUTS)}; found {cut!r}.",
            "pass cut='normalized' (Shi & Malik) or 'ratio'.",
        )
    if affinity == "gaussian" and cut == "ratio":
        raise InputError(
            "The ratio cut of a Nyström affinity is not low rank (L = D - K); "
            "found affinity='gaussian' with cut='ratio'.",
            "pass cut='normalized', or affinity='knn' for the ratio cut.",
        )
    if not is_int_in(n_init, 1):
        raise InputError(f"n_init must be an int >= 1; found {n_init!r}.", "pass n_init=10.")
    check_eigen_solver(p["eigen_solver"])


def spectral_clustering(
    X,
    *,
    n_clusters=2,
    affinity="knn",
    cut="normalized",
    n_neighbors=10,
    weights="binary",
    t=None,
    gamma=None,
    width=None,
    n_landmarks=500,
    landmarks="kmeans++",
    eigen_solver="auto",
    tol=1e-8,
    n_init=10,
    max_iter=300,
    metric="euclidean",
    knn_backend="auto",
    join_components=False,
    random_state=0,
    graph=None,
) -> SpectralClusteringModel:
    """Spectral clustering of the rows of ``X`` (NumPy or dask); returns the model (its
    ``labels`` and ``embedding`` lazy for dask input).

    Spectral clustering (Shi & Malik 2000; Ng, Jordan & Weiss 2002; von Luxburg 2007): the
    ``n_clusters`` bottom eigenvectors of the cut's Laplacian are the spectral embedding, and
    k-means on its rows gives the labels (for dask input, mini-batch k-means on a sample of
    rows, labels assigned blockwise).

    Parameters
    ----------
    X : array-like or dask array of shape (n_samples, n_features)
        The data rows.
    n_clusters : int, default 2
        An int in [1, n_samples - 1].
    affinity : {"knn", "gaussian"}, default "knn"
        Sparse kNN graph, or Nyström Gaussian kernel over all pairs (never n x n).
    cut : {"normalized", "ratio"}, default "normalized"
        ``normalized`` (L y = lambda D y) or ``ratio`` (the bottom eigenvectors of L = D - W;
        kNN affinity only).
    n_neighbors : int, default 10
        The kNN affinity's: an int in [1, n_samples - 1].
    weights : {"binary", "heat"}, default "binary"
        The kNN affinity's edge weights (heat: exp(-d^2 / t)).
    t : float or None, default None
        The kNN affinity's heat kernel width (None: mean squared edge length).
    gamma : float or None, default None
        The Gaussian (Nyström) affinity's kernel parameter (> 0; None: 1 / n_features). Pass
        ``gamma`` or ``width``, not both.
    width : float or None, default None
        The Gaussian (Nyström) affinity's c in exp(-||x - x'||^2 / c^2).
    n_landmarks : int, default 500
        The Gaussian (Nyström) affinity's m, an int in [n_clusters, n_samples].
    landmarks : {"auto", "uniform", "maxmin", "kmeans++", "kmeans"}, default "kmeans++"
        The Gaussian (Nyström) affinity's choice of landmarks.
    eigen_solver : {"auto", "dense", "arpack", "lobpcg", "amg", "lobpcg-workers"}, default "auto"
        The sparse eigensolver's (kNN affinity).
    tol : float, default 1e-8
        The sparse eigensolver's tolerance.
    n_init : int, default 10
        k-means': the best of ``n_init`` k-means++ starts (an int >= 1).
    max_iter : int, default 300
        k-means': Lloyd iterations per start (in memory).
    metric : str, default "euclidean"
        The kNN graph's metric.
    knn_backend : {"auto", "exact", "nndescent", "partitioned"}, default "auto"
        The kNN graph's backend.
    join_components : bool, default False
        Join a disconnected kNN graph by its shortest edges (a disconnected graph is not
        refused: its components' indicators are the bottom eigenvectors).
    random_state : int, numpy Generator or None, default 0
        Seeds the kNN graph, the eigensolver, the landmarks and k-means.
    graph : KNNGraph or None, default None
        A `KNNGraph` of these rows to use instead of building one (kNN affinity).

    Returns
    -------
    SpectralClusteringModel
        The fitted model: labels, embedding, eigenvalues, cluster centres (in the embedding),
        inertia, and the solvers' records in ``info["convergence"]``.

    Raises
    ------
    InputError
        ``X`` is not a finite 2-D numeric array; ``n_clusters``, ``affinity``, ``cut``,
        ``n_init``, ``eigen_solver``, ``n_neighbors``, ``weights``, ``t``, ``landmarks``,
        ``n_landmarks`` or a kernel parameter out of range; ``affinity="gaussian"`` with
        ``cut="ratio"``; a Nyström affinity giving a point a degree <= 0.
    SolverError
        No eigensolver converged.

    Warns
    -----
    ConvergenceWarning
        k-means' best start used all ``max_iter`` Lloyd iterations.
    """
    return _spectral_clustering(**locals())


def _spectral_clustering(X, *, graph, **p) -> SpectralClusteringModel:
    X = check_array(X, method="SpectralClustering")
    n = X.shape[0]
    _check(n, p)
    rng = check_random_state(p["random_state"])
    k = int(p["n_clusters"])
    if p["affinity"] == "knn":
        Y, vals, solver, info = _knn_embedding(X, k, graph, p)
    else:
        landmarks = p["landmarks"]
        if landmarks not in LANDMARK_METHODS:
            raise InputError(
                f"landmarks must be one of {', '.join(LANDMARK_METHODS)}; found {landmarks!r}.",
                "pass landmarks='kmeans++'.",
            )
        Y, vals, info = _nystrom_ncut(
            X, k, p["gamma"], p["width"], p["n_landmarks"], landmarks, rng
        )
        solver = "nystrom"
    centres, labels, inertia, it = _cluster(Y, k, rng, p["n_init"], p["max_iter"])
    records = info.get("convergence", []) + [_kmeans_record(Y, it, p["max_iter"])]
    info.update(
        {"kmeans_iterations": int(it), "n_features": int(X.shape[1]), "convergence": records}
    )
    return SpectralClusteringModel(
        Y.astype(X.dtype),
        labels,
        centres,  # clustered in float64
        np.asarray(vals, np.float64),
        p["affinity"],
        p["cut"],
        float(inertia),
        solver,
        info,
    )


def _knn_embedding(X, k: int, graph, p: dict):
    """(Y, eigenvalues, solver, info) of the kNN affinity: the ``k`` bottom eigenvectors of
    the cut's Laplacian of the weighted kNN graph (``graph``, or built)."""
    n, weights, t = X.shape[0], p["weights"], p["t"]
    check_weights(weights, t)
    kn = check_n_neighbors(p["n_neighbors"], n, "SpectralClustering")
    fix = "pass eigen_solver='arpack' (shift-invert) or 'dense' (small n), or loosen tol."
    solve = dict(tol=p["tol"], random_state=p["random_state"], method="SpectralClustering", fix=fix)
    on_workers = choose_sparse_solver(p["eigen_solver"], n) == "lobpcg-workers"
    g, stored = graph_for_fit(X, graph, p, "SpectralClustering", stored=on_workers, connected=False)
    normed = p["cut"] == "normalized"
    if stored:
        res, t_used = spectral_embedding_workers(
            g, k, n_neighbors=kn, weights=weights, t=t, normed=normed, drop_first=False,
            keep=is_dask(X), **solve,
        )  # fmt: skip
    else:
        W, t_used = graph_weights(graph_csr(g), weights, t)
        res = spectral_embedding(
            W, k, normed=normed, drop_first=False, solver=p["eigen_solver"], **solve
        )
    # persisted: k-means' sample, its labels and the model's embedding refer to it; for
    # dask input the vectors stay on the workers, in X's row chunks
    Y = res.embedding
    Y = Y.rechunk((X.chunks[0], Y.shape[1])) if is_dask(Y) else like_input(Y, X)
    info = {
        "t": t_used,
        "weights": weights,
        "convergence": res.convergence,
        "graph": graph_info(g, kn),
    }
    return persisted(Y), res.eigenvalues, res.solver, info


def _kmeans_record(Y, it: int, max_iter: int) -> dict:
    """k-means' record: Lloyd's iterations of the best start (stopped before ``max_iter``:
    converged), or mini-batch k-means' fixed steps on a dask embedding ("completed")."""
    step = "k-means on the spectral embedding"
    if is_dask(Y):
        return completed(step, "mini-batch k-means", int(it))
    ok = int(it) < int(max_iter)
    if not ok:
        warnings.warn(
            f"SpectralClustering: k-means' best start used all max_iter={max_iter} "
            "Lloyd iterations; raise max_iter.",
            ConvergenceWarning,
            stacklevel=4,  # the caller of spectral_clustering
        )
    return record(
        step,
        "lloyd",
        converged=ok,
        iterations=int(it),
        status="converged" if ok else f"stopped at max_iter={max_iter}",
    )


def _nystrom_ncut(X, k, gamma, width, m, landmarks, rng):
    n, d = X.shape
    if not is_int_in(m, k, n):
        raise InputError(
            f"n_landmarks must be an int in [{k}, {n}]; found {m!r}.",
            f"pass n_landmarks between {k} and {n} (a few hundred is usual).",
        )
    kern = check_kernel("gaussian", d, gamma=gamma, width=width)
    L, _ = choose_landmarks(X, int(m), landmarks, rng)
    nmap = nystrom_map(np.asarray(L, np.float64), kern)
    # Phi = C R^-1 is never formed (n r^2 flops, and n x r arrays beside C): with
    # C = k(X, L) and W = R^T R, d = C W^-1 (C^T 1), Psi^T Psi = R^-T (C^T D^-1 C) R^-1 and
    # y = D^-1/2 Psi u / sqrt(s) = D^-1/2 (D^-1/2 C) (R^-1 u / sqrt(s))
    C = nystrom_kernel(X.astype(np.float64), nmap)
    (colsum,) = compute(C.sum(axis=0), stage="Nyström: degrees") if is_dask(C) else (C.sum(axis=0),)
    deg = C @ nmap.solve(nmap.solve_t(np.asarray(colsum)))
    root = np.sqrt(np.maximum(deg, np.finfo(float).tiny))[:, None]
    if is_dask(C):
        scaled = C / root
        dmin, inner = compute(deg.min(), scaled.T @ scaled, stage="Nyström: Gram matrix")
    else:  # C is ours: scaled in place, so it is the only n x r array held
        scaled = np.divide(C, root, out=C)
        dmin, inner = deg.min(), scaled.T @ scaled  # one syrk over the rows
    if float(dmin) <= 0:
        raise InputError(
            "The Nyström affinity gives a point a degree <= 0 (the kernel is "
            "too narrow for the landmarks).",
            "raise width (or lower gamma), or raise n_landmarks.",
        )
    gram = nmap.solve_t(nmap.solve_t(np.asarray(inner)).T)  # R^-T (C^T D^-1 C) R^-1
    s, V = np.linalg.eigh((gram + gram.T) / 2)
    order = np.argsort(s)[::-1][:k]
    s, V = np.maximum(s[order], np.finfo(float).tiny), V[:, order]
    Y = (scaled @ nmap.solve(V / np.sqrt(s))) / root
    if not is_dask(Y):
        sg = np.sign(Y[np.argmax(np.abs(Y), axis=0), np.arange(k)])
        Y = Y * np.where(sg == 0, 1.0, sg)
    info = {
        "n_landmarks": int(m),
        "kernel": {q: v for q, v in kern.items()},
        "nystrom_rank": int(nmap.rank),
        "convergence": [
            record(
                f"top {k} eigenpairs of Psi^T Psi (r x r, Nyström)",
                "dense (LAPACK eigh)",
                converged=True,
                status="exact",
            )
        ],
    }
    return Y, 1.0 - s, info


def _cluster(Y, k, rng, n_init, max_iter):
    """k-means on the embedding rows: best of ``n_init`` Lloyd runs in memory, or, for a
    dask embedding, mini-batch k-means on a row sample and blockwise assignment."""
    if not is_dask(Y):
        c, lab, inertia, it = kmeans_best_of(np.asarray(Y), k, rng, n_init, max_iter)
        return c, lab, inertia, it
    n = Y.shape[0]
    rows = np.sort(rng.choice(n, size=min(n, MINIBATCH_SAMPLE), replace=False))
    sample = take_rows(Y, rows, "mini-batch k-means sample").astype(np.float64)
    best = None
    for _ in range(int(n_init)):
        c = sample[kmeans_plusplus(sample, k, rng)].copy()
        counts = np.zeros(k)
        for _ in range(MINIBATCH_STEPS):
            batch = sample[
                rng.choice(sample.shape[0], size=min(BATCH_SIZE, sample.shape[0]), replace=False)
            ]
            c, counts = minibatch_update(batch, c, counts)
        inertia = float(assign(sample, c)[1].sum())
        if best is None or inertia < best[1]:
            best = (c, inertia)
    c = best[0]
    labels = Y.map_blocks(PortableFn(lambda b: assign(b, c)[0]), drop_axis=1, dtype=np.int64)
    return c, labels, best[1] * n / sample.shape[0], MINIBATCH_STEPS


@estimator_of(spectral_clustering)
class SpectralClustering(ClusterMixin, BaseEstimator):
    """Spectral clustering (Shi & Malik 2000; von Luxburg 2007) on NumPy or dask arrays.

    Parameters
    ----------
    n_clusters : int in [1, n_samples - 1]
    affinity : {"knn", "gaussian"} (sparse kNN graph, or Nyström Gaussian kernel)
    cut : {"normalized", "ratio"}
    n_neighbors, weights ({"binary", "heat"}), t : the kNN affinity's
    gamma, width, n_landmarks, landmarks : the Gaussian (Nyström) affinity's
    eigen_solver, tol : the sparse eigensolver's; n_init, max_iter : k-means'
    metric, knn_backend, join_components, random_state

    Attributes
    ----------
    labels_, embedding_ (the n_clusters eigenvectors), eigenvalues_, cluster_centers_
    (in the embedding), inertia_, n_features_in_, convergence_ (the eigensolver's records,
    a retried solve's first, then k-means')
    """

    # scikit-learn's estimator checks fit data sets of ~10 rows (k < n), and their random
    # blobs often give a disconnected kNN graph: join it
    _check_params = ({"n_neighbors": 5, "join_components": True},)
    _check_exempt: dict = {}
    _check_not_run = ""

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.allow_nan = False
        tags.input_tags.sparse = False
        return tags

    def fit(self, X, y=None):
        model = spectral_clustering(X, **self.get_params())
        self._model = model
        self.labels_ = model.labels
        self.embedding_ = model.embedding
        self.eigenvalues_ = model.eigenvalues
        self.cluster_centers_ = model.centres
        self.inertia_ = model.inertia
        self.n_iter_ = int(model.info["kmeans_iterations"])
        self.n_features_in_ = int(model.info["n_features"])
        self.convergence_ = model.convergence
        return self

    def fit_predict(self, X, y=None):
        return self.fit(X).labels_


METHOD_SPECS = (
    graph_spec(
        "spectral",
        SpectralClustering,
        spectral_clustering,
        SpectralClusteringModel,
        check_spectral_params,
        follows_pca=False,
        flow_adds="the kNN stage (`affinity=knn`, the default)",
        graph_in_store=True,
        knn_graph=_graph_needed,
    ),
)
