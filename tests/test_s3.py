"""Object storage: a real S3-compatible server (moto) on 127.0.0.1; the reads and writes are
done by Dask worker processes, which get the endpoint from the run's storage options and the
credentials from their environment (set in conftest before they started)."""

from __future__ import annotations

import os

import numpy as np
import pytest

from dimred_dask import PCA, InputError, StoreError
from dimred_dask.io import open_input, open_matrix, open_output, save_array
from tests.data import low_rank


@pytest.fixture
def bucket(s3_server):
    import boto3

    name = f"lab-{os.urandom(4).hex()}"
    boto3.client("s3", endpoint_url=s3_server).create_bucket(Bucket=name)
    return name


def test_s3_round_trip_through_the_flow(client, prefect_api, bucket, rng, tmp_path):
    from flows.embed import embed

    X = low_rank(rng, n=2400, d=16, dtype=np.float32)
    save_array(X, f"s3://{bucket}/in.zarr", chunks=(400, 16))  # written by the workers
    inp = open_input(f"s3://{bucket}/in.zarr")
    assert inp.meta["stored_chunks"] == [400, 16]
    manifest = embed(
        f"s3://{bucket}/in.zarr", f"s3://{bucket}/runs/pca", params={"n_components": 2}
    )
    store = open_output(f"s3://{bucket}/runs/pca")
    np.testing.assert_allclose(
        store.read_array("embedding"), PCA(2).fit_transform(X), rtol=1e-4, atol=1e-3
    )
    assert manifest["output"] == f"s3://{bucket}/runs/pca"
    keys = set(store.fs.find(f"{bucket}/runs/pca"))
    assert {
        f"{bucket}/runs/pca/_COMMITTED",
        f"{bucket}/runs/pca/manifest.json",
        f"{bucket}/runs/pca/embedding.png",
    } <= keys
    # single-pass: the transform reads the row sketch back from the bucket (through
    # open_input, as the input is read) and removes it once the embedding is committed
    sp = embed(
        f"s3://{bucket}/in.zarr",
        f"s3://{bucket}/runs/sp",
        params={"n_components": 2, "solver": "single-pass"},
    )
    assert sp["model"]["passes"] == 1 and sp["model"]["row_sketch"]["array"] == "sketch/rows"
    got = open_output(f"s3://{bucket}/runs/sp").read_array("embedding")
    local = embed(  # the same seeded fit into a local store: the same embedding
        f"s3://{bucket}/in.zarr",
        str(tmp_path / "sp"),
        params={"n_components": 2, "solver": "single-pass"},
    )
    assert local["model"]["passes"] == 1
    np.testing.assert_allclose(got, open_output(str(tmp_path / "sp")).read_array("embedding"))
    assert not store.fs.exists(f"{bucket}/runs/sp/sketch")
    # the work really ran in the worker processes, not in this one
    pids = set(client.run(os.getpid).values())
    assert os.getpid() not in pids and len(pids) == 2


def test_s3_npy_by_byte_range(client, bucket, rng):
    import fsspec

    X = rng.standard_normal((1000, 7))
    with fsspec.open(
        f"s3://{bucket}/x.npy", "wb", client_kwargs={"endpoint_url": os.environ["AWS_ENDPOINT_URL"]}
    ) as f:
        np.save(f, X)
    inp = open_input(f"s3://{bucket}/x.npy", row_chunk=128)
    np.testing.assert_array_equal(inp.array.compute(), X)


def test_s3_missing_bucket_is_a_clear_error(s3_server):
    from dimred_dask import InputError

    with pytest.raises((InputError, StoreError), match="does not exist|denied|reach"):
        open_input("s3://no-such-bucket-here/x.zarr")


def test_s3_overwrite_replaces_only_run_stores_and_missing_chunks_are_named(
    client, prefect_api, bucket, rng
):
    """The data-safety rules hold on object storage: --overwrite never deletes a prefix that
    is not a run store, and an input chunk lost from the bucket is refused by name."""
    import fsspec

    from dimred_dask import InputError, OutputExistsError
    from flows.embed import embed

    X = low_rank(rng, n=800, d=6, dtype=np.float32)
    save_array(X, f"s3://{bucket}/in.zarr", chunks=(200, 6))
    fs = fsspec.filesystem("s3", client_kwargs={"endpoint_url": os.environ["AWS_ENDPOINT_URL"]})
    fs.pipe(f"{bucket}/shared/report.csv", b"a,b\n1,2\n")  # someone's data under a prefix
    with pytest.raises(OutputExistsError, match="not a dimred-dask run store"):
        embed(f"s3://{bucket}/in.zarr", f"s3://{bucket}/shared", overwrite=True)
    assert fs.cat(f"{bucket}/shared/report.csv") == b"a,b\n1,2\n"
    fs.rm(f"{bucket}/in.zarr/c/2/0")
    with pytest.raises(InputError, match=r"missing \(c/2/0\)"):
        embed(f"s3://{bucket}/in.zarr", f"s3://{bucket}/runs/x")
    assert not fs.exists(f"{bucket}/runs/x/_COMMITTED")


def test_s3_matrix_in_square_chunks_read_through_zarr(client, bucket, rng):
    """A run's kernel matrix kept in object storage is read by zarr in its square chunks; an
    absent chunk is named."""
    import fsspec
    import zarr

    X = rng.standard_normal((300, 300)).astype(np.float32)
    url = f"s3://{bucket}/run.zarr/kernel/matrix"
    opts = {"client_kwargs": {"endpoint_url": os.environ["AWS_ENDPOINT_URL"]}}
    z = zarr.create_array(
        zarr.storage.FsspecStore.from_url(url, storage_options=opts),
        shape=X.shape,
        chunks=(128, 128),
        dtype=X.dtype,
        compressors=None,
    )
    z[...] = X
    inp = open_matrix(url)
    assert inp.meta["read_path"] == "zarr (not a local path)"
    assert inp.array.chunks == ((128, 128, 44),) * 2
    np.testing.assert_array_equal(inp.array.compute(), X)
    fsspec.filesystem("s3", **opts).rm(f"{bucket}/run.zarr/kernel/matrix/c/1/2")
    with pytest.raises(InputError, match="c/1/2"):
        open_matrix(url).array.compute()


def test_the_s3_servers_port_is_held_from_the_sessions_start():
    """The endpoint the workers inherit names a port the test process holds from its start:
    no other process can bind it before (or after) the server starts serving from it."""
    import errno
    import socket

    from tests.conftest import S3_PORT

    with socket.socket() as s, pytest.raises(OSError) as taken:
        s.bind(("127.0.0.1", S3_PORT))
    assert taken.value.errno == errno.EADDRINUSE
