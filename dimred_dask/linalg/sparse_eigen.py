"""The smallest eigenpairs of a sparse symmetric (positive semidefinite) matrix, optionally of
the generalised problem A x = lambda B x with B symmetric positive definite.

One solver for every method that needs a bottom spectrum: LLE's M = (I - W)^T (I - W),
Laplacian eigenmaps' L y = lambda D y, spectral clustering, UMAP's spectral initialisation,
landmark MVU's bottom Laplacian eigenvectors.

Solvers (``solver=``):

- ``dense``: LAPACK ``eigh`` with ``subset_by_index`` on the dense matrix; n up to ~3000.
- ``arpack``: shift-invert Lanczos (``scipy.sparse.linalg.eigsh`` with ``sigma``): the
  eigenvalues nearest ``sigma`` converge in a few iterations. ``sigma`` is a tiny negative
  number (``SHIFT`` = -1e-12 times the largest diagonal entry) so that A - sigma B is
  positive definite and its sparse LU exists even though A is singular (Laplacians, LLE's
  M). It must be far below the smallest wanted nonzero eigenvalue: LLE's M on a swiss roll
  has lambda_2 ~ 1e-11 at n = 20 000, and a shift of -1e-5 made ARPACK far slower there (the
  shifted eigenvalues all sat at 1e5 with relative gaps of 1e-6). One sparse factorisation:
  fine while its fill-in fits in memory (graphs of a 2-D manifold up to a few hundred
  thousand vertices).
- ``lobpcg``: LOBPCG (Knyazev 2001) with a Jacobi preconditioner and, when given, an initial
  guess ``X0`` (e.g. eigenvectors from a coarser problem); matrix-vector products only, so it
  scales with nnz(A). Convergence depends on the relative gap of the wanted eigenvalues.
- ``amg``: LOBPCG preconditioned by one V-cycle of smoothed-aggregation algebraic multigrid
  (Vaněk, Mandel & Brezina 1996; pyamg's ``smoothed_aggregation_solver``, built on A plus a
  shift of 1e-5 times its mean diagonal, as scikit-learn's spectral embedding does), in
  memory. On graph Laplacians the preconditioner removes the dependence on n that stalls
  Jacobi: on the normalised Laplacian of a 100 000-point swiss roll's 10-NN graph it
  converges to 1e-8 in 41 iterations, where Jacobi's LOBPCG stops at 1000 with a residual of
  4.9e-8; at 600 000 points it takes 59 (see bench/RESULTS.md, "Laplacian eigenmaps above
  200 000 rows").
- ``lobpcg-workers``: the same kind of LOBPCG with the matrix's rows and the iteration's
  n x p blocks on the Dask workers (`worker_lobpcg`); the caller's process keeps only
  p x p and 3p x 3p matrices. Needs an active ``distributed.Client``; no ``B``. See
  bench/RESULTS.md, "Sparse eigensolvers on the workers".
- ``auto``: dense up to ``DENSE_MAX_SPARSE`` rows, arpack up to ``ARPACK_MAX``, above it
  lobpcg-workers when a Dask client with at least two workers is active and there is no
  ``B``, else amg. A solve above ``ARPACK_MAX`` that stops short continues with amg
  (`fallback_solvers`).

Returns `Eigen` with the values ascending and B-orthonormal vectors (float64) and its
convergence record (``Eigen.convergence``): ARPACK's verdict (with the residual
max ||A v - lambda B v|| / max |A_ii|, one sparse product), LOBPCG's residual norms against
its tolerance, dense trivially converged. A solve that stops short returns what it has,
marked ``converged=False``; ``fallback_solvers`` lists the robust solvers to retry with.
"""

from __future__ import annotations

import warnings

import numpy as np
import scipy.linalg
import scipy.sparse as sp

from .._validation import check_random_state
from ..errors import ConvergenceWarning, InputError
from .convergence import record, solve_with_fallbacks
from .eigen import Eigen

__all__ = [
    "bottom_eigsh",
    "SPARSE_EIGEN_SOLVERS",
    "DENSE_MAX_SPARSE",
    "ARPACK_MAX",
    "fallback_solvers",
    "bottom_eigsh_checked",
]

