"""Faults with real processes: a Dask worker SIGKILLed mid-stage, the flow's own process
SIGKILLed after stage 2 of 4, chunks too large for a worker's memory, workers that keep
dying, and object-storage errors (transient 5xx, denied access) on the loopback S3 server."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import numpy as np
import pytest
from distributed import Client, LocalCluster
from distributed.diagnostics.plugin import WorkerPlugin

from dimred_dask import StageError, StoreError
from dimred_dask._compute import workers
from dimred_dask.io import open_output, save_array
from tests import hooks
from tests.data import low_rank, zarr_input

BIN = os.path.dirname(sys.executable)


class KillWorker(WorkerPlugin):
    """SIGKILL this worker process when its ``after``-th task named ``prefix`` finishes.
    With ``once`` a flag file makes it fire on one worker, one time only."""

    name = "kill-worker"

    def __init__(self, prefix: str, after: int, flag: str, once: bool = True):
        self.prefix, self.after, self.flag, self.once = prefix, after, flag, once

    def setup(self, worker):
        self.count = 0

    def transition(self, key, start, finish, **kwargs):
        from dask.utils import key_split

        if finish != "memory" or not key_split(key).startswith(self.prefix):
            return
        self.count += 1
        if self.count < self.after:
            return
        if self.once:
            try:
                fd = os.open(self.flag, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
            except FileExistsError:
                return
            os.write(fd, str(os.getpid()).encode())
            os.close(fd)
        os.kill(os.getpid(), signal.SIGKILL)


@pytest.fixture
def fresh_cluster():
    """A cluster of its own (the faults here kill its workers)."""
    import dask

    def make(**kwargs):
        with dask.config.set({"distributed.scheduler.allowed-failures": kwargs.pop("failures", 3)}):
            cluster = LocalCluster(
                n_workers=2,
                threads_per_worker=1,
                processes=True,
                host="127.0.0.1",
                dashboard_address="127.0.0.1:0",
                **kwargs,
            )
        made.append(cluster)
        return cluster

    made = []
    yield make
    for c in made:
        c.close()


@pytest.fixture
def data(tmp_path, rng):
    return zarr_input(tmp_path, rng, n=24000, d=32, chunk_rows=1500)


def _chunks_equal(a: str, b: str):
    sa, sb = open_output(a), open_output(b)
    ea, eb = sa.open_array("embedding"), sb.open_array("embedding")
    assert ea.chunks == eb.chunks and ea.nchunks == eb.nchunks
    step = ea.chunks[0]
    for i in range(ea.nchunks):
        np.testing.assert_array_equal(ea[i * step : (i + 1) * step], eb[i * step : (i + 1) * step])
    for name, value in sa.read_group("model").items():
        np.testing.assert_array_equal(value, sb.read_group("model")[name])


def test_worker_sigkilled_mid_stage_changes_nothing(fresh_cluster, prefect_api, data, tmp_path):
    from flows.embed import embed

    uri, _ = data
    cluster = fresh_cluster()
    params = {"n_components": 4}
    embed(
        uri,
        str(tmp_path / "calm"),
        params=params,
        scheduler=cluster.scheduler_address,
        chunk_rows=1500,
    )
    flag = str(tmp_path / "killed")
    with Client(cluster) as c:
        c.register_plugin(KillWorker("block_stats", after=3, flag=flag))
        before = set(workers(c))
        embed(
            uri,
            str(tmp_path / "stormy"),
            params=params,
            scheduler=cluster.scheduler_address,
            chunk_rows=1500,
        )
        after = set(workers(c))
    assert os.path.exists(flag), "the fault was not injected"
    assert before != after, "a worker process should have been replaced"
    _chunks_equal(str(tmp_path / "calm"), str(tmp_path / "stormy"))


def _cli_run(args, env):
    return subprocess.run(
        [os.path.join(BIN, "dimred-dask"), "run", *args],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )


def test_flow_process_killed_after_stage_2_resumes(client, prefect_api, data, tmp_path):
    from flows.embed import embed

    uri, _ = data
    log = tmp_path / "executions.jsonl"
    env = {
        **os.environ,
        "PREFECT_API_URL": prefect_api,
        **hooks.env(DIMRED_TEST_EXECUTION_LOG=str(log)),
    }
    args = [
        "--input",
        uri,
        "--output",
        str(tmp_path / "out"),
        "--n-components",
        "3",
        "--scheduler",
        client.scheduler.address,
    ]
    first = _cli_run(args, {**env, "DIMRED_TEST_KILL": "after:transform"})
    assert first.returncode == -signal.SIGKILL, first.stderr[-2000:]
    assert not (tmp_path / "out" / "_COMMITTED").exists()
    second = _cli_run(args, env)
    assert second.returncode == 0, second.stderr[-2000:]
    runs = [json.loads(line) for line in log.read_text().splitlines()]
    counts = {
        s: sum(r["stage"] == s for r in runs) for s in ("fit", "transform", "evaluate", "publish")
    }
    assert counts == {"fit": 1, "transform": 1, "evaluate": 1, "publish": 1}, runs
    assert len({r["pid"] for r in runs if r["stage"] in ("fit", "transform")}) == 1
    manifest = open_output(str(tmp_path / "out")).read_json("manifest.json")
    assert manifest["stages"]["fit"] == manifest["stages"]["transform"] == "reused"
    embed(uri, str(tmp_path / "calm"), params={"n_components": 3})
    _chunks_equal(str(tmp_path / "out"), str(tmp_path / "calm"))


def test_partial_embedding_is_detected_and_redone(client, prefect_api, data, tmp_path):
    from flows.embed import embed

    uri, _ = data
    out = tmp_path / "out"
    embed(uri, str(out), params={"n_components": 3}, chunk_rows=1500)
    (out / "_COMMITTED").unlink()
    chunk_files = sorted((out / "embedding" / "c").rglob("*"))
    victims = [p for p in chunk_files if p.is_file()][:2]
    for p in victims:
        p.unlink()  # a crash in the middle of writing the embedding
    again = embed(uri, str(out), params={"n_components": 3}, chunk_rows=1500)
    assert again["stages"]["fit"] == "reused" and again["stages"]["transform"] == "computed"
    assert all(p.exists() for p in victims)
    embed(uri, str(tmp_path / "calm"), params={"n_components": 3}, chunk_rows=1500)
    _chunks_equal(str(out), str(tmp_path / "calm"))


def _last_flow_run_state():
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.sorting import FlowRunSort

    with get_client(sync_client=True) as c:
        run = c.read_flow_runs(sort=FlowRunSort.START_TIME_DESC, limit=1)[0]
    return run.state


def test_forced_oversized_chunks_fail_fast_naming_stage_and_memory(
    fresh_cluster, prefect_api, rng, tmp_path
):
    """A forced chunk is judged by the rows it really holds (at most the input's): here the
    whole 92 MiB input in one chunk, more than a quarter of a 300 MiB worker."""
    from flows.embed import embed

    (tmp_path / "big").mkdir()
    uri, _ = zarr_input(tmp_path / "big", rng, n=60_000, d=400, chunk_rows=6000)
    cluster = fresh_cluster(memory_limit="300MiB")
    with pytest.raises(
        StageError, match=r"(?s)Stage 'validate'.*of 600000 rows are 92 MiB.*300 MiB.*--chunk-rows"
    ):
        embed(
            uri,
            str(tmp_path / "out"),
            params={"n_components": 2},
            scheduler=cluster.scheduler_address,
            chunk_rows=600_000,
        )
    assert _last_flow_run_state().is_failed()
    assert not (tmp_path / "out").exists()


def test_workers_paused_for_memory_fail_the_run_instead_of_waiting_for_ever(
    fresh_cluster, prefect_api, data, tmp_path, monkeypatch
):
    """A worker over its memory's pause fraction runs nothing until its memory falls; with
    every worker paused the run would wait for ever. It fails after DIMRED_PAUSED_TIMEOUT
    seconds, naming the stage and the workers' memory, and leaves nothing behind. (The
    workers are paused by hand, with their own memory monitor told not to resume them.)"""
    import dask
    from distributed.core import Status

    from flows.embed import embed

    uri, _ = data
    with dask.config.set({"distributed.worker.memory.pause": False}):
        cluster = fresh_cluster(memory_limit="2GiB")

    def pause(dask_worker):
        dask_worker.status = Status.paused

    monkeypatch.setenv("DIMRED_PAUSED_TIMEOUT", "3")
    with Client(cluster) as c:
        c.run(pause)
        with pytest.raises(
            StageError, match=r"(?s)all 2 workers have been paused for memory.*2,048"
        ):
            embed(
                uri,
                str(tmp_path / "out"),
                params={"n_components": 2},
                scheduler=cluster.scheduler_address,
            )
    assert _last_flow_run_state().is_failed()
    assert not (tmp_path / "out").exists()


def test_workers_that_keep_dying_fail_the_run_with_the_stage(
    fresh_cluster, prefect_api, data, tmp_path
):
    from flows.embed import embed

    uri, _ = data
    cluster = fresh_cluster(memory_limit="1GiB", failures=1)
    with Client(cluster) as c:
        c.register_plugin(KillWorker("block_stats", after=1, flag="", once=False))
        with pytest.raises(StageError, match=r"(?s)Stage 'fit' failed.*died.*1,024 MiB"):
            embed(
                uri,
                str(tmp_path / "out"),
                params={"n_components": 2},
                scheduler=cluster.scheduler_address,
                chunk_rows=1500,
            )
    assert _last_flow_run_state().is_failed()
    assert not (tmp_path / "out").exists()


@pytest.fixture
def s3_bucket(s3_server):
    import boto3

    name = f"faults-{os.urandom(4).hex()}"
    boto3.client("s3", endpoint_url=s3_server).create_bucket(Bucket=name)
    return name


def test_transient_s3_errors_are_retried(
    client, prefect_api, s3_server, s3_bucket, rng, monkeypatch
):
    from flows.embed import embed
    from tests.faultproxy import FaultProxy

    X = low_rank(rng, n=3000, d=12, dtype=np.float32)
    save_array(X, f"s3://{s3_bucket}/in.zarr", chunks=(500, 12))
    embed(f"s3://{s3_bucket}/in.zarr", f"s3://{s3_bucket}/calm", params={"n_components": 2})
    # every 20th request: ~18 faults in a run of ~360 requests (every 5th gave 72, and botocore
    # waits up to 2^attempt s before each retry: 50 s of this test was backoff)
    with FaultProxy(s3_server, mode="flaky", every=20) as proxy:
        monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.url)  # the workers get it in the run's options
        embed(f"s3://{s3_bucket}/in.zarr", f"s3://{s3_bucket}/flaky", params={"n_components": 2})
    assert proxy.injected >= 5, proxy.requests
    monkeypatch.setenv("AWS_ENDPOINT_URL", s3_server)
    calm = open_output(f"s3://{s3_bucket}/calm").read_array("embedding")
    np.testing.assert_array_equal(
        open_output(f"s3://{s3_bucket}/flaky").read_array("embedding"), calm
    )


def test_denied_and_missing_storage_fail_clearly(
    client, prefect_api, s3_server, s3_bucket, monkeypatch
):
    from dimred_dask import InputError
    from flows.embed import embed
    from tests.faultproxy import FaultProxy

    with FaultProxy(s3_server, mode="deny") as proxy:
        monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.url)
        with pytest.raises(StoreError, match="denied"):
            embed(f"s3://{s3_bucket}/in.zarr", f"s3://{s3_bucket}/out", params={"n_components": 2})
    assert proxy.injected >= 1
    monkeypatch.setenv("AWS_ENDPOINT_URL", s3_server)
    with pytest.raises(InputError, match="does not exist"):
        embed(
            "s3://no-such-bucket-anywhere/in.zarr",
            f"s3://{s3_bucket}/out2",
            params={"n_components": 2},
        )


def test_observer_hook_is_called_and_a_bad_one_is_refused(monkeypatch, tmp_path):
    """DIMRED_HOOK: the named function receives each event with its details; a name that
    imports nothing is an InputError with the fix, raised before any work."""
    from dimred_dask.errors import InputError
    from flows.stages import check_observer, notify

    log = tmp_path / "events.jsonl"
    for name, value in hooks.env(DIMRED_TEST_EXECUTION_LOG=str(log)).items():
        monkeypatch.setenv(name, value)
    check_observer()
    notify("stage", stage="fit", fingerprint="abc", output="runs/x")
    notify("checkpoint", output="runs/x", prefix="p", iteration=20, count=1)  # not logged
    (line,) = log.read_text().splitlines()
    assert {k: json.loads(line)[k] for k in ("stage", "fingerprint", "output")} == {
        "stage": "fit",
        "fingerprint": "abc",
        "output": "runs/x",
    }
    for bad in (
        "tests.no_such_module:observe",
        "tests.hooks:no_such_function",
        "tests.hooks",
        "tests.hooks:HOOK",
    ):
        monkeypatch.setenv("DIMRED_HOOK", bad)
        with pytest.raises(InputError, match="DIMRED_HOOK") as err:
            check_observer()
        assert "package.module:function" in str(err.value)


def test_a_neighbour_embedding_on_paused_workers_fails_instead_of_waiting_for_ever(
    fresh_cluster, monkeypatch
):
    """t-SNE, UMAP and SNE run their optimisations as tasks on the workers and wait for them
    apart from `compute`: with every worker paused for memory that wait, too, fails after
    DIMRED_PAUSED_TIMEOUT seconds with the stage's name (it waited for ever before)."""
    import dask
    from distributed.core import Status

    from dimred_dask.methods import tsne

    with dask.config.set({"distributed.worker.memory.pause": False}):
        cluster = fresh_cluster(memory_limit="2GiB")

    def pause(dask_worker):
        dask_worker.status = Status.paused

    X = np.random.default_rng(0).standard_normal((300, 5)).astype(np.float32)
    monkeypatch.setenv("DIMRED_PAUSED_TIMEOUT", "3")
    with Client(cluster) as c:
        c.run(pause)
        with pytest.raises(StageError, match="t-SNE optimisation.*paused for memory"):
            tsne(X, perplexity=10.0, n_iter=250, random_state=0)
