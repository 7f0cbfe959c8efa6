"""Aggregation algebraic multigrid for M = Aᵀ A (A sparse square, e.g. LLE's I - W), as a
preconditioner of LOBPCG. NumPy / SciPy only, in memory.

Hierarchy (`amg_hierarchy`): level 0 is M itself, never formed: products are Aᵀ (A x) (A has
the kNN graph's k + 1 entries a row, M ~ k² of them, so two products with A cost less than one
with M, and forming M costs more than either) and its diagonal is the column sums of A².
Aggregates: a maximal independent set (Luby's, vectorised, the random order from
``random_state``) of the symmetrised strength graph of the level, every other vertex joined to
its strongest neighbour in the set; the prolongator P is piecewise constant over the
aggregates (unsmoothed) and the coarse operator is Galerkin's, Pᵀ M P = (A P)ᵀ (A P) at the
first level (no product with M), Pᵀ M_l P below. Levels stop at ``coarse_size`` rows, whose
operator is inverted densely (a symmetric pseudo-inverse: M's constant null vector survives
every level; Jacobi there instead if aggregation stalled above ``DENSE_COARSE_MAX`` rows). On
the kNN graph of high-dimensional data (the 50-D mixture) the coarse operators are denser than
A, so a V-cycle costs several products with M (see bench/HISTORY.md, "LLE at n = 1 000 000 on
the 50-D mixture with LOBPCG on I - W").

Application (`AMG.solve`): one V-cycle for M y = r from y = 0, ``sweeps`` damped Jacobi
sweeps before and after the coarse correction at each level (ω = 4 / (3 ρ(D⁻¹ M)), ρ from
a few power steps): symmetric, positive semidefinite, hence a valid LOBPCG preconditioner.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import scipy.linalg
import scipy.sparse as sp

from .._validation import check_random_state

__all__ = ["AMG", "amg_hierarchy", "aggregate"]

COARSE_SIZE = 2000
# the coarsest level is inverted densely up to this size; a larger one (aggregation that
# stopped coarsening) falls back to Jacobi there
DENSE_COARSE_MAX = 5000
MAX_LEVELS = 8
# relative eigenvalue cut of the coarsest level's pseudo-inverse: M's null space (the
# constant) has eigenvalue ~1e-16 ||M||, the next ones >= 1e-6 ||M|| on every graph tried
PINV_RCOND = 1e-10


def _rowmax(values: np.ndarray, indptr: np.ndarray, empty: float) -> np.ndarray:
    """The largest entry of each CSR row's ``values`` (``empty`` for empty rows)."""
    n = len(indptr) - 1
    out = np.full(n, empty)
    nonempty = np.diff(indptr) > 0
    if values.size:
        red = np.maximum.reduceat(values, indptr[:-1][nonempty])
        out[nonempty] = red
    return out


def aggregate(S, random_state=0) -> np.ndarray:
    """Aggregate index of every vertex of the symmetric strength graph ``S`` (CSR, positive
    weights, no diagonal needed): Luby's maximal independent set, then every vertex joins
    its strongest neighbour in the set; isolated vertices are aggregates of their own."""
    S = sp.csr_matrix(S, copy=True)
    S.setdiag(0)
    S.eliminate_zeros()
    n = S.shape[0]
    key = check_random_state(random_state).random(n)
    state = np.zeros(n, np.int8)  # 0 undecided, 1 root, -1 next to a root
    indptr, indices = S.indptr, S.indices
    while True:
        undecided = state == 0
        if not undecided.any():
            break
        k = np.where(undecided, key, -1.0)
        new = undecided & (k > _rowmax(k[indices], indptr, -1.0))
        state[new] = 1
        near = (S @ new.astype(np.float64)) > 0
        state[near & (state == 0)] = -1
    roots = np.flatnonzero(state == 1)
    agg = np.full(n, -1, np.int64)
    agg[roots] = np.arange(roots.size)
    rest = np.flatnonzero(state != 1)
    if rest.size:
        to_root = S[rest][:, roots]
        best = np.asarray(to_root.argmax(axis=1)).ravel()
        agg[rest] = best
    return agg


