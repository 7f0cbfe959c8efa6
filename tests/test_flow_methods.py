"""The embed flow with the kernel methods: the kernel stage (its own marker, its matrix reused),
labels for the supervised methods, and each method's output against its API."""

from __future__ import annotations

import numpy as np
import pytest

from dimred_dask import KernelPCA
from dimred_dask.io import open_output, save_array


@pytest.fixture
def clustered(tmp_path):
    rng = np.random.default_rng(4)
    centres = rng.standard_normal((3, 8)) * 4
    y = np.repeat(np.arange(3), 400)
    X = (centres[y] + rng.standard_normal((1200, 8))).astype(np.float32)
    uri = str(tmp_path / "in.zarr")
    save_array(X, uri, chunks=(300, 8))
    return uri, X, y


def _same_up_to_sign(a, b, atol):
    signs = np.sign(np.sum(a * b, axis=0))
    np.testing.assert_allclose(a * signs, b, atol=atol)


def test_kpca_kernel_stage_is_written_and_reused(client, prefect_api, clustered, tmp_path):
    from flows.embed import embed

    uri, X, _ = clustered
    out = tmp_path / "kpca.zarr"
    params = {"n_components": 2, "solver": "randomized", "width": 6.0}
    first = embed(uri, str(out), method="kpca", params=params)
    assert first["stages"]["kernel"] == "computed"
    store = open_output(str(out))
    K = store.open_array("kernel/matrix")
    assert K.shape == (1200, 1200) and K.chunks[0] == K.chunks[1]  # square chunks
    assert K.compressors == ()  # raw: the solver reads it on every pass
    ref = KernelPCA(2, width=6.0, solver="dense").fit(X.astype(np.float64))
    np.testing.assert_allclose(first["model"]["eigenvalues"], ref.eigenvalues_, rtol=1e-4)
    _same_up_to_sign(store.read_array("embedding").astype(np.float64), ref.embedding_, 2e-3)
    # an unfinished run (no _COMMITTED): the kernel and every later stage are reused
    (out / "_COMMITTED").unlink()
    second = embed(uri, str(out), method="kpca", params=params)
    assert second["stages"]["kernel"] == second["stages"]["fit"] == "reused"
    # the model is gone but the kernel is there: the kernel is reused, the fit recomputed from it
    (out / "_COMMITTED").unlink()
    (out / "_stages" / "fit.json").unlink()
    third = embed(uri, str(out), method="kpca", params=params)
    assert third["stages"]["kernel"] == "reused" and third["stages"]["fit"] == "computed"
    np.testing.assert_allclose(
        third["model"]["eigenvalues"], first["model"]["eigenvalues"], rtol=1e-12
    )
    # the fit reads the matrix from its chunk files, strictly: a damaged chunk is named
    chunk = out / "kernel" / "matrix" / "c" / "0" / "0"  # one chunk of 1200 x 1200
    chunk.write_bytes(chunk.read_bytes()[:-8])
    (out / "_COMMITTED").unlink()
    (out / "_stages" / "fit.json").unlink()
    with pytest.raises(
        Exception, match=r"chunk 'c/0/0' of the Zarr array .*kernel/matrix: its file has 5759992"
    ):
        embed(uri, str(out), method="kpca", params=params)


def test_kpca_nystrom_needs_no_kernel_matrix(client, prefect_api, clustered, tmp_path):
    from flows.embed import embed

    uri, X, _ = clustered
    out = tmp_path / "nys.zarr"
    m = embed(
        uri,
        str(out),
        method="kpca",
        params={"n_components": 2, "solver": "nystrom", "n_landmarks": 300},
    )
    assert m["stages"]["kernel"] == "not needed"
    assert not (out / "kernel").exists()
    assert 0 < m["model"]["approximation_error"] < 0.1
    assert m["metrics"]["trustworthiness"] > 0.8


def test_mds_distance_stage_precomputed_and_landmark(client, prefect_api, clustered, tmp_path):
    from dimred_dask import MDS
    from flows.embed import embed

    uri, X, _ = clustered
    ref = MDS(2, solver="dense").fit(X.astype(np.float64))
    m = embed(
        uri,
        str(tmp_path / "mds.zarr"),
        method="mds",
        params={"n_components": 2, "solver": "randomized", "n_iter": 8},
    )
    assert m["stages"]["kernel"] == "computed"  # the distance matrix, written once
    store = open_output(str(tmp_path / "mds.zarr"))
    assert store.open_array("kernel/matrix").shape == (1200, 1200)
    np.testing.assert_allclose(m["model"]["eigenvalues"], ref.eigenvalues_, rtol=1e-4)
    _same_up_to_sign(store.read_array("embedding").astype(np.float64), ref.embedding_, 2e-2)
    # a precomputed distance matrix as the input itself
    D = store.read_array("kernel/matrix")
    d_uri = str(tmp_path / "d.zarr")
    save_array(D, d_uri, chunks=(400, 1200))
    pre = embed(
        d_uri,
        str(tmp_path / "pre.zarr"),
        method="mds",
        params={"n_components": 2, "metric": "precomputed", "solver": "dense"},
    )
    assert pre["stages"]["kernel"] == "not needed"
    np.testing.assert_allclose(pre["model"]["eigenvalues"], ref.eigenvalues_, rtol=1e-4)
    lm = embed(
        uri,
        str(tmp_path / "lmds.zarr"),
        method="landmark-mds",
        params={"n_components": 2, "n_landmarks": 300},
    )
    Y = open_output(str(tmp_path / "lmds.zarr")).read_array("embedding").astype(np.float64)
    from scipy.spatial import procrustes

    assert procrustes(ref.embedding_, Y)[2] < 0.01
    assert lm["model"]["stress"] < 0.2


