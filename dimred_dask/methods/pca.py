"""Principal component analysis: the function ``pca``, the `PCAModel` it returns, and `PCA`.

PCA (Pearson 1901; Hotelling 1933), computed from the SVD of the centred data or the
eigendecomposition of its covariance, or of its Gram matrix (dual PCA) when d > n; training
and test data are encoded and reconstructed as

    encode       Y = (X - mean) U            (U: the top-k principal directions, d x k)
    reconstruct  X^ = Y U^T + mean
    whiten       Y / sqrt(explained_variance)

Solvers (``solver=``): ``covariance`` (one pass, exact), ``tsqr`` (exact SVD, two passes),
``randomized`` (Halko et al., ``n_iter`` + 2 passes, for wide data), ``dual`` (n << d),
``single-pass`` (one read of the data: a randomized sketch whose row sketch gives the training
embedding, approximate, with its error reported; ``linalg.single_pass``), ``auto``
(covariance up to ``COVARIANCE_MAX_FEATURES`` features, else dual when
n <= ``DUAL_MAX_SAMPLES``, else randomized; single-pass only when ``max_error`` allows an
approximate embedding and the data is out of core; the choice is ``_pca_plan``'s).

Sparse input (a ``scipy.sparse`` matrix, or a dask array of CSR row blocks; single-cell counts)
is centred implicitly, X - 1 mean^T is never formed: ``covariance`` accumulates
X^T X - n mean mean^T blockwise in float64 (refused when the d x d accumulators would not fit,
see ``SPARSE_COVARIANCE_SHARE``), ``randomized`` multiplies X Q - 1 (mean^T Q) and
X^T Y - mean (1^T Y) (Halko, Martinsson & Tropp 2011); ``auto`` picks covariance up to
``COVARIANCE_MAX_FEATURES`` features, else randomized. ``tsqr`` and ``dual`` would densify and
refuse sparse input. ``transform`` gives the dense embedding X W - 1 (mean^T W).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field

import numpy as np

from .._validation import (
    check_array,
    check_n_components,
    float_dtype,
    is_dask,
    is_sparse_input,
)
from ..errors import DimredWarning, InputError
from ..linalg import covariance_eigh, dual_eigh, randomized_eigh, tsqr_svd
from ..linalg.single_pass import single_pass_eigh
from ._base import (
    HasConvergence,
    centred_product,
    rowwise,
    sign_fix,
    sparse_affine,
)
from ._linear_family import Projection
from ._pca_plan import SOLVERS, SPARSE_SOLVERS, plan_solver
from ._spec import DOCS_PCA, MethodSpec

__all__ = ["PCA", "PCAModel", "pca", "SOLVERS"]

# single-pass: warn (and say so in the manifest and the CLI) above this estimated relative
# error of the training embedding
SKETCH_ERROR_WARN = 0.05


@dataclass
class PCAModel(HasConvergence):
    """A fitted PCA: small arrays only, so it travels between tasks and workers cheaply."""

    components: np.ndarray  # (k, d), dtype of the input
    mean: np.ndarray  # (d,)
    explained_variance: np.ndarray  # (k,)
    explained_variance_ratio: np.ndarray  # (k,)
    singular_values: np.ndarray  # (k,)
    noise_variance: float
    n_samples: int
    whiten: bool = False
    solver: str = "covariance"
    passes: int = 1
    info: dict = field(default_factory=dict)
    # single-pass only: {"map": (s, k), "offsets": (blocks, k)} giving the training rows'
    # embedding from their stored row sketch (`embed_row_sketch`), and "rows" (the in-memory
    # row sketch of NumPy input, not saved)
    sketch: dict | None = None

    @property
    def n_components(self) -> int:
        return self.components.shape[0]

    def _scale(self):
        if not self.whiten:
            return None
        ev = np.asarray(self.explained_variance, dtype=np.float64)
        return np.sqrt(np.where(ev > 0, ev, np.finfo(np.float64).tiny))

    def transform(self, X):
        """Encode: Y = (X - mean) U, divided by sqrt(variance) when whitening. Integer and
        boolean X are encoded in their floating dtype (`float_dtype`), never in their own."""
        dtype = float_dtype(X.dtype)
        w = self.components.T.astype(np.float64)
        scale = self._scale()
        if scale is not None:
            w = w / scale
        if is_sparse_input(X):  # X W - 1 (mean^T W): X is never centred
            return sparse_affine(X, w, self.mean, dtype)
        mu = self.mean.astype(dtype)  # an exact subtraction of nearby values; the rest of
        shift = ((mu - self.mean) @ w).astype(dtype)  # the mean is added after the product
        w = w.astype(dtype)

        def encode(block):
            return centred_product(block, mu, w, shift, dtype)

        return rowwise(X, encode, self.n_components, dtype)

    def embed_row_sketch(self, rows):
        """The training rows' embedding from their row sketch (NumPy, or dask chunked as the
        training rows were): rows @ map + the block's offset (``linalg.single_pass``)."""
        if self.sketch is None:
            raise InputError(
                "This PCA model has no row sketch: it was not fitted with solver='single-pass'.",
                "use transform(X).",
            )
        emap, offsets = self.sketch["map"], self.sketch["offsets"]
        dtype = self.components.dtype

        def embed(block, block_id=None):
            b = block_id[0] if block_id is not None else 0
            return (block.astype(np.float64) @ emap + offsets[b]).astype(dtype)

        if not is_dask(rows):
            starts = np.cumsum([0] + list(self.sketch["block_rows"]))
            return np.vstack(
                [embed(rows[a:b], (i,)) for i, (a, b) in enumerate(zip(starts[:-1], starts[1:]))]
            )
        return rows.map_blocks(embed, chunks=(rows.chunks[0], (emap.shape[1],)), dtype=dtype)

    def training_embedding(self):
        """The embedding of the training rows when it is known without another pass (a
        single-pass fit of in-memory data), else None."""
        if self.sketch is None or self.sketch.get("rows") is None:
            return None
        return self.embed_row_sketch(self.sketch["rows"])

    def inverse_transform(self, Y):
        """Reconstruct: X^ = Y U^T + mean (Y multiplied back by sqrt(variance) if whitened)."""
        dtype = float_dtype(Y.dtype)
        u = self.components.astype(np.float64)
        scale = self._scale()
        if scale is not None:
            u = u * scale[:, None]
        u, mu = u.astype(dtype), self.mean.astype(dtype)

        def decode(block):
            return block.astype(dtype, copy=False) @ u + mu

        return rowwise(Y, decode, self.mean.shape[0], dtype)

    def arrays(self) -> dict[str, np.ndarray]:
        """The arrays that make up the model, for writing to a store's ``model/`` group."""
        out = {
            "components_": self.components,
            "mean_": self.mean,
            "explained_variance_": self.explained_variance,
            "explained_variance_ratio_": self.explained_variance_ratio,
            "singular_values_": self.singular_values,
        }
        if self.sketch is not None:
            out.update(
                sketch_map_=self.sketch["map"],
                sketch_offsets_=self.sketch["offsets"],
                sketch_block_rows_=np.asarray(self.sketch["block_rows"], dtype=np.int64),
            )
        return out

    def scalars(self) -> dict:
        return {
            "noise_variance_": float(self.noise_variance),
            "n_samples": int(self.n_samples),
            "whiten": bool(self.whiten),
            "solver": self.solver,
            "passes": int(self.passes),
            **self.info,
        }

    @classmethod
    def from_arrays(cls, arrays: dict, scalars: dict) -> "PCAModel":
        extra = {
            k: v
            for k, v in scalars.items()
            if k not in ("noise_variance_", "n_samples", "whiten", "solver", "passes")
        }
        sketch = None
        if "sketch_map_" in arrays:
            sketch = {
                "map": np.asarray(arrays["sketch_map_"]),
                "offsets": np.asarray(arrays["sketch_offsets_"]),
                "block_rows": [int(r) for r in arrays["sketch_block_rows_"]],
            }
        return cls(
            np.asarray(arrays["components_"]),
            np.asarray(arrays["mean_"]),
            np.asarray(arrays["explained_variance_"]),
            np.asarray(arrays["explained_variance_ratio_"]),
            np.asarray(arrays["singular_values_"]),
            float(scalars["noise_variance_"]),
            int(scalars["n_samples"]),
            bool(scalars["whiten"]),
            scalars["solver"],
            int(scalars["passes"]),
            extra,
            sketch,
        )


