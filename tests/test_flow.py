"""The embed flow against a real Prefect API (prefect_test_harness) and real Dask workers."""

from __future__ import annotations

import json
import uuid

import numpy as np
import pytest

from dimred_dask import PCA, OutputExistsError
from dimred_dask.io import open_output
from tests.data import zarr_input

STAGES = ("validate", "knn", "kernel", "fit", "transform", "evaluate", "publish")


@pytest.fixture
def data_uri(tmp_path, rng):
    return zarr_input(tmp_path, rng, n=3000, d=24, chunk_rows=500)


def _flow_run_and_artifacts(run_id: str):
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterFlowRunId

    with get_client(sync_client=True) as c:
        run = c.read_flow_run(uuid.UUID(run_id))
        arts = c.read_artifacts(
            artifact_filter=ArtifactFilter(
                flow_run_id=ArtifactFilterFlowRunId(any_=[uuid.UUID(run_id)])
            )
        )
    return run, arts


def test_flow_completes_writes_store_and_artifacts(client, prefect_api, data_uri, tmp_path):
    from flows.embed import embed

    uri, X = data_uri
    out = str(tmp_path / "out.zarr")
    manifest = embed(uri, out, method="pca", params={"n_components": 3})
    store = open_output(out)  # refuses an output without _COMMITTED
    Y = store.read_array("embedding")
    ref = PCA(3).fit(X)
    np.testing.assert_allclose(Y, ref.transform(X), rtol=1e-4, atol=1e-3)
    assert store.open_array("embedding").chunks[0] == 3000  # one dask chunk of the input
    assert store.open_array("embedding").compressors == ()  # float coordinates stored raw
    model = store.read_group("model")
    np.testing.assert_allclose(model["components_"], ref.components_, rtol=1e-4, atol=1e-5)
    on_disk = store.read_json("manifest.json")
    assert on_disk["fingerprint"] == manifest["fingerprint"]
    assert set(on_disk["timings"]) == set(STAGES) and all(
        t >= 0 for t in on_disk["timings"].values()
    )
    assert on_disk["metrics"]["trustworthiness"] > 0.9
    assert 0 < on_disk["metrics"]["reconstruction_error"] < 0.05
    assert on_disk["input_fingerprint"]["hashed"].startswith("all")
    assert store.read_bytes("embedding.png")[:8] == b"\x89PNG\r\n\x1a\n"
    run, arts = _flow_run_and_artifacts(manifest["flow_run_id"])
    assert run.state.is_completed()
    kinds = {a.type for a in arts}
    assert {"markdown", "table", "progress"} <= kinds
    table = next(a for a in arts if a.type == "table")
    rows = json.loads(table.data) if isinstance(table.data, str) else table.data
    assert len(rows) == 3 and rows[0]["ratio"] == pytest.approx(
        ref.explained_variance_ratio_[0], rel=1e-4
    )
    assert all(a.data == 100.0 for a in arts if a.type == "progress")


def test_rerun_is_refused_then_resumed_then_overwritten(client, prefect_api, data_uri, tmp_path):
    from flows.embed import embed

    uri, _ = data_uri
    out = tmp_path / "out.zarr"
    first = embed(uri, str(out), params={"n_components": 2})
    with pytest.raises(OutputExistsError, match="--overwrite"):
        embed(uri, str(out), params={"n_components": 2})
    # an unfinished run (no _COMMITTED): the same command reuses the committed stages
    (out / "_COMMITTED").unlink()
    second = embed(uri, str(out), params={"n_components": 2})
    assert [second["stages"][s] for s in ("fit", "transform", "evaluate")] == ["reused"] * 3
    assert second["fingerprint"] == first["fingerprint"]
    third = embed(uri, str(out), params={"n_components": 2}, overwrite=True)
    assert third["stages"]["fit"] == "computed"
    # different parameters on an unfinished run: stages do not match, so they are recomputed
    (out / "_COMMITTED").unlink()
    fourth = embed(uri, str(out), params={"n_components": 3})
    assert fourth["stages"]["fit"] == "computed" and fourth["model"]["n_components"] == 3
    assert open_output(str(out)).read_array("embedding").shape == (3000, 3)
