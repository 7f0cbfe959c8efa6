"""Classical (Torgerson) MDS: `classical_mds` / `MDS`, the `MDSModel` they return,
`check_distance_matrix`. Landmark MDS is `methods.landmark_mds`.

Classical MDS (Torgerson 1952; Gower 1966):

    D2 = [d_ij^2],  J = I - 11^T/n,  B = -1/2 J D2 J = V Lambda V^T,  Y = V_k Lambda_k^1/2

For Euclidean distances B = Xc Xc^T: Y is the PCA scores up to sign, the eigenvalues are
(n - 1) times PCA's variances and ``explained_variance_ratio`` (lambda / trace B) is PCA's.
Input: data rows with a metric from ``METRICS``, or an n x n distance matrix with
``metric="precomputed"`` (NumPy or dask, e.g. from Zarr), checked by `check_distance_matrix`.

Out of sample (de Silva & Tenenbaum 2003): x with squared distances delta_x to the n
training points maps to y = -1/2 Lambda_k^-1/2 V_k^T (delta_x - mean_delta), mean_delta the
column means of D2. A training point gets back V_k Lambda_k^1/2 (V is orthogonal to 1).

A non-Euclidean dissimilarity (manhattan, chebyshev, a precomputed matrix) makes B
indefinite. Reported: the negative eigenvalues (all with the dense solver, the k most
negative otherwise), ``negative_mass`` = sum |lambda < 0| / sum |lambda| (dense only) and
``negative_ratio`` = |lambda_min| / lambda_max (subspace iteration on lambda_max I - B, in
the same passes over B as the top solve, gives a lower bound; dense and Lanczos are exact).
Eigenvalues above -n eps lambda_max are rounding, not negative; kept components not above
+n eps lambda_max are zeroed, with a warning.

Stress: Kruskal's stress-1, sqrt(sum (d_ij - ||y_i - y_j||)^2 / sum d_ij^2) over pairs, exact
up to ``STRESS_MAX_ROWS`` points, else on a random sample of that many rows (see ``info``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .._validation import (
    check_array,
    check_fits_in_memory,
    check_random_state,
    is_dask,
)
from ..blocks.centring import double_centred
from ..linalg import choose_eigen_solver
from ..pairwise import CentredOperator, center_stats
from ._base import (
    like_input,
)
from ._mds_parts import (
    MDS_SOLVERS,
    SPECTRUM_ARRAYS,
    _check_metric,
    _check_n_components,
    _check_solver,
    _eigen,
    _kruskal_stress,
    _MDSBase,
    _sample_distances,
    _shift,
    _squared_matrix,
    _stress_rows,
    _Triangulating,
)
from ._precomputed import (
    as_square,
    check_distance_matrix,  # noqa: F401  (re-exported: methods.mds.check_distance_matrix)
    checked_distances,
    distance_stats,
    evaluate,
    principal_submatrix,
)
from ._spec import DOCS_LINEAR, MethodSpec

__all__ = [
    "MDS",
    "MDS_SOLVERS",
    "MDSModel",
    "check_distance_matrix",
    "classical_mds",
]


# --------------------------------------------------------------------------- models


@dataclass
class MDSModel(_Triangulating):
    """A fitted classical MDS. Data input keeps the training rows (``X_fit``): the
    triangulation of a new point needs its distances to all of them."""

    embedding: np.ndarray  # (n, k) V_k Lambda_k^1/2, sign-fixed columns, dtype of the input
    eigenvalues: np.ndarray  # (k,) top eigenvalues of B, descending, float64
    negative_eigenvalues: np.ndarray  # ascending (most negative first), float64
    proj: np.ndarray  # (n, k) -1/2 V_k Lambda_k^-1/2 (zero columns for dropped components)
    sq_means: np.ndarray  # (n,) mean_delta: column means of D2
    metric: dict  # resolved metric parameters, or {"metric": "precomputed"}
    solver: str
    n_samples: int
    trace: float  # trace(B), the sum of all eigenvalues (Euclidean: the total scatter)
    stress: float
    negative_ratio: float | None  # |lambda_min| / lambda_max (None: not measured)
    negative_mass: float | None = None  # sum |lambda < 0| / sum |lambda| (dense solver)
    X_fit: np.ndarray | None = None  # (n, d) training rows; None for precomputed
    shift: np.ndarray | None = None  # (d,) subtracted before Euclidean distances (accuracy)
    offset: np.ndarray | None = None  # (k,) always zero here; kept for the shared transform
    info: dict = field(default_factory=dict)

    _ARRAYS = ("embedding", *SPECTRUM_ARRAYS, "X_fit", "shift", "offset")

    def _reference(self):
        return self.X_fit

    @property
    def n_features_in(self) -> int:
        return self.n_samples if self.X_fit is None else int(self.X_fit.shape[1])


# --------------------------------------------------------------------------- classical MDS


def classical_mds(
    X,
    *,
    n_components=2,
    metric="euclidean",
    p=2.0,
    solver="auto",
    n_oversamples=10,
    n_iter=4,
    random_state=0,
    measure_negative=True,
    where=None,
    check_input=True,
    stats=None,
) -> MDSModel:
    """Classical MDS of ``X`` (data rows, or an n x n distance matrix with
    ``metric="precomputed"``), NumPy or dask; returns the `MDSModel`.

    Classical (Torgerson) MDS (Torgerson 1952; Gower 1966); see the module docstring for the
    negative part of the spectrum and the stress reported.

    Parameters
    ----------
    X : array-like or dask array of shape (n_samples, n_features) or (n_samples, n_samples)
        The data rows, or with ``metric="precomputed"`` an n x n distance matrix (checked by
        `check_distance_matrix`).
    n_components : int, default 2
        An int in [1, n_samples - 1].
    metric : str, default "euclidean"
        One of ``METRICS`` ("euclidean", "sqeuclidean", "cosine", "manhattan", "chebyshev",
        "minkowski") or "precomputed".
    p : float, default 2.0
        The minkowski metric's order (>= 1); minkowski only.
    solver : {"auto", "dense", "randomized", "lanczos"}, default "auto"
        ``dense`` (whole spectrum in memory), ``randomized`` (subspace iteration over the lazy
        B: ``n_iter + 1`` passes, ``n_iter + 2`` with the negative part), ``lanczos``, or
        ``auto`` (dense up to ``linalg.DENSE_MAX`` points, randomized above).
    n_oversamples : int, default 10
        Randomized solver only: extra vectors beyond n_components.
    n_iter : int, default 4
        Randomized solver only: the power steps.
    random_state : int, numpy Generator or None, default 0
        Seeds the randomized solver and the stress sample.
    measure_negative : bool, default True
        False skips the most negative eigenvalues with the iterative solvers (randomized:
        one pass, and the second block in each product; Lanczos: its own solve).
    where : str or None, default None
        Names the input in errors (None: "D" for a precomputed matrix, "X" for data).
    check_input : bool, default True
        False: a precomputed NumPy D known to be valid and exactly symmetric is not checked
        again.
    stats : (ndarray, float) or None, default None
        With ``check_input=False`` and a precomputed dask D: the row means of D squared and
        their mean, computed by the caller where it made D (their pass is skipped).

    Returns
    -------
    MDSModel
        The fitted model: embedding, eigenvalues, negative part of the spectrum, stress.

    Raises
    ------
    InputError
        ``X`` is not a finite 2-D numeric array, or a precomputed D fails
        `check_distance_matrix`; fewer than 2 samples; ``n_components``, ``metric``, ``p`` or
        ``solver`` out of range.
    SolverError
        The eigensolver did not converge.

    Warns
    -----
    DimredWarning
        Kept components whose eigenvalue is not above rounding, set to zero.
    """
    params = _check_metric(metric, p, "MDS")
    where = where or ("D" if params["metric"] == "precomputed" else "X")
    _check_solver(solver, "MDS")
    rng = check_random_state(random_state)
    if params["metric"] == "precomputed":
        D, k, solver, D2, r, g = _precomputed_input(
            X, n_components, solver, where, check_input, stats
        )
        X_fit, shift, dtype = None, None, D.dtype
        # the first pass over a dask D checks it or takes its row means (the dense solver
        # gathers D in it), unless the caller gave them
        first = is_dask(X) and not _callers_stats(check_input, stats, solver)
    else:
        X = check_array(X, method="MDS", where=where)
        k = _check_n_components(n_components, X.shape[0], "MDS")
        solver = choose_eigen_solver(solver, X.shape[0])
        if solver == "dense" or not is_dask(X):
            _check_in_memory(X.shape[0], X.dtype.itemsize, solver == "dense")
        shift = _shift(X, params)
        X_fit, D2, r, g = _data_input(X, params, shift, solver == "dense")
        X_fit, dtype = check_array(X_fit, method="MDS", where=where), X.dtype
        first = is_dask(X)
    if is_dask(D2):  # never formed: each product makes its rows a run at a time
        precomputed = params["metric"] == "precomputed"
        B = CentredOperator(D if precomputed else D2, r, g, square=precomputed)
    else:  # in memory: B from D (its squares never held apart), or in place of D2 made here
        B, r, g = (
            double_centred(D, square=True)
            if D2 is None
            else double_centred(D2, square=False, out=np.ascontiguousarray(D2, np.float64))
        )
    n = B.shape[0]
    eig_kw = {"n_oversamples": n_oversamples, "n_iter": n_iter, "random_state": rng}
    solver_, lam, vectors, root, inv, negative, info = _eigen(
        B, k, n, dtype, solver, eig_kw, measure_negative, "MDS"
    )
    embedding = (vectors * root).astype(dtype)
    idx, exact = _stress_rows(n, rng)
    if X_fit is None:
        (d_s,) = evaluate(principal_submatrix(D, idx), stage="MDS: stress sample")
    else:
        d_s = _sample_distances(X_fit[idx], shift, params)
    info.update(
        {
            "stress_rows": int(idx.size),
            "stress_exact": exact,
            "passes": info["passes"] + int(first),
        }
    )  # + the first pass
    return MDSModel(
        embedding,
        lam,
        negative[0],
        -0.5 * vectors * inv,
        r,
        params,
        solver_,
        n,
        n * g / 2,
        _kruskal_stress(d_s, embedding[idx]),
        negative[2],
        negative[1],
        X_fit=X_fit,
        shift=shift,
        offset=np.zeros(k),
        info=info,
    )


def _check_in_memory(n: int, itemsize: int, dense: bool) -> None:
    """`InputError` when the n x n matrices of an in-memory fit would not fit in the memory
    available: the squared distances in X's dtype and B in float64, and with the dense solver
    LAPACK's copy (23 bytes per entry measured at 3000 float64 rows, dense; 12 at 8000
    float32 rows, randomized)."""
    per_entry = 8 + itemsize + (8 if dense else 1)
    check_fits_in_memory(
        per_entry * n * n,
        f"MDS of {n} rows in memory holds their {n} x {n} squared distances and B",
        "pass the rows as a dask array (the randomized and Lanczos solvers then recompute "
        "distance blocks and hold nothing n x n), or use LandmarkMDS (O(n m)).",
    )


def _callers_stats(check_input: bool, stats, solver: str) -> bool:
    """Whether a precomputed dask D's row means come from the caller (no pass for them)."""
    return not check_input and stats is not None and solver != "dense"


