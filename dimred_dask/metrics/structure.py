"""Global and class structure of an embedding: CPD, KNC and kNN classification accuracy.

The measures of Kobak & Berens (2019, "The art of using t-SNE for single-cell
transcriptomics", Nat. Commun. 10:5416) beside the kNN preservation of `quality.py`:

- **CPD**, the Spearman correlation between the pairwise distances of the data and those of
  the embedding, on a sample of rows (1000, as there): how well the global layout is kept.
- **KNC**, the fraction of each class mean's k nearest class means in the data that are also
  its k nearest in the embedding: whether neighbouring classes stay neighbours.
- **kNN accuracy**, the leave-one-out accuracy of a k-nearest-neighbour vote (k = 10) in the
  embedding: whether the labels given for evaluation are separated on the map.

They work on in-memory samples, as the measures of `quality.py`; distances are Euclidean,
from sparse products for a sparse sample of the data.
"""

from __future__ import annotations

import numbers

import numpy as np
import scipy.sparse as sp
from scipy.spatial.distance import cdist, pdist
from scipy.stats import spearmanr

from .._validation import check_random_state
from ..blocks.kernels import sqeuclidean_block
from ..blocks.sparse import csr64
from ..errors import InputError

CPD_POINTS = 1000  # rows whose pairwise distances are compared (Kobak & Berens 2019)
KNC_K = 10  # nearest class means compared, at most (fewer when there are few classes)
KNN_ACCURACY_K = 10  # the neighbours that vote


def _rows(X):
    return csr64(X) if sp.issparse(X) else np.asarray(X, dtype=np.float64)


def _check_labels(labels, n: int, what: str) -> np.ndarray:
    labels = np.asarray(labels)
    if labels.ndim != 1 or len(labels) != n:
        raise InputError(
            f"{what} needs one label per row: expected {n} labels, found an array of shape "
            f"{labels.shape}.",
            "pass a 1-D array of labels aligned with the rows of the sample.",
        )
    return labels


def cpd(X, Y, n_points: int = CPD_POINTS, random_state=0) -> float:
    """Spearman correlation of pairwise distances (CPD) between data and embedding.

    On ``min(n_points, n_samples)`` rows drawn without replacement: the Euclidean distances of
    every pair of them in ``X`` against those in ``Y``, ranked (Kobak & Berens 2019).

    Parameters
    ----------
    X : array-like or sparse matrix of shape (n_samples, n_features)
        A sample of the data rows.
    Y : array-like of shape (n_samples, n_components)
        Their embedding.
    n_points : int, default 1000
        The rows whose pairwise distances are compared.
    random_state : int, numpy Generator, RandomState or None, default 0
        Seeds the draw of the rows.

    Returns
    -------
    float
        The rank correlation in [-1, 1]; nan when fewer than 3 rows, or when the distances
        of one side are all equal.

    Raises
    ------
    InputError
        ``n_points`` is not an int >= 3.
    """
    if not isinstance(n_points, numbers.Integral) or isinstance(n_points, bool) or n_points < 3:
        raise InputError(
            f"cpd needs n_points as an int >= 3; found n_points={n_points!r}.",
            "pass n_points=1000 (the sample Kobak & Berens use).",
        )
    X, Y = _rows(X), np.asarray(Y, dtype=np.float64)
    n = X.shape[0]
    if n < 3:
        return float("nan")
    idx = np.arange(n)
    if n > n_points:
        idx = np.sort(check_random_state(random_state).choice(n, n_points, replace=False))
    Xs, Ys = X[idx], Y[idx]
    if sp.issparse(Xs):
        d = np.sqrt(np.maximum(sqeuclidean_block(Xs, Xs), 0.0))
        dx = d[np.triu_indices(len(idx), 1)]
    else:
        dx = pdist(Xs)
    dy = pdist(Ys)
    if np.ptp(dx) == 0 or np.ptp(dy) == 0:
        return float("nan")
    return float(spearmanr(dx, dy).statistic)


def _class_means(X, codes: np.ndarray, n_classes: int) -> np.ndarray:
    counts = np.bincount(codes, minlength=n_classes).astype(np.float64)
    if sp.issparse(X):
        ind = sp.csr_matrix(
            (np.ones(len(codes)), (codes, np.arange(len(codes)))), shape=(n_classes, len(codes))
        )
        sums = np.asarray((ind @ X).todense())
    else:
        sums = np.zeros((n_classes, X.shape[1]))
        np.add.at(sums, codes, X)
    return sums / counts[:, None]


def _nearest(M: np.ndarray, k: int) -> np.ndarray:
    d = cdist(M, M, "sqeuclidean")
    np.fill_diagonal(d, np.inf)
    return np.argsort(d, axis=1, kind="stable")[:, :k]


