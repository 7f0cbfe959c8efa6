"""Bad input of the kernel, distance and supervised methods: a typed error with a fix, through
the API and through the flow and the CLI, and nothing written to the output."""

from __future__ import annotations

import re

import numpy as np
import pytest

import dimred_dask
from dimred_dask import InputError
from tests.test_bad_input import _snapshot, _write


def _data(n=60, d=5, seed=0):
    return np.random.default_rng(seed).standard_normal((n, d)).astype(np.float32)


def _labels(n=60, classes=3):
    return (np.arange(n) % classes).astype(np.float32)


def _distances(edit=None, n=30):
    from scipy.spatial.distance import cdist

    x = _data(n)
    D = cdist(x, x).astype(np.float32)
    if edit:
        edit(D)
    return D


def _asymmetric(D):
    D[3, 7] += 1.0


def _negative(D):
    D[3, 7] = D[7, 3] = -0.5


def _diagonal(D):
    np.fill_diagonal(D, 1.0)


def _with_nan(y):
    y = y.copy()
    y[0] = np.nan
    return y


# (id, method, X, params, labels (array, or None), API call or None, error, message pattern)
CASES = [
    (
        "kpca-gamma-zero",
        "kpca",
        _data(),
        {"gamma": 0.0},
        None,
        lambda X, y: dimred_dask.kernel_pca(X, gamma=0.0),
        InputError,
        r"gamma as a positive",
    ),
    (
        "kpca-width-negative",
        "kpca",
        _data(),
        {"width": -2.0},
        None,
        lambda X, y: dimred_dask.kernel_pca(X, width=-2.0),
        InputError,
        r"width as a positive",
    ),
    (
        "kpca-degree-zero",
        "kpca",
        _data(),
        {"kernel": "polynomial", "degree": 0},
        None,
        lambda X, y: dimred_dask.kernel_pca(X, kernel="polynomial", degree=0),
        InputError,
        r"degree as an int >= 1",
    ),
    (
        "kpca-unknown-kernel",
        "kpca",
        _data(),
        {"kernel": "spline"},
        None,
        lambda X, y: dimred_dask.kernel_pca(X, kernel="spline"),
        InputError,
        r"Unknown kernel",
    ),
    (
        "kpca-k-equals-n",
        "kpca",
        _data(),
        {"n_components": 60},
        None,
        lambda X, y: dimred_dask.kernel_pca(X, n_components=60),
        InputError,
        r"n_components (< n_samples|<= min)",
    ),
    (
        "kpca-landmarks-above-n",
        "kpca",
        _data(),
        {"solver": "nystrom", "n_landmarks": 100},
        None,
        lambda X, y: dimred_dask.kernel_pca(X, solver="nystrom", n_landmarks=100),
        InputError,
        r"n_landmarks <= n_samples=60",
    ),
    (
        "labels-for-unsupervised",
        "kpca",
        _data(),
        {},
        _labels(),
        None,
        InputError,
        r"unsupervised; found --labels",
    ),
    (
        "labels-missing",
        "spca",
        _data(),
        {},
        None,
        lambda X, y: dimred_dask.supervised_pca(X, None),
        InputError,
        r"(needs labels|requires y)",
    ),
    (
        "labels-wrong-length",
        "spca",
        _data(),
        {},
        _labels(50),
        lambda X, y: dimred_dask.supervised_pca(X, y),
        InputError,
        r"(one label per row of X: X has 60 rows|have 50 rows; the input has 60)",
    ),
    (
        "labels-single-class",
        "spca",
        _data(),
        {},
        np.full(60, 2.0, np.float32),
        lambda X, y: dimred_dask.supervised_pca(X, y),
        InputError,
        r"at least 2 classes",
    ),
    (
        "labels-nan",
        "kspca",
        _data(),
        {},
        _with_nan(_labels()),
        lambda X, y: dimred_dask.kernel_supervised_pca(X, y),
        InputError,
        r"finite labels",
    ),
    (
        "kspca-k-equals-n",
        "kspca",
        _data(),
        {"n_components": 60},
        _labels(),
        lambda X, y: dimred_dask.kernel_supervised_pca(X, y, n_components=60),
        InputError,
        r"n_components",
    ),
    (
        "distances-not-square",
        "mds",
        _data(),
        {"metric": "precomputed"},
        None,
        lambda X, y: dimred_dask.classical_mds(X, metric="precomputed"),
        InputError,
        r"square n x n distance matrix",
    ),
    (
        "distances-asymmetric",
        "mds",
        _distances(_asymmetric),
        {"metric": "precomputed"},
        None,
        lambda X, y: dimred_dask.classical_mds(X, metric="precomputed"),
        InputError,
        r"symmetric distance matrix; found D\[3, 7\]",
    ),
    (
        "distances-negative",
        "mds",
        _distances(_negative),
        {"metric": "precomputed"},
        None,
        lambda X, y: dimred_dask.classical_mds(X, metric="precomputed"),
        InputError,
        r"distances >= 0; found D\[3, 7\] = -0.5",
    ),
    (
        "distances-nonzero-diagonal",
        "mds",
        _distances(_diagonal),
        {"metric": "precomputed"},
        None,
        lambda X, y: dimred_dask.classical_mds(X, metric="precomputed"),
        InputError,
        r"zero diagonal",
    ),
    (
        "mds-k-equals-n",
        "mds",
        _data(),
        {"n_components": 60},
        None,
        lambda X, y: dimred_dask.classical_mds(X, n_components=60),
        InputError,
        r"n_components",
    ),
    (
        "mds-minkowski-p",
        "mds",
        _data(),
        {"metric": "minkowski", "p": 0.5},
        None,
        lambda X, y: dimred_dask.classical_mds(X, metric="minkowski", p=0.5),
        InputError,
        r"p >= 1",
    ),
    (
        "landmarks-above-n",
        "landmark-mds",
        _data(),
        {"n_landmarks": 100},
        None,
        lambda X, y: dimred_dask.landmark_mds(X, n_landmarks=100),
        InputError,
        r"n_landmarks",
    ),
]


def _case(cid):
    return next(c for c in CASES if c[0] == cid)


@pytest.mark.parametrize("cid", [c[0] for c in CASES if c[5] is not None])
def test_api(cid):
    _, _, X, _, y, call, err, pattern = _case(cid)
    with pytest.raises(err, match=pattern) as info:
        call(X, y)
    assert "Fix:" in str(info.value)


@pytest.mark.parametrize("cid", [c[0] for c in CASES])
def test_flow_and_cli(cid, tmp_path, client, prefect_api, capsys):
    from flows.cli import main
    from flows.embed import embed

    _, method, X, params, y, _, err, pattern = _case(cid)
    inp = _write(tmp_path, X, "in")
    labels = _write(tmp_path, y, "labels") if y is not None else None
    out = str(tmp_path / "out")
    before = _snapshot(out)
    with pytest.raises(err, match=pattern):
        embed(inp, out, method=method, params=params, labels=labels)
    assert _snapshot(out) == before, "a refused run must not write to its output"
    argv = ["run", "--input", inp, "--output", out, "--method", method]
    argv += [a for k, v in params.items() for a in ("--param", f"{k}={v}")]
    argv += ["--labels", labels] if labels else []
    assert main(argv) == 2
    stderr = capsys.readouterr().err
    assert err.__name__ in stderr and "Fix:" in stderr and re.search(pattern, stderr), stderr
    assert _snapshot(out) == before
