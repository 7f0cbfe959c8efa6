"""Which methods take sparse input (single-cell counts: CSR, or dask arrays of CSR row blocks),
in one place that the flow and the API can ask before anything runs.

``SPARSE_METHODS[name]`` (from the estimators' ``accepts_sparse``) is True when the method of
that flow name fits sparse input as it is, never densifying the n x d matrix:

- ``pca``: solvers ``covariance`` and ``randomized`` (``auto`` picks them), centred implicitly;
  ``tsqr`` and ``dual`` would densify and refuse.
- ``spca``: supervised PCA's one pass (X^T (Delta - 1 mean^T)), Bair's screening, and
  ``label_kernel='identity'`` (PCA).

Every other method refuses sparse input with an `InputTypeError` whose fix is the chain
``--method pca+<name>`` (PCA's dense embedding goes to the method): their fits or their models
need the dense rows (training rows kept to place new points, landmark samples, the rows of a
neighbour graph's optimisation). A chain ``pca+<name>`` takes sparse input, through its PCA
step. The building blocks take sparse rows where they are made of inner products: the kNN graph
(``graphs.knn_graph``, euclidean and cosine), the distance and kernel blocks
(``pairwise.pairwise_distances`` / ``pairwise_kernels``), the quality metrics.
"""

from __future__ import annotations

from .._validation import is_sparse_input, sparse_refusal
from .specs import SPECS

__all__ = ["SPARSE_METHODS", "accepts_sparse", "check_sparse_input"]

# each estimator says whether it takes sparse X (``accepts_sparse``)
SPARSE_METHODS: dict[str, bool] = {
    name: bool(getattr(spec.estimator, "accepts_sparse", False)) for name, spec in SPECS.items()
}


def accepts_sparse(method: str) -> bool:
    """Whether the flow's ``method`` takes sparse input: `SPARSE_METHODS`, and for a chain
    (``pca+<name>``) its first step.

    Parameters
    ----------
    method : str
        A flow method name (``"pca"``, ``"umap"``, ...) or a chain ``"pca+<name>"``.

    Returns
    -------
    bool
        True when the method (a chain's first step) fits sparse input without densifying it;
        False for the others and for names not in `SPARSE_METHODS`.
    """
    first = str(method).split("+")[0].strip()
    return bool(SPARSE_METHODS.get(first, False))


def check_sparse_input(method: str, X, params: dict | None = None, where: str = "X") -> None:
    """Refuse, before anything runs, sparse ``X`` for a method (or parameters) that would
    densify it: an `InputTypeError` with the fix. Nothing happens for dense ``X``.

    Parameters
    ----------
    method : str
        A flow method name or a chain ``"pca+<name>"`` (its first step is checked).
    X : array-like, dask array or sparse matrix
        The input; only sparse input (`is_sparse_input`) is checked.
    params : dict or None, default None
        The method's parameters (for a chain, the first step's); PCA's solver is checked here
        as its fit would check it (``tsqr`` / ``dual`` refused, ``covariance`` refused when
        its d x d accumulators would not fit in memory).
    where : str, default "X"
        The name of the input in error messages.

    Raises
    ------
    InputTypeError
        Sparse ``X`` for a method that does not take it (the fix: the chain through PCA), or
        for PCA with ``solver="tsqr"`` or ``"dual"``.
    InputError
        Sparse ``X`` for PCA with an unknown solver, or ``solver="covariance"`` whose d x d
        accumulators would not fit in memory.
    """
    if not is_sparse_input(X):
        return
    first = str(method).split("+")[0].strip()
    if not accepts_sparse(first):
        raise sparse_refusal(first.upper() if first in SPARSE_METHODS else first, where, X)
    if first == "pca":
        from ._pca_plan import choose_solver, choose_sparse_solver

        params = dict(params or {})
        solver = params.get("solver", "auto")
        n, d = X.shape
        choose_solver(solver, n, d, params.get("n_components"))  # checks the name
        choose_sparse_solver(solver, X, params.get("n_components"), where)
