"""Classical (Torgerson) MDS and landmark MDS: `classical_mds` / `MDS` and `landmark_mds` /
`LandmarkMDS`, the `MDSModel` and `LandmarkMDSModel` they return, `check_distance_matrix`.

Classical MDS (Torgerson 1952; Gower 1966):

    D2 = [d_ij^2],  J = I - 11^T/n,  B = -1/2 J D2 J = V Lambda V^T,  Y = V_k Lambda_k^1/2

For Euclidean distances B = Xc Xc^T: Y is the PCA scores up to sign, the eigenvalues are
(n - 1) times PCA's variances and ``explained_variance_ratio`` (lambda / trace B) is PCA's.
Input: data rows with a metric from ``METRICS``, or an n x n distance matrix with
``metric="precomputed"`` (NumPy or dask, e.g. from Zarr), checked by `check_distance_matrix`.

Out of sample (de Silva & Tenenbaum 2003): x with squared distances delta_x to the n
training points maps to y = -1/2 Lambda_k^-1/2 V_k^T (delta_x - mean_delta), mean_delta the
column means of D2. A training point gets back V_k Lambda_k^1/2 (V is orthogonal to 1).

Landmark MDS (de Silva & Tenenbaum 2003): m landmarks (max-min over a uniform sample of
10 m rows, or uniform rows; `linalg.choose_landmarks`), classical MDS of their m x m squared
distances, then every point triangulated as above from its squared distances to the
landmarks (L# = V_k Lambda_k^-1/2, delta_mu the landmarks' mean). The paper's optional last
step (``align=True``), a PCA of the triangulated points (one pass: mean and k x k scatter),
moves the origin to the data's centroid and the axes onto its principal axes, so landmark
MDS of low-rank Euclidean data is classical MDS up to sign. O(n m), row block by row block.

A non-Euclidean dissimilarity (manhattan, chebyshev, a precomputed matrix) makes B
indefinite. Reported: the negative eigenvalues (all with the dense solver, the k most
negative otherwise), ``negative_mass`` = sum |lambda < 0| / sum |lambda| (dense only) and
``negative_ratio`` = |lambda_min| / lambda_max (subspace iteration on lambda_max I - B gives
a lower bound; dense and Lanczos are exact). Eigenvalues above -n eps lambda_max are
rounding, not negative; kept components not above +n eps lambda_max are zeroed, with a warning.

Stress: Kruskal's stress-1, sqrt(sum (d_ij - ||y_i - y_j||)^2 / sum d_ij^2) over pairs, exact
up to ``STRESS_MAX_ROWS`` points, else on a random sample of that many rows (see ``info``).
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace

import numpy as np

from .._validation import (
    check_array,
    check_is_fitted,
    check_random_state,
    is_dask,
)
from ..blocks.centring import double_centred
from ..blocks.kernels import distance_block
from ..errors import InputError
from ..linalg import choose_eigen_solver, choose_landmarks, column_stats, take_rows
from ..pairwise import center_stats, double_center
from ._base import (
    ModelTransform,
    DimredEstimator,
    HasConvergence,
    kept,
    like_input,
    row_blocks,
    row_range,
    rowwise,
)
from ._mds_parts import (
    MDS_SOLVERS,
    _check_int,
    _check_metric,
    _check_n_components,
    _check_solver,
    _eigen,
    _kruskal_stress,
    _shift,
    _sq_block,
    _squared_matrix,
    _stress_rows,
)
from ._precomputed import (
    as_square,
    check_distance_matrix,  # noqa: F401  (re-exported: methods.mds.check_distance_matrix)
    checked_distances,
    distance_stats,
    evaluate,
)

__all__ = [
    "LANDMARK_CHOICES",
    "MDS",
    "MDS_SOLVERS",
    "LandmarkMDS",
    "LandmarkMDSModel",
    "MDSModel",
    "check_distance_matrix",
    "classical_mds",
    "landmark_mds",
]

LANDMARK_CHOICES = ("maxmin", "uniform")  # of linalg.LANDMARK_METHODS
DEFAULT_N_LANDMARKS = 1000  # n_landmarks=None: min(n_samples, this)


# --------------------------------------------------------------------------- models


class _Triangulating(HasConvergence):
    """``transform`` and save/load shared by the two models.

    A point x maps to (delta_x - sq_means) @ proj + offset, delta_x its squared distances to
    the reference points (training rows or landmarks); for a precomputed model the rows given
    to ``transform`` are the distances from the new points to the n training points.
    """

    _ARRAYS: tuple = ()

    @property
    def n_components(self) -> int:
        return int(self.proj.shape[1])

    @property
    def explained_variance_ratio(self) -> np.ndarray:
        """lambda / trace(B): PCA's explained variance ratio for Euclidean distances."""
        return self.eigenvalues / self.trace if self.trace > 0 else np.zeros_like(self.eigenvalues)

    def summary(self) -> dict:
        """What a run's manifest records of the fit: eigenvalues, the first negative ones,
        stress, the metric, and the solver's scalars and convergence."""
        return {
            "n_components": int(self.n_components),
            "eigenvalues": np.asarray(self.eigenvalues, dtype=float).tolist(),
            "explained_variance_ratio": np.asarray(self.explained_variance_ratio, float).tolist(),
            "negative_eigenvalues": np.asarray(self.negative_eigenvalues, float)[:10].tolist(),
            "negative_ratio": self.negative_ratio,
            "negative_mass": self.negative_mass,
            "stress": float(self.stress),
            "metric": dict(self.metric),
            **{k: v for k, v in self.info.items() if isinstance(v, (int, float, str, bool))},
            "convergence": self.convergence,
        }

    def transform(self, X):
        """Embed rows of X (NumPy, or lazily row block by row block for dask). The sum over
        the training rows (or landmarks) is taken one block at a time: all of them in
        memory, or the stored chunks of a model loaded from a run store (`_base.row_blocks`).
        """
        dtype, k = X.dtype, self.n_components
        offset = np.zeros(k) if self.offset is None else np.asarray(self.offset)
        metric, shift, ref = dict(self.metric), self.shift, self._reference()
        proj, mean_sq = self.proj, np.asarray(self.sq_means, np.float64)

        def encode(block):
            block = np.asarray(block)
            if ref is not None and shift is not None:
                block = block - shift.astype(block.dtype)
            out = np.zeros((block.shape[0], k))
            for lo, part in row_blocks(proj if ref is None else ref):
                hi = lo + part.shape[0]
                if ref is None:  # precomputed: the block holds distances to the training points
                    delta, p = np.asarray(block[:, lo:hi], np.float64) ** 2, part
                else:
                    if shift is not None:
                        part = part - shift.astype(part.dtype)
                    delta = _sq_block(block, part.astype(block.dtype, copy=False), metric)
                    p = row_range(proj, lo, hi)
                out += (delta - mean_sq[lo:hi]) @ np.asarray(p, np.float64)
            return (out + offset).astype(dtype)

        return rowwise(X, encode, k, dtype)

    def arrays(self) -> dict[str, np.ndarray]:
        """The arrays that make up the model, for a store's ``model/`` group."""
        return {
            f"{n}_": np.asarray(getattr(self, n))
            for n in self._ARRAYS
            if getattr(self, n) is not None
        }

    def scalars(self) -> dict:
        """Everything else (JSON-able), for the manifest."""
        out = {
            f.name: _plain(getattr(self, f.name))
            for f in fields(self)
            if f.name not in self._ARRAYS and f.name != "info"
        }
        return {**out, **{k: _plain(v) for k, v in self.info.items()}}

    @classmethod
    def from_arrays(cls, arrays: dict, scalars: dict):
        names = {f.name for f in fields(cls)}
        kw = {n: kept(arrays[f"{n}_"]) for n in cls._ARRAYS if f"{n}_" in arrays}
        kw.update({k: v for k, v in scalars.items() if k in names and k not in cls._ARRAYS})
        kw["metric"] = dict(kw["metric"])
        kw["info"] = {k: v for k, v in scalars.items() if k not in names}
        return cls(**kw)


