"""Labels for the supervised methods (supervised PCA, kernel supervised PCA, HSIC): checked
and encoded (`check_labels`), aligned with X's row chunks, and factored for their kernel
(`label_map`, `label_factor`: B = Delta Delta^T, exactly or through a Nystrom map)."""

from __future__ import annotations

import numbers
from dataclasses import dataclass

import numpy as np

from .._compute import compute
from .._validation import describe_nonfinite, is_dask
from ..errors import InputError
from ..linalg import NystromMap, choose_landmarks, nystrom_map
from ..linalg.cross_moments import bad_labels as _bad_labels
from ..pairwise import check_kernel

LABEL_KERNELS = ("delta", "linear", "gaussian", "identity")


def check_choice(value, allowed, name: str, method: str, default: str) -> str:
    if not isinstance(value, str) or value not in allowed:
        raise InputError(
            f"{method} needs {name} in {', '.join(allowed)}; found {value!r}.",
            f"pass {name}='{default}' or another from that list.",
        )
    return value


def check_labels(y, n: int, label_kernel: str, *, method: str):
    """The labels as a 2-D (n, q) array (NumPy or dask); NumPy values are checked here."""
    if y is None:
        raise InputError(
            f"{method} requires y to be passed, but the target y is None.",
            "pass one label per row of X as y, or label_kernel='identity' (PCA).",
        )
    y = y if is_dask(y) else np.asarray(y)
    if y.ndim not in (1, 2) or y.shape[0] != n:
        raise InputError(
            f"{method} needs one label per row of X: X has {n} rows; y has shape {tuple(y.shape)}.",
            f"pass y of shape ({n},) or ({n}, q), in the row order of X.",
        )
    y2 = y.reshape(-1, 1) if y.ndim == 1 else y
    kind = y2.dtype.kind
    if label_kernel == "delta" and y2.shape[1] != 1:
        raise InputError(
            f"label_kernel='delta' needs one class label per row; found y of shape "
            f"{tuple(y.shape)}.",
            "pass a 1-D array of classes, or label_kernel='linear' for several real targets.",
        )
    if label_kernel != "delta" or kind == "c":
        y2 = real_labels(y2, label_kernel)
        kind = "f"
    if not is_dask(y2) and kind == "f":
        bad = ~np.isfinite(y2)
        if bad.any():
            raise _bad_labels(
                method,
                describe_nonfinite(
                    np.nonzero(bad.any(axis=1))[0],
                    int(np.isnan(y2).sum()),
                    int(bad.sum() - np.isnan(y2).sum()),
                    "y",
                ),
            )
    return y2


def real_labels(y2, label_kernel: str):
    if y2.dtype.kind in "fiubO":
        try:
            return y2.astype(np.float64)
        except (TypeError, ValueError):
            pass
    raise InputError(
        f"label_kernel={label_kernel!r} needs real-valued labels; found dtype "
        f"{y2.dtype} (Unknown label type).",
        "use label_kernel='delta' for class labels, or encode the targets as real numbers.",
    )


def clip_landmarks(m, n: int):
    """At most n landmarks (anything but an int is left to choose_landmarks to refuse)."""
    return min(m, n) if isinstance(m, numbers.Integral) and not isinstance(m, bool) else m


def align_labels(y2, X):
    """Labels with the row chunks of X (dask X), or in memory (NumPy X)."""
    if is_dask(X):
        import dask.array as da

        if is_dask(y2):
            return y2.rechunk({0: X.chunks[0], 1: -1})
        return da.from_array(y2, chunks=(X.chunks[0], -1))
    if is_dask(y2):
        (y2,) = compute(y2, stage="labels")
    return np.asarray(y2)


@dataclass
class LabelMap:
    """Maps a block of labels to its rows of Delta (B = Delta Delta^T)."""

    kind: str
    classes: np.ndarray | None = None  # delta
    nmap: NystromMap | None = None  # gaussian
    n_targets: int = 1

    @property
    def rank(self) -> int:
        if self.kind == "delta":
            return len(self.classes)
        return self.nmap.rank if self.kind == "gaussian" else self.n_targets

    def factor(self, yb) -> np.ndarray:
        yb = np.asarray(yb)
        if self.kind == "delta":
            return (yb[:, :1] == self.classes[None, :]).astype(np.float64)
        if self.kind == "gaussian":
            return np.asarray(self.nmap.features(yb.astype(np.float64)), dtype=np.float64)
        return yb.astype(np.float64)


def label_map(
    y2,
    kind: str,
    *,
    gamma=None,
    width=None,
    n_landmarks=100,
    random_state=0,
    method: str = "Supervised PCA",
) -> LabelMap:
    if kind == "delta":
        try:
            if is_dask(y2):
                import dask.array as da

                (classes,) = compute(da.unique(y2[:, 0]), stage="labels: classes")
            else:
                classes = np.unique(y2[:, 0])
        except TypeError as exc:  # objects that do not compare: None or numbers among text
            raise InputError(
                f"{method} with label_kernel='delta' needs class labels of one kind (all "
                f"numbers or all text); y has labels that cannot be compared ({exc}).",
                "fill or drop the rows with missing labels (None, NaN) from X and y "
                "together, and give every class label as text or every one as a number.",
            ) from None
        classes = np.asarray(classes)
        if classes.dtype.kind == "f" and not np.isfinite(classes).all():
            raise _bad_labels(method, "NaN or inf among the class labels of y")
        if len(classes) < 2:
            raise InputError(
                f"{method} with label_kernel='delta' needs at least 2 classes; "
                f"found 1 class ({classes[0]!r}) in y.",
                "pass labels of two or more classes, or real targets with label_kernel='linear'.",
            )
        return LabelMap("delta", classes=classes)
    q = y2.shape[1]
    if kind == "gaussian":
        params = check_kernel("gaussian", q, gamma=gamma, width=width)
        marks, _ = choose_landmarks(
            y2, clip_landmarks(n_landmarks, y2.shape[0]), "kmeans++", random_state
        )
        if not np.isfinite(marks).all():
            raise _bad_labels(method, "NaN or inf among the labels of y")
        return LabelMap("gaussian", nmap=nystrom_map(marks, params), n_targets=q)
    return LabelMap("linear", n_targets=q)


def label_factor(y2, lmap: LabelMap):
    """Delta for all rows: lazy (row chunks of y2) for dask, NumPy otherwise."""
    if not is_dask(y2):
        return lmap.factor(y2)
    return y2.map_blocks(lmap.factor, chunks=(y2.chunks[0], (lmap.rank,)), dtype=np.float64)


def prepare_labels(y, X, kind, *, gamma, width, n_landmarks, random_state, method):
    y2 = align_labels(check_labels(y, X.shape[0], kind, method=method), X)
    return y2, label_map(
        y2,
        kind,
        gamma=gamma,
        width=width,
        n_landmarks=n_landmarks,
        random_state=random_state,
        method=method,
    )


# ---------------------------------------------------------------- shared linear algebra
