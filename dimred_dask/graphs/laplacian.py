"""Edge weights on a symmetrised kNN graph and graph Laplacians.

``graph_weights``: heat kernel w_ij = exp(-d_ij^2 / t) (Belkin & Niyogi 2003; ``t`` defaults
to the mean squared edge length, so weights are scale-free) or binary w_ij = 1.
``laplacian``: L = D - W (``normed=False``, the ratio-cut / Laplacian-eigenmap operator with
the generalised problem L y = lambda D y), or the symmetric normalised
L_sym = I - D^-1/2 W D^-1/2 whose eigenvectors z give y = D^-1/2 z (``normed=True``).
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from ..errors import InputError

__all__ = ["graph_weights", "laplacian", "WEIGHTS"]

WEIGHTS = ("heat", "binary")


def graph_weights(S, weights: str = "heat", t: float | None = None):
    """W from the symmetric distance adjacency ``S`` (CSR, distances as values); returns
    (W, t) with t None for binary weights."""
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
    elif not (isinstance(t, (int, float)) and np.isfinite(t) and t > 0):
        raise InputError(
            f"The heat kernel needs t > 0 (finite); found t={t!r}.",
            "leave t out (the mean squared edge length) or pass t > 0.",
        )
    W.data = np.exp(-d2 / float(t))
    return W, float(t)


def laplacian(W, normed: bool = False):
    """(L, degrees): L = D - W, or I - D^-1/2 W D^-1/2 when ``normed``. Isolated vertices
    (degree 0) get a zero row in L_sym."""
    W = sp.csr_matrix(W, dtype=np.float64)
    deg = np.asarray(W.sum(axis=1)).ravel()
    if not normed:
        return (sp.diags(deg) - W).tocsr(), deg
    inv = np.where(deg > 0, 1.0 / np.sqrt(np.where(deg > 0, deg, 1.0)), 0.0)
    Dm = sp.diags(inv)
    L = (sp.diags((deg > 0).astype(np.float64)) - Dm @ W @ Dm).tocsr()
    return L, deg
