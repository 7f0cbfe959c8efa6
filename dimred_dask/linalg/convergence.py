"""Convergence records: what every iterative solver of the package reports about its solve.

A record is a small JSON-able dict:

    {"step": what was solved (e.g. "bottom eigenpairs of M"), "solver": the solver's name,
     "converged": bool, "iterations": int or None, "residual": float or None,
     "tol": float or None, "status": a short text, "handled_by": None, or what replaced a
     solve that did not converge (e.g. "retried with arpack")}

plus solver-specific extras (passes, matrix-vector products, the duality gap, ...). The
residual and the tolerance are in the solver's own measure, named in the record's
``"measure"`` where that is not obvious. Solvers attach their record to what they return
(`Eigen.convergence`, `SDPResult.convergence`); methods collect them, in the order they were
made, into their model's ``info["convergence"]`` and the estimator's ``convergence_``.

`solve_with_fallbacks` runs a solve, and when it stops short, the robust solvers given, in
turn: every attempt is recorded (an abandoned one with ``handled_by="retried with ..."``),
and when none converges `SolverError` says which solver stopped where, against what, and
which parameter to change.
"""

from __future__ import annotations

import math
import numbers
import warnings

import numpy as np

from ..errors import ConvergenceWarning, SolverError

__all__ = [
    "record",
    "completed",
    "solve_with_fallbacks",
    "unconverged_error",
    "describe",
    "require_converged",
    "diagnostic",
    "RECORD_KEYS",
    "NOT_RUN_MEMORY",
]

# a record's ``not_run`` when the solve was not started for want of a worker's memory: the
# refusal's fix then names more worker memory
NOT_RUN_MEMORY = "memory"

RECORD_KEYS = (
    "step",
    "solver",
    "converged",
    "iterations",
    "residual",
    "tol",
    "status",
    "handled_by",
)


def _plain(v):
    """JSON-able: NumPy scalars and arrays to Python, non-finite floats to None."""
    if isinstance(v, dict):
        return {str(k): _plain(x) for k, x in v.items()}
    if isinstance(v, (list, tuple, np.ndarray)):
        return [_plain(x) for x in (v.tolist() if isinstance(v, np.ndarray) else v)]
    if isinstance(v, (bool, np.bool_)):
        return bool(v)
    if isinstance(v, numbers.Integral):
        return int(v)
    if isinstance(v, numbers.Real):
        return float(v) if math.isfinite(float(v)) else None
    return v


def record(
    step: str,
    solver: str,
    *,
    converged: bool,
    iterations=None,
    residual=None,
    tol=None,
    status: str | None = None,
    handled_by: str | None = None,
    **extra,
) -> dict:
    """A convergence record (see the module docstring)."""
    out = {
        "step": str(step),
        "solver": str(solver),
        "converged": bool(converged),
        "iterations": None if iterations is None else int(iterations),
        "residual": None if residual is None else _plain(float(residual)),
        "tol": None if tol is None else _plain(float(tol)),
        "status": status or ("converged" if converged else "not converged"),
        "handled_by": handled_by,
    }
    out.update({k: _plain(v) for k, v in extra.items()})
    return out


def completed(step: str, solver: str, iterations=None, *, loss=None, **extra) -> dict:
    """The record of a solve that runs a fixed number of iterations by design (t-SNE's and
    UMAP's optimisers, randomized subspace iteration): status "completed"."""
    more = {} if loss is None else {"loss": loss}
    return record(
        step, solver, converged=True, iterations=iterations, status="completed", **more, **extra
    )


def _num(v, spec=".1e") -> str:
    return "?" if v is None else format(v, spec)


def describe(rec: dict) -> str:
    """One line: solver, step, residual against tolerance, iterations, status."""
    where = f"{rec['solver']} on the {rec['step']}"
    if rec.get("residual") is not None or rec.get("tol") is not None:
        where += (
            f": residual {_num(rec.get('residual'))} against the tolerance {_num(rec.get('tol'))}"
        )
    if rec.get("iterations") is not None:
        where += f" after {rec['iterations']} iterations"
    return f"{where} (status {rec['status']!r})"


def unconverged_error(method: str, records: list[dict], fix: str) -> SolverError:
    """The `SolverError` for a solve whose last attempt (``records[-1]``) did not converge."""
    last = records[-1]
    tried = ""
    if len(records) > 1:
        tried = " It was tried after " + "; ".join(describe(r) for r in records[:-1]) + "."
    if any(r.get("not_run") == NOT_RUN_MEMORY for r in records):
        fix = (
            f"{(fix or '').rstrip('.')}; or give the workers more memory (the robust solve "
            "holds the whole operator on one worker)."
        ).lstrip("; ")
    return SolverError(f"{method}: the solve did not converge: {describe(last)}.{tried}", fix)


def solve_with_fallbacks(attempt, solvers, *, step: str, method: str, fix: str, warn: bool = True):
    """(result, records) from ``attempt(solver) -> (result, record)`` for the first of
    ``solvers`` whose record says converged. An attempt that stops short is recorded with
    ``handled_by="retried with <next>"`` (its own ConvergenceWarning is replaced by one saying
    what was done); when the last one stops short too, `SolverError` (``fix``: what to
    change). ``step`` names what was solved in every record."""
    solvers = list(dict.fromkeys(solvers))  # in order, without repeats
    records = []
    for i, solver in enumerate(solvers):
        last = i + 1 == len(solvers)
        with warnings.catch_warnings(record=not last) as caught:
            if not last:
                warnings.simplefilter("always")
            result, rec = attempt(solver)
        if not last:  # warnings other than convergence pass through
            for w in caught:
                if not issubclass(w.category, ConvergenceWarning):
                    warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
        rec = {**rec, "step": step}
        records.append(rec)
        if rec["converged"]:
            if len(records) > 1 and warn:
                warnings.warn(
                    f"{method}: {describe(records[0])}; retried with {solver}, which converged.",
                    ConvergenceWarning,
                    stacklevel=3,
                )
            return result, records
        if not last:
            rec["handled_by"] = f"retried with {solvers[i + 1]}"
    err = unconverged_error(method, records, fix)
    err.convergence = records
    raise err


def require_converged(rec: dict, method: str, fix: str) -> dict:
    """``rec`` when it converged; else `SolverError` (a solve with no robust alternative)."""
    if not rec["converged"]:
        err = unconverged_error(method, [rec], fix)
        err.convergence = [rec]
        raise err
    return rec


def diagnostic(rec: dict) -> dict:
    """``rec`` of a solve whose result is only reported (e.g. the negative part of a
    spectrum), marked as such when it stopped short: nothing of the fit depends on it."""
    if not rec["converged"]:
        rec = {**rec, "handled_by": "diagnostic only: reported from the pairs that converged"}
    return rec
