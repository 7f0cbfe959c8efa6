"""An exclusive lease on an output prefix, so two runs never write the same store at once.

The lease is an object ``<output>/_LEASE`` naming its holder (a random token, host, pid,
flow run) and an expiry; the holder renews it from a heartbeat. A lease is *stale*, and may
be taken over, when it has expired, when its holder is a process on this host that no
longer exists (a crashed run), or when it is empty or undecodable. A live lease is refused
at once with its holder named (`LeaseHeldError`).

Creating. The lease appears with its whole content in one step, so an empty or partial
lease can only be the debris of a crash (a machine that lost unflushed data) and is stale:

- local disks: the body goes to an unnamed file in the same folder (``O_TMPFILE``, which a
  concurrent listing never shows), then linked to ``_LEASE`` (``linkat(2)`` fails if the
  name exists). Without ``O_TMPFILE``, a named ``_LEASE.tmp-*`` file is linked, then removed;
  on a filesystem without hard links, an ``O_EXCL`` create is followed by the write;
- S3 and other object stores: ``open(path, "xb")``; s3fs sends the whole body in one PUT
  with ``If-None-Match: *``, which the store refuses (412) when the key exists;
- filesystems without either (``memory://``): ``open(path, "xb")`` under a process lock.

Taking over a stale lease. Deleting a stale lease and creating a new one are two steps, and
several re-runs may see the same stale lease at once: a slow one must never delete the lease
a faster one has just created. Object stores offer no atomic rename and (through s3fs) no
conditional delete, only the exclusive create, so the takeover is built from that, plain
reads and deletes, and works the same on every filesystem. The racer that read stale content
with digest D first creates, exclusively (same primitive as above), a breaker
``_LEASE.break-<D>``. Only the breaker's creator deletes ``_LEASE``, and only after
re-reading it and finding digest D again; it then tries the ordinary exclusive create (a
third run that arrives in between may win it; then this one is refused, and there is still
one holder), and removes its breaker. A racer that cannot create the breaker polls
``_LEASE`` until it changes (at most ``wait`` seconds) and decides again; it normally finds
the winner's live lease and is refused. Stale content cannot become live again (an expiry
stays past, a dead pid stays dead; a lease's random token makes its digest unique), so a
breaker's owner that re-reads D may delete it. A breaker left by a crashed racer is
abandoned once older than `BREAKER_TTL` seconds or when its pid is dead on this host; the
next racer then uses the next generation ``_LEASE.break-<D>.2`` (``.3``, ...), never
deleting and re-creating a name, which would let two racers hold it. Abandoned generations
are removed once ``_LEASE`` no longer holds D.

What remains unguarded: a breaker stalled for more than `BREAKER_TTL` seconds between its
re-read and its delete, and a holder whose lease expired while it still runs and renews or
releases at the moment another run takes over (plain object stores have no conditional
delete or replace). Both need a process stalled for tens of seconds to minutes.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import socket
import threading
import time
import uuid

from ..errors import StoreError, storage_error

LEASE = "_LEASE"
DEFAULT_TTL = 600.0
# A breaker's owner needs a re-read, a delete and a create (milliseconds to a few seconds
# with storage retries); one older than this was left by a crashed or stalled racer.
BREAKER_TTL = 30.0
# How long a racer waits for another racer's takeover to finish before it is refused.
DEFAULT_WAIT = 5.0
MAX_GENERATIONS = 50

_GENERIC_LOCK = threading.Lock()


class LeaseHeldError(StoreError):
    """Another live run holds the output prefix (or is taking over its stale lease)."""

    def __init__(self, problem: str, fix: str | None = None, *, holder: dict | None = None):
        super().__init__(problem, fix)
        self.holder = holder


def _pid_alive(pid: int) -> bool:
    if pid <= 0:
        return True  # unknown: not evidence of a crash
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    except OverflowError:
        return False
    return True


def _digest(raw: bytes) -> str:
    return hashlib.sha256(raw).hexdigest()[:16]


def _decode(raw: bytes | None) -> dict | None:
    """A lease's or a breaker's fields, or None when empty or not one of ours."""
    if not raw:
        return None
    try:
        obj = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        return None
    if not isinstance(obj, dict):
        return None
    for key, kind in (("expires", (int, float)), ("created", (int, float)), ("pid", int)):
        if key in obj and (not isinstance(obj[key], kind) or isinstance(obj[key], bool)):
            return None
    return obj


def _dead_here(info: dict) -> bool:
    return info.get("host") == socket.gethostname() and not _pid_alive(int(info.get("pid", 0)))


class Lease:
    """An exclusive lease on a run store's output prefix: the object ``<output>/_LEASE``.

    `Lease.acquire` takes it (taking over a stale one, see the module docstring),
    `Lease.keepalive` renews it from a heartbeat thread, `Lease.release` gives it up.
    Constructing it touches no storage.

    Parameters
    ----------
    store : RunStore
        The run store whose prefix is leased.
    holder : str or None, default None
        A description of the holder written into the lease (e.g. the flow run); None:
        "dimred-dask run". The lease also names this host and process and a random token.
    ttl : float, default DEFAULT_TTL
        Seconds a lease stays valid after it was written or renewed (600).
    wait : float, default DEFAULT_WAIT
        Seconds `acquire` waits for another run's takeover of a stale lease to finish
        before refusing (5).
    """

    def __init__(
        self,
        store,
        *,
        holder: str | None = None,
        ttl: float = DEFAULT_TTL,
        wait: float = DEFAULT_WAIT,
    ):
        from fsspec.implementations.local import LocalFileSystem

        self.store = store
        self.path = store._path(LEASE)
        self.ttl = ttl
        self.wait = wait
        self.token = uuid.uuid4().hex
        self.info = {
            "token": self.token,
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "holder": holder or "dimred-dask run",
        }
        self._local = isinstance(store.fs, LocalFileSystem)
        protocols = (
            store.fs.protocol
            if isinstance(store.fs.protocol, (tuple, list))
            else (store.fs.protocol,)
        )
        self._s3 = bool({"s3", "s3a"} & set(protocols))
        # S3's "xb" is one conditional request and needs no lock; other filesystems may
        # create the name first and fill it afterwards (memory://): serialise them here
        self._lock = contextlib.nullcontext() if self._local or self._s3 else _GENERIC_LOCK

    # ---- storage primitives ------------------------------------------------------------
    def _body(self) -> bytes:
        return json.dumps({**self.info, "expires": time.time() + self.ttl}).encode()

    def _create(self, path: str, data: bytes) -> bool:
        """Create ``path`` holding ``data`` unless it exists; whether this call created it."""
        try:
            if self._local:
                return _create_local(path, data)
            with self._lock:
                with self.store.fs.open(path, "xb") as f:
                    f.write(data)
            return True
        except FileExistsError:
            return False
        except OSError as e:
            raise storage_error(e, f"Creating {path}") from e

    def _read_raw(self, path: str | None = None) -> bytes | None:
        path = path or self.path
        try:
            if self._local:
                with open(path, "rb") as f:
                    return f.read()
            with self._lock:
                # one GET on S3 (s3fs otherwise asks for the size first, with a HEAD)
                return self.store.fs.cat_file(path, **({"max_concurrency": 1} if self._s3 else {}))
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
            return None
        except OSError as e:
            raise storage_error(e, f"Reading {path}") from e

    def _remove(self, path: str) -> None:
        try:
            if self._local:
                os.unlink(path)
            else:
                self.store.fs.rm_file(path)
        except FileNotFoundError:
            pass
        except OSError as e:
            raise storage_error(e, f"Deleting {path}") from e

    def _replace(self, path: str, data: bytes) -> None:
        try:
            if self._local:
                tmp = f"{path}.tmp-{uuid.uuid4().hex}"
                try:
                    with open(tmp, "wb") as f:
                        f.write(data)
                    os.replace(tmp, path)  # readers see the old or the new content, whole
                finally:
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(tmp)
            else:
                with self.store.fs.open(path, "wb") as f:
                    f.write(data)
        except OSError as e:
            raise storage_error(e, f"Writing {path}") from e

    # ---- state ---------------------------------------------------------------------------
    def _read(self) -> dict | None:
        """The current lease's fields; None when there is none; {} when empty or undecodable."""
        raw = self._read_raw()
        if raw is None:
            return None
        return _decode(raw) or {}

    @staticmethod
    def _stale(other: dict | None) -> bool:
        if not other:
            return True  # empty or undecodable: debris of a crash, never a lease being written
        if other.get("expires", 0) < time.time():
            return True
        return _dead_here(other)

    def _held(self, other: dict) -> LeaseHeldError:
        return LeaseHeldError(
            f"The output {self.store.url} is being written by another run: "
            f"{other.get('holder')} (host {other.get('host')}, pid {other.get('pid')}), "
            f"lease valid for {max(0.0, other.get('expires', 0) - time.time()):.0f} s more.",
            "wait for that run to finish, or write to another output.",
            holder=other,
        )

    # ---- taking over ---------------------------------------------------------------------
    def _breaker_name(self, digest: str, generation: int) -> str:
        return f"{self.path}.break-{digest}" + (f".{generation}" if generation > 1 else "")

    def _claim_breaker(self, digest: str):
        """Create the breaker for ``digest``: ``("mine", name, abandoned)``, or ``("busy",
        name, info)`` when a live racer holds it, or ``("gone", name, None)`` when it
        vanished while being looked at (its owner finished)."""
        abandoned = []
        body = json.dumps({**self.info, "created": time.time()}).encode()
        for generation in range(1, MAX_GENERATIONS + 1):
            name = self._breaker_name(digest, generation)
            raw = self._read_raw(name)  # look first: a refused create costs more than a read
            if raw is None:
                if self._create(name, body):
                    return "mine", name, abandoned
                raw = self._read_raw(name)
                if raw is None:
                    return "gone", name, None
            info = _decode(raw)
            live = info and info.get("created", 0) >= time.time() - BREAKER_TTL
            if live and not _dead_here(info):
                return "busy", name, info
            abandoned.append(name)
        raise LeaseHeldError(
            f"The output {self.store.url} has a stale lease and {MAX_GENERATIONS} abandoned "
            f"takeover markers ({self.path}.break-{digest}...); expected at most a few.",
            f"delete the {LEASE}.break-* objects under {self.store.url}, then retry.",
        )

    def _take_over(self, raw: bytes):
        """Replace the stale lease whose content was ``raw``. Returns True (the lease is now
        ours), False (the lease changed meanwhile: decide again) or ``("busy", name, info)``
        (another racer is replacing it)."""
        digest = _digest(raw)
        state, name, extra = self._claim_breaker(digest)
        if state == "gone":
            return False
        if state == "busy":
            return state, name, extra
        won = changed = False
        try:
            now = self._read_raw()
            if now is not None and _digest(now) == digest:
                self._remove(self.path)
            changed = True  # _LEASE no longer holds this digest
            won = self._create(self.path, self._body())
        finally:
            for old in extra if changed else []:
                with contextlib.suppress(OSError):
                    self._remove(old)
            with contextlib.suppress(OSError):
                self._remove(name)
        return won

    def _wait_for_change(self, raw: bytes, until: float) -> bytes | None:
        """Poll the lease until its content is no longer ``raw`` (or ``until``); the content
        last read (None: no lease)."""
        pause, digest = 0.02, _digest(raw)
        while time.monotonic() < until:
            time.sleep(min(pause, max(0.0, until - time.monotonic())))
            now = self._read_raw()
            if now is None or _digest(now) != digest:
                return now
            pause = min(pause * 1.5, 0.2)
        return raw

    # ---- public --------------------------------------------------------------------------
    def acquire(self) -> "Lease":
        """Take the lease, taking over a stale one; `LeaseHeldError` when a live run holds it."""
        if not (self._local or self._s3):  # local: made on demand; S3 has no folders
            try:
                self.store.fs.makedirs(self.store.root, exist_ok=True)
            except OSError as e:
                raise storage_error(e, f"Creating {self.store.url}") from e
        until = time.monotonic() + self.wait
        attempts, raw, known = 0, None, False  # known: raw is the lease's content just read
        while True:
            if not known:
                if attempts and time.monotonic() >= until + self.wait:
                    raise LeaseHeldError(
                        f"Could not take the lease on {self.store.url}: it changed {attempts} "
                        f"times in {2 * self.wait:.0f} s while other runs took it and let it "
                        "go; expected it to settle.",
                        "retry, or write to another output.",
                    )
                attempts += 1
                raw = self._read_raw()  # look first: a refused create costs more than a read
                if raw is None:
                    if self._create(self.path, self._body()):
                        return self
                    raw = self._read_raw()
                    if raw is None:  # created and released between our create and our read
                        time.sleep(0.005)
                        continue
            known = False
            other = _decode(raw)
            if not self._stale(other):
                raise self._held(other)
            outcome = self._take_over(raw)
            if outcome is True:
                return self
            if outcome is False:
                continue  # the lease changed meanwhile: look again
            _, name, info = outcome
            if time.monotonic() >= until:
                raise LeaseHeldError(
                    f"The output {self.store.url} has a stale lease that another run is taking "
                    f"over ({name}, made {max(0.0, time.time() - info.get('created', 0)):.0f} s "
                    f"ago by host {info.get('host')}, pid {info.get('pid')}); expected it to "
                    f"finish within {self.wait:.0f} s.",
                    f"retry: a takeover marker older than {BREAKER_TTL:.0f} s is ignored; or "
                    "write to another output.",
                )
            raw = self._wait_for_change(raw, until)
            known = raw is not None  # a new lease: judge it; none: try to create

    def renew(self) -> bool:
        """Push the expiry forward if the lease is still ours; whether it was."""
        current = self._read()
        if not current or current.get("token") != self.token:
            return False
        self._replace(self.path, self._body())
        return True

    def keepalive(self):
        """A context manager renewing the lease every ttl / 3 seconds from a daemon thread."""

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
        """Delete the lease if it is still ours; then, if asked, the output folder when it
        is empty (never a bucket, never anything else)."""
        current = self._read()
        if current and current.get("token") == self.token:
            self._remove(self.path)
        if remove_empty_root:
            fs, root = self.store.fs, self.store.root.rstrip("/")
            if not self._local and "/" not in root:
                return  # the root of a bucket: not ours to delete
            try:
                if not fs.ls(root, detail=False, refresh=True):
                    fs.rmdir(root)
            except (FileNotFoundError, OSError):
                pass


