"""Landmark MVU for large n (Weinberger, Packer & Saul 2005; Weinberger, Sha, Zhu & Saul 2006).

    1. the kNN graph (shared stage) and an n x m basis Q (``graphs.landmark``): LLE
       reconstruction onto m landmarks (``basis="reconstruction"``), or the bottom m
       eigenvectors of the graph Laplacian (``basis="laplacian"``; Weinberger, Sha, Zhu &
       Saul 2006); ``"auto"``: the first up to ``RECONSTRUCTION_MAX`` rows, the second above
       (built and solved on the workers when there is a cluster)
    2. K = Q L Q^T with L an m x m PSD matrix; centring sum_ij K_ij = 0 is L (Q^T 1) = 0, built
       in by writing L = B Z B^T with B an orthonormal basis of (Q^T 1)^perp
    3. the SDP over Z (cvxpy, Clarabel), the kNN distance constraints as a penalty:

           max  tr(Q L Q^T) / T  -  nu * sum_e (|y_i - y_j|^2_L - d_e^2)^2 / sum_e d_e^4

       T is the input's own variance tr(H X X^T H) (both terms are then ratios: the gain in
       variance, and the relative squared violation of the edges); the penalty needs only
       the p x p normal matrix of the edges (p = m(m+1)/2), summed over chunks of edges on the
       workers, so the SDP's size does not depend on n
    4. kernel PCA of Q L Q^T without forming it: with C = Q^T Q, the eigenpairs of
       C^1/2 L C^1/2 = V Lambda V^T give Y = Q C^-1/2 V Lambda^1/2.

The penalty's weight ``penalty`` trades unfolding against local distances: large values keep
the edges (within what m landmarks can express), small ones unfold more. The largest and mean
relative edge violation are reported. New points: LLE reconstruction from their k nearest
training rows, as for MVU.
"""

from __future__ import annotations

import time

import numpy as np
import scipy.linalg

from .._validation import check_array, check_flags, is_dask
from ..errors import InputError
from ..graphs import check_reg
from ..graphs.landmark import (
    edge_normals,
    edge_sums,
    laplacian_basis,
    reconstruction_basis,
    row_gram,
    svec_index,
)
from ..linalg import choose_landmarks
from ..linalg.conic import solve_problem
from ..linalg.sdp import solver_options
from ._base import column_signs
from ._distance_sdp import check_solver_status

# the iteration limits stay importable from here: an ``x as x`` import re-exports a name
# this module does not use itself
from ._sdp_family import DEFAULT_MAX_ITER as DEFAULT_MAX_ITER
from ._sdp_family import (
    SDPEmbeddingModel,
    SDPEstimator,
    SDPFit,
    check_one_of,
    check_sdp_params,
    is_count,
    is_positive,
)
from ._spec import DOCS_SDP, KNN_STAGE, SDP_FUNCTION_ONLY, MethodSpec

__all__ = [
    "LandmarkMVU",
    "landmark_mvu",
    "LANDMARK_BASES",
    "LANDMARK_CHOICES",
    "RECONSTRUCTION_MAX",
    "check_landmark_params",
    "check_landmark_mvu_params",
]

LANDMARK_BASES = ("auto", "reconstruction", "laplacian")
# basis="auto" reconstructs from the landmarks up to this many rows: above it the sparse LU
# of the reconstruction system (in one process) fills in, on data of high intrinsic dimension
# far beyond memory, while the Laplacian basis is built and solved on the workers
RECONSTRUCTION_MAX = 200_000
LANDMARK_CHOICES = ("maxmin", "uniform")  # of linalg.LANDMARK_METHODS
# Clarabel's gap / feasibility tolerance for the m x m problem. Not 1e-7 as for exact MVU:
# the penalised objective is a difference of two O(1) ratios and Clarabel's relative gap can
# stall between 1e-7 and 1e-6 on some inputs ("AlmostSolved" with tiny residuals). 1e-6 of the
# objective is far below what the landmark approximation itself costs (its relative edge
# error, docs/methods.md).
DEFAULT_TOL = 1e-6
_LANDMARK_MVU = "Landmark MVU"  # the method's name in messages
# the keywords of a fit that the checks pass on as they are given
_SDP_CHECK_KEYS = ("n_components", "n_neighbors", "solver", "max_iter")
_LANDMARK_KEYS = ("n_components", "n_landmarks", "basis", "landmarks", "penalty")
# what a solve that did not reach "optimal" suggests
_STATUS_FIX = (
    "raise max_iter if the iterations ran out; else allow it with "
    "allow_inaccurate=True (the violations are reported), or lower the penalty "
    "(a large penalty makes the problem ill-conditioned)."
)
_EDGE_CHUNK = 200_000  # the edges whose violations one task sums