SPARSE_EIGEN_SOLVERS = ("auto", "dense", "arpack", "lobpcg", "amg", "lobpcg-workers")
DENSE_MAX_SPARSE = 3000
ARPACK_MAX = 200_000
SHIFT = -1e-12  # arpack's sigma, relative to the largest diagonal entry (see above)


def choose_sparse_solver(solver: str, n: int, *, generalised: bool = False) -> str:
    if solver not in SPARSE_EIGEN_SOLVERS:
        raise InputError(
            f"The sparse eigensolver must be one of "
            f"{', '.join(SPARSE_EIGEN_SOLVERS)}; found {solver!r}.",
            "pass eigen_solver='auto'.",
        )
    if solver == "auto":
        if n <= DENSE_MAX_SPARSE:
            return "dense"
        if n <= ARPACK_MAX:
            return "arpack"
        # the worker-side LOBPCG solves M x = lambda x only: a B keeps the solve in process
        return "lobpcg-workers" if not generalised and workers_at_hand() else "amg"
    return solver


def workers_at_hand(least: int = 2) -> bool:
    """An active Dask client with at least ``least`` workers (the worker-side solvers pay
    their way only when the rows are split over several workers)."""
    from .._compute import active_client, workers

    client = active_client()
    return client is not None and len(workers(client)) >= least


def fallback_solvers(solver: str, n: int) -> list[str]:
    """The robust solvers to retry with, in order, when ``solver`` stops short on an n x n matrix.

    Dense while it fits (``DENSE_MAX_SPARSE``), else shift-invert ARPACK while its
    factorisation is affordable (``ARPACK_MAX``), else LOBPCG with the multigrid
    preconditioner (``amg``); nothing after dense, nor after ARPACK or amg in their own size
    class.

    Parameters
    ----------
    solver : str
        The solver that stopped short (``auto`` already resolved).
    n : int
        The order of the matrix.

    Returns
    -------
    list of str
        ``[]``, ``["dense"]``, ``["arpack"]`` or ``["amg"]``.
    """
    if solver == "dense":
        return []
    if n <= DENSE_MAX_SPARSE:
        return ["dense"]
    if n <= ARPACK_MAX:
        return ["arpack"] if solver != "arpack" else []
    return ["amg"] if solver != "amg" else []


