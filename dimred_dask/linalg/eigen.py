"""Top (or bottom) eigenpairs of a symmetric n x n matrix: NumPy array or (lazy) dask array.

Solvers (``solver=``):

- ``dense``: the whole matrix in memory, LAPACK ``eigh`` (``subset_by_index``). Exact; for
  n up to a few thousand. The whole spectrum's negative part is reported as well.
- ``randomized``: randomized subspace iteration (Halko, Martinsson & Tropp 2011, Alg. 4.4 and
  5.3): Q = orth(Omega) from a random Gaussian Omega, ``n_iter`` times Q = orth(A Q), then
  Rayleigh-Ritz on Q^T (A Q) with one more product A Q. Each product A Q is one pass over the
  matrix (for a lazy kernel matrix: its blocks are recomputed, never all held at once).
  ``n_iter + 1`` products (passes) in all.
- ``lanczos``: implicitly restarted Lanczos (ARPACK through ``scipy.sparse.linalg.eigsh``) over a
  ``LinearOperator`` whose matvec is one dask pass. Exact to ``tol``; a pass per matvec, so
  it suits a matrix that is persisted in cluster memory or stored in Zarr.
- ``auto``: dense up to ``DENSE_MAX`` rows, else randomized.

Subspace iteration finds the eigenvalues of largest magnitude; for an indefinite matrix the
top ``k`` algebraic ones are picked among ``k + n_oversamples`` Ritz values, which is exact
when the negative part is smaller in magnitude (the case for kernel and MDS matrices of data).
``which="SA"`` returns the smallest (most negative) eigenpairs instead: Lanczos asks ARPACK for
them directly; subspace iteration runs on the positive semidefinite sigma I - A, with sigma
>= the largest eigenvalue (``shift``, e.g. from a "LA" call first). `top_and_bottom_eigh`
runs the two subspace iterations in the same passes over A, the bottom one shifted by the
top one's current largest Ritz value.

Every result carries its convergence record (``Eigen.convergence``, see
``linalg.convergence``): dense is exact; subspace iteration runs its passes by design and
records the residual of its Ritz pairs; Lanczos records ARPACK's verdict and its matrix-vector
products (eigenpairs that did not converge are returned with ``converged=False``: the caller
refuses or replaces them).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field

import numpy as np
import scipy.linalg

from .._compute import compute
from .._validation import check_random_state, is_dask
from ..errors import ConvergenceWarning, InputError
from .convergence import completed, record

__all__ = ["Eigen", "top_eigh", "top_and_bottom_eigh", "EIGEN_SOLVERS", "DENSE_MAX"]

EIGEN_SOLVERS = ("auto", "dense", "randomized", "lanczos")
DENSE_MAX = 4000


@dataclass
class Eigen:
    values: np.ndarray  # (k,) descending for "LA", ascending for "SA"
    vectors: np.ndarray  # (n, k) orthonormal columns, float64
    solver: str
    passes: int  # top_eigh's products with A, in memory too (dense: 1 for a dask A, 0 for
    #              an in-memory one); 0 from the sparse solvers, which do not count theirs
    spectrum: np.ndarray | None = None  # the whole spectrum (dense solver only), descending
    info: dict = field(default_factory=dict)
    product: np.ndarray | None = None  # A @ vectors (free from Rayleigh-Ritz), (n, k)
    convergence: dict | None = None  # the solve's record (``linalg.convergence``)

    def applied(self) -> np.ndarray:
        """A @ vectors: exact for the randomized solver's Ritz vectors, vectors * values else."""
        return self.product if self.product is not None else self.vectors * self.values


