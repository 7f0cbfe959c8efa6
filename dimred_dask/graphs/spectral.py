"""The spectral embedding of a weighted graph: the bottom eigenvectors of its Laplacian.

``spectral_embedding(W, n_components)`` is shared by Laplacian eigenmaps and spectral
clustering (Belkin & Niyogi 2003; Shi & Malik 2000; von Luxburg 2007):

- ``normed=True``: the generalised problem L y = lambda D y (normalised cut, Laplacian
  eigenmaps), solved as L_sym z = lambda z with L_sym = I - D^-1/2 W D^-1/2 and
  y = D^-1/2 z, so the columns are D-orthonormal (y^T D y = 1), as scikit-learn's
  ``spectral_embedding`` returns them.
- ``normed=False``: L f = lambda f with L = D - W (ratio cut, its relaxation in von Luxburg 2007),
  orthonormal columns.

``drop_first``: the first eigenvector of a connected graph is constant (eigenvalue 0) and
carries nothing; it is computed and dropped. The eigensolver is `linalg.bottom_eigsh`
(dense, shift-invert ARPACK or LOBPCG), through ``bottom_eigsh_checked``: a solve that stops
short is retried with shift-invert ARPACK or dense (``linalg.sparse_eigen.fallback_solvers``),
or refused with `SolverError`; ``convergence`` lists every attempt's record. Each column's
largest entry is made positive.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import scipy.sparse as sp

from ..errors import InputError
from ..linalg.sparse_eigen import bottom_eigsh_checked
from .laplacian import laplacian

__all__ = ["SpectralResult", "spectral_embedding"]


@dataclass
class SpectralResult:
    embedding: np.ndarray  # (n, n_components) float64
    eigenvalues: np.ndarray  # (n_components,) ascending (the dropped one excluded)
    degrees: np.ndarray  # (n,) row sums of W
    first_eigenvalue: float | None  # the dropped eigenvalue (0 for a connected graph)
    solver: str
    convergence: list = field(default_factory=list)  # the eigensolver's records


def _signs(v: np.ndarray) -> np.ndarray:
    s = np.sign(v[np.argmax(np.abs(v), axis=0), np.arange(v.shape[1])])
    s[s == 0] = 1.0
    return v * s


def spectral_embedding(
    W,
    n_components: int,
    *,
    normed: bool = True,
    drop_first: bool = True,
    solver: str = "auto",
    tol: float = 1e-8,
    maxiter: int | None = None,
    random_state=0,
    X0=None,
    method: str = "Spectral embedding",
    fix: str | None = None,
) -> SpectralResult:
    """The bottom eigenvectors of a weighted graph's Laplacian; see the module docstring.

    Laplacian eigenmaps (Belkin & Niyogi 2003) and spectral clustering (Shi & Malik 2000;
    von Luxburg 2007). A solve that stops short is retried with a robust solver.

    Parameters
    ----------
    W : sparse matrix or array of shape (n, n)
        The symmetric nonnegative weights.
    n_components : int
        The eigenvectors returned, besides the dropped first one.
    normed : bool, default True
        Solve L y = lambda D y (columns D-orthonormal); False: L f = lambda f with
        L = D - W (orthonormal columns).
    drop_first : bool, default True
        Compute one more eigenvector and drop the first (constant for a connected graph).
    solver : {"auto", "dense", "arpack", "lobpcg", "amg", "lobpcg-workers"}, default "auto"
        The first eigensolver tried (``linalg.sparse_eigen``).
    tol : float, default 1e-8
        The iterative solvers' tolerance.
    maxiter : int or None, default None
        The first solver's iteration limit; None: its default.
    random_state : int, numpy Generator or None, default 0
        Seeds the iterative solvers.
    X0 : numpy.ndarray or None, default None
        The first solver's starting vectors (n rows) when it is ``lobpcg``; random vectors
        complete the block.
    method : str, default "Spectral embedding"
        The method named in the `SolverError`.
    fix : str or None, default None
        The fix given in the `SolverError`; None: a generic one.

    Returns
    -------
    SpectralResult
        The embedding (n, n_components) float64, each column's largest entry positive; its
        eigenvalues ascending; the degrees; the dropped eigenvalue; the solver that
        converged and every solve's record.

    Raises
    ------
    InputError
        ``n_components`` + ``drop_first`` is not in [1, n - 1]; ``normed`` with a vertex of
        degree 0; an unknown ``solver``.
    SolverError
        No eigensolver reached ``tol``.

    Warns
    -----
    ConvergenceWarning
        The first solver stopped short and another one converged.
    """
    W = sp.csr_matrix(W, dtype=np.float64)
    n = W.shape[0]
    want = int(n_components) + int(bool(drop_first))
    if not 1 <= want < n:
        raise InputError(
            f"A spectral embedding of {n} points can have at most "
            f"{n - 1 - int(drop_first)} "
            f"components; asked for {n_components}.",
            f"pass n_components below {n - int(drop_first)}.",
        )
    L, deg = laplacian(W, normed=normed)
    if normed and (deg <= 0).any():
        i = int(np.nonzero(deg <= 0)[0][0])
        raise InputError(
            f"The normalised Laplacian needs every point to have an edge; point "
            f"{i} (and {int((deg <= 0).sum()) - 1} others) has weight 0 to all.",
            "raise n_neighbors, or use weights='binary'.",
        )
    what = "L y = lambda D y" if normed else "L = D - W"
    eig, records = bottom_eigsh_checked(
        L,
        want,
        solver=solver,
        tol=tol,
        maxiter=maxiter,
        random_state=random_state,
        X0=X0,
        method=method,
        fix=fix,
        step=f"bottom {want} eigenpairs of {what}",
    )
    vec = np.asarray(eig.vectors, np.float64)
    if normed:
        vec = vec / np.sqrt(deg)[:, None]
    vals = np.asarray(eig.values, np.float64)
    first = float(vals[0]) if drop_first else None
    if drop_first:
        vec, vals = vec[:, 1:], vals[1:]
    return SpectralResult(_signs(vec), vals, deg, first, eig.solver, records)
