"""A real `prefect server start` on 127.0.0.1 with a temporary PREFECT_HOME: deploy the flow
from deploy/prefect.yaml, run the deployment through a process work pool and its worker,
check through the API that it Completed with its artifacts and stage task runs, and open the
run's page in the Prefect UI with headless Chromium (a screenshot, and the page's DOM)."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time

import httpx
import numpy as np
import pytest

from dimred_dask.io import open_output, save_array
from tests.data import low_rank

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.path.dirname(sys.executable)
STAGE_TASKS = {"validate", "knn", "kernel", "fit", "transform-write", "evaluate", "publish"}
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait(url: str, proc, timeout: float = 180) -> bool:
    """Whether ``url`` answers 200 within ``timeout``; False at once if ``proc`` exited (its
    port was taken by another process between the pick and the bind)."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc.poll() is not None:
            return False
        try:
            if httpx.get(url, timeout=2).status_code == 200:
                return True
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    raise TimeoutError(url)


@pytest.fixture(scope="module")
def prefect_server(tmp_path_factory):
    """``prefect server start`` on a free loopback port: a server that exits before it
    answers (its port taken meanwhile by another process) is started again on another."""
    home = tmp_path_factory.mktemp("prefect-home")
    for attempt in range(3):
        port = _port()
        api = f"http://127.0.0.1:{port}/api"
        env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
        env.update(
            {
                "PREFECT_HOME": str(home),
                "PREFECT_API_URL": api,
                "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
                "DO_NOT_TRACK": "1",
                "PREFECT_SERVER_API_HOST": "127.0.0.1",
                "PREFECT_SERVER_API_PORT": str(port),
            }
        )
        log = open(home / f"server-{attempt}.log", "w")
        proc = subprocess.Popen(
            [
                os.path.join(BIN, "prefect"),
                "server",
                "start",
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
            ],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        try:
            up = _wait(f"{api}/health", proc)
        except BaseException:
            proc.terminate()
            proc.wait(timeout=60)
            log.close()
            raise
        if up:
            break
        log.close()
    else:
        pytest.fail(f"prefect server start exited three times; see {home}/server-*.log")
    try:
        yield {"api": api, "ui": f"http://127.0.0.1:{port}", "env": env, "home": home}
    finally:
        proc.terminate()
        proc.wait(timeout=60)
        log.close()


def _prefect(*args, env, timeout=180):
    res = subprocess.run(
        [os.path.join(BIN, "prefect"), *args],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    return res.stdout


def test_deployment_runs_through_a_work_pool_and_shows_in_the_ui(
    prefect_server, client, tmp_path, rng
):
    env, api = prefect_server["env"], prefect_server["api"]
    X = low_rank(rng, n=3000, d=10, dtype=np.float32)
    save_array(X, str(tmp_path / "in.zarr"), chunks=(1000, 10))
    _prefect("work-pool", "create", "local", "--type", "process", env=env)
    _prefect(
        "--no-prompt",
        "deploy",
        "--prefect-file",
        "deploy/prefect.yaml",
        "--name",
        "pca-nightly",
        env=env,
    )
    params = {
        "input": str(tmp_path / "in.zarr"),
        "output": str(tmp_path / "out.zarr"),
        "params": {"n_components": 2},
        "scheduler": client.scheduler.address,
    }
    out = _prefect(
        "deployment", "run", "embed/pca-nightly", "--params", json.dumps(params), env=env
    )
    run_id = next(line.split()[-1] for line in out.splitlines() if "UUID" in line)
    worker = subprocess.Popen(
        [os.path.join(BIN, "prefect"), "worker", "start", "--pool", "local"],
        env={**env, "DIMRED_DASK_HOME": ROOT},
        cwd=ROOT,
        stdout=open(tmp_path / "worker.log", "w"),
        stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.time() + 400
        while time.time() < deadline:
            run = httpx.get(f"{api}/flow_runs/{run_id}").json()
            if run["state"]["type"] in ("COMPLETED", "FAILED", "CRASHED", "CANCELLED"):
                break
            time.sleep(1)
    finally:
        # Prefect's worker may linger after SIGTERM (its cancellation observer backs off on a
        # server that is going away); the run's state was read above, so end it for sure.
        worker.terminate()
        try:
            worker.wait(timeout=30)
        except subprocess.TimeoutExpired:
            worker.kill()
            worker.wait(timeout=30)
    assert run["state"]["type"] == "COMPLETED", (tmp_path / "worker.log").read_text()[-3000:]
    assert run["work_pool_name"] == "local" and run["deployment_id"]
    tasks = httpx.post(
        f"{api}/task_runs/filter", json={"flow_runs": {"id": {"any_": [run_id]}}}
    ).json()
    assert {t["task_key"].rsplit("-", 1)[0] for t in tasks} >= STAGE_TASKS or {
        t["name"].rsplit("-", 1)[0] for t in tasks
    } >= STAGE_TASKS
    assert all(t["state"]["type"] == "COMPLETED" for t in tasks)
    arts = httpx.post(
        f"{api}/artifacts/filter", json={"artifacts": {"flow_run_id": {"any_": [run_id]}}}
    ).json()
    assert {"markdown", "table", "progress"} <= {a["type"] for a in arts}
    summary = next(a for a in arts if a["type"] == "markdown")
    assert "Dask dashboard" in summary["data"]
    assert (
        open_output(str(tmp_path / "out.zarr")).read_json("manifest.json")["flow_run_id"] == run_id
    )
    _screenshot(prefect_server["ui"], run_id, run["name"], tmp_path)


def _screenshot(ui: str, run_id: str, run_name: str, tmp_path) -> None:
    assert CHROMIUM, "Debian's chromium is installed by `make test` (see the Makefile)"
    url = f"{ui}/runs/flow-run/{run_id}"
    flags = [
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        f"--user-data-dir={tmp_path / 'chromium'}",
        "--window-size=1440,1000",
        "--virtual-time-budget=20000",
    ]
    dom = subprocess.run(
        [CHROMIUM, *flags, "--dump-dom", url], capture_output=True, text=True, timeout=180
    ).stdout
    assert run_name in dom, "the run's page did not render its name"
    png = tmp_path / "prefect-ui-run.png"
    subprocess.run([CHROMIUM, *flags, f"--screenshot={png}", url], capture_output=True, timeout=180)
    from PIL import Image

    img = np.asarray(Image.open(png).convert("L"), dtype=np.float64)
    assert img.shape == (1000, 1440) and img.std() > 10  # a rendered page, not a blank one
    keep = os.environ.get("DIMRED_KEEP_SCREENSHOT")
    if keep:
        shutil.copy(png, keep)
