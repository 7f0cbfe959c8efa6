"""The smallest eigenpairs of M = Aᵀ A by preconditioned LOBPCG on products with A only.

For LLE, A = I - W (k + 1 entries a row) and M = (I - W)ᵀ(I - W) (~k² entries a row): a
product Aᵀ(A X) costs less than M X, and M is never formed. This is LOBPCG
(Knyazev 2001) written for this case rather than ``scipy.sparse.linalg.lobpcg`` on a
LinearOperator, whose iterations spend most of their time outside the products; here the
dense steps run on one BLAS thread (see BLAS_THREADS) in preallocated blocks (see
bench/HISTORY.md, "LLE at n = 1 000 000 on the 50-D mixture with LOBPCG on I - W").

Per iteration: R = M X - X Λ, W = T R (T the preconditioner: Jacobi or `amg.AMG`), the
constraint vector ``null`` (LLE: the constant, M's exact eigenvector with eigenvalue 0)
projected out, then Rayleigh-Ritz on span[X, W, P] (P the previous step's direction); one
product with M per iteration (M X, M P are updated, not recomputed; they are recomputed from
scratch every ``REFRESH`` iterations so that rounding does not accumulate). The block has
``block`` >= k columns: the guard vectors let the wanted k converge at the rate set by the
gap to the (block + 1)-th eigenvalue rather than to the (k + 1)-th, which matters on the
clustered bottom spectra of LLE on high-dimensional data (0.0036, 0.0054, 0.0065, 0.0078 at
n = 200 000 on the 50-D mixture).

Stops when the k wanted residuals ||M x - λ x|| (unit x) are at most ``tol`` times the mean
diagonal of M (scale-free; ~1 for LLE's M). The answer is the Ritz pairs of M itself.
"""

from __future__ import annotations

import time
import warnings

import numpy as np
import scipy.linalg
import scipy.sparse as sp

from .._validation import check_random_state
from ..errors import ConvergenceWarning, InputError
from .convergence import record
from .eigen import Eigen

__all__ = ["bottom_eigsh_lobpcg", "PRECONDITIONERS"]

PRECONDITIONERS = ("jacobi", "amg")
# THREADS: the products with A and Aᵀ can be split by rows over threads (SciPy's sparse
# products release the GIL; the solver runs in the client while the workers idle). Default
# one: two threads win on a product alone but lose on a whole solve on a shared 2-core
# machine, where the dense steps between products then compete with other jobs.
THREADS = 1
# REORDER: rows and columns in reverse Cuthill-McKee order of the graph of A before solving
# (the eigenvectors are permuted back): neighbours' rows of X are then close in memory, which
# speeds up a product on rows given in random order; on whole solves the gain was within the
# noise. On by default (``reorder=True``): the ordering costs a few products, little next to
# a solve.
# BLAS_THREADS: the dense steps (n x 3p times 3p x p) run with one BLAS thread: OpenBLAS's
# threads made these thin products slower, not faster, on a loaded 2-core machine (see
# bench/HISTORY.md, "LLE at n = 1 000 000 on the 50-D mixture with LOBPCG on I - W").
MAXITER = 1000
REFRESH = 20
START_ROWS = 65536  # the start block is drawn in runs of this many rows, one seed a run
# Rayleigh-Ritz drops basis directions whose Gram eigenvalue is below this times the
# largest (S = [X, W, P] becomes nearly dependent as the iteration converges)
GRAM_RCOND = 1e-12


def start_block(a: int, b: int, p: int, seed: int) -> np.ndarray:
    """Rows a..b of the n x p start block of a solve seeded ``seed``: run r of START_ROWS
    rows drawn from the seed sequence (seed, r), so that a row block of a solve held on
    the workers draws its own rows, the same as this process's solve of the same operator."""
    out = np.empty((b - a, p))
    r = a // START_ROWS
    while r * START_ROWS < b:
        lo, hi = r * START_ROWS, (r + 1) * START_ROWS
        run = np.random.default_rng([seed, r]).standard_normal((START_ROWS, p))
        s, e = max(lo, a), min(hi, b)
        out[s - a : e - a] = run[s - lo : e - lo]
        r += 1
    return out


