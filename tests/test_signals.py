"""Ctrl-C and SIGKILL of the command line, as a terminal and an operator send them, to a real
CLI process with its own temporary Prefect server and its own LocalCluster of worker processes.

Ctrl-C is SIGINT to the whole foreground process group (the CLI and every child in it): the run
stops within 10 s, says in one line how to resume, and leaves its store resumable; nothing it
started keeps running. SIGKILL of the CLI alone: no process of the run outlives it by 10 s."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import numpy as np
import psutil
import pytest

from dimred_dask.io import RunStore

BIN = os.path.dirname(sys.executable)
STOP_SECONDS = 10.0  # what an operator may wait for a stop (and for children to die)


def _start(tmp_path):
    rng = np.random.default_rng(0)
    centres = rng.standard_normal((5, 20)) * 8
    X = (centres[rng.integers(0, 5, 3000)] + rng.standard_normal((3000, 20))).astype(np.float32)
    np.save(tmp_path / "x.npy", X)
    out = tmp_path / "out"
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_API")}
    env["PREFECT_HOME"] = str(tmp_path / "prefect-home")  # its own temporary server and db
    err = open(tmp_path / "stderr.txt", "w")
    proc = subprocess.Popen(
        [
            os.path.join(BIN, "dimred-dask"),
            "run",
            "--input",
            str(tmp_path / "x.npy"),
            "--output",
            str(out),
            "--method",
            "tsne",
            "--param",
            "n_iter=1000000",
            "--param",
            "checkpoint_every=50",
        ],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=err,
        start_new_session=True,
    )  # a process group of its own, as a shell job has
    deadline = time.monotonic() + 240
    while not (out / "checkpoints").exists():  # the optimisation is running on a worker
        assert proc.poll() is None, (tmp_path / "stderr.txt").read_text()[-3000:]
        assert time.monotonic() < deadline, "the fit did not start"
        time.sleep(0.2)
    time.sleep(1.0)
    family = psutil.Process(proc.pid).children(recursive=True)
    names = " ".join(" ".join(p.cmdline()) for p in family)
    assert "uvicorn" in names and "spawn_main" in names, names  # server and workers are ours
    return proc, out, family


def _survivors(family, seconds: float) -> list:
    deadline = time.monotonic() + seconds
    alive = family
    while alive and time.monotonic() < deadline:
        alive = [p for p in alive if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
        time.sleep(0.2)
    return [" ".join(p.cmdline()[:4]) for p in alive]


def test_ctrl_c_stops_the_run_within_seconds_and_leaves_it_resumable(tmp_path):
    proc, out, family = _start(tmp_path)
    t0 = time.monotonic()
    os.killpg(proc.pid, signal.SIGINT)  # what the terminal does on Ctrl-C
    try:
        rc = proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        pytest.fail("the run did not stop within 60 s of Ctrl-C")
    took = time.monotonic() - t0
    err = (tmp_path / "stderr.txt").read_text()
    assert took <= STOP_SECONDS, (took, err[-2000:])
    assert rc == 130 and "Traceback" not in err, err[-3000:]
    assert err.count("run the same command again to resume") == 1, err[-2000:]
    assert _survivors(family, STOP_SECONDS) == []
    store = RunStore(str(out))
    assert not store.committed() and not (out / "_LEASE").exists()
    assert store.check_writable(False) == "resume" and store.stage_marker("knn") is not None


def test_no_process_of_the_run_outlives_a_sigkilled_cli(tmp_path):
    proc, out, family = _start(tmp_path)
    os.kill(proc.pid, signal.SIGKILL)  # the CLI only, not its group
    proc.wait(timeout=30)
    survivors = _survivors(family, STOP_SECONDS)
    for p in family:  # leave nothing behind even if the assertion fails
        try:
            p.kill()
        except psutil.Error:
            pass
    assert survivors == []


def test_an_interrupt_raised_inside_a_gc_callback_is_not_lost():
    """The first Ctrl-C may arrive while a gc callback runs (distributed registers one), where
    Python ignores the KeyboardInterrupt: it is raised again in the code that was running."""
    import gc

    from flows._process import interruptible

    armed, fired = [], []

    def callback(phase, info):
        # armed only inside the block: an automatic collection while the handler is being
        # installed would otherwise meet Python's default handler, which nothing redelivers
        if phase == "start" and armed and not fired:
            fired.append(phase)
            os.kill(os.getpid(), signal.SIGINT)
            for _ in range(10_000):  # the handler runs here, inside the callback
                pass

    gc.callbacks.append(callback)
    try:
        with pytest.raises(KeyboardInterrupt), interruptible("stopping"):
            armed.append(True)
            gc.collect()
            deadline = time.monotonic() + STOP_SECONDS
            while time.monotonic() < deadline:
                pass
    finally:
        gc.callbacks.remove(callback)
    assert fired
