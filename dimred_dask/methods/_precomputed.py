"""A precomputed distance matrix for the distance methods: checked (square, finite,
non-negative, symmetric with a zero diagonal to rounding) and cleaned in one pass, lazily for
dask input (`check_distance_matrix`), and its double-centring statistics."""

from __future__ import annotations

import numpy as np

from .._compute import compute
from .._validation import check_array, describe_nonfinite, is_dask
from ..blocks.centring import sample_block
from ..errors import InputError
from ..pairwise import center_stats

__all__ = [
    "SYMMETRY_RTOL",
    "as_square",
    "check_distance_matrix",
    "checked_distances",
    "distance_stats",
    "evaluate",
    "principal_submatrix",
]

# A precomputed D counts as symmetric with a zero diagonal when max|D - D^T| and max|d_ii|
# are at most this times max|D|. float64: 1e-8 is far above the rounding left by computing
# d(x, y) and d(y, x) separately (~1e-15) and far below a real asymmetry. float32 (a matrix
# read from a store) carries 6e-8 relative rounding per entry: 100 float32 epsilons.
SYMMETRY_RTOL = {np.dtype(np.float64): 1e-8, np.dtype(np.float32): 1e-5}


def evaluate(*objs, stage: str):
    """The values of ``objs``: dask ones computed together in one `compute`, others as is."""
    lazy = [i for i, o in enumerate(objs) if is_dask(o)]
    out = list(objs)
    if lazy:
        for i, v in zip(lazy, compute(*[objs[i] for i in lazy], stage=stage)):
            out[i] = v
    return tuple(out)


def principal_submatrix(D, idx: np.ndarray):
    """D[idx][:, idx] for ascending row numbers ``idx``: for dask ``D`` one task per block
    that holds some of them, taking its entries in place (dask's fancy indexing of rows then
    columns makes an intermediate of len(idx) whole rows and several tasks a block)."""
    if not is_dask(D):
        return D[np.ix_(idx, idx)]
    import dask.array as da
    from dask import delayed

    idx = np.asarray(idx, np.int64)
    take = delayed(sample_block, pure=True)
    blocks = D.to_delayed()
    row_parts, col_parts = _local(idx, D.chunks[0]), _local(idx, D.chunks[1])
    return da.block(
        [
            [
                da.from_delayed(take(blocks[i, j], r, c), shape=(r.size, c.size), dtype=D.dtype)
                for j, c in col_parts
            ]
            for i, r in row_parts
        ]
    )


def _local(idx: np.ndarray, chunks) -> list:
    """(block number, row numbers within it) of the blocks that hold some of ``idx``."""
    starts = np.cumsum((0,) + tuple(chunks))
    where = np.searchsorted(starts, idx, side="right") - 1
    return [(int(b), idx[where == b] - starts[b]) for b in np.unique(where)]


# --------------------------------------------------------------------------- precomputed D


def as_square(D, where: str, method: str):
    D = check_array(D, method=method, where=where, check_finite=False)
    if D.shape[0] != D.shape[1]:
        raise InputError(
            f"{method} with metric='precomputed' needs a square n x n distance matrix; found "
            f"shape {tuple(D.shape)} in {where}.",
            "pass the distances between all pairs of the n points (D[i, j] = d(x_i, x_j)), or "
            "pass the data rows with a metric such as metric='euclidean'.",
        )
    return D


def _value_checks(D) -> dict:
    """Per-row reductions that locate every kind of bad entry; lazy (one pass) for dask."""
    import dask.array as da

    xp = da if is_dask(D) else np
    bad = ~xp.isfinite(D)
    safe = xp.where(bad, 0, D)
    asym = abs(safe - safe.T)
    return {
        "bad_rows": bad.sum(axis=1),
        "bad_cols": bad.argmax(axis=1),
        "n_nan": xp.isnan(D).sum(),
        "n_neg": (safe < 0).sum(),
        "row_min": safe.min(axis=1),
        "min_cols": safe.argmin(axis=1),
        "asym": asym.max(axis=1),
        "asym_cols": asym.argmax(axis=1),
        "diag": xp.diagonal(safe),
        "absmax": abs(safe).max(),
    }


