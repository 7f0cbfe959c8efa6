"""Checks of kernel and metric parameters, with typed errors that say how to fix them."""

from __future__ import annotations

import numbers

import numpy as np

from ..blocks.kernels import KERNEL_ALIASES, KERNELS, METRICS
from ..errors import InputError

__all__ = ["check_kernel", "check_metric"]


def _real(value, name: str, *, kernel: str, positive: bool, fix: str) -> float:
    ok = isinstance(value, numbers.Real) and not isinstance(value, bool) and np.isfinite(value)
    if not ok or (positive and value <= 0):
        need = "a positive finite number" if positive else "a finite number"
        raise InputError(f"The {kernel} kernel needs {name} as {need}; found {value!r}.", fix)
    return float(value)


def check_kernel(
    kernel: str, n_features: int, *, gamma=None, width=None, degree=3, coef0=1.0
) -> dict:
    """Resolve and check kernel parameters into the keywords of the kernel blocks.

    Parameters
    ----------
    kernel : str
        One of ``KERNELS`` (linear, polynomial, gaussian, laplacian, sigmoid, cosine) or the
        aliases ``rbf`` (gaussian) and ``poly`` (polynomial).
    n_features : int
        The data's columns, for the default ``gamma``.
    gamma : float or None, default None
        A positive finite scale; None: 1 / width² when ``width`` is given, else
        1 / max(n_features, 1). Checked for every kernel, used by all but linear and cosine.
    width : float or None, default None
        Gaussian only: a positive finite c in exp(-||x - y||² / c²), instead of ``gamma``.
    degree : int, default 3
        Polynomial only: an int >= 1.
    coef0 : float, default 1.0
        Polynomial and sigmoid only: a finite constant term.

    Returns
    -------
    dict
        ``"kernel"`` (the canonical name) and ``"gamma"`` (float), with ``"degree"`` (int)
        for polynomial and ``"coef0"`` (float) for polynomial and sigmoid.

    Raises
    ------
    InputError
        An unknown kernel; ``width`` with another kernel than gaussian, or with ``gamma``;
        ``gamma`` or ``width`` not a positive finite number; for polynomial, ``degree`` not
        an int >= 1; for polynomial and sigmoid, ``coef0`` not a finite number.
    """
    name = KERNEL_ALIASES.get(kernel, kernel)
    if name not in KERNELS:
        raise InputError(
            f"Unknown kernel {kernel!r}; the kernels are {', '.join(KERNELS)}.",
            "pass kernel='gaussian' (the default) or another from that list.",
        )
    if width is not None:
        if name != "gaussian":
            raise InputError(
                f"width (c in exp(-||x - x'||^2 / c^2)) is a parameter of the "
                f"gaussian kernel only; "
                f"found width={width!r} with kernel={name!r}.",
                "pass gamma instead, or kernel='gaussian'.",
            )
        if gamma is not None:
            raise InputError(
                f"Pass gamma or width, not both; found gamma={gamma!r}, width={width!r}.",
                "drop one (gamma = 1 / width**2).",
            )
        c = _real(
            width,
            "width",
            kernel=name,
            positive=True,
            fix="pass width > 0, e.g. the median distance between points.",
        )
        gamma = 1.0 / (c * c)
    if gamma is None:
        gamma = 1.0 / max(n_features, 1)
    out = {
        "kernel": name,
        "gamma": _real(
            gamma,
            "gamma",
            kernel=name,
            positive=True,
            fix="pass gamma > 0 (the default is 1 / n_features).",
        ),
    }
    if name == "polynomial":
        if not isinstance(degree, numbers.Integral) or isinstance(degree, bool) or degree < 1:
            raise InputError(
                f"The polynomial kernel needs degree as an int >= 1; found {degree!r}.",
                "pass degree=2 or 3.",
            )
        out["degree"] = int(degree)
    if name in ("polynomial", "sigmoid"):
        out["coef0"] = _real(
            coef0, "coef0", kernel=name, positive=False, fix="pass a finite coef0 such as 1.0."
        )
    return out


def check_metric(metric: str, p=2.0) -> dict:
    """Check a distance metric and its parameter.

    Parameters
    ----------
    metric : str
        One of ``METRICS`` (euclidean, sqeuclidean, cosine, manhattan, chebyshev, minkowski).
    p : float, default 2.0
        Minkowski only: the order, a finite number >= 1.

    Returns
    -------
    dict
        ``{"metric": metric}``, with ``"p"`` (float) for minkowski.

    Raises
    ------
    InputError
        An unknown metric; for minkowski, ``p`` not a finite number >= 1.
    """
    if metric not in METRICS:
        raise InputError(
            f"Unknown metric {metric!r}; the metrics are {', '.join(METRICS)}.",
            "pass metric='euclidean' (the default) or another from that list.",
        )
    out = {"metric": metric}
    if metric == "minkowski":
        ok = isinstance(p, numbers.Real) and not isinstance(p, bool) and p >= 1
        if not ok or not np.isfinite(p):
            raise InputError(
                f"The minkowski metric needs p >= 1 (finite); found p={p!r} "
                "(p < 1 is not a metric).",
                "pass p=1 (manhattan), 2 or 3.",
            )
        out["p"] = float(p)
    return out
