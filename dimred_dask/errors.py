"""Typed errors and warnings.

Every error says what was expected, what was found and how to fix it. `InputError`
subclasses ``ValueError`` so code written against scikit-learn's conventions keeps working.
"""
from __future__ import annotations

__all__ = [
    "DimredError",
    "InputError",
    "InputTypeError",
    "ChunkingError",
    "StoreError",
    "StageError",
    "OutputExistsError",
    "UncommittedOutputError",
    "DisconnectedGraphError",
    "InfeasibleError",
    "SolverError",
    "NotFittedError",
    "ConvergenceWarning",
    "DimredWarning",
]


class DimredError(Exception):
    """Base class of every error raised by dimred-dask."""


def _compose(problem: str, fix: str | None) -> str:
    return problem if not fix else f"{problem}\nFix: {fix}"


class _Explained:
    """An error made of what went wrong (``problem``) and what to do (``fix``)."""

    def __init__(self, problem: str, fix: str | None = None):
        self.problem = problem
        self.fix = fix
        super().__init__(_compose(problem, fix))


class InputError(_Explained, DimredError, ValueError):
    """The input data or an argument is not what the method needs."""


class InputTypeError(InputError, TypeError):
    """The input has a type that cannot be read as real numbers (text, objects, sparse)."""


class ChunkingError(InputError):
    """The chunking of a dask/zarr array does not suit the computation."""


def storage_error(exc: OSError, where: str) -> "StoreError":
    """The `StoreError` for an OSError met while reading or writing ``where``."""
    if isinstance(exc, PermissionError):
        return StoreError(f"{where}: access denied by the storage ({exc}).",
                          "check the credentials (AWS_* variables) and the bucket policy.")
    if isinstance(exc, FileNotFoundError):
        return StoreError(f"{where}: not found in the storage ({exc}).",
                          "check that the bucket and the path exist.")
    return StoreError(f"{where}: storage error that did not clear after retries ({exc}).",
                      "check the storage endpoint (AWS_ENDPOINT_URL) and try again.")


class StoreError(_Explained, DimredError, OSError):
    """Reading or writing a store (local folder, object storage) failed."""


class StageError(_Explained, DimredError, RuntimeError):
    """A stage of a run failed for a reason outside the input (workers lost, memory)."""


class OutputExistsError(StoreError, FileExistsError):
    """The output location already holds data and ``overwrite`` was not given."""


class UncommittedOutputError(StoreError):
    """An output was read that has no ``_COMMITTED`` marker (a run that did not finish)."""


class NotFittedError(DimredError, ValueError, AttributeError):
    """A method that needs a fitted estimator was called before ``fit``."""


class DisconnectedGraphError(InputError):
    """A neighbour graph has more than one connected component."""


class InfeasibleError(InputError):
    """The constraints of an optimisation problem (e.g. MVU's distances) cannot all hold."""


class SolverError(_Explained, DimredError, RuntimeError):
    """A numerical solver stopped without reaching the requested accuracy."""


class DimredWarning(UserWarning):
    """Something worth knowing that does not stop the computation."""


class ConvergenceWarning(DimredWarning):
    """An iterative solver stopped before reaching its tolerance."""
