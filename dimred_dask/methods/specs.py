"""The product's methods, one `MethodSpec` each: what the flow (``--method``), the CLI
(``dimred-dask methods``), the README's method table and the contract tests read.

Parameters and defaults are the estimators' (see `dimred_dask.methods._spec`); a spec lists
only what differs in the flow, with its reason. A new method adds its entry here.
"""

from __future__ import annotations

from .._validation import register_method_names
from ._spec import MethodSpec
from .are import ActionRespectingEmbedding, action_respecting_embedding
from .isomap import Isomap, LandmarkIsomap, isomap, landmark_isomap
from .kpca import KernelPCA, kernel_pca
from .landmark_mvu import LandmarkMVU, landmark_mvu
from .laplacian_eigenmaps import LaplacianEigenmaps, laplacian_eigenmaps
from .lle import LocallyLinearEmbedding, lle
from .mds import (
    MDS,
    LandmarkMDS,
    LandmarkMDSModel,
    check_landmark_mds_params,
    classical_mds,
    landmark_mds,
)
from .mvu import MaximumVarianceUnfolding, mvu
from .pca import PCA, pca
from .sne import SNE, SNE_DEFAULTS, sne
from .spca import (
    KernelSupervisedPCA,
    KernelSupervisedPCAModel,
    SupervisedPCA,
    SupervisedPCAModel,
    check_kernel_supervised_pca_params,
    check_supervised_pca_params,
    kernel_supervised_pca,
    supervised_pca,
)
from .spectral_clustering import SpectralClustering, spectral_clustering
from .tsne import TSNE, TSNE_DEFAULTS, tsne, tsne_sweep
from .umap import UMAP, UMAP_DEFAULTS, umap, umap_sweep

__all__ = ["SPECS", "MethodSpec"]

_LINEAR = (
    "kernel, distance and supervised",
    "docs/methods.md#kernel-distance-and-supervised-methods",
)
_GRAPH = (
    "graph methods",
    "docs/methods.md#graph-methods-isomap-lle-laplacian-eigenmaps-spectral-clustering",
)
_NEIGHBOUR = ("neighbour embeddings", "docs/methods.md#t-sne-umap-and-sne-neighbour-embeddings")
_SDP = (
    "semidefinite embeddings",
    "docs/methods.md#semidefinite-embeddings-mvu-action-respecting-embedding-landmark-mvu",
)
_KNN = "the kNN stage"
# the flow writes its own checkpoints into the run store, relays progress to Prefect and
# chooses the threads of each embedding task
_OPTIMISER_SUPPLIED = {
    "checkpoint": "the flow checkpoints into the run store",
    "callback": "the flow relays progress to Prefect",
    "n_jobs": "the flow chooses each embedding task's threads",
}
_SDP_FUNCTION_ONLY = {"verbose": "prints the SDP solver's own log (a debugging aid)"}
_NEIGHBOUR_ADDS = "the kNN stage, checkpoints; one fit over all workers (`optimizer=distributed`)"

