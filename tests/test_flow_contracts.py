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

    # the committed model places new rows, or refuses with a typed error that says why and
    # what to do instead (the neighbour embeddings and spectral clustering keep their
    # embeddings only; the flow's landmark MVU keeps no training rows)
    new = X[::7] + 0.01
    try:
        placed = np.asarray(load_model(out).transform(new), dtype=np.float64)
    except InputError as exc:
        assert "Fix:" in str(exc) and name in ("tsne", "umap", "sne", "spectral", "landmark-mvu"), (
            exc
        )
        assert "dimred_dask." + spec.estimator.__name__ in str(exc) or name in (
            "spectral",
            "sne",
        )
    else:
        assert placed.shape == (len(new), Y.shape[1]) and np.isfinite(placed).all()


def test_a_method_whose_spec_has_model_and_check_needs_no_flow_code():
    """Landmark MDS and (kernel) supervised PCA have no code in ``flows/``: their adapters are
    derived from their specs (defaults, the function's own parameter checks before anything
    is written, the labels where the function takes them, the model through the run store);
    the runs above commit them like every other method's."""
    import pathlib

    from flows.adapter import adapter_from_spec, model_summary, save_model
    from flows.methods import METHODS

    derived = [n for n, s in SPECS.items() if s.model is not None and s.check is not None]
    assert {"landmark-mds", "spca", "kspca"} <= set(derived)
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
