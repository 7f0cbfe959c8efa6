"""Concurrent runs (four prefixes at once; two runs racing for one prefix; a live lease
holder) and secrets (a canary credential is found nowhere a run leaves traces)."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid

import numpy as np
import pytest

from dimred_dask import PCA, StoreError
from dimred_dask.io import Lease, LeaseHeldError, RunStore, open_output, save_array
from tests.data import low_rank, zarr_input

BIN = os.path.dirname(sys.executable)
EXPECTED_TOP = {
    "zarr.json",
    "embedding",
    "model",
    "manifest.json",
    "embedding.png",
    "_stages",
    "_COMMITTED",
}


def _spawn(args, env):
    return subprocess.Popen(
        [os.path.join(BIN, "dimred-dask"), "run", *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


@pytest.fixture
def data(tmp_path, rng):
    return zarr_input(tmp_path, rng, n=6000, d=16, chunk_rows=1000)


def test_four_runs_at_once_each_with_its_own_keys(client, prefect_api, data, tmp_path):
    uri, X = data
    env = {**os.environ, "PREFECT_API_URL": prefect_api}
    outs = [tmp_path / f"out{i}" for i in range(4)]
    procs = [
        _spawn(
            [
                "--input",
                uri,
                "--output",
                str(o),
                "--n-components",
                str(i + 1),
                "--scheduler",
                client.scheduler.address,
            ],
            env,
        )
        for i, o in enumerate(outs)
    ]
    results = [(p.wait(timeout=600), p.stderr.read()) for p in procs]
    assert [r for r, _ in results] == [0, 0, 0, 0], [e[-1500:] for _, e in results]
    for i, out in enumerate(outs):
        assert {p.name for p in out.iterdir()} == EXPECTED_TOP  # no lease left, nothing foreign
        Y = open_output(str(out)).read_array("embedding")
        np.testing.assert_allclose(Y, PCA(i + 1).fit_transform(X), rtol=1e-4, atol=1e-3)


def test_two_runs_racing_for_one_prefix(client, prefect_api, data, tmp_path):
    uri, _ = data
    env = {**os.environ, "PREFECT_API_URL": prefect_api}
    args = [
        "--input",
        uri,
        "--output",
        str(tmp_path / "same"),
        "--n-components",
        "2",
        "--scheduler",
        client.scheduler.address,
    ]
    procs = [_spawn(args, env) for _ in range(2)]
    results = [(p.wait(timeout=600), p.stderr.read()) for p in procs]
    codes = sorted(r for r, _ in results)
    assert codes == [0, 2], results
    loser = next(e for r, e in results if r == 2)
    # the loser either met the winner's lease, or (if it came late) the committed output
    assert "being written by another run" in loser or "committed run already" in loser, loser


def test_live_lease_holder_is_named_and_run_refused_fast(client, prefect_api, data, tmp_path):
    from flows.embed import embed

    uri, _ = data
    holder = Lease(RunStore(str(tmp_path / "held")), holder="nightly job 7").acquire()
    try:
        with pytest.raises(LeaseHeldError, match=r"(?s)nightly job 7.*pid %d" % os.getpid()):
            embed(uri, str(tmp_path / "held"), params={"n_components": 2})
    finally:
        holder.release()
    # a lease left by a process that no longer exists is stale: the next run takes over
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    ).stdout.strip()
    stale = Lease(RunStore(str(tmp_path / "held")), holder="crashed run")
    stale.info["pid"] = int(dead)
    stale.acquire()
    embed(uri, str(tmp_path / "held"), params={"n_components": 2})
    assert not (tmp_path / "held" / "_LEASE").exists()


def _everything_text(root_fs, prefix: str) -> str:
    chunks = []
    for path in root_fs.find(prefix):
        if "/embedding/c/" in path or "/model/" in path and "/c/" in path:
            continue  # numeric chunks
        chunks.append(root_fs.cat_file(path).decode("latin-1"))
    return "\n".join(chunks)


def test_canary_secret_appears_nowhere(
    prefect_api, s3_server, tmp_path, rng, monkeypatch, capfd, caplog
):
    """Credentials come from the environment only. Plant a canary secret key (moto accepts
    any), run a successful and a failing job on S3 with workers that hold it, then search the
    logs, the Prefect API (flow-run parameters, logs, artifacts), the manifests, the Zarr
    attributes and every other object the runs wrote."""
    import boto3
    import fsspec
    from distributed import Client, LocalCluster
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import (
        FlowRunFilter,
        FlowRunFilterId,
        LogFilter,
        LogFilterFlowRunId,
    )

    from flows.embed import embed

    canary = f"CANARY{uuid.uuid4().hex}"
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", canary)
    bucket = f"canary-{os.urandom(4).hex()}"
    boto3.client("s3", endpoint_url=s3_server).create_bucket(Bucket=bucket)
    X = low_rank(rng, n=2000, d=8, dtype=np.float32)
    bad = X.copy()
    bad[17, 3] = np.nan
    run_ids = []
    with (
        LocalCluster(
            n_workers=2,
            threads_per_worker=1,
            processes=True,
            host="127.0.0.1",
            dashboard_address="127.0.0.1:0",
        ) as cluster,
        Client(cluster) as c,
    ):
        assert set(c.run(lambda: os.environ["AWS_SECRET_ACCESS_KEY"]).values()) == {canary}
        save_array(X, f"s3://{bucket}/good.zarr", chunks=(500, 8))
        save_array(bad, f"s3://{bucket}/bad.zarr", chunks=(500, 8))
        m = embed(
            f"s3://{bucket}/good.zarr",
            f"s3://{bucket}/runs/good",
            params={"n_components": 2},
            scheduler=cluster.scheduler_address,
        )
        run_ids.append(m["flow_run_id"])
        state = embed(
            f"s3://{bucket}/bad.zarr",
            f"s3://{bucket}/runs/bad",
            params={"n_components": 2},
            scheduler=cluster.scheduler_address,
            return_state=True,
        )
        assert state.is_failed()
        run_ids.append(str(state.state_details.flow_run_id))
    fs = fsspec.filesystem("s3", client_kwargs={"endpoint_url": s3_server})
    stored = _everything_text(fs, f"{bucket}/runs")
    assert "manifest.json" in str(fs.find(f"{bucket}/runs")) and "dimred_dask_run" in stored
    out, err = capfd.readouterr()
    seen = [stored, out, err, caplog.text]
    with get_client(sync_client=True) as pc:
        ids = [uuid.UUID(r) for r in run_ids]
        for run in pc.read_flow_runs(flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=ids))):
            seen.append(run.model_dump_json())
        for log in pc.read_logs(log_filter=LogFilter(flow_run_id=LogFilterFlowRunId(any_=ids))):
            seen.append(log.message)
        for art in pc.read_artifacts():
            seen.append(art.model_dump_json())
    assert len(seen) > 6
    assert all(canary not in text for text in seen)
    assert "NaN" in "".join(seen)  # the failing run's error did reach the logs


def test_credentials_from_a_prefect_secret_block(
    prefect_api, s3_server, tmp_path, rng, monkeypatch, capfd, caplog
):
    """Workers started with no AWS credentials at all: the run can only read and write S3
    with the Secret block's credentials (canaries), and they show up nowhere."""
    import boto3
    import fsspec
    from distributed import Client, LocalCluster
    from prefect.blocks.system import Secret
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId

    from flows.embed import embed

    key_id, secret = f"AKIACANARY{uuid.uuid4().hex[:8].upper()}", f"CANARY{uuid.uuid4().hex}"
    Secret(value={"aws_access_key_id": key_id, "aws_secret_access_key": secret}).save(
        "s3-canary", overwrite=True
    )
    bucket = f"block-{os.urandom(4).hex()}"
    boto3.client("s3", endpoint_url=s3_server).create_bucket(Bucket=bucket)
    save_array(
        low_rank(rng, n=1500, d=6, dtype=np.float32), f"s3://{bucket}/in.zarr", chunks=(500, 6)
    )
    for var in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.delenv(var)
    with (
        LocalCluster(
            n_workers=2,
            threads_per_worker=1,
            processes=True,
            host="127.0.0.1",
            dashboard_address="127.0.0.1:0",
        ) as cluster,
        Client(cluster) as c,
    ):
        assert not any(c.run(lambda: "AWS_SECRET_ACCESS_KEY" in os.environ).values())
        m = embed(
            f"s3://{bucket}/in.zarr",
            f"s3://{bucket}/out",
            params={"n_components": 2},
            scheduler=cluster.scheduler_address,
            credentials_block="s3-canary",
        )
    assert m["output"] == f"s3://{bucket}/out"
    fs = fsspec.filesystem(
        "s3", client_kwargs={"endpoint_url": s3_server}, key="testing", secret="testing"
    )
    stored = _everything_text(fs, f"{bucket}/out")
    assert "_COMMITTED" in str(fs.find(f"{bucket}/out"))
    out, err = capfd.readouterr()
    seen = [stored, out, err, caplog.text]
    with get_client(sync_client=True) as pc:
        run = pc.read_flow_runs(
            flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[uuid.UUID(m["flow_run_id"])]))
        )[0]
        seen.append(run.model_dump_json())
        assert run.parameters["credentials_block"] == "s3-canary"
        seen += [a.model_dump_json() for a in pc.read_artifacts()]
    assert not any(key_id in t or secret in t for t in seen)


def test_a_run_committed_meanwhile_is_not_written_over(
    client, prefect_api, data, tmp_path, monkeypatch
):
    """The output's state is judged again once the lease is held: a run that commits the
    output between another run's validate stage and its lease is not written over."""
    import flows.embed as flow_module

    uri, X = data
    out = str(tmp_path / "late")
    real = flow_module.validate
    state = {"other": False}

    def validate_then_another_run_commits(spec):
        v = real(spec)
        if not state["other"]:
            state["other"] = True
            flow_module.embed(uri, out, params={"n_components": 2})
        return v

    monkeypatch.setattr(flow_module, "validate", validate_then_another_run_commits)
    with pytest.raises(StoreError, match="holds a committed run already"):
        flow_module.embed(uri, out, params={"n_components": 3})
    monkeypatch.undo()
    Y = open_output(out).read_array("embedding")
    np.testing.assert_allclose(Y, PCA(2).fit_transform(X), rtol=1e-4, atol=1e-3)
    assert not os.path.exists(os.path.join(out, "_LEASE"))