def choose_eigen_solver(solver: str, n: int) -> str:
    """Resolve the ``solver=`` of `top_eigh` for an n x n matrix.

    Parameters
    ----------
    solver : {"auto", "dense", "randomized", "lanczos"}
        The solver asked for (``EIGEN_SOLVERS``).
    n : int
        The order of the matrix.

    Returns
    -------
    str
        ``solver``, or for ``"auto"``: ``"dense"`` up to ``DENSE_MAX`` rows, ``"randomized"``
        above.

    Raises
    ------
    InputError
        ``solver`` is not one of ``EIGEN_SOLVERS``.
    """
    if solver not in EIGEN_SOLVERS:
        raise InputError(
            f"eigen solver must be one of {', '.join(EIGEN_SOLVERS)}; found {solver!r}.",
            f"pass solver='auto' (dense up to {DENSE_MAX} rows, randomized above).",
        )
    if solver == "auto":
        return "dense" if n <= DENSE_MAX else "randomized"
    return solver


def _matmul(A, Q, stage: str) -> np.ndarray:
    if hasattr(A, "product"):  # an operator that makes its own lazy products
        (out,) = compute(A.product(Q), stage=stage)
        return np.asarray(out, dtype=np.float64)
    if is_dask(A):
        (out,) = compute(A @ Q, stage=stage)
        return np.asarray(out, dtype=np.float64)
    return np.asarray(A @ Q.astype(A.dtype, copy=False), dtype=np.float64)


def top_eigh(
    A,
    k: int,
    *,
    solver: str = "auto",
    which: str = "LA",
    n_oversamples: int = 10,
    n_iter: int = 4,
    tol: float = 0.0,
    random_state=0,
    shift: float | None = None,
    stage: str = "eigensolver",
) -> Eigen:
    """The ``k`` largest (``which="LA"``) or smallest (``"SA"``) eigenpairs of symmetric ``A``.

    A NumPy ``A`` is used in memory. A dask ``A`` (e.g. a lazy kernel matrix) is computed on
    the active distributed client (else dask's threaded scheduler): each product A Q is one
    pass over its blocks, never all held at once; the dense solver computes it whole.

    Parameters
    ----------
    A : ndarray, dask array or operator of shape (n, n)
        The symmetric matrix. An operator (e.g. `pairwise.CentredOperator`) has ``shape``,
        ``ndim``, ``product(Q)`` giving A Q as a dask array, and ``lazy()`` giving A as one
        (for the dense solver).
    k : int
        The number of eigenpairs, in [1, n] (k < n - 1 for Lanczos).
    solver : {"auto", "dense", "randomized", "lanczos"}, default "auto"
        ``dense``: LAPACK ``eigh`` of the whole matrix (exact; the whole spectrum is kept).
        ``randomized``: randomized subspace iteration (Halko, Martinsson & Tropp 2011) from a
        random orthonormal block, ``n_iter`` power steps then Rayleigh-Ritz: ``n_iter`` + 1
        products with A. ``lanczos``: ARPACK's implicitly restarted Lanczos
        (``scipy.sparse.linalg.eigsh``) on a ``LinearOperator``, one pass per matvec.
        ``auto``: dense up to ``DENSE_MAX`` rows, randomized above.
    which : {"LA", "SA"}, default "LA"
        Largest or smallest algebraic eigenvalues. Subspace iteration finds the largest in
        magnitude: with ``"LA"`` the top k algebraic values are picked among k +
        ``n_oversamples`` Ritz values; with ``"SA"`` it runs on ``shift`` I - A.
    n_oversamples : int, default 10
        Randomized: extra columns beyond k (block width min(n, k + ``n_oversamples``)).
    n_iter : int, default 4
        Randomized: the number of power steps.
    tol : float, default 0.0
        Lanczos: ARPACK's relative accuracy (0: machine precision). Unused by the others.
    random_state : int, numpy Generator, RandomState or None, default 0
        Seeds the randomized start block or the Lanczos start vector.
    shift : float or None, default None
        Randomized with ``which="SA"`` (required there): a bound sigma >= the largest
        eigenvalue of A (e.g. from a ``which="LA"`` call).
    stage : str, default "eigensolver"
        The prefix of the dask computations' stage names in progress reports.

    Returns
    -------
    Eigen
        ``values`` (k,) descending for ``"LA"``, ascending for ``"SA"``; ``vectors`` (n, k)
        orthonormal, float64; ``passes``, the products with A (dense: 1 for a dask A, else
        0); ``spectrum`` (dense only, the whole spectrum, descending); ``product`` = A @
        vectors (randomized ``"LA"``); ``info["shift"]`` (randomized ``"SA"``); the
        ``convergence`` record.
        Lanczos returns the pairs that converged, marked ``converged=False`` when some did
        not.

    Raises
    ------
    InputError
        ``A`` is not square; ``k`` is out of range; an unknown ``solver`` or ``which``;
        randomized ``"SA"`` without ``shift``; Lanczos with k >= n - 1; a ``random_state``
        that is not None, an int, a Generator or a RandomState.

    Warns
    -----
    ConvergenceWarning
        Lanczos stopped before every pair converged.
    """
    n = _check_square(A, k)
    solver = choose_eigen_solver(solver, n)
    if which not in ("LA", "SA"):
        raise InputError(f"which must be 'LA' or 'SA'; found {which!r}.", "pass which='LA'.")
    step = f"{'top' if which == 'LA' else 'bottom'} {k} eigenpairs"
    if solver == "dense":
        return _dense(A, k, which, stage)
    if solver == "lanczos":
        w, v, passes, rec = _lanczos(A, k, which, tol, random_state, stage)
        return Eigen(w, v, solver, passes, convergence={**rec, "step": step})
    if which == "LA":
        w, v, passes, av = _randomized(A, k, n_oversamples, n_iter, random_state, stage, None)
        return Eigen(
            w,
            v,
            solver,
            passes,
            product=av,
            convergence=_randomized_record(step, w, v, av, passes, n_iter),
        )
    if shift is None:
        raise InputError(
            "The smallest eigenvalues by subspace iteration need shift >= the "
            "largest eigenvalue; found shift=None.",
            "pass shift=<largest eigenvalue> (from a which='LA' call), or use solver='lanczos'.",
        )
    w, v, passes, av = _randomized(A, k, n_oversamples, n_iter, random_state, stage, float(shift))
    return Eigen(
        float(shift) - w,
        v,
        solver,
        passes,
        info={"shift": float(shift)},
        convergence=_randomized_record(step, w, v, av, passes, n_iter, scale=float(shift)),
    )


