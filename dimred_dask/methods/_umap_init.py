"""UMAP's initial layouts: spectral (the bottom eigenvectors of the fuzzy graph's normalised
Laplacian, through the shared sparse eigensolver), PCA, random; and the scaling umap-learn
applies before the optimisation (largest coordinate 10, a little noise, then each column mapped
onto [0, 10]).

A graph with several connected components is laid out component by component: each
component's own spectral layout (or its PCA rows when it is too small), scaled to a share of
the distance between the components' centres, which are placed where the components' rows are
on average in the PCA layout. When the eigensolver does not converge the PCA layout is used,
with a `ConvergenceWarning` saying so; each solve's convergence record (``linalg.convergence``)
is returned, a replaced one with ``handled_by="fell back to PCA initialisation"``.
"""

from __future__ import annotations

import warnings

import numpy as np
import scipy.sparse as sp

from .._validation import check_random_state
from ..errors import ConvergenceWarning
from ..graphs import connected_components, laplacian
from ..linalg import bottom_eigsh

__all__ = ["spectral_layout", "scale_layout", "SPECTRAL_TOL"]

SPECTRAL_TOL = 1e-4  # eigensolver tolerance (umap-learn's): an initialisation, not a result
SPECTRAL_MAXITER = 300  # LOBPCG iterations before falling back to PCA
DENSE_MAX = 300  # dense LAPACK up to this many vertices, LOBPCG above


FALLBACK = "fell back to PCA initialisation"


def _component_layout(W, d: int, random_state):
    """(spectral layout of one connected graph: eigenvectors 1..d of I - D^-1/2 W D^-1/2, or
    None when the solver did not converge; the solve's record)."""
    from threadpoolctl import threadpool_limits

    n = W.shape[0]
    L, _ = laplacian(W, normed=True)
    solver = "dense" if n <= DENSE_MAX else "lobpcg"
    with warnings.catch_warnings(record=True) as caught, threadpool_limits(1):
        warnings.simplefilter("always")
        eig = bottom_eigsh(
            L,
            d + 1,
            solver=solver,
            tol=SPECTRAL_TOL,
            maxiter=SPECTRAL_MAXITER,
            random_state=random_state,
        )
    rec = {
        **eig.convergence,
        "step": "UMAP spectral initialisation (bottom eigenpairs of "
        "the fuzzy graph's normalised Laplacian)",
    }
    if not rec["converged"] or any(issubclass(c.category, ConvergenceWarning) for c in caught):
        return None, {**rec, "converged": False, "handled_by": FALLBACK}
    vecs = eig.vectors[:, 1 : d + 1]
    return vecs * np.sign(vecs[np.argmax(np.abs(vecs), axis=0), np.arange(vecs.shape[1])]), rec


def spectral_layout(P, d: int, fallback: np.ndarray, random_state=0):
    """(layout (n, d), how it was made, the eigensolves' convergence records) from the fuzzy
    graph ``P`` (a SparseAffinity); ``fallback``: the PCA layout used when the eigensolver
    fails or a component is tiny."""
    W = P.to_scipy()
    n = W.shape[0]
    count, labels = connected_components(W)
    if count == 1:
        layout, rec = _component_layout(W, d, random_state) if n > d + 1 else (None, None)
        if layout is None:
            if rec is not None:
                warnings.warn(
                    "UMAP's spectral initialisation did not converge (the graph's "
                    "eigengap is too small); using the PCA initialisation instead.",
                    ConvergenceWarning,
                    stacklevel=2,
                )
            return (
                np.asarray(fallback, dtype=np.float64),
                "pca (spectral did not converge)",
                [rec] if rec is not None else [],
            )
        return layout, "spectral", [rec]
    layout, records = _multi_component(W, labels, count, d, fallback, random_state)
    return layout, f"spectral per component ({count} components)", records


def _multi_component(W, labels, count: int, d: int, fallback, random_state):
    fallback = np.asarray(fallback, dtype=np.float64)
    centres = np.stack([fallback[labels == c].mean(axis=0) for c in range(count)])
    if count > 1:
        gaps = np.sqrt(((centres[:, None] - centres[None]) ** 2).sum(-1))
        np.fill_diagonal(gaps, np.inf)
        radius = 0.25 * gaps.min(axis=1)
    else:
        radius = np.ones(1)
    out = np.empty((W.shape[0], d))
    members = [np.nonzero(labels == c)[0] for c in range(count)]
    solved = [
        _component_layout(sp.csr_matrix(W[rows][:, rows]), d, random_state)
        if rows.size > 2 * d + 1
        else (None, None)
        for rows in members
    ]
    subs = [s[0] for s in solved]
    records = [{**s[1], "component": c} for c, s in enumerate(solved) if s[1] is not None]
    failed = 0
    for c, (rows, sub) in enumerate(zip(members, subs)):
        if sub is None:
            failed += rows.size > 2 * d + 1
            sub = fallback[rows] - fallback[rows].mean(axis=0)
        scale = np.abs(sub).max()
        out[rows] = centres[c] + (sub / scale * radius[c] if scale > 0 else 0.0)
    if failed:
        warnings.warn(
            f"UMAP's spectral initialisation did not converge on {failed} of "
            f"{count} components; their PCA rows are used.",
            ConvergenceWarning,
            stacklevel=3,
        )
    return out, records


def scale_layout(layout: np.ndarray, random_state, noise: float = 1e-4) -> np.ndarray:
    """umap-learn's preparation: largest |coordinate| 10, Gaussian noise of std ``noise``,
    then each column mapped onto [0, 10] (float32)."""
    rng = check_random_state(random_state)
    layout = np.asarray(layout, dtype=np.float64)
    top = np.abs(layout).max()
    Y = (layout * (10.0 / top if top > 0 else 1.0)).astype(np.float32)
    Y = Y + rng.normal(scale=noise, size=Y.shape).astype(np.float32)
    lo, hi = Y.min(axis=0), Y.max(axis=0)
    span = np.where(hi > lo, hi - lo, 1.0)
    return np.ascontiguousarray(10.0 * (Y - lo) / span, dtype=np.float32)
