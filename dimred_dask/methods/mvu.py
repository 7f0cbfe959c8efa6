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

from .._validation import check_array
from ._distance_sdp import distance_sdp, kernel_embedding

# the family's pieces (methods._sdp_family) once defined here stay importable from here: an
# ``x as x`` import re-exports a name this module does not use itself
from ._sdp_family import DEFAULT_MAX_ITER as DEFAULT_MAX_ITER
from ._sdp_family import DEFAULT_TOL as DEFAULT_TOL
from ._sdp_family import EXACT_MAX as EXACT_MAX
from ._sdp_family import (
    MVU_CONSTRAINTS,
    SDPEmbeddingModel,
    SDPEstimator,
    SDPFit,
    check_exact_sdp_params,
    check_exact_size,
    check_sdp_params,
)
from ._sdp_family import prepare_graph as prepare_graph
from ._sdp_family import reconstruct as reconstruct
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
    check_exact_size(
        shape[0], "Exact MVU", "use landmark MVU (landmark_mvu, method landmark-mvu) for large n."
    )
    return p


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
    params = dict(locals())  # the keywords as given, read by the checks, graph and solver
    X = check_array(params.pop("X"), method="MVU", where=where)
    fit, (I, J, d) = SDPFit.start(X, params, check_mvu_params, "MVU")
    K, info = distance_sdp(X.shape[0], I, J, d**2, **fit.solver_keywords())
    Y, lam, kinfo = kernel_embedding(K, int(n_components), fit.method)
    return fit.exact_model("mvu", Y.astype(X.dtype), lam, K, info, kinfo, n_edges=int(I.size))


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
        self._keep_params(locals())

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
