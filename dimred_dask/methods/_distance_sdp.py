"""The semidefinite program under maximum variance unfolding and action respecting embedding
(`methods.mvu`, `methods.are`): ``distance_sdp`` solves max tr(K) under the edges' distance
constraints (Weinberger & Saul 2006), with the cliques' affine dependencies built in (face
reduction) and a second attempt in the reversed order; ``check_solver_status`` turns the
solver's status into the product's errors (landmark MVU's too); ``kernel_embedding`` is the
kernel PCA of the solution. What else the three methods share is in
``methods._sdp_family``."""

from __future__ import annotations

import time
import warnings

import numpy as np
import scipy.sparse as sp
from scipy.sparse.csgraph import breadth_first_order, connected_components

from ..errors import ConvergenceWarning, DimredWarning, InfeasibleError, SolverError
from ..graphs.sdp import bandwidth_order, clique_dependencies
from ..linalg import top_eigh
from ..linalg.convergence import describe
from ..linalg.sdp import face_basis, max_trace_sdp
from ._base import column_signs

FACE_TOL = 1e-9  # clique Gram eigenvalues below this x the largest are zero (exact: ~1e-15)
NEGATIVE_TOL = 1e-6  # ... below minus this x the largest: the clique is not Euclidean
RANK_TOL = 1e-6  # eigenvalues of K above this x the largest count towards its rank


def hop_diameter(n: int, I: np.ndarray, J: np.ndarray) -> int:
    """A lower bound of the graph's diameter in hops (double-sweep breadth-first search)."""
    A = sp.csr_matrix((np.ones(I.size), (I, J)), shape=(n, n))
    A = (A + A.T).tocsr()
    far = 0
    for _ in range(2):
        order, pred = breadth_first_order(A, far, directed=False, return_predecessors=True)
        depth = np.zeros(n, dtype=np.int64)
        for v in order[1:]:
            depth[v] = depth[pred[v]] + 1
        far = int(order[np.argmax(depth[order])])
    return int(depth.max())


def _prune_groups(n: int, Ip, Jp, rows: list) -> list:
    """Edge groups that the face may make linearly dependent: edges inside a clique with a
    dependency, grouped by the connected components those edges form."""
    if not rows:
        return []
    inside = np.zeros(Ip.size, dtype=bool)
    members = {}
    for C in rows:
        key = tuple(C.tolist())
        if key in members:
            continue
        members[key] = True
        mask = np.isin(Ip, C) & np.isin(Jp, C)
        inside |= mask
    edges = np.nonzero(inside)[0]
    if edges.size == 0:
        return []
    A = sp.csr_matrix((np.ones(edges.size), (Ip[edges], Jp[edges])), shape=(n, n))
    _, lab = connected_components(A, directed=False)
    comp = lab[Ip[edges]]
    return [edges[comp == c] for c in np.unique(comp)]


def distance_sdp(
    n: int,
    I,
    J,
    d2,
    *,
    extra=None,
    constraints="equality",
    slack_penalty=10.0,
    face_reduction=True,
    formulation="dual",
    solver="clarabel",
    tol=1e-7,
    max_iter=200,
    allow_inaccurate=False,
    method="MVU",
    verbose=False,
):
    """Solve MVU's SDP on the edges (I, J) with squared lengths ``d2``. Returns (K in the
    original order, info).

    The problem is written in reverse Cuthill-McKee order; when the solver stops short of
    "optimal" it is solved once more in the reversed order (the same problem: only the
    sparse basis changes, and with it the solver's numerics). ``info["attempts"]`` lists the
    statuses.

    Parameters
    ----------
    n : int
        The number of points (K is n x n).
    I : numpy.ndarray of int
        The edges' first endpoints.
    J : numpy.ndarray of int
        The edges' second endpoints.
    d2 : numpy.ndarray of float
        The edges' squared lengths.
    extra : tuple of 4 arrays or None, default None
        (ci, I, J, sign) dyads of further constraints with target 0, numbered from 0, e.g.
        the action constraints of ARE.
    constraints : {"equality", "slack"}, default "equality"
        Exact distances, or violations penalised (max tr(K) - nu sum |xi_e|, with
        nu = ``slack_penalty`` * D^2, D the graph's hop diameter).
    slack_penalty : float, default 10.0
        The slack variant's penalty factor.
    face_reduction : bool, default True
        Build the cliques' affine dependencies into the equality problem (dual formulation
        only) and drop the constraints they make redundant.
    formulation : {"dual", "primal"}, default "dual"
        The SDP formulation (only the dual is retried in the reversed order).
    solver : {"clarabel", "scs"}, default "clarabel"
        The SDP solver.
    tol : float, default 1e-7
        The solver's tolerance.
    max_iter : int, default 200
        The solver's iteration limit.
    allow_inaccurate : bool, default False
        Accept the status "optimal_inaccurate" (with a `ConvergenceWarning`) instead of
        raising `SolverError`.
    method : str, default "MVU"
        The method named in messages and progress reports.
    verbose : bool, default False
        Passed to the solver (its own log).

    Returns
    -------
    K : numpy.ndarray of shape (n, n)
        The kernel matrix in the original order.
    info : dict
        Status, attempts, objective, timings, the violations of the distance constraints and
        every solve's record in ``info["convergence"]``.

    Raises
    ------
    InfeasibleError
        The problem is infeasible (for the equality problem, also a clique whose distances are
        not Euclidean).
    SolverError
        The solver did not reach "optimal" (unless "optimal_inaccurate" is allowed).
    """
    # the problem as given (all but allow_inaccurate): each attempt solves it in its order
    problem = {k: v for k, v in locals().items() if k != "allow_inaccurate"}
    t0 = time.perf_counter()
    rcm = bandwidth_order(n, I, J)
    attempts, records, res = [], [], None
    orders = (rcm, rcm[::-1].copy()) if formulation == "dual" else (rcm,)
    for i, order in enumerate(orders):
        label = f"{method} SDP" + (" (reversed order)" if i else "")
        res, K, info = _solve_in_order(order, label, **problem)
        attempts.append(res.status)
        if records:
            records[-1]["handled_by"] = "solved again in the reversed order"
        records.append({**res.convergence, "order": "reversed" if i else "reverse Cuthill-McKee"})
        if res.status == "optimal" or _infeasible(res):
            break
    check_solver_status(res, method, constraints, allow_inaccurate, records=records)
    info.update(
        {
            "status": res.status,
            "attempts": attempts,
            "objective": res.objective,
            "solver": res.info["solver"],
            "formulation": formulation,
            "tol": tol,
            "iterations": res.iterations,
            "setup_seconds": round(res.setup_seconds, 3),
            "solve_seconds": round(res.solve_seconds, 3),
            **{
                k: res.info[k]
                for k in ("canonicalise_seconds", "solver_setup_seconds", "iterate_seconds")
            },
            "n_constraints_solved": int(res.kept.size),
            "seconds": round(time.perf_counter() - t0, 3),
            "trace": float(np.trace(K)),
            "convergence": records,
            **violations(K, I, J, d2),
        }
    )
    return K, info


