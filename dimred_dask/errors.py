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


_NETWORK_MODULES = (
    "botocore",
    "aiobotocore",
    "aiohttp",
    "s3fs",
    "urllib3",
    "requests",
    "httpx",
    "gcsfs",
    "adlfs",
)


def is_storage_error(exc: BaseException) -> bool:
    """Whether ``exc`` comes from the storage or the network under it (not from the data)."""
    return isinstance(exc, (OSError, TimeoutError)) or type(exc).__module__.startswith(
        _NETWORK_MODULES
    )


def storage_error(exc: BaseException, where: str) -> "StoreError":
    """The `StoreError` for a storage or network failure met while reading or writing ``where``."""
    if isinstance(exc, StoreError):
        return exc
    name = type(exc).__name__
    if isinstance(exc, PermissionError) or "AccessDenied" in str(exc):
        return StoreError(
            f"{where}: access denied by the storage ({exc}).",
            "check the credentials (AWS_* variables) and the bucket policy.",
        )
    if "Credentials" in name:
        return StoreError(
            f"{where}: no credentials for the object storage ({name}: {exc}).",
            "set AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY (or pass "
            "--credentials-block) in the flow's and the workers' environment.",
        )
    if isinstance(exc, FileNotFoundError):
        return StoreError(
            f"{where}: not found in the storage ({exc}).",
            "check that the bucket and the path exist.",
        )
    if (
        isinstance(exc, (ConnectionError, TimeoutError))
        or "Connect" in name
        or "Endpoint" in name
        or "Timeout" in name
    ):
        return StoreError(
            f"{where}: could not reach the storage ({name}: {exc}).",
            "check the endpoint (AWS_ENDPOINT_URL), that the server is up and "
            "reachable from this machine and the workers, then re-run.",
        )
    return StoreError(
        f"{where}: storage error that did not clear after retries ({name}: {exc}).",
        "check the storage endpoint (AWS_ENDPOINT_URL) and try again.",
    )


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


class SolverError(StageError):
    """A numerical solver stopped without reaching the requested accuracy (and had no robust
    alternative that did): the fit is refused rather than returned worse."""


class DimredWarning(UserWarning):
    """Something worth knowing that does not stop the computation."""


class ConvergenceWarning(DimredWarning):
    """An iterative solver stopped before reaching its tolerance."""
