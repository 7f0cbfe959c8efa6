"""The smallest eigenpairs of M = Aᵀ A from a sparse LU factorisation of A (not of M).

For LLE, A = I - W (n x n, k + 1 nonzeros a row) and M = Aᵀ A has ~n k² nonzeros, its
bottom eigenvalues tiny and clustered (6.6e-15 and 6.1e-14 at n = 1 000 000 on the swiss
roll), so only an inverse resolves them. Factorising M itself (shift-invert ARPACK) fills in,
which at a million rows takes many times the memory and the time of the route below (see
bench/HISTORY.md, "LLE at n = 1 000 000 with the factored solver"). A has the sparsity of the
kNN graph, and its LU is far smaller than M's (COLAMD ordering both), and
(Aᵀ A)⁻¹ = A⁻¹ A⁻ᵀ is two triangular solve pairs with it.

A is singular (A 1 = 0: the constant vector ``null`` is M's eigenvector with eigenvalue 0),
so the factorisation is of B = A + τ I with τ = ``GRAM_SHIFT`` times the largest |diagonal|,
and T x = B⁻¹ P B⁻ᵀ x for x orthogonal to ``null``, with P the projection away from A's left
null vector u (Aᵀ u = 0, three steps of inverse iteration with Bᵀ). Without P, B⁻ᵀ x keeps
a component along u of the size of the wanted part, which B⁻¹ multiplies by 1/τ along the
constant: the solve's forward error (~ eps/τ of that) then swamped the answer (T v had
cosine 0.51 with an exact eigenvector v at n = 20 000; with P, 1 - 4e-12). T is close to,
not exactly, the pseudo-inverse of M; it is used only to steer the iteration, never to
define the answer: block inverse iteration with Rayleigh-Ritz on M,

    V <- the p lowest Ritz vectors of M in span[V, T V],   both orthogonal to ``null``,

whose fixed points are M's exact eigenvectors whatever the error of T. The Rayleigh-Ritz
matrix is formed as (A S)ᵀ (A S), not Sᵀ (M S), so that eigenvalues of 1e-14 against
||M|| ~ 4 are not lost to cancellation. It stops when the wanted Ritz vectors move by
less than ``tol`` (the sine of the largest angle between successive blocks).
"""

from __future__ import annotations

import numbers
import warnings

import numpy as np
import scipy.linalg
import scipy.sparse as sp

from .._validation import check_random_state
from ..errors import ConvergenceWarning, InputError
from .convergence import record
from .eigen import Eigen

__all__ = ["bottom_eigsh_gram", "GRAM_SHIFT"]

# τ relative to the largest |diagonal| of A: small enough that Bᵀ B's bottom spectrum stays
# close to M's (for a smooth unit vector y, τ yᵀ(A + Aᵀ) y <= 2 τ ||A y|| ~ 2e-17 at
# ||A y||² = 1e-14), large enough that B is safely nonsingular in float64 (condition ~1/τ).
GRAM_SHIFT = 1e-10
MAXITER = 100
# the floor of the attainable tolerance: the change of the block stagnates at 1e-8 - 2e-8 on
# LLE's M of a swiss roll in float64 (measured at n = 20 000 and 200 000), where the vectors
# agree with shift-invert ARPACK's to a sine of 4e-7 and 7e-6 (ARPACK's tol 1e-6)
TOL_FLOOR = 1e-7