def _precomputed_input(
    D, n_components, solver: str, where: str, check_input: bool = True, stats=None
):
    """Validate D (dask: with the row means of D2 in the same pass). Returns (D, k, solver,
    D2, row means, grand mean); the last three None for D in memory (B is made from D)."""
    D = as_square(D, where, "MDS")
    k = _check_n_components(n_components, D.shape[0], "MDS")
    solver = choose_eigen_solver(solver, D.shape[0])
    if not is_dask(D):
        return (
            check_distance_matrix(D, where=where, method="MDS") if check_input else D,
            k,
            solver,
            None,
            None,
            None,
        )
    if _callers_stats(check_input, stats, solver):
        r, g = np.asarray(stats[0], np.float64), float(stats[1])
    elif not check_input:  # a matrix the caller made (Isomap's geodesics): the stats only
        M = D if solver == "dense" else None  # dense: D gathered in the same pass
        M, r, g = evaluate(M, *distance_stats(D), stage="MDS: distance row means")
        D = D if M is None else M
    elif solver == "dense":
        _, (D, r, g) = checked_distances(D, where, "MDS", extra=lambda M: (M, *distance_stats(M)))
    else:
        D, (r, g) = checked_distances(D, where, "MDS", extra=distance_stats)
    return D, k, solver, D.astype(np.float64) ** 2, r, g


