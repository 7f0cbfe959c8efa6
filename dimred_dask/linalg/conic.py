"""Solving a cvxpy problem with progress reports and a convergence record.

cvxpy's ``problem.solve`` is one blocking call: canonicalisation (which takes seconds for
the SDPs of MVU at a few hundred points), the solver's set-up (Clarabel's chordal
decomposition and first factorisation) and its iterations, with nothing to see meanwhile.
For Clarabel (Goulart & Chen 2024, an interior-point method) the three phases are run here
one by one: ``problem.get_problem_data`` canonicalises, ``clarabel.DefaultSolver`` is built
from that data as cvxpy's own interface builds it (``solve_via_data``), a termination
callback (called by Clarabel once per iteration with its current info, returning False to
continue) reports "iteration i of at most max_iter" through ``dimred_dask._progress.report``,
and ``problem.unpack_results`` maps the solution back, so variables, duals and the status
are exactly those of ``problem.solve``. SCS is solved by ``problem.solve`` with the phases
reported around it.

The record (``linalg.convergence``) has cvxpy's status, the iterations, and for Clarabel the
relative and absolute duality gap and the primal and dual residuals; ``residual`` is
max(min(gap_abs, gap_rel), res_primal, res_dual), the quantity Clarabel's stopping rule
compares with ``tol`` (tol_gap_abs = tol_gap_rel = tol_feas = tol here).
"""

from __future__ import annotations

import time
import warnings

import numpy as np

from .._progress import report
from .convergence import record

__all__ = ["solve_problem"]


def solve_problem(
    problem, opts: dict, *, label: str, step: str, tol: float, verbose: bool = False
) -> dict:
    """Solve ``problem`` with ``opts`` (from ``linalg.sdp.solver_options``); returns
    {"status", "iterations", "canonicalise_seconds", "setup_seconds", "iterate_seconds",
    "record"}. A solver failure is a status ("solver_error: ..."), never an exception."""
    import cvxpy as cp

    name = opts["solver"]
    max_iter = int(opts.get("max_iter") or opts.get("max_iters") or 0)
    out = {"canonicalise_seconds": 0.0, "setup_seconds": 0.0, "iterate_seconds": 0.0, "info": {}}
    try:
        with warnings.catch_warnings():  # the status is reported and acted on by the caller
            warnings.filterwarnings("ignore", message="Solution may be inaccurate")
            if name == "CLARABEL":
                _clarabel(problem, opts, label, max_iter, verbose, out)
            else:
                t0 = time.perf_counter()
                report(f"{label}: canonicalising and solving ({name})", 0, 1)
                problem.solve(verbose=verbose, **opts)
                out["iterate_seconds"] = time.perf_counter() - t0
                report(f"{label}: canonicalising and solving ({name})", 1, 1)
        status = problem.status
    except cp.error.SolverError as exc:
        status = f"solver_error: {str(exc).splitlines()[0]}"
    stats = problem.solver_stats  # None when the solver failed
    iters = out["info"].get("iterations", getattr(stats, "num_iters", None))
    extra = _scs_extra(stats) if name == "SCS" else {}
    info = {k: v for k, v in out["info"].items() if k != "iterations"}
    residual, measure = None, None
    if {"gap_abs", "gap_rel", "res_primal", "res_dual"} <= set(info):
        residual = max(min(info["gap_abs"], info["gap_rel"]), info["res_primal"], info["res_dual"])
        measure = "max(min(gap_abs, gap_rel), res_primal, res_dual) (Clarabel's stopping rule)"
    elif {"gap_abs", "res_primal", "res_dual"} <= set(extra):
        residual = max(extra["gap_abs"], extra["res_primal"], extra["res_dual"])
        measure = (
            "max(gap, res_pri, res_dual), absolute (SCS stops at eps_abs + eps_rel "
            "times the data's scale)"
        )
    out["record"] = record(
        step,
        name.lower(),
        converged=status == "optimal",
        iterations=iters,
        residual=residual,
        tol=tol,
        status=status,
        max_iter=max_iter,
        **info,
        **extra,
        **({"measure": measure} if measure else {}),
    )
    out.update({"status": status, "iterations": iters})
    return out