def _prolongator(agg: np.ndarray):
    n, nc = agg.size, int(agg.max()) + 1
    return sp.csr_matrix((np.ones(n), (np.arange(n), agg)), shape=(n, nc))


def _strength(M, theta: float):
    """|m_ij| >= theta sqrt(m_ii m_jj), off the diagonal, symmetric."""
    M = sp.csr_matrix(M)
    d = np.sqrt(np.maximum(np.abs(M.diagonal()), 1e-300))
    C = sp.diags(1 / d) @ abs(M) @ sp.diags(1 / d)
    C = sp.csr_matrix(C)
    C.data[C.data < theta] = 0
    C.setdiag(0)
    C.eliminate_zeros()
    return C


def _spectral_radius(matvec, n: int, rng, steps: int = 15) -> float:
    x = rng.standard_normal(n)
    rho = 1.0
    for _ in range(steps):
        y = matvec(x)
        rho = float(np.linalg.norm(y) / np.linalg.norm(x))
        x = y / np.linalg.norm(y)
    return rho * 1.05  # power steps underestimate; a 5% margin keeps Jacobi contracting


@dataclass
class _Level:
    matmat: object  # X -> M_l X
    inv_diag: np.ndarray
    omega: float
    P: object = None  # to the next level


@dataclass
class AMG:
    """A V-cycle approximating M⁺ (see the module docstring); ``info`` holds the levels'
    sizes and nonzeros."""

    levels: list
    coarse_solve: object  # R -> the coarsest level's (pseudo-)inverse times R
    sweeps: int = 1
    info: dict = field(default_factory=dict)

    def solve(self, R):
        R = np.asarray(R, dtype=np.float64)
        vec = R.ndim == 1
        out = self._cycle(0, R.reshape(R.shape[0], -1))
        return out.ravel() if vec else out

    def _cycle(self, i, R):
        if i == len(self.levels):
            return self.coarse_solve(R)
        lev = self.levels[i]
        D = lev.omega * lev.inv_diag[:, None]
        Y = D * R
        for _ in range(self.sweeps - 1):
            Y += D * (R - lev.matmat(Y))
        Rc = lev.P.T @ (R - lev.matmat(Y))
        Y += lev.P @ self._cycle(i + 1, Rc)
        for _ in range(self.sweeps):
            Y += D * (R - lev.matmat(Y))
        return Y

    def aslinearoperator(self):
        from scipy.sparse.linalg import LinearOperator

        n = self.levels[0].inv_diag.size
        return LinearOperator((n, n), matvec=self.solve, matmat=self.solve, dtype=np.float64)


