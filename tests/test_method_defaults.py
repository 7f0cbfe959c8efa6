"""Every method the flow knows has the same defaults in its three forms: the flow adapter's
defaults (``flows/methods*.py``), the estimator's ``__init__`` and the function's keywords;
and every parameter the flow or the function takes is a parameter of the estimator too.
Differences that are meant are listed below, each with its reason. Pure inspection: no data,
no cluster."""

from __future__ import annotations

import inspect
import pathlib

import numpy as np
import pytest
from sklearn.base import BaseEstimator

import dimred_dask.methods as methods
from dimred_dask.methods.specs import SPECS
from flows.methods import METHODS

# flow name -> (estimator, function, the defaults the function applies to its **params)
FORMS = {
    name: (spec.estimator, spec.function, spec.function_defaults) for name, spec in SPECS.items()
}
# Defaults that differ on purpose, with their reasons: in the specs (flow_overrides).
DIFFERENT_DEFAULTS = {n: set(s.flow_overrides) for n, s in SPECS.items() if s.flow_overrides}
# Parameters only the flow or the function takes, on purpose: method -> names ("*": every
# method); the specs give each method's reasons (not_in_estimator).
NOT_IN_ESTIMATOR = {
    "*": {
        "graph",  # the flow's kNN stage hands over its stored graph; an estimator builds its own
        "where",  # how error messages name the input ("X", "the geodesic distance matrix")
    },
    **{n: set(s.not_in_estimator) for n, s in SPECS.items() if s.not_in_estimator},
}
# Parameters only the estimator (and the function) takes: the flow supplies them (flow_supplied).
NOT_IN_FLOW = {n: set(s.flow_supplied) for n, s in SPECS.items() if s.flow_supplied}


def _keyword_defaults(fn) -> dict:
    return {
        k: p.default
        for k, p in inspect.signature(fn).parameters.items()
        if k != "self" and p.default is not inspect.Parameter.empty
    }


def _same(a, b) -> bool:
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return False
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b
    return a == b


def test_every_flow_method_has_an_estimator_and_a_function():
    assert sorted(FORMS) == sorted(METHODS)


def test_every_estimator_has_a_spec():
    """Every estimator the methods package exports is the estimator of one spec."""
    exported = {
        obj
        for name in methods.__all__
        if isinstance(obj := getattr(methods, name), type) and issubclass(obj, BaseEstimator)
    }
    assert exported == {s.estimator for s in SPECS.values()}
    assert len({s.estimator for s in SPECS.values()}) == len(SPECS)


def test_every_flow_parameter_is_documented():
    """Each flow parameter has a type and a description: `dimred-dask methods NAME` prints
    them."""
    missing = [f"{n}.{p.name}" for n, s in SPECS.items() for p in s.params() if not p.doc]
    assert not missing, missing


@pytest.mark.parametrize("name", sorted(SPECS))
def test_every_estimator_documents_each_parameter_once(name):
    """The estimator's own docstring (what ``help`` and the API reference show) describes
    every keyword of its ``__init__``, in order, completed from the function's entries where it
    gives a type only; a default it states is the real one."""
    import ast
    import re

    from dimred_dask.methods._spec import numpydoc_entries

    spec = SPECS[name]
    entries = numpydoc_entries(spec.estimator.__doc__)
    defaults = spec.estimator_defaults()
    assert list(entries) == list(defaults)
    for key, (kind, text) in entries.items():
        assert kind and any(t.strip() for t in text), (key, kind, text)
        stated = re.search(r"default (.+)$", kind)
        if stated:
            assert ast.literal_eval(stated.group(1)) == defaults[key], (key, kind)


