"""Supervised PCA (Barshan et al. 2011), Bair's supervised principal components, kernel
supervised PCA and the HSIC independence test, on NumPy or dask arrays.

The formulations are Barshan et al.'s (SPCA, kernel SPCA), Gretton et al. 2005's (HSIC) and
Bair, Hastie, Paul & Tibshirani 2006's. Rows are points (n x d); H = I - 11^T/n; B is a kernel
on the labels (n x n):

    HSIC          tr(K H B H) / (n - 1)^2                       (K: a kernel on X)
    SPCA          U = top-k eigenvectors of Q = Xc^T B Xc       (Xc = H X; d x d)
                  encode y = U^T (x - mean), reconstruct x^ = U y + mean; B = I gives PCA
    kernel SPCA   max tr(beta^T K H B H K beta) s.t. beta^T K beta = I, the generalised problem
                  K H B H K beta = lambda K beta; embedding K beta (Barshan et al.'s beta^T K
                  with rows = points), a new point y = beta^T k(X_train, x)
    Bair          s_j = X_j^T y / sqrt(X_j^T X_j), keep |s_j| > threshold, PCA on those features

B is never formed: it is a factor Delta (n x r) with B = Delta Delta^T (``label_kernel``):

    delta     class labels: one-hot indicators, B_ij = [y_i == y_j]; r = number of classes
    linear    real targets y (n,) or (n, q): Delta = y; r = q
    gaussian  real targets: Nyström factor (linalg.nystrom) of exp(-gamma ||y - y'||^2) with
              ``n_label_landmarks`` landmarks; gamma defaults to 1 / q as in check_kernel
    identity  B = I: Q = Xc^T Xc, which is PCA (computed by `pca`); y is not used

Q = C C^T with C = Xc^T Delta (d x r): U and the eigenvalues are the left singular vectors of C
and its squared singular values (a thin SVD; Q itself is never formed). C comes from one pass
over the rows: each block gives its count, means and centred co-moment, merged pairwise in a
fixed tree (Chan, Golub & LeVeque's update, the co-moment analogue of ``blocks.stats``;
``linalg.cross_moments``): the value of X^T Delta - n mu_x mu_Delta^T without its
cancellation. Sparse X (supervised PCA and Bair's screening; not the kernel methods) is
centred implicitly: a block's co-moment is X^T (Delta - 1 mu_Delta^T). Q has rank <= r (delta:
<= n_classes - 1, as H removes the constant); components past the rank carry no dependence on
the labels and are completed by an arbitrary orthonormal basis (eigenvalue 0, DimredWarning).

Bair's scores are Bair et al.'s s_j on centred data, s_jc = Xc_j^T Delta_c / ||Xc_j||
(uncentred, the mean of x_j would dominate), taking max_c |s_jc| over Delta's columns: the
one-hot columns for classes, the targets for q real targets. They come from the same pass; the
PCA of the kept columns (`pca`) is a second one.

Kernel SPCA by reduction, not by regularisation. With a factor K ~ Phi Phi^T (n x p) and
beta = P a such that K beta = Phi a, the problem is linear SPCA of the rows of Phi:
a = top eigenvectors of Phi^T H B H Phi = (Phic^T Delta)(Phic^T Delta)^T, embedding Phi a.
- ``dense``: Phi = V_+ S_+^1/2 from the eigendecomposition of K restricted to its positive part
  (eigenvalues > KERNEL_RANK_RTOL * largest; an indefinite kernel's negative part is dropped);
  beta = V_+ S_+^-1/2 a: the solution of eigh(KHBHK, K) on the range of K.
- ``nystrom``: Phi = k(X, L) U_W S_W^-1/2 (linalg.nystrom), one pass over the rows, never n x n;
  beta lives on the landmarks: y(x) = k(x, L) (U_W S_W^-1/2 a).
The embedding is not centred (Barshan et al.'s beta^T K). Eigenvalues are those of Q (resp.
Phi^T H B H Phi), unscaled: sum(eigenvalues) / (n - 1)^2 is the HSIC between the projection
(linear kernel) and the labels.
"""

from __future__ import annotations

import numbers
import warnings

import numpy as np
import scipy.linalg

