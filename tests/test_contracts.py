"""The project's own contracts, on every estimator the package exports (found as
`test_estimator_checks` finds them, with the small-data parameters each declares in
``_check_params``): NumPy in gives NumPy out; the same seed gives the same result; a fit on
dask input embeds every row; ``transform`` of dask rows gives a lazy dask array in their
chunks, equal to the NumPy result row for row; a fitted estimator pickles and places rows as
before; a bad parameter is refused with a fix.

A fit on dask input is not compared with the NumPy fit row for row: its blockwise sums round
differently (about 1e-14), which t-SNE's and SNE's optimisers, started from those PCA scores,
amplify into a different (equally good) layout."""

import pickle

import dask.array as da
import numpy as np
import pytest
from sklearn.base import clone

from dimred_dask.errors import InputError
from tests.test_estimator_checks import ESTIMATORS

CONTRACTED = [cls for cls in ESTIMATORS if cls._check_params]


def _data():
    """A noisy swiss roll of 60 points in 3-D (connected kNN graphs at the declared k) and
    three classes by the roll's angle (for the supervised methods)."""
    rng = np.random.default_rng(7)
    t = 1.5 * np.pi * (1 + 2 * np.sort(rng.random(60)))
    X = np.column_stack([t * np.cos(t), 10 * rng.random(60), t * np.sin(t)])
    X += 0.05 * rng.standard_normal(X.shape)
    return X, np.digitize(t, np.quantile(t, [1 / 3, 2 / 3]))


def _fitted(est, X, y):
    return est.fit_transform(X, y) if hasattr(est, "fit_transform") else est.fit(X, y).labels_


@pytest.mark.parametrize("cls", CONTRACTED, ids=lambda c: c.__name__)
def test_estimator_contracts(cls):
    X, y = _data()
    est = cls(**cls._check_params[0])
    Y = _fitted(est, X, y)
    assert isinstance(Y, np.ndarray) and Y.shape[0] == X.shape[0]
    assert np.isfinite(Y).all()
    again = _fitted(clone(est), X, y)
    np.testing.assert_array_equal(again, Y)  # the same seed, the same result

    Yd = _fitted(clone(est), da.from_array(X, chunks=20), y)
    assert isinstance(Yd, (np.ndarray, da.Array)) and Yd.shape[0] == X.shape[0]
    if hasattr(est, "transform"):
        new = X[::3] + 0.01
        Z = est.transform(new)
        Zd = est.transform(da.from_array(new, chunks=7))
        assert isinstance(Zd, da.Array) and Zd.chunks[0] == (7, 7, 6)  # lazy, in X's chunks
        np.testing.assert_allclose(Zd.compute(), Z, rtol=1e-9, atol=1e-12)
        back = pickle.loads(pickle.dumps(est))
        np.testing.assert_array_equal(back.transform(new), Z)

    name = "n_clusters" if "n_clusters" in est.get_params() else "n_components"
    with pytest.raises(InputError) as err:
        _fitted(clone(est).set_params(**{name: 0}), X, y)
    assert "Fix:" in str(err.value), str(err.value)


@pytest.mark.parametrize("cls", CONTRACTED, ids=lambda c: c.__name__)
@pytest.mark.parametrize("bad", [np.nan, np.inf], ids=["nan", "inf"])
def test_dask_input_with_a_nonfinite_value_is_refused(cls, bad):
    """Dask input's finiteness is checked by the fit's passes, not up front: NaN or inf in a
    row is refused with the same error as in NumPy input, never embedded."""
    X, y = _data()
    X[3, 1] = bad
    est = cls(**cls._check_params[0])
    with pytest.raises(InputError, match="needs finite values; found 1 (NaN|inf) in row 3"):
        _fitted(est, da.from_array(X, chunks=20), y)


@pytest.mark.parametrize("cls", CONTRACTED, ids=lambda c: c.__name__)
def test_estimator_fitted_on_dask_input_pickles(cls):
    """A fit on dask input may keep lazy attributes (embedding_); the estimator pickles
    with the standard pickle all the same, and its attributes compute as before."""
    X, y = _data()
    est = cls(**cls._check_params[0]).fit(da.from_array(X, chunks=20), y)
    back = pickle.loads(pickle.dumps(est))
    for name in ("embedding_", "labels_"):
        if hasattr(est, name):
            np.testing.assert_array_equal(np.asarray(getattr(back, name)), getattr(est, name))