def _refuse_bad_values(D, v: dict, where: str, method: str) -> bool:
    """Raise `InputError` naming the first bad entry; True when D needs exact cleaning."""
    if v["bad_rows"].sum():
        rows = np.nonzero(v["bad_rows"])[0]
        i, total, n_nan = int(rows[0]), int(v["bad_rows"].sum()), int(v["n_nan"])
        found = describe_nonfinite(rows, n_nan, total - n_nan, where)
        raise InputError(
            f"{method} needs finite distances; found {found} (the first at "
            f"{where}[{i}, {int(v['bad_cols'][i])}]).",
            "recompute the missing distances, or drop those points (their rows and columns).",
        )
    i = int(np.argmin(v["row_min"]))
    if v["row_min"][i] < 0:
        j, others = int(v["min_cols"][i]), int(v["n_neg"]) - 1
        more = f" ({others} other negative entries)" if others else ""
        raise InputError(
            f"{method} needs distances >= 0; found {where}[{i}, {j}] = {v['row_min'][i]:.6g} "
            f"< 0{more}.",
            "pass distances, not similarities or signed differences; a "
            "similarity s converts to a distance as sqrt(s_ii + s_jj - 2 s_ij).",
        )
    rtol = SYMMETRY_RTOL.get(np.dtype(D.dtype), 1e-8)
    tol = rtol * float(v["absmax"])
    i = int(np.argmax(np.abs(v["diag"])))
    if abs(v["diag"][i]) > tol:
        raise InputError(
            f"{method} needs a zero diagonal (d(x, x) = 0); found {where}[{i}, {i}] = "
            f"{v['diag'][i]:.6g} (more than {rtol:g} * max|D| from 0).",
            "set the diagonal to 0 (np.fill_diagonal(D, 0)) if it is noise; a matrix of "
            "similarities must be converted to distances first.",
        )
    i = int(np.argmax(v["asym"]))
    if v["asym"][i] > tol:
        j = int(v["asym_cols"][i])
        a, b = evaluate(D[i, j], D[j, i], stage="MDS: asymmetric entries")
        raise InputError(
            f"{method} needs a symmetric distance matrix; found {where}[{i}, {j}] = {float(a):.6g}"
            f" but {where}[{j}, {i}] = {float(b):.6g} (max |D - D^T| = {v['asym'][i]:.3g} > "
            f"{rtol:g} * max|D|).",
            "symmetrise it, D = (D + D.T) / 2, if the difference is "
            "noise; a directed dissimilarity has no classical MDS.",
        )
    return bool(v["asym"].max() > 0 or np.abs(v["diag"]).max() > 0)


def _cleaned(D):
    """(D + D^T) / 2 with an exactly zero diagonal (removes asymmetry within tolerance)."""
    S = (D + D.T) / 2
    if is_dask(D):
        import dask.array as da

        return S - da.diag(da.diagonal(S))
    np.fill_diagonal(S, 0)
    return S


def checked_distances(D, where: str, method: str, extra=lambda _: ()):
    """Validate D in one pass; ``extra(D)`` (more dask collections made from D) is computed
    in the same pass. Returns (D, the values of extra(D))."""
    D = as_square(D, where, method)
    checks = _value_checks(D)
    values = evaluate(*checks.values(), *extra(D), stage="MDS: check the distance matrix")
    dirty = _refuse_bad_values(D, dict(zip(checks, values)), where, method)
    rest = values[len(checks) :]
    if dirty:
        D = _cleaned(D)
        rest = evaluate(*extra(D), stage="MDS: distance row means")
    return D, rest


def check_distance_matrix(D, *, where: str = "D", method: str = "MDS"):
    """Return ``D`` (NumPy or dask, n x n) as a float matrix fit for MDS, or raise `InputError`.

    Asymmetry and diagonal within the tolerance are removed exactly. For a dask D all checks
    are one pass of reductions.

    Parameters
    ----------
    D : array-like or dask array of shape (n, n)
        The distance matrix.
    where : str, default "D"
        The name of the input in error messages.
    method : str, default "MDS"
        The method named in error messages.

    Returns
    -------
    array or dask array of shape (n, n)
        ``D`` as a float matrix, exactly symmetric with a zero diagonal.

    Raises
    ------
    InputError
        ``D`` is not square; has NaN or inf; has a negative entry; has a diagonal entry or an
        asymmetry max|D - D^T| above ``SYMMETRY_RTOL`` * max|D|.
    """
    D, _ = checked_distances(D, where, method, extra=lambda _: ())
    return D


def distance_stats(D):
    return center_stats(D.astype(np.float64) ** 2)
