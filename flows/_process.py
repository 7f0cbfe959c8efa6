"""How the command line's processes start, stop and die with it.

- Prefect's temporary API server (started when no ``PREFECT_API_URL`` is set) runs in its own
  Unix session (setsid), so the terminal's Ctrl-C (SIGINT to the whole foreground process
  group) does not
  kill it under a run that is still reporting its state, and with a parent-death signal
  (Linux ``PR_SET_PDEATHSIG``), so it ends when the command is killed, even by SIGKILL.
- The first Ctrl-C (or SIGTERM) stops the run: a `KeyboardInterrupt` in the main thread unwinds
  the flow (the lease is released, the store is left resumable), the Dask cluster closes, the
  temporary server stops. A second Ctrl-C ends the process and its children at once.
- Dask's worker processes already end with their parent (``distributed`` watches the parent
  through a pipe); Prefect's own server is the only child that needed help.
"""

from __future__ import annotations

import _thread
import contextlib
import logging
import os
import signal
import sys
import time

# Run in the server's process before it becomes uvicorn: die with the parent, or exit at once
# if the parent is already gone (the parent-death signal is armed only for a live parent).
_GUARD = (
    "import ctypes,os,signal,sys\n"
    "ctypes.CDLL(None).prctl(1, int(signal.SIGTERM))\n"  # PR_SET_PDEATHSIG
    "os.getppid() == int(sys.argv[1]) or sys.exit(0)\n"
    "os.execv(sys.argv[2], sys.argv[2:])\n"
)


class _Subprocess:
    """Stands in for the ``subprocess`` module inside Prefect's server module while it starts
    the server: the same call, in a new Unix session (setsid), behind the parent-death guard."""

    def __init__(self, real):
        self._real = real

    def __getattr__(self, name):
        return getattr(self._real, name)

    def Popen(self, args, **kwargs):  # noqa: N802 (the name Prefect calls)
        if sys.platform.startswith("linux"):
            args = [sys.executable, "-c", _GUARD, str(os.getpid()), *args]
        return self._real.Popen(args, start_new_session=True, **kwargs)


SERVER_STARTUP_SECONDS = 180
PREFECT_API_FIX = (
    "start that server (prefect server start) or point PREFECT_API_URL at a running one; "
    "unset PREFECT_API_URL to run with Prefect's temporary local API instead."
)


def check_prefect_api(timeout: float = 10.0) -> None:
    """Refuse (`ServiceError`) a ``PREFECT_API_URL`` that does not answer its health check
    within ``timeout`` seconds, before a run starts anything; nothing to check without it
    (the run starts Prefect's temporary API)."""
    import httpx
    from prefect.settings import PREFECT_API_URL

    from dimred_dask.errors import ServiceError

    url = PREFECT_API_URL.value()
    if not url:
        return
    try:
        response = httpx.get(url.rstrip("/") + "/health", timeout=timeout)
    except httpx.HTTPError as exc:
        raise ServiceError(
            f"Prefect's API at {url} (PREFECT_API_URL) does not answer "
            f"({type(exc).__name__}: {exc}); runs report their state, logs and artifacts "
            "there.",
            PREFECT_API_FIX,
        ) from None
    if response.status_code != 200:
        raise ServiceError(
            f"Prefect's API at {url} (PREFECT_API_URL) answered its health check with HTTP "
            f"{response.status_code}, not 200.",
            PREFECT_API_FIX,
        )


def prefect_api_failure(exc: BaseException):
    """The `ServiceError` for a failure to reach Prefect's API met during a run (Prefect
    raises ``RuntimeError('Failed to reach API ...')`` or an httpx error), else None."""
    from dimred_dask.errors import ServiceError

    text = f"{type(exc).__name__}: {exc}"
    module = type(exc).__module__
    if "reach API" in text or module.startswith(("httpx", "httpcore")):
        from prefect.settings import PREFECT_API_URL

        return ServiceError(
            f"Lost Prefect's API at {PREFECT_API_URL.value() or 'the temporary server'} "
            f"during the run ({text}); the run stopped.",
            PREFECT_API_FIX + " Then run the same command again (committed stages are reused).",
        )
    return None


def start_temporary_server() -> object | None:
    """Start Prefect's temporary API server our way, unless a Prefect API is configured; later
    calls to Prefect's ``SubprocessASGIServer()`` get this instance. Returns it (or None)."""
    from prefect.settings import PREFECT_API_URL

    if PREFECT_API_URL.value():
        return None
    import prefect.server.api.server as server_module
    from prefect.server.api.server import SubprocessASGIServer

    class _OwnSessionServer(SubprocessASGIServer):
        def _run_uvicorn_command(self):
            real = server_module.subprocess
            server_module.subprocess = _Subprocess(real)
            try:
                return super()._run_uvicorn_command()
            finally:
                server_module.subprocess = real

    existing = SubprocessASGIServer._instances.get(None)
    if existing is not None and existing.running:
        return existing
    SubprocessASGIServer._instances.pop(None, None)
    server = _OwnSessionServer()  # registered under the key None, like Prefect's own
    # Prefect waits 20 s for it by default; a fresh database's migrations on a busy machine
    # take longer, and a run should not fail for that (the setting, when given, is obeyed)
    given = "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS" in os.environ
    server.start(timeout=None if given else SERVER_STARTUP_SECONDS)
    return server


