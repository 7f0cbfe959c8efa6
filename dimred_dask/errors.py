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
    "InputChangedError",
    "ServiceError",
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


def _is_local_failure(exc: BaseException, location) -> bool:
    """Whether ``exc`` is a local filesystem's (a disk, a mount), not object storage's."""
    if location is not None:
        return bool(getattr(location, "is_local", False))
    if type(exc).__module__.startswith(_NETWORK_MODULES) or "AccessDenied" in str(exc):
        return False
    return isinstance(exc, OSError) and getattr(exc, "errno", None) is not None


def _local_storage_error(exc: BaseException, where: str) -> "StoreError":
    import errno as _errno

    code = getattr(exc, "errno", None)
    name = _errno.errorcode.get(code, type(exc).__name__) if code else type(exc).__name__
    if code in (_errno.ENOSPC, getattr(_errno, "EDQUOT", -1)):
        return StoreError(
            f"{where}: the disk is full ({name}: {exc}).",
            "free space on that disk (df -h shows it) or choose an output on another disk, "
            "then run the same command again (committed stages are reused).",
        )
    if code == _errno.EROFS:
        return StoreError(
            f"{where}: the filesystem is read-only ({exc}).",
            "choose an output on a writable disk (or mount this one read-write).",
        )
    if isinstance(exc, PermissionError) or code in (_errno.EACCES, _errno.EPERM):
        return StoreError(
            f"{where}: permission denied ({exc}).",
            "give this user write access to that folder (ls -ld shows who may write), or "
            "choose another output.",
        )
    if isinstance(exc, FileNotFoundError):
        return StoreError(f"{where}: not found ({exc}).", "check the path.")
    return StoreError(
        f"{where}: the local filesystem failed ({name}: {exc}).",
        "check the disk (dmesg, df -h) and run the same command again.",
    )


def storage_error(exc: BaseException, where: str, *, location=None) -> "StoreError":
    """The `StoreError` for a storage or network failure met while reading or writing
    ``where``, its fix fitting the kind of location: a local disk (full, read-only,
    permission denied) or object storage (unreachable, denied, missing bucket, no
    credentials). ``location``: the `Location` concerned, when known (else the kind is
    told from the exception)."""
    if isinstance(exc, StoreError):
        return exc
    if _is_local_failure(exc, location):
        return _local_storage_error(exc, where)
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
    if isinstance(exc, FileNotFoundError) or "NoSuchBucket" in str(exc):
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


class InputChangedError(InputError):
    """An input changed while a run read it: the stage that found it commits nothing."""


class ServiceError(_Explained, DimredError, ConnectionError):
    """A service a run needs (Prefect's API, the Dask scheduler) could not be reached."""


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
