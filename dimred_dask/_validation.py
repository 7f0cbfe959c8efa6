"""Argument and array checks shared by every method.

Checks that need only metadata (shape, dtype, chunks) run eagerly, on NumPy and dask input
alike. Checks that need the values (finiteness) run eagerly for NumPy input; for dask input
they are fused into the first pass a solver makes over the data (see
``blocks.stats.BlockStats.nonfinite``) so that validation never costs a pass of its own.
"""

from __future__ import annotations

import numbers

import numpy as np

from .errors import ChunkingError, InputError, InputTypeError, NotFittedError

__all__ = [
    "check_array",
    "check_n_components",
    "check_random_state",
    "check_n_features",
    "describe_nonfinite",
    "is_dask",
    "is_sparse_input",
]


def is_dask(X) -> bool:
    return type(X).__module__.startswith("dask.") and hasattr(X, "dask")


def _is_sparse(X) -> bool:
    return hasattr(X, "tocsr") or type(X).__module__.startswith("scipy.sparse")


def is_sparse_input(X) -> bool:
    """Whether ``X`` is sparse input as the methods take it: an in-memory sparse matrix or
    array (``scipy.sparse``, any format; `check_array` turns it into CSR), or a dask array
    whose chunks are ``scipy.sparse`` row blocks (``meta`` a ``scipy.sparse`` matrix)."""
    if is_dask(X):
        return _is_sparse(getattr(X, "_meta", None))
    return _is_sparse(X)


# The flow's method names (``--method``) by the names the methods give themselves in their
# messages (compared lower-case, letters and digits only, without a trailing "transform"): a
# refusal of sparse input names the chain that runs the method on PCA's embedding. The method
# registry (`dimred_dask.methods.specs`) fills it when it is imported, which importing any
# method does.
_CHAIN_NAMES: dict[str, str] = {}


def _name_key(text: str) -> str:
    key = "".join(c for c in str(text).lower() if c.isalnum())
    return key.removesuffix("transform") or key


def register_method_names(names: dict[str, str]) -> None:
    """Record the flow's method name of each name a method uses in its messages (``{"t-SNE":
    "tsne", "TSNE": "tsne", ...}``); `chain_name` answers from these."""
    for text, flow_name in names.items():
        key = _name_key(text)
        if _CHAIN_NAMES.setdefault(key, flow_name) != flow_name:
            raise ValueError(
                f"the message name {text!r} is taken by method {_CHAIN_NAMES[key]!r}; "
                f"{flow_name!r} needs another"
            )


def chain_name(method: str) -> str | None:
    """The flow's name of the method called ``method`` in messages ("t-SNE" -> "tsne"), or
    None when it has none (it is not a method of the flow)."""
    return _CHAIN_NAMES.get(_name_key(method))


def sparse_refusal(method: str, where: str, X, why: str = "") -> InputTypeError:
    """The `InputTypeError` of a method (or a solver path) that does not take sparse input:
    what was found, and the fix (the chain through PCA, which takes sparse input, or
    densifying). ``why``: a clause saying what would need the dense matrix."""
    kind = (
        "a dask array of sparse chunks"
        if is_dask(X)
        else f"a sparse matrix of type {type(X).__name__}"
    )
    shape = "x".join(str(s) for s in getattr(X, "shape", ()))
    name = chain_name(method)
    if name:
        fix = (
            f"reduce with PCA first: --method pca+{name}, the chain (e.g. --param "
            "pca.n_components=50; in Python PCA(50).fit_transform(X), which takes sparse "
            "input), or densify (X.toarray()) if n x d fits in memory."
        )
    else:
        fix = (
            "reduce with PCA first (dimred_dask.PCA(50) takes sparse input and gives a "
            "dense embedding), or densify (X.toarray()) if n x d fits in memory."
        )
    return InputTypeError(
        f"{method} does not take sparse input{why}; found {kind} ({shape}) in {where}.", fix
    )


def format_rows(rows, n_rows: int | None = None, *, shown: int = 6) -> str:
    """Row indices as a reader wants them: "row 9", "rows 3, 10 and 500", "rows 1042-1187",
    "rows 5-7, 40 and 12 more" (``n_rows``: how many there are in all, when ``rows`` lists
    only the first ones)."""
    rows = sorted({int(r) for r in np.asarray(rows).ravel()})
    total = max(int(n_rows or 0), len(rows))
    runs: list[list[int]] = []
    for r in rows:
        if runs and r == runs[-1][1] + 1:
            runs[-1][1] = r
        else:
            runs.append([r, r])
    parts = [f"{a}" if a == b else f"{a}-{b}" for a, b in runs[:shown]]
    more = total - sum(b - a + 1 for a, b in runs[:shown])
    if more > 0:
        text = f"{', '.join(parts)} and {more} more"
    else:
        text = parts[0] if len(parts) == 1 else f"{', '.join(parts[:-1])} and {parts[-1]}"
    return f"{'row' if total == 1 else 'rows'} {text}"