from .._validation import check_array
from ..errors import DimredWarning, InputError
from ..linalg import column_stats, top_eigh
from ..linalg.cross_moments import CrossStats, cross_stats
from ..linalg.pca_solvers import _complete_basis
from ..pairwise import pairwise_kernels
from ._base import like_input, rowwise, sign_fix
from ._labels import LABEL_KERNELS, align_labels, check_choice, label_factor, prepare_labels
from ._linear_family import (
    FittedEmbedding,
    Projection,
    kernel_and_solver,
    label_keywords,
    nystrom_factor,
    rows_in_memory,
)
from ._spca_models import KernelSupervisedPCAModel, SupervisedPCAModel
from ._spec import DOCS_LINEAR, MethodSpec
from .pca import pca

__all__ = [
    "SupervisedPCA",
    "SupervisedPCAModel",
    "supervised_pca",
    "KernelSupervisedPCA",
    "KernelSupervisedPCAModel",
    "kernel_supervised_pca",
    "LABEL_KERNELS",
]

KSPCA_SOLVERS = ("auto", "dense", "nystrom")
SPCA, KSPCA = "Supervised PCA", "Kernel supervised PCA"  # the methods' names in messages
# singular values of C below RANK_RTOL * the largest are zero: C is accumulated in float64
# (relative rounding ~1e-13 for the sizes here), so 1e-9 separates rounding from signal
RANK_RTOL = 1e-9
# eigenvalues of K kept in the dense kernel path, relative to the largest: a float64 kernel
# matrix is exact to ~1e-15 relative, a float32 one to ~1e-7, so smaller ones are rounding
KERNEL_RANK_RTOL = {np.dtype(np.float64): 1e-10, np.dtype(np.float32): 1e-6}


def _check_k(k, n: int, d: int | None, method: str) -> int:
    limit = n - 1 if d is None else min(n - 1, d)
    what = "n_samples - 1" if d is None else "min(n_samples - 1, n_features)"
    if isinstance(k, (bool, np.bool_)) or not isinstance(k, numbers.Integral):
        raise InputError(
            f"{method} needs n_components as an int; found {k!r}.", "pass an int such as 2."
        )
    if not 1 <= k <= limit:
        shape = f"({n}, {d})" if d is not None else f"({n}, ...)"
        raise InputError(
            f"{method} needs 1 <= n_components <= {what} = {limit} (centred data "
            f"has rank at most n_samples - 1); found n_components={k} (data shape "
            f"{shape}).",
            f"pass n_components between 1 and {max(limit, 1)}.",
        )
    return int(k)


def _top_directions(C: np.ndarray, k: int, method: str, stacklevel: int = 3):
    """(U (p, k), eigenvalues (k,), rank) of C C^T by a thin SVD of C; completed past the rank."""
    u, s, _ = scipy.linalg.svd(C, full_matrices=False)
    if s.size == 0 or not s[0] > 0:
        raise InputError(
            f"{method}: the labels carry no information (X^T H Delta = 0: the "
            "labels are constant, or uncorrelated with every column to rounding).",
            "check y; with no label information use PCA.",
        )
    rank = int(np.sum(s > RANK_RTOL * s[0]))
    if k <= rank:
        return u[:, :k], s[:k] ** 2, rank
    extra = f"component {k} is" if k == rank + 1 else f"components {rank + 1}-{k} are"
    warnings.warn(
        DimredWarning(
            f"{method}: the label kernel gives only {rank} direction(s) of dependence, fewer than "
            f"n_components={k}; {extra} an arbitrary orthonormal completion with eigenvalue 0. Use "
            "fewer components (delta labels: at most n_classes - 1)."
        ),
        stacklevel=stacklevel,
    )
    rows = _complete_basis(u[:, :rank].T, k)
    return rows.T, np.concatenate([s[:rank] ** 2, np.zeros(k - rank)]), rank


# ---------------------------------------------------------------- supervised PCA


