"""The product's methods: `SPECS`, every `MethodSpec` the method modules of this package
declare (a module's ``METHOD_SPECS``), found by importing them. The flow (``--method``), the
CLI (``dimred-dask methods``), the package's exports, the README's method table and the
contract tests read it, so a new method is its module: nothing here lists it.

Parameters and defaults are the estimators' (see `dimred_dask.methods._spec`); a spec lists
only what differs in the flow, with its reason.
"""

from __future__ import annotations

import importlib
import pkgutil
from pathlib import Path

from .._validation import register_method_names
from ._spec import MethodSpec

__all__ = ["SPECS", "MethodSpec", "method_exports"]

# the modules of this package that read the registry, and so declare no method
_READERS = frozenset({"chain", "specs", "sparse_support"})

MODULES = tuple(
    importlib.import_module(f"{__package__}.{info.name}")
    for info in pkgutil.iter_modules([str(Path(__file__).parent)])
    if not info.name.startswith("_") and info.name not in _READERS
)


def _collect() -> dict[str, MethodSpec]:
    found = sorted(
        (spec for module in MODULES for spec in getattr(module, "METHOD_SPECS", ())),
        key=lambda spec: (spec.docs.rank, spec.name),
    )
    specs: dict[str, MethodSpec] = {}
    for spec in found:
        if spec.name in specs:
            raise RuntimeError(f"two method specs are named {spec.name!r}")
        specs[spec.name] = spec
    return specs


SPECS: dict[str, MethodSpec] = _collect()


def method_exports() -> dict:
    """{name: object} the package exports for its methods: each method's estimator,
    functions and model class (`MethodSpec.exports`)."""
    out: dict = {}
    for spec in SPECS.values():
        out.update(spec.exports())
    return out


# the names a method goes by in its messages ("t-SNE", "LandmarkIsomap", "kernel_pca"): a
# refusal of sparse input names the chain through PCA from them (PCA itself takes sparse input)
register_method_names(
    {
        text: spec.name
        for spec in SPECS.values()
        if spec.name != "pca"
        for text in (
            spec.name,
            spec.estimator.__name__,
            getattr(spec.estimator, "_method", None) or spec.name,
            spec.function.__name__,
        )
    }
)