def check_landmark_mvu_params(params: dict, shape: tuple) -> dict:
    """Refuse, before anything runs, `landmark_mvu` parameters that cannot apply to an input
    of ``shape``: the function's own checks and messages.

    Parameters
    ----------
    params : dict
        `landmark_mvu`'s keywords (``n_components``, ``n_neighbors``, ``n_landmarks``,
        ``basis``, ``landmarks``, ``penalty``, ``reg``, ``solver``, ``tol``, ``max_iter``,
        ``allow_inaccurate``, ``join_components``; others are not read).
    shape : tuple of int
        The input's ``(n_samples, n_features)``.

    Returns
    -------
    dict
        ``n_neighbors``, ``tol``, ``max_iter`` and ``reg`` with their defaults resolved.

    Raises
    ------
    InputError
        A parameter out of range.
    """
    n = shape[0]
    check_flags(params, ("allow_inaccurate", "join_components"), _LANDMARK_MVU)
    p = check_sdp_params(
        n,
        **{k: params[k] for k in _SDP_CHECK_KEYS},
        constraints="slack",
        slack_penalty=1.0,
        formulation="dual",
        tol=DEFAULT_TOL if params["tol"] is None else params["tol"],
        method=_LANDMARK_MVU,
    )
    check_landmark_params(n, **{k: params[k] for k in _LANDMARK_KEYS})
    return {**p, "reg": check_reg(params["reg"])}


def _landmark_mvu_in_a_run(X, **params) -> "SDPEmbeddingModel":
    """`landmark_mvu` as a run calls it: the training rows are not gathered into the model;
    its ``X_fit`` is ``X`` itself, which the run store writes from the workers and a loaded
    model reads a chunk at a time to place new rows."""
    from dataclasses import replace

    return replace(landmark_mvu(X, keep_training_rows=False, **params), X_fit=X)


def check_landmark_params(n: int, *, n_components, n_landmarks, basis, landmarks, penalty):
    """Check landmark MVU's own parameters, before anything is computed.

    Parameters
    ----------
    n : int
        The number of samples.
    n_components : int
        The embedding's dimension (checked by `check_sdp_params`).
    n_landmarks : int
        m, an int with n_components < m < n.
    basis : {"auto", "reconstruction", "laplacian"}
        The n x m basis Q.
    landmarks : {"maxmin", "uniform"}
        How the landmarks are chosen.
    penalty : float
        A positive finite number.

    Raises
    ------
    InputError
        Any of ``n_landmarks``, ``basis``, ``landmarks``, ``penalty`` out of range.
    """
    check_one_of(
        basis,
        LANDMARK_BASES,
        "basis",
        "pass basis='auto' (LLE weights onto the landmarks up to "
        f"{RECONSTRUCTION_MAX} rows, the graph Laplacian's eigenvectors above).",
    )
    check_one_of(landmarks, LANDMARK_CHOICES, "landmarks", "pass landmarks='maxmin'.")
    if not is_count(n_landmarks) or not n_components < n_landmarks < n:
        raise InputError(
            f"Landmark MVU needs n_components = {n_components} < n_landmarks < "
            f"n_samples = {n}; found n_landmarks={n_landmarks!r}.",
            f"pass n_landmarks between {n_components + 1} and {n - 1} (20 to 60 "
            "is usual: the SDP is over an m x m matrix).",
        )
    if not is_positive(penalty):
        raise InputError(
            f"penalty must be a positive number; found {penalty!r}.",
            "pass penalty=100 (the default).",
        )


