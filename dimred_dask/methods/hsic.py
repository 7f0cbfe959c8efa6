"""The Hilbert-Schmidt independence criterion (Gretton et al. 2005) between a kernel on X
and a kernel on labels, with its permutation p-value: `hsic`, `HSICResult`. Supervised PCA
and kernel supervised PCA (`methods.spca`, Barshan et al. 2011) maximise it; they share the
low-rank kernel factor `nystrom_factor`."""

from __future__ import annotations

import numbers
from typing import NamedTuple

import numpy as np

from .._compute import compute
from .._validation import check_array, check_random_state, is_dask
from ..blocks.kernels import kernel_block
from ..errors import InputError
from ..linalg.cross_moments import cross_stats
from ..pairwise import check_kernel, double_center, pairwise_kernels
from ._labels import (
    LABEL_KERNELS,
    align_labels,
    check_choice,
    check_labels,
    label_factor,
    label_map,
)
from ._linear_family import (
    DENSE_MAX_SAMPLES,  # noqa: F401  (re-exported: methods.hsic.DENSE_MAX_SAMPLES)
    kernel_and_solver,
    label_keywords,
    nystrom_factor,
    rows_in_memory,
)

__all__ = ["hsic", "HSICResult", "HSIC_SOLVERS"]

HSIC_SOLVERS = ("auto", "exact", "lowrank")


class HSICResult(NamedTuple):
    statistic: float  # tr(K H B H) / (n - 1)^2
    p_value: float  # (1 + #{permuted >= statistic}) / (1 + n_permutations); NaN without any


def _p_value(stat: float, null: np.ndarray) -> float:
    return float((1 + np.sum(null >= stat)) / (1 + len(null))) if len(null) else float("nan")


def _exact_label_gram(y2, lmap, label_kernel, label_gamma, label_width):
    if label_kernel == "gaussian":
        params = check_kernel("gaussian", y2.shape[1], gamma=label_gamma, width=label_width)
        return kernel_block(y2, y2, **params)
    delta = lmap.factor(y2)
    return delta @ delta.T


def _hsic_exact(X, y2, lmap, params, label_args, perms):
    X = rows_in_memory(X, "HSIC", "HSIC: rows to memory")
    X, n = np.asarray(X), X.shape[0]
    y2 = align_labels(y2, X)
    Kc = double_center(np.asarray(pairwise_kernels(X, **params), dtype=np.float64))
    B = _exact_label_gram(y2, lmap, *label_args)
    stat = float(np.sum(Kc * B))
    null = np.array([np.sum(Kc * B[np.ix_(p, p)]) for p in perms])
    return HSICResult(stat / (n - 1) ** 2, _p_value(stat, null))


def _hsic_lowrank(X, y2, lmap, params, perms, n_landmarks, landmarks, random_state, method, where):
    n = X.shape[0]
    if params["kernel"] == "linear":
        phi = X  # the exact factor: K = X X^T
    else:
        phi = nystrom_factor(X, params, n_landmarks, landmarks, random_state)[1]
    D = label_factor(y2, lmap)
    if len(perms) and is_dask(phi):  # the permutations need both factors in memory: n x (p + r)
        phi, D = compute(phi, D, stage="HSIC: low-rank factors")
    st = cross_stats(phi, D, method=method, where=where, stage="HSIC: Phi^T H Delta pass")
    stat = float(np.sum(st.cross**2))
    if not len(perms):
        return HSICResult(stat / (n - 1) ** 2, float("nan"))
    phic, D = np.asarray(phi, dtype=np.float64) - st.mean_x, np.asarray(D, dtype=np.float64)
    null = np.array([np.sum((phic.T @ D[p]) ** 2) for p in perms])
    return HSICResult(stat / (n - 1) ** 2, _p_value(stat, null))