def _solve_in_order(
    order,
    label,
    *,
    n,
    I,
    J,
    d2,
    extra,
    constraints,
    slack_penalty,
    face_reduction,
    formulation,
    solver,
    tol,
    max_iter,
    method,
    verbose,
):
    """One attempt of `distance_sdp`: its problem written in ``order`` (a permutation of the
    points) and solved; returns (the solver's result, K in the original order or None, the
    problem's info)."""
    E = I.size
    inv = np.empty(n, dtype=np.int64)
    inv[order] = np.arange(n)
    Ip, Jp = inv[I], inv[J]
    face, groups, info = None, None, {"constraints": constraints}
    if constraints == "equality" and face_reduction and formulation == "dual":
        deps = clique_dependencies(n, Ip, Jp, d2, tol=FACE_TOL)
        if deps.worst < -NEGATIVE_TOL:
            pts = np.sort(order[deps.worst_clique]).tolist()
            raise InfeasibleError(
                f"{method}'s equality constraints cannot hold: the {len(pts)} points "
                f"{pts[:10]} are all neighbours of each other, but their distances are not "
                f"those of any Euclidean configuration (their Gram matrix has an eigenvalue of "
                f"{deps.worst:.2e} times its largest).",
                "use the slack variant (constraints='slack'), which penalises violations, or "
                "a Euclidean metric.",
            )
        face, used = face_basis(n, deps.rows, deps.coef)
        groups = _prune_groups(n, Ip, Jp, deps.rows)
        info.update(
            {
                "cliques_examined": deps.n_cliques,
                "dependencies": len(deps.rows),
                "face_dimension": int(face.shape[1]),
                "dependencies_used": int(used),
            }
        )
    ci, di, dj, ds = [np.arange(E)], [Ip], [Jp], [np.ones(E)]
    m = E
    if extra is not None and np.asarray(extra[0]).size:
        eci, ei, ej, es = (np.asarray(a) for a in extra)
        ci.append(eci + E)
        di.append(inv[ei])
        dj.append(inv[ej])
        ds.append(es.astype(np.float64))
        m = E + int(eci.max()) + 1
    b = np.zeros(m)
    b[:E] = d2
    nu = None
    if constraints == "slack":
        diam = hop_diameter(n, I, J)
        nu = float(slack_penalty) * max(diam, 1) ** 2
        info.update({"hop_diameter": diam, "penalty": nu})
    info["n_constraints"] = int(m)
    res = max_trace_sdp(
        n,
        m,
        tuple(np.concatenate(a) for a in (ci, di, dj, ds)),
        b,
        slack_rows=np.arange(E),
        slack=nu,
        face=face,
        prune_groups=groups,
        formulation=formulation,
        solver=solver,
        tol=tol,
        max_iter=max_iter,
        verbose=verbose,
        label=label,
    )
    K = None
    if res.K is not None:
        K = np.empty((n, n))
        K[np.ix_(order, order)] = res.K
    return res, K, info


def _infeasible(res) -> bool:
    st = res.status
    return st.startswith("unbounded" if res.info["formulation"] == "dual" else "infeasible")