def _auto_basis(n: int) -> str:
    """``basis="auto"``: see `RECONSTRUCTION_MAX`."""
    return "reconstruction" if n <= RECONSTRUCTION_MAX else "laplacian"


def _variance(X) -> float:
    """tr(H X X^T H) = the summed squared distances to the mean (one pass)."""
    if is_dask(X):
        from .._compute import compute

        s, s2, n = compute(
            X.sum(axis=0, dtype=np.float64),
            (X.astype(np.float64) ** 2).sum(),
            X.shape[0],
            stage="landmark MVU: input variance",
        )
        return float(s2 - (np.asarray(s) ** 2).sum() / n)
    Xc = np.asarray(X, dtype=np.float64)
    return float(((Xc - Xc.mean(axis=0)) ** 2).sum())


def _centred_basis(c: np.ndarray, n: int) -> np.ndarray:
    """Orthonormal m x r basis of c^perp, or the identity when c ~ 0 (Laplacian basis)."""
    m = c.size
    if np.linalg.norm(c) <= 1e-9 * np.sqrt(n):
        return np.eye(m)
    full, _ = np.linalg.qr(np.c_[c / np.linalg.norm(c), np.eye(m)])
    return full[:, 1:m]


def _svec_map(B: np.ndarray) -> np.ndarray:
    """The p x p_r matrix S with svec(B Z B^T) = S svec(Z)."""
    m, r = B.shape
    ri, ci, si = svec_index(r)
    ro, co, so = svec_index(m)
    # column for svec(Z) entry (a, b): svec of B (E_ab + E_ba) B^T / (sqrt2 or 1)
    Ba, Bb = B[:, ri], B[:, ci]  # m x p_r
    outer = Ba[ro] * Bb[co] + Bb[ro] * Ba[co]  # entries (ro, co) of B E_ab B^T + B E_ba B^T
    scale = np.where(ri == ci, 0.5, 1.0 / np.sqrt(2.0))
    return outer * so[:, None] * scale[None, :]


def _solve_small(C, G, h, c0, B, T, fit: SDPFit):
    """The SDP over Z (r x r) with the fit's penalty and solver settings; returns
    (L (m x m), status, objective, iterations, seconds, the solve's convergence record)."""
    import cvxpy as cp

    r = B.shape[1]
    S = _svec_map(B)
    H = S.T @ G @ S
    g = S.T @ h
    w, U = np.linalg.eigh((H + H.T) / 2)
    keep = w > 1e-12 * max(w.max(), 1e-300)
    R = np.sqrt(w[keep])[:, None] * U[:, keep].T  # H = R^T R on its range
    r0 = (U[:, keep].T @ g) / np.sqrt(w[keep])
    Z = cp.Variable((r, r), PSD=True)
    z = _svec_expr(cp, Z, r)
    gain = cp.trace((B.T @ C @ B) @ Z) / T
    lack = (cp.sum_squares(R @ z - r0) + (c0 - r0 @ r0)) / c0
    problem = cp.Problem(cp.Maximize(gain - float(fit.params["penalty"]) * lack))
    t0 = time.perf_counter()
    solved = solve_problem(
        problem,
        solver_options(fit.params["solver"], fit.p["tol"], fit.p["max_iter"]),
        label=f"{_LANDMARK_MVU} SDP",
        tol=fit.p["tol"],
        verbose=fit.params["verbose"],
        step=f"penalised {r} x {r} SDP over the landmark kernel",
    )
    seconds = time.perf_counter() - t0
    Zv = None if Z.value is None else (Z.value + Z.value.T) / 2
    L = None if Zv is None else B @ Zv @ B.T
    return (L, solved["status"], problem.value, solved["iterations"], seconds, solved["record"])