def describe_nonfinite(
    rows: np.ndarray, n_nan: int, n_inf: int, where: str, n_rows: int | None = None
) -> str:
    """One sentence such as "12 NaN in rows 1042-1187 of 'X'"."""
    parts = []
    if n_nan:
        parts.append(f"{n_nan} NaN")
    if n_inf:
        parts.append(f"{n_inf} inf")
    return f"{' and '.join(parts)} in {format_rows(rows, n_rows)} of {where}"


def nonfinite_error(
    method: str, rows, n_nan: int, n_inf: int, where: str, n_rows: int | None = None
) -> InputError:
    return InputError(
        f"{method} needs finite values; found "
        f"{describe_nonfinite(rows, n_nan, n_inf, where, n_rows)}.",
        "impute or drop those rows before the run (NaN and inf cannot be embedded).",
    )


def float_dtype(dtype) -> np.dtype:
    """The floating dtype data of ``dtype`` is embedded in, one rule for every method:
    float32 and float64 are kept; booleans, integers of at most 16 bits and float16 become
    float32 (exact: every such value is a float32); wider integers and objects holding
    numbers become float64 (int64 above 2**53 rounds, as in every float64 library)."""
    dtype = np.dtype(dtype).newbyteorder("=")  # big-endian float32 is float32 data
    if dtype in (np.float32, np.float64):
        return dtype
    if dtype.kind == "b" or (dtype.kind in "iuf" and dtype.itemsize <= 2):
        return np.dtype(np.float32)
    return np.dtype(np.float64)


_float_dtype = float_dtype


def check_array(
    X,
    *,
    method: str = "this method",
    where: str = "X",
    min_samples: int = 2,
    min_features: int = 1,
    check_finite: bool = True,
    allow_dask: bool = True,
    accept_sparse: bool = False,
):
    """Return ``X`` as a 2-D float32/float64 NumPy or dask array, or raise `InputError`.

    float32 stays float32 and float64 stays float64; other real dtypes follow `float_dtype`.
    For dask input nothing is computed: finiteness is left to the first pass of the solver.

    Sparse input (`is_sparse_input`) is refused unless ``accept_sparse``, with the fix (the
    chain through PCA, or densifying). With ``accept_sparse`` it comes back as a
    ``scipy.sparse.csr_matrix``, or as a dask array of CSR row blocks holding all columns, in
    the same float dtype rule; only the stored values are checked for finiteness (for dask
    input by the solver's first pass, see ``blocks.sparse.sparse_block_stats``).
    """
    if X is None:
        raise InputError(
            f"{method} needs a 2-D array of samples x features; found None.",
            "pass an array of shape (n_samples, n_features).",
        )
    if is_sparse_input(X):
        if not accept_sparse:
            raise sparse_refusal(method, where, X)
        return _check_sparse(
            X,
            method=method,
            where=where,
            min_samples=min_samples,
            min_features=min_features,
            check_finite=check_finite,
        )
    if is_dask(X):
        if not allow_dask:
            raise InputTypeError(
                f"{method} needs an in-memory array here; found a dask array.",
                "call .compute() first.",
            )
        return _check_dask(
            X, method=method, where=where, min_samples=min_samples, min_features=min_features
        )
    arr = _as_real(np.asarray(X), method=method, where=where)  # complex, text: refused
    _check_shape(
        arr.shape, method=method, where=where, min_samples=min_samples, min_features=min_features
    )
    if check_finite:
        bad = ~np.isfinite(arr)
        if bad.any():
            rows = np.nonzero(bad.any(axis=1))[0]
            n_nan = int(np.isnan(arr).sum())
            raise nonfinite_error(method, rows, n_nan, int(bad.sum()) - n_nan, where)
    return arr