def test_supervised_methods_take_labels_from_a_uri(client, prefect_api, clustered, tmp_path):
    from dimred_dask import SupervisedPCA
    from flows.embed import embed

    uri, X, y = clustered
    y_uri = str(tmp_path / "y.zarr")
    save_array(y.astype(np.int32), y_uri, chunks=(300,))
    m = embed(
        uri, str(tmp_path / "spca.zarr"), method="spca", params={"n_components": 2}, labels=y_uri
    )
    assert m["labels"] == y_uri and m["stages"]["fit"] == "computed"
    ref = SupervisedPCA(2).fit(X, y)
    Y = open_output(str(tmp_path / "spca.zarr")).read_array("embedding")
    _same_up_to_sign(Y.astype(np.float64), ref.transform(X).astype(np.float64), 1e-3)
    k = embed(
        uri,
        str(tmp_path / "kspca.zarr"),
        method="kspca",
        params={"n_components": 2, "solver": "nystrom", "n_landmarks": 200},
        labels=y_uri,
    )
    assert k["metrics"]["trustworthiness"] > 0.8
    # other labels, same data: the fit is not reused from a store with different labels
    (tmp_path / "spca.zarr" / "_COMMITTED").unlink()
    save_array((y[::-1]).astype(np.int32), str(tmp_path / "y2.zarr"), chunks=(300,))
    again = embed(
        uri,
        str(tmp_path / "spca.zarr"),
        method="spca",
        params={"n_components": 2},
        labels=str(tmp_path / "y2.zarr"),
    )
    assert again["stages"]["fit"] == "computed"


def test_kernel_matrix_of_an_earlier_run_is_reused_by_a_later_one(
    client, prefect_api, clustered, tmp_path
):
    """Same data and kernel, another run (other n_components, other output): the matrix is
    read from the first run's store, not recomputed; once that store holds another kernel,
    the pointer is stale and the matrix is computed again."""
    from flows.embed import embed

    uri, X, _ = clustered
    runs = tmp_path / "runs"
    params = {"n_components": 2, "solver": "randomized", "width": 6.0}
    first = embed(uri, str(runs / "a.zarr"), method="kpca", params=params)
    assert first["stages"]["kernel"] == "computed"
    second = embed(uri, str(runs / "b.zarr"), method="kpca", params={**params, "n_components": 3})
    assert second["stages"]["kernel"] == "reused from cache"
    assert not (runs / "b.zarr" / "kernel").exists()  # read where it is, not copied
    ref = KernelPCA(2, width=6.0, solver="dense").fit(X.astype(np.float64))
    np.testing.assert_allclose(second["model"]["eigenvalues"][:2], ref.eigenvalues_, rtol=1e-4)
    # the first store now holds another kernel: the pointer no longer matches its marker
    embed(uri, str(runs / "a.zarr"), method="kpca", params={**params, "width": 3.0}, overwrite=True)
    third = embed(uri, str(runs / "c.zarr"), method="kpca", params={**params, "n_components": 3})
    assert third["stages"]["kernel"] == "computed"
    # the same matrix and the same seeded solver: the reused run equals the recomputed one
    np.testing.assert_allclose(
        third["model"]["eigenvalues"], second["model"]["eigenvalues"], rtol=1e-12
    )


def test_a_kernel_matrix_larger_than_the_free_disk_is_refused_before_anything(tmp_path, capsys):
    """Exact MDS of more rows than the output's disk can hold the n x n matrix of: refused
    in the CLI's checks, naming the size and the free space, with nothing written."""
    import math
    import shutil

    from flows.cli import main

    free = shutil.disk_usage(tmp_path).free
    n = math.isqrt(free // 4) + 2000  # float32: n^2 x 4 bytes just over the free space
    uri = str(tmp_path / "many.zarr")
    save_array(np.random.default_rng(0).standard_normal((n, 2)).astype(np.float32), uri)
    out = tmp_path / "mds"
    argv = ["run", "--input", uri, "--output", str(out), "--method", "mds"]
    assert main(argv + ["--param", "solver=randomized"]) == 2
    err = capsys.readouterr().err
    assert "InputError" in err and "distance matrix to the run store" in err, err
    assert "GiB free on the disk" in err and "landmark-mds" in err, err
    assert not out.exists()