def _spectrum(X, solver, k_request, sketch: dict, where, row_sketch=None):
    """The spectrum by ``solver``; ``sketch``: the randomized solvers' ``n_oversamples``,
    ``n_iter``, ``tol`` and ``random_state`` (single-pass takes the first and the last)."""
    if solver == "covariance":
        return covariance_eigh(X, where=where)
    if solver == "tsqr":
        return tsqr_svd(X, where=where)
    if solver == "dual":
        return dual_eigh(X, where=where)
    if isinstance(k_request, float):
        raise InputError(
            f"PCA with solver={solver!r} needs n_components as an int; found the fraction "
            f"{k_request} (a fraction of variance needs the whole spectrum).",
            "pass an int n_components, or use solver='covariance' / 'tsqr' / 'dual'.",
        )
    if solver == "single-pass":
        once = {key: sketch[key] for key in ("n_oversamples", "random_state")}
        return single_pass_eigh(X, k_request, **once, row_sketch=row_sketch, where=where)
    return randomized_eigh(X, k_request, **sketch, where=where)


def pca(
    X,
    *,
    n_components=None,
    solver: str = "auto",
    whiten: bool = False,
    n_oversamples: int = 10,
    n_iter: int = 4,
    tol: float = 0.0,
    random_state=None,
    max_error=None,
    row_sketch=None,
    where: str = "X",
) -> PCAModel:
    """Fit PCA to ``X`` (NumPy or dask, n_samples x n_features) and return the `PCAModel`.

    Heavy work runs where ``X`` lives: NumPy in this process, dask on the active distributed
    client. Nothing here writes anything but ``row_sketch``.

    Parameters
    ----------
    X : array-like, dask array or sparse matrix of shape (n_samples, n_features)
        The data rows. Sparse input is centred implicitly (solvers ``auto``, ``covariance``
        and ``randomized``).
    n_components : int, float in (0, 1) or None, default None
        Components to keep; a float keeps the fewest components that explain that fraction
        of the variance (exact solvers only); None keeps min(n_samples, n_features).
    solver : {"auto", "covariance", "tsqr", "randomized", "dual", "single-pass"}, default "auto"
        ``single-pass`` sketches k + max(``n_oversamples``, k) columns in one pass and
        reports its error in ``info`` (``linalg.single_pass``). ``auto``: see the module
        docstring and `plan_solver`.
    whiten : bool, default False
        Scale the projections to unit variance.
    n_oversamples : int, default 10
        Randomized solver: extra random directions beyond k (Krylov passes of width
        k + ``n_oversamples``). Single-pass: the sketch has k + max(``n_oversamples``, k)
        columns.
    n_iter : int, default 4
        Randomized solver: at most ``n_iter`` + 1 Krylov passes over the data.
    tol : float, default 0.0
        Randomized solver: stop early once the wanted pairs' largest relative residual is at
        most ``tol`` (0: never early; a ``tol`` > 0 not reached marks the fit unconverged).
    random_state : int, numpy Generator or None, default None
        Seeds the randomized and single-pass solvers.
    max_error : float in (0, 1) or None, default None
        A relative error: lets ``solver="auto"`` take single-pass for data out of core
        (`plan_solver`), refitting with the exact solver when the sketch's estimated
        embedding error is above it; with ``solver="single-pass"`` it is the error above
        which the fit warns (default ``SKETCH_ERROR_WARN``). None: exact solvers only.
    row_sketch : array or None, default None
        Single-pass: where its n x s row sketch goes (an array of that shape chunked like
        ``X``'s rows; kept in memory for NumPy input when not given), from which
        `PCAModel.embed_row_sketch` gives the training embedding without reading ``X``
        again.
    where : str, default "X"
        The name of the input in error messages.

    Returns
    -------
    PCAModel
        The fitted model (components, mean, explained variances, ``info`` with the solver's
        choice and, for single-pass, the sketch's error estimates).

    Raises
    ------
    InputError
        ``X`` is not a finite 2-D numeric array; ``n_components``, ``solver``, ``tol`` or
        ``max_error`` is out of range; a fraction ``n_components`` with the randomized or
        single-pass solver; ``solver="covariance"`` on sparse input whose d x d
        accumulators would not fit in memory.
    InputTypeError
        Sparse ``X`` with ``solver="tsqr"`` or ``"dual"`` (they would densify it).

    Warns
    -----
    DimredWarning
        Columns of ``X`` with zero variance; a single-pass embedding error estimate above
        ``max_error`` (or ``SKETCH_ERROR_WARN``).
    """
    X = check_array(X, method="PCA", where=where, accept_sparse=True)
    n, d = X.shape
    k_request = check_n_components(n_components, n, d, method="PCA")
    check_max_error(max_error)
    solver, choice = plan_solver(
        X,
        solver,
        k_request,
        max_error=max_error,
        n_oversamples=n_oversamples,
        n_iter=n_iter,
        where=where,
    )
    if not (isinstance(tol, (int, float)) and np.isfinite(tol) and tol >= 0):
        raise InputError(
            f"PCA needs tol >= 0 (0: run all n_iter + 1 passes); found {tol!r}.",
            "pass e.g. tol=1e-4 with a larger n_iter, or leave tol=0.",
        )
    settings = {
        "n_oversamples": n_oversamples,
        "n_iter": n_iter,
        "tol": tol,
        "random_state": random_state,
    }
    sp = _spectrum(X, solver, k_request, settings, where, row_sketch)
    sketch = None
    if solver == "single-pass":
        sp, sketch = sp
        est = sketch.embedding_error_estimate
        if choice and not (np.isfinite(est) and est <= max_error):  # auto: exact after all
            solver, sketch = choice["exact_solver"], None
            choice["fallback"] = (
                f"the sketch's estimated embedding error {est:.3g} is above max_error "
                f"{max_error:g}: refitted with {solver} (exact; more passes over the data)"
            )
            sp = _spectrum(X, solver, k_request, settings, where)
    _warn_constant(sp, d, where)
    total = sp.total_variance
    ratio_all = sp.variances / total if total > 0 else np.zeros_like(sp.variances)
    if isinstance(k_request, float):
        k = int(np.searchsorted(np.cumsum(ratio_all), k_request, side="right") + 1)
        k = min(k, len(ratio_all))
    else:
        k = k_request
    rank = min(n, d)
    kept = sp.variances[:k]
    noise = (total - kept.sum()) / (rank - k) if k < rank else 0.0
    comps = sign_fix(sp.components[:k])
    info = {
        "total_variance": float(total),
        "exact": bool(sp.exact),
        "convergence": [sp.convergence] if sp.convergence else [],
        **({"solver_choice": choice} if choice else {}),
    }
    model = PCAModel(
        comps.astype(X.dtype),
        np.asarray(sp.mean, np.float64),  # float64: X's dtype may not hold it (transform)
        kept.astype(X.dtype),
        ratio_all[:k].astype(X.dtype),
        np.sqrt(kept * (n - 1)).astype(X.dtype),
        float(max(noise, 0.0)),
        n,
        bool(whiten),
        solver,
        sp.passes,
        info,
    )
    if sketch is not None:
        _attach_sketch(
            model,
            sketch,
            comps,
            sp.components[:k],
            SKETCH_ERROR_WARN if max_error is None else max_error,
        )
    return model