def _as_real(arr: np.ndarray, *, method: str, where: str) -> np.ndarray:
    kind = arr.dtype.kind
    if kind in "fiub":
        return arr.astype(_float_dtype(arr.dtype), copy=False)
    if kind == "c":
        _refuse_non_real(arr.dtype, method, where, "")
    if kind == "O":
        try:
            return arr.astype(np.float64)
        except (TypeError, ValueError) as exc:
            raise InputTypeError(
                f"{method} needs numbers; {where} has dtype object and a value that is not a "
                f"number ({exc}; the float() argument must be a string or a real number).",
                "select the numeric columns, or encode categories as numbers first.",
            ) from None
    raise InputTypeError(
        f"{method} needs numbers; found dtype {arr.dtype} ({'text' if kind in 'US' else kind}) "
        f"in {where} (a float() argument must be a string or a real number).",
        "select the numeric columns (--columns for tables), or encode text as numbers first.",
    )


def _check_shape(shape, *, method, where, min_samples, min_features):
    if len(shape) != 2:
        raise InputError(
            f"{method} needs a 2-D array of samples x features; found {len(shape)}-D input "
            f"of shape {tuple(shape)} in {where}.",
            "Reshape your data either using array.reshape(-1, 1) if your data has a single "
            "feature or array.reshape(1, -1) if it contains a single sample.",
        )
    n, d = shape
    if n == 0:
        raise InputError(
            f"{method} needs at least {min_samples} samples; found 0 rows "
            f"(shape={tuple(shape)}) in {where}.",
            "check the input path and any row filter; the array is empty.",
        )
    if d == 0:
        raise InputError(
            f"Found array with 0 feature(s) (shape={tuple(shape)}) while a minimum "
            f"of {min_features} is required by {method} ({where}).",
            "select at least one numeric column.",
        )
    if n < min_samples:
        raise InputError(
            f"{method} needs at least {min_samples} samples; found {n} sample"
            f"{'' if n == 1 else 's'} ({n} sample(s), shape={tuple(shape)}) in {where}.",
            "a variance needs at least two rows: pass more samples.",
        )
    if d < min_features:
        raise InputError(
            f"Found array with {d} feature(s) (shape={tuple(shape)}) while a minimum "
            f"of {min_features} is required by {method} ({where}).",
            "pass more features.",
        )


def _check_dask(X, *, method, where, min_samples, min_features):
    if X.ndim != 2:
        _check_shape(
            X.shape, method=method, where=where, min_samples=min_samples, min_features=min_features
        )
    if any(np.isnan(c) for c in X.shape):
        raise ChunkingError(
            f"{method} needs known chunk sizes; {where} has unknown (NaN) chunk sizes.",
            "call X.compute_chunk_sizes() or build the array with known lengths.",
        )
    _refuse_non_real(
        X.dtype, method, where, "select numeric columns, or encode text as numbers first."
    )
    _check_shape(
        X.shape, method=method, where=where, min_samples=min_samples, min_features=min_features
    )
    dtype = _float_dtype(X.dtype)
    return X if X.dtype == dtype else X.astype(dtype)


def _refuse_non_real(dtype, method: str, where: str, fix: str) -> None:
    """Complex numbers are an `InputError`, other non-numeric dtypes an `InputTypeError` with
    ``fix``; real numbers, integers and booleans pass."""
    if dtype.kind == "c":
        raise InputError(
            f"Complex data not supported: {method} needs real numbers; "
            f"found dtype {dtype} in {where}.",
            "pass the real part, the modulus or both as separate columns.",
        )
    if dtype.kind not in "fiub":
        raise InputTypeError(f"{method} needs numbers; found dtype {dtype} in {where}.", fix)


def _check_sparse(X, *, method, where, min_samples, min_features, check_finite):
    import scipy.sparse as sp

    if is_dask(X):
        X = _check_dask(
            X, method=method, where=where, min_samples=min_samples, min_features=min_features
        )
        return X if X.numblocks[1] == 1 else X.rechunk({1: -1})
    if getattr(X, "ndim", 2) != 2:
        _check_shape(
            X.shape, method=method, where=where, min_samples=min_samples, min_features=min_features
        )
    X = X.tocsr()  # no copy when X is CSR already; CSC, COO, ... are converted
    if not isinstance(X, sp.csr_matrix):  # a csr_array: the matrix type the chunks are
        X = sp.csr_matrix(X)
    _refuse_non_real(X.dtype, method, where, "store the sparse matrix with a numeric dtype.")
    _check_shape(
        X.shape, method=method, where=where, min_samples=min_samples, min_features=min_features
    )
    dtype = _float_dtype(X.dtype)
    if X.dtype != dtype:
        X = X.astype(dtype)
    if check_finite:
        bad = ~np.isfinite(X.data)
        if bad.any():
            at = np.flatnonzero(bad)
            rows = np.searchsorted(X.indptr, at, side="right") - 1
            n_nan = int(np.isnan(X.data[at]).sum())
            raise nonfinite_error(method, rows, n_nan, at.size - n_nan, where)
    return X