@pytest.mark.parametrize("name", sorted(FORMS))
def test_flow_estimator_and_function_defaults_agree(name):
    estimator, function, applied = FORMS[name]
    forms = {
        "flow": METHODS[name].defaults,
        "estimator": _keyword_defaults(estimator.__init__),
        "function": {**_keyword_defaults(function), **(applied or {})},
    }
    allowed = DIFFERENT_DEFAULTS.get(name, set())
    problems = []
    names = list(forms)
    for i, a in enumerate(names):
        for b in names[i + 1 :]:
            for key in sorted(set(forms[a]) & set(forms[b])):
                if "flow" in (a, b) and key in allowed:
                    continue
                if not _same(forms[a][key], forms[b][key]):
                    problems.append(f"{key}: {a} {forms[a][key]!r}, {b} {forms[b][key]!r}")
    exempt = NOT_IN_ESTIMATOR["*"] | NOT_IN_ESTIMATOR.get(name, set())
    lacking = (set(forms["flow"]) | set(forms["function"])) - set(forms["estimator"]) - exempt
    problems += [
        f"{key}: taken by the flow or the function, not by {estimator.__name__}"
        for key in sorted(lacking)
    ]
    flow_lacks = set(forms["estimator"]) - set(forms["flow"]) - NOT_IN_FLOW.get(name, set())
    problems += [
        f"{key}: taken by {estimator.__name__}, not by the flow" for key in sorted(flow_lacks)
    ]
    assert not problems, f"{name}: " + "; ".join(problems)


def test_the_listed_differences_are_still_there():
    """A listed difference that was fixed is taken off the lists."""
    for name, keys in DIFFERENT_DEFAULTS.items():
        estimator = _keyword_defaults(FORMS[name][0].__init__)
        for key in keys:
            assert not _same(METHODS[name].defaults[key], estimator[key]), (name, key)
    for name, keys in NOT_IN_ESTIMATOR.items():
        for key in keys:
            users = FORMS if name == "*" else {name: FORMS[name]}
            assert any(
                key in set(METHODS[n].defaults) | set(_keyword_defaults(f))
                and key not in _keyword_defaults(e.__init__)
                for n, (e, f, _) in users.items()
            ), (name, key)
    for name, keys in NOT_IN_FLOW.items():
        estimator = _keyword_defaults(FORMS[name][0].__init__)
        assert keys <= set(estimator) - set(METHODS[name].defaults), name


def _readme_rows() -> list[str]:
    """The README's method table as the specs give it (a method whose details are in the
    same section as the row above says "same")."""
    rows, previous = [], None
    for spec in SPECS.values():
        functions = ", ".join(f"`{f.__name__}`" for f in (spec.function, *spec.more_functions))
        details = "same" if spec.docs == previous else f"[{spec.docs.title}]({spec.docs.target})"
        previous = spec.docs
        rows.append(
            f"| `{spec.name}` | `{spec.estimator.__name__}` | {functions} | {spec.takes} | "
            f"{spec.flow_adds} | {details} |".replace("|  |", "| |")
        )
    return rows


def test_the_readmes_method_table_is_the_specs():
    readme = (pathlib.Path(__file__).parents[1] / "README.md").read_text().splitlines()
    start = readme.index("| `--method` | estimator | function | takes | the flow adds | details |")
    table = [line for line in readme[start + 2 :] if line.startswith("| `")]
    table = [line for line in table if not line.startswith("| `pca+<method>`")]
    assert table[: len(SPECS)] == _readme_rows()


def test_the_methods_command_lists_every_method_and_its_parameters(capsys):
    from flows.cli import main

    assert main(["methods"]) == 0
    listed = [line.split()[0] for line in capsys.readouterr().out.splitlines()[: len(SPECS)]]
    assert listed == list(SPECS)
    assert main(["methods", "umap"]) == 0
    out = capsys.readouterr().out
    for param in SPECS["umap"].params():
        assert f"  {param.name} = {param.default!r}" in out
    assert "How close embedded points may come" in out
    assert main(["methods", "umapp"]) == 2
    assert "Unknown method 'umapp'" in capsys.readouterr().err
