"""The graph methods' and neighbour embeddings' docstrings are written out in full in the
source, and what they share is written alike.

Pure inspection: no data, no cluster. The numpydoc entries of a parameter that several graph
methods' functions take with one meaning (``SHARED``; the neighbour embeddings',
``NEIGHBOUR_SHARED``) must have the same type line and the same description, line for line,
in each of them: a copy edited in one function and not in the others fails here. The
parameter checks of the graph methods' specs (``CHECKS``) are documented alike: what they
refuse before anything runs, their two parameters, and the
`InputError` naming the parameters they refuse.
"""

from __future__ import annotations

import importlib
import inspect
import re

import pytest

# the modules (``dimred_dask.methods`` exports functions of their names)
isomap_module = importlib.import_module("dimred_dask.methods.isomap")
laplacian_module = importlib.import_module("dimred_dask.methods.laplacian_eigenmaps")
lle_module = importlib.import_module("dimred_dask.methods.lle")
spectral_module = importlib.import_module("dimred_dask.methods.spectral_clustering")
sne_module = importlib.import_module("dimred_dask.methods.sne")
tsne_module = importlib.import_module("dimred_dask.methods.tsne")
umap_module = importlib.import_module("dimred_dask.methods.umap")

isomap, landmark_isomap = isomap_module.isomap, isomap_module.landmark_isomap
laplacian_eigenmaps = laplacian_module.laplacian_eigenmaps
lle, spectral_clustering = lle_module.lle, spectral_module.spectral_clustering

# (parameters, the functions whose entries of them are written alike): a parameter may be in
# two groups when two families of functions describe it differently (Isomap's kNN metric
# refuses "precomputed"; LLE's and Laplacian eigenmaps' is "the kNN graph's")
SHARED = [
    (("X",), (isomap, landmark_isomap, laplacian_eigenmaps, lle, spectral_clustering)),
    (("n_neighbors",), (isomap, landmark_isomap, laplacian_eigenmaps)),
    (
        ("metric", "knn_backend", "join_components", "random_state", "graph"),
        (laplacian_eigenmaps, lle),
    ),
    (("metric", "knn_backend"), (laplacian_eigenmaps, lle, spectral_clustering)),
    (("metric", "knn_backend", "join_components", "graph"), (isomap, landmark_isomap)),
]
# the neighbour embeddings' functions and estimators (their functions take ``**params``, so
# only the entries they share are checked here, not that every parameter is documented)
sne_sweep, sne, SNE = sne_module.sne_sweep, sne_module.sne, sne_module.SNE
tsne_sweep, tsne, TSNE = tsne_module.tsne_sweep, tsne_module.tsne, tsne_module.TSNE
umap_sweep, umap, UMAP = umap_module.umap_sweep, umap_module.umap, umap_module.UMAP
NEIGHBOUR_SHARED = [
    (("X",), (tsne_sweep, tsne, umap_sweep, umap)),
    (("X", "graph"), (sne_sweep, sne)),
    (("graph",), (sne_sweep, sne, tsne_sweep, tsne)),
    (("checkpoint",), (sne_sweep, tsne_sweep, umap_sweep)),
    (("checkpoint",), (sne, tsne, umap)),
    (("n_jobs",), (tsne_sweep, umap_sweep)),
    (
        ("n_components", "perplexity", "min_gain", "max_step_norm", "n_neighbors"),
        (SNE, TSNE),
    ),
    (("checkpoint", "n_jobs", "metric", "knn_backend"), (SNE, TSNE, UMAP)),
    (("callback_every",), (SNE, TSNE)),
    (("fit_sample",), (TSNE, UMAP)),
]

# (check, the function it refuses the parameters of, the function whose keywords it reads)
CHECKS = [
    (isomap_module.check_isomap_on_workers_params, "isomap_on_workers", isomap),
    (isomap_module.check_landmark_isomap_params, "landmark_isomap", landmark_isomap),
    (laplacian_module.check_laplacian_params, "laplacian_eigenmaps", laplacian_eigenmaps),
    (lle_module.check_lle_params, "lle", lle),
    (spectral_module.check_spectral_params, "spectral_clustering", spectral_clustering),
]


def _section(doc: str, title: str) -> list[str]:
    """The lines of the numpydoc section ``title`` of ``doc`` (dedented), up to the next
    section's title; [] when there is none."""
    lines = inspect.cleandoc(doc or "").splitlines()
    for i in range(len(lines) - 1):
        if lines[i] == title and re.fullmatch(r"-{3,}", lines[i + 1]):
            body = []
            for j in range(i + 2, len(lines)):
                nxt = lines[j + 1] if j + 1 < len(lines) else ""
                if lines[j] and not lines[j].startswith(" ") and re.fullmatch(r"-{3,}", nxt):
                    break
                body.append(lines[j])
            while body and not body[-1].strip():
                body.pop()
            return body
    return []


