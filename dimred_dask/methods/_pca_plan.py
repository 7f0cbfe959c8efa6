"""How PCA chooses its solver: `choose_solver` from the shape, `choose_sparse_solver` for
sparse input from the memory its accumulators need, and `plan_solver` (``solver="auto"`` with
``max_error``) from the predicted time of each solver's passes over out-of-core data."""

from __future__ import annotations

from .._compute import active_client, workers
from .._validation import is_dask, is_sparse_input
from ..errors import InputError, InputTypeError

__all__ = ["SOLVERS", "choose_solver", "choose_sparse_solver", "plan_solver"]

SOLVERS = ("auto", "covariance", "tsqr", "randomized", "dual", "single-pass")
COVARIANCE_MAX_FEATURES = 4096
DUAL_MAX_SAMPLES = 4096
SPARSE_SOLVERS = ("auto", "covariance", "randomized", "single-pass")
# solver="auto" with max_error on dense dask input larger than OUT_OF_CORE_SHARE of the
# cluster's memory (each pass reads it from storage again): single-pass when its predicted time
# is below the exact solver's. A pass is predicted at its floor, the larger of its read
# (bytes / READ_BYTES_PER_S, writes counted alike) and its compute (flops / (FLOPS_PER_CORE x
# the cluster's threads)); the rates are those `python -m bench pca --only single-pass`
# measured on local disk (a plain read of uncompressed chunk files; float32 products).
OUT_OF_CORE_SHARE = 0.5
READ_BYTES_PER_S = 1.9e9
FLOPS_PER_CORE = 1.2e11
# Sparse covariance: a task holds about this many d x d float64 matrices at once (the block's
# X^T X made dense, its centred scatter, and in a merge the two it combines), and they may use
# at most SPARSE_COVARIANCE_SHARE of the smallest worker's memory limit (of the machine's
# memory for in-memory input): 4096 features need 0.4 GiB, 20 000 need 9.6 GiB.
SPARSE_COVARIANCE_COPIES = 3
SPARSE_COVARIANCE_SHARE = 0.5


def choose_solver(solver: str, n: int, d: int, n_components) -> str:
    if solver not in SOLVERS:
        raise InputError(
            f"PCA solver must be one of {', '.join(SOLVERS)}; found {solver!r}.",
            "pass solver='covariance' (exact, one pass) or leave the default 'auto'.",
        )
    if solver != "auto":
        return solver
    if d <= COVARIANCE_MAX_FEATURES:
        return "covariance"
    if n <= DUAL_MAX_SAMPLES:
        return "dual"
    return "randomized" if not isinstance(n_components, float) else "tsqr"


def plan_solver(
    X,
    solver: str,
    k_request,
    *,
    max_error=None,
    n_oversamples: int = 10,
    n_iter: int = 4,
    where: str = "X",
) -> tuple[str, dict]:
    """(solver, why): the solver a fit uses and, for ``auto``, the reasons for it (the
    manifest's ``solver_choice``). ``max_error``: the largest relative embedding error the
    caller accepts from an approximate solver (None: exact only)."""
    n, d = X.shape
    exact = choose_solver(solver, n, d, k_request)  # also checks the name
    if is_sparse_input(X):
        return choose_sparse_solver(solver, X, k_request, where), {}
    if solver != "auto":
        return exact, {}
    why = {"requested": "auto", "exact_solver": exact}
    if max_error is None:
        return exact, {
            **why,
            "solver": exact,
            "why": "exact: no max_error given, so no approximate solver",
        }
    if isinstance(k_request, float) or not is_dask(X):
        return exact, {
            **why,
            "solver": exact,
            "why": (
                "exact: a fraction of variance needs the whole spectrum"
                if isinstance(k_request, float)
                else "exact: the data is in memory, where a second pass reads no storage"
            ),
        }
    memory, threads = _cluster(X)
    nbytes = n * d * X.dtype.itemsize
    if not memory or nbytes <= OUT_OF_CORE_SHARE * memory:
        return exact, {
            **why,
            "solver": exact,
            "why": (
                f"exact: the data ({_size(nbytes)}) fits in {OUT_OF_CORE_SHARE:.0%} of the "
                f"cluster's memory ({_size(memory or 0)}), where a second pass is cheap"
            ),
        }
    from ..linalg.single_pass import sketch_width

    s = sketch_width(k_request, n_oversamples, n, d)
    rate = FLOPS_PER_CORE * max(threads, 1)

    def passes(count: int, flops: float) -> float:
        return count * max(nbytes / READ_BYTES_PER_S, flops / rate)

    k = min(k_request, d)
    predicted = {
        "single-pass": passes(1, 4.0 * n * d * s) + 2 * n * s * X.dtype.itemsize / READ_BYTES_PER_S
    }  # sketch written, read
    predicted[exact] = (
        passes(1, 2.0 * n * d * k)
        + {  # + the transform pass
            "covariance": passes(1, 1.0 * n * d * d),
            "tsqr": passes(2, 4.0 * n * d * d),
            "dual": passes(1, 1.0 * n * n * d),
            "randomized": passes(n_iter + 2, 4.0 * n * d * (k + n_oversamples)),
        }[exact]
    )
    chosen = "single-pass" if predicted["single-pass"] < predicted[exact] else exact
    return chosen, {
        **why,
        "solver": chosen,
        "max_error": float(max_error),
        "predicted_s": {k: float(f"{v:.3g}") for k, v in predicted.items()},
        "why": (
            f"the data ({_size(nbytes)}) is over {OUT_OF_CORE_SHARE:.0%} of "
            f"the cluster's memory ({_size(memory)}), so each pass reads it "
            f"from storage; predicted {predicted['single-pass']:.3g} s for "
            f"single-pass (one read, a sketch of {s} columns) against "
            f"{predicted[exact]:.3g} s for {exact}"
        ),
    }