def _svec_expr(cp, Z, r):
    import scipy.sparse as sp

    ri, ci, si = svec_index(r)
    sel = sp.csr_matrix((si, (np.arange(ri.size), ri + ci * r)), shape=(ri.size, r * r))
    return sel @ cp.vec(Z, order="F")


def _embedding(Q, C, L, k: int):
    """Top-k kernel PCA of Q L Q^T via C = Q^T Q (module docstring, step 4)."""
    w, U = np.linalg.eigh((C + C.T) / 2)
    w = np.maximum(w, 0.0)
    ok = w > 1e-12 * max(w.max(), 1e-300)
    half = (U[:, ok] * np.sqrt(w[ok])) @ U[:, ok].T
    ihalf = (U[:, ok] / np.sqrt(w[ok])) @ U[:, ok].T
    lam, V = scipy.linalg.eigh(half @ L @ half)
    order = np.argsort(lam)[::-1]
    lam, V = lam[order], V[:, order]
    proj = ihalf @ V[:, :k] * np.sqrt(np.maximum(lam[:k], 0.0))
    Y = Q @ proj
    if is_dask(Y):
        from .._compute import compute

        (Y,) = compute(Y, stage="landmark MVU: embedding")
    Y = np.asarray(Y)
    signs = column_signs(Y)
    total = float(lam[lam > 0].sum()) or 1.0
    return (
        Y * signs,
        np.maximum(lam[:k], 0.0),
        {
            "explained_variance_ratio": (np.maximum(lam[:k], 0) / total).tolist(),
            "min_eigenvalue_ratio": float(lam[-1] / max(lam[0], 1e-300)),
        },
    )


def _violation_sums(Qi, Qj, d2, L):
    """(largest relative violation, sum of relative violations, edges of positive length,
    largest violation) of one chunk of edges."""
    V = Qi - Qj
    err = np.abs(np.einsum("ei,ij,ej->e", V, L, V) - d2)
    pos = d2 > 0
    rel = err[pos] / d2[pos]
    return (
        float(rel.max()) if rel.size else 0.0,
        float(rel.sum()),
        int(rel.size),
        float(err.max()),
    )


def _merge_violations(a, b):
    return max(a[0], b[0]), a[1] + b[1], a[2] + b[2], max(a[3], b[3])


def _edge_violations(Q, L, I, J, d2) -> dict:
    """How far the edges of Q L Q^T are from their lengths, a chunk of edges at a time (on
    the workers when Q is there: `graphs.landmark.edge_sums`)."""
    top, total, count, worst = edge_sums(
        _violation_sums,
        _merge_violations,
        Q,
        I,
        J,
        d2,
        L,
        chunk=_EDGE_CHUNK,
        stage="landmark MVU: edge violations",
    )
    return {
        "max_relative_violation": top if count else 0.0,
        "mean_relative_violation": total / count if count else 0.0,
        "max_violation_over_mean": worst / float(d2.mean()),
    }