def _check_bair(threshold, n_features, d: int, label_kernel: str, method: str):
    if threshold is None and n_features is None:
        return None
    if threshold is not None and n_features is not None:
        raise InputError(
            f"{method}: pass bair_threshold or bair_n_features, not both; found "
            f"{threshold!r} and {n_features!r}.",
            "drop one of them.",
        )
    if label_kernel == "identity":
        raise InputError(
            f"{method}: Bair's screening scores features against the labels; "
            "label_kernel='identity' has none.",
            "pass label_kernel='delta' or 'linear' with y.",
        )
    if threshold is not None:
        if (
            not isinstance(threshold, numbers.Real)
            or isinstance(threshold, bool)
            or not np.isfinite(threshold)
            or threshold < 0
        ):
            raise InputError(
                f"bair_threshold must be a finite number >= 0; found {threshold!r}.",
                "pass e.g. bair_threshold=1.0.",
            )
        return "threshold", float(threshold)
    if (
        not isinstance(n_features, numbers.Integral)
        or isinstance(n_features, bool)
        or not 1 <= n_features <= d
    ):
        raise InputError(
            f"bair_n_features must be an int in [1, {d}] (X has n_features={d}); "
            f"found {n_features!r}.",
            f"pass an int between 1 and {d}.",
        )
    return "n_features", int(n_features)


def _bair(X, st: CrossStats, k: int, rule, label_kernel, where, method):
    """Screen features by max_c |s_jc|, then PCA on the kept ones (zero weight elsewhere)."""
    norms = np.sqrt(st.sumsq)
    safe = np.where(norms > 0, norms, 1.0)
    scores = np.where(norms > 0, np.abs(st.cross / safe[:, None]).max(axis=1), 0.0)
    if rule[0] == "threshold":
        keep = np.nonzero(scores > rule[1])[0]
    else:
        keep = np.sort(np.argsort(-scores, kind="stable")[: rule[1]])
    if len(keep) < k:
        raise InputError(
            f"{method}: Bair's screening keeps {len(keep)} feature(s) ({rule[0]} "
            f"{rule[1]}; the largest score is {scores.max():.4g}), fewer than "
            f"n_components={k}.",
            "lower bair_threshold, raise bair_n_features, or ask for fewer components.",
        )
    sub = pca(X[:, keep], n_components=k, where=f"{where}[:, kept features]")
    comps = np.zeros((k, X.shape[1]), dtype=X.dtype)
    comps[:, keep] = sub.components
    n = st.n
    return SupervisedPCAModel(
        comps,
        np.asarray(st.mean_x, np.float64),  # float64: X's dtype may not hold it (transform)
        (sub.explained_variance * (n - 1)).astype(X.dtype),
        n,
        label_kernel,
        keep,
        scores,
        {
            "bair_rule": rule[0],
            "bair_value": rule[1],
            "n_selected": int(len(keep)),
            "solver": sub.solver,
        },
    )


def check_supervised_pca_params(params: dict, shape: tuple) -> None:
    """`supervised_pca`'s own checks of its keywords (``params``, all of them but ``where``)
    for an input of ``shape`` = (n_samples, n_features), before anything runs; raises
    `InputError`."""
    n, d = shape
    _check_k(params["n_components"], n, d, SPCA)
    check_choice(params["label_kernel"], LABEL_KERNELS, "label_kernel", SPCA, "delta")
    _check_bair(
        params["bair_threshold"], params["bair_n_features"], d, params["label_kernel"], SPCA
    )


def check_kernel_supervised_pca_params(params: dict, shape: tuple) -> None:
    """`kernel_supervised_pca`'s own checks of its keywords, as `check_supervised_pca_params`."""
    p = params
    _check_k(p["n_components"], shape[0], None, KSPCA)
    check_choice(p["label_kernel"], LABEL_KERNELS, "label_kernel", KSPCA, "delta")
    kernel = tuple(p[k] for k in ("kernel", "gamma", "width", "degree", "coef0"))
    kernel_and_solver(shape, *kernel, p["solver"], KSPCA_SOLVERS, KSPCA)