def top_and_bottom_eigh(
    A,
    k: int,
    *,
    n_oversamples: int = 10,
    n_iter: int = 4,
    random_state=0,
    stage: str = "eigensolver",
) -> tuple[Eigen, Eigen]:
    """The ``k`` largest and the ``k`` smallest eigenpairs of symmetric ``A`` by randomized
    subspace iteration, the two iterations sharing their passes over ``A``.

    The top iteration is `top_eigh`'s randomized ``"LA"`` solve, start block and all. The
    bottom one runs on sigma I - A (`top_eigh`'s ``"SA"``), its start block drawn next from
    the same ``random_state``; its shift sigma is the top iteration's current largest Ritz
    value, a lower bound on the largest eigenvalue that converges to it. Its first step
    waits one pass for a shift from a block that has had a power step (a random block's
    Ritz value is far too low), so the two solves take ``n_iter + 2`` passes instead of
    ``2 (n_iter + 1)``; each pass multiplies A by both blocks side by side.

    Parameters
    ----------
    A : ndarray, dask array or operator of shape (n, n)
        As `top_eigh` takes it.
    k : int
        The number of eigenpairs at each end, in [1, n].
    n_oversamples, n_iter, random_state, stage
        As `top_eigh`'s.

    Returns
    -------
    (Eigen, Eigen)
        The top pairs (values descending, ``product`` = A @ vectors, ``passes`` = n_iter +
        1) and the bottom pairs (values ascending, ``passes`` = the one pass they added,
        ``info["shift"]`` the last shift, ``info["shared_passes"]`` the passes shared with
        the top solve); each with its convergence record.

    Raises
    ------
    InputError
        ``A`` is not square, or ``k`` is out of range.
    """
    n = _check_square(A, k)
    n_iter = int(n_iter)
    rng = check_random_state(random_state)
    width = min(n, k + max(int(n_oversamples), 0))
    qt, _ = np.linalg.qr(rng.standard_normal((n, width)))
    qb, _ = np.linalg.qr(rng.standard_normal((n, width)))
    top = bottom = pending = shift = None
    t_steps = b_steps = passes = 0
    shift_good = False
    while top is None or bottom is None:
        want_t, want_b = top is None, bottom is None and pending is None
        passes += 1
        what = [f"top {_step(t_steps, n_iter)}"] if want_t else []
        what += [f"bottom {_step(b_steps, n_iter)}"] if want_b else []
        aq = _matmul(
            A,
            np.hstack(([qt] if want_t else []) + ([qb] if want_b else [])),
            f"{stage}: {', '.join(what)}",
        )
        if want_t:
            aqt = aq[:, :width]
            w, v = scipy.linalg.eigh(_symmetric(qt.T @ aqt))
            shift, shift_good = float(w[-1]), t_steps >= 1
            if t_steps < n_iter:
                qt, _ = np.linalg.qr(aqt)
                t_steps += 1
            else:
                top = _ritz(w, v, qt, aqt, k, descending=True)
        if want_b:
            pending = aq[:, aq.shape[1] - width :]
        if pending is not None and b_steps == n_iter:
            bottom = _ritz(*scipy.linalg.eigh(_symmetric(qb.T @ pending)), qb, pending, k, False)
            pending = None
        elif pending is not None and (shift_good or top is not None):
            qb, _ = np.linalg.qr(shift * qb - pending)
            b_steps += 1
            pending = None
    tw, tv, tav = top
    bw, bv, bav = bottom
    step = f"{k} eigenpairs"
    return (
        Eigen(
            tw,
            tv,
            "randomized",
            n_iter + 1,
            product=tav,
            convergence=_randomized_record(f"top {step}", tw, tv, tav, n_iter + 1, n_iter),
        ),
        Eigen(
            bw,
            bv,
            "randomized",
            passes - (n_iter + 1),
            info={"shift": shift, "shared_passes": 2 * (n_iter + 1) - passes},
            convergence=_randomized_record(
                f"bottom {step}", bw, bv, bav, n_iter + 1, n_iter, scale=shift
            ),
        ),
    )


