"""Edge weights on a symmetrised kNN graph and graph Laplacians.

``graph_weights``: heat kernel w_ij = exp(-d_ij^2 / t) (Belkin & Niyogi 2003; ``t`` defaults
to the mean squared edge length, so weights are scale-free) or binary w_ij = 1.
``laplacian``: L = D - W (``normed=False``, the ratio-cut / Laplacian-eigenmap operator with
the generalised problem L y = lambda D y), or the symmetric normalised
L_sym = I - D^-1/2 W D^-1/2 whose eigenvectors z give y = D^-1/2 z (``normed=True``).
"""

from __future__ import annotations

import numbers

import numpy as np
import scipy.sparse as sp

from ..errors import InputError

__all__ = ["graph_weights", "laplacian", "WEIGHTS"]

WEIGHTS = ("heat", "binary")


def graph_weights(S, weights: str = "heat", t: float | None = None):
    """Edge weights from a symmetric distance adjacency: heat kernel or binary.

    Heat: w_ij = exp(-d_ij^2 / t) (Belkin & Niyogi 2003); binary: w_ij = 1 on every stored
    edge.

    Parameters
    ----------
    S : sparse matrix or array of shape (n, n)
        The symmetric adjacency, distances as values (stored entries are the edges).
    weights : {"heat", "binary"}, default "heat"
        The kernel.
    t : real number or None, default None
        The heat kernel's width, > 0 (a Python or NumPy int or float, not a bool); None: the
        mean squared edge length (1 without edges), so that the weights do not depend on the
        data's scale. Unused for binary weights.

    Returns
    -------
    W : scipy.sparse.csr_matrix of float64, shape (n, n)
        The weights, on the edges of ``S``.
    t : float or None
        The width used; None for binary weights.

    Raises
    ------
    InputError
        An unknown ``weights``, or a ``t`` that is not a finite positive real number (a bool
        is not taken for one).
    """
    if weights not in WEIGHTS:
        raise InputError(
            f"weights must be one of {', '.join(WEIGHTS)}; found {weights!r}.",
            "pass weights='heat' (exp(-d^2/t)) or 'binary'.",
        )
    W = sp.csr_matrix(S, dtype=np.float64, copy=True)
    if weights == "binary":
        W.data[:] = 1.0
        return W, None
    d2 = W.data**2
    if t is None:
        t = float(d2.mean()) if d2.size and d2.mean() > 0 else 1.0
    elif not (_is_real(t) and np.isfinite(t) and t > 0):
        raise InputError(
            f"The heat kernel needs a finite real number t > 0; found t={t!r}.",
            "leave t out (the mean squared edge length) or pass t > 0.",
        )
    W.data = np.exp(-d2 / float(t))
    return W, float(t)


def _is_real(t) -> bool:
    """A real number (Python's or NumPy's ints and floats), not a bool."""
    return isinstance(t, numbers.Real) and not isinstance(t, (bool, np.bool_))


def laplacian(W, normed: bool = False):
    """The graph Laplacian L = D - W, or I - D^-1/2 W D^-1/2 when ``normed``.

    Parameters
    ----------
    W : sparse matrix or array of shape (n, n)
        The symmetric nonnegative weights.
    normed : bool, default False
        Return the symmetric normalised Laplacian; an isolated vertex (degree 0) gets a zero
        row and column there.

    Returns
    -------
    L : scipy.sparse.csr_matrix of float64, shape (n, n)
        The Laplacian.
    degrees : numpy.ndarray of float64, shape (n,)
        The row sums of ``W``.
    """
    W = sp.csr_matrix(W, dtype=np.float64)
    deg = np.asarray(W.sum(axis=1)).ravel()
    if not normed:
        return (sp.diags(deg) - W).tocsr(), deg
    inv = np.where(deg > 0, 1.0 / np.sqrt(np.where(deg > 0, deg, 1.0)), 0.0)
    Dm = sp.diags(inv)
    L = (sp.diags((deg > 0).astype(np.float64)) - Dm @ W @ Dm).tocsr()
    return L, deg
