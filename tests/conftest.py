"""Shared fixtures: a real LocalCluster of worker processes, a real Prefect API
(prefect_test_harness), a real S3-compatible server (moto) on 127.0.0.1.

Environment set here, before any worker process starts, so that workers inherit it:
dummy AWS credentials and the loopback S3 endpoint (a port bound and listening from now on,
the server started on it when a test asks for it), Prefect telemetry off, and Dask's monitoring made
idle-cheap: no statistical profiler (a stack sample every 10 ms), the event-loop watchdog
and the system monitor woken every 1 and 2 s instead of every 20 and 500 ms. An idle
LocalCluster of two workers then costs ~2.5 s of CPU a minute instead of ~7.4 s, which on
two cores shared by two test processes and their clusters is time taken from the tests.
The workers' memory monitor, which pauses and restarts them at their limits, is unchanged.
"""

from __future__ import annotations

import functools
import os
import socket
import threading

import numpy as np
import pytest


def _listening_socket() -> socket.socket:
    """A socket bound to a free loopback port and listening, held for the whole session: the
    S3 server serves from it (no other process can take the port between now, when the
    workers' environment must name it, and the server's start)."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind(("127.0.0.1", 0))
    s.listen(128)
    return s


S3_SOCKET = _listening_socket()
S3_PORT = S3_SOCKET.getsockname()[1]
S3_ENDPOINT = f"http://127.0.0.1:{S3_PORT}"
SERVER_START_TIMEOUT = 60.0  # a server that has not started by then fails its fixture
os.environ.update(
    {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_ENDPOINT_URL": S3_ENDPOINT,
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
        "DO_NOT_TRACK": "1",
        "PREFECT_LOGGING_LEVEL": "WARNING",
        "DASK_DISTRIBUTED__WORKER__PROFILE__ENABLED": "False",
        "DASK_DISTRIBUTED__ADMIN__TICK__INTERVAL": "1s",
        "DASK_DISTRIBUTED__ADMIN__SYSTEM_MONITOR__INTERVAL": "2s",
    }
)
os.environ.pop("DASK_SCHEDULER_ADDRESS", None)

# Import Prefect now, outside any test's captured output: it binds its log handlers to the
# streams it finds at import time.
import flows.embed  # noqa: E402,F401


@pytest.fixture(scope="session")
def client():
    """Two single-threaded worker processes (the machine has 2 cores)."""
    from distributed import Client, LocalCluster

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
        yield c


@pytest.fixture(scope="session")
def prefect_api():
    from prefect.settings import PREFECT_API_URL
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=120):
        yield PREFECT_API_URL.value()


def _serialise_moto_writes() -> None:
    """Make the moto server's object writes atomic, as S3's are.

    moto checks a conditional PUT's ``If-None-Match: *`` and stores the object in two steps
    without a lock, and its threaded server runs requests concurrently: two racing exclusive
    creates of one key can both succeed (and an overwrite can close the buffer a concurrent
    response is reading). S3 decides a conditional write atomically, and the product's lease
    relies on that, so the test server takes one lock around every write to a key.
    """
    from moto.s3.responses import S3Response

    if getattr(S3Response, "_dimred_serialised", False):
        return
    lock = threading.Lock()

    def locked(method):
        @functools.wraps(method)
        def run(self, *args, **kwargs):
            with lock:
                return method(self, *args, **kwargs)

        return run

    for name in ("_key_response_put", "_key_response_post", "_key_response_delete"):
        setattr(S3Response, name, locked(getattr(S3Response, name)))
    S3Response._dimred_serialised = True


@pytest.fixture(scope="session")
def s3_server():
    """moto's S3 server on the session's listening socket (`S3_SOCKET`)."""
    from moto.moto_server.werkzeug_app import (
        DomainDispatcherApplication,
        MotoRequestHandler,
        create_backend_app,
    )
    from werkzeug.serving import make_server

    _serialise_moto_writes()
    app = DomainDispatcherApplication(create_backend_app)
    started, failed = threading.Event(), []

    def serve():
        try:
            server = make_server(
                "127.0.0.1",
                S3_PORT,
                app,
                threaded=True,
                request_handler=MotoRequestHandler,
                fd=S3_SOCKET.fileno(),
            )
        except BaseException as exc:  # reported to the fixture, not lost with the thread
            failed.append(exc)
            started.set()
            return
        holder.append(server)
        started.set()
        server.serve_forever()

    holder: list = []
    thread = threading.Thread(target=serve, daemon=True, name="moto-s3")
    thread.start()
    if not started.wait(SERVER_START_TIMEOUT) or failed:
        pytest.fail(f"the S3 server did not start on {S3_ENDPOINT}: {failed or 'timed out'}")
    yield S3_ENDPOINT
    holder[0].shutdown()
    thread.join(10)


@pytest.fixture
def rng():
    return np.random.default_rng(12345)