def amg_hierarchy(
    A,
    *,
    theta: float = 0.0,
    sweeps: int = 1,
    coarse_size: int = COARSE_SIZE,
    max_levels: int = MAX_LEVELS,
    random_state=0,
) -> AMG:
    """Build the aggregation multigrid hierarchy of M = Aᵀ A, a preconditioner for LOBPCG.

    NumPy / SciPy, in memory. Level 0 is M itself, applied as Aᵀ (A X) and never formed; its
    diagonal is the column sums of A². Each level is split into aggregates: a maximal
    independent set of its strength graph (Luby 1986, in a random order), every other vertex
    joined to its strongest neighbour in the set. The prolongator P is piecewise constant
    over the aggregates (unsmoothed aggregation) and the next operator is Galerkin's Pᵀ M P
    ((A P)ᵀ (A P) at the first level). Coarsening stops at ``coarse_size`` rows, at
    ``max_levels`` levels, or when a level would shrink by less than 10 %. The coarsest
    operator is inverted densely (a symmetric pseudo-inverse, since M's null vector survives
    every level) up to ``DENSE_COARSE_MAX`` rows, else replaced by its inverse diagonal.

    Parameters
    ----------
    A : sparse matrix of shape (n, n)
        The factor of M (e.g. LLE's I - W), converted to float64 CSR.
    theta : float, default 0.0
        Strength threshold of the levels below the first: an off-diagonal m_ij is kept when
        |m_ij| >= theta sqrt(m_ii m_jj) (0 keeps every nonzero). The first level aggregates
        on the pattern of |A| + |A|ᵀ, whatever ``theta``.
    sweeps : int, default 1
        Damped Jacobi sweeps (ω = 4 / (3 ρ(D⁻¹ M)), ρ from a few power steps) before and after
        the coarse correction at each level of the V-cycle.
    coarse_size : int, default COARSE_SIZE
        Coarsen until a level has at most this many rows.
    max_levels : int, default MAX_LEVELS
        At most this many smoothed levels, level 0 included (the first is always built); the
        coarsest, inverted operator comes in addition.
    random_state : int, numpy Generator, RandomState or None, default 0
        Seeds the aggregation orders and the power steps that estimate ρ.

    Returns
    -------
    AMG
        The hierarchy: ``AMG.solve(R)`` applies one V-cycle from zero to M y = R (a symmetric
        positive semidefinite approximation of M⁺), ``AMG.aslinearoperator()`` wraps it as a
        SciPy ``LinearOperator``; ``info`` holds the levels' sizes (``"sizes"``) and nonzeros
        (``"nnz"``), finest first.

    Raises
    ------
    InputError
        ``random_state`` is not None, an int, a Generator or a RandomState.
    """
    rng = check_random_state(random_state)
    A = sp.csr_matrix(A, dtype=np.float64)
    At = A.T.tocsr()
    n = A.shape[0]
    diag = np.asarray(A.multiply(A).sum(axis=0)).ravel()
    inv = np.where(diag > 0, 1.0 / np.where(diag > 0, diag, 1.0), 0.0)
    fine = lambda X: At @ (A @ X)  # noqa: E731
    S = abs(A) + abs(A).T
    levels, sizes, nnzs = [], [n], [int(A.nnz)]
    agg = aggregate(S, rng.integers(2**31))
    P = _prolongator(agg)
    B = (A @ P).tocsc()
    Mc = (B.T @ B).tocsr()
    omega = 4 / 3 / _spectral_radius(lambda x: inv * fine(x), n, rng)
    levels.append(_Level(fine, inv, omega, P))
    while Mc.shape[0] > coarse_size and len(levels) < max_levels:
        sizes.append(Mc.shape[0])
        nnzs.append(int(Mc.nnz))
        d = Mc.diagonal()
        inv = np.where(d > 0, 1.0 / np.where(d > 0, d, 1.0), 0.0)
        agg = aggregate(_strength(Mc, theta), rng.integers(2**31))
        if agg.max() + 1 >= 0.9 * Mc.shape[0]:  # no coarsening left
            break
        P = _prolongator(agg)
        op = Mc
        omega = 4 / 3 / _spectral_radius(lambda x, op=op, inv=inv: inv * (op @ x), Mc.shape[0], rng)
        levels.append(_Level(lambda X, op=op: op @ X, inv, omega, P))
        Mc = (P.T @ Mc @ P).tocsr()
    sizes.append(Mc.shape[0])
    nnzs.append(int(Mc.nnz))
    if Mc.shape[0] <= DENSE_COARSE_MAX:
        dense = Mc.toarray()
        pinv = scipy.linalg.pinvh((dense + dense.T) / 2, rtol=PINV_RCOND)
        coarse = pinv.__matmul__
    else:
        d = Mc.diagonal()
        dinv = np.where(d > 0, 1.0 / np.where(d > 0, d, 1.0), 0.0)[:, None]
        coarse = dinv.__mul__
    return AMG(levels, coarse, sweeps, {"sizes": sizes, "nnz": nnzs})