def _check_square(A, k: int) -> int:
    """n for a square n x n ``A`` and 1 <= k <= n, else `InputError`."""
    n = A.shape[0]
    if A.ndim != 2 or A.shape[1] != n:
        raise InputError(
            f"An eigensolver needs a square matrix; found shape {A.shape}.",
            "pass the n x n kernel or distance matrix.",
        )
    if not 1 <= k <= n:
        raise InputError(
            f"Asked for {k} eigenpairs of a {n} x {n} matrix.", f"ask for between 1 and {n}."
        )
    return n


def _step(done: int, n_iter: int) -> str:
    return f"power iteration {done + 1}/{n_iter}" if done < n_iter else "Rayleigh-Ritz"


def _symmetric(small: np.ndarray) -> np.ndarray:
    return (small + small.T) / 2


def _ritz(w, v, q, aq, k: int, descending: bool):
    """(values, vectors, A @ vectors) of the k largest (or smallest) Ritz pairs."""
    order = (np.argsort(w)[::-1] if descending else np.argsort(w))[:k]
    return w[order], q @ v[:, order], aq @ v[:, order]


def _randomized_record(step, w, v, av, passes, n_iter, scale=None) -> dict:
    """Subspace iteration runs its passes by design ("completed"); the residual of its Ritz
    pairs, max_j ||A v_j - w_j v_j|| / scale (scale: the largest |w|, or the shift), costs
    nothing more: A v is the Rayleigh-Ritz product."""
    top = scale if scale is not None else float(np.max(np.abs(w))) if w.size else 1.0
    res = np.linalg.norm(av - v * w, axis=0) / max(abs(top), np.finfo(np.float64).tiny)
    return completed(
        step,
        "randomized subspace iteration",
        int(n_iter),
        passes=int(passes),
        residual=float(res.max()) if res.size else 0.0,
        measure="max ||A v - lambda v|| / |largest eigenvalue| of the Ritz pairs",
    )


