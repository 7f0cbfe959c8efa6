"""An exclusive lease on an output prefix, so two runs never write the same store at once.

The lease is an object ``<output>/_LEASE`` created with an exclusive create (``open(..., "xb")``:
O_EXCL on local disks, ``If-None-Match: *`` on S3). It names its holder (host, pid, flow run)
and an expiry; a holder renews it at every stage. A lease may be broken only when it has
expired, or when its holder is a process on this host that no longer exists (a crashed run),
so a re-run after a crash proceeds while a live concurrent run is refused at once.
"""
from __future__ import annotations

import json
import os
import socket
import time
import uuid

from ..errors import StoreError

LEASE = "_LEASE"
DEFAULT_TTL = 600.0


class LeaseHeldError(StoreError):
    """Another live run holds the output prefix."""


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class Lease:
    def __init__(self, store, *, holder: str | None = None, ttl: float = DEFAULT_TTL):
        self.store = store
        self.path = store._path(LEASE)
        self.ttl = ttl
        self.token = uuid.uuid4().hex
        self.info = {"token": self.token, "host": socket.gethostname(), "pid": os.getpid(),
                     "holder": holder or "dimred-dask run"}

    def _body(self) -> bytes:
        return json.dumps({**self.info, "expires": time.time() + self.ttl}).encode()

    def _read(self) -> dict | None:
        try:
            return json.loads(self.store.fs.cat_file(self.path))
        except FileNotFoundError:
            return None
        except ValueError:
            return {}

    def _stale(self, other: dict) -> bool:
        if not other:
            return False  # being written right now
        if other.get("expires", 0) < time.time():
            return True
        return other.get("host") == socket.gethostname() and not _pid_alive(int(other.get("pid", 0)))

    def acquire(self) -> "Lease":
        fs = self.store.fs
        fs.makedirs(self.store.root, exist_ok=True)
        for _ in range(2):
            try:
                with fs.open(self.path, "xb") as f:
                    f.write(self._body())
                return self
            except FileExistsError:
                other = self._read()
                if other is None:
                    continue
                if self._stale(other):
                    fs.rm(self.path)
                    continue
                raise LeaseHeldError(
                    f"The output {self.store.url} is being written by another run: "
                    f"{other.get('holder')} (host {other.get('host')}, pid {other.get('pid')}), "
                    f"lease valid for {max(0.0, other.get('expires', 0) - time.time()):.0f} s more.",
                    "wait for that run to finish, or write to another output.") from None
        raise LeaseHeldError(f"Could not take the lease on {self.store.url}.", "retry.")

    def renew(self) -> None:
        current = self._read()
        if current and current.get("token") == self.token:
            with self.store.fs.open(self.path, "wb") as f:
                f.write(self._body())

    def keepalive(self):
        """A context manager renewing the lease every ttl / 3 seconds from a daemon thread."""
        import contextlib
        import threading

        @contextlib.contextmanager
        def _cm():
            stop = threading.Event()

            def beat():
                while not stop.wait(self.ttl / 3):
                    try:
                        self.renew()
                    except Exception:  # a missed heartbeat only shortens the lease
                        pass

            t = threading.Thread(target=beat, daemon=True, name="dimred-lease")
            t.start()
            try:
                yield self
            finally:
                stop.set()

        return _cm()

    def release(self, *, remove_empty_root: bool = False) -> None:
        current = self._read()
        if current and current.get("token") == self.token:
            self.store.fs.rm(self.path)
        if remove_empty_root:
            try:
                if not self.store.fs.ls(self.store.root):
                    self.store.fs.rmdir(self.store.root)
            except (FileNotFoundError, OSError):
                pass
