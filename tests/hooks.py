"""The observer the crash and resume tests install with ``DIMRED_HOOK=tests.hooks:observe``
(`flows.stages.notify`); the shipped code holds no fault injection of its own.

- ``DIMRED_TEST_EXECUTION_LOG=<file>``: one JSON line per stage actually computed (not
  reused): an execution count that survives the process.
- ``DIMRED_TEST_KILL=after:<stage>``: the flow's process SIGKILLs itself right after that
  stage committed.
- ``DIMRED_TEST_KILL=checkpoint:<n>``: the worker that wrote the n-th checkpoint of an
  optimisation SIGKILLs itself right after writing it, once when
  ``DIMRED_TEST_KILL_ONCE=<file>`` is set (the file records that it fired).
- ``DIMRED_TEST_REWRITE=<stage>:<target>:<source>``: right after that stage committed, the
  bytes of ``source`` are written over the file ``target`` in place (a producer rewriting a
  chunk of the input while the run reads it).
- ``DIMRED_TEST_FAIL=after:<stage>``: the flow raises right after that stage committed (a
  run stopped part way, in this process).
"""

from __future__ import annotations

import json
import os
import signal
import time

HOOK = "tests.hooks:observe"
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def env(**extra) -> dict:
    """The environment variables that install this observer in a process started with them
    (``PYTHONPATH`` so that a CLI process or a spawned worker can import ``tests``)."""
    path = os.pathsep.join(p for p in (ROOT, os.environ.get("PYTHONPATH")) if p)
    return {"DIMRED_HOOK": HOOK, "PYTHONPATH": path, **extra}


def observe(event: str, **details) -> None:
    kill = os.environ.get("DIMRED_TEST_KILL", "")
    if event == "stage":
        log = os.environ.get("DIMRED_TEST_EXECUTION_LOG")
        if log:
            with open(log, "a") as f:
                f.write(json.dumps({**details, "pid": os.getpid(), "time": time.time()}) + "\n")
        if kill == f"after:{details['stage']}":
            os.kill(os.getpid(), signal.SIGKILL)
        stage, _, paths = os.environ.get("DIMRED_TEST_REWRITE", "").partition(":")
        if paths and stage == details["stage"]:
            target, _, source = paths.partition(":")
            with open(source, "rb") as f:
                data = f.read()
            with open(target, "r+b") as f:  # in place: the same file, other bytes
                f.write(data)
                f.truncate()
        if os.environ.get("DIMRED_TEST_FAIL") == f"after:{details['stage']}":
            raise RuntimeError(f"stopped by the test after the {details['stage']} stage")
    elif event == "checkpoint" and kill == f"checkpoint:{details['count']}":
        once = os.environ.get("DIMRED_TEST_KILL_ONCE")
        if once:
            try:
                os.close(os.open(once, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
            except FileExistsError:
                return
        os.kill(os.getpid(), signal.SIGKILL)
