"""Kernel PCA: the function ``kernel_pca``, the `KernelPCAModel` it returns, and `KernelPCA`.

Kernel PCA (Schölkopf, Smola & Müller 1998), with K centred in feature space:

    K_ij = k(x_i, x_j),  H = I - 11^T/n,  H K H alpha_i = lambda_i alpha_i,  ||alpha_i|| = 1
    training embedding      Y = A Lambda^1/2                       (row i: point i)
    new point x             g = Lambda^-1/2 A^T H (k - K 1/n),    k_j = k(x, x_j)

(For a training point g equals its row of A Lambda^1/2: ``transform(X_train)`` reproduces the
embedding.) The eigenvectors of H K H are unit vectors; the feature-space directions
psi_i = F H alpha_i / sqrt(lambda_i) are then orthonormal (Schölkopf et al.'s normalisation),
which is what the Lambda^-1/2 does.

Solvers (``solver=``):
- ``dense``: K in memory, full ``eigh``; also reports the negative part of the spectrum.
- ``randomized`` (defaults: 20 extra vectors, 6 power iterations, 7 passes; measured on the
  Wine kernel: 3e-9 relative eigenvalue error, where 10 / 4 gave 2e-3) / ``lanczos``: on the
  lazy centred kernel H K H (blockwise; upper triangle
  computed and mirrored), or on a stored kernel matrix passed as ``kernel_matrix=`` (a dask
  array, e.g. ``da.from_zarr`` of a run's ``kernel/matrix``); never the whole K in memory.
- ``nystrom``: m landmarks, K ~ Phi Phi^T with Phi = C R^-1, C = k(X, L) (``linalg.nystrom``);
  the top eigenpairs of Phi's r x r scatter are those of H Phi Phi^T H: lambda = eigenvalues
  of the scatter, embedding (Phi - mean) V = C (R^-1 V) - mean V. When C can be held (NumPy
  input, or persisted within a quarter of the cluster's memory) and k + n_oversamples is
  small against r, subspace iteration over the centred C (each pass 4 n r (k + p) flops):
  for NumPy input ``linalg.nystrom_top_eigh``, which stops when the residual of every wanted
  pair is at most ``tol`` or at the rounding floor of C's dtype (at most ``n_iter`` + 1
  passes) and whose last pass gives the training embedding without another pass over C; on
  the cluster ``n_iter`` + 1 passes of ``top_eigh``. Otherwise one pass forms the r x r
  scatter (2 n r^2 flops). Approximation error measured on held-out rows.
- ``auto``: dense up to ``DENSE_MAX`` rows, else nystrom.

Eigenvalues that are zero or negative (an indefinite kernel such as sigmoid, or rank
deficiency) cannot give a direction: those components are set to zero, with a warning, and
counted in ``info``.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field

import numpy as np
import scipy.linalg

from .._compute import active_client, compute, workers
from .._validation import (
    check_array,
    check_n_components,
    is_dask,
)
from ..blocks.kernels import kernel_block
from ..errors import DimredWarning, InputError
from ..linalg import (
    DENSE_MAX,
    choose_landmarks,
    column_stats,
    nystrom_error,
    nystrom_kernel,
    nystrom_map,
    nystrom_top_eigh,
    resolve_landmark_method,
    top_eigh,
)
from ..linalg.convergence import record, require_converged
from ..linalg.threaded import one_blas_thread
from ..pairwise import center_stats, check_kernel, double_center, pairwise_kernels
from ._base import (
    HasConvergence,
    ModelTransform,
    column_signs,
    is_stored,
    kept,
    like_input,
    row_blocks,
    row_range,
    rowwise,
)
from ._linear_family import (  # noqa: F401  (HELD_OUT_ROWS: re-exported)
    HELD_OUT_ROWS,
    FittedEmbedding,
    held_out_rows,
    rows_in_memory,
)
from ._spec import DOCS_LINEAR, MethodSpec

__all__ = ["KernelPCA", "KernelPCAModel", "kernel_pca", "KPCA_SOLVERS"]

KPCA_SOLVERS = ("auto", "dense", "randomized", "lanczos", "nystrom")
PERSIST_SHARE = 0.25  # persist a lazy kernel when it needs at most this share of cluster memory


@dataclass
class KernelPCAModel(HasConvergence):
    """A fitted kernel PCA. Exact solvers keep the training rows (the kernel needs them);
    Nyström keeps only the landmarks and an r x k projection."""

    kernel: dict  # resolved kernel parameters
    solver: str
    eigenvalues: np.ndarray  # (k,) of the centred kernel matrix, zero where dropped
    n_samples: int
    alphas: np.ndarray | None = None  # (n, k) exact solvers: unit eigenvectors of H K H
    X_fit: np.ndarray | None = None  # (n, d)
    row_means: np.ndarray | None = None  # (n,) K 1 / n
    embedding: np.ndarray | None = None  # (n, k) H K H A Lambda^-1/2 (exact; Nyström in memory)
    landmarks: np.ndarray | None = None  # (r, d) Nyström: the kept landmarks
    coef: np.ndarray | None = None  # (r, k) Nyström: R^-1 V (V: eigenvectors of Phi's scatter)
    offset: np.ndarray | None = None  # (k,) Nyström: mean(Phi) V
    info: dict = field(default_factory=dict)

    @property
    def n_components(self) -> int:
        return int(self.eigenvalues.shape[0])

    def _inv_sqrt(self) -> np.ndarray:
        return _inverse_root(np.asarray(self.eigenvalues, dtype=np.float64))

    def training_embedding(self) -> np.ndarray:
        """H K H A Lambda^-1/2 (= A Lambda^1/2 for exact eigenvectors); exact solvers, and
        Nyström fitted on NumPy input by subspace iteration (None otherwise).

        Written as the projection, it equals ``transform`` of the training rows to rounding
        also when A holds approximate (randomized) eigenvectors."""
        return self.embedding

    def transform(self, X):
        """Embed rows of X (NumPy or lazily for dask) by the formula of the module docstring."""
        dtype = X.dtype
        if self.solver == "nystrom":
            # (phi(x) - mean) V = k(x, L) (R^-1 V) - mean V: n m k work instead of n m r
            a, b = np.asarray(self.coef, np.float64), np.asarray(self.offset, np.float64)
            marks, kern = self.landmarks, self.kernel

            def encode(block):
                c = kernel_block(np.asarray(block), marks.astype(block.dtype), **kern)
                return (c @ a.astype(c.dtype) - b).astype(dtype)
        elif is_stored(self.X_fit) or is_stored(self.alphas):
            encode = self._stored_encoder(dtype)
        else:
            weights = self.alphas * self._inv_sqrt()  # A Lambda^-1/2
            X_fit, row_means, kern = self.X_fit, self.row_means, self.kernel

            def encode(block):
                k = kernel_block(np.asarray(block), X_fit.astype(block.dtype), **kern)
                kc = k.astype(np.float64) - row_means  # k - K 1/n
                kc -= kc.mean(axis=1, keepdims=True)  # H (k - K 1/n)
                return (kc @ weights).astype(dtype)

        return rowwise(X, encode, self.n_components, dtype)

    def _stored_encoder(self, dtype):
        """The exact transform with the training rows (and A) left in the run store: with
        c = k - K 1/n, H c W = c W - mean(c) 1^T W, each summed one stored block at a time."""
        X_fit, alphas, kern = self.X_fit, self.alphas, self.kernel
        row_means, scale = np.asarray(self.row_means, np.float64), self._inv_sqrt()
        n = int(X_fit.shape[0])

        def encode(block):
            block = np.asarray(block)
            cw = np.zeros((block.shape[0], scale.shape[0]))
            c_sum, w_sum = np.zeros(block.shape[0]), np.zeros(scale.shape[0])
            for lo, part in row_blocks(X_fit):
                hi = lo + part.shape[0]
                c = kernel_block(block, part.astype(block.dtype), **kern).astype(np.float64)
                c -= row_means[lo:hi]
                w = np.asarray(row_range(alphas, lo, hi), np.float64) * scale
                cw += c @ w
                c_sum += c.sum(axis=1)
                w_sum += w.sum(axis=0)
            return (cw - np.outer(c_sum / n, w_sum)).astype(dtype)

        return encode

    def arrays(self) -> dict[str, np.ndarray]:
        names = ("alphas", "X_fit", "row_means", "embedding", "landmarks", "coef", "offset")
        out = {"eigenvalues_": self.eigenvalues}
        out.update({f"{n}_": getattr(self, n) for n in names if getattr(self, n) is not None})
        return out

    def scalars(self) -> dict:
        return {
            "kernel": dict(self.kernel),
            "solver": self.solver,
            "n_samples": int(self.n_samples),
            **self.info,
        }

    @classmethod
    def from_arrays(cls, arrays: dict, scalars: dict) -> "KernelPCAModel":
        info = {k: v for k, v in scalars.items() if k not in ("kernel", "solver", "n_samples")}
        opt = {
            n: (kept(arrays[f"{n}_"]) if f"{n}_" in arrays else None)
            for n in ("alphas", "X_fit", "row_means", "embedding", "landmarks", "coef", "offset")
        }
        return cls(
            dict(scalars["kernel"]),
            scalars["solver"],
            np.asarray(arrays["eigenvalues_"]),
            int(scalars["n_samples"]),
            info=info,
            **opt,
        )


def _inverse_root(lam: np.ndarray) -> np.ndarray:
    """lambda^-1/2, zero where lambda is not positive (a dropped component)."""
    return np.where(lam > 0, 1.0 / np.sqrt(np.where(lam > 0, lam, 1.0)), 0.0)


def choose_kpca_solver(solver: str, n: int) -> str:
    if solver not in KPCA_SOLVERS:
        raise InputError(
            f"KernelPCA solver must be one of {', '.join(KPCA_SOLVERS)}; found {solver!r}.",
            f"pass solver='auto' (dense up to {DENSE_MAX} rows, Nyström above).",
        )
    if solver == "auto":
        return "dense" if n <= DENSE_MAX else "nystrom"
    return solver


def check_kpca_params(n: int, d: int, *, n_components, solver, n_landmarks, kernel_params):
    """All parameter checks, before any pass over the data; returns (k, solver, kernel)."""
    k = check_n_components(
        n_components, n, n, method="KernelPCA", allow_fraction=False, allow_none=False
    )
    if k >= n:
        raise InputError(
            f"KernelPCA needs n_components < n_samples = {n}; found {k} (the "
            "centred kernel matrix has rank at most n - 1).",
            f"pass n_components of at most {n - 1}.",
        )
    solver = choose_kpca_solver(solver, n)
    params = dict(kernel_params)
    kernel = check_kernel(params.pop("kernel", "gaussian"), d, **params)
    if solver == "nystrom":
        if (
            not isinstance(n_landmarks, (int, np.integer))
            or isinstance(n_landmarks, bool)
            or not k <= n_landmarks <= n
        ):
            raise InputError(
                f"Nyström KernelPCA needs n_components={k} <= n_landmarks <= "
                f"n_samples={n}; found n_landmarks={n_landmarks!r}.",
                f"pass n_landmarks between {k} and {n} (e.g. {min(n, 1000)}).",
            )
    return k, solver, kernel


def kernel_pca(
    X,
    *,
    n_components=2,
    kernel="gaussian",
    gamma=None,
    width=None,
    degree=3,
    coef0=1.0,
    solver="auto",
    n_landmarks=1000,
    landmarks="auto",
    n_oversamples=20,
    n_iter=6,
    tol=0.0,
    random_state=0,
    kernel_matrix=None,
    where="X",
) -> KernelPCAModel:
    """Fit kernel PCA to ``X`` (NumPy or dask) and return the `KernelPCAModel`.

    Kernel PCA (Schölkopf, Smola & Müller 1998) of the kernel centred in feature space; the
    solvers are described in the module docstring.

    Parameters
    ----------
    X : array-like or dask array of shape (n_samples, n_features)
        The data rows.
    n_components : int, default 2
        Components to keep, less than n_samples (the centred kernel has rank at most n - 1).
    kernel : str, default "gaussian"
        The kernel k(x, x'): "gaussian", "polynomial", "laplacian", "sigmoid", "cosine" or
        "linear"; ``"rbf"`` and ``"poly"`` are aliases of gaussian and polynomial.
    gamma : float or None, default None
        Kernel parameter (> 0); defaults to 1 / n_features. Pass ``gamma`` or ``width``, not
        both.
    width : float or None, default None
        Kernel parameter: c of the gaussian kernel exp(-||x - x'||^2 / c^2) (gaussian only;
        gamma = 1 / width**2).
    degree : int, default 3
        Kernel parameter: the polynomial kernel's degree (>= 1).
    coef0 : float, default 1.0
        Kernel parameter: the polynomial and sigmoid kernels' constant term.
    solver : {"auto", "dense", "randomized", "lanczos", "nystrom"}, default "auto"
        ``auto``: dense up to ``DENSE_MAX`` rows, else nystrom.
    n_landmarks : int, default 1000
        Nyström only: m, the number of landmarks, with n_components <= m <= n_samples.
    landmarks : {"auto", "uniform", "maxmin", "kmeans++", "kmeans"}, default "auto"
        Nyström only: how the landmarks are chosen ("auto": k-means++ up to 500 landmarks,
        uniform above).
    n_oversamples : int, default 20
        Randomized / Lanczos parameter: extra vectors beyond n_components.
    n_iter : int, default 6
        Randomized / Lanczos parameter; for Nyström on NumPy input ``n_iter`` + 1 is the most
        passes of subspace iteration.
    tol : float, default 0.0
        Randomized / Lanczos parameter; for Nyström on NumPy input the relative residual at
        which subspace iteration stops (0: at the rounding floor of C's dtype).
    random_state : int or None, default 0
        Seeds the landmark choice and the randomized solvers.
    kernel_matrix : array-like, dask array or None, default None
        The uncentred n x n kernel of X, already computed (e.g. read from a run's store), used
        by the exact solvers instead of recomputing it.
    where : str, default "X"
        The name of the input in error messages.

    Returns
    -------
    KernelPCAModel
        The fitted model: eigenvalues (zero for components whose eigenvalue is not positive,
        counted in ``info``), the training embedding, and what ``transform`` needs.

    Raises
    ------
    InputError
        ``X`` is not a finite 2-D numeric array; ``n_components`` not an int in
        [1, n_samples); an unknown ``kernel``, ``solver`` or ``landmarks``; a kernel parameter
        out of range; ``n_landmarks`` outside [n_components, n_samples] for Nyström.
    SolverError
        The eigensolver (or Nyström subspace iteration) did not converge.

    Warns
    -----
    DimredWarning
        Components with eigenvalue <= 0 (an indefinite or low-rank kernel), set to zero.
    """
    X = check_array(X, method="KernelPCA", where=where)
    n, d = X.shape
    k, solver, kern = check_kpca_params(
        n,
        d,
        n_components=n_components,
        solver=solver,
        n_landmarks=n_landmarks,
        kernel_params={
            "kernel": kernel,
            "gamma": gamma,
            "width": width,
            "degree": degree,
            "coef0": coef0,
        },
    )
    # the eigensolvers' keywords (`top_eigh`, `nystrom_top_eigh`)
    solve = {
        "n_oversamples": n_oversamples,
        "n_iter": n_iter,
        "tol": tol,
        "random_state": random_state,
    }
    if solver == "nystrom":
        return _fit_nystrom(X, k, kern, n_landmarks, landmarks, solve)
    return _fit_exact(X, k, kern, solver, solve, kernel_matrix)


def _fit_exact(X, k, kern, solver, solve: dict, K):
    n = X.shape[0]
    if K is None:
        K = pairwise_kernels(X, **kern)
    if is_dask(K):
        K = _maybe_persist(K)
        r, g = compute(*center_stats(K), stage="kernel row means")
        X_fit = rows_in_memory(X, "KernelPCA", "training rows")
    else:
        r, g = center_stats(np.asarray(K))
        X_fit = X
    Kc = double_center(K, (r, g))
    eig = top_eigh(Kc, k, solver=solver, stage="kernel PCA eigensolver", **solve)
    rec = require_converged(
        {**eig.convergence, "step": f"top {k} eigenpairs of H K H"},
        "KernelPCA",
        "pass solver='dense' (n up to a few thousand), 'randomized' (fixed passes) or 'nystrom'.",
    )
    lam, info = _drop_nonpositive(eig.values, eig.spectrum, n)
    info["convergence"] = [rec]
    signs = column_signs(eig.vectors)
    alphas = eig.vectors * signs
    embedding = eig.applied() * signs * _inverse_root(lam)
    info.update({"passes": int(eig.passes) + int(is_dask(K))})
    return KernelPCAModel(
        kern,
        solver,
        lam,
        n,
        alphas=alphas,
        X_fit=np.asarray(X_fit),
        row_means=np.asarray(r, dtype=np.float64),
        embedding=embedding,
        info=info,
    )


def _maybe_persist(K):
    client = active_client()
    if client is None:
        return K
    memory = sum(w.get("memory_limit") or 0 for w in workers(client).values())
    if memory and K.nbytes <= PERSIST_SHARE * memory:
        return client.persist(K)
    return K


def _drop_nonpositive(values, spectrum, n):
    lam = np.asarray(values, dtype=np.float64).copy()
    top = max(float(lam.max()), 0.0)
    tiny = top * n * np.finfo(np.float64).eps
    bad = lam <= tiny
    info = {"n_nonpositive_components": int(bad.sum())}
    if spectrum is not None:
        neg = -spectrum[spectrum < 0].sum()
        info["negative_mass"] = float(neg / max(np.abs(spectrum).sum(), 1e-300))
    if bad.any():
        warnings.warn(
            DimredWarning(
                f"KernelPCA: {int(bad.sum())} of the {lam.size} requested components have "
                f"eigenvalue <= 0 (values {np.round(lam[bad], 6).tolist()}); the kernel is not "
                "positive definite on this data or has lower rank. Those components are set to 0. "
                "Ask for fewer components, or use a positive semidefinite kernel (gaussian, "
                "laplacian)."
            ),
            stacklevel=4,
        )
        lam[bad] = 0.0
    return lam, info


def _fit_nystrom(X, k, kern, m, method, solve: dict) -> KernelPCAModel:
    """Kernel PCA of the Nyström approximation: the top k eigenpairs of the scatter of
    Phi = C R^-1 (C = k(X, L)), by `_nystrom_spectrum`; ``solve``: the eigensolver's
    keywords (n_oversamples, n_iter, tol, random_state)."""
    if not is_dask(X):  # in memory: parallel in row blocks, BLAS on one thread throughout
        with one_blas_thread():
            return _fit_nystrom_steps(X, k, kern, m, method, solve)
    return _fit_nystrom_steps(X, k, kern, m, method, solve)


def _fit_nystrom_steps(X, k, kern, m, method, solve: dict):
    n, random_state = X.shape[0], solve["random_state"]
    method = resolve_landmark_method(method, int(m))
    L, idx = choose_landmarks(X, int(m), method, random_state, check_finite="KernelPCA")
    nmap = nystrom_map(L, kern)
    w, v, c_mean, emb, how = _nystrom_spectrum(X, nmap, min(k, nmap.rank), solve)
    if w.size < k:  # rank r < k: pad with zero components
        v = np.hstack([v, np.zeros((v.shape[0], k - w.size))])
        emb = None if emb is None else np.hstack([emb, np.zeros((n, k - w.size))])
        w = np.concatenate([w, np.zeros(k - w.size)])
    lam, info = _drop_nonpositive(w, None, n)
    coef = nmap.solve(v)  # R^-1 V
    signs = column_signs(coef) * (lam > 0)  # the largest landmark weight positive; dropped: 0
    coef = coef * signs
    if emb is not None:
        emb = emb * signs
    held = held_out_rows(X, idx, random_state)
    error = nystrom_error(held, nmap)
    rec = require_converged(
        {**how.pop("record"), "approximation_error": error},
        "KernelPCA",
        "raise n_iter (passes over the landmarks' kernel) or loosen tol.",
    )
    info.update(
        {
            "n_landmarks": int(m),
            "landmark_method": method,
            "rank": int(nmap.rank),
            "factorization": nmap.info["factorization"],
            "approximation_error": error,
            "approximation_error_rows": int(held.shape[0]),
            **how,
            "convergence": [rec],
        }
    )
    return KernelPCAModel(
        kern,
        "nystrom",
        lam,
        n,
        landmarks=nmap.landmarks,
        coef=coef,
        offset=c_mean @ coef,
        embedding=emb,
        info=info,
    )


# The top eigenpairs of Phi's scatter come from subspace iteration over the centred C when C
# can be held (NumPy input, or persisted on the cluster within PERSIST_SHARE of its memory)
# and the block k + n_oversamples is at most this share of the rank r: each iteration is
# 4 n r (k + p) flops against the 2 n r^2 of the scatter, so with a block thin against r the
# iterations together cost less than forming the scatter. Otherwise one pass forms the r x r
# scatter.
SUBSPACE_SHARE = 0.25


class _ScatterOperator:
    """M = R^-T Cc^T Cc R^-1 (r x r) as an operator for `top_eigh`: Cc is the centred C
    persisted on the cluster, so each product is one pass over it."""

    def __init__(self, Cc, nmap):
        self.Cc, self.nmap = Cc, nmap
        self.shape = (nmap.rank,) * 2
        self.ndim, self.dtype = 2, np.dtype(np.float64)
        self.passes = 0

    def __matmul__(self, Z):
        W = self.Cc.T @ (self.Cc @ self.nmap.solve(Z).astype(self.Cc.dtype))
        if is_dask(W):
            (W,) = compute(W, stage=f"Nyström subspace iteration {self.passes + 1}")
        self.passes += 1
        return self.nmap.solve_t(np.asarray(W, np.float64))


def _nystrom_spectrum(X, nmap, k, solve: dict):
    """(eigenvalues, r x k eigenvectors of Phi's scatter, C's column means, the training
    embedding (n, k) or None, info)."""
    r, block = nmap.rank, k + solve["n_oversamples"]
    subspace = block <= SUBSPACE_SHARE * r
    if subspace and not is_dask(X):
        return _in_memory_spectrum(nmap, k, solve, X)
    if subspace and _fits_one_task(X, r + block):
        return _spectrum_in_one_task(X, nmap, k, solve)
    C = nystrom_kernel(X, nmap)
    held = _maybe_persist(C) if is_dask(C) else C
    if (is_dask(held) and held is C) or block > SUBSPACE_SHARE * r:
        stats = column_stats(C, gram=True, method="KernelPCA", stage="Nyström kernel pass")
        w, v, rec = _top_of_scatter(stats.m2, nmap, k, solve["random_state"])
        return (
            w,
            v,
            stats.mean,
            None,
            {"passes": 2, "nystrom_eigensolver": "scatter", "record": rec},
        )
    stats = column_stats(held, gram=False, method="KernelPCA", stage="Nyström kernel pass")
    Cc = _maybe_persist(held - stats.mean.astype(held.dtype))
    op = _ScatterOperator(Cc, nmap)
    # all n_iter + 1 passes of subspace iteration (tol 0), each a pass over the persisted Cc
    eig = top_eigh(op, k, solver="randomized", stage="Nyström eigensolver", **{**solve, "tol": 0.0})
    return (
        np.asarray(eig.values),
        np.asarray(eig.vectors),
        stats.mean,
        None,
        {
            "passes": 2 + op.passes,
            "nystrom_eigensolver": "subspace iteration",
            "record": {**eig.convergence, "step": f"top {k} eigenpairs of Phi's scatter"},
        },
    )


def _in_memory_spectrum(nmap, k, solve: dict, *chunks):
    """`_nystrom_spectrum`'s result from `nystrom_top_eigh` on the rows ``chunks`` (stacked)
    held in memory, under one BLAS thread (see `linalg.threaded.one_blas_thread`)."""
    x = chunks[0] if len(chunks) == 1 else np.concatenate(chunks)
    with one_blas_thread():
        w, v, emb, mean, how = nystrom_top_eigh(x, nmap, k, **solve)
    return (
        w,
        v,
        mean,
        emb,
        {
            "passes": how["passes"],
            "nystrom_eigensolver": "subspace iteration",
            "residual": how["residual"],
            "threads": how["threads"],
            "record": how["record"],
        },
    )


# Dask input whose C = k(X, L), X and the subspace block together need at most this share of
# one worker's memory is gathered into one task, which runs the in-memory solver on that
# worker's cores: the persisted-C path makes one pass over C per iteration, each a scheduler
# round trip, which at these sizes costs more than the whole solve in memory.
ONE_TASK_SHARE = 0.25


def _fits_one_task(X, columns: int) -> bool:
    need = X.shape[0] * (columns + X.shape[1]) * X.dtype.itemsize
    client = active_client()
    if client is None:
        import psutil

        return need <= ONE_TASK_SHARE * psutil.virtual_memory().total
    limits = [w.get("memory_limit") or 0 for w in workers(client).values()]
    return bool(limits) and min(limits) > 0 and need <= ONE_TASK_SHARE * min(limits)


def _spectrum_in_one_task(X, nmap, k, solve: dict):
    """`_in_memory_spectrum` as one task on one worker, the rows gathered there; the map (R is
    r x r float64: 32 MB at r = 2000) goes to the workers by scatter, not in the graph."""
    from dask import delayed

    X = X if X.numblocks[1] == 1 else X.rechunk({1: -1})
    client = active_client()
    marks = client.scatter(nmap, hash=False) if client is not None else nmap
    task = delayed(_in_memory_spectrum, pure=True)(marks, k, solve, *X.to_delayed().ravel())
    (out,) = compute(task, stage="Nyström eigensolver (one worker)")
    w, v, mean, emb, how = out
    return w, v, mean, emb, {**how, "nystrom_eigensolver": "subspace iteration (one worker)"}


# Below this share of r, the top eigenpairs of R^-T S R^-1 come from ARPACK over products
# with its factors (a few dozen matrix-vector products of order r) instead of forming it and
# running LAPACK's tridiagonal reduction of all of it (two r^3 products and 4/3 r^3).
LANCZOS_SHARE = 0.05


def _top_of_scatter(S: np.ndarray, nmap, k: int, random_state):
    """Top ``k`` eigenpairs (descending) of M = R^-T S R^-1, all held in memory, and the
    solve's convergence record."""
    r = S.shape[0]
    step = f"top {k} eigenpairs of Phi's scatter (r = {r})"
    if r > 100 and k <= LANCZOS_SHARE * r:
        op = _ScatterProduct(S, nmap)
        eig = top_eigh(op, k, solver="lanczos", tol=0.0, random_state=random_state)
        return eig.values, eig.vectors, {**eig.convergence, "step": step}
    M = nmap.solve_t(nmap.solve_t(S).T)  # R^-T (R^-T S)^T = R^-T S R^-1 (S symmetric)
    w, v = scipy.linalg.eigh((M + M.T) / 2, subset_by_index=[r - k, r - 1])
    order = np.argsort(w)[::-1]
    return (
        w[order],
        v[:, order],
        record(step, "dense (LAPACK eigh)", converged=True, status="exact"),
    )


class _ScatterProduct:
    """M = R^-T S R^-1 as a matrix for `top_eigh` (products only, S in memory)."""

    def __init__(self, S, nmap):
        self.S, self.nmap = S, nmap
        self.shape, self.ndim, self.dtype = S.shape, 2, np.dtype(np.float64)

    def __matmul__(self, Z):
        return self.nmap.solve_t(self.S @ self.nmap.solve(Z))


class KernelPCA(ModelTransform, FittedEmbedding):
    """Kernel PCA on NumPy or dask arrays (Schölkopf, Smola & Müller 1998).

    Parameters
    ----------
    n_components : int
    kernel : {"gaussian", "polynomial", "laplacian", "sigmoid", "cosine", "linear"}
    gamma, width, degree, coef0 : kernel parameters (``width`` is c of the
        gaussian kernel exp(-||x - x'||^2 / c^2)); gamma defaults to 1 / n_features.
    solver : {"auto", "dense", "randomized", "lanczos", "nystrom"}
    n_landmarks, landmarks : Nyström only: m and how they are chosen ("auto": k-means++ up
        to 500 landmarks, uniform above; "uniform", "kmeans++", "kmeans").
    n_oversamples, n_iter, tol : randomized / Lanczos parameters; for Nyström on NumPy input
        ``tol`` is the relative residual at which subspace iteration stops (0: at the rounding
        floor of C's dtype), ``n_iter`` + 1 its most passes.
    random_state : int or None

    Attributes
    ----------
    eigenvalues_, eigenvectors_ (n x k unit vectors of H K H; for Nyström those of the
    approximation, lazy for dask input), embedding_, n_features_in_, solver_, and for
    Nyström landmarks_ and approximation_error_.
    """

    _fitted_attr = "eigenvalues_"

    _check_params = (
        {},
        {"n_components": 2, "solver": "nystrom", "n_landmarks": 10},
        {"n_components": 1, "solver": "randomized", "kernel": "polynomial"},
    )

    def __init__(
        self,
        n_components=2,
        *,
        kernel="gaussian",
        gamma=None,
        width=None,
        degree=3,
        coef0=1.0,
        solver="auto",
        n_landmarks=1000,
        landmarks="auto",
        n_oversamples=20,
        n_iter=6,
        tol=0.0,
        random_state=0,
    ):
        self._keep_params(locals())

    def fit(self, X, y=None):
        X = check_array(X, method="KernelPCA")
        self._model = model = kernel_pca(X, **self.get_params(deep=False))
        self.eigenvalues_ = model.eigenvalues
        self.n_features_in_ = X.shape[1]
        self.solver_ = model.solver
        self.convergence_ = model.convergence
        if model.solver == "nystrom":
            self.embedding_ = (
                model.transform(X)
                if model.embedding is None
                else like_input(model.embedding, X, cast=True)
            )
            self.eigenvectors_ = self.embedding_ * model._inv_sqrt().astype(X.dtype)
            self.landmarks_ = model.landmarks
            self.approximation_error_ = model.info["approximation_error"]
        else:
            emb = model.training_embedding().astype(X.dtype)
            self.eigenvectors_ = model.alphas
            self.embedding_ = like_input(emb, X)
        return self


METHOD_SPECS = (
    MethodSpec(
        "kpca",
        KernelPCA,
        kernel_pca,
        follows_pca=True,
        takes="dense",
        docs=DOCS_LINEAR,
        flow_adds="the kernel stage (`solver=randomized` or `lanczos`)",
        not_in_estimator={"kernel_matrix": "the flow's kernel stage's stored K"},
        model=KernelPCAModel,
    ),
)