def _plain(v):
    if isinstance(v, dict):
        return {k: _plain(x) for k, x in v.items()}
    return v.item() if isinstance(v, np.generic) else v


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

    _ARRAYS = (
        "embedding",
        "eigenvalues",
        "negative_eigenvalues",
        "proj",
        "sq_means",
        "X_fit",
        "shift",
        "offset",
    )

    def _reference(self):
        return self.X_fit

    @property
    def n_features_in(self) -> int:
        return self.n_samples if self.X_fit is None else int(self.X_fit.shape[1])


@dataclass
class LandmarkMDSModel(_Triangulating):
    """A fitted landmark MDS: the m landmarks and an m x k triangulation, nothing of size n."""

    landmarks: np.ndarray  # (m, d) landmark points (rows of X)
    landmark_indices: np.ndarray  # (m,) their row numbers in X, ascending
    eigenvalues: np.ndarray  # (k,) top eigenvalues of the landmarks' B, descending
    negative_eigenvalues: np.ndarray  # of the landmarks' B, ascending
    proj: np.ndarray  # (m, k): -1/2 L# (times the alignment rotation)
    sq_means: np.ndarray  # (m,) delta_mu: column means of the landmarks' D2
    offset: np.ndarray  # (k,) from the alignment (zero without it)
    metric: dict
    n_samples: int
    trace: float  # trace of the landmarks' B
    stress: float
    negative_ratio: float | None
    negative_mass: float | None = None
    shift: np.ndarray | None = None
    info: dict = field(default_factory=dict)

    _ARRAYS = (
        "landmarks",
        "landmark_indices",
        "eigenvalues",
        "negative_eigenvalues",
        "proj",
        "sq_means",
        "offset",
        "shift",
    )

    def _reference(self):
        return self.landmarks

    @property
    def n_landmarks(self) -> int:
        return int(self.landmarks.shape[0])


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
        B: ``n_iter + 1`` passes), ``lanczos``, or ``auto`` (dense up to ``linalg.DENSE_MAX``
        points, randomized above).
    n_oversamples : int, default 10
        Randomized solver only: extra vectors beyond n_components.
    n_iter : int, default 4
        Randomized solver only: ``n_iter + 1`` passes.
    random_state : int, numpy Generator or None, default 0
        Seeds the randomized solver and the stress sample.
    measure_negative : bool, default True
        False skips the extra solve for the most negative eigenvalues with the iterative
        solvers.
    where : str or None, default None
        Names the input in errors (None: "D" for a precomputed matrix, "X" for data).
    check_input : bool, default True
        False: a precomputed NumPy D known to be valid and exactly symmetric is not checked
        again.

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
        D, k, solver, D2, r, g = _precomputed_input(X, n_components, solver, where, check_input)
        X_fit, shift, dtype = None, None, D.dtype
    else:
        X = check_array(X, method="MDS", where=where)
        k = _check_n_components(n_components, X.shape[0], "MDS")
        solver = choose_eigen_solver(solver, X.shape[0])
        shift = _shift(X, params)
        X_fit, D2, r, g = _data_input(X, params, shift, solver == "dense")
        X_fit, dtype = check_array(X_fit, method="MDS", where=where), X.dtype
    if is_dask(D2):
        r, g = np.asarray(r, np.float64), float(g)
        B = -0.5 * double_center(D2, (r, g))
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
        (d_s,) = evaluate(D[idx][:, idx], stage="MDS: stress sample")
    else:
        xs = X_fit[idx] if shift is None else X_fit[idx] - shift.astype(dtype)
        d_s = distance_block(xs, xs, **params)
    info.update(
        {
            "stress_rows": int(idx.size),
            "stress_exact": exact,
            "passes": info["passes"] + int(is_dask(X)),
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


def _precomputed_input(D, n_components, solver: str, where: str, check_input: bool = True):
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
    if not check_input:  # a matrix the caller made (Isomap's geodesics): the stats only
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


# --------------------------------------------------------------------------- landmark MDS


def _check_landmark_params(n: int, n_components, n_landmarks, landmarks):
    if landmarks not in LANDMARK_CHOICES:
        raise InputError(
            f"LandmarkMDS needs landmarks as one of {', '.join(LANDMARK_CHOICES)};"
            f" found {landmarks!r}.",
            "pass landmarks='maxmin' (the default, de Silva & Tenenbaum's choice) or 'uniform'.",
        )
    k = _check_n_components(n_components, n, "LandmarkMDS")
    m = min(n, DEFAULT_N_LANDMARKS) if n_landmarks is None else n_landmarks
    m = _check_int(
        m,
        "n_landmarks",
        k + 1,
        n,
        "LandmarkMDS",
        f"more than n_components={k}, at most n_samples={n}",
        f"pass n_landmarks between {k + 1} and {n} (a few hundred is usual), or "
        "None for min(n_samples, 1000).",
    )
    return k, m


def _landmark_metric(metric, p) -> dict:
    params = _check_metric(metric, p, "LandmarkMDS")
    if params["metric"] == "precomputed":
        raise InputError(
            "LandmarkMDS needs the data rows (it computes distances to the "
            "landmarks only); found metric='precomputed'.",
            "pass the data with a metric, or use MDS(metric='precomputed') for "
            "a full distance matrix.",
        )
    return params


def check_landmark_mds_params(params: dict, shape: tuple) -> None:
    """Refuse, before anything runs, `landmark_mds` parameters that cannot apply to an input
    of ``shape``: the same checks and messages as the function's.

    Parameters
    ----------
    params : dict
        All of `landmark_mds`'s keywords but ``align``, ``random_state`` and ``where``.
    shape : tuple of int
        The input's ``(n_samples, n_features)``.

    Raises
    ------
    InputError
        An unknown metric or landmark choice, ``metric="precomputed"``, or ``n_components`` /
        ``n_landmarks`` outside their ranges for ``n_samples``.
    """
    _landmark_metric(params["metric"], params["p"])
    _check_landmark_params(
        shape[0], params["n_components"], params["n_landmarks"], params["landmarks"]
    )


def landmark_mds(
    X,
    *,
    n_components=2,
    n_landmarks=None,
    landmarks="maxmin",
    metric="euclidean",
    p=2.0,
    align=True,
    random_state=0,
    where="X",
) -> LandmarkMDSModel:
    """Landmark MDS of the rows of ``X`` (NumPy or dask); returns the `LandmarkMDSModel`.

    Landmark MDS (de Silva & Tenenbaum 2003): O(n m), nothing n x n. The embedding is
    ``model.transform(X)`` (lazy for dask).

    Parameters
    ----------
    X : array-like or dask array of shape (n_samples, n_features)
        The data rows (a precomputed distance matrix is refused).
    n_components : int, default 2
        An int in [1, n_samples - 1].
    n_landmarks : int or None, default None
        m in (n_components, n_samples]; None for min(n_samples, 1000).
    landmarks : {"maxmin", "uniform"}, default "maxmin"
        Max-min over a uniform sample of 10 m rows (de Silva &
        Tenenbaum's choice), or uniform rows.
    metric : str, default "euclidean"
        One of ``METRICS``.
    p : float, default 2.0
        The minkowski metric's order (>= 1); minkowski only.
    align : bool, default True
        The final PCA of the triangulated points (one pass over X).
    random_state : int, numpy Generator or None, default 0
        Seeds the landmark choice and the stress sample.
    where : str, default "X"
        The name of the input in error messages.

    Returns
    -------
    LandmarkMDSModel
        The fitted model (landmarks, their eigenvalues, the triangulation map, stress).

    Raises
    ------
    InputError
        ``X`` is not a finite 2-D numeric array; ``metric="precomputed"``; ``n_components``,
        ``n_landmarks``, ``landmarks``, ``metric`` or ``p`` out of range.
    SolverError
        The landmarks' eigensolver did not converge.
    """
    params = _landmark_metric(metric, p)
    X = check_array(X, method="LandmarkMDS", where=where)
    n = X.shape[0]
    k, m = _check_landmark_params(n, n_components, n_landmarks, landmarks)
    rng = check_random_state(random_state)
    L, idx = choose_landmarks(
        X,
        m,
        landmarks,
        rng,
        metric=params["metric"],
        p=params.get("p", 2.0),
        allowed=LANDMARK_CHOICES,
        check_finite="LandmarkMDS",
        where=where,
    )
    shift = L.mean(axis=0, dtype=np.float64) if params["metric"] == "euclidean" else None
    D2 = _squared_matrix(L, params, shift)
    r, g = center_stats(D2)
    B = -0.5 * double_center(D2, (r, g))
    solver, lam, vectors, _, inv, negative, info = _eigen(
        B, k, m, X.dtype, "auto", {"random_state": rng}, True, "LandmarkMDS"
    )
    info.update(
        {
            "solver": solver,
            "landmark_method": landmarks,
            "aligned": bool(align),
            "passes": int(align),
        }
    )  # passes over X: the alignment's (B is m x m, in memory)
    model = LandmarkMDSModel(
        L,
        idx,
        lam,
        negative[0],
        -0.5 * vectors * inv,
        np.asarray(r, np.float64),
        np.zeros(k),
        params,
        n,
        m * float(g) / 2,
        float("nan"),
        negative[2],
        negative[1],
        shift=shift,
        info=info,
    )
    if align:
        model = _align(model, X, where)
    return _with_stress(model, X, params, rng)


def _align(model: LandmarkMDSModel, X, where: str) -> LandmarkMDSModel:
    """De Silva & Tenenbaum's last step: centre the triangulated points and rotate them onto
    their principal axes (one pass: mean and k x k scatter); column signs so that each
    column's largest landmark coordinate is positive."""
    stats = column_stats(
        model.transform(X),
        gram=True,
        method="LandmarkMDS",
        where=f"the coordinates triangulated from {where}",
        stage="LandmarkMDS: alignment pass",
    )
    w, R = np.linalg.eigh((stats.m2 + stats.m2.T) / 2)
    R = R[:, np.argsort(w)[::-1]]
    proj, offset = model.proj @ R, (model.offset - stats.mean) @ R
    at_landmarks = replace(model, proj=proj, offset=offset).transform(
        model.landmarks.astype(np.float64)
    )
    top = np.argmax(np.abs(at_landmarks), axis=0)
    signs = np.sign(at_landmarks[top, np.arange(at_landmarks.shape[1])])
    signs[signs == 0] = 1.0
    return replace(model, proj=proj * signs, offset=offset * signs)


def _with_stress(model: LandmarkMDSModel, X, metric: dict, rng) -> LandmarkMDSModel:
    idx, exact = _stress_rows(X.shape[0], rng)
    xs = take_rows(X, idx, "LandmarkMDS: stress sample")
    ref = xs if model.shift is None else xs - model.shift.astype(xs.dtype)
    stress = _kruskal_stress(distance_block(ref, ref, **metric), model.transform(xs))
    info = {**model.info, "stress_rows": int(idx.size), "stress_exact": exact}
    return replace(model, stress=stress, info=info)


# --------------------------------------------------------------------------- estimators


class _MDSBase(ModelTransform, DimredEstimator):
    _method = "MDS"

    def _set_common(self, model):
        self._model = model
        self.eigenvalues_ = model.eigenvalues
        self.explained_variance_ratio_ = model.explained_variance_ratio
        self.negative_eigenvalues_ = model.negative_eigenvalues
        self.negative_mass_ = model.negative_mass
        self.negative_ratio_ = model.negative_ratio
        self.stress_ = model.stress
        self.n_components_ = model.n_components
        self.convergence_ = model.convergence

    def fit_transform(self, X, y=None):
        return self.fit(X).embedding_

    def get_feature_names_out(self, input_features=None):
        check_is_fitted(self, "embedding_")
        prefix = type(self).__name__.lower()
        return np.array([f"{prefix}{i}" for i in range(self.n_components_)], dtype=object)


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
        self.n_components = n_components
        self.metric = metric
        self.p = p
        self.solver = solver
        self.n_oversamples = n_oversamples
        self.n_iter = n_iter
        self.random_state = random_state

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


class LandmarkMDS(_MDSBase):
    """Landmark MDS (de Silva & Tenenbaum 2003) on NumPy or dask arrays: O(n m), no n x n.

    Parameters
    ----------
    n_components : int
    n_landmarks : int in (n_components, n_samples], or None for min(n_samples, 1000)
    landmarks : {"maxmin", "uniform"}
    metric : one of ``METRICS``; p : float, minkowski only
    random_state : int, numpy Generator or None

    Attributes
    ----------
    embedding_ (lazy dask for dask input), eigenvalues_ (of the landmarks' B),
    explained_variance_ratio_, negative_eigenvalues_, negative_mass_, negative_ratio_,
    stress_, landmarks_ (m x d points), landmark_indices_, n_landmarks_, n_components_,
    n_features_in_
    """

    _method = "LandmarkMDS"

    def __init__(
        self,
        n_components=2,
        *,
        n_landmarks=None,
        landmarks="maxmin",
        metric="euclidean",
        p=2.0,
        random_state=0,
    ):
        self.n_components = n_components
        self.n_landmarks = n_landmarks
        self.landmarks = landmarks
        self.metric = metric
        self.p = p
        self.random_state = random_state

    def fit(self, X, y=None):
        X = check_array(X, method="LandmarkMDS")
        model = landmark_mds(X, **self.get_params(deep=False))
        self._set_common(model)
        self.embedding_ = model.transform(X)
        self.landmarks_ = model.landmarks
        self.landmark_indices_ = model.landmark_indices
        self.n_landmarks_ = model.n_landmarks
        self.n_features_in_ = X.shape[1]
        return self
