"""Every method the flow knows has the same defaults in its three forms: the flow adapter's
defaults (``flows/methods*.py``), the estimator's ``__init__`` and the function's keywords;
and every parameter the flow or the function takes is a parameter of the estimator too.
Differences that are meant are listed below, each with its reason. Pure inspection: no data,
no cluster."""

from __future__ import annotations

import inspect

import numpy as np
import pytest

import dimred_dask.methods as m
from dimred_dask.methods.sne import SNE_DEFAULTS
from dimred_dask.methods.tsne import TSNE_DEFAULTS
from dimred_dask.methods.umap import UMAP_DEFAULTS
from flows.methods import METHODS

# flow name -> (estimator, function, the defaults the function applies to its **params)
FORMS = {
    "pca": (m.PCA, m.pca, None),
    "kpca": (m.KernelPCA, m.kernel_pca, None),
    "mds": (m.MDS, m.classical_mds, None),
    "landmark-mds": (m.LandmarkMDS, m.landmark_mds, None),
    "spca": (m.SupervisedPCA, m.supervised_pca, None),
    "kspca": (m.KernelSupervisedPCA, m.kernel_supervised_pca, None),
    "isomap": (m.Isomap, m.isomap, None),
    "landmark-isomap": (m.LandmarkIsomap, m.landmark_isomap, None),
    "lle": (m.LocallyLinearEmbedding, m.lle, None),
    "laplacian": (m.LaplacianEigenmaps, m.laplacian_eigenmaps, None),
    "spectral": (m.SpectralClustering, m.spectral_clustering, None),
    "tsne": (m.TSNE, m.tsne, TSNE_DEFAULTS),
    "umap": (m.UMAP, m.umap, UMAP_DEFAULTS),
    "sne": (m.SNE, m.sne, SNE_DEFAULTS),
    "mvu": (m.MaximumVarianceUnfolding, m.mvu, None),
    "landmark-mvu": (m.LandmarkMVU, m.landmark_mvu, None),
    "are": (m.ActionRespectingEmbedding, m.action_respecting_embedding, None),
}

# Defaults that differ on purpose: method -> the parameters whose flow default differs from
# the estimator's and the function's.
DIFFERENT_DEFAULTS = {
    "pca": {
        # the flow writes an embedding of every row: 2 components as every other method, where
        # the estimator and the function keep min(n, d) as scikit-learn's PCA does
        "n_components",
        # a flow run is resumed and its fit reused by fingerprint, so its randomized solvers
        # are seeded by default; the estimator keeps scikit-learn's unseeded default
        "random_state",
    },
}

# Parameters only the flow or the function takes, on purpose: method -> names ("*": every
# method).
NOT_IN_ESTIMATOR = {
    "*": {
        "graph",  # the flow's kNN stage hands over its stored graph; an estimator builds its own
        "where",  # how error messages name the input ("X", "the geodesic distance matrix")
    },
    "pca": {"row_sketch"},  # the flow's single-pass fit writes its row sketch into the run store
    "kpca": {"kernel_matrix"},  # the flow's kernel stage's stored K
    "mds": {
        "check_input",  # an inner caller's (Isomap's) own checked distance matrix, not rechecked
        "measure_negative",  # an inner caller's skip of the negative-eigenvalue solve
    },
    "landmark-mds": {"align"},  # the final PCA; the estimator's embedding is always aligned
    "spca": {"y"},  # the estimator takes the labels in fit(X, y)
    "kspca": {"y"},
    # the estimators keep K (kernel_) and the training rows (for transform); verbose prints the
    # SDP solver's own log, a debugging aid of the function
    "mvu": {"keep_kernel", "verbose"},
    "are": {"keep_kernel", "verbose"},
    "landmark-mvu": {"keep_training_rows", "verbose"},
}

# Parameters only the estimator (and the function) takes, on purpose: the flow supplies them.
NOT_IN_FLOW = {
    # the flow writes its own checkpoints into the run store, relays progress to Prefect and
    # chooses the threads of each embedding task
    "tsne": {"checkpoint", "callback", "n_jobs"},
    "umap": {"checkpoint", "callback", "n_jobs"},
    "sne": {"checkpoint", "callback", "n_jobs"},
}


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
