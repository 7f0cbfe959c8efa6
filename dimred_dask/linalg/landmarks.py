"""The landmark chooser every landmark method shares: `choose_landmarks`.

One parameter, ``landmarks=``, takes one of ``LANDMARK_METHODS``:

- ``uniform``: m rows drawn uniformly without replacement;
- ``maxmin``: max-min (farthest point) selection from a random first row, the choice
  de Silva & Tenenbaum (2003) recommend for landmark MDS and Isomap;
- ``kmeans++``: k-means++ seeds (Arthur & Vassilvitskii 2007);
- ``kmeans``: k-means centres (10 Lloyd iterations from k-means++ seeds). They are points,
  not rows, so the methods that need landmark rows (graph vertices, training rows to keep)
  refuse it;
- ``auto``: k-means++ up to ``AUTO_KMEANSPP_MAX`` landmarks, uniform above.

Every choice but ``uniform`` runs on a uniform sample of ``LANDMARK_SAMPLE_FACTOR * m`` rows
(one read of those rows; for dask input only the chunks holding them). The rows are read
in their stored order (`take_rows`). Each method documents the choices it accepts and its
default; they all pass the same words.

k-means++ costs O(10 m^2 d) (the sample's distances to each new centre, with local trials),
which for m = 2000 is more than a whole Nyström fit; and the more landmarks, the less their
placement matters, hence ``auto``'s switch to uniform.
"""

from __future__ import annotations

import numpy as np

from .._compute import compute
from .._validation import check_random_state, is_dask, nonfinite_error
from ..blocks.landmarks import kmeans, kmeans_plusplus, maxmin
from ..errors import InputError

__all__ = [
    "LANDMARK_METHODS",
    "LANDMARK_ROWS",
    "choose_landmarks",
    "resolve_landmark_method",
    "take_rows",
]

LANDMARK_METHODS = ("auto", "uniform", "maxmin", "kmeans++", "kmeans")
# the choices that return rows of X (with their indices): all but k-means centres
LANDMARK_ROWS = ("auto", "uniform", "maxmin", "kmeans++")
LANDMARK_SAMPLE_FACTOR = 10
AUTO_KMEANSPP_MAX = 500


def take_rows(X, idx: np.ndarray, stage: str = "row sample") -> np.ndarray:
    """Rows ``idx`` of ``X`` as a NumPy array, in ascending row order.

    For a dask ``X`` only the chunks holding those rows are read (one computation on the
    active distributed client, else dask's threaded scheduler).

    Parameters
    ----------
    X : array-like or dask array of shape (n_samples, n_features)
        Dense rows; sparse ``X`` is not supported.
    idx : array-like of int
        The row indices; they are sorted here, so the rows come in ascending order whatever
        the order of ``idx``.
    stage : str, default "row sample"
        The dask computation's stage name in progress reports.

    Returns
    -------
    ndarray of shape (len(idx), n_features)
        The rows, in ``X``'s dtype.
    """
    idx = np.sort(np.asarray(idx))
    if is_dask(X):
        (rows,) = compute(X[idx], stage=stage)
        return np.asarray(rows)
    return np.asarray(X[idx])


def resolve_landmark_method(method: str, m: int, allowed=LANDMARK_METHODS) -> str:
    """The landmark choice ``auto`` stands for with ``m`` landmarks; others unchanged.

    Parameters
    ----------
    method : str
        One of ``allowed``.
    m : int
        The number of landmarks.
    allowed : tuple of str, default LANDMARK_METHODS
        The choices the calling method accepts.

    Returns
    -------
    str
        ``method``, or for ``auto`` the choice it stands for.

    Raises
    ------
    InputError
        ``method`` is not in ``allowed``.
    """
    if not isinstance(method, str) or method not in allowed:
        rows = "" if "kmeans" in allowed else " (this method needs landmark rows of X)"
        fix = (
            f"pass landmarks='auto' (k-means++ up to {AUTO_KMEANSPP_MAX} landmarks, uniform above)"
            if "auto" in allowed
            else f"pass landmarks={allowed[0]!r}"
        )
        raise InputError(
            f"landmarks must be one of {', '.join(allowed)}{rows}; found {method!r}.",
            f"{fix}, or another of {', '.join(allowed)}.",
        )
    if method == "auto":
        return "kmeans++" if m <= AUTO_KMEANSPP_MAX else "uniform"
    return method


def _finite(rows: np.ndarray, idx: np.ndarray, method: str, where: str) -> None:
    bad = ~np.isfinite(rows)
    if bad.any():
        n_nan = int(np.isnan(rows).sum())
        raise nonfinite_error(method, idx[bad.any(axis=1)], n_nan, int(bad.sum()) - n_nan, where)


def choose_landmarks(
    X,
    m: int,
    method: str = "auto",
    random_state=0,
    *,
    metric: str = "euclidean",
    p: float = 2.0,
    allowed=LANDMARK_METHODS,
    check_finite: str | None = None,
    where: str = "X",
):
    """The landmarks of the rows of ``X`` (NumPy or dask). See the module docstring.

    Parameters
    ----------
    X : array-like or dask array of shape (n_samples, n_features)
        The data rows.
    m : int
        The number of landmarks, in [1, n_samples].
    method : str, default "auto"
        One of ``allowed`` (``LANDMARK_METHODS``).
    random_state : int, numpy Generator or None, default 0
        Seeds the draws (a Generator is advanced, so a caller's later draws follow on).
    metric : str, default "euclidean"
        ``maxmin`` only: the distance it maximises (a metric of ``blocks.kernels``).
    p : float, default 2.0
        ``maxmin`` with the minkowski metric only: its order.
    allowed : tuple of str, default LANDMARK_METHODS
        The choices the calling method accepts (``LANDMARK_ROWS`` for methods that need
        rows).
    check_finite : str or None, default None
        The calling method's name: refuse non-finite values among the rows read (the
        drawn rows, or the sample the choice runs on). None: the caller checked X.
    where : str, default "X"
        The name of the input in error messages.

    Returns
    -------
    landmarks : ndarray of shape (m, n_features)
        The landmark points.
    indices : ndarray of shape (m,) or None
        Their sorted row numbers in X; None for k-means centres.

    Raises
    ------
    InputError
        ``method`` not in ``allowed``; ``m`` not an int in [1, n_samples]; with
        ``check_finite``, NaN or infinity among the rows read.
    """
    n = X.shape[0]
    method = resolve_landmark_method(method, m, allowed)
    if not isinstance(m, (int, np.integer)) or isinstance(m, bool) or not 1 <= m <= n:
        raise InputError(
            f"n_landmarks must be an int in [1, n_samples={n}]; found {m!r}.",
            f"pass n_landmarks between 1 and {n} (a few hundred to a few thousand is usual).",
        )
    rng = check_random_state(random_state)
    if method == "uniform":
        idx = np.sort(rng.choice(n, size=m, replace=False))
        rows = take_rows(X, idx, "landmark rows")
        if check_finite:
            _finite(rows, idx, check_finite, where)
        return rows, idx
    size = min(n, LANDMARK_SAMPLE_FACTOR * m)
    sample_idx = np.sort(rng.choice(n, size=size, replace=False))
    sample = take_rows(X, sample_idx, "landmark sample")
    if check_finite:
        _finite(sample, sample_idx, check_finite, where)
    if method == "maxmin":
        pick = np.sort(maxmin(sample, m, rng, metric, p))
        return sample[pick], sample_idx[pick]
    if method == "kmeans++":
        pick = np.sort(kmeans_plusplus(sample, m, rng))
        return sample[pick], sample_idx[pick]
    return kmeans(sample, m, rng), None