def supervised_pca(
    X,
    y=None,
    *,
    n_components: int = 2,
    label_kernel: str = "delta",
    label_gamma=None,
    label_width=None,
    n_label_landmarks: int = 100,
    bair_threshold=None,
    bair_n_features=None,
    random_state=0,
    where: str = "X",
) -> SupervisedPCAModel:
    """Fit supervised PCA (or Bair's screened PCA) of ``X`` (NumPy or dask) against ``y``.

    Supervised PCA (Barshan et al. 2011): the top eigenvectors of Q = Xc^T B Xc, from one pass
    over the rows; with ``bair_threshold`` or ``bair_n_features``, Bair et al. 2006's
    screening of the features by their scores against the labels, then PCA on the kept ones (a
    second pass). Sparse X (CSR, or dask of CSR row blocks) is centred implicitly, as in `pca`.

    Parameters
    ----------
    X : array-like, dask array or sparse matrix of shape (n_samples, n_features)
        The data rows.
    y : array-like or dask array of shape (n_samples,) or (n_samples, q), or None, default None
        The labels in the row order of X: one class per row (delta), or real targets; not
        used (may be None) with ``label_kernel="identity"``.
    n_components : int, default 2
        An int in [1, min(n_samples - 1, n_features)].
    label_kernel : {"delta", "linear", "gaussian", "identity"}, default "delta"
        B = Delta Delta^T on the labels (see the module docstring): class indicators, real
        targets, a Nyström gaussian kernel of real targets; identity (B = I) gives PCA and does
        not use y.
    label_gamma : float or None, default None
        Gaussian label kernel only: its gamma (None: 1 / q for q target columns).
    label_width : float or None, default None
        Gaussian label kernel only: its width c, gamma = 1 / c^2 (pass gamma or width).
    n_label_landmarks : int, default 100
        Gaussian label kernel only: the landmarks of its Nyström factor.
    bair_threshold : float or None, default None
        Bair's screening: keep the features whose score is above this (a finite number >= 0).
        Pass this or ``bair_n_features``, not both.
    bair_n_features : int or None, default None
        Bair's screening: keep this many features with the largest scores (an int in
        [1, n_features]).
    random_state : int, numpy Generator or None, default 0
        Seeds the gaussian label kernel's landmarks.
    where : str, default "X"
        The name of the input in error messages.

    Returns
    -------
    SupervisedPCAModel
        The fitted model: components, mean, eigenvalues of Q; for Bair's screening also the
        selected features and every feature's score.

    Raises
    ------
    InputError
        ``X`` is not a finite 2-D numeric array; ``n_components``, ``label_kernel`` or a
        label kernel parameter out of range; ``y`` missing, of the wrong length or shape, with
        NaN or inf, or of fewer than 2 classes; both Bair parameters, or Bair's screening with
        ``label_kernel="identity"``; Bair's screening keeping fewer than n_components
        features.

    Warns
    -----
    DimredWarning
        Components past the rank of Q (no dependence on the labels; eigenvalue 0).
    """
    method = SPCA
    X = check_array(X, method=method, where=where, accept_sparse=True)
    n, d = X.shape
    k = _check_k(n_components, n, d, method)
    check_choice(label_kernel, LABEL_KERNELS, "label_kernel", method, "delta")
    rule = _check_bair(bair_threshold, bair_n_features, d, label_kernel, method)
    if label_kernel == "identity":  # B = I: Q = Xc^T Xc, i.e. PCA
        sub = pca(X, n_components=k, where=where)
        return SupervisedPCAModel(
            sub.components,
            sub.mean,
            (sub.explained_variance * (n - 1)).astype(X.dtype),
            n,
            "identity",
            info={"solver": sub.solver, "convergence": sub.convergence},
        )
    labels = label_keywords(label_gamma, label_width, n_label_landmarks, random_state, method)
    y2, lmap = prepare_labels(y, X, label_kernel, **labels)
    st = cross_stats(
        X,
        label_factor(y2, lmap),
        method=method,
        where=where,
        stage="supervised PCA: X^T H Delta pass",
    )
    if rule is not None:
        return _bair(X, st, k, rule, label_kernel, where, method)
    u, vals, rank = _top_directions(st.cross, k, method)
    return SupervisedPCAModel(
        sign_fix(u.T).astype(X.dtype),
        np.asarray(st.mean_x, np.float64),  # float64: X's dtype may not hold it (transform)
        vals.astype(X.dtype),
        n,
        label_kernel,
        info={"rank": rank, "label_rank": lmap.rank},
    )