def _norms(X: np.ndarray) -> np.ndarray:
    """Column norms, by one einsum (faster than np.linalg.norm(X, axis=0) on tall X)."""
    return np.sqrt(np.einsum("ij,ij->j", X, X))


def _orth_coef(G: np.ndarray) -> np.ndarray:
    """Z with Zᵀ G Z = I on the well-conditioned part of the Gram matrix G."""
    s, U = scipy.linalg.eigh((G + G.T) / 2)
    keep = s > GRAM_RCOND * s.max()
    return U[:, keep] / np.sqrt(s[keep])


def bottom_eigsh_lobpcg(
    A,
    k: int,
    *,
    null=None,
    preconditioner: str = "jacobi",
    tol: float = 1e-8,
    maxiter: int | None = None,
    block: int | None = None,
    X0=None,
    random_state=0,
    reorder: bool = True,
    threads: int | None = None,
    amg_options=None,
) -> Eigen:
    """The ``k`` smallest eigenpairs of M = Aᵀ A orthogonal to ``null``, by LOBPCG.

    Preconditioned LOBPCG (Knyazev 2001) in this process, on products Aᵀ (A X) only (M is
    never formed): Rayleigh-Ritz on span[X, W, P] each iteration with one product with M
    (see the module docstring). In memory (NumPy / SciPy).

    Parameters
    ----------
    A : sparse matrix of shape (n, n)
        The factor of M (e.g. LLE's I - W), converted to float64 CSR.
    k : int
        The number of eigenpairs, 1 <= k < n - 1.
    null : array-like of shape (n,) or None, default None
        A vector in M's null space (the constant for LLE), projected out of the start block
        and of every preconditioned residual. None: no constraint.
    preconditioner : {"jacobi", "amg"}, default "jacobi"
        ``jacobi``: the inverse of M's diagonal (the column sums of A²); ``amg``: one V-cycle
        of `amg.amg_hierarchy`.
    tol : float, default 1e-8
        Stop when the k wanted residuals ||M x - λ x|| (unit x) are at most ``tol`` times the
        mean diagonal of M.
    maxiter : int or None, default None
        The iteration limit (None or 0: ``MAXITER``).
    block : int or None, default None
        The block's columns p, raised to at least k and capped at n - 2 (None:
        max(k + 6, 2k)); the extra columns speed up the wanted k on clustered spectra.
    X0 : array-like of shape (n,) or (n, j), or None, default None
        Start vectors: the first min(j, p) columns of the start block (the rest random).
    random_state : int, numpy Generator, RandomState or None, default 0
        Seeds the start block and the AMG hierarchy.
    reorder : bool, default True
        Solve in reverse Cuthill-McKee order of A's graph (Cuthill & McKee 1969), which keeps
        neighbours' rows close in memory; the eigenvectors come back in the input order.
    threads : int or None, default None
        Threads over which the rows of the products with A and Aᵀ are split, at most the
        cores (None: ``THREADS``). The dense steps run on one BLAS thread.
    amg_options : dict or None, default None
        ``preconditioner="amg"``: keyword arguments of `amg.amg_hierarchy` (``theta``,
        ``sweeps``, ``coarse_size``, ``max_levels``).

    Returns
    -------
    Eigen
        ``values`` (k,) ascending, ``vectors`` (n, k) orthonormal, float64, solver
        ``"lobpcg-jacobi"`` or ``"lobpcg-amg"``; ``info`` with the iterations, the block
        width, the residuals of the whole block, the absolute tolerance, the wall time and,
        for AMG, its levels; the ``convergence`` record (``converged=False`` when ``maxiter``
        was reached).

    Raises
    ------
    InputError
        ``A`` is not square or ``k`` is out of range; an unknown ``preconditioner``; a
        ``random_state`` that is not None, an int, a Generator or a RandomState.

    Warns
    -----
    ConvergenceWarning
        The wanted residuals were still above the tolerance after ``maxiter`` iterations.
    """
    n = A.shape[0]
    if A.shape != (n, n) or not 1 <= k < n - 1:
        raise InputError(
            f"bottom_eigsh_lobpcg needs a square A and 1 <= k < n - 1; found "
            f"shape {A.shape}, k = {k}.",
            "pass the n x n A and a smaller k.",
        )
    if preconditioner not in PRECONDITIONERS:
        raise InputError(
            f"preconditioner must be one of {', '.join(PRECONDITIONERS)}; "
            f"found {preconditioner!r}.",
            "pass preconditioner='jacobi'.",
        )
    A = sp.csr_matrix(A, dtype=np.float64)
    perm = _rcm(A) if reorder else np.arange(n)
    A = A[perm][:, perm].tocsr()
    rng = check_random_state(random_state)
    p = min(n - 2, max(k + 6, 2 * k) if block is None else max(block, k))
    X = start_block(0, n, p, int(rng.integers(2**63)))  # as the worker-side solve's
    if X0 is not None:
        X0 = np.asarray(X0, np.float64).reshape(n, -1)[perm, :p]
        X[:, : X0.shape[1]] = X0
    q = None if null is None else np.asarray(null, np.float64).reshape(n, 1)[perm]
    q = None if q is None else q / np.linalg.norm(q)

    def away(Y):
        return Y if q is None else Y - q @ (q.T @ Y)

    diag = np.asarray(A.multiply(A).sum(axis=0)).ravel()
    scale, info = float(diag.mean()), {"preconditioner": preconditioner, "reordered": reorder}
    precond = _preconditioner(A, diag, preconditioner, random_state, amg_options, info)
    from threadpoolctl import threadpool_limits

    t0 = time.perf_counter()
    with _GramProduct(A, threads) as matmat, threadpool_limits(1, user_api="blas"):
        # one BLAS thread: see BLAS_THREADS
        w, v, it, res = _iterate(
            matmat, precond, away, np.linalg.qr(away(X))[0], k, tol * scale, maxiter or MAXITER
        )
    info.update(
        {
            "iterations": it,
            "block": p,
            "residuals": res.tolist(),
            "tol_abs": tol * scale,
            "seconds": time.perf_counter() - t0,
        }
    )
    converged = bool((res[:k] <= tol * scale).all())
    if not converged:
        warnings.warn(
            f"LOBPCG stopped after {it} iterations with residuals "
            f"{np.array2string(res[:k], precision=2)} (wanted <= "
            f"{tol * scale:.1e}).",
            ConvergenceWarning,
            stacklevel=3,
        )
    rec = record(
        f"bottom {k} eigenpairs",
        f"lobpcg-{preconditioner}",
        converged=converged,
        iterations=it,
        residual=float(res[:k].max()),
        tol=tol * scale,
        status="converged" if converged else f"stopped at maxiter={maxiter or MAXITER}",
        maxiter=maxiter or MAXITER,
        block=p,
        measure="max ||M x - lambda x|| of the wanted pairs (absolute: tol times the "
        "mean diagonal of M)",
    )
    vectors = np.empty((n, k))
    vectors[perm] = v[:, :k]
    return Eigen(w[:k], vectors, f"lobpcg-{preconditioner}", 0, info=info, convergence=rec)


