"""Maximum variance unfolding (Weinberger & Saul 2006; Weinberger, Sha & Saul 2004).

    1. the kNN graph (symmetrised; ``graphs.knn_graph``, shared with the other graph methods)
    2. max tr(K)  s.t.  K_ii + K_jj - 2 K_ij = ||x_i - x_j||^2 on every edge,
                        sum_ij K_ij = 0,  K >= 0                      (``linalg.sdp``)
    3. kernel PCA of K: Y = V Lambda^1/2 from its top eigenpairs (``linalg.top_eigh``)

``constraints="equality"`` is the problem above. On low-dimensional data it is degenerate
(cliques of >= d + 2 points are affinely dependent; see ``graphs.sdp``): those dependencies are
built into the problem (``face_reduction=True``), the constraints they make redundant are
dropped, and Clarabel then reaches "optimal". ``constraints="slack"`` penalises violations
(max tr(K) - nu sum |xi_e|, an exact L1 penalty) for graphs whose distances no configuration
realises (noise, non-Euclidean metrics); ``nu = slack_penalty * D^2`` with D the hop diameter
of the graph (multipliers, the edges' "tensions", grow like D^2: a chain's largest is D^2 / 8).
With the default 10 the slack solution of a clean graph is the exact one (measured on three
noisy swiss rolls in 10-D, n = 150: trace equal to 1e-6, edges to 1e-8; with 1, a
near-degenerate one gave way by 0.3 %), so only inconsistent edges give.

The solver's status, the objective and the largest relative distance violation are reported
(``info``), every solve's convergence record in ``info["convergence"]``, and the solve's
phases and iterations go to the progress reporter (``linalg.conic``); a status other than
"optimal" raises `SolverError` unless ``allow_inaccurate``;
an infeasible equality problem raises `InfeasibleError` that suggests the slack variant.
New points are placed by their LLE reconstruction weights on their k nearest training rows.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .._validation import check_array, check_flags, is_dask
from ..blocks.neighbors import reconstruction_weights_block
from ..errors import InputError
from ..graphs import (
    KNNGraph,
    check_connected,
    check_n_neighbors,
    check_reg,
    join_components,
)
from ..graphs.sdp import edge_list
from ..linalg.sdp import SDP_FORMULATIONS, solver_options
from ._base import (
    DimredEstimator,
    HasConvergence,
    ModelTransform,
    kept,
    like_input,
    rows_at,
    rowwise,
)
from ._distance_sdp import distance_sdp, kernel_embedding
from ._graph_common import built_graph, new_neighbours
from ._spec import DOCS_SDP, KNN_STAGE, SDP_FUNCTION_ONLY, MethodSpec

__all__ = [
    "MaximumVarianceUnfolding",
    "SDPEmbeddingModel",
    "mvu",
    "distance_sdp",
    "MVU_CONSTRAINTS",
    "kernel_embedding",
    "check_sdp_params",
    "check_mvu_params",
    "check_exact_sdp_params",
]

MVU_CONSTRAINTS = ("equality", "slack")
EXACT_MAX = 3000  # exact MVU holds K (n x n) and solves an SDP of that size: above, refuse
DEFAULT_TOL = {"clarabel": 1e-7, "scs": 1e-6}
DEFAULT_MAX_ITER = {"clarabel": 200, "scs": 100_000}


@dataclass
class SDPEmbeddingModel(HasConvergence):
    """A fitted MVU / action respecting embedding: the training embedding, the eigenvalues
    of K, the training rows (for ``transform``) and the solver report."""

    method: str
    embedding: np.ndarray  # (n, k)
    eigenvalues: np.ndarray  # (k,) of K
    X_fit: np.ndarray | None  # (n, d) training rows (None when not kept)
    n_neighbors: int
    reg: float = 1e-3
    kernel: np.ndarray | None = None  # (n, n) K, when kept
    info: dict = field(default_factory=dict)

    @property
    def n_components(self) -> int:
        return int(self.eigenvalues.shape[0])

    def transform(self, X):
        """Embed new rows: LLE weights on their k nearest training rows applied to the
        training embedding (NumPy, or lazily blockwise for dask)."""
        if self.X_fit is None:
            raise InputError(
                f"This {self.method} model kept no training rows, so it cannot place new points.",
                "refit with keep_training_rows=True.",
            )
        return reconstruct(X, self.X_fit, self.embedding, self.n_neighbors, self.reg)

    def arrays(self) -> dict:
        out = {"embedding_": self.embedding, "eigenvalues_": self.eigenvalues}
        if self.X_fit is not None:
            out["X_fit_"] = self.X_fit
        if self.kernel is not None:
            out["kernel_"] = self.kernel
        return out

    def scalars(self) -> dict:
        return {
            "method": self.method,
            "n_neighbors": int(self.n_neighbors),
            "reg": float(self.reg),
            **self.info,
        }

    def summary(self) -> dict:
        """What a run's manifest records of the fit: the eigenvalues of K, the solver's
        report (status, objective, the largest relative distance violation) and
        ``convergence`` (every solve's record), the landmark rows left out."""
        values = np.asarray(self.eigenvalues, dtype=np.float64)
        info = {k: v for k, v in self.scalars().items() if k != "landmarks"}
        return {
            "n_components": int(values.size),
            "eigenvalues": values.tolist(),
            **info,
            "convergence": self.convergence,
        }

    @classmethod
    def from_arrays(cls, arrays: dict, scalars: dict) -> "SDPEmbeddingModel":
        info = {k: v for k, v in scalars.items() if k not in ("method", "n_neighbors", "reg")}

        def get(k):  # the rows' arrays may stay in their run store (`_base.kept`)
            return kept(arrays[k]) if k in arrays else None

        return cls(
            scalars["method"],
            get("embedding_"),
            get("eigenvalues_"),
            get("X_fit_"),
            int(scalars["n_neighbors"]),
            float(scalars["reg"]),
            get("kernel_"),
            info,
        )


def reconstruct(X, X_fit: np.ndarray, Y_fit: np.ndarray, k: int, reg: float):
    """sum_j w_j y_j over the k nearest training rows of each row of X (LLE weights); a row
    equal to a training row takes that row's embedding (the regularised weights would not
    put all their mass on it), so transform(X_train) gives the training embedding. The
    training rows and embedding may be left in a run store (`_base.is_stored`): the
    neighbour search then reads its chunks one at a time, and only the neighbours' rows are
    read after it."""
    k = min(int(k), X_fit.shape[0])
    dtype = X.dtype

    def encode(block):
        block = np.asarray(block, dtype=np.float64)
        idx, _ = new_neighbours(block, X_fit, k)
        uniq, at = np.unique(idx, return_inverse=True)
        at = at.reshape(idx.shape)
        Xf = np.asarray(rows_at(X_fit, uniq), np.float64)
        Yf = np.asarray(rows_at(Y_fit, uniq), np.float64)
        w = reconstruction_weights_block(block, Xf[at], reg)
        out = np.einsum("bk,bkc->bc", w, Yf[at])
        same = np.all(block == Xf[at[:, 0]], axis=1)
        out[same] = Yf[at[same, 0]]
        return out.astype(dtype)

    return rowwise(X, encode, Y_fit.shape[1], dtype)


# --------------------------------------------------------------------------- checks


def check_sdp_params(
    n: int,
    *,
    n_components,
    n_neighbors,
    constraints,
    slack_penalty,
    formulation,
    solver,
    tol,
    max_iter,
    method: str,
) -> dict:
    """Every parameter check of the SDP methods, before anything is computed.

    Parameters
    ----------
    n : int
        The number of samples.
    n_components : int
        An int with 1 <= n_components < n.
    n_neighbors : int
        An int with 1 <= n_neighbors < n.
    constraints : {"equality", "slack"}
        The distance constraints.
    slack_penalty : float
        A positive finite number.
    formulation : {"dual", "primal"}
        The SDP formulation.
    solver : {"clarabel", "scs"}
        The SDP solver.
    tol : float or None
        In (0, 1); None for the solver's default (1e-7 Clarabel, 1e-6 SCS).
    max_iter : int or None
        A positive int; None for the solver's default (200 Clarabel, 100 000 SCS).
    method : str
        The method named in error messages.

    Returns
    -------
    dict
        ``{"n_neighbors": int, "tol": float, "max_iter": int}``, the defaults resolved.

    Raises
    ------
    InputError
        Any of the parameters out of range.
    """
    if (
        not isinstance(n_components, (int, np.integer))
        or isinstance(n_components, bool)
        or not 1 <= n_components < n
    ):
        raise InputError(
            f"{method} needs an int n_components with 1 <= n_components < "
            f"n_samples = {n}; found {n_components!r}.",
            f"pass n_components between 1 and {n - 1} (2 is usual).",
        )
    k = check_n_neighbors(n_neighbors, n, method)
    if constraints not in MVU_CONSTRAINTS:
        raise InputError(
            f"constraints must be one of {', '.join(MVU_CONSTRAINTS)}; found {constraints!r}.",
            "pass constraints='equality' (the exact problem) or "
            "'slack' (penalised violations, for noisy graphs).",
        )
    if not (
        isinstance(slack_penalty, (int, float))
        and not isinstance(slack_penalty, bool)
        and np.isfinite(slack_penalty)
        and slack_penalty > 0
    ):
        raise InputError(
            f"slack_penalty must be a positive number; found {slack_penalty!r}.",
            "pass slack_penalty=10.0 (the default).",
        )
    if formulation not in SDP_FORMULATIONS:
        raise InputError(
            f"formulation must be one of {', '.join(SDP_FORMULATIONS)}; found {formulation!r}.",
            "pass formulation='dual' (the fast one).",
        )
    tol = DEFAULT_TOL.get(solver, 1e-8) if tol is None else tol
    max_iter = DEFAULT_MAX_ITER.get(solver, 200) if max_iter is None else max_iter
    solver_options(solver, tol, max_iter)  # raises InputError on a bad solver / tol / max_iter
    return {"n_neighbors": k, "tol": float(tol), "max_iter": int(max_iter)}


def check_mvu_params(params: dict, shape: tuple) -> dict:
    """Refuse, before anything runs, `mvu` parameters that cannot apply to an input of
    ``shape``: the function's own checks and messages.

    Parameters
    ----------
    params : dict
        `mvu`'s keywords (those `check_exact_sdp_params` reads; others are not read).
    shape : tuple of int
        The input's ``(n_samples, n_features)``.

    Returns
    -------
    dict
        ``n_neighbors``, ``tol``, ``max_iter`` and ``reg`` with their
        defaults resolved.

    Raises
    ------
    InputError
        A parameter out of range, or more than ``EXACT_MAX`` rows.
    """
    p = check_exact_sdp_params(params, shape, "MVU")
    if shape[0] > EXACT_MAX:
        raise InputError(
            f"Exact MVU solves an n x n SDP; n = {shape[0]} is above {EXACT_MAX}.",
            "use landmark MVU (landmark_mvu, method landmark-mvu) for large n.",
        )
    return p


def check_exact_sdp_params(params: dict, shape: tuple, method: str) -> dict:
    """The parameter checks of the exact SDP methods (`mvu`, `action_respecting_embedding`).

    Parameters
    ----------
    params : dict
        The function's keywords (``n_components``, ``n_neighbors``, ``constraints``,
        ``slack_penalty``, ``face_reduction``, ``formulation``, ``solver``, ``tol``,
        ``max_iter``, ``allow_inaccurate``, ``join_components``, ``reg``; others are not read).
    shape : tuple of int
        The input's ``(n_samples, n_features)``.
    method : str
        The method named in error messages.

    Returns
    -------
    dict
        ``n_neighbors``, ``tol``, ``max_iter`` and ``reg`` with their
        defaults resolved.

    Raises
    ------
    InputError
        A parameter out of range.
    """
    check_flags(params, ("allow_inaccurate", "join_components", "face_reduction"), method)
    p = check_sdp_params(shape[0], **{k: params[k] for k in _SDP_KEYS}, method=method)
    return {**p, "reg": check_reg(params["reg"])}


_SDP_KEYS = (
    "n_components",
    "n_neighbors",
    "constraints",
    "slack_penalty",
    "formulation",
    "solver",
    "tol",
    "max_iter",
)


def prepare_graph(
    X,
    graph: KNNGraph | None,
    n_neighbors: int,
    *,
    metric: str,
    knn_backend: str,
    join: bool,
    random_state,
    method: str,
) -> KNNGraph:
    """The kNN graph (given or built), connected or refused (or joined)."""
    n = X.shape[0]
    if graph is None:
        graph = built_graph(
            X, n_neighbors, method, metric=metric, backend=knn_backend, random_state=random_state
        )
    elif graph.n_samples != n:
        raise InputError(
            f"The graph has {graph.n_samples} rows; the data have {n}.",
            "pass the kNN graph of these rows.",
        )
    elif graph.n_neighbors > n_neighbors:
        graph = graph.subset(n_neighbors)
    if (graph.indices < 0).any():
        raise InputError(
            f"The kNN graph has rows with fewer than {graph.n_neighbors} neighbours.",
            "rebuild it with knn_backend='exact'.",
        )
    if join and not graph.info.get("extra_edges"):
        graph, _ = join_components(graph, X)
    if not graph.info.get("extra_edges"):
        check_connected(graph, method=method)
    return graph


# --------------------------------------------------------------------------- MVU


def mvu(
    X,
    *,
    n_components=2,
    n_neighbors=6,
    constraints="equality",
    slack_penalty=10.0,
    face_reduction=True,
    formulation="dual",
    solver="clarabel",
    tol=None,
    max_iter=None,
    allow_inaccurate=False,
    metric="euclidean",
    knn_backend="auto",
    join_components=False,
    reg=1e-3,
    keep_kernel=True,
    graph=None,
    random_state=0,
    verbose=False,
    where="X",
) -> SDPEmbeddingModel:
    """Fit MVU to ``X`` (NumPy or dask; n up to ``EXACT_MAX``) and return the model.

    Maximum variance unfolding (Weinberger & Saul 2006): the SDP on the kNN graph's edges
    (`distance_sdp`), then kernel PCA of its K (`kernel_embedding`). New points are placed by
    their LLE reconstruction weights on their k nearest training rows.

    Parameters
    ----------
    X : array-like or dask array of shape (n_samples, n_features)
        The data rows; n_samples at most ``EXACT_MAX`` (use `landmark_mvu` above).
    n_components : int, default 2
        An int with 1 <= n_components < n_samples.
    n_neighbors : int, default 6
        The kNN graph's neighbours, an int with 1 <= n_neighbors < n_samples.
    constraints : {"equality", "slack"}, default "equality"
        The exact problem, or penalised violations (for noisy graphs; see the module
        docstring).
    slack_penalty : float, default 10.0
        The slack variant's penalty factor (> 0): nu = ``slack_penalty`` * D^2, D the graph's
        hop diameter.
    face_reduction : bool, default True
        Build the cliques' affine dependencies into the equality problem (dual formulation)
        and drop the constraints they make redundant.
    formulation : {"dual", "primal"}, default "dual"
        The SDP formulation.
    solver : {"clarabel", "scs"}, default "clarabel"
        The SDP solver.
    tol : float in (0, 1) or None, default None
        The solver's tolerance; None for 1e-7 (Clarabel) or 1e-6 (SCS).
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
    reg : float, default 1e-3
        > 0, the ridge of the reconstruction weights that place new points.
    keep_kernel : bool, default True
        Keep the n x n kernel K in the model.
    graph : KNNGraph or None, default None
        A `KNNGraph` of X already built (the flow's kNN stage); else one is built with
        ``n_neighbors``, ``metric`` and ``knn_backend``.
    random_state : int, numpy Generator or None, default 0
        Seeds the kNN graph.
    verbose : bool, default False
        Passed to the SDP solver (its own log).
    where : str, default "X"
        The name of the input in error messages.

    Returns
    -------
    SDPEmbeddingModel
        The fitted model: embedding, eigenvalues of K, K (``keep_kernel``) and the solver's
        report in ``info`` (status, objective, violations, every solve's record).

    Raises
    ------
    InputError
        ``X`` is not a finite 2-D numeric array; n_samples above ``EXACT_MAX``; a parameter out
        of range; a ``graph`` of another number of rows, or with rows short of neighbours.
    DisconnectedGraphError
        The kNN graph has more than one component and ``join_components`` is False.
    InfeasibleError
        The equality problem is infeasible (use ``constraints="slack"``).
    SolverError
        The SDP solver did not reach "optimal" (unless ``allow_inaccurate``).
    """
    X = check_array(X, method="MVU", where=where)
    n = X.shape[0]
    params = {
        "n_components": n_components,
        "n_neighbors": n_neighbors,
        "constraints": constraints,
        "slack_penalty": slack_penalty,
        "face_reduction": face_reduction,
        "formulation": formulation,
        "solver": solver,
        "tol": tol,
        "max_iter": max_iter,
        "allow_inaccurate": allow_inaccurate,
        "join_components": join_components,
        "reg": reg,
    }
    p = check_mvu_params(params, X.shape)
    reg = p["reg"]
    graph = prepare_graph(
        X,
        graph,
        p["n_neighbors"],
        metric=metric,
        knn_backend=knn_backend,
        join=join_components,
        random_state=random_state,
        method="MVU",
    )
    I, J, d = edge_list(graph)
    K, info = distance_sdp(
        n,
        I,
        J,
        d**2,
        constraints=constraints,
        slack_penalty=slack_penalty,
        face_reduction=face_reduction,
        formulation=formulation,
        solver=solver,
        tol=p["tol"],
        max_iter=p["max_iter"],
        allow_inaccurate=allow_inaccurate,
        method="MVU",
        verbose=verbose,
    )
    Y, lam, kinfo = kernel_embedding(K, int(n_components))
    info.update(
        kinfo,
        n_edges=int(I.size),
        metric=graph.metric,
        convergence=info["convergence"] + kinfo["convergence"],
    )
    X_fit = np.asarray(X.compute() if is_dask(X) else X)
    return SDPEmbeddingModel(
        "mvu",
        Y.astype(X.dtype),
        lam,
        X_fit,
        p["n_neighbors"],
        reg,
        K if keep_kernel else None,
        info,
    )


class SDPEstimator(ModelTransform, DimredEstimator):
    """Shared fit results and transform of the SDP estimators."""

    def _set(self, model: SDPEmbeddingModel, X):
        self._model = model
        self.embedding_ = like_input(model.embedding, X)
        self.eigenvalues_ = model.eigenvalues
        self.kernel_ = model.kernel
        self.n_features_in_ = X.shape[1]
        self.solver_status_ = model.info.get("status")
        self.objective_ = model.info.get("objective")
        self.max_relative_violation_ = model.info.get("max_relative_violation")
        self.n_iter_ = model.info.get("iterations")  # the SDP solver's iterations
        self.info_ = dict(model.info)
        self.convergence_ = model.convergence
        return self

    def fit_transform(self, X, y=None, **kw):
        return self.fit(X, y, **kw).embedding_


class MaximumVarianceUnfolding(SDPEstimator):
    """Maximum variance unfolding (Weinberger & Saul 2006) on NumPy or dask arrays; see `mvu`.

    Attributes: embedding_, eigenvalues_ (of K), kernel_ (n x n K), solver_status_,
    objective_ (tr K), max_relative_violation_, n_iter_ (solver iterations), info_ (the
    whole solver report), convergence_ (every solve's record: the SDP attempts with the
    solver's gap and residuals, then the eigendecomposition of K).
    """

    # the checks' random data make disconnected kNN graphs: join them
    _check_params = ({"join_components": True},)

    def __init__(
        self,
        n_components=2,
        *,
        n_neighbors=6,
        constraints="equality",
        slack_penalty=10.0,
        face_reduction=True,
        formulation="dual",
        solver="clarabel",
        tol=None,
        max_iter=None,
        allow_inaccurate=False,
        metric="euclidean",
        knn_backend="auto",
        join_components=False,
        reg=1e-3,
        random_state=0,
    ):
        self.n_components = n_components
        self.n_neighbors = n_neighbors
        self.constraints = constraints
        self.slack_penalty = slack_penalty
        self.face_reduction = face_reduction
        self.formulation = formulation
        self.solver = solver
        self.tol = tol
        self.max_iter = max_iter
        self.allow_inaccurate = allow_inaccurate
        self.metric = metric
        self.knn_backend = knn_backend
        self.join_components = join_components
        self.reg = reg
        self.random_state = random_state

    def fit(self, X, y=None):
        X = check_array(X, method="MVU")
        model = mvu(X, **self.get_params())
        return self._set(model, X)


METHOD_SPECS = (
    MethodSpec(
        "mvu",
        MaximumVarianceUnfolding,
        mvu,
        follows_pca=True,
        takes="dense",
        docs=DOCS_SDP,
        flow_adds=KNN_STAGE,
        not_in_estimator={"keep_kernel": "the estimator keeps K", **SDP_FUNCTION_ONLY},
        model=SDPEmbeddingModel,
        check=check_mvu_params,
        knn_graph="connected",
    ),
)