def _dense(A, k, which, stage) -> Eigen:
    passes = 0
    if hasattr(A, "lazy"):  # an operator: its matrix as a lazy expression
        A = A.lazy()
    if is_dask(A):
        (A,) = compute(A, stage=f"{stage}: matrix")
        passes = 1
    A = np.asarray(A, dtype=np.float64)
    w, v = scipy.linalg.eigh(A)  # the whole spectrum: needed for the negative part anyway
    order = np.argsort(w)[::-1]
    w, v = w[order], v[:, order]
    if which == "LA":
        vals, vecs = w[:k], v[:, :k]
    else:
        vals, vecs = w[::-1][:k], v[:, ::-1][:, :k]
    return Eigen(
        vals.copy(),
        np.ascontiguousarray(vecs),
        "dense",
        passes,
        spectrum=w,
        convergence=record(
            f"{'top' if which == 'LA' else 'bottom'} {k} eigenpairs",
            "dense (LAPACK eigh)",
            converged=True,
            status="exact",
        ),
    )


def _randomized(A, k, n_oversamples, n_iter, random_state, stage, shift):
    """Top-k of A, or of shift*I - A when ``shift`` is given."""
    n = A.shape[0]

    def product(q, label):
        aq = _matmul(A, q, label)
        return aq if shift is None else shift * q - aq

    rng = check_random_state(random_state)
    width = min(n, k + max(int(n_oversamples), 0))
    q, _ = np.linalg.qr(rng.standard_normal((n, width)))
    for it in range(int(n_iter)):
        q, _ = np.linalg.qr(product(q, f"{stage}: power iteration {it + 1}/{n_iter}"))
    aq = product(q, f"{stage}: Rayleigh-Ritz")
    w, v, av = _ritz(*scipy.linalg.eigh(_symmetric(q.T @ aq)), q, aq, k, descending=True)
    return w, v, int(n_iter) + 1, av


def _lanczos(A, k, which, tol, random_state, stage):
    from scipy.sparse.linalg import ArpackNoConvergence, LinearOperator, eigsh

    n = A.shape[0]
    if k >= n - 1:
        raise InputError(
            f"The Lanczos solver needs k < n - 1; found k={k}, n={n}.",
            "use solver='dense' for so small a matrix.",
        )
    count = {"passes": 0}

    def matvec(v):
        count["passes"] += 1
        return _matmul(
            A,
            np.asarray(v, dtype=np.float64).reshape(n, -1),
            f"{stage}: Lanczos matvec {count['passes']}",
        ).ravel()

    op = LinearOperator((n, n), matvec=matvec, dtype=np.float64)
    v0 = check_random_state(random_state).uniform(-1, 1, n)
    converged, status = True, "converged"
    try:
        w, v = eigsh(op, k=k, which=which, tol=tol, v0=v0)
    except ArpackNoConvergence as exc:
        warnings.warn(
            f"Lanczos did not converge: {len(exc.eigenvalues)} of {k} eigenpairs "
            f"converged after {count['passes']} matrix-vector products.",
            ConvergenceWarning,
            stacklevel=3,
        )
        w, v = exc.eigenvalues, exc.eigenvectors
        converged, status = False, f"{len(w)} of {k} eigenpairs converged"
    order = np.argsort(w)[::-1] if which == "LA" else np.argsort(w)
    rec = record(
        "eigenpairs",
        "lanczos (ARPACK)",
        converged=converged,
        iterations=count["passes"],
        tol=tol,
        status=status,
        matvecs=count["passes"],
        n_converged=len(w),
        measure="ARPACK's relative eigenvalue accuracy (tol 0: machine precision)",
    )
    return w[order], v[:, order], count["passes"], rec