_SPECS = [
    MethodSpec(
        "pca",
        PCA,
        pca,
        takes="dense or sparse",
        docs=("PCA", "docs/methods.md#pca-solvers-sparse-input-float32"),
        flow_overrides={
            # the flow writes an embedding of every row: 2 components as every other method,
            # where the estimator and the function keep min(n, d) as scikit-learn's PCA does
            "n_components": (2, "two components, as every other method"),
            # a flow run is resumed and its fit reused by fingerprint, so its randomized
            # solvers are seeded; the estimator keeps scikit-learn's unseeded default
            "random_state": (0, "a resumed run must give the same fit"),
        },
        not_in_estimator={"row_sketch": "the flow's single-pass fit writes its row sketch"},
    ),
    MethodSpec(
        "spca",
        SupervisedPCA,
        supervised_pca,
        takes="dense or sparse, with `--labels`",
        docs=_LINEAR,
        not_in_estimator={"y": "the estimator takes the labels in fit(X, y)"},
        model=SupervisedPCAModel,
        check=check_supervised_pca_params,
        second_input="labels",
    ),
    MethodSpec(
        "kspca",
        KernelSupervisedPCA,
        kernel_supervised_pca,
        takes="dense, with `--labels`",
        docs=_LINEAR,
        not_in_estimator={"y": "the estimator takes the labels in fit(X, y)"},
        model=KernelSupervisedPCAModel,
        check=check_kernel_supervised_pca_params,
        second_input="labels",
    ),
    MethodSpec(
        "kpca",
        KernelPCA,
        kernel_pca,
        follows_pca=True,
        takes="dense",
        docs=_LINEAR,
        flow_adds="the kernel stage (`solver=randomized` or `lanczos`)",
        not_in_estimator={"kernel_matrix": "the flow's kernel stage's stored K"},
    ),
    MethodSpec(
        "mds",
        MDS,
        classical_mds,
        follows_pca=True,
        takes="dense, or an n x n distance matrix (`metric=precomputed`)",
        docs=_LINEAR,
        flow_adds="the distance stage (not for `solver=dense` or `precomputed`)",
        not_in_estimator={
            "check_input": "an inner caller's (Isomap's) checked distance matrix",
            "measure_negative": "an inner caller's skip of the negative-eigenvalue solve",
        },
    ),
    MethodSpec(
        "landmark-mds",
        LandmarkMDS,
        landmark_mds,
        follows_pca=True,
        takes="dense",
        docs=_LINEAR,
        not_in_estimator={"align": "the final PCA; the estimator's embedding is always aligned"},
        model=LandmarkMDSModel,
        check=check_landmark_mds_params,
    ),
    MethodSpec(
        "isomap", Isomap, isomap, follows_pca=True, takes="dense", docs=_GRAPH, flow_adds=_KNN
    ),
    MethodSpec(
        "landmark-isomap",
        LandmarkIsomap,
        landmark_isomap,
        follows_pca=True,
        takes="dense",
        docs=_GRAPH,
        flow_adds=_KNN,
    ),
    MethodSpec(
        "lle",
        LocallyLinearEmbedding,
        lle,
        follows_pca=True,
        takes="dense",
        docs=_GRAPH,
        flow_adds=_KNN,
    ),
    MethodSpec(
        "laplacian",
        LaplacianEigenmaps,
        laplacian_eigenmaps,
        follows_pca=True,
        takes="dense",
        docs=_GRAPH,
        flow_adds=_KNN,
    ),
    MethodSpec(
        "spectral",
        SpectralClustering,
        spectral_clustering,
        takes="dense",
        docs=_GRAPH,
        flow_adds="the kNN stage (`affinity=knn`, the default)",
    ),
    MethodSpec(
        "tsne",
        TSNE,
        tsne,
        follows_pca=True,
        takes="dense",
        docs=_NEIGHBOUR,
        flow_adds=_NEIGHBOUR_ADDS,
        more_functions=(tsne_sweep,),
        flow_supplied=_OPTIMISER_SUPPLIED,
        function_defaults=TSNE_DEFAULTS,
    ),
    MethodSpec(
        "umap",
        UMAP,
        umap,
        follows_pca=True,
        takes="dense",
        docs=_NEIGHBOUR,
        flow_adds=_NEIGHBOUR_ADDS,
        more_functions=(umap_sweep,),
        flow_supplied=_OPTIMISER_SUPPLIED,
        function_defaults=UMAP_DEFAULTS,
    ),
    MethodSpec(
        "sne",
        SNE,
        sne,
        follows_pca=True,
        takes="dense",
        docs=_NEIGHBOUR,
        flow_adds=_KNN,
        flow_supplied=_OPTIMISER_SUPPLIED,
        function_defaults=SNE_DEFAULTS,
    ),
    MethodSpec(
        "mvu",
        MaximumVarianceUnfolding,
        mvu,
        follows_pca=True,
        takes="dense",
        docs=_SDP,
        flow_adds=_KNN,
        not_in_estimator={"keep_kernel": "the estimator keeps K", **_SDP_FUNCTION_ONLY},
    ),
    MethodSpec(
        "landmark-mvu",
        LandmarkMVU,
        landmark_mvu,
        follows_pca=True,
        takes="dense",
        docs=_SDP,
        flow_adds=_KNN,
        not_in_estimator={
            "keep_training_rows": "the estimator keeps its training rows for transform",
            **_SDP_FUNCTION_ONLY,
        },
    ),
    MethodSpec(
        "are",
        ActionRespectingEmbedding,
        action_respecting_embedding,
        takes="dense, with `--actions`",
        docs=_SDP,
        flow_adds=_KNN,
        not_in_estimator={"keep_kernel": "the estimator keeps K", **_SDP_FUNCTION_ONLY},
    ),
]

SPECS: dict[str, MethodSpec] = {spec.name: spec for spec in _SPECS}

# the names a method goes by in its messages ("t-SNE", "LandmarkIsomap", "kernel_pca"): a
# refusal of sparse input names the chain through PCA from them (PCA itself takes sparse input)
register_method_names(
    {
        text: spec.name
        for spec in _SPECS
        if spec.name != "pca"
        for text in (
            spec.name,
            spec.estimator.__name__,
            getattr(spec.estimator, "_method", None) or spec.name,
            spec.function.__name__,
        )
    }
)