def knc_neighbors(n_classes: int) -> int:
    """The k of KNC for ``n_classes`` classes: KNC_K (Kobak & Berens's choice for many
    classes), or half the other class means when there are fewer than 21 classes (4 of the 9
    others with 10 classes): with k near n_classes - 1, every class keeps nearly all others
    and KNC is near 1 whatever the map.

    Parameters
    ----------
    n_classes : int
        The number of classes, at least 3.

    Returns
    -------
    int
        k, in [1, 10].
    """
    return int(min(KNC_K, max(1, (n_classes - 1) // 2)))


def knc(X, Y, labels, n_neighbors: int | None = None) -> float:
    """Fraction of k nearest class means kept (KNC, Kobak & Berens 2019).

    The mean of each class in ``X`` and in ``Y``; for each class, its k nearest other class
    means in each space; the mean fraction of the first found in the second.

    Parameters
    ----------
    X : array-like or sparse matrix of shape (n_samples, n_features)
        A sample of the data rows.
    Y : array-like of shape (n_samples, n_components)
        Their embedding.
    labels : array-like of shape (n_samples,)
        The class of each row (any hashable values).
    n_neighbors : int or None, default None
        k; None takes `knc_neighbors` of the number of classes (10, or half the other
        classes with fewer than 21).

    Returns
    -------
    float
        KNC in [0, 1]; nan with fewer than 3 classes (no class has a choice of neighbours).

    Raises
    ------
    InputError
        ``labels`` not one per row, or ``n_neighbors`` not an int in [1, n_classes - 1).
    """
    X, Y = _rows(X), np.asarray(Y, dtype=np.float64)
    labels = _check_labels(labels, X.shape[0], "knc")
    classes, codes = np.unique(labels, return_inverse=True)
    c = len(classes)
    if c < 3:
        return float("nan")
    k = knc_neighbors(c) if n_neighbors is None else n_neighbors
    if not isinstance(k, numbers.Integral) or isinstance(k, bool) or not 1 <= k < c - 1:
        raise InputError(
            f"knc needs n_neighbors as an int with 1 <= n_neighbors < n_classes - 1 = {c - 1}; "
            f"found n_neighbors={k!r}.",
            f"pass n_neighbors between 1 and {c - 2}, or None for the default.",
        )
    nx = _nearest(_class_means(X, codes, c), k)
    ny = _nearest(_class_means(Y, codes, c), k)
    kept = sum(len(np.intersect1d(a, b, assume_unique=True)) for a, b in zip(nx, ny))
    return float(kept / (c * k))


def knn_accuracy(Y, labels, n_neighbors: int = KNN_ACCURACY_K) -> float:
    """Leave-one-out accuracy of a k-nearest-neighbour vote in the embedding.

    Each row's class is predicted by the most frequent class among its k nearest other rows
    of ``Y`` (Euclidean; ties to the class of the nearest voter among the tied), and compared
    with its label.

    Parameters
    ----------
    Y : array-like of shape (n_samples, n_components)
        The embedding of a sample of rows.
    labels : array-like of shape (n_samples,)
        The class of each row.
    n_neighbors : int, default 10
        k, with 1 <= k < n_samples.

    Returns
    -------
    float
        The fraction of rows whose vote gives their label, in [0, 1].

    Raises
    ------
    InputError
        ``labels`` not one per row, or ``n_neighbors`` not an int in [1, n_samples).
    """
    Y = np.asarray(Y, dtype=np.float64)
    n = Y.shape[0]
    labels = _check_labels(labels, n, "knn_accuracy")
    k = n_neighbors
    if not isinstance(k, numbers.Integral) or isinstance(k, bool) or not 1 <= k < n:
        raise InputError(
            f"knn_accuracy needs n_neighbors as an int with 1 <= n_neighbors < n_samples = "
            f"{n}; found n_neighbors={k!r}.",
            f"pass n_neighbors between 1 and {n - 1}.",
        )
    _, codes = np.unique(labels, return_inverse=True)
    right = 0
    step = max(1, (1 << 18) // max(n, 1))
    for a in range(0, n, step):
        b = min(n, a + step)
        d = cdist(Y[a:b], Y, "sqeuclidean")
        d[np.arange(b - a), np.arange(a, b)] = np.inf
        nn = np.argsort(d, axis=1, kind="stable")[:, :k]
        votes = codes[nn]  # (rows, k), nearest first
        for i, row in enumerate(votes):
            counts = np.bincount(row)
            top = np.flatnonzero(counts == counts.max())
            # ties: the tied class whose first voter is nearest
            pred = top[0] if len(top) == 1 else row[np.isin(row, top)][0]
            right += int(pred == codes[a + i])
    return float(right / n)


def label_metrics(X, Y, labels) -> dict:
    """KNC and the kNN accuracy of a sample for the manifest, with the k each used.

    Parameters
    ----------
    X : array-like or sparse matrix of shape (n_samples, n_features)
        A sample of the data rows.
    Y : array-like of shape (n_samples, n_components)
        Their embedding.
    labels : array-like of shape (n_samples,)
        The class of each row.

    Returns
    -------
    dict
        ``"knc"`` (float, None with fewer than 3 classes), ``"knc_neighbors"``,
        ``"knn_accuracy"``, ``"knn_accuracy_neighbors"`` and ``"n_classes"``.
    """
    labels = _check_labels(labels, np.shape(Y)[0], "label_metrics")
    c = len(np.unique(labels))
    value = knc(X, Y, labels) if c >= 3 else None
    k = int(min(KNN_ACCURACY_K, max(1, len(labels) - 1)))
    return {
        "knc": value,
        "knc_neighbors": knc_neighbors(c) if c >= 3 else None,
        "knn_accuracy": knn_accuracy(Y, labels, k) if len(labels) > 1 else None,
        "knn_accuracy_neighbors": k,
        "n_classes": int(c),
    }