def check_max_error(max_error) -> None:
    if max_error is None:
        return
    if (
        isinstance(max_error, bool)
        or not isinstance(max_error, (int, float))
        or not 0 < max_error < 1
    ):
        raise InputError(
            f"PCA needs max_error (the largest relative embedding error accepted from an "
            f"approximate solver) in (0, 1), or None for exact solvers only; found "
            f"{max_error!r}.",
            "pass e.g. max_error=0.01, or leave it unset.",
        )


def _attach_sketch(model: PCAModel, sketch, comps, raw, warn_above: float) -> None:
    """The single-pass fit's embedding map, with the components' signs and whitening, and its
    error estimates (``linalg.single_pass``)."""
    signs = np.sign(np.sum(comps * raw, axis=1))
    emap = sketch.embed_map * signs
    scale = model._scale()
    if scale is not None:
        emap = emap / scale
    model.sketch = {
        "map": emap,
        "offsets": sketch.block_offsets @ emap,
        "block_rows": list(sketch.block_rows),
        "rows": sketch.rows,
    }
    model.info["sketch"] = {
        "width": int(sketch.width),
        "captured_variance": float(sketch.captured_variance),
        "embedding_error_estimate": _number(sketch.embedding_error_estimate),
        "component_error_estimate": [float(e) for e in sketch.component_error_estimate],
    }
    est = sketch.embedding_error_estimate
    if np.isfinite(est) and est > warn_above:
        msg = (
            f"PCA single-pass: the embedding's estimated relative error is {est:.2g} "
            f"(more than {warn_above:g}); the sketch of {sketch.width} columns "
            f"captured {sketch.captured_variance:.4f} of the variance, so the spectrum "
            "decays too slowly past the components kept for one pass to determine them."
        )
        fix = (
            f"pass a larger n_oversamples (now {sketch.width - model.n_components} extra "
            "columns), fewer components, or solver='covariance' / 'randomized' (exact or "
            "iterated, more passes)."
        )
        model.info["sketch"]["warning"] = f"{msg} Fix: {fix}"
        warnings.warn(DimredWarning(f"{msg} {fix[0].upper()}{fix[1:]}"), stacklevel=3)