def check_solver_status(
    res,
    method: str,
    constraints: str,
    allow_inaccurate: bool,
    fix: str | None = None,
    records: list | None = None,
) -> None:
    """Accept "optimal"; refuse an infeasible problem (`InfeasibleError`) and any other status
    (`SolverError`), except "optimal_inaccurate" with ``allow_inaccurate`` (a warning, and
    the last record's ``handled_by`` says it was accepted). The raised error carries the
    records as ``convergence``."""
    st = res.status
    if st == "optimal":
        return
    last = records[-1] if records else res.convergence or {}
    where = (
        describe(last)
        if last
        else (
            f"{res.info['solver']} on the "
            f"{res.info['formulation']} form, {res.iterations} "
            "iterations"
        )
    )
    if _infeasible(res):
        err = InfeasibleError(
            f"{method}'s SDP is infeasible: no kernel matrix satisfies all "
            f"{'distance' if constraints == 'equality' else ''} constraints ({where}).",
            "use the slack variant (constraints='slack'), which penalises violations instead; "
            "check that the distances are Euclidean.",
        )
    elif st == "optimal_inaccurate" and allow_inaccurate and res.K is not None:
        last["handled_by"] = "accepted (allow_inaccurate=True)"
        warnings.warn(
            ConvergenceWarning(
                f"{method}: the SDP solver stopped at status 'optimal_inaccurate' ({where}); the "
                "result is used as allowed."
            ),
            stacklevel=4,
        )
        return
    else:
        err = SolverError(
            f"{method}'s SDP did not reach status 'optimal': {where}.",
            fix
            or "raise max_iter if the iterations ran out; else allow it with "
            "allow_inaccurate=True (the violations are reported), use constraints='slack', or "
            "lower n_neighbors (a graph with fewer edges is better posed).",
        )
    err.convergence = list(records or [])
    raise err


def violations(K: np.ndarray, I, J, d2) -> dict:
    """The largest violation of the distance constraints: relative to each edge's squared
    length (edges of length 0 excluded) and relative to the mean squared edge length."""
    got = K[I, I] + K[J, J] - 2 * K[I, J]
    err = np.abs(got - d2)
    mean = float(d2.mean()) if d2.size else 1.0
    pos = d2 > 0
    return {
        "max_relative_violation": float((err[pos] / d2[pos]).max()) if pos.any() else 0.0,
        "max_violation_over_mean": float(err.max() / mean) if err.size else 0.0,
        "mean_relative_violation": float((err[pos] / d2[pos]).mean()) if pos.any() else 0.0,
    }


# --------------------------------------------------------------------------- kernel PCA


def kernel_embedding(
    K: np.ndarray, k: int, method: str = "MVU"
) -> tuple[np.ndarray, np.ndarray, dict]:
    """Kernel PCA of a centred PSD kernel matrix: (Y = V Lambda^1/2 sign-fixed, Lambda, info)
    from ``top_eigh`` (dense: the whole spectrum, so the negative part is reported).

    Parameters
    ----------
    K : numpy.ndarray of shape (n, n)
        The centred kernel matrix (e.g. the SDP's).
    k : int
        The number of components.
    method : str, default "MVU"
        The method's name in the warning about components the kernel does not span.

    Returns
    -------
    Y : numpy.ndarray of shape (n, k)
        The embedding V Lambda^1/2, column signs fixed.
    Lambda : numpy.ndarray of shape (k,)
        The top eigenvalues, negative ones clipped to 0.
    info : dict
        Explained variance ratio, rank, smallest eigenvalue ratio, centring ratio and the
        eigensolver's record in ``info["convergence"]``.

    Warns
    -----
    DimredWarning
        Components past the kernel's rank (eigenvalue at most ``RANK_TOL`` times the
        largest): their columns are zero or rounding noise.
    """
    eig = top_eigh(K, k, solver="dense", stage="kernel PCA of the SDP kernel")
    lam = np.maximum(eig.values, 0.0)
    signs = column_signs(eig.vectors)
    Y = eig.vectors * signs * np.sqrt(lam)
    spec = eig.spectrum
    total = float(spec[spec > 0].sum()) or 1.0
    top = max(float(spec[0]), 1e-300)
    rank = int((spec > RANK_TOL * top).sum())
    if rank < k:
        warnings.warn(
            DimredWarning(
                f"{method}: {k - rank} of the {k} requested components lie past the rank of "
                f"the learned kernel ({rank}; eigenvalues {np.round(lam[rank:], 12).tolist()}): "
                "the unfolded data spans fewer dimensions, and those columns are zero or "
                "rounding noise. Ask for fewer components."
            ),
            stacklevel=3,
        )
    info = {
        "explained_variance_ratio": (lam / total).tolist(),
        "rank": rank,
        "min_eigenvalue_ratio": float(spec[-1] / top),
        "centring_ratio": float(abs(K.sum()) / max(np.trace(K), 1e-300)),
        "convergence": [{**eig.convergence, "step": "top eigenpairs of the SDP kernel"}],
    }
    return Y, lam, info