@contextlib.contextmanager
def interruptible(notice: str):
    """The first SIGINT / SIGTERM raises `KeyboardInterrupt` in the main thread (after printing
    ``notice``); a second one ends the process group's children and this process at once.
    Python ignores an exception raised inside a gc callback or a ``__del__`` (distributed
    runs one on every collection): a first interrupt lost there is raised again at once."""
    import threading

    state = {"count": 0, "lost": False, "hooking": False}
    lock = threading.RLock()  # the handler may run in the main thread while it holds it

    def handler(signum, frame):
        with lock:
            if state["lost"] and state["hooking"]:
                return  # inside the hook arranging its redelivery: that comes next
            lost, state["lost"] = state["lost"], False
        if lost:  # the first interrupt, delivered again
            raise KeyboardInterrupt
        state["count"] += 1
        if state["count"] == 1:
            sys.stderr.write(f"\n{notice}\n")
            sys.stderr.flush()
            raise KeyboardInterrupt
        sys.stderr.write("\nstopping at once\n")
        sys.stderr.flush()
        _kill_children()
        os._exit(130)

    if threading.current_thread() is not threading.main_thread():
        yield state  # signals reach the main thread only: leave its handlers alone
        return
    previous_hook = sys.unraisablehook

    def redeliver():  # from outside the callback, until the handler has raised it again
        while True:
            time.sleep(0.05)
            with lock:
                if not state["lost"]:
                    return
                _thread.interrupt_main(signal.SIGINT)

    def unraisable(info):
        if state["count"] == 1 and isinstance(info.exc_value, KeyboardInterrupt):
            with lock:
                start, state["lost"], state["hooking"] = not state["lost"], True, True
            try:  # an interrupt redelivered meanwhile must not be raised (and lost) in here
                if start:
                    threading.Thread(target=redeliver, daemon=True, name="dimred-sigint").start()
            finally:
                state["hooking"] = False
            return
        previous_hook(info)

    previous = {s: signal.signal(s, handler) for s in (signal.SIGINT, signal.SIGTERM)}
    sys.unraisablehook = unraisable
    try:
        yield state
    finally:
        sys.unraisablehook = previous_hook
        for s, h in previous.items():
            signal.signal(s, h)


def _kill_children() -> None:
    try:
        import psutil

        for child in psutil.Process().children(recursive=True):
            with contextlib.suppress(Exception):
                child.kill()
    except Exception:
        pass


def stop_temporary_server(server) -> None:
    """Send what Prefect still holds (logs, events) to the server, then stop it."""
    if server is None:
        return
    for path, name in (
        ("prefect.logging.handlers", "APILogWorker"),
        ("prefect.events.worker", "EventsWorker"),
    ):
        with contextlib.suppress(Exception):
            getattr(__import__(path, fromlist=[name]), name).drain_all(timeout=5)
    server.stop()


class _ConsoleFilter(logging.Filter):
    """On the terminal, without --debug: Prefect's warnings only. Its progress lines, its error
    records and their tracebacks go to the Prefect API (the UI's logs), not the terminal,
    where the command prints one clean error instead."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno == logging.WARNING and not record.exc_info


@contextlib.contextmanager
def quiet_prefect_console(debug: bool):
    """Apply `_ConsoleFilter` to Prefect's terminal handlers for the duration (nothing with
    ``debug``)."""
    if debug:
        yield
        return
    handlers = _console_handlers()
    flt = _ConsoleFilter()
    for h in handlers:
        h.addFilter(flt)
    try:
        yield
    finally:
        for h in handlers:
            h.removeFilter(flt)


def _console_handlers() -> list[logging.Handler]:
    from prefect.logging.configuration import ensure_logging_setup

    ensure_logging_setup()  # Prefect configures its handlers lazily: make them exist now

    names = [
        None,
        "prefect",
        "prefect._internal",
        "prefect.flow_runs",
        "prefect.task_runs",
        "prefect.server",
        "uvicorn",
    ]
    found = []
    for name in names:
        for h in logging.getLogger(name).handlers:
            stream = getattr(h, "stream", None)
            if (
                type(h).__module__.startswith("prefect")
                and stream in (sys.stderr, sys.stdout, sys.__stderr__, sys.__stdout__)
                or type(h).__name__ in ("PrefectConsoleHandler", "_SafeStreamHandler")
            ):
                if h not in found:
                    found.append(h)
    return found
