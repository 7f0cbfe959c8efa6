"""One rule for integer and boolean data, for every method: the data are embedded as their
floating-point conversion (`float_dtype`: booleans and integers up to 16 bits in float32,
wider integers in float64), never computed in, or cast back to, the integer dtype."""

from __future__ import annotations

import numpy as np
import pytest

from dimred_dask import (
    MDS,
    PCA,
    SNE,
    TSNE,
    UMAP,
    ActionRespectingEmbedding,
    Isomap,
    KernelPCA,
    KernelSupervisedPCA,
    LandmarkIsomap,
    LandmarkMDS,
    LandmarkMVU,
    LaplacianEigenmaps,
    LocallyLinearEmbedding,
    MaximumVarianceUnfolding,
    SpectralClustering,
    SupervisedPCA,
)
from dimred_dask._validation import float_dtype

N = 60
GRAPH = {"n_neighbors": 8, "join_components": True}
NEIGHBOUR = {"perplexity": 8.0, "n_iter": 250, "random_state": 0}
ESTIMATORS = {
    "pca": lambda: PCA(2, whiten=True),
    "kpca": lambda: KernelPCA(2),
    "mds": lambda: MDS(2),
    "landmark-mds": lambda: LandmarkMDS(2, n_landmarks=20),
    "spca": lambda: SupervisedPCA(2),
    "kspca": lambda: KernelSupervisedPCA(2),
    "isomap": lambda: Isomap(**GRAPH),
    "landmark-isomap": lambda: LandmarkIsomap(n_landmarks=15, **GRAPH),
    "lle": lambda: LocallyLinearEmbedding(**GRAPH),
    "laplacian": lambda: LaplacianEigenmaps(**GRAPH),
    "spectral": lambda: SpectralClustering(2, **GRAPH),
    "tsne": lambda: TSNE(**NEIGHBOUR),
    "sne": lambda: SNE(**NEIGHBOUR),
    "umap": lambda: UMAP(n_neighbors=8, n_epochs=50, random_state=0),
    "mvu": lambda: MaximumVarianceUnfolding(n_neighbors=6, join_components=True),
    "landmark-mvu": lambda: LandmarkMVU(n_landmarks=10, join_components=True),
    "are": lambda: ActionRespectingEmbedding(n_neighbors=6, join_components=True),
}


def _integer_data(dtype: str) -> np.ndarray:
    """Small integers (0..100, so int8 holds them) on a curved 2-D sheet, or 0/1 patterns."""
    rng = np.random.default_rng(3)
    if dtype == "bool":
        codes = rng.permutation(2**12)[:N]  # distinct 12-bit rows
        return ((codes[:, None] >> np.arange(12)) & 1).astype(bool)
    t, h = rng.uniform(0, 3, N), rng.uniform(0, 1, N)
    X = np.column_stack([np.cos(t), np.sin(t), h, t * h]) * 25 + 50
    X = np.rint(X + rng.uniform(-0.5, 0.5, X.shape))
    return np.unique(X, axis=0)[:N].astype(dtype)


def _fit(name, X):
    est = ESTIMATORS[name]()
    if name in ("spca", "kspca"):
        return est.fit_transform(X, np.arange(X.shape[0]) % 3)
    if name == "are":  # an SDP with one constraint per action pair: 30 rows keep it quick
        return est.fit(X[:30], actions=np.arange(29) % 2).embedding_
    if name == "spectral":
        return est.fit(X).embedding_
    return est.fit_transform(X)


@pytest.mark.parametrize("dtype", ["int8", "uint8", "int64", "bool"])
@pytest.mark.parametrize("name", sorted(ESTIMATORS))
def test_integer_data_are_embedded_as_their_float_conversion(name, dtype):
    X = _integer_data(dtype)
    as_float = X.astype(float_dtype(X.dtype))
    Y = np.asarray(_fit(name, X))
    ref = np.asarray(_fit(name, as_float))
    assert Y.dtype == float_dtype(X.dtype) == ref.dtype, (Y.dtype, float_dtype(X.dtype))
    np.testing.assert_array_equal(Y, ref)  # the same computation, bit for bit
    assert np.unique(Y).size > 2 * Y.shape[1]  # coordinates, not integer codes


def test_the_rule():
    assert [
        str(float_dtype(t))
        for t in (
            "bool",
            "int8",
            "uint8",
            "int16",
            "uint16",
            "float16",
            "int32",
            "uint32",
            "int64",
            "float32",
            "float64",
        )
    ] == ["float32"] * 6 + ["float64"] * 3 + ["float32", "float64"]
    # the byte order is not the data's kind: big-endian float32 (a .npy or HDF5 written on
    # another machine) is float32 data
    assert [str(float_dtype(t)) for t in (">f4", ">f8", ">i2", ">i8")] == [
        "float32",
        "float64",
        "float32",
        "float64",
    ]