# ---------------------------------------------------------------- kernel supervised PCA


def _dense_factor(X, params: dict, method: str):
    """(training rows, Phi = V_+ S_+^1/2, V_+ S_+^-1/2) from the positive part of K."""
    X = rows_in_memory(X, method, "kernel SPCA: rows to memory")
    K = pairwise_kernels(X, **params)
    eig = top_eigh(K, K.shape[0], solver="dense", stage="kernel SPCA: eigh(K)")
    keep = eig.values > KERNEL_RANK_RTOL[X.dtype] * max(eig.values[0], 0.0)
    if not keep.any():
        raise InputError(
            f"{method}: the kernel matrix has no positive eigenvalue ({params}).",
            "use a positive semidefinite kernel such as gaussian.",
        )
    v, s = eig.vectors[:, keep], eig.values[keep]
    return X, v * np.sqrt(s), v / np.sqrt(s), {"kernel_rank": int(keep.sum())}


def _feature_directions(phi, y2, lmap, k: int, method: str, where: str):
    """(a (p, k), eigenvalues, rank): linear SPCA of the rows of Phi."""
    p = phi.shape[1]
    if k > p:
        raise InputError(
            f"{method}: the kernel's feature space has rank {p} here, fewer than n_components={k}.",
            "ask for fewer components, use more landmarks or a kernel of higher rank (gaussian).",
        )
    if lmap is None:  # identity: kernel PCA, eigenvectors of Phic^T Phic
        st = column_stats(
            phi, gram=True, method=method, where=where, stage="kernel SPCA: feature scatter pass"
        )
        w, v = scipy.linalg.eigh(st.m2)
        order = np.argsort(w)[::-1][:k]
        return v[:, order], np.clip(w[order], 0.0, None), p
    st = cross_stats(
        phi,
        label_factor(y2, lmap),
        method=method,
        where=where,
        stage="kernel SPCA: Phi^T H Delta pass",
    )
    return _top_directions(st.cross, k, method, stacklevel=4)