def _data_input(X, metric: dict, shift, dense: bool):
    """(training rows in memory, D2, its row means, their mean) in one pass over X; D2 stays
    lazy for the iterative solvers (each of their passes recomputes its blocks)."""
    D2 = _squared_matrix(X, metric, shift)
    if dense:
        X_fit, D2 = evaluate(X, D2, stage="MDS: distance matrix")
        return (X_fit, D2, *center_stats(D2))
    X_fit, r, g = evaluate(X, *center_stats(D2), stage="MDS: distance row means")
    return X_fit, D2, r, g


# --------------------------------------------------------------------------- estimators


class MDS(_MDSBase):
    """Classical (Torgerson) multidimensional scaling on NumPy or dask arrays (Torgerson 1952).

    Parameters
    ----------
    n_components : int in [1, n_samples - 1]
    metric : one of ``METRICS`` or "precomputed" (then ``fit`` takes an n x n distance
        matrix and ``transform`` the distances from new points to the n training points)
    p : float, minkowski only
    solver : {"auto", "dense", "randomized", "lanczos"}
    n_oversamples, n_iter : randomized solver only
    random_state : int, numpy Generator or None

    Attributes
    ----------
    embedding_ (NumPy, or dask chunked like the input), eigenvalues_,
    explained_variance_ratio_, negative_eigenvalues_, negative_mass_ (dense solver),
    negative_ratio_, stress_, n_components_, n_features_in_, solver_
    """

    def __init__(
        self,
        n_components=2,
        *,
        metric="euclidean",
        p=2.0,
        solver="auto",
        n_oversamples=10,
        n_iter=4,
        random_state=0,
    ):
        self._keep_params(locals())

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.pairwise = self.metric == "precomputed"
        return tags

    def fit(self, X, y=None):
        model = classical_mds(X, **self.get_params(deep=False))
        self._set_common(model)
        self.embedding_ = like_input(model.embedding, X)
        self.n_features_in_ = model.n_features_in
        self.solver_ = model.solver
        return self


METHOD_SPECS = (
    MethodSpec(
        "mds",
        MDS,
        classical_mds,
        follows_pca=True,
        takes="dense, or an n x n distance matrix (`metric=precomputed`)",
        docs=DOCS_LINEAR,
        flow_adds="the distance stage (not for `solver=dense` or `precomputed`)",
        not_in_estimator={
            "check_input": "an inner caller's (Isomap's) checked distance matrix",
            "measure_negative": "an inner caller's skip of the negative-eigenvalue solve",
            "stats": "an inner caller's (Isomap's) row means of the squared distances",
        },
        model=MDSModel,
    ),
)
