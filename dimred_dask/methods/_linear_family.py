"""The parts the linear and kernel methods share (`methods.pca`, `methods.kpca`,
`methods.mds`, `methods.landmark_mds`, `methods.spca`, `methods.hsic`): the rows on which a
Nyström approximation's error is measured, the low-rank kernel factor of HSIC and kernel
supervised PCA with their kernel and solver checks, rows gathered into memory for an exact
kernel, and the estimators' common methods."""

from __future__ import annotations

import numpy as np

from .._compute import compute
from .._validation import (
    check_array,
    check_is_fitted,
    check_n_features,
    check_random_state,
    is_dask,
)
from ..linalg import (
    choose_landmarks,
    nystrom_error,
    nystrom_features,
    nystrom_map,
    take_rows,
)
from ..pairwise import check_kernel
from ._base import DimredEstimator
from ._labels import check_choice, clip_landmarks

HELD_OUT_ROWS = 1000  # rows on which the Nyström approximation error is measured
# dense kernel SPCA and exact HSIC hold n x n float64 matrices: 32 MB at 2000 rows
DENSE_MAX_SAMPLES = 2000


# --------------------------------------------------------------------------- kernels


def held_out_rows(X, landmark_idx, random_state) -> np.ndarray:
    n = X.shape[0]
    seed = random_state if isinstance(random_state, (int, np.integer)) else 0
    rng = check_random_state(np.random.default_rng([int(seed), 7]))  # apart from the landmarks
    pool = np.setdiff1d(np.arange(n), landmark_idx) if landmark_idx is not None else np.arange(n)
    if pool.size == 0:
        pool = np.arange(n)
    idx = np.sort(rng.choice(pool, size=min(HELD_OUT_ROWS, pool.size), replace=False))
    return take_rows(X, idx, "held-out rows")


def nystrom_factor(X, params: dict, n_landmarks, landmarks: str, random_state):
    """(the Nyström map, Phi with K ~ Phi Phi^T (lazy for dask X), info with the landmarks and
    the approximation error on held-out rows): the low-rank factor of a kernel on X that HSIC
    and kernel supervised PCA share."""
    m = clip_landmarks(n_landmarks, X.shape[0])
    marks, idx = choose_landmarks(X, m, landmarks, random_state)
    nmap = nystrom_map(marks, params)
    held = held_out_rows(X, idx, random_state)  # rows apart from the landmarks, as KernelPCA
    info = {
        "n_landmarks": int(m),
        "landmark_method": landmarks,
        "kernel_rank": nmap.rank,
        "approximation_error": nystrom_error(held, nmap),
        "approximation_error_rows": int(held.shape[0]),
    }
    return nmap, nystrom_features(X, nmap), info


def kernel_and_solver(shape: tuple, kernel, gamma, width, degree, coef0, solver, solvers, method):
    """(the checked parameters of the kernel on X, the solver): ``solvers`` is ("auto", the
    exact in-memory solver, the low-rank one), "auto" the exact one up to
    ``DENSE_MAX_SAMPLES`` rows of ``shape`` = (n_samples, n_features)."""
    params = check_kernel(kernel, shape[1], gamma=gamma, width=width, degree=degree, coef0=coef0)
    solver = check_choice(solver, solvers, "solver", method, "auto")
    if solver == "auto":
        return params, solvers[1] if shape[0] <= DENSE_MAX_SAMPLES else solvers[2]
    return params, solver


def label_keywords(label_gamma, label_width, n_label_landmarks, random_state, method) -> dict:
    """The keywords of `_labels.label_map` (and `prepare_labels`) from the label parameters of
    HSIC and the supervised PCAs."""
    return {
        "gamma": label_gamma,
        "width": label_width,
        "n_landmarks": n_label_landmarks,
        "random_state": random_state,
        "method": method,
    }


def rows_in_memory(X, method: str, stage: str):
    """X as NumPy: dask input computed (``stage``) and checked for NaN and inf, which its
    lazy check has not seen."""
    if is_dask(X):
        (X,) = compute(X, stage=stage)
        X = check_array(np.asarray(X), method=method)  # dask input's NaN and inf
    return X


# --------------------------------------------------------------------------- estimators


class FittedEmbedding(DimredEstimator):
    """``fit_transform``: the training embedding the fit keeps (``embedding_``)."""

    def fit_transform(self, X, y=None):
        return self.fit(X, y).embedding_


class NamedComponents(DimredEstimator):
    """``get_feature_names_out``: the class's name (or ``_feature_prefix``) in lower case and
    the component's number, once the fit has set ``_fitted_attr``."""

    _feature_prefix: str | None = None

    def get_feature_names_out(self, input_features=None):
        check_is_fitted(self, self._fitted_attr)
        prefix = self._feature_prefix or type(self).__name__.lower()
        return np.array([f"{prefix}{i}" for i in range(self.n_components_)], dtype=object)


class Projection(NamedComponents):
    """``transform`` of an estimator whose model encodes rows of X (NumPy, dask or, with
    ``accepts_sparse``, sparse) into n_components columns, and the check of the rows given
    to it (or to ``inverse_transform``)."""

    def _checked(self, X, n_features):
        check_is_fitted(self, self._fitted_attr)
        X = check_array(
            X,
            method=self._method or type(self).__name__,
            min_samples=1,
            check_finite=not is_dask(X),
            accept_sparse=self.accepts_sparse,
        )
        check_n_features(self, X, n_features)
        return X

    def transform(self, X):
        return self._model.transform(self._checked(X, self.n_features_in_))