def _clarabel(problem, opts, label, max_iter, verbose, out) -> None:
    """Canonicalise, set up and iterate Clarabel on ``problem`` (module docstring); the
    timings and Clarabel's final info go into ``out``."""
    import clarabel
    import cvxpy as cp
    import cvxpy.settings as s
    import scipy.sparse as sp
    from cvxpy.reductions.solvers.conic_solvers.clarabel_conif import dims_to_solver_cones
    from cvxpy.reductions.solvers.conic_solvers.conic_solver import ConicSolver

    solver_opts = {k: v for k, v in opts.items() if k != "solver"}
    t0 = time.perf_counter()
    report(f"{label}: canonicalising (cvxpy)", 0, 1)
    data, chain, inverse = problem.get_problem_data(
        cp.CLARABEL, verbose=verbose, solver_opts=solver_opts
    )
    report(f"{label}: canonicalising (cvxpy)", 1, 1)
    t1 = time.perf_counter()
    q = data[s.C]
    P = sp.triu(data[s.P]).tocsc() if s.P in data else sp.csc_array((q.size, q.size))
    cones = dims_to_solver_cones(data[ConicSolver.DIMS])
    settings = chain.solver.parse_solver_opts(verbose, solver_opts)
    report(f"{label}: Clarabel set-up", 0, 1)
    solver = clarabel.DefaultSolver(P, q, data[s.A], data[s.B], cones, settings)
    report(f"{label}: Clarabel set-up", 1, 1)
    t2 = time.perf_counter()
    target = max(
        float(getattr(settings, "tol_gap_rel", 1e-8)), float(getattr(settings, "tol_feas", 1e-8))
    )
    first: list[float] = []
    last = [f"{label}: Clarabel iterations"]

    def progress(info) -> bool:
        # the residual Clarabel stops on falls geometrically in an interior point method: the
        # share of its way, in orders of magnitude, from the first iterate to the tolerance
        r = max(min(info.gap_abs, info.gap_rel), info.res_primal, info.res_dual)
        if not first and np.isfinite(r) and r > 0:
            first.append(max(r, 10 * target))
        share = 0.0
        if first and np.isfinite(r) and r > 0:
            share = float(np.clip(np.log(first[0] / r) / np.log(first[0] / target), 0, 0.99))
        last[0] = (
            f"{label}: Clarabel iteration {int(info.iterations)}, residual {r:.1e} "
            f"(stops at {target:.0e}, at most {max_iter} iterations)"
        )
        report(last[0], share, 1.0)
        return False  # never ask Clarabel to stop

    solver.set_termination_callback(progress)
    result = solver.solve()
    t3 = time.perf_counter()
    report(last[0], 1.0, 1.0)  # the phase is over
    fin = solver.get_info()
    out.update(
        {
            "canonicalise_seconds": t1 - t0,
            "setup_seconds": t2 - t1,
            "iterate_seconds": t3 - t2,
            "info": {
                "iterations": int(fin.iterations),
                "clarabel_status": str(fin.status),
                "gap_abs": float(fin.gap_abs),
                "gap_rel": float(fin.gap_rel),
                "res_primal": float(fin.res_primal),
                "res_dual": float(fin.res_dual),
            },
        }
    )
    problem.unpack_results(result, chain, inverse)


def _scs_extra(stats) -> dict:
    """SCS's final residuals and gap, when cvxpy passed them on."""
    info = (getattr(stats, "extra_stats", None) or {}).get("info") if stats is not None else None
    if not isinstance(info, dict):
        return {}
    keys = {
        "res_pri": "res_primal",
        "res_dual": "res_dual",
        "gap": "gap_abs",
        "status": "scs_status",
    }
    return {new: info[old] for old, new in keys.items() if old in info}
