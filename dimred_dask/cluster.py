"""Make or connect to a dask.distributed Client.

Order of choice: an explicit ``scheduler`` address; ``DASK_SCHEDULER_ADDRESS``; a client this
process already has; else a new `LocalCluster` of worker processes sized from this machine
(one worker process per core with two threads each, memory split evenly, 10% held back for
the OS). Workers run BLAS single-threaded (distributed sets OPENBLAS_NUM_THREADS=1), so the
second thread overlaps reading the next chunk with computing on the current one (see
bench/HISTORY.md, "PCA out of core — 2026-11-22").
"""

from __future__ import annotations

import contextlib
import os

from .errors import ServiceError

__all__ = ["local_cluster_size", "cluster_client", "check_scheduler", "describe_cluster"]

SCHEDULER_FIX = (
    "start the scheduler (dask scheduler) or check the address (--scheduler or "
    "DASK_SCHEDULER_ADDRESS); leave both out to run on a local cluster."
)


def check_scheduler(address: str | None = None, timeout: float = 5.0) -> None:
    """Refuse (`ServiceError`) a ``tcp://host:port`` scheduler address (or
    ``DASK_SCHEDULER_ADDRESS``) nothing answers on, within ``timeout`` seconds: a TCP connect,
    made before a run starts anything else. Other protocols are left to the connection.

    Parameters
    ----------
    address : str or None, default None
        The scheduler's address; None: ``DASK_SCHEDULER_ADDRESS``, or nothing to check.
    timeout : float, default 5.0
        Seconds to wait for the connection.

    Raises
    ------
    ServiceError
        Nothing accepts a connection at that host and port.
    """
    import socket
    from urllib.parse import urlsplit

    address = address or os.environ.get("DASK_SCHEDULER_ADDRESS")
    if not address or not address.startswith("tcp://"):
        return
    parts = urlsplit(address)
    try:
        port = parts.port or 8786
    except ValueError:
        port = None
    if not parts.hostname or port is None:
        raise ServiceError(
            f"The Dask scheduler address {address!r} is not tcp://host:port.",
            "pass e.g. --scheduler tcp://10.0.0.5:8786.",
        )
    try:
        socket.create_connection((parts.hostname, port), timeout=timeout).close()
    except OSError as exc:
        raise ServiceError(
            f"The Dask scheduler at {address} does not answer ({type(exc).__name__}: {exc}).",
            SCHEDULER_FIX,
        ) from None


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def _memory_bytes() -> int:
    import psutil

    return int(psutil.virtual_memory().total)


def local_cluster_size(n_workers: int | None = None, threads_per_worker: int = 2) -> dict:
    """The keyword arguments of a `LocalCluster` sized from this machine.

    The cores are those this process may run on (its CPU affinity); the memory is the
    machine's total.

    Parameters
    ----------
    n_workers : int or None, default None
        Worker processes; None (or 0) gives one per core up to 8 cores, half the cores above.
    threads_per_worker : int, default 2
        Threads per core: the ``threads_per_worker`` x cores threads are split evenly over the
        workers (at least one each), so fewer workers than cores get more threads each.

    Returns
    -------
    dict
        ``n_workers``, ``threads_per_worker`` and ``memory_limit`` (bytes per worker: 90 % of
        the machine's memory split evenly over the workers).
    """
    cores = _cores()
    n = n_workers or max(1, cores if cores <= 8 else cores // 2)
    threads = max(1, threads_per_worker * cores // n)
    memory = int(_memory_bytes() * 0.9 / n)
    return {"n_workers": n, "threads_per_worker": threads, "memory_limit": memory}


@contextlib.contextmanager
def cluster_client(
    scheduler: str | None = None, *, n_workers: int | None = None, timeout: str = "30s"
):
    """Yield a dask.distributed Client; close what this call created, leave what it found.

    The client is, in order of choice: one connected to ``scheduler`` or, without it, to
    ``DASK_SCHEDULER_ADDRESS`` (closed on exit); the running default client of this process
    (left open); else a new `LocalCluster` of worker processes on 127.0.0.1 sized by
    `local_cluster_size` (closed on exit, its workers killed at once on ``KeyboardInterrupt``).

    Parameters
    ----------
    scheduler : str or None, default None
        The address of a running scheduler (e.g. ``"tcp://host:8786"``); None: see above.
    n_workers : int or None, default None
        Worker processes of a new local cluster (`local_cluster_size`); unused otherwise.
    timeout : str, default "30s"
        How long to wait when connecting to a scheduler address.

    Yields
    ------
    distributed.Client
        The client, current (``get_client``) inside the ``with`` block.

    Raises
    ------
    ServiceError
        The scheduler at the address cannot be reached within ``timeout``.
    """
    from distributed import Client, LocalCluster, default_client

    address = scheduler or os.environ.get("DASK_SCHEDULER_ADDRESS")
    if address:
        try:
            client = Client(address, timeout=timeout)
        except (OSError, TimeoutError) as exc:
            raise ServiceError(
                f"Could not connect to the Dask scheduler at {address} ({exc}).", SCHEDULER_FIX
            ) from None
        with client:  # entered, so it is the *current* client (get_client) in this context
            yield client
        return
    try:
        existing = default_client()
    except ValueError:
        existing = None
    if existing is not None and existing.status == "running":
        yield existing
        return
    size = local_cluster_size(n_workers)
    with LocalCluster(
        processes=True, host="127.0.0.1", dashboard_address="127.0.0.1:0", **size
    ) as cluster:
        try:
            with Client(cluster) as client:
                yield client
        except KeyboardInterrupt:  # the user stopped the run: do not wait for busy workers
            _kill_workers(cluster)
            raise


def _kill_workers(cluster) -> None:
    """SIGKILL the worker processes of a LocalCluster (their nannies then close at once)."""
    import signal

    for nanny in list(getattr(cluster, "workers", {}).values()):
        pid = getattr(getattr(getattr(nanny, "process", None), "process", None), "pid", None)
        if pid:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)


def describe_cluster(client) -> dict:
    """What a client is connected to, as a JSON-able summary for logs and manifests.

    Parameters
    ----------
    client : distributed.Client
        A connected client.

    Returns
    -------
    dict
        ``scheduler`` (its address), ``dashboard`` (its link, or None when the scheduler runs
        no dashboard), ``n_workers``, ``threads`` (summed over the workers) and
        ``memory_limit_per_worker`` (a list of bytes, one per worker).
    """
    from ._compute import workers as listed

    info = client.scheduler_info()
    workers = listed(client)
    try:
        dashboard = client.dashboard_link if info.get("services", {}).get("dashboard") else None
    except Exception:
        dashboard = None
    return {
        "scheduler": client.scheduler.address,
        "dashboard": dashboard,
        "n_workers": len(workers),
        "threads": sum(w.get("nthreads", 0) for w in workers.values()),
        "memory_limit_per_worker": [w.get("memory_limit") for w in workers.values()],
    }