def bottom_eigsh(
    A,
    k: int,
    *,
    B=None,
    solver: str = "auto",
    tol: float = 1e-8,
    maxiter: int | None = None,
    random_state=0,
    X0=None,
    stall: bool = False,
) -> Eigen:
    """The ``k`` smallest eigenpairs of symmetric ``A`` (sparse or dense), optionally with ``B``.

    With ``B``, of A x = lambda B x (B symmetric positive definite). In memory, except for
    ``lobpcg-workers``, whose rows and blocks live on the Dask workers. A solve that stops
    short returns what it has, marked ``converged=False`` in its record
    (`bottom_eigsh_checked` retries instead).

    Parameters
    ----------
    A : sparse matrix or array-like of shape (n, n)
        The symmetric (positive semidefinite for ``arpack``'s shift) matrix, e.g. LLE's M or
        a graph Laplacian.
    k : int
        The number of eigenpairs, 1 <= k < n (k < n - 1 for ``lobpcg-workers``).
    B : sparse matrix, array-like of shape (n, n) or None, default None
        The right-hand side matrix (e.g. the degree matrix); None: the standard problem.
    solver : {"auto", "dense", "arpack", "lobpcg", "amg", "lobpcg-workers"}, default "auto"
        ``dense``: LAPACK ``eigh`` (``subset_by_index``) of the dense matrix. ``arpack``:
        shift-invert Lanczos (``scipy.sparse.linalg.eigsh``) around sigma = ``SHIFT`` times
        the largest |A_ii|, a tiny negative shift, so A - sigma B has a sparse LU although A
        is singular. ``lobpcg``: SciPy's LOBPCG (Knyazev 2001) with a Jacobi preconditioner,
        a block of k + min(10, max(2, k)) vectors. ``amg``: the same LOBPCG preconditioned
        by a smoothed-aggregation multigrid V-cycle (pyamg). ``lobpcg-workers``: LOBPCG on
        the Dask workers (`worker_lobpcg`), no ``B``. ``auto``: dense up to
        ``DENSE_MAX_SPARSE`` rows, arpack up to ``ARPACK_MAX``, above lobpcg-workers when a
        client with at least two workers is active and no ``B`` is given, else amg.
    tol : float, default 1e-8
        ``arpack``: ARPACK's relative accuracy. ``lobpcg`` and ``amg``: the residual norms
        ||A x - lambda B x|| (at least 1e-12). ``lobpcg-workers``: relative to the mean
        diagonal. Unused by ``dense``.
    maxiter : int or None, default None
        The iteration limit (None: 10 n for ``arpack``, 2000 for ``lobpcg`` and ``amg``,
        the workers' solver's own).
    random_state : int, numpy Generator, RandomState or None, default 0
        Seeds ARPACK's start vector or LOBPCG's start block.
    X0 : array-like of shape (n,) or (n, j), or None, default None
        ``lobpcg`` and ``amg``: initial vectors, the first columns of the start block (e.g.
        eigenvectors of a coarser problem).
    stall : bool, default False
        ``lobpcg-workers`` only: stop early, unconverged, when the residuals fall too slowly
        to reach ``tol`` within ``maxiter`` (`worker_lobpcg.bottom_eigsh_lobpcg_workers`).

    Returns
    -------
    Eigen
        ``values`` ascending, ``vectors`` (n, k) B-orthonormal, float64 (ARPACK stopping
        short may return fewer pairs), the solver's name, ``info`` (ARPACK's sigma, LOBPCG's
        maxiter, ...) and the ``convergence`` record.

    Raises
    ------
    InputError
        ``A`` is not square; ``k`` is out of range; an unknown ``solver``;
        ``lobpcg-workers`` with ``B`` or without a Dask client; a ``random_state`` that is
        not None, an int, a Generator or a RandomState.
    StageError
        ``lobpcg-workers``: the workers were lost more often than it restarts.

    Warns
    -----
    ConvergenceWarning
        The solver stopped before reaching ``tol``.
    """
    n = A.shape[0]
    if A.shape != (n, n):
        raise InputError(
            f"An eigensolver needs a square matrix; found shape {A.shape}.",
            "pass the n x n matrix.",
        )
    if not 1 <= k < n:
        raise InputError(
            f"Asked for {k} eigenpairs of a {n} x {n} matrix.", f"ask for between 1 and {n - 1}."
        )
    solver = choose_sparse_solver(solver, n, generalised=B is not None)
    if solver == "dense":
        return _dense(A, B, k)
    if solver == "arpack":
        return _arpack(A, B, k, tol, maxiter, random_state)
    if solver == "lobpcg-workers":
        if B is not None:
            raise InputError(
                "The worker-side LOBPCG solves M x = lambda x only; found a "
                "generalised problem (B given).",
                "pass solver='lobpcg' or 'arpack' for A x = lambda B x.",
            )
        from .worker_lobpcg import bottom_eigsh_lobpcg_workers

        return bottom_eigsh_lobpcg_workers(
            A,
            k,
            kind="symmetric",
            tol=tol,
            maxiter=maxiter,
            random_state=random_state,
            stall=stall,
        )
    return _lobpcg(A, B, k, tol, maxiter, random_state, X0, amg=solver == "amg")


