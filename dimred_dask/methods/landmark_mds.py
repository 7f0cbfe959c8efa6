"""Landmark MDS (de Silva & Tenenbaum 2003): `landmark_mds` / `LandmarkMDS` and the
`LandmarkMDSModel` they return. O(n m) work and nothing n x n.

m landmarks (max-min over a uniform sample of 10 m rows, or uniform rows;
`linalg.choose_landmarks`), classical MDS of their m x m squared distances
(``methods.mds``), then every point triangulated from its squared distances delta_x to the
landmarks: y = -1/2 L# (delta_x - delta_mu), L# = V_k Lambda_k^-1/2, delta_mu the column means
of the landmarks' D2. The paper's optional last step (``align=True``), a PCA of the
triangulated points (one pass: mean and k x k scatter), moves the origin to the data's centroid
and the axes onto its principal axes, so landmark MDS of low-rank Euclidean data is classical
MDS up to sign. Stress as classical MDS's (Kruskal's stress-1, on a sample of rows).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from .._validation import check_array, check_random_state
from ..errors import InputError
from ..linalg import choose_landmarks, column_stats, take_rows
from ..pairwise import center_stats, double_center
from ._mds_parts import (
    SPECTRUM_ARRAYS,
    _check_int,
    _check_metric,
    _check_n_components,
    _eigen,
    _kruskal_stress,
    _MDSBase,
    _sample_distances,
    _squared_matrix,
    _stress_rows,
    _Triangulating,
)
from ._spec import DOCS_LINEAR, MethodSpec

__all__ = [
    "LandmarkMDS",
    "LandmarkMDSModel",
    "landmark_mds",
    "check_landmark_mds_params",
    "LANDMARK_CHOICES",
]

LANDMARK_CHOICES = ("maxmin", "uniform")  # of linalg.LANDMARK_METHODS
DEFAULT_N_LANDMARKS = 1000  # n_landmarks=None: min(n_samples, this)


# --------------------------------------------------------------------------- model


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

    _ARRAYS = ("landmarks", "landmark_indices", *SPECTRUM_ARRAYS, "offset", "shift")

    def _reference(self):
        return self.landmarks

    @property
    def n_landmarks(self) -> int:
        return int(self.landmarks.shape[0])


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
    stress = _kruskal_stress(_sample_distances(xs, model.shift, metric), model.transform(xs))
    info = {**model.info, "stress_rows": int(idx.size), "stress_exact": exact}
    return replace(model, stress=stress, info=info)


# --------------------------------------------------------------------------- estimator


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
        self._keep_params(locals())

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


METHOD_SPECS = (
    MethodSpec(
        "landmark-mds",
        LandmarkMDS,
        landmark_mds,
        follows_pca=True,
        takes="dense",
        docs=DOCS_LINEAR,
        not_in_estimator={"align": "the final PCA; the estimator's embedding is always aligned"},
        model=LandmarkMDSModel,
        check=check_landmark_mds_params,
    ),
)
