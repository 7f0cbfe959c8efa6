"""`MethodSpec`: what the flow, the CLI, the README's method table and the contract tests know
about a method, declared once per method in its own module (``METHOD_SPECS``), where
`dimred_dask.methods.specs` finds it.

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

__all__ = [
    "MethodSpec",
    "Family",
    "Param",
    "document_parameters",
    "numpydoc_parameters",
    "DOCS_PCA",
    "DOCS_LINEAR",
    "DOCS_GRAPH",
    "DOCS_NEIGHBOUR",
    "DOCS_SDP",
]


@dataclass(frozen=True)
class Family:
    """A family of methods: its section of ``docs/methods.md`` (the README table's link) and
    its place in the table (families in ``rank`` order, methods by name within one)."""

    rank: int
    title: str
    target: str


DOCS_PCA = Family(0, "PCA", "docs/methods.md#pca-solvers-sparse-input-float32")
DOCS_LINEAR = Family(
    1, "kernel, distance and supervised", "docs/methods.md#kernel-distance-and-supervised-methods"
)
DOCS_GRAPH = Family(
    2,
    "graph methods",
    "docs/methods.md#graph-methods-isomap-lle-laplacian-eigenmaps-spectral-clustering",
)
DOCS_NEIGHBOUR = Family(
    3, "neighbour embeddings", "docs/methods.md#t-sne-umap-and-sne-neighbour-embeddings"
)
DOCS_SDP = Family(
    4,
    "semidefinite embeddings",
    "docs/methods.md#semidefinite-embeddings-mvu-action-respecting-embedding-landmark-mvu",
)

# what several specs say alike
KNN_STAGE = "the kNN stage"
NEIGHBOUR_ADDS = "the kNN stage, checkpoints; one fit over all workers (`optimizer=distributed`)"
# the flow writes its own checkpoints into the run store, relays progress to Prefect and
# chooses the threads of each embedding task
OPTIMISER_SUPPLIED = {
    "checkpoint": "the flow checkpoints into the run store",
    "callback": "the flow relays progress to Prefect",
    "n_jobs": "the flow chooses each embedding task's threads",
}
SDP_FUNCTION_ONLY = {"verbose": "prints the SDP solver's own log (a debugging aid)"}


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
    ``second_input``: "labels" or "actions" when the function takes the labels (the flow's
    ``--labels``) or the actions between consecutive rows (``--actions``) as its second
    argument.
    ``knn_graph``: the kNN graph the flow builds first (its kNN stage) and passes to the
    function as ``graph=``: "connected" (a disconnected graph is joined with
    ``join_components`` or refused), "components" (kept as it is), or a function of the
    parameters giving one of these or "" (no graph). The graph's options are the method's
    ``n_neighbors``, ``metric``, ``knn_backend``, ``join_components`` and ``random_state``.
    ``flow_function``: what the flow calls instead of ``function`` (same parameters), e.g. a
    route that leaves the fit's large arrays on the workers.
    ``graph_in_store``: the flow passes the kNN graph unread, as a graph source over the run
    store (``graphs.affinities.graph_rows``), for a fit that reads it where it is used.

    A method with a ``model`` and a ``check`` needs no flow code: the flow's adapter is derived
    from its spec (``flows.adapter.adapter_from_spec``).
    """

    name: str
    estimator: type
    function: Callable
    takes: str  # what X is, in the README's words
    docs: Family  # the family whose section of docs/methods.md details the method
    flow_adds: str = ""  # the stages the flow adds before the fit
    more_functions: tuple[Callable, ...] = ()  # e.g. the parameter sweep
    follows_pca: bool = False  # may be the second step of a chain, pca+<name>
    flow_supplied: Mapping[str, str] = field(default_factory=dict)
    flow_overrides: Mapping[str, tuple[object, str]] = field(default_factory=dict)
    not_in_estimator: Mapping[str, str] = field(default_factory=dict)
    function_defaults: Mapping[str, object] | None = None
    model: type | None = None  # the class of the function's result
    check: Callable[[dict, tuple], None] | None = None
    second_input: str = ""
    knn_graph: str | Callable[[dict], str] = ""
    flow_function: Callable | None = None
    graph_in_store: bool = False

    def __post_init__(self):
        if not callable(self.knn_graph) and self.knn_graph not in ("", "connected", "components"):
            raise ValueError(f"knn_graph of {self.name!r}: {self.knn_graph!r}")
        document_parameters(self.estimator, self.function)

    @property
    def summary(self) -> str:
        """The first sentence of the estimator's docstring."""
        paragraph = (self.estimator.__doc__ or "").strip().split("\n\n")[0]
        text = " ".join(line.strip() for line in paragraph.splitlines()).replace("``", "")
        return _first_sentence(text)

    def exports(self) -> dict:
        """The names the package exports for the method: its estimator, its functions and
        its model class."""
        objects = (self.estimator, self.function, *self.more_functions, self.model)
        return {obj.__name__: obj for obj in objects if obj is not None}

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
        """The flow's parameters with their defaults, types and one-line descriptions (the
        estimator's, completed from the function's by `document_parameters`)."""
        docs = numpydoc_parameters(self.estimator.__doc__ or "")
        return [
            Param(name, default, *docs.get(name, ("", "")))
            for name, default in self.flow_defaults().items()
        ]


def _first_sentence(text: str) -> str:
    """Up to the first full stop that ends a sentence (not the one of "et al.")."""
    return re.split(r"(?<=\.)(?<! al\.)(?<!e\.g\.)(?<!i\.e\.)\s", text, maxsplit=1)[0]


_SECTION = r"^Parameters\n-{3,}\n(.*?)(?=\n\n[A-Z][A-Za-z ]+\n-{3,}\n|\n*\Z)"


def numpydoc_entries(doc: str) -> dict[str, tuple[str, list[str]]]:
    """{name: (type, description lines)} from a numpydoc ``Parameters`` section, in its
    order; a line ``a, b : int`` documents both names."""
    m = re.search(_SECTION, inspect.cleandoc(doc or ""), re.S | re.M)
    out: dict[str, tuple[str, list[str]]] = {}
    for line in (m.group(1) if m else "").splitlines():
        if line and not line.startswith(" "):
            head, _, kind = line.partition(" : ")
            text: list[str] = []  # shared by the names of one entry
            for name in (n.strip() for n in head.split(",")):
                if name:
                    out[name] = (kind.strip(), text)
        elif out:
            text.append(line[4:] if line.startswith("    ") else line.strip())
    for kind, text in out.values():
        while text and not text[-1].strip():
            text.pop()
    return out


def numpydoc_parameters(doc: str) -> dict[str, tuple[str, str]]:
    """{name: (type, first sentence)} from a numpydoc ``Parameters`` section."""
    return {
        name: (kind, _first_sentence(" ".join(t.strip() for t in text).strip()))
        for name, (kind, text) in numpydoc_entries(doc).items()
    }


def document_parameters(estimator: type, function: Callable) -> None:
    """Write the estimator's numpydoc ``Parameters`` section from its ``__init__`` keywords:
    its own entry where it describes the parameter, else the function's (type and
    description), so that a parameter is described in one place. Where the estimator's
    docstring has no such section, it goes before its first section."""
    doc = inspect.cleandoc(estimator.__doc__ or "")
    own, theirs = numpydoc_entries(doc), numpydoc_entries(function.__doc__ or "")
    lines = ["Parameters", "----------"]
    for name in inspect.signature(estimator.__init__).parameters:
        if name == "self":
            continue
        kind, text = own.get(name, ("", []))
        if not any(t.strip() for t in text):
            kind, text = theirs.get(name, (kind, text))
        lines.append(f"{name} : {kind}" if kind else name)
        lines.extend(f"    {t}" if t.strip() else "" for t in text)
    section = "\n".join(lines)
    if re.search(_SECTION, doc, re.S | re.M):
        doc = re.sub(_SECTION, lambda _: section, doc, count=1, flags=re.S | re.M)
    else:  # before the first section (numpydoc's order), else at the end
        head = re.search(r"\n\n(?=[A-Z][A-Za-z ]+\n-{3,}\n)", doc)
        at = head.start() if head else len(doc)
        doc = f"{doc[:at]}\n\n{section}{doc[at:]}"
    estimator.__doc__ = doc
