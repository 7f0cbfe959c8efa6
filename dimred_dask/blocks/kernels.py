"""Distances and kernels between two in-memory blocks of rows (NumPy / SciPy only).

Distances (``METRICS``): euclidean, sqeuclidean, cosine (1 - cos angle), manhattan, chebyshev,
minkowski (``p`` >= 1).

Kernels (``KERNELS``), with the parameters of scikit-learn's ``pairwise_kernels``:

    linear      <x, x'>
    polynomial  (gamma <x, x'> + coef0) ** degree     (seed 002's <x, x'>^c: gamma=1, coef0=0)
    gaussian    exp(-gamma ||x - x'||^2)               (seed 002's width c: gamma = 1 / c^2)
    laplacian   exp(-gamma ||x - x'||_1)
    sigmoid     tanh(gamma <x, x'> + coef0)            (not positive semidefinite in general)
    cosine      <x, x'> / (||x|| ||x'||)

``gamma=None`` means 1 / n_features, as in scikit-learn. Blocks come out in the dtype of the
input (float32 stays float32); squared distances are assembled from float64 norms and clipped
at zero, so cancellation cannot make them negative.
"""
from __future__ import annotations

import numbers

import numpy as np
from scipy.spatial.distance import cdist

from ..errors import InputError

METRICS = ("euclidean", "sqeuclidean", "cosine", "manhattan", "chebyshev", "minkowski")
KERNELS = ("linear", "polynomial", "gaussian", "laplacian", "sigmoid", "cosine")
KERNEL_ALIASES = {"rbf": "gaussian", "poly": "polynomial"}
KERNEL_PARAMS = ("gamma", "width", "degree", "coef0")


def _real(value, name: str, *, kernel: str, positive: bool, fix: str) -> float:
    ok = isinstance(value, numbers.Real) and not isinstance(value, bool) and np.isfinite(value)
    if not ok or (positive and value <= 0):
        need = "a positive finite number" if positive else "a finite number"
        raise InputError(f"The {kernel} kernel needs {name} as {need}; found {value!r}.", fix)
    return float(value)


def check_kernel(kernel: str, n_features: int, *, gamma=None, width=None, degree=3,
                 coef0=1.0) -> dict:
    """Resolve and check kernel parameters; returns ``{"kernel": ..., "gamma": ...}``.

    Raises `InputError` for an unknown kernel or a parameter out of range.
    """
    name = KERNEL_ALIASES.get(kernel, kernel)
    if name not in KERNELS:
        raise InputError(f"Unknown kernel {kernel!r}; the kernels are {', '.join(KERNELS)}.",
                         "pass kernel='gaussian' (the default) or another from that list.")
    if width is not None:
        if name != "gaussian":
            raise InputError(f"width (the seeds' c) is a parameter of the gaussian kernel only; "
                             f"found width={width!r} with kernel={name!r}.",
                             "pass gamma instead, or kernel='gaussian'.")
        if gamma is not None:
            raise InputError(f"Pass gamma or width, not both; found gamma={gamma!r}, "
                             f"width={width!r}.", "drop one (gamma = 1 / width**2).")
        c = _real(width, "width", kernel=name, positive=True,
                  fix="pass width > 0, e.g. the median distance between points.")
        gamma = 1.0 / (c * c)
    if gamma is None:
        gamma = 1.0 / max(n_features, 1)
    out = {"kernel": name, "gamma": _real(gamma, "gamma", kernel=name, positive=True,
                                          fix="pass gamma > 0 (the default is 1 / n_features).")}
    if name == "polynomial":
        if (not isinstance(degree, numbers.Integral) or isinstance(degree, bool)
                or degree < 1):
            raise InputError(f"The polynomial kernel needs degree as an int >= 1; found "
                             f"{degree!r}.", "pass degree=2 or 3.")
        out["degree"] = int(degree)
    if name in ("polynomial", "sigmoid"):
        out["coef0"] = _real(coef0, "coef0", kernel=name, positive=False,
                             fix="pass a finite coef0 such as 1.0.")
    return out