def _rcm(A):
    from scipy.sparse.csgraph import reverse_cuthill_mckee

    S = abs(A)
    return np.asarray(reverse_cuthill_mckee((S + S.T).tocsr(), symmetric_mode=True), dtype=np.int64)


def _preconditioner(A, diag, kind, random_state, amg_options, info):
    if kind == "amg":
        from .amg import amg_hierarchy

        amg = amg_hierarchy(A, random_state=random_state, **(amg_options or {}))
        info["levels"] = amg.info
        return amg.solve
    inv = 1.0 / np.where(diag > 0, diag, 1.0)
    return lambda R: inv[:, None] * R


class _GramProduct:
    """X -> Aᵀ (A X), the rows of each product split over ``threads`` threads (SciPy's
    sparse products release the GIL)."""

    def __init__(self, A, threads):
        import os

        self.n = A.shape[0]
        t = max(1, min(THREADS if threads is None else int(threads), os.cpu_count() or 1))
        self.cuts = np.linspace(0, self.n, t + 1).astype(np.int64)
        At = A.T.tocsr()
        self.A = [A[a:b] for a, b in zip(self.cuts[:-1], self.cuts[1:])]
        self.At = [At[a:b] for a, b in zip(self.cuts[:-1], self.cuts[1:])]
        self.pool = None

    def __enter__(self):
        from concurrent.futures import ThreadPoolExecutor

        if len(self.A) > 1:
            self.pool = ThreadPoolExecutor(len(self.A))
        return self

    def __exit__(self, *exc):
        if self.pool is not None:
            self.pool.shutdown()

    def _product(self, parts, X):
        out = np.empty((self.n, X.shape[1]))

        def one(i):
            out[self.cuts[i] : self.cuts[i + 1]] = parts[i] @ X

        if self.pool is None:
            one(0)
        else:
            list(self.pool.map(one, range(len(parts))))
        return out

    def __call__(self, X):
        X = np.ascontiguousarray(X)
        return self._product(self.At, self._product(self.A, X))