def _entries(doc: str, title: str = "Parameters") -> dict[str, tuple[str, tuple[str, ...]]]:
    """{name: (type line, description lines as written)} of a section's entries: the lines
    at the section's indentation, ``name : type`` (or ``a, b : type``), and the lines below
    them, as written (their indentation included)."""
    out: dict[str, tuple[str, tuple[str, ...]]] = {}
    names: list[str] = []
    for line in _section(doc, title):
        if line and not line.startswith(" "):
            head, _, kind = line.partition(" : ")
            names = [n.strip() for n in head.split(",")]
            for name in names:
                assert name not in out, f"{name} documented twice"
                out[name] = (kind, ())
        else:
            assert names, f"a description line before any entry: {line!r}"
            for name in names:
                kind, text = out[name]
                out[name] = (kind, (*text, line))
    return {name: (kind, _trimmed(text)) for name, (kind, text) in out.items()}


def _trimmed(text: tuple[str, ...]) -> tuple[str, ...]:
    while text and not text[-1].strip():
        text = text[:-1]
    return text


def test_parser_reads_entries():
    doc = """Summary.

    Parameters
    ----------
    a : int, default 1
        First line.
        Second line.
    b, c : str

    Returns
    -------
    int
        Something.
    """
    entries = _entries(doc)
    assert entries == {
        "a": ("int, default 1", ("    First line.", "    Second line.")),
        "b": ("str", ()),
        "c": ("str", ()),
    }
    assert _entries(doc, "Returns") == {"int": ("", ("    Something.",))}


@pytest.mark.parametrize(
    ("names", "functions"),
    SHARED + NEIGHBOUR_SHARED,
    ids=[
        f"{'+'.join(n)}:{'+'.join(f.__name__ for f in fs)}" for n, fs in SHARED + NEIGHBOUR_SHARED
    ],
)
def test_shared_entries_are_written_alike(names, functions):
    """Each shared entry is in every function that shares it, with the same type line and
    description: the first function's copy is the reference the others must equal."""
    first, *others = functions
    reference = _entries(first.__doc__)
    for name in names:
        assert name in inspect.signature(first).parameters, (first.__name__, name)
        assert name in reference, f"{first.__name__} does not document {name}"
        kind, text = reference[name]
        assert kind and text and all(t.strip() for t in text), (first.__name__, name)
        for function in others:
            assert name in inspect.signature(function).parameters, (function.__name__, name)
            entries = _entries(function.__doc__)
            assert name in entries, f"{function.__name__} does not document {name}"
            assert entries[name] == (kind, text), (
                f"{function.__name__}'s entry of {name} differs from {first.__name__}'s:\n"
                f"{entries[name]!r}\n!=\n{(kind, text)!r}"
            )


def test_shared_entries_cover_the_graph_functions():
    """Every function of ``SHARED`` documents each of its parameters (with a type line)."""
    for function in {f for _, fs in SHARED for f in fs}:
        entries = _entries(function.__doc__)
        assert list(entries) == list(inspect.signature(function).parameters), function.__name__
        assert all(kind for kind, _ in entries.values()), function.__name__


@pytest.mark.parametrize(
    ("check", "function", "keywords"), CHECKS, ids=[c.__name__ for c, _, _ in CHECKS]
)
def test_check_docstrings(check, function, keywords):
    """A check's docstring says whose parameters it refuses, documents ``params`` and
    ``shape`` alike, and its `InputError` entry names the parameters it refuses: keywords
    of ``keywords``, among them each one the check reads itself."""
    doc = inspect.cleandoc(check.__doc__)
    summary = " ".join(doc.split("\n\n")[0].split())
    assert summary.startswith(
        f"Refuse, before anything runs, `{function}` parameters that cannot apply to an input "
        "of ``shape``: "
    ), summary
    assert summary.endswith("."), summary
    assert list(inspect.signature(check).parameters) == ["params", "shape"]
    assert _entries(doc) == {
        "params": ("dict", (f"    `{keywords.__name__}`'s keywords but ``graph``.",)),
        "shape": ("tuple of int", ("    The input's ``(n_samples, n_features)``.",)),
    }, f"{check.__name__}'s params and shape entries differ from the other checks'"
    raises = _entries(doc, "Raises")
    assert list(raises) == ["InputError"], raises
    refused = " ".join(" ".join(raises["InputError"][1]).split())
    named = set(re.findall(r"``([a-z_][a-z0-9_]*)``", refused))
    assert named, f"{check.__name__}'s InputError names no parameter: {refused!r}"
    accepted = set(inspect.signature(keywords).parameters) - {"X", "graph"}
    assert named <= accepted, f"not parameters of {keywords.__name__}: {named - accepted}"
    read = set(re.findall(r"""params\[["'](\w+)["']\]""", inspect.getsource(check)))
    assert read <= named, f"{check.__name__} refuses {read - named} without saying so"


def test_check_docstrings_are_the_specs_checks():
    """``CHECKS`` is every graph method's spec check (a new graph method is tested too)."""
    specs = [
        spec
        for module in (isomap_module, laplacian_module, lle_module, spectral_module)
        for spec in module.METHOD_SPECS
    ]
    assert {spec.check for spec in specs} == {check for check, _, _ in CHECKS}
    for spec in specs:
        keywords = next(k for c, _, k in CHECKS if c is spec.check)
        assert keywords is spec.function, spec.name
