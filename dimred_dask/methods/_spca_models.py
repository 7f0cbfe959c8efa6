"""The fitted models of supervised PCA and kernel supervised PCA (`dimred_dask.methods.spca`):
small arrays, kept in a run store by ``arrays`` / ``scalars`` and read back by ``from_arrays``."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import partial
from typing import Any

import numpy as np

from .._validation import is_sparse_input
from ..blocks.kernels import kernel_block
from ._base import HasConvergence, centred_product, rowwise, sparse_affine


class _Summary:
    def summary(self) -> dict:
        """What a run's manifest records of the fit: the eigenvalues, the model's scalars and
        the records of its iterative solves."""
        scalars = self.scalars().items()
        return {
            "n_components": int(np.asarray(self.eigenvalues).size),
            "eigenvalues": np.asarray(self.eigenvalues, dtype=float).tolist(),
            **{k: v for k, v in scalars if isinstance(v, (int, float, str, bool)) or v is None},
            "convergence": self.convergence,
        }


@dataclass
class SupervisedPCAModel(_Summary, HasConvergence):
    """A fitted supervised PCA: small arrays only."""

    components: np.ndarray  # (k, d); zero on the features Bair's screening dropped
    mean: np.ndarray  # (d,)
    eigenvalues: np.ndarray  # (k,) eigenvalues of Q = Xc^T B Xc
    n_samples: int
    label_kernel: str = "delta"
    selected_features: np.ndarray | None = None  # Bair: indices of the kept features
    feature_scores: np.ndarray | None = None  # Bair: max_c |s_jc| for each feature
    info: dict = field(default_factory=dict)

    @property
    def n_components(self) -> int:
        return self.components.shape[0]

    def transform(self, X):
        """Encode: Y = (X - mean) U (lazy rowwise for dask input; X U - 1 (mean^T U) for
        sparse X, never centred). The mean is kept in float64: float32 rows far from the
        origin are centred on its float32 rounding and the rest is added after the product."""
        dtype = X.dtype
        w = self.components.T.astype(np.float64)
        if is_sparse_input(X):
            return sparse_affine(X, w, self.mean, dtype)
        mu = self.mean.astype(dtype)
        shift = ((mu - self.mean) @ w).astype(dtype)
        w = w.astype(dtype)
        return rowwise(
            X,
            partial(centred_product, mu=mu, w=w, shift=shift, dtype=dtype),
            self.n_components,
            dtype,
        )

    def inverse_transform(self, Y):
        """Reconstruct: X^ = Y U^T + mean."""
        dtype = Y.dtype
        u, mu = self.components.astype(dtype), self.mean.astype(dtype)
        return rowwise(Y, lambda b: b @ u + mu, self.mean.shape[0], dtype)

    def arrays(self) -> dict[str, np.ndarray]:
        out = {"components_": self.components, "mean_": self.mean, "eigenvalues_": self.eigenvalues}
        if self.selected_features is not None:
            out["selected_features_"] = self.selected_features
            out["feature_scores_"] = self.feature_scores
        return out

    def scalars(self) -> dict:
        return {"n_samples": int(self.n_samples), "label_kernel": self.label_kernel, **self.info}

    @classmethod
    def from_arrays(cls, arrays: dict, scalars: dict) -> "SupervisedPCAModel":
        extra = {k: v for k, v in scalars.items() if k not in ("n_samples", "label_kernel")}
        opt = {
            k: (None if arrays.get(k + "_") is None else np.asarray(arrays[k + "_"]))
            for k in ("selected_features", "feature_scores")
        }
        return cls(
            np.asarray(arrays["components_"]),
            np.asarray(arrays["mean_"]),
            np.asarray(arrays["eigenvalues_"]),
            int(scalars["n_samples"]),
            scalars["label_kernel"],
            info=extra,
            **opt,
        )


@dataclass
class KernelSupervisedPCAModel(_Summary, HasConvergence):
    """A fitted kernel SPCA: y(x) = k(x, reference) dual_coef."""

    reference: np.ndarray  # (m, d): the training rows (dense) or the landmarks (nystrom)
    dual_coef: np.ndarray  # (m, k): beta (dense) or U_W S_W^-1/2 a (nystrom)
    eigenvalues: np.ndarray  # (k,) eigenvalues of Phi^T H B H Phi
    kernel: dict  # resolved kernel parameters (pairwise.check_kernel)
    n_samples: int
    solver: str = "dense"
    label_kernel: str = "delta"
    info: dict = field(default_factory=dict)
    embedding: Any = field(default=None, repr=False)  # training embedding; not part of arrays()

    @property
    def n_components(self) -> int:
        return self.dual_coef.shape[1]

    def transform(self, X):
        """y = k(x, reference) dual_coef for each row (lazy rowwise for dask input)."""
        dtype, ref, kernel = X.dtype, self.reference, self.kernel
        coef = self.dual_coef.astype(dtype)

        def encode(block):
            return kernel_block(block, ref.astype(block.dtype), **kernel) @ coef

        return rowwise(X, encode, self.n_components, dtype)

    def arrays(self) -> dict[str, np.ndarray]:
        return {
            "reference_": self.reference,
            "dual_coef_": self.dual_coef,
            "eigenvalues_": self.eigenvalues,
        }

    def scalars(self) -> dict:
        return {
            **self.info,
            **self.kernel,
            "n_samples": int(self.n_samples),
            "solver": self.solver,
            "label_kernel": self.label_kernel,
        }

    @classmethod
    def from_arrays(cls, arrays: dict, scalars: dict) -> "KernelSupervisedPCAModel":
        keys = ("kernel", "gamma", "degree", "coef0")
        kernel = {k: scalars[k] for k in keys if k in scalars}
        info = {
            k: v
            for k, v in scalars.items()
            if k not in keys + ("n_samples", "solver", "label_kernel")
        }
        return cls(
            np.asarray(arrays["reference_"]),
            np.asarray(arrays["dual_coef_"]),
            np.asarray(arrays["eigenvalues_"]),
            kernel,
            int(scalars["n_samples"]),
            scalars["solver"],
            scalars["label_kernel"],
            info,
        )