def bottom_eigsh_gram(
    A,
    k: int,
    *,
    null=None,
    tol: float = 1e-8,
    maxiter: int | None = None,
    random_state=0,
    block: int | None = None,
) -> Eigen:
    """The ``k`` smallest eigenpairs of M = Aᵀ A (A sparse, square) orthogonal to ``null``.

    In memory (NumPy / SciPy). Block inverse iteration with Rayleigh-Ritz on M, steered by a
    sparse LU factorisation (SuperLU, COLAMD ordering) of B = A + τ I, τ = ``GRAM_SHIFT``
    times A's largest |diagonal| entry; M itself is never formed nor factorised (see the
    module docstring). The Rayleigh-Ritz matrix is (A S)ᵀ (A S), so tiny eigenvalues are not
    lost to cancellation.

    Parameters
    ----------
    A : sparse matrix of shape (n, n)
        The factor of M (e.g. LLE's I - W), converted to float64 CSR.
    k : int
        The number of eigenpairs, 1 <= k < n - 1.
    null : array-like of shape (n,) or None, default None
        A vector with A null = 0 (the constant for LLE): the block is kept orthogonal to it,
        and the steering projects away from A's left null vector (three steps of inverse
        iteration with Bᵀ). None: no constraint.
    tol : float, default 1e-8
        Stop when the wanted Ritz vectors move by at most max(``tol``, ``TOL_FLOOR``): the
        sine of the largest angle between the last two blocks.
    maxiter : int or None, default None
        The iteration limit, an int >= 0 (None or 0: ``MAXITER``).
    random_state : int, numpy Generator, RandomState or None, default 0
        Seeds the start block and the left null vector's start.
    block : int or None, default None
        The block's columns p, raised to at least k and capped at n - 2 (None:
        k + max(2, k)).

    Returns
    -------
    Eigen
        ``values`` (k,) ascending (||A v||² of each vector), ``vectors`` (n, k) orthonormal,
        float64, solver ``"factored"``; ``info`` with the iterations, the final change of the
        block, the shift τ, the block width and the factor's nonzeros; the ``convergence``
        record (``converged=False`` when ``maxiter`` was reached).

    Raises
    ------
    InputError
        ``A`` is not square or ``k`` is out of range; ``maxiter`` is not None or an int
        >= 0; a ``random_state`` that is not None, an int, a Generator or a RandomState.

    Warns
    -----
    ConvergenceWarning
        The block still moved by more than the tolerance after ``maxiter`` iterations.
    """
    from scipy.sparse.linalg import splu

    n = A.shape[0]
    if A.shape != (n, n) or not 1 <= k < n - 1:
        raise InputError(
            f"bottom_eigsh_gram needs a square A and 1 <= k < n - 1; found "
            f"shape {A.shape}, k = {k}.",
            "pass the n x n A and a smaller k.",
        )
    if maxiter is not None and (
        not isinstance(maxiter, numbers.Integral) or isinstance(maxiter, bool) or maxiter < 0
    ):
        raise InputError(
            f"bottom_eigsh_gram needs maxiter as None or an int >= 0 (0: the default "
            f"{MAXITER}); found maxiter={maxiter!r}.",
            f"pass maxiter=None (the default, {MAXITER} iterations) or a positive int.",
        )
    A = sp.csr_matrix(A, dtype=np.float64)
    tau = GRAM_SHIFT * float(max(np.abs(A.diagonal()).max(), 1e-300))
    lu = splu((A + tau * sp.identity(n, format="csr")).tocsc(), permc_spec="COLAMD")
    rng = check_random_state(random_state)
    q = u = None
    if null is not None:
        q = (np.asarray(null, np.float64) / np.linalg.norm(null)).reshape(n, 1)
        u = rng.standard_normal((n, 1))
        for _ in range(3):  # each step shrinks the rest by τ / (A's 2nd smallest sing. value)
            u = lu.solve(u, trans="T")
            u /= np.linalg.norm(u)

    def away(x, v):
        return x if v is None else x - v @ (v.T @ x)

    def steer(x):  # T x = B⁻¹ P B⁻ᵀ x, column by column scaled to unit norm
        y = away(lu.solve(np.asfortranarray(x), trans="T"), u)
        z = away(lu.solve(np.asfortranarray(y)), q)
        return z / np.maximum(np.linalg.norm(z, axis=0), 1e-300)

    p = min(n - 2, k + max(2, k) if block is None else max(block, k))
    V = np.linalg.qr(away(rng.standard_normal((n, p)), q))[0]
    tol_eff, iters, change = max(float(tol), TOL_FLOOR), maxiter or MAXITER, np.inf
    converged = False
    for it in range(1, iters + 1):
        S = np.linalg.qr(away(np.hstack([V, steer(V)]), q))[0]
        AS = A @ S
        w, c = scipy.linalg.eigh(AS.T @ AS)
        new = S @ c[:, :p]
        change = float(np.linalg.norm(new[:, :k] - V @ (V.T @ new[:, :k]), ord=2))
        V = new
        if change <= tol_eff:
            converged = True
            break
    if not converged:
        warnings.warn(
            f"The factored solver's block still moved by {change:.1e} after {iters} "
            f"iterations (tol {tol_eff:.0e}).",
            ConvergenceWarning,
            stacklevel=3,
        )
    AV = A @ V[:, :k]
    values = np.einsum("ij,ij->j", AV, AV)
    info = {
        "iterations": it,
        "change": change,
        "shift": tau,
        "block": p,
        "factor_nnz": int(lu.L.nnz + lu.U.nnz),
    }
    rec = record(
        f"bottom {k} eigenpairs",
        "factored (block inverse iteration, sparse LU)",
        converged=converged,
        iterations=it,
        residual=change,
        tol=tol_eff,
        status="converged" if converged else f"stopped at maxiter={iters}",
        maxiter=iters,
        measure="sine of the largest angle between the last two blocks",
    )
    return Eigen(values, V[:, :k], "factored", 0, info=info, convergence=rec)
