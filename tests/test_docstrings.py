"""The public functions document every parameter (numpydoc).

Pure inspection: no data, no cluster. Each function exported by ``dimred_dask.methods`` or by
one of its public modules' ``__all__``, and by the other packages of the API reference
(``make docs``: graphs, linalg, pairwise, io, metrics, datasets, cluster, warmup,
errors), must have a
``Parameters`` section whose entries (``name : type`` lines at the section's indentation) are
exactly its signature's parameters; each class they export has a docstring.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import re

import dimred_dask.methods as methods

# "name : type", "name", or "a, b : type"; * and ** allowed before a name (``**params``)
_ENTRY = re.compile(r"^(\*{0,2}[A-Za-z_]\w*(?:\s*,\s*\*{0,2}[A-Za-z_]\w*)*)\s*(?::.*)?$")


# the packages of the API reference besides the methods (Makefile, API_MODULES)
_API_PACKAGES = (
    "dimred_dask.graphs",
    "dimred_dask.linalg",
    "dimred_dask.pairwise",
    "dimred_dask.io",
    "dimred_dask.metrics",
    "dimred_dask.datasets",
    "dimred_dask.cluster",
    "dimred_dask.warmup",
    "dimred_dask.errors",
)


def _exported(kind) -> dict[str, object]:
    """{qualified name: object} of every object of ``kind`` (a predicate) that the method
    modules and the API reference's packages export."""
    modules = [methods] + [
        importlib.import_module(f"{methods.__name__}.{info.name}")
        for info in pkgutil.iter_modules(methods.__path__)
        if not info.name.startswith("_")
    ]
    modules += [importlib.import_module(name) for name in _API_PACKAGES]
    found = {}
    for module in modules:
        for name in getattr(module, "__all__", ()):
            obj = getattr(module, name)
            if kind(obj):
                found.setdefault(f"{obj.__module__}.{obj.__qualname__}", obj)
    return found


def _public_functions() -> dict[str, object]:
    return _exported(inspect.isfunction)


def test_public_classes_have_docstrings():
    classes = _exported(inspect.isclass)
    assert len(classes) >= 30, sorted(classes)
    bare = [name for name, cls in sorted(classes.items()) if not (cls.__doc__ or "").strip()]
    assert not bare, bare


def _section(doc: str, title: str) -> list[str] | None:
    """The lines of the numpydoc section ``title`` (without its underline), or None."""
    lines = inspect.cleandoc(doc).splitlines()
    for i in range(len(lines) - 1):
        if lines[i].strip() == title and set(lines[i + 1].strip()) == {"-"}:
            body = []
            for j in range(i + 2, len(lines)):
                nxt = lines[j + 1] if j + 1 < len(lines) else ""
                if lines[j].strip() and nxt.strip() and set(nxt.strip()) == {"-"}:
                    break  # the next section's title
                body.append(lines[j])
            return body
    return None


def _documented(body: list[str]) -> list[str]:
    """The parameter names of a Parameters section's entries (lines at its indentation)."""
    entries = [ln for ln in body if ln.strip()]
    if not entries:
        return []
    indent = min(len(ln) - len(ln.lstrip()) for ln in entries)
    names = []
    for ln in entries:
        if len(ln) - len(ln.lstrip()) != indent:
            continue  # a description line
        m = _ENTRY.match(ln.strip())
        if m is None:
            names.append(ln.strip())  # not an entry: reported as not a parameter
        else:
            names.extend(n.strip().lstrip("*") for n in m.group(1).split(","))
    return names


def test_public_functions_document_every_parameter():
    functions = _public_functions()
    assert len(functions) >= 100, sorted(functions)  # the modules' exports were found
    problems = []
    for qualname, func in sorted(functions.items()):
        doc = func.__doc__ or ""
        body = _section(doc, "Parameters")
        params = list(inspect.signature(func).parameters)
        if body is None:
            if params:
                problems.append(
                    f"{qualname}: no numpydoc Parameters section (parameters {', '.join(params)})"
                )
            continue
        named = _documented(body)
        missing = [p for p in params if p not in named]
        extra = [n for n in named if n not in params]
        repeated = sorted({n for n in named if named.count(n) > 1})
        if missing or extra or repeated:
            problems.append(
                f"{qualname}: "
                + "; ".join(
                    f"{label} {', '.join(names)}"
                    for label, names in (
                        ("missing", missing),
                        ("not parameters", extra),
                        ("documented twice", repeated),
                    )
                    if names
                )
            )
    assert not problems, "docstring Parameters sections out of step with signatures:\n" + "\n".join(
        problems
    )
