"""`MethodSpec`: what the flow, the CLI, the README's method table and the contract tests know
about a method, declared once per method in `dimred_dask.methods.specs`.

A method's parameters and their defaults are its estimator's ``__init__`` keywords (the
scikit-learn convention, which ``get_params`` reads); their types and one-line descriptions
are the estimator's numpydoc ``Parameters`` section. A spec adds what the signature cannot say:
the flow's name, the function, what the method takes, which stages the flow adds, the
parameters the flow supplies itself, and the flow defaults that differ on purpose, each with
its reason. The flow's defaults are derived from these (`MethodSpec.flow_defaults`); the
function's keywords and the README's table are checked against them by the tests.
"""

from __future__ import annotations

import inspect
import re
from dataclasses import dataclass, field
from typing import Callable, Mapping

__all__ = ["MethodSpec", "Param"]


@dataclass(frozen=True)
class Param:
    """One parameter of a method as the flow takes it (``--param name=value``)."""

    name: str
    default: object
    type: str  # the numpydoc type line: "int, float in (0, 1) or None"
    doc: str  # the first sentence of its numpydoc description


@dataclass(frozen=True)
class MethodSpec:
    """A method of the product: its estimator, its function and what the flow adds.

    ``flow_supplied``: estimator parameters the flow sets itself (name -> why).
    ``flow_overrides``: flow defaults that differ from the estimator's (name -> (value, why)).
    ``not_in_estimator``: keywords only the function (or the flow) takes (name -> why).
    ``function_defaults``: the defaults a function applies to its ``**params``, when its
    signature does not list them.
    ``model``: the class of the function's result, with ``arrays`` / ``scalars`` /
    ``from_arrays`` (how a run store keeps it), ``transform`` where it places new rows and
    optionally ``summary`` (what the run's manifest records).
    ``check``: ``(params, shape) -> None``, the function's own checks of its parameters
    against the input's shape, raising `InputError`; the flow runs it before anything is
    written.

    A method with a ``model`` and a ``check`` needs no flow code: the flow's adapter is derived
    from its spec (``flows.adapter.adapter_from_spec``).
    """

    name: str
    estimator: type
    function: Callable
    takes: str  # what X is, in the README's words
    docs: tuple[str, str]  # (link text, docs/... target) of the method's detailed section
    flow_adds: str = ""  # the stages the flow adds before the fit
    more_functions: tuple[Callable, ...] = ()  # e.g. the parameter sweep
    follows_pca: bool = False  # may be the second step of a chain, pca+<name>
    flow_supplied: Mapping[str, str] = field(default_factory=dict)
    flow_overrides: Mapping[str, tuple[object, str]] = field(default_factory=dict)
    not_in_estimator: Mapping[str, str] = field(default_factory=dict)
    function_defaults: Mapping[str, object] | None = None
    model: type | None = None
    check: Callable[[dict, tuple], None] | None = None

    @property
    def summary(self) -> str:
        """The first sentence of the estimator's docstring."""
        paragraph = (self.estimator.__doc__ or "").strip().split("\n\n")[0]
        text = " ".join(line.strip() for line in paragraph.splitlines()).replace("``", "")
        return _first_sentence(text)

    def estimator_defaults(self) -> dict:
        sig = inspect.signature(self.estimator.__init__)
        return {
            k: p.default
            for k, p in sig.parameters.items()
            if k != "self" and p.default is not inspect.Parameter.empty
        }

    def flow_defaults(self) -> dict:
        """The flow's parameters and defaults: the estimator's, less those the flow supplies,
        with the flow's own defaults where they differ on purpose."""
        out = {k: v for k, v in self.estimator_defaults().items() if k not in self.flow_supplied}
        out.update({k: value for k, (value, _) in self.flow_overrides.items()})
        return out

    def params(self) -> list[Param]:
        """The flow's parameters with their defaults, types and one-line descriptions."""
        docs = numpydoc_parameters(self.function.__doc__ or "")
        # the estimator's own entry where it says more than a type
        docs.update(
            (k, v) for k, v in numpydoc_parameters(self.estimator.__doc__ or "").items() if v[1]
        )
        return [
            Param(name, default, *docs.get(name, ("", "")))
            for name, default in self.flow_defaults().items()
        ]


def _first_sentence(text: str) -> str:
    """Up to the first full stop that ends a sentence (not the one of "et al.")."""
    return re.split(r"(?<=\.)(?<! al\.)(?<!e\.g\.)(?<!i\.e\.)\s", text, maxsplit=1)[0]


def numpydoc_parameters(doc: str) -> dict[str, tuple[str, str]]:
    """{name: (type, first sentence)} from a numpydoc ``Parameters`` section; a line
    ``a, b : int`` documents both names."""
    doc = inspect.cleandoc(doc)
    m = re.search(r"^Parameters\n-{3,}\n(.*?)(?:\n\n[A-Z][A-Za-z ]+\n-{3,}\n|\Z)", doc, re.S | re.M)
    if not m:
        return {}
    out: dict[str, tuple[str, str]] = {}
    names: list[str] = []
    kind = ""
    text: list[str] = []

    def flush():
        sentence = " ".join(text).strip()
        sentence = _first_sentence(sentence)
        for n in names:
            out[n] = (kind, sentence)

    for line in m.group(1).splitlines():
        if line and not line.startswith(" "):
            flush()
            head, _, kind = line.partition(" : ")
            names = [n.strip() for n in head.split(",") if n.strip()]
            kind = kind.strip()
            text = []
        elif line.strip():
            text.append(line.strip())
    flush()
    return out