def kernel_supervised_pca(
    X,
    y=None,
    *,
    n_components: int = 2,
    kernel: str = "gaussian",
    gamma=None,
    width=None,
    degree: int = 3,
    coef0: float = 1.0,
    label_kernel: str = "delta",
    label_gamma=None,
    label_width=None,
    n_label_landmarks: int = 100,
    solver: str = "auto",
    n_landmarks: int = 200,
    landmarks: str = "kmeans++",
    random_state=0,
    where: str = "X",
) -> KernelSupervisedPCAModel:
    """Fit kernel SPCA of ``X`` (NumPy or dask) against ``y``.

    Kernel supervised PCA (Barshan et al. 2011) by reduction to linear SPCA of a factor
    K ~ Phi Phi^T (see the module docstring).

    Parameters
    ----------
    X : array-like or dask array of shape (n_samples, n_features)
        The data rows (sparse input is refused).
    y : array-like or dask array of shape (n_samples,) or (n_samples, q), or None, default None
        The labels in the row order of X; not used (may be None) with
        ``label_kernel="identity"``.
    n_components : int, default 2
        An int in [1, n_samples - 1], at most the rank of the kernel's factor.
    kernel : str, default "gaussian"
        The kernel on X (`pairwise.check_kernel`): "gaussian", "polynomial", "laplacian",
        "sigmoid", "cosine" or "linear".
    gamma : float or None, default None
        The kernel on X: gamma (> 0; None: 1 / n_features).
    width : float or None, default None
        The kernel on X: the gaussian kernel's c in exp(-||x - x'||^2 / c^2).
    degree : int, default 3
        The kernel on X: the polynomial kernel's degree.
    coef0 : float, default 1.0
        The kernel on X: the polynomial and sigmoid kernels' constant term.
    label_kernel : {"delta", "linear", "gaussian", "identity"}, default "delta"
        B = Delta Delta^T on the labels (see the module docstring): class indicators, real
        targets, a Nyström gaussian kernel of real targets; identity (B = I) gives PCA and does
        not use y.
    label_gamma : float or None, default None
        Gaussian label kernel only: its gamma (None: 1 / q for q target columns).
    label_width : float or None, default None
        Gaussian label kernel only: its width c, gamma = 1 / c^2 (pass gamma or width).
    n_label_landmarks : int, default 100
        Gaussian label kernel only: the landmarks of its Nyström factor.
    solver : {"auto", "dense", "nystrom"}, default "auto"
        dense (X and K in memory, exact), nystrom (n x m, lazy for dask) or auto (dense up to
        ``DENSE_MAX_SAMPLES`` rows).
    n_landmarks : int, default 200
        Nyström only: the number of landmarks (at most n_samples).
    landmarks : {"auto", "uniform", "maxmin", "kmeans++", "kmeans"}, default "kmeans++"
        Nyström only: how the landmarks are chosen.
    random_state : int, numpy Generator or None, default 0
        Seeds the landmarks.
    where : str, default "X"
        The name of the input in error messages.

    Returns
    -------
    KernelSupervisedPCAModel
        The fitted model; its ``embedding`` is K beta (training), ``transform`` gives
        k(x, reference) dual_coef for new rows.

    Raises
    ------
    InputError
        ``X`` is not a finite 2-D numeric array; ``n_components``, ``kernel``, a kernel
        parameter, ``label_kernel``, ``solver`` or ``landmarks`` out of range; ``y``
        missing, of the wrong length or shape, with NaN or inf, or of fewer than 2 classes;
        a kernel matrix with no positive eigenvalue; n_components above the rank of the
        kernel's factor.

    Warns
    -----
    DimredWarning
        Components past the rank of Phi^T H B H Phi (eigenvalue 0).
    """
    method = KSPCA
    X = check_array(X, method=method, where=where)
    n = X.shape[0]
    k = _check_k(n_components, n, None, method)
    check_choice(label_kernel, LABEL_KERNELS, "label_kernel", method, "delta")
    params, solver = kernel_and_solver(
        X.shape, kernel, gamma, width, degree, coef0, solver, KSPCA_SOLVERS, method
    )
    y2, lmap = None, None
    if label_kernel != "identity":
        labels = label_keywords(label_gamma, label_width, n_label_landmarks, random_state, method)
        y2, lmap = prepare_labels(y, X, label_kernel, **labels)
    if solver == "dense":
        ref, phi, to_coef, info = _dense_factor(X, params, method)
        y2 = None if y2 is None else align_labels(y2, ref)
    else:
        nmap, phi, info = nystrom_factor(X, params, n_landmarks, landmarks, random_state)
        ref, to_coef = nmap.landmarks, nmap.proj
    a, vals, rank = _feature_directions(phi, y2, lmap, k, method, where)
    a, dtype = sign_fix(a.T).T, X.dtype
    emb = rowwise(phi, lambda b: (b @ a.astype(b.dtype)).astype(dtype), k, dtype)
    if solver == "dense":
        emb = like_input(emb, X)
    return KernelSupervisedPCAModel(
        np.asarray(ref).astype(dtype),
        (to_coef @ a).astype(dtype),
        vals.astype(dtype),
        params,
        n,
        solver,
        label_kernel,
        {**info, "rank": int(rank)},
        emb,
    )


# ---------------------------------------------------------------- estimators


class _SupervisedBase(Projection):
    """fit calls the function core with the parameters (their names are its keywords)."""

    _fitted_attr = "n_features_in_"

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.target_tags.required = self.label_kernel != "identity"
        tags.input_tags.sparse = self.accepts_sparse
        return tags


