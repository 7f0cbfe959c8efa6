"""The command line end to end, and a job on an existing cluster started from the command
line (`dask scheduler` and two `dask worker` processes on 127.0.0.1)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import numpy as np
import pytest

from dimred_dask import PCA
from dimred_dask.io import open_output, save_array
from tests.data import low_rank

BIN = os.path.dirname(sys.executable)


def _cli(*args, env=None, timeout=300):
    return subprocess.run(
        [os.path.join(BIN, "dimred-dask"), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
    )


@pytest.fixture
def dask_cluster_cli(tmp_path):
    sched_file = tmp_path / "scheduler.json"
    env = {**os.environ}
    procs = [
        subprocess.Popen(
            [
                os.path.join(BIN, "dask"),
                "scheduler",
                "--host",
                "127.0.0.1",
                "--port",
                "0",
                "--no-dashboard",
                "--scheduler-file",
                str(sched_file),
            ],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
    ]
    deadline = time.time() + 60
    while not sched_file.exists() and time.time() < deadline:
        time.sleep(0.2)
    address = json.loads(sched_file.read_text())["address"]
    for i in range(2):
        procs.append(
            subprocess.Popen(
                [
                    os.path.join(BIN, "dask"),
                    "worker",
                    address,
                    "--nthreads",
                    "1",
                    "--nworkers",
                    "1",
                    "--host",
                    "127.0.0.1",
                    "--no-dashboard",
                    "--name",
                    f"cli-worker-{i}",
                ],
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        )
    from distributed import Client

    with Client(address, timeout="60s") as c:
        c.wait_for_workers(2, timeout=60)
    yield address
    for p in procs[::-1]:
        p.terminate()
    for p in procs:
        p.wait(timeout=30)


def test_run_on_existing_scheduler_via_cli(dask_cluster_cli, prefect_api, tmp_path, rng):
    X = low_rank(rng, n=4000, d=12, dtype=np.float32)
    np.save(tmp_path / "x.npy", X)
    out = tmp_path / "out.zarr"
    env = {**os.environ, "PREFECT_API_URL": prefect_api}
    res = _cli(
        "run",
        "--input",
        str(tmp_path / "x.npy"),
        "--output",
        str(out),
        "--method",
        "pca",
        "--n-components",
        "3",
        "--scheduler",
        dask_cluster_cli,
        "--json",
        env=env,
    )
    assert res.returncode == 0, res.stderr[-3000:]
    manifest = json.loads(res.stdout)
    assert manifest["cluster"]["scheduler"] == dask_cluster_cli
    assert manifest["cluster"]["n_workers"] == 2
    Y = open_output(str(out)).read_array("embedding")
    np.testing.assert_allclose(Y, PCA(3).fit_transform(X), rtol=1e-4, atol=1e-3)
    from distributed import Client

    with Client(dask_cluster_cli) as c:  # both CLI-started workers did work
        counts = c.run(lambda dask_worker: len(dask_worker.data) + dask_worker.state.executed_count)
    assert len(counts) == 2 and all(v > 0 for v in counts.values())
    # DASK_SCHEDULER_ADDRESS works the same as --scheduler; a kernel PCA replaces the run store,
    # and a successful run prints no traceback (comm errors of a closing client included)
    res = _cli(
        "run",
        "--input",
        str(tmp_path / "x.npy"),
        "--output",
        str(out),
        "--n-components",
        "2",
        "--method",
        "kpca",
        "--overwrite",
        env={**env, "DASK_SCHEDULER_ADDRESS": dask_cluster_cli},
    )
    assert res.returncode == 0, res.stderr[-3000:]
    assert "Traceback" not in res.stderr and "Error" not in res.stderr, res.stderr[-3000:]
    assert open_output(str(out)).read_json("manifest.json")["method"] == "kpca"


def test_cli_inspect_help_and_errors(client, prefect_api, tmp_path, rng):
    X = low_rank(rng, n=1500, d=10)
    save_array(X, str(tmp_path / "in.zarr"), chunks=(500, 10))
    env = {**os.environ, "PREFECT_API_URL": prefect_api}
    res = _cli(
        "run",
        "--input",
        str(tmp_path / "in.zarr"),
        "--output",
        str(tmp_path / "o.zarr"),
        "--n-components",
        "0.9",
        "--param",
        "solver=tsqr",
        env=env,
    )
    assert res.returncode == 0, res.stderr[-3000:]
    assert "explained variance ratio" in res.stdout and "trustworthiness" in res.stdout
    assert "[" in res.stderr and "100.0%" in res.stderr  # the terminal progress bar
    assert "Traceback" not in res.stderr and "| INFO" not in res.stderr, res.stderr
    res = _cli("inspect", str(tmp_path / "o.zarr"))
    assert res.returncode == 0 and "solver" in res.stdout and "tsqr" in res.stdout
    manifest = json.loads(_cli("inspect", "--json", str(tmp_path / "o.zarr")).stdout)
    assert manifest["model"]["explained_variance_ratio_total"] >= 0.9
    assert manifest["params"]["solver"] == "tsqr"
    help_text = _cli("run", "--help").stdout
    for word in ("--input", "--scheduler", "--overwrite", "s3://", "DASK_SCHEDULER_ADDRESS"):
        assert word in help_text
    res = _cli(
        "run",
        "--input",
        str(tmp_path / "in.zarr"),
        "--output",
        str(tmp_path / "o2"),
        "--param",
        "bogus=1",
        env=env,
    )
    assert res.returncode == 2 and "Unknown parameter(s) ['bogus']" in res.stderr
    # a refused run shows the error block only: no Prefect log lines, no traceback
    assert res.stderr.startswith("error: InputError: Unknown parameter(s) ['bogus']"), res.stderr
    assert res.stderr.count("\n") == 2 and "Fix:" in res.stderr, res.stderr
    res = _cli("inspect", str(tmp_path / "in.zarr"))  # an input, not a run: say so
    assert res.returncode == 2 and "not a dimred-dask run store" in res.stderr
    assert "--overwrite" not in res.stderr