def _number(x: float) -> float | None:
    return float(x) if np.isfinite(x) else None  # no estimate: the sketch is too narrow


def _warn_constant(sp, d: int, where: str) -> None:
    const = sp.constant_columns
    if const is None or len(const) == 0:
        return
    shown = ", ".join(map(str, const[:10])) + (" ..." if len(const) > 10 else "")
    warnings.warn(
        DimredWarning(
            f"PCA: {len(const)} of {d} columns of {where} have zero variance (columns {shown}); "
            "they carry no information and get zero weight in every component. Drop them to save "
            "memory and time."
        ),
        stacklevel=3,
    )


class PCA(Projection):
    """Principal component analysis on NumPy or dask arrays.

    Parameters
    ----------
    n_components : int, float in (0, 1) or None
        Components to keep; a float keeps the fewest components that explain that fraction
        of the variance; None keeps min(n_samples, n_features).
    solver : {"auto", "covariance", "tsqr", "randomized", "dual", "single-pass"}
        ``single-pass`` reads the data once and is approximate (use it where the spectrum
        decays past n_components); ``fit_transform`` then embeds the training rows from the
        sketch, and ``info["sketch"]`` of the model reports the variance it captured and an
        estimate of the embedding's error.
    whiten : bool
        Scale the projections to unit variance.
    n_oversamples, n_iter : int
        Randomized solver: extra random directions beyond n_components, and the number
        of Krylov passes beyond the first (at most n_iter + 1 products with the data).
        Single-pass: the sketch has n_components + max(n_oversamples, n_components) columns.
    tol : float, default 0
        Randomized solver only: stop once every wanted Ritz pair's relative residual
        ||C u - theta u|| / theta is at most ``tol``, which bounds the relative error of its
        explained variance (the error is usually much smaller); 0 runs every pass. A ``tol``
        > 0 not reached within the passes marks the fit unconverged (the flow refuses to
        commit it). Where the spectrum is flat (sparse counts beyond their first components),
        accurate explained variances need an n_iter of 20-40 with tol about 1e-3.
    random_state : int, numpy Generator or None
        Seeds the randomized solver; the same seed gives the same result on any cluster.
    max_error : float in (0, 1) or None, default None
        The largest relative error of the embedding accepted from an approximate solver.
        With ``solver="auto"`` and dask data larger than half the cluster's memory, the fit
        then takes single-pass when it is predicted faster, and refits exactly when the
        sketch's estimated error is above ``max_error``; ``info["solver_choice"]`` of the
        model says what was chosen and why. None: exact solvers only.

    Attributes
    ----------
    components_, mean_, explained_variance_, explained_variance_ratio_, singular_values_,
    noise_variance_, n_components_, n_features_in_, n_samples_, solver_
    """

    _method, _feature_prefix, _fitted_attr = "PCA", "pca", "components_"
    accepts_sparse = True  # solvers auto, covariance and randomized (SPARSE_SOLVERS)
    _check_params = (
        {},
        {"n_components": 1, "solver": "randomized", "random_state": 0},
        {"solver": "tsqr"},
        {"solver": "dual", "whiten": True},
    )

    def __init__(
        self,
        n_components=None,
        *,
        solver="auto",
        whiten=False,
        n_oversamples=10,
        n_iter=4,
        tol=0.0,
        random_state=None,
        max_error=None,
    ):
        self._keep_params(locals())

    def fit(self, X, y=None):
        self._fit(X)
        if self._model.sketch is not None:
            self._model.sketch["rows"] = None  # the training rows' sketch: fit_transform only
        return self

    def _fit(self, X):
        self._model = model = pca(X, **self.get_params(deep=False))
        self.components_ = model.components
        self.mean_ = model.mean.astype(model.components.dtype)
        self.explained_variance_ = model.explained_variance
        self.explained_variance_ratio_ = model.explained_variance_ratio
        self.singular_values_ = model.singular_values
        self.noise_variance_ = model.noise_variance
        self.n_components_ = model.n_components
        self.n_features_in_ = model.mean.shape[0]
        self.n_samples_ = model.n_samples
        self.solver_ = model.solver
        self.convergence_ = model.convergence

    def fit_transform(self, X, y=None):
        self._fit(X)
        emb = self._model.training_embedding()  # single-pass: from the sketch, no second pass
        if self._model.sketch is not None:
            self._model.sketch["rows"] = None
        return emb if emb is not None else self.transform(X)

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = self.solver in SPARSE_SOLVERS
        return tags

    def transform(self, X):
        X = self._checked(X, self.n_features_in_)
        return self._model.transform(X)

    def inverse_transform(self, X):
        X = self._checked(X, self.n_components_)
        return self._model.inverse_transform(X)


METHOD_SPECS = (
    MethodSpec(
        "pca",
        PCA,
        pca,
        takes="dense or sparse",
        docs=DOCS_PCA,
        flow_overrides={
            # the flow writes an embedding of every row: 2 components as every other method,
            # where the estimator and the function keep min(n, d) as scikit-learn's PCA does
            "n_components": (2, "two components, as every other method"),
            # a flow run is resumed and its fit reused by fingerprint, so its randomized
            # solvers are seeded; the estimator keeps scikit-learn's unseeded default
            "random_state": (0, "a resumed run must give the same fit"),
        },
        not_in_estimator={"row_sketch": "the flow's single-pass fit writes its row sketch"},
        model=PCAModel,
    ),
)
