"""Every method through the flow on a tiny input, found from the specs: the run commits an
embedding of every row, with the parameters the flow derives from the spec, equal to the
estimator's on the same rows with the same parameters; the committed model places new rows.

The small-data parameters are each estimator's declared ``_check_params`` (as for the
scikit-learn checks); action respecting embedding declares none (its second argument is
the actions): its flow run is tested against its function in ``test_flow_sdp.py``."""

from __future__ import annotations

import numpy as np
import pytest

from dimred_dask.errors import InputError
from dimred_dask.io import open_output
from dimred_dask.methods.specs import SPECS
from tests.test_contracts import _data

FLOWED = [name for name, spec in SPECS.items() if spec.estimator._check_params]


def _same_up_to_sign(a, b, atol):
    signs = np.where(np.sum(a * b, axis=0) < 0, -1.0, 1.0)
    np.testing.assert_allclose(a * signs, b, atol=atol)


@pytest.mark.parametrize("name", FLOWED)
def test_every_method_runs_through_the_flow(name, client, prefect_api, tmp_path):
    from flows.embed import embed
    from flows.methods import load_model

    spec = SPECS[name]
    X, y = _data()
    params = dict(spec.estimator._check_params[0])
    inp, labels = str(tmp_path / "x.npy"), None
    np.save(inp, X)
    if name in ("spca", "kspca"):
        labels = str(tmp_path / "y.npy")
        np.save(labels, y)
    out = str(tmp_path / "run")
    m = embed(inp, out, method=name, params=params, labels=labels, sample_size=30)
    assert m["method"] == name
    assert set(spec.flow_defaults()) <= set(m["params"])  # the spec's parameters, all
    assert all(m["params"][k] == v for k, v in params.items())
    Y = open_output(out).read_array("embedding")
    assert Y.shape[0] == X.shape[0] and np.isfinite(Y).all()

    est = spec.estimator(**{**spec.flow_defaults(), **params})
    if hasattr(est, "fit_transform"):
        ref = est.fit_transform(X, y)
    else:  # spectral clustering: the run's embedding is its spectral embedding
        ref = est.fit(X, y).embedding_
        labels = np.asarray(open_output(out).read_array("model/labels_"))
        assert len(set(zip(labels, est.labels_))) == len(set(est.labels_))  # same partition
    _same_up_to_sign(
        np.asarray(Y, np.float64), np.asarray(ref, np.float64), atol=1e-6 * np.abs(ref).max()
    )

    # the committed model places new rows as the estimator's transform does (to rounding;
    # up to the embedding's signs), spectral clustering by its embedding and its clusters
    new = X[::7] + 0.01
    placed = np.asarray(load_model(out).transform(new), dtype=np.float64)
    assert placed.shape == (len(new), Y.shape[1]) and np.isfinite(placed).all()
    if hasattr(est, "transform"):
        want = np.asarray(est.transform(new), np.float64)
        signs = np.where(np.sum(np.asarray(Y, np.float64) * ref, axis=0) < 0, -1.0, 1.0)
        np.testing.assert_allclose(placed * signs, want, atol=PLACED_ATOL * np.abs(want).max())


# a run's placement and the estimator's transform compute the same sums on the same rows, the
# run's in the stored dtype: float32 rounding of the training embedding and the training
# rows (2^-24 relative, times the sums' depth) is the whole difference
PLACED_ATOL = 1e-5