def bottom_eigsh_checked(
    A, k: int, *, step: str, method: str, solver: str = "auto", fix: str | None = None, **kw
) -> tuple[Eigen, list]:
    """`bottom_eigsh` that does not return an unconverged answer.

    When ``solver`` (after ``auto`` is resolved) stops short, the `fallback_solvers` are
    tried in turn, with their default ``maxiter`` and no ``X0`` (the ones given are the
    first solver's); a first ``lobpcg-workers`` with a fallback to follow stops as soon as
    it stalls (``stall``).

    Parameters
    ----------
    A : sparse matrix or array-like of shape (n, n)
        The symmetric matrix, as in `bottom_eigsh`.
    k : int
        The number of eigenpairs, as in `bottom_eigsh`.
    step : str
        What is solved, named in every record.
    method : str
        The method's name in the warning and the error.
    solver : str, default "auto"
        The first solver (`bottom_eigsh`'s ``solver``).
    fix : str or None, default None
        The Fix of the `SolverError` (None: raise maxiter or loosen tol, or pass the arpack
        or dense solver).
    **kw
        Further keyword arguments of `bottom_eigsh` (``B``, ``tol``, ``maxiter``,
        ``random_state``, ``X0``).

    Returns
    -------
    eigen : Eigen
        The first converged result.
    records : list of dict
        The convergence records of every attempt, in order (a retried one says so in
        ``handled_by``).

    Raises
    ------
    SolverError
        The last solver tried stopped short too; its ``convergence`` attribute holds the
        records.
    InputError
        As `bottom_eigsh`.

    Warns
    -----
    ConvergenceWarning
        A fallback converged after the first solver stopped short (in place of the first
        solver's own warning).
    """
    n = A.shape[0]
    first = choose_sparse_solver(solver, n, generalised=kw.get("B") is not None)

    fallbacks = fallback_solvers(first, n)

    def attempt(s):
        more = {"stall": bool(fallbacks)} if s == first else {"maxiter": None, "X0": None}
        eig = bottom_eigsh(A, k, solver=s, **{**kw, **more})
        return eig, eig.convergence

    fix = fix or (
        "raise maxiter or loosen tol; or pass solver='arpack' (shift-invert, up to "
        f"{ARPACK_MAX} rows) or 'dense' (up to {DENSE_MAX_SPARSE})."
    )
    return solve_with_fallbacks(attempt, [first] + fallbacks, step=step, method=method, fix=fix)


def _todense(M):
    return M.toarray() if sp.issparse(M) else np.asarray(M, dtype=np.float64)


def _dense(A, B, k) -> Eigen:
    a = _todense(A)
    b = None if B is None else _todense(B)
    w, v = scipy.linalg.eigh((a + a.T) / 2, b, subset_by_index=[0, k - 1])
    return Eigen(
        w,
        v,
        "dense",
        0,
        convergence=record(
            f"bottom {k} eigenpairs", "dense", converged=True, status="exact (LAPACK eigh)"
        ),
    )


def _residual(A, B, w, v) -> float:
    """max_j ||A v_j - w_j B v_j|| / (max |A_ii| ||v_j||): one sparse product."""
    if v.size == 0:
        return float("inf")
    Bv = v if B is None else B @ v
    r = np.linalg.norm(A @ v - Bv * w, axis=0) / np.maximum(np.linalg.norm(v, axis=0), 1e-300)
    diag = np.abs(A.diagonal())
    return float(r.max() / max(float(diag.max()) if diag.size else 1.0, 1e-300))


def _arpack(A, B, k, tol, maxiter, random_state) -> Eigen:
    from scipy.sparse.linalg import ArpackNoConvergence, eigsh

    A = sp.csc_matrix(A, dtype=np.float64)
    diag = np.abs(A.diagonal())
    sigma = SHIFT * float(diag.max() if diag.size and diag.max() > 0 else 1.0)
    v0 = check_random_state(random_state).uniform(-1, 1, A.shape[0])
    Bm = None if B is None else sp.csc_matrix(B, dtype=np.float64)
    iters = maxiter or 10 * A.shape[0]
    converged, status = True, "converged"
    try:
        w, v = eigsh(A, k=k, M=Bm, sigma=sigma, which="LM", tol=tol, v0=v0, maxiter=iters)
    except ArpackNoConvergence as exc:
        warnings.warn(
            f"Shift-invert Lanczos converged for {len(exc.eigenvalues)} of {k} "
            f"eigenpairs in {iters} iterations (tol {tol:.0e}).",
            ConvergenceWarning,
            stacklevel=3,
        )
        w, v = exc.eigenvalues, exc.eigenvectors
        converged, status = False, f"{len(w)} of {k} eigenpairs converged"
    order = np.argsort(w)
    w, v = w[order], v[:, order]
    rec = record(
        f"bottom {k} eigenpairs",
        "arpack (shift-invert)",
        converged=converged,
        iterations=None if converged else iters,
        residual=_residual(A, Bm, w, v),
        tol=tol,
        status=status,
        maxiter=iters,
        n_converged=len(w),
        sigma=sigma,
        measure="tol: ARPACK's relative accuracy of the shifted-inverted "
        "eigenvalues; residual: max ||A v - lambda B v|| / max |A_ii|",
    )
    return Eigen(w, v, "arpack", 0, info={"sigma": sigma}, convergence=rec)


