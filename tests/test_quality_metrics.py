"""The field's structure measures (Kobak & Berens 2019): CPD, KNC and the kNN classification
accuracy, against independent computations with scipy and scikit-learn on scikit-learn's
handwritten digits (real data, 10 classes); and in a run: ``--eval-labels`` checked before
anything is written, the measures in the manifest and the CLI summary, the picture coloured
by the labels, the fit reused when only the labels for evaluation change."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys

import numpy as np
import pytest
import scipy.sparse as sp
from scipy.spatial.distance import pdist
from scipy.stats import spearmanr
from sklearn.datasets import load_digits
from sklearn.decomposition import PCA as SkPCA
from sklearn.neighbors import NearestNeighbors

from dimred_dask import InputError, metrics
from dimred_dask.io import open_output

BIN = os.path.dirname(sys.executable)


@pytest.fixture(scope="module")
def digits():
    X, y = load_digits(return_X_y=True)
    return X, y, SkPCA(2, svd_solver="full").fit_transform(X)


def test_cpd_is_spearman_of_pairwise_distances(digits):
    X, _, Y = digits
    X, Y = X[:600], Y[:600]
    want = spearmanr(pdist(X), pdist(Y)).statistic
    assert metrics.cpd(X, Y) == pytest.approx(want, abs=1e-12)
    assert metrics.cpd(sp.csr_matrix(X), Y) == pytest.approx(want, abs=1e-9)
    assert metrics.cpd(X, X) == pytest.approx(1.0)
    shuffled = np.random.default_rng(0).permutation(Y)
    assert abs(metrics.cpd(X, shuffled)) < 0.05  # no structure kept


def test_cpd_samples_its_points(digits):
    X, _, Y = digits
    idx = np.sort(np.random.default_rng(3).choice(len(X), 500, replace=False))
    want = spearmanr(pdist(X[idx]), pdist(Y[idx])).statistic
    assert metrics.cpd(X, Y, n_points=500, random_state=3) == pytest.approx(want, abs=1e-12)
    with pytest.raises(InputError, match="n_points as an int >= 3"):
        metrics.cpd(X, Y, n_points=2)


def _knc_reference(X, Y, y, k):
    classes = np.unique(y)
    mx = np.array([X[y == c].mean(0) for c in classes])
    my = np.array([Y[y == c].mean(0) for c in classes])
    nx = NearestNeighbors(n_neighbors=k + 1).fit(mx).kneighbors(mx)[1][:, 1:]
    ny = NearestNeighbors(n_neighbors=k + 1).fit(my).kneighbors(my)[1][:, 1:]
    return np.mean([len(set(a) & set(b)) / k for a, b in zip(nx, ny)])


def test_knc_against_class_means_by_scikit_learn(digits):
    X, y, Y = digits
    assert metrics.knc_neighbors(10) == 4  # half the other 9 class means
    assert metrics.knc_neighbors(100) == 10 and metrics.knc_neighbors(3) == 1
    for k in (1, 4, 8):
        assert metrics.knc(X, Y, y, n_neighbors=k) == pytest.approx(_knc_reference(X, Y, y, k))
    assert metrics.knc(X, Y, y) == pytest.approx(_knc_reference(X, Y, y, 4))
    assert metrics.knc(sp.csr_matrix(X), Y, y) == pytest.approx(_knc_reference(X, Y, y, 4))
    assert metrics.knc(X, X, y) == 1.0
    assert np.isnan(metrics.knc(X, Y, y % 2))  # two classes: no choice of neighbours
    with pytest.raises(InputError, match="n_neighbors < n_classes - 1 = 9"):
        metrics.knc(X, Y, y, n_neighbors=9)
    with pytest.raises(InputError, match="expected 1797 labels"):
        metrics.knc(X, Y, y[:-1])


def test_knn_accuracy_is_a_leave_one_out_vote(digits):
    X, y, Y = digits
    ind = NearestNeighbors(n_neighbors=11).fit(Y).kneighbors(Y)[1]
    # the first neighbour is the row itself (no two of these rows share a map position)
    assert (ind[:, 0] == np.arange(len(Y))).all()
    votes = y[ind[:, 1:]]
    counts = np.apply_along_axis(np.bincount, 1, votes, minlength=10)
    tied = (counts == counts.max(1, keepdims=True)).sum(1) > 1
    pred = counts.argmax(1)
    clear = ~tied
    ours = metrics.knn_accuracy(Y, y)
    # rows without a tie are decided the same way by both; the tied ones by the nearest voter
    mine = []
    for i in np.flatnonzero(tied):
        top = np.flatnonzero(counts[i] == counts[i].max())
        mine.append(votes[i][np.isin(votes[i], top)][0] == y[i])
    want = ((pred[clear] == y[clear]).sum() + sum(mine)) / len(y)
    assert ours == pytest.approx(want)
    assert 0.5 < ours < 0.8  # PCA's 2-D map of the digits: classes overlap
    assert metrics.knn_accuracy(X, y) > 0.97  # in the 64 pixels they do not
    with pytest.raises(InputError, match="1 <= n_neighbors < n_samples"):
        metrics.knn_accuracy(Y, y, n_neighbors=0)


def test_label_metrics_gives_the_ks_it_used(digits):
    X, y, Y = digits
    got = metrics.label_metrics(X, Y, y)
    assert got["n_classes"] == 10 and got["knc_neighbors"] == 4
    assert got["knn_accuracy_neighbors"] == 10
    assert got["knc"] == pytest.approx(metrics.knc(X, Y, y))
    two = metrics.label_metrics(X, Y, y % 2)
    assert two["knc"] is None and two["knc_neighbors"] is None


# --- in a run -------------------------------------------------------------------------------


def _digits_files(tmp_path):
    X, y = load_digits(return_X_y=True)
    np.save(tmp_path / "x.npy", X.astype(np.float32))
    np.save(tmp_path / "y.npy", y.astype(np.int64))
    return X, y


def test_eval_labels_give_the_class_measures_of_a_run(client, prefect_api, tmp_path):
    from flows.embed import embed
    from flows.summary import print_summary

    X, y = _digits_files(tmp_path)
    out = str(tmp_path / "pca")
    m = embed(
        str(tmp_path / "x.npy"), out, method="pca", params={"n_components": 2},
        eval_labels=str(tmp_path / "y.npy"),
    )  # fmt: skip
    met = m["metrics"]
    assert m["eval_labels"] == str(tmp_path / "y.npy")
    assert met["class_labels"] == str(tmp_path / "y.npy") and met["n_classes"] == 10
    Y = open_output(out).read_array("embedding").astype(np.float64)
    # the run's sample is every row here (1797 < 2000): the figures are the whole set's
    assert met["sample_size"] == len(X)
    assert met["knn_accuracy"] == pytest.approx(metrics.knn_accuracy(Y, y))
    assert met["knc"] == pytest.approx(metrics.knc(X, Y, y))
    assert met["cpd"] == pytest.approx(metrics.cpd(X, Y), abs=1e-6)
    text = io.StringIO()
    print_summary(m, text)
    assert "cpd" in text.getvalue()
    assert f"knn_accuracy {met['knn_accuracy']:.6f}" in text.getvalue()
    # the picture is coloured by the classes: more than a handful of distinct colours
    png = open_output(out).read_bytes("embedding.png")
    from PIL import Image

    img = np.asarray(Image.open(io.BytesIO(png)).convert("RGB")).reshape(-1, 3)
    assert len({tuple(c) for c in img[::7]}) > 200

    # other labels for evaluation: the evaluate stage's fingerprint changes, the fit's not
    fit_fp = open_output(out).stage_marker("fit")["fingerprint"]
    np.save(tmp_path / "y2.npy", (y % 3).astype(np.int64))
    m2 = embed(
        str(tmp_path / "x.npy"), out, method="pca", params={"n_components": 2},
        eval_labels=str(tmp_path / "y2.npy"), overwrite=True,
    )  # fmt: skip
    assert m2["fingerprint"] != m["fingerprint"] and m2["metrics"]["n_classes"] == 3
    assert open_output(out).stage_marker("fit")["fingerprint"] == fit_fp


def test_a_run_without_labels_has_cpd_only(client, prefect_api, tmp_path):
    from flows.embed import embed

    _digits_files(tmp_path)
    m = embed(str(tmp_path / "x.npy"), str(tmp_path / "o"), method="pca")
    assert -1 <= m["metrics"]["cpd"] <= 1 and m["metrics"]["cpd_points"] == 1000
    assert "knc" not in m["metrics"] and m["eval_labels"] is None


@pytest.mark.parametrize(
    "labels,pattern",
    [
        (np.arange(1796), r"have 1796 rows; the input has 1797: one label per input row"),
        (np.zeros((1797, 2), dtype=np.int64), r"have 2 columns: one label per input row"),
        (np.linspace(0, 1, 1797), r"are of dtype float64; classes are needed"),
    ],
)
def test_bad_eval_labels_are_refused_before_anything_is_written(
    client, prefect_api, tmp_path, labels, pattern
):
    from flows.embed import embed

    _digits_files(tmp_path)
    np.save(tmp_path / "bad.npy", labels)
    for method in ("pca", "pca+umap"):  # a chain: before its first step writes
        out = tmp_path / f"out-{method}"
        with pytest.raises(InputError, match=pattern):
            embed(str(tmp_path / "x.npy"), str(out), method=method,
                  eval_labels=str(tmp_path / "bad.npy"))  # fmt: skip
        assert not out.exists()


def test_a_chain_refuses_wrong_labels_before_its_first_step_writes(client, prefect_api, tmp_path):
    from flows.embed import embed

    _digits_files(tmp_path)
    np.save(tmp_path / "short.npy", np.arange(10))
    cases = [
        ("pca+spca", "short.npy", r"have 10 rows; the input has 1797"),
        ("pca+umap", "y.npy", r"is unsupervised"),
    ]
    for method, labels, pattern in cases:
        out = tmp_path / f"out-{method}"
        with pytest.raises(InputError, match=pattern):
            embed(str(tmp_path / "x.npy"), str(out), method=method,
                  labels=str(tmp_path / labels))  # fmt: skip
        assert not out.exists()


def test_cli_eval_labels_from_an_anndata_obs_column(prefect_api, tmp_path):
    import pandas as pd

    from dimred_dask.io.write import save_h5ad

    X, y = load_digits(return_X_y=True)
    names = pd.Index([f"d{v}" for v in range(10)], dtype=object)  # anndata writes object strings
    obs = {"digit": pd.Categorical.from_codes(y, categories=names)}
    save_h5ad(X.astype(np.float32), str(tmp_path / "digits.h5ad"), obs=obs)
    f = str(tmp_path / "digits.h5ad")
    out = str(tmp_path / "map")
    env = {**os.environ, "PREFECT_API_URL": prefect_api}
    done = subprocess.run(
        [f"{BIN}/dimred-dask", "run", "--input", f, "--output", out, "--method", "pca",
         "--n-components", "2", "--eval-labels", f + "#obs/digit"],
        env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "classes               10 in " in done.stdout and "knc " in done.stdout
    m = json.loads(open_output(out).read_bytes("manifest.json"))
    assert m["metrics"]["n_classes"] == 10 and m["eval_labels"].endswith("#obs/digit")