def test_a_method_whose_spec_has_model_and_check_needs_no_flow_code():
    """Landmark MDS, (kernel) supervised PCA, the graph methods and the semidefinite methods
    have no code in ``flows/``: their adapters are derived from their specs (defaults, the
    function's own parameter checks before anything is written, the labels or actions where
    the function takes them, the kNN graph it needs, the model through the run store); the
    runs above commit them like every other method's."""
    import pathlib

    from flows.adapter import adapter_from_spec, model_summary, save_model
    from flows.methods import METHODS

    derived = [n for n, s in SPECS.items() if s.model is not None and s.check is not None]
    assert {"landmark-mds", "spca", "kspca", "isomap", "lle", "spectral", "mvu", "are"} <= set(
        derived
    )
    source = "".join(
        p.read_text() for p in (pathlib.Path(__file__).parents[1] / "flows").glob("*.py")
    )
    for name in derived:
        assert f'"{name}"' not in source, name
        adapter = METHODS[name]
        assert adapter.defaults == SPECS[name].flow_defaults()
        assert (adapter.summary, adapter.save) == (model_summary, save_model)
    with pytest.raises(InputError, match="n_landmarks") as err:
        METHODS["landmark-mds"].check({"n_landmarks": 1}, (100, 5))
    assert "Fix:" in str(err.value)
    with pytest.raises(InputError, match="Unknown parameter"):
        METHODS["landmark-mds"].check({"n_landmark": 50}, (100, 5))
    assert METHODS["spca"].needs_labels and not METHODS["landmark-mds"].needs_labels
    with pytest.raises(InputError, match="n_components"):
        METHODS["spca"].check({"n_components": 7}, (100, 5))
    with pytest.raises(ValueError, match="model= and check="):
        adapter_from_spec(SPECS["tsne"])
    # the graph methods: the kNN stage's request from the parameters, the functions' checks
    spectral = METHODS["spectral"]
    p = spectral.check({}, (100, 5))
    assert spectral.graph(p, (100, 5)).connected is False  # cut along its components
    assert spectral.graph({**p, "affinity": "gaussian"}, (100, 5)) is None  # Nyström: none
    lle = METHODS["lle"]
    request = lle.graph(lle.check({"n_neighbors": 7}, (100, 5)), (100, 5))
    assert request.connected is True and request.n_neighbors == 7
    with pytest.raises(InputError, match="n_neighbors > n_components"):
        lle.check({"n_neighbors": 3, "n_components": 3}, (100, 5))
    with pytest.raises(InputError, match="geodesic matrix"):
        METHODS["isomap"].check({}, (20_001, 5))
    with pytest.raises(InputError, match="n_landmarks"):
        METHODS["landmark-isomap"].check({"n_landmarks": 2}, (100, 5))
    # the semidefinite methods: the actions as the second input, the exact SDP's size limit
    assert METHODS["are"].needs_actions and not METHODS["mvu"].needs_actions
    with pytest.raises(InputError, match="n x n SDP"):
        METHODS["mvu"].check({}, (5000, 3))
    with pytest.raises(InputError, match="face_reduction as True or False"):
        METHODS["are"].check({"face_reduction": "yes"}, (100, 3))
    with pytest.raises(InputError, match="n_landmarks"):
        METHODS["landmark-mvu"].check({"n_landmarks": 500}, (100, 3))


def _names_in_code(path) -> set[str]:
    """The identifiers a module's code uses (names, attributes, imports) and its string
    constants, docstrings and comments left out."""
    import ast

    tree = ast.parse(path.read_text())
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            out.add(node.id)
        elif isinstance(node, ast.Attribute):
            out.add(node.attr)
        elif isinstance(node, ast.alias):
            out.add(node.name.rsplit(".", 1)[-1])
        elif isinstance(node, ast.ImportFrom) and node.module:
            out.add(node.module.rsplit(".", 1)[-1])
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            if id(node) not in docstrings:
                out.add(node.value)
    return out


def test_a_method_of_the_spec_route_is_named_by_its_own_module_only():
    """Adding a method that needs no flow stage touches its module, its tests and its README
    row: no other code of the package or the flow names it, by its flow name, its module,
    its estimator, its function or its model (landmark MDS, `methods/landmark_mds.py`, and
    the supervised PCAs, `methods/spca.py`)."""
    import inspect
    import pathlib

    root = pathlib.Path(__file__).parents[1]
    files = [*root.joinpath("dimred_dask").rglob("*.py"), *root.joinpath("flows").glob("*.py")]
    code = {path.resolve(): _names_in_code(path) for path in files}
    derived = [
        s for s in SPECS.values() if s.model is not None and s.check is not None and not s.knn_graph
    ]
    assert {"landmark-mds", "spca", "kspca"} <= {s.name for s in derived}
    for spec in derived:
        own = {
            pathlib.Path(inspect.getsourcefile(obj)).resolve()
            for obj in (spec.estimator, spec.function, spec.model)
        }
        module = pathlib.Path(inspect.getsourcefile(spec.estimator)).stem
        names = {spec.name, module, spec.estimator.__name__, spec.function.__name__}
        names.add(spec.model.__name__)
        named = sorted(str(p.relative_to(root)) for p, used in code.items() if names & used)
        assert [p for p in named if root / p not in own] == [], spec.name
    # the other kind names its module elsewhere (its adapter in flows/), which the check sees
    assert "mds" in code[root.joinpath("flows", "methods.py").resolve()]