def _workers(X) -> list[dict]:
    """The workers of the distributed client that computes the dask array ``X`` (none for
    NumPy input or without a client)."""
    client = active_client() if is_dask(X) else None
    return list(workers(client).values()) if client is not None else []


def _machine_memory() -> int | None:
    try:
        import psutil

        return int(psutil.virtual_memory().total)
    except ImportError:
        return None


def _cluster(X) -> tuple[int | None, int]:
    """(memory, threads) of the cluster that computes the dask array ``X``: the workers'
    totals on a distributed client, else this machine's."""
    import os

    workers = _workers(X)
    if workers:
        return (
            sum(w.get("memory_limit") or 0 for w in workers) or None,
            sum(w.get("nthreads") or 1 for w in workers),
        )
    return _machine_memory(), os.cpu_count() or 1


def _memory(X) -> int | None:
    """Memory a task may use: the smallest worker memory limit for dask input on a
    distributed client, else the machine's memory (None when unknown)."""
    limits = [w.get("memory_limit") or 0 for w in _workers(X)]
    return int(min(limits)) if limits and min(limits) > 0 else _machine_memory()


def choose_sparse_solver(solver: str, X, k_request, where: str) -> str:
    """The solver for sparse input: covariance or randomized (``auto``: covariance up to
    COVARIANCE_MAX_FEATURES features, or for a fraction of variance, when its d x d
    accumulators fit in memory; else randomized); the densifying ones refused, and covariance
    refused when its accumulators would not fit."""
    n, d = X.shape
    if solver in ("tsqr", "dual"):
        raise InputTypeError(
            f"PCA with solver={solver!r} does not take sparse input (it forms the centred "
            f"matrix X - 1 mean^T, which is dense); found a sparse {n} x {d} matrix in "
            f"{where}.",
            "pass solver='randomized' or 'covariance' (they centre sparse input "
            "implicitly), or leave solver='auto'.",
        )
    fraction = isinstance(k_request, float)
    need = SPARSE_COVARIANCE_COPIES * 8 * d * d
    memory = _memory(X)
    fits = not memory or need <= SPARSE_COVARIANCE_SHARE * memory
    if solver == "auto":
        wanted = d <= COVARIANCE_MAX_FEATURES or fraction
        solver = "covariance" if wanted and (fits or fraction) else "randomized"
    if solver == "covariance" and not fits:
        raise InputError(
            f"PCA with solver='covariance' on sparse input holds d x d float64 scatter "
            f"matrices: {_size(need)} for d = {d} features, more than "
            f"{SPARSE_COVARIANCE_SHARE:.0%} of the memory available ({_size(memory)}).",
            "pass solver='randomized' (products with the sparse rows; memory grows with d, not "
            "d^2)"
            + (
                " with an int n_components (a fraction of variance needs the whole spectrum)"
                if fraction
                else ""
            )
            + ".",
        )
    return solver


def _size(nbytes: int) -> str:
    return f"{nbytes / 2**30:,.1f} GiB" if nbytes >= 2**30 else f"{nbytes / 2**20:,.1f} MiB"