def landmark_mvu(
    X,
    *,
    n_components=2,
    n_neighbors=6,
    n_landmarks=40,
    basis="auto",
    landmarks="maxmin",
    penalty=100.0,
    reg=1e-3,
    solver="clarabel",
    tol=None,
    max_iter=None,
    allow_inaccurate=False,
    metric="euclidean",
    knn_backend="auto",
    join_components=False,
    keep_training_rows=True,
    graph=None,
    random_state=0,
    verbose=False,
    where="X",
) -> SDPEmbeddingModel:
    """Fit landmark MVU to ``X`` (NumPy or dask) and return the model (module docstring).

    Landmark MVU (Weinberger, Packer & Saul 2005): K = Q L Q^T with an n x m basis Q and an
    m x m PSD L from an SDP whose size does not depend on n, the kNN distance constraints as a
    penalty; then kernel PCA of Q L Q^T without forming it.

    Parameters
    ----------
    X : array-like or dask array of shape (n_samples, n_features)
        The data rows.
    n_components : int, default 2
        An int with 1 <= n_components < n_samples.
    n_neighbors : int, default 6
        The kNN graph's neighbours, an int with 1 <= n_neighbors < n_samples.
    n_landmarks : int, default 40
        m, an int with n_components < m < n_samples (20 to 60 is usual: the SDP is over an
        m x m matrix).
    basis : {"auto", "reconstruction", "laplacian"}, default "auto"
        LLE reconstruction onto m landmarks, or the bottom m eigenvectors of the graph
        Laplacian (Weinberger, Sha, Zhu & Saul 2006; built and solved on the workers above
        ``linalg.ARPACK_MAX`` rows when a cluster of two or more workers is active, and the
        basis left there). ``"auto"``: reconstruction up to ``RECONSTRUCTION_MAX``
        (200 000) rows, where its sparse LU in this process stays affordable, laplacian
        above; ``info["basis"]`` says which.
    landmarks : {"maxmin", "uniform"}, default "maxmin"
        How the landmarks of the reconstruction basis are chosen (`linalg.choose_landmarks`):
        max-min on a uniform sample of 10 m rows, or uniform rows.
    penalty : float, default 100.0
        The penalty's weight nu (> 0): large values keep the edges (within what m landmarks
        can express), small ones unfold more.
    reg : float, default 1e-3
        > 0, the ridge of the LLE reconstruction weights (the basis, and new points).
    solver : {"clarabel", "scs"}, default "clarabel"
        The SDP solver.
    tol : float in (0, 1) or None, default None
        The solver's tolerance; None for ``DEFAULT_TOL`` (1e-6).
    max_iter : int or None, default None
        The solver's iteration limit; None for 200 (Clarabel) or 100 000 (SCS).
    allow_inaccurate : bool, default False
        Accept the solver status "optimal_inaccurate" (with a warning) instead of raising
        `SolverError`.
    metric : str, default "euclidean"
        The kNN graph's metric.
    knn_backend : {"auto", "exact", "nndescent", "partitioned"}, default "auto"
        The kNN graph's backend.
    join_components : bool, default False
        Join a disconnected kNN graph by its shortest edges (else refused).
    keep_training_rows : bool, default True
        Keep X in the model (new points are placed by LLE reconstruction from their k nearest
        training rows).
    graph : KNNGraph or None, default None
        A `KNNGraph` of X already built; else one is built with ``n_neighbors``, ``metric``
        and ``knn_backend``.
    random_state : int, numpy Generator or None, default 0
        Seeds the kNN graph, the landmarks and the Laplacian basis.
    verbose : bool, default False
        Passed to the SDP solver (its own log).
    where : str, default "X"
        The name of the input in error messages.

    Returns
    -------
    SDPEmbeddingModel
        The fitted model (no n x n kernel); ``info`` reports the solver's status, the largest
        and mean relative edge violation, timings and every solve's record.

    Raises
    ------
    InputError
        ``X`` is not a finite 2-D numeric array; a parameter out of range; a ``graph`` of
        another number of rows.
    DisconnectedGraphError
        The kNN graph has more than one component and ``join_components`` is False.
    SolverError
        The SDP solver did not reach "optimal" (unless ``allow_inaccurate``).
    """
    params = dict(locals())  # the keywords as given, read by the checks and the graph
    t0 = time.perf_counter()
    X = check_array(params.pop("X"), method=_LANDMARK_MVU, where=where)
    n = X.shape[0]
    fit, (I, J, d2) = SDPFit.start(X, params, check_landmark_mvu_params, _LANDMARK_MVU)
    p, graph, reg = fit.p, fit.graph, fit.p["reg"]
    # the edges are the largest arrays this process holds: kept small
    rows = np.int32 if n < 2**31 else np.int64
    I, J = I.astype(rows), J.astype(rows)
    d2 **= 2
    scale = float(d2.mean())
    d2 /= scale  # the squared lengths in units of their mean from here on
    timings = {}
    t = time.perf_counter()
    basis = basis if basis != "auto" else _auto_basis(n)
    if basis == "reconstruction":
        lm = choose_landmarks(
            X, int(n_landmarks), landmarks, random_state, allowed=LANDMARK_CHOICES
        )[1]
        Q, qinfo = reconstruction_basis(X, graph, lm, reg)
    else:
        lm = None
        Q, qinfo = laplacian_basis(graph, int(n_landmarks), random_state=random_state)
    qrecords = qinfo.pop("convergence", [])
    timings["basis_seconds"] = round(time.perf_counter() - t, 3)
    t = time.perf_counter()
    C, csum = row_gram(Q)
    G, h, c0 = edge_normals(Q, I, J, d2)
    timings["normals_seconds"] = round(time.perf_counter() - t, 3)
    T = _variance(X) / scale
    B = _centred_basis(np.asarray(csum), n)
    L, status, value, iters, secs, rec = _solve_small(C, G, h, c0, B, T, fit)
    res = _Status(status, iters, solver, L)
    records = qrecords + [rec]
    check_solver_status(res, _LANDMARK_MVU, "penalised", allow_inaccurate, _STATUS_FIX, records)
    L = L * scale
    Y, lam, kinfo = _embedding(Q, C, L, int(n_components))
    info = {
        "status": status,
        "objective": float(value) if value is not None else None,
        "iterations": iters,
        "solve_seconds": round(secs, 3),
        "solver": solver,
        "tol": p["tol"],
        "basis": basis,
        "n_landmarks": int(n_landmarks),
        "penalty": float(penalty),
        "n_edges": int(I.size),
        "metric": graph.metric,
        "input_variance": float(T * scale),
        "variance": float(np.trace(C @ L)),
        **qinfo,
        **timings,
        **kinfo,
        **_edge_violations(Q, L / scale, I, J, d2),
        "seconds": round(time.perf_counter() - t0, 3),
        "convergence": records,
    }
    if lm is not None:
        info["landmarks"] = lm.tolist() if lm.size <= 1000 else None
    return fit.model("landmark-mvu", Y.astype(X.dtype), lam, info, keep_rows=keep_training_rows)