def hsic(
    X,
    y,
    *,
    kernel: str = "gaussian",
    gamma=None,
    width=None,
    degree: int = 3,
    coef0: float = 1.0,
    label_kernel: str = "delta",
    label_gamma=None,
    label_width=None,
    n_permutations: int = 200,
    solver: str = "auto",
    n_landmarks: int = 200,
    n_label_landmarks: int = 100,
    landmarks: str = "kmeans++",
    random_state=0,
    where: str = "X",
) -> HSICResult:
    """HSIC = tr(K H B H) / (n - 1)^2 and its permutation p-value (rows of the labels permuted).

    The Hilbert-Schmidt independence criterion (Gretton et al. 2005) between a kernel K on X
    and a kernel B on the labels. The same ``random_state`` gives the same permutations with
    either solver.

    Parameters
    ----------
    X : array-like or dask array of shape (n_samples, n_features)
        The data rows.
    y : array-like or dask array of shape (n_samples,) or (n_samples, q)
        The labels in the row order of X.
    kernel : str, default "gaussian"
        The kernel on X: "gaussian", "polynomial", "laplacian", "sigmoid", "cosine" or
        "linear".
    gamma : float or None, default None
        The kernel on X: gamma (> 0; None: 1 / n_features).
    width : float or None, default None
        The kernel on X: the gaussian kernel's c in exp(-||x - x'||^2 / c^2).
    degree : int, default 3
        The kernel on X: the polynomial kernel's degree.
    coef0 : float, default 1.0
        The kernel on X: the polynomial and sigmoid kernels' constant term.
    label_kernel : {"delta", "linear", "gaussian"}, default "delta"
        B on the labels: class indicators, or real targets (linear, or gaussian);
        "identity" is refused (B = I does not depend on y).
    label_gamma : float or None, default None
        Gaussian label kernel only: its gamma (None: 1 / q for q target columns).
    label_width : float or None, default None
        Gaussian label kernel only: its width c, gamma = 1 / c^2 (pass gamma or width).
    n_permutations : int, default 200
        Permutations of the labels' rows for the p-value (an int >= 0; 0: no p-value, NaN).
    solver : {"auto", "exact", "lowrank"}, default "auto"
        ``exact`` (K and B n x n in memory), ``lowrank`` (K ~ Phi Phi^T: X itself for the
        linear kernel, else Nyström; B = Delta Delta^T; statistic ||Phi_c^T Delta||_F^2 in one
        pass; the permutations hold Phi and Delta, n x (p + r), in memory), ``auto`` (exact
        up to ``DENSE_MAX_SAMPLES`` rows).
    n_landmarks : int, default 200
        Low-rank solver, non-linear kernel: the Nyström landmarks of K.
    n_label_landmarks : int, default 100
        Low-rank solver, gaussian label kernel: the landmarks of its Nyström factor.
    landmarks : {"auto", "uniform", "maxmin", "kmeans++", "kmeans"}, default "kmeans++"
        Low-rank solver: how the landmarks of K are chosen.
    random_state : int, numpy Generator or None, default 0
        Seeds the permutations and the landmarks.
    where : str, default "X"
        The name of the input in error messages.

    Returns
    -------
    HSICResult
        (statistic, p_value): tr(K H B H) / (n - 1)^2, and
        (1 + #{permuted >= statistic}) / (1 + n_permutations) (NaN without permutations).

    Raises
    ------
    InputError
        ``X`` is not a finite 2-D numeric array; ``label_kernel="identity"``; ``kernel``, a
        kernel parameter, ``label_kernel``, ``solver`` or ``n_permutations`` out of range;
        ``y`` missing, of the wrong length or shape, with NaN or inf, or of fewer than 2
        classes.
    """
    method = "HSIC"
    X = check_array(X, method=method, where=where)
    n = X.shape[0]
    check_choice(label_kernel, LABEL_KERNELS, "label_kernel", method, "delta")
    if label_kernel == "identity":
        raise InputError(
            "HSIC with label_kernel='identity' (B = I) does not depend on y: "
            "every permutation gives the same value.",
            "pass label_kernel='delta' for classes, or 'linear' / 'gaussian' for real targets.",
        )
    params, solver = kernel_and_solver(
        X.shape, kernel, gamma, width, degree, coef0, solver, HSIC_SOLVERS, method
    )
    if (
        not isinstance(n_permutations, numbers.Integral)
        or isinstance(n_permutations, bool)
        or n_permutations < 0
    ):
        raise InputError(
            f"n_permutations must be an int >= 0; found {n_permutations!r}.",
            "pass e.g. n_permutations=200 (0: no p-value).",
        )
    y2 = align_labels(check_labels(y, n, label_kernel, method=method), X)
    lmap = None
    if solver == "lowrank" or label_kernel != "gaussian":
        labels = label_keywords(label_gamma, label_width, n_label_landmarks, random_state, method)
        lmap = label_map(y2, label_kernel, **labels)
    perm_rng = check_random_state(random_state)
    perms = [perm_rng.permutation(n) for _ in range(int(n_permutations))]
    if solver == "exact":
        return _hsic_exact(X, y2, lmap, params, (label_kernel, label_gamma, label_width), perms)
    return _hsic_lowrank(
        X, y2, lmap, params, perms, n_landmarks, landmarks, random_state, method, where
    )