def check_metric(metric: str, p=2.0) -> dict:
    if metric not in METRICS:
        raise InputError(f"Unknown metric {metric!r}; the metrics are {', '.join(METRICS)}.",
                         "pass metric='euclidean' (the default) or another from that list.")
    out = {"metric": metric}
    if metric == "minkowski":
        ok = isinstance(p, numbers.Real) and not isinstance(p, bool) and p >= 1
        if not ok or not np.isfinite(p):
            raise InputError(f"The minkowski metric needs p >= 1 (finite); found p={p!r} "
                             "(p < 1 is not a metric).", "pass p=1 (manhattan), 2 or 3.")
        out["p"] = float(p)
    return out


def _work(a: np.ndarray) -> np.dtype:
    return np.float32 if a.dtype == np.float32 else np.float64


def sqeuclidean_block(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """||a_i - b_j||^2 by one matrix product, clipped at 0."""
    work = _work(a)
    a, b = np.asarray(a, dtype=work), np.asarray(b, dtype=work)
    na = np.einsum("ij,ij->i", a, a, dtype=np.float64)
    nb = np.einsum("ij,ij->i", b, b, dtype=np.float64)
    g = a @ b.T
    d = (na[:, None] + nb[None, :]).astype(work)
    d -= 2 * g
    np.maximum(d, 0, out=d)
    return d


def distance_block(a: np.ndarray, b: np.ndarray, metric: str = "euclidean", p: float = 2.0,
                   **_) -> np.ndarray:
    """The distance matrix between the rows of ``a`` and of ``b``, in the input's dtype."""
    work = _work(a)
    if metric == "sqeuclidean":
        return sqeuclidean_block(a, b)
    if metric == "euclidean":
        return np.sqrt(sqeuclidean_block(a, b))
    if metric == "cosine":
        return (1.0 - cosine_similarity_block(a, b)).astype(work)
    name = {"manhattan": "cityblock"}.get(metric, metric)
    kw = {"p": p} if metric == "minkowski" else {}
    return cdist(np.asarray(a, np.float64), np.asarray(b, np.float64), name, **kw).astype(work)


def cosine_similarity_block(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    work = _work(a)
    a, b = np.asarray(a, dtype=work), np.asarray(b, dtype=work)
    na = np.sqrt(np.einsum("ij,ij->i", a, a, dtype=np.float64))
    nb = np.sqrt(np.einsum("ij,ij->i", b, b, dtype=np.float64))
    na[na == 0], nb[nb == 0] = 1.0, 1.0  # a zero row has cosine 0 with everything
    return ((a @ b.T) / (na[:, None] * nb[None, :])).astype(work)


def kernel_block(a: np.ndarray, b: np.ndarray, kernel: str = "gaussian", gamma: float = 1.0,
                 degree: int = 3, coef0: float = 1.0, **_) -> np.ndarray:
    """The kernel matrix k(a_i, b_j) for parameters resolved by `check_kernel`."""
    work = _work(a)
    a, b = np.asarray(a, dtype=work), np.asarray(b, dtype=work)
    if kernel == "gaussian":
        k = sqeuclidean_block(a, b)
        k *= -gamma
        return np.exp(k, out=k)
    if kernel == "laplacian":
        k = distance_block(a, b, "manhattan")
        k *= -gamma
        return np.exp(k, out=k)
    if kernel == "cosine":
        return cosine_similarity_block(a, b)
    k = a @ b.T
    if kernel == "linear":
        return k
    k *= gamma
    k += coef0
    if kernel == "polynomial":
        return k ** degree
    if kernel == "sigmoid":
        return np.tanh(k, out=k)
    raise InputError(f"Unknown kernel {kernel!r}.", "resolve it with check_kernel first.")