def _rayleigh_ritz(S, MS, p):
    Z = _orth_coef(S.T @ S)
    G = Z.T @ (S.T @ MS) @ Z
    w, c = scipy.linalg.eigh((G + G.T) / 2)
    return w[:p], Z @ c[:, :p]


def _iterate(matmat, precond, away, X, k, tol_abs, maxiter):
    """LOBPCG proper: returns (values, vectors, iterations, residual norms). The basis
    S = [X, W, P] and M S live in two preallocated n x 3p arrays (fresh n x 3p arrays each
    iteration cost more in page faults than the arithmetic on large n)."""
    n, p = X.shape
    S, MS = np.empty((n, 3 * p)), np.empty((n, 3 * p))
    newX, newMX, R = np.empty((n, p)), np.empty((n, p)), np.empty((n, p))
    S[:, :p] = X
    MS[:, :p] = matmat(X)
    w, c = _rayleigh_ritz(S[:, :p], MS[:, :p], p)
    np.matmul(S[:, :p], c, out=newX)
    np.matmul(MS[:, :p], c, out=newMX)
    S[:, :p], MS[:, :p] = newX, newMX
    m = 2 * p  # no P yet
    for it in range(1, maxiter + 1):
        X, MX = S[:, :p], MS[:, :p]
        np.multiply(X, w, out=R)
        np.subtract(MX, R, out=R)
        res = _norms(R)
        if (res[:k] <= tol_abs).all():
            return w, np.array(X), it - 1, res
        W = away(precond(R))
        W -= X @ (X.T @ W)
        W /= np.maximum(_norms(W), 1e-300)
        S[:, p : 2 * p] = W
        MS[:, p : 2 * p] = matmat(W)
        w, c = _rayleigh_ritz(S[:, :m], MS[:, :m], p)
        np.matmul(S[:, :m], c, out=newX)
        np.matmul(MS[:, :m], c, out=newMX)
        # the new search direction P: the W and P parts of the new Ritz vectors
        np.matmul(S[:, p:m], c[p:], out=R)
        norms = np.maximum(_norms(R), 1e-300)
        S[:, 2 * p :] = R / norms
        np.matmul(MS[:, p:m], c[p:], out=R)
        MS[:, 2 * p :] = R / norms
        S[:, :p], MS[:, :p] = newX, newMX
        m = 3 * p
        if it % REFRESH == 0:  # products updated by recurrence drift: recompute them
            S[:, :p] = away(S[:, :p])
            MS[:, :p] = matmat(np.ascontiguousarray(S[:, :p]))
            MS[:, 2 * p :] = matmat(np.ascontiguousarray(S[:, 2 * p :]))
    X, MX = S[:, :p], MS[:, :p]
    return w, np.array(X), maxiter, _norms(MX - X * w)
