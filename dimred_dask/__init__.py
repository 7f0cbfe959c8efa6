"""dimred-dask: distributed dimensionality reduction on chunked arrays."""

from typing import TYPE_CHECKING

from .errors import (
    ChunkingError,
    ConvergenceWarning,
    DimredError,
    DimredWarning,
    DisconnectedGraphError,
    InfeasibleError,
    InputError,
    InputTypeError,
    NotFittedError,
    OutputExistsError,
    SolverError,
    StageError,
    StoreError,
    UncommittedOutputError,
)

# The estimators and functions are imported on first use (PEP 562): `import dimred_dask` and
# its errors stay cheap for the CLI's commands that need no method (inspect, --help) and for
# the modules that import only the errors. The package exports every public name of
# `dimred_dask.methods` (its ``__all__``) except the registry's own, so a new method is
# exported by listing it there.
_METHODS_ONLY = frozenset(
    {"SPECS", "MethodSpec", "SPARSE_METHODS", "accepts_sparse", "check_sparse_input"}
)
_ERRORS = [
    "DimredError",
    "InputError",
    "InputTypeError",
    "ChunkingError",
    "StoreError",
    "OutputExistsError",
    "UncommittedOutputError",
    "DisconnectedGraphError",
    "NotFittedError",
    "ConvergenceWarning",
    "DimredWarning",
    "StageError",
    "InfeasibleError",
    "SolverError",
]


def _methods():
    import importlib  # not `from . import methods`: that asks this __getattr__ first

    return importlib.import_module(f"{__name__}.methods")


def _method_names() -> list[str]:
    return [name for name in _methods().__all__ if name not in _METHODS_ONLY]


# a finished run's model, to place new rows (`dimred_dask.runs`), also imported on first use
_RUNS = ("load_model", "RunModel")


def __getattr__(name: str):
    if name == "__all__":
        value = [*_method_names(), *_RUNS, *_ERRORS, "__version__"]
    elif name in _RUNS:
        import importlib

        value = getattr(importlib.import_module(f"{__name__}.runs"), name)
    elif name.startswith("__") or name not in _method_names():
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    else:
        value = getattr(_methods(), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(_method_names()) | set(_RUNS))


if TYPE_CHECKING:  # the names as static analysis and documentation tools should see them
    from .methods import *  # noqa: F403


__version__ = "0.1.0"