class _Status:
    """The fields of an SDP result that `check_solver_status` reads."""

    def __init__(self, status, iterations, solver, K):
        self.status, self.iterations, self.K = status, iterations, K
        self.convergence = None
        self.info = {"solver": solver.upper(), "formulation": "landmark"}


class LandmarkMVU(SDPEstimator):
    """Landmark MVU on NumPy or dask arrays; see `landmark_mvu` for the parameters."""

    # the checks' random data make disconnected kNN graphs: join them
    _check_params = ({"n_landmarks": 5, "join_components": True},)

    def __init__(
        self,
        n_components=2,
        *,
        n_neighbors=6,
        n_landmarks=40,
        basis="auto",
        landmarks="maxmin",
        penalty=100.0,
        reg=1e-3,
        solver="clarabel",
        tol=None,
        max_iter=None,
        allow_inaccurate=False,
        metric="euclidean",
        knn_backend="auto",
        join_components=False,
        random_state=0,
    ):
        self._keep_params(locals())

    def fit(self, X, y=None):
        X = check_array(X, method=_LANDMARK_MVU)
        return self._set(landmark_mvu(X, **self.get_params()), X)


METHOD_SPECS = (
    MethodSpec(
        "landmark-mvu",
        LandmarkMVU,
        landmark_mvu,
        follows_pca=True,
        takes="dense",
        docs=DOCS_SDP,
        flow_adds=KNN_STAGE,
        not_in_estimator={
            "keep_training_rows": "the estimator keeps its training rows for transform",
            **SDP_FUNCTION_ONLY,
        },
        model=SDPEmbeddingModel,
        check=check_landmark_mvu_params,
        knn_graph="connected",
        flow_function=_landmark_mvu_in_a_run,
    ),
)
