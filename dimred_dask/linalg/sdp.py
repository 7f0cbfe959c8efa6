"""Maximum-trace semidefinite programs over squared-distance constraints, in cvxpy.

The problem (MVU: Weinberger & Saul 2006; action respecting embedding adds constraints of the
same form):

    max tr(K)  s.t.  <A_c, K> = b_c  (c = 1..m),  sum_ij K_ij = 0,  K >= 0,

where every A_c is a signed sum of "dyads" (e_i - e_j)(e_i - e_j)^T, so <A_c, K> is a signed
sum of squared distances K_ii + K_jj - 2 K_ij. All m constraints are ONE sparse linear map
(``constraint_matrix``); nothing is a Python loop of scalar constraints.

Two formulations (``formulation=``):

- ``"primal"``: the problem as written, K an n x n PSD variable. Clarabel (an interior-point
  method) then factors a dense n(n+1)/2-square block every iteration, already slow at
  n = 100.
- ``"dual"`` (default): the Lagrange dual, min b^T y s.t. sum_c y_c M^T A_c M - M^T M >= 0,
  whose PSD constraint is one affine expression (``kr_columns``: column c of the map is
  vec(M^T A_c M)); K = M W M^T with W the multiplier of that constraint. Its sparsity pattern
  is that of the graph, so Clarabel's chordal decomposition splits the cone into cliques of
  ~30. ``M`` is a basis of the centred subspace (centring holds by construction):
  ``haar_basis`` is orthonormal (weighted when a face is used) and sparse on an order that
  keeps neighbours close; a plain difference basis (e_i - e_i+1) is as sparse but its
  condition number grows like n^2, and Clarabel then stalls at "inaccurate" (measured).
  With ``face`` (a sparse n x r matrix T from ``face_basis``), K = T M W M^T T^T: the affine
  dependencies of cliques are built in, which restores a strictly feasible point, and the
  constraints they make redundant are removed (``independent_columns``).

Slack variant (``slack=nu``): max tr(K) - nu sum_c |xi_c| with <A_c, K> = b_c + xi_c for the
distance constraints; in the dual this is the box |y_c| <= nu. The L1 penalty is exact: once
nu exceeds the largest multiplier of the equality problem the slack solution is the exact one.

Solvers: Clarabel (interior point; ``tol`` sets tol_gap_abs, tol_gap_rel and tol_feas, default
1e-8) or SCS (first order; ``tol`` sets eps_abs and eps_rel). Targets are scaled to mean 1
inside (distances of any unit give the same problem); K is scaled back.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np
import scipy.linalg
import scipy.sparse as sp

from .._progress import report
from .._validation import check_fits_in_memory
from ..errors import InputError
from .conic import solve_problem

__all__ = [
    "SDPResult",
    "SDP_SOLVERS",
    "SDP_FORMULATIONS",
    "haar_basis",
    "face_basis",
    "constraint_matrix",
    "kr_columns",
    "independent_columns",
    "max_trace_sdp",
    "solver_options",
]

SDP_SOLVERS = ("clarabel", "scs")
SDP_FORMULATIONS = ("dual", "primal")
PRUNE_TOL = 1e-9  # a pivot of the rank-revealing QR below this (relative) is a redundancy
# Clarabel (interior point) factors one dense system over a PSD cone's side(side+1)/2
# unknowns when the cone does not split into small cliques: always in the primal form, and in
# the dual when the constraints tie most pairs of rows together (over DENSE_PATTERN of the
# cone's entries; action respecting embedding's action_pairs="all" does). It then holds about
# DENSE_CONE_BYTES per squared unknown (1.5 GB measured at side 99: 64 x 4950^2 = 1.57 GB),
# and a problem that would not fit is refused (check_fits_in_memory).
DENSE_PATTERN = 0.5
DENSE_CONE_BYTES = 64


@dataclass
class SDPResult:
    K: np.ndarray  # n x n, centred, in the caller's units
    status: str  # cvxpy's status: optimal, optimal_inaccurate, infeasible, unbounded, ...
    objective: float  # tr(K) as the solver reports it, in the caller's units
    multipliers: np.ndarray | None  # y_c of the kept constraints (dual), scaled
    kept: np.ndarray  # indices of the constraints given to the solver
    iterations: int | None
    setup_seconds: float
    solve_seconds: float
    info: dict = field(default_factory=dict)
    convergence: dict | None = None  # the solve's record (``linalg.convergence``)


def haar_basis(weights: np.ndarray | None = None, n: int | None = None) -> sp.csc_matrix:
    """n x (n - 1) sparse basis of {x : weightsᵀ x = 0} made of weighted Haar vectors.

    For each node of a balanced binary split of 0..n-1 into index ranges L | R the vector is
    1_L / w(L) - 1_R / w(R), normalised (w(S) = sum of the weights over S; a range whose half
    has zero weight gets a two-entry vector instead). With unit weights these are the Haar
    vectors (Haar 1910) and the basis is orthonormal; it has about n log2 n nonzeros.

    Parameters
    ----------
    weights : array-like of shape (n,) or None, default None
        The weights w; None: unit weights.
    n : int or None, default None
        The size when ``weights`` is None (ignored otherwise); one of the two must be given.

    Returns
    -------
    scipy.sparse.csc_matrix of shape (n, n - 1)
        One unit-norm column per split (no columns for n <= 1).
    """
    w = np.ones(n) if weights is None else np.asarray(weights, dtype=np.float64)
    n = w.size
    rows, cols, vals = [], [], []
    stack, r = [(0, n)], 0
    while stack:
        lo, hi = stack.pop()
        if hi - lo < 2:
            continue
        mid = (lo + hi) // 2
        wl, wr = w[lo:mid].sum(), w[mid:hi].sum()
        if abs(wl) < 1e-12 or abs(wr) < 1e-12:  # a block of zero weight: split differently
            v = np.zeros(hi - lo)
            v[0], v[-1] = (w[hi - 1], -w[lo]) if abs(w[lo]) + abs(w[hi - 1]) > 0 else (1, 0)
        else:
            v = np.r_[np.full(mid - lo, 1.0 / wl), np.full(hi - mid, -1.0 / wr)]
        v /= np.linalg.norm(v)
        nz = np.nonzero(v)[0]
        rows.append(lo + nz)
        cols.append(np.full(nz.size, r))
        vals.append(v[nz])
        r += 1
        stack += [(lo, mid), (mid, hi)]
    if r == 0:
        return sp.csc_matrix((n, 0))
    return sp.csc_matrix(
        (np.concatenate(vals), (np.concatenate(rows), np.concatenate(cols))), shape=(n, r)
    )


def face_basis(n: int, rows: list, coef: list, tol: float = 1e-8) -> tuple[sp.csc_matrix, int]:
    """A sparse basis of the realisations that satisfy given affine dependencies.

    Dependency t is ``sum_j coef[t][j] p[rows[t][j]] = 0`` on the points p. Sparse
    elimination from T = I: each dependency, written in the current free coordinates,
    eliminates its largest entry; one already implied by the earlier ones is skipped. With
    coefficients that sum to 0 (affine dependencies) the rows of T sum to 1, so translations
    are kept.

    Parameters
    ----------
    n : int
        The number of points.
    rows : list of array-like of int
        The points of each dependency.
    coef : list of array-like of float
        The coefficients of each dependency, one per point of ``rows[t]``.
    tol : float, default 1e-8
        A dependency whose largest entry in the current free coordinates is at most ``tol``
        times its largest coefficient counts as implied, and is skipped.

    Returns
    -------
    T : scipy.sparse.csc_matrix of shape (n, n - used)
        The basis: the realisations are T z.
    used : int
        The number of dependencies eliminated.
    """
    T = sp.identity(n, format="csc")
    used = 0
    for idx, c in zip(rows, coef):
        w = T[idx].T @ c  # the dependency in the current free coordinates
        if np.abs(w).max() <= tol * np.abs(c).max():
            continue
        a = int(np.argmax(np.abs(w)))
        r = T.shape[1]
        keep = np.r_[0:a, a + 1 : r]
        R = sp.csc_matrix((np.ones(r - 1), (keep, np.arange(r - 1))), shape=(r, r - 1))
        R = R + sp.csc_matrix(
            (-(w[keep] / w[a]), (np.full(r - 1, a), np.arange(r - 1))), shape=(r, r - 1)
        )
        T = (T @ R).tocsc()
        T.data[np.abs(T.data) < 1e-14] = 0.0
        T.eliminate_zeros()
        used += 1
    return T, used


def constraint_matrix(
    m: int, ci: np.ndarray, I: np.ndarray, J: np.ndarray, s: np.ndarray, n: int
) -> sp.csr_matrix:
    """The m x n^2 map vec(K) -> (<A_c, K>)_c (vec column-major): every dyad (I, J, sign s)
    of constraint ci contributes s (K_ii + K_jj - K_ij - K_ji)."""
    rows = np.repeat(ci, 4)
    cols = np.stack([I * (n + 1), J * (n + 1), I + J * n, J + I * n], axis=1).ravel()
    vals = (s[:, None] * np.array([1.0, 1.0, -1.0, -1.0])).ravel()
    return sp.csr_matrix((vals, (rows, cols)), shape=(m, n * n))


def kr_columns(C: sp.spmatrix) -> sp.csc_matrix:
    """Column t of the result is vec(c_t c_t^T) (column-major) for column c_t of ``C``:
    all pairs of the nonzeros within each column, built at once (no loop over columns)."""
    C = sp.csc_matrix(C)
    C.sum_duplicates()
    nn, T = C.shape
    p, r, v = C.indptr, C.indices.astype(np.int64), C.data
    counts = np.diff(p)
    col = np.repeat(np.arange(T), counts)  # column of each stored entry
    reps = counts[col]
    a = np.repeat(np.arange(r.size), reps)  # first factor of each pair
    starts = np.repeat(np.cumsum(reps) - reps, reps)
    b = p[col[a]] + (np.arange(a.size) - starts)  # second factor runs over the same column
    return sp.csc_matrix((v[a] * v[b], (r[a] + r[b] * nn, col[a])), shape=(nn * nn, T))


def independent_columns(G: sp.csc_matrix, groups: list, tol: float = PRUNE_TOL) -> np.ndarray:
    """Indices of the columns of ``G`` to keep: within each group (an array of column
    indices that may be linearly dependent among themselves) a rank-revealing QR keeps a
    maximal independent subset; columns in no group are kept."""
    drop = []
    G = sp.csc_matrix(G)
    for cols in groups:
        if len(cols) < 2:
            continue
        sub = G[:, cols]
        used = np.unique(sub.indices)
        A = sub[used].toarray()
        _, R, piv = scipy.linalg.qr(A, mode="economic", pivoting=True)
        diag = np.abs(np.diag(R))
        rank = int((diag > tol * max(diag[0], 1e-300)).sum()) if diag.size else 0
        drop.append(np.asarray(cols)[piv[rank:]])
    out = np.ones(G.shape[1], dtype=bool)
    if drop:
        out[np.concatenate(drop)] = False
    return np.nonzero(out)[0]


# Clarabel's iterative refinement of each KKT solve, tighter than its defaults (reltol 1e-13,
# abstol 1e-12, 10 steps). With the defaults, the slack MVU of a perturbed 150-point swiss
# roll stalled at "AlmostSolved" on a 2-core AMD EPYC host (relative gap 1.4e-7 at iteration
# 30, the primal residual jumping back from 2.5e-10 to 3.5e-9, then a zero step: an inaccurate
# linear solve, not the model), while it solved on another host; with these it reaches
# "optimal" in 30 iterations, and the clean graph's solve is unchanged (27 iterations, the same
# trace). Measured 2026-11-25.
CLARABEL_REFINEMENT = {
    "iterative_refinement_reltol": 1e-15,
    "iterative_refinement_abstol": 1e-14,
    "iterative_refinement_max_iter": 50,
}


def solver_options(solver: str, tol: float, max_iter: int) -> dict:
    if solver not in SDP_SOLVERS:
        raise InputError(
            f"solver must be one of {', '.join(SDP_SOLVERS)}; found {solver!r}.",
            "pass solver='clarabel' (interior point, exact to tol).",
        )
    if not (isinstance(tol, (int, float)) and 0 < tol < 1):
        raise InputError(
            f"tol must be a number in (0, 1); found {tol!r}.",
            "pass tol=1e-8 (Clarabel) or 1e-5 (SCS).",
        )
    if not isinstance(max_iter, (int, np.integer)) or max_iter < 1:
        raise InputError(
            f"max_iter must be a positive int; found {max_iter!r}.",
            "pass max_iter=200 (Clarabel) or 100000 (SCS).",
        )
    if solver == "clarabel":
        return {
            "solver": "CLARABEL",
            "tol_gap_abs": tol,
            "tol_gap_rel": tol,
            "tol_feas": tol,
            "max_iter": int(max_iter),
            **CLARABEL_REFINEMENT,
        }
    return {"solver": "SCS", "eps_abs": tol, "eps_rel": tol, "max_iters": int(max_iter)}


def max_trace_sdp(
    n: int,
    m: int,
    dyads: tuple,
    b: np.ndarray,
    *,
    slack_rows=None,
    slack: float | None = None,
    face: sp.spmatrix | None = None,
    prune_groups: list | None = None,
    formulation: str = "dual",
    solver: str = "clarabel",
    tol: float = 1e-8,
    max_iter: int = 200,
    verbose: bool = False,
    label: str = "SDP",
) -> SDPResult:
    """Solve max tr(K) s.t. <A_c, K> = b_c, sum_ij K_ij = 0, K PSD (the module docstring).

    The problem of MVU (Weinberger & Saul 2006), modelled in cvxpy (Diamond & Boyd 2016) and
    solved in this process. The targets are scaled to mean 1 inside; K is scaled back.

    Parameters
    ----------
    n : int
        The number of points (K is n x n).
    m : int
        The number of constraints.
    dyads : tuple of 4 arrays
        (ci, I, J, s), of equal length: for every dyad (e_i - e_j)(e_i - e_j)ᵀ, the index in
        [0, m) of its constraint, its endpoints and its sign. The points are already in the
        order the caller wants the problem written in.
    b : array-like of shape (m,)
        The targets b_c (e.g. squared distances).
    slack_rows : array-like of int or None, default None
        The constraints the slack penalty applies to (None: all).
    slack : float or None, default None
        The penalty nu of max tr(K) - nu sum_c |xi_c| with <A_c, K> = b_c + xi_c, in the
        units of the scaled problem (targets of mean 1); None: equalities.
    face : sparse matrix of shape (n, r) or None, default None
        Dual only: T from `face_basis`, so that K = T M W Mᵀ Tᵀ.
    prune_groups : list of array-like of int or None, default None
        Dual only: groups of constraints that may be linearly dependent; a rank-revealing QR
        keeps a maximal independent subset of each (`independent_columns`).
    formulation : {"dual", "primal"}, default "dual"
        ``primal``: K an n x n PSD variable; ``dual``: the Lagrange dual, whose PSD
        constraint has the graph's sparsity, K from its multiplier.
    solver : {"clarabel", "scs"}, default "clarabel"
        Clarabel (interior point) or SCS (first order; O'Donoghue et al. 2016).
    tol : float, default 1e-8
        In (0, 1): Clarabel's tol_gap_abs, tol_gap_rel and tol_feas, or SCS's eps_abs and
        eps_rel.
    max_iter : int, default 200
        The solver's iteration limit.
    verbose : bool, default False
        Let the solver print its own log.
    label : str, default "SDP"
        The progress reports' prefix (building, canonicalisation, set-up, iterations).

    Returns
    -------
    SDPResult
        ``K`` (n x n, centred, in the caller's units; None without a solution), cvxpy's
        ``status`` (a solver failure is a status "solver_error: ...", not an exception),
        ``objective`` tr(K) (NaN without a value), the ``multipliers`` of the kept
        constraints, the ``kept`` indices, the iterations, the set-up and solve times,
        ``info`` and the ``convergence`` record.

    Raises
    ------
    InputError
        An unknown ``solver`` or ``formulation``, ``tol`` outside (0, 1), or ``max_iter`` not
        a positive int.
    """
    import cvxpy as cp

    t0 = time.perf_counter()
    report(f"{label}: building the problem", 0, 1)
    ci, I, J, s = (np.asarray(a) for a in dyads)
    b = np.asarray(b, dtype=np.float64)
    pos = b[b > 0]
    scale = float(pos.mean()) if pos.size else 1.0
    bs = b / scale
    slack_rows = np.arange(m) if slack_rows is None else np.asarray(slack_rows)
    opts = solver_options(solver, tol, max_iter)

    def check_cone(side: int, dense: bool) -> None:
        if solver == "clarabel" and dense:
            _check_dense_cone(side, formulation, label)

    if formulation == "primal":
        check_cone(n, True)
        problem, get_K, get_y, kept = _primal(cp, n, m, ci, I, J, s, bs, slack_rows, slack)
    elif formulation == "dual":
        problem, get_K, get_y, kept = _dual(
            cp, n, m, ci, I, J, s, bs, slack_rows, slack, face, prune_groups, check_cone
        )
    else:
        raise InputError(
            f"formulation must be one of {', '.join(SDP_FORMULATIONS)}; found {formulation!r}.",
            "pass formulation='dual'.",
        )
    t1 = time.perf_counter()
    report(f"{label}: building the problem", 1, 1)
    solved = solve_problem(
        problem,
        opts,
        label=label,
        tol=tol,
        verbose=verbose,
        step=f"{formulation} SDP (max trace, {m} constraints)",
    )
    t2 = time.perf_counter()
    K = get_K()
    value = problem.value if problem.value is not None and np.isfinite(problem.value) else None
    info = {
        "scale": scale,
        "formulation": formulation,
        "solver": opts["solver"],
        "n_constraints": int(m),
        "n_kept": int(kept.size),
        "canonicalise_seconds": round(solved["canonicalise_seconds"], 3),
        "solver_setup_seconds": round(solved["setup_seconds"], 3),
        "iterate_seconds": round(solved["iterate_seconds"], 3),
    }
    return SDPResult(
        K * scale if K is not None else None,
        solved["status"],
        float(value) * scale if value is not None else float("nan"),
        get_y(),
        kept,
        solved["iterations"],
        t1 - t0,
        t2 - t1,
        info,
        convergence=solved["record"],
    )


def _primal(cp, n, m, ci, I, J, s, bs, slack_rows, slack):
    A = constraint_matrix(m, ci, I, J, s, n)
    K = cp.Variable((n, n), PSD=True)
    lhs = A @ cp.vec(K, order="F")
    if slack is None:
        cons = [lhs == bs]
        obj = cp.trace(K)
    else:
        xi = cp.Variable(slack_rows.size)
        sel = sp.csr_matrix(
            (np.ones(slack_rows.size), (slack_rows, np.arange(slack_rows.size))),
            shape=(m, slack_rows.size),
        )
        cons = [lhs == bs + sel @ xi]
        obj = cp.trace(K) - slack * cp.norm1(xi)
    cons.append(cp.sum(K) == 0)
    problem = cp.Problem(cp.Maximize(obj), cons)

    def get_K():
        return None if K.value is None else (K.value + K.value.T) / 2

    def get_y():
        return None if cons[0].dual_value is None else np.asarray(cons[0].dual_value)

    return problem, get_K, get_y, np.arange(m)


def _check_dense_cone(side: int, formulation: str, label: str) -> None:
    """`InputError` when Clarabel's dense system over a PSD cone of this side would not fit
    in the memory available (see ``DENSE_CONE_BYTES``)."""
    unknowns = side * (side + 1) // 2
    check_fits_in_memory(
        DENSE_CONE_BYTES * unknowns**2,
        f"{label}: a dense {side} x {side} semidefinite constraint ("
        + (
            "the primal form"
            if formulation == "primal"
            else "its constraints tie most pairs of rows together"
        )
        + f"), so Clarabel (interior point) would factor a dense system of {unknowns:,} "
        "unknowns",
        "pass solver='scs' (first order: memory grows like n^2), embed fewer rows, or "
        + (
            "use formulation='dual'."
            if formulation == "primal"
            else "for action respecting embedding pass action_pairs='neighbors' (only pairs "
            "of steps that are graph neighbours, which keeps the constraint sparse)."
        ),
    )


def _dual(cp, n, m, ci, I, J, s, bs, slack_rows, slack, face, prune_groups, check_cone):
    T = sp.identity(n, format="csc") if face is None else sp.csc_matrix(face)
    H = haar_basis(np.asarray(T.sum(axis=0)).ravel())
    M = (T @ H).tocsc()  # n x nn, K = M W M^T
    nn = M.shape[1]
    Mt = M.T.tocsr()
    dy = (Mt[:, I] - Mt[:, J]).tocsc()  # c_t = M^T (e_i - e_j) for every dyad
    S = sp.csc_matrix((s.astype(np.float64), (np.arange(ci.size), ci)), shape=(ci.size, m))
    G = (kr_columns(dy) @ S).tocsc()  # column c: vec(M^T A_c M)
    check_cone(nn, np.unique(G.indices).size > DENSE_PATTERN * nn * nn)
    kept = independent_columns(G, prune_groups) if prune_groups else np.arange(m)
    G = G[:, kept]
    obj = (M.T @ M).toarray()
    y = cp.Variable(kept.size)
    lmi = cp.reshape(G @ y, (nn, nn), order="F") - obj >> 0
    cons = [lmi]
    if slack is not None:
        box = np.nonzero(np.isin(kept, slack_rows))[0]
        cons.append(cp.abs(y[box]) <= slack)
    problem = cp.Problem(cp.Minimize(bs[kept] @ y), cons)

    def get_K():
        W = lmi.dual_value
        if W is None:
            return None
        W = (np.asarray(W) + np.asarray(W).T) / 2
        MW = M @ W
        return np.asarray(M @ MW.T)

    def get_y():
        return None if y.value is None else np.asarray(y.value)

    return problem, get_K, get_y, kept
