"""The parts classical MDS, landmark MDS and Isomap's MDS share (`methods.mds`,
`methods.landmark_mds`): their parameter checks, squared distances, the eigensolve of
B = -1/2 J D2 J with its negative part, Kruskal's stress-1, the models' triangulation of new
points and the estimators' common attributes."""

from __future__ import annotations

import numbers
import warnings
from dataclasses import fields

import numpy as np
from scipy.spatial.distance import cdist

from .._validation import is_dask
from ..blocks.kernels import METRICS, distance_block
from ..errors import DimredWarning, InputError
from ..linalg import choose_eigen_solver, take_rows, top_and_bottom_eigh, top_eigh
from ..linalg.convergence import diagnostic, require_converged
from ..pairwise import check_metric, pairwise_distances
from ._base import (
    HasConvergence,
    ModelTransform,
    kept,
    row_blocks,
    row_range,
    rowwise,
    sign_fix,
)
from ._linear_family import FittedEmbedding, NamedComponents

MDS_SOLVERS = ("auto", "dense", "randomized", "lanczos")
STRESS_MAX_ROWS = 2000  # stress is exact up to this many points, sampled above


# --------------------------------------------------------------------------- parameters


def _check_metric(metric, p, method: str) -> dict:
    if metric == "precomputed":
        return {"metric": "precomputed"}
    if not isinstance(metric, str) or metric not in METRICS:
        raise InputError(
            f"{method} needs metric as one of {', '.join(METRICS)} or "
            f"'precomputed'; found {metric!r}.",
            "pass metric='euclidean' (the default), or metric='precomputed' with "
            "an n x n distance matrix.",
        )
    return check_metric(metric, p)


def _check_int(value, name: str, low: int, high: int, method: str, why: str, fix: str) -> int:
    if (
        not isinstance(value, numbers.Integral)
        or isinstance(value, (bool, np.bool_))
        or not low <= value <= high
    ):
        raise InputError(
            f"{method} needs {name} as an int in [{low}, {high}] ({why}); found {name}={value!r}.",
            fix,
        )
    return int(value)


def _check_n_components(n_components, n: int, method: str) -> int:
    if n < 2:
        raise InputError(
            f"{method} needs at least 2 samples; found {n} sample(s).", "pass more samples."
        )
    return _check_int(
        n_components,
        "n_components",
        1,
        n - 1,
        method,
        f"B = -1/2 J D2 J of n_samples={n} points has rank at most n - 1",
        f"pass n_components between 1 and {n - 1}.",
    )


def _check_solver(solver, method: str) -> str:
    if solver not in MDS_SOLVERS:
        raise InputError(
            f"{method} solver must be one of {', '.join(MDS_SOLVERS)}; found {solver!r}.",
            "pass solver='auto' (dense up to a few thousand points, randomized above).",
        )
    return solver


# --------------------------------------------------------------------------- distances


def _sq_block(a: np.ndarray, b: np.ndarray, metric: dict) -> np.ndarray:
    """Squared distances between two row blocks, float64."""
    if metric["metric"] == "euclidean":
        return distance_block(a, b, "sqeuclidean").astype(np.float64)
    return distance_block(a, b, **metric).astype(np.float64) ** 2


def _shift(X, metric: dict):
    """A centre subtracted before Euclidean distances (they are translation invariant): the
    distances are assembled from norms, which loses digits far from the origin."""
    if metric["metric"] != "euclidean":
        return None
    if is_dask(X):
        head = take_rows(X, np.arange(min(X.shape[0], X.chunks[0][0])), "MDS: centre")
        return head.mean(axis=0, dtype=np.float64)
    return X.mean(axis=0, dtype=np.float64)


def _squared_matrix(X, metric: dict, shift):
    """D2 of the rows of X, float64, exactly symmetric with a zero diagonal; lazy for dask."""
    if shift is not None:
        X = X - shift.astype(X.dtype)
    if metric["metric"] == "euclidean":
        return pairwise_distances(X, metric="sqeuclidean").astype(np.float64)
    return pairwise_distances(X, **metric).astype(np.float64) ** 2


# --------------------------------------------------------------------------- spectrum


def _rounding_tol(lam_max: float, n: int, dtype) -> float:
    return float(n * np.finfo(np.dtype(dtype)).eps * max(abs(lam_max), np.finfo(float).tiny))


def _kept_scale(lam: np.ndarray, tol: float, method: str):
    """(sqrt(lambda), lambda^-1/2), both zero for eigenvalues not above rounding."""
    ok = lam > tol
    if not ok.all():
        warnings.warn(
            DimredWarning(
                f"{method}: {int((~ok).sum())} of the {lam.size} requested components have "
                f"eigenvalue <= {tol:.3g} (values {np.round(lam[~ok], 12).tolist()}): the "
                "distances are realised in fewer dimensions, or B is not positive there. Those "
                "components are set to 0. Ask for fewer components."
            ),
            stacklevel=4,
        )
    root = np.sqrt(np.where(ok, lam, 1.0))
    return np.where(ok, root, 0.0), np.where(ok, 1.0 / root, 0.0)