def check_n_components(
    n_components,
    n_samples: int,
    n_features: int,
    *,
    method: str = "PCA",
    allow_fraction: bool = True,
    allow_none: bool = True,
):
    """Validate ``n_components``: an int in [1, min(n, d)], a fraction in (0, 1), or None."""
    limit = min(n_samples, n_features)
    if n_components is None and allow_none:
        return limit
    if isinstance(n_components, (bool, np.bool_)):
        raise InputError(
            f"{method} needs n_components as an int or a fraction; found a bool.",
            "pass an int such as 2.",
        )
    if isinstance(n_components, numbers.Integral):
        if not 1 <= n_components <= limit:
            raise InputError(
                f"{method} needs 1 <= n_components <= min(n_samples, n_features) = {limit}; "
                f"found n_components={n_components} (data shape ({n_samples}, {n_features})).",
                f"pass an n_components between 1 and {limit}, or a fraction of variance in (0, 1).",
            )
        return int(n_components)
    if isinstance(n_components, numbers.Real) and allow_fraction:
        if 0 < n_components < 1:
            return float(n_components)
        raise InputError(
            f"{method} needs n_components as an int in [1, {limit}] or a fraction of variance "
            f"in (0, 1); found {n_components}.",
            "pass e.g. n_components=0.95 to keep 95% of the variance, or an int.",
        )
    raise InputError(
        f"{method} needs n_components as an int"
        f"{' or a fraction in (0, 1)' if allow_fraction else ''}; "
        f"found {n_components!r} of type {type(n_components).__name__}.",
        "pass an int such as 2.",
    )


def check_random_state(seed) -> np.random.Generator:
    """A NumPy Generator from None, an int, a Generator or a legacy RandomState."""
    if isinstance(seed, np.random.Generator):
        return seed
    if seed is None or isinstance(seed, numbers.Integral):
        return np.random.default_rng(seed)
    if isinstance(seed, np.random.RandomState):
        return np.random.default_rng(seed.randint(0, 2**31 - 1))
    raise InputError(
        f"random_state must be None, an int or a numpy Generator; found {seed!r}.",
        "pass an int seed such as 0.",
    )


# an in-memory fit whose estimated peak is over this share of the memory available is refused
MEMORY_SHARE = 0.8


def check_fits_in_memory(need: int, what: str, fix: str) -> None:
    """`InputError` when ``need`` bytes are over ``MEMORY_SHARE`` of the memory available
    (psutil's ``available``; no check without psutil). ``what`` says what would hold them,
    ``fix`` how to do without."""
    try:
        import psutil

        available = int(psutil.virtual_memory().available)
    except ImportError:
        return
    if need > MEMORY_SHARE * available:
        raise InputError(
            f"{what}: about {need / 2**30:,.1f} GiB, more than {MEMORY_SHARE:.0%} of the "
            f"{available / 2**30:,.1f} GiB of memory available.",
            fix,
        )


def check_flags(params: dict, names, method: str) -> None:
    """`InputError` unless each of ``params[name]`` is True or False (NumPy's bools too)."""
    for name in names:
        if not isinstance(params[name], (bool, np.bool_)):
            raise InputError(
                f"{method} needs {name} as True or False; found {params[name]!r}.",
                f"pass {name}=True or {name}=False.",
            )


def check_n_features(estimator, X, n_features: int):
    if X.shape[1] != n_features:
        raise InputError(
            f"X has {X.shape[1]} features, but {type(estimator).__name__} is expecting "
            f"{n_features} features as input.",
            "pass data with the same columns, in the same order, as the data it was fitted on.",
        )


def check_is_fitted(estimator, attribute: str):
    if not hasattr(estimator, attribute):
        raise NotFittedError(
            f"This {type(estimator).__name__} instance is not fitted yet. Call 'fit' with "
            "appropriate arguments before using this estimator."
        )


__all__ += [
    "check_fits_in_memory",
    "check_flags",
    "nonfinite_error",
    "InputTypeError",
    "check_is_fitted",
    "float_dtype",
    "sparse_refusal",
    "chain_name",
]