AMG_SHIFT = 1e-5  # the multigrid is built on A + AMG_SHIFT * mean(diag A) * B (or I)


def _multigrid(A, Bm):
    """One smoothed-aggregation V-cycle approximating (A + shift B)^-1, as a LinearOperator
    (the shift makes the singular Laplacian's hierarchy well defined)."""
    import pyamg

    shift = AMG_SHIFT * float(np.mean(np.abs(A.diagonal())) or 1.0)
    S = (A + shift * (Bm if Bm is not None else sp.eye(A.shape[0], format="csr"))).tocsr()
    ml = pyamg.smoothed_aggregation_solver(S)
    return ml.aspreconditioner(), {
        "levels": len(ml.levels),
        "sizes": [int(lev.A.shape[0]) for lev in ml.levels],
        "operator_complexity": float(ml.operator_complexity()),
    }


def _lobpcg(A, B, k, tol, maxiter, random_state, X0, amg: bool = False) -> Eigen:
    from scipy.sparse.linalg import LinearOperator, lobpcg

    n = A.shape[0]
    A = sp.csr_matrix(A, dtype=np.float64)
    Bm = None if B is None else sp.csr_matrix(B, dtype=np.float64)
    levels = None
    if amg:
        M, levels = _multigrid(A, Bm)
    else:
        diag = A.diagonal()
        inv = np.where(diag > 0, 1.0 / np.where(diag > 0, diag, 1.0), 1.0)
        M = LinearOperator(
            (n, n),
            matvec=lambda x: inv[:, None] * x.reshape(n, -1),
            matmat=lambda x: inv[:, None] * x,
            dtype=np.float64,
        )
    rng = check_random_state(random_state)
    width = k + min(10, max(2, k))  # a few extra vectors speed LOBPCG up a lot
    X = rng.standard_normal((n, width))
    if X0 is not None:
        X0 = np.asarray(X0, dtype=np.float64).reshape(n, -1)
        X[:, : X0.shape[1]] = X0[:, :width]
    iters = maxiter or 2000
    tol_used = max(tol, 1e-12)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        w, v, history = lobpcg(
            A,
            X,
            B=Bm,
            M=M,
            tol=tol_used,
            maxiter=iters,
            largest=False,
            retResidualNormsHistory=True,
        )
    order = np.argsort(w)[:k]
    residuals = np.asarray(history[-1], dtype=np.float64)[order] if history else np.full(k, np.inf)
    w, v = w[order], v[:, order]
    stopped = any(
        "not reach the requested tolerance" in str(c.message)
        or "Exited at iteration" in str(c.message)
        for c in caught
    )
    converged = not stopped and bool((residuals <= tol_used).all())
    if not converged:
        warnings.warn(
            f"LOBPCG did not reach tol={tol_used:.0e} in {iters} iterations "
            f"(largest residual {residuals.max():.1e}).",
            ConvergenceWarning,
            stacklevel=3,
        )
    name = "amg" if amg else "lobpcg"
    extra = {"multigrid": levels} if amg else {}
    rec = record(
        f"bottom {k} eigenpairs",
        "lobpcg (scipy, smoothed-aggregation multigrid)" if amg else "lobpcg (scipy, Jacobi)",
        converged=converged,
        iterations=min(max(len(history) - 1, 0), iters),
        residual=float(residuals.max()),
        tol=tol_used,
        status="converged" if converged else f"stopped at maxiter={iters}",
        maxiter=iters,
        measure="max ||A x - lambda B x|| of the wanted pairs (absolute)",
        **extra,
    )
    return Eigen(w, v, name, 0, info={"maxiter": iters, **extra}, convergence=rec)