class SupervisedPCA(_SupervisedBase):
    """Supervised PCA (Barshan et al. 2011; Bair et al. 2006 with ``bair_*``).

    Parameters
    ----------
    n_components : int
    label_kernel : {"delta", "linear", "gaussian", "identity"}
        B = Delta Delta^T on the labels (see the module docstring); identity gives PCA.
    label_gamma, label_width, n_label_landmarks : gaussian label kernel only.
    bair_threshold, bair_n_features : Bair's screening (one of them), then PCA on the kept
        features.
    random_state : seeds the gaussian label kernel's landmarks.

    Attributes
    ----------
    components_, mean_, eigenvalues_, n_components_, n_features_in_, n_samples_,
    selected_features_, feature_scores_ (Bair only, else None)

    Sparse X (CSR, or dask of CSR row blocks) is centred implicitly, as in `PCA`.
    """

    accepts_sparse = True

    def __init__(
        self,
        n_components=2,
        *,
        label_kernel="delta",
        label_gamma=None,
        label_width=None,
        n_label_landmarks=100,
        bair_threshold=None,
        bair_n_features=None,
        random_state=0,
    ):
        self.n_components, self.label_kernel = n_components, label_kernel
        self.label_gamma, self.label_width = label_gamma, label_width
        self.n_label_landmarks, self.random_state = n_label_landmarks, random_state
        self.bair_threshold, self.bair_n_features = bair_threshold, bair_n_features

    def fit(self, X, y=None):
        self._model = m = supervised_pca(X, y, **self.get_params(deep=False))
        self.components_, self.eigenvalues_ = m.components, m.eigenvalues
        self.mean_ = m.mean.astype(m.components.dtype)  # in X's dtype, as scikit-learn's
        self.selected_features_, self.feature_scores_ = m.selected_features, m.feature_scores
        self.n_components_, self.n_features_in_ = m.n_components, m.mean.shape[0]
        self.n_samples_, self.convergence_ = m.n_samples, m.convergence
        return self

    def fit_transform(self, X, y=None):
        return self.fit(X, y).transform(X)

    def inverse_transform(self, X):
        return self._model.inverse_transform(self._checked(X, self.n_components_))


class KernelSupervisedPCA(_SupervisedBase, FittedEmbedding):
    """Kernel supervised PCA (Barshan et al. 2011), dense or Nyström.

    Parameters
    ----------
    n_components : int
    kernel, gamma, width, degree, coef0 : the kernel on X (pairwise.check_kernel)
    label_kernel, label_gamma, label_width, n_label_landmarks : the kernel on the labels
    solver : {"auto", "dense", "nystrom"}
    n_landmarks, landmarks : Nyström only
    random_state : seeds the landmarks

    Attributes
    ----------
    embedding_, eigenvalues_, dual_coef_, reference_ (training rows or landmarks),
    n_components_, n_features_in_, n_samples_, solver_
    """

    def __init__(
        self,
        n_components=2,
        *,
        kernel="gaussian",
        gamma=None,
        width=None,
        degree=3,
        coef0=1.0,
        label_kernel="delta",
        label_gamma=None,
        label_width=None,
        n_label_landmarks=100,
        solver="auto",
        n_landmarks=200,
        landmarks="kmeans++",
        random_state=0,
    ):
        self.n_components, self.kernel, self.gamma, self.width = n_components, kernel, gamma, width
        self.degree, self.coef0, self.solver = degree, coef0, solver
        self.label_kernel, self.label_gamma = label_kernel, label_gamma
        self.label_width, self.n_landmarks, self.landmarks = label_width, n_landmarks, landmarks
        self.n_label_landmarks, self.random_state = n_label_landmarks, random_state

    def fit(self, X, y=None):
        self._model = m = kernel_supervised_pca(X, y, **self.get_params(deep=False))
        self.embedding_, self.eigenvalues_ = m.embedding, m.eigenvalues
        self.dual_coef_, self.reference_ = m.dual_coef, m.reference
        self.n_components_, self.n_features_in_ = m.n_components, m.reference.shape[1]
        self.n_samples_, self.solver_, self.convergence_ = m.n_samples, m.solver, m.convergence
        return self


METHOD_SPECS = (
    MethodSpec(
        "spca",
        SupervisedPCA,
        supervised_pca,
        takes="dense or sparse, with `--labels`",
        docs=DOCS_LINEAR,
        not_in_estimator={"y": "the estimator takes the labels in fit(X, y)"},
        model=SupervisedPCAModel,
        check=check_supervised_pca_params,
        second_input="labels",
    ),
    MethodSpec(
        "kspca",
        KernelSupervisedPCA,
        kernel_supervised_pca,
        takes="dense, with `--labels`",
        docs=DOCS_LINEAR,
        not_in_estimator={"y": "the estimator takes the labels in fit(X, y)"},
        model=KernelSupervisedPCAModel,
        check=check_kernel_supervised_pca_params,
        second_input="labels",
    ),
)