def _create_local(path: str, data: bytes) -> bool:
    """Create ``path`` holding ``data`` unless it exists: the name appears with its content."""
    folder = os.path.dirname(path)
    for attempt in range(3):
        try:
            return _link_complete_file(path, folder, data)
        except FileNotFoundError:  # the folder was removed (an empty output given up): remake
            if attempt == 2:
                raise
            os.makedirs(folder, exist_ok=True)
    raise AssertionError("unreachable")


def _link_complete_file(path: str, folder: str, data: bytes) -> bool:
    if _TMPFILE:
        # Linux: an unnamed file in the folder (never listed by a concurrent run), linked once full
        try:
            fd = os.open(folder, os.O_TMPFILE | os.O_WRONLY, 0o644)
        except OSError as e:
            if e.errno == errno.ENOENT:
                raise
            fd = None  # this filesystem has no O_TMPFILE (NFS, FUSE)
        if fd is not None:
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view) :]
                # linkat(AT_SYMLINK_FOLLOW); os.link uses plain link(2) without a dir fd
                dfd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
                try:
                    os.link(
                        f"/proc/self/fd/{fd}",
                        os.path.basename(path),
                        dst_dir_fd=dfd,
                        follow_symlinks=True,
                    )
                finally:
                    os.close(dfd)
                return True
            except FileExistsError:
                return False
            finally:
                os.close(fd)
    tmp = f"{path}.tmp-{uuid.uuid4().hex}"
    with open(tmp, "xb") as f:
        f.write(data)
    try:
        os.link(tmp, path)
        return True
    except FileExistsError:
        return False
    except OSError as e:
        if e.errno not in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EMLINK):
            raise
        # no hard links here: an exclusive create with the content written just after
        with open(path, "xb") as f:
            f.write(data)
        return True
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)


_TMPFILE = hasattr(os, "O_TMPFILE") and os.path.isdir("/proc/self/fd")