def _negative_part(B, eig, k: int, tol: float, measure: bool, eig_kw: dict, low=None):
    """(negative eigenvalues ascending, negative_mass or None, negative_ratio or None, passes,
    the solves' convergence records). ``low``: the bottom pairs when solved already (with
    the top ones, `linalg.top_and_bottom_eigh`)."""
    lam_max = float(eig.values[0])
    if low is not None:
        low_values = np.asarray(low.values)
        neg, mass, lowest = low_values[low_values < -tol], None, float(low_values[0])
        passes, recs = int(low.passes), [diagnostic(low.convergence)]
    elif eig.spectrum is not None:
        sp = eig.spectrum
        neg = np.sort(sp[sp < -tol])
        total = float(np.abs(sp).sum())
        mass = float(np.abs(neg).sum() / total) if total > 0 else 0.0
        lowest, passes, recs = float(sp[-1]), 0, []
    elif measure:
        low, passes, recs = _lowest(B, eig, k, tol, eig_kw)
        neg, mass, lowest = low[low < -tol], None, float(low[0])
    else:
        return np.zeros(0), None, None, 0, []
    ratio = -lowest / lam_max if lam_max > 0 and -lowest > tol else 0.0
    return np.asarray(neg, np.float64), mass, float(ratio), passes, recs


def _lowest(B, eig, k: int, tol: float, eig_kw: dict):
    """The k smallest eigenvalues (ascending) by Lanczos, the passes and records (subspace
    iteration solves them with the top ones). Lanczos asks for the smallest one first: B of
    Euclidean distances has an (n - rank)-fold eigenvalue 0, where ARPACK cannot converge
    to k > 1 copies; only a negative lambda_min calls for k more."""
    stage = "MDS: negative eigenvalues"
    low = top_eigh(B, 1, solver="lanczos", which="SA", stage=stage, **eig_kw)
    if k == 1 or low.values[0] >= -tol:
        return np.asarray(low.values), int(low.passes), [diagnostic(low.convergence)]
    more = top_eigh(B, k, solver="lanczos", which="SA", stage=stage, **eig_kw)
    return (
        np.asarray(more.values),
        int(low.passes) + int(more.passes),
        [diagnostic(low.convergence), diagnostic(more.convergence)],
    )


def _eigen(B, k: int, n: int, dtype, solver: str, eig_kw: dict, measure: bool, method: str):
    """Top-k eigenpairs of B (sign-fixed), the scales, and the negative part."""
    solver, low = choose_eigen_solver(solver, n), None
    if solver == "randomized" and measure:  # the two ends in the same passes over B
        eig, low = top_and_bottom_eigh(B, k, stage=f"{method} eigensolver", **eig_kw)
    else:
        eig = top_eigh(B, k, solver=solver, stage=f"{method} eigensolver", **eig_kw)
    require_converged(
        eig.convergence,
        method,
        "pass solver='dense' (n up to a few thousand) or solver='randomized' (fixed passes).",
    )
    lam = np.asarray(eig.values, np.float64)
    tol = _rounding_tol(lam[0], n, dtype)
    vectors = sign_fix(np.asarray(eig.vectors).T).T
    root, inv = _kept_scale(lam, tol, method)
    neg, mass, ratio, passes, recs = _negative_part(B, eig, k, tol, measure, eig_kw, low)
    info = {
        "passes": int(eig.passes) + passes,
        "rounding_tol": tol,
        "convergence": [{**eig.convergence, "step": f"top {k} eigenpairs of B"}]
        + [{**r, "step": f"{r['step']} of B (negative part)"} for r in recs],
        "n_dropped_components": int((root == 0).sum()),
        "negative_ratio_is_lower_bound": bool(measure and eig.solver == "randomized"),
    }
    return eig.solver, lam, vectors, root, inv, (neg, mass, ratio), info


# --------------------------------------------------------------------------- stress


def _stress_rows(n: int, rng):
    if n <= STRESS_MAX_ROWS:
        return np.arange(n), True
    return np.sort(rng.choice(n, size=STRESS_MAX_ROWS, replace=False)), False


def _sample_distances(rows: np.ndarray, shift, metric: dict) -> np.ndarray:
    """The distances between sampled data ``rows``, less ``shift`` as in the fit."""
    ref = rows if shift is None else rows - shift.astype(rows.dtype)
    return distance_block(ref, ref, **metric)


def _kruskal_stress(d: np.ndarray, y: np.ndarray) -> float:
    """Stress-1 of an embedding ``y`` of points with distance matrix ``d`` (over i < j)."""
    d = np.asarray(d, np.float64)
    y = np.asarray(y, np.float64)
    iu = np.triu_indices(d.shape[0], 1)
    dy = cdist(y, y)[iu]
    d = d[iu]
    den = float((d * d).sum())
    return float(np.sqrt(((d - dy) ** 2).sum() / den)) if den > 0 else 0.0


# --------------------------------------------------------------------------- models


# the arrays both models keep, in this order between their own
SPECTRUM_ARRAYS = ("eigenvalues", "negative_eigenvalues", "proj", "sq_means")


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


class _MDSBase(ModelTransform, FittedEmbedding, NamedComponents):
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
