"""An exclusive lease on an output prefix, so two runs never write the same store at once.

The lease is an object ``<output>/_LEASE`` naming its holder (a random token, host, boot,
pid and the pid's start time, flow run) and how long a heartbeat keeps it (``ttl``); the
holder rewrites it from a heartbeat every ``ttl / 3`` seconds. Whether a lease is live is
judged without trusting any clock that may have stepped:

- on the holder's own host (same host name and boot), the lease is live exactly while its
  process lives: a process of that pid with the same start time, whatever the clock says;
- a lease from another host is live while its heartbeat is younger than its ``ttl``, the
  heartbeat's age measured by the storage's own clock (the lease's modification time
  against that of a probe this run writes next to it), never a wall-clock expiry written
  by another host;
- a lease that claims more than `MAX_TTL` seconds of validity is no heartbeat's and is
  stale; so is one that is empty or undecodable (the debris of a crash). A lease written by
  an older version (no heartbeat fields) from another host is judged by its expiry.

A live lease is refused at once with its holder named (`LeaseHeldError`), and the refusal
names `dimred-dask unlock` for a lease whose holder the operator knows to be gone.

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
re-read and its delete, and a holder on another host whose heartbeat stalled past its ttl
while it still runs (it finds the lease gone at its next heartbeat or commit, `Lease.holds`,
and stops; what it wrote until then is redone by the run that took over). Both need a
process stalled for minutes.
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
# The longest validity a heartbeat claims (a lease's ttl, or its expiry after it was
# written); a lease claiming more was not written by a run and is stale.
MAX_TTL = 3600.0
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


def _pid_start(pid: int) -> int | None:
    """The start time of process ``pid`` on this host (clock ticks after boot, from
    ``/proc``), or None where it cannot be read: with the pid it names one process, not a
    later one given the same number."""
    try:
        with open(f"/proc/{int(pid)}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
        return int(fields[19])  # field 22 of stat(5), counted after the command's ")"
    except (OSError, ValueError, IndexError):
        return None


def _boot_id() -> str | None:
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            return f.read().strip() or None
    except OSError:
        return None


BOOT_ID = _boot_id()


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
    numbers = ("expires", "created", "written", "ttl")
    for key, kind in [(k, (int, float)) for k in numbers] + [("pid", int), ("pid_start", int)]:
        if key in obj and (not isinstance(obj[key], kind) or isinstance(obj[key], bool)):
            return None
    return obj


def _here(info: dict) -> bool:
    """Whether the lease or breaker was written on this host since its last boot."""
    if info.get("host") != socket.gethostname():
        return False
    return not (info.get("boot") and BOOT_ID and info["boot"] != BOOT_ID)


def _alive_here(info: dict) -> bool:
    """Whether the process that wrote ``info`` (on this host) still runs: its pid exists and,
    when recorded, has the same start time (the pid was not given to another process)."""
    pid = int(info.get("pid", 0))
    if not _pid_alive(pid):
        return False
    start = info.get("pid_start")
    return start is None or pid <= 0 or _pid_start(pid) in (None, start)


def _dead_here(info: dict) -> bool:
    return info.get("host") == socket.gethostname() and (not _here(info) or not _alive_here(info))


def _overlong(info: dict) -> bool:
    """A lease claiming a validity no heartbeat sets (a ttl, or an expiry after it was
    written, beyond `MAX_TTL`; for an older lease, an expiry further from now)."""
    if info.get("ttl", 0) > MAX_TTL:
        return True
    expires = info.get("expires")
    if expires is None:
        return False
    since = info.get("written", time.time())
    return expires - since > MAX_TTL


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
            "boot": BOOT_ID,
            "pid": os.getpid(),
            "pid_start": _pid_start(os.getpid()),
            "holder": holder or "dimred-dask run",
        }
        self.lost = False  # set by the heartbeat when the lease is no longer this run's
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

    @classmethod
    def existing(cls, store, token: str) -> "Lease":
        """The lease of ``store`` that ``token`` was given when it was acquired (elsewhere in
        this run), to check that it `holds` or to `renew` or `release` it."""
        lease = cls(store)
        lease.token = lease.info["token"] = token
        return lease

    # ---- storage primitives ------------------------------------------------------------
    def _body(self) -> bytes:
        now = time.time()  # informative: liveness is judged by pid or by the storage's clock
        ttl = min(float(self.ttl), MAX_TTL)
        return json.dumps({**self.info, "ttl": ttl, "written": now, "expires": now + ttl}).encode()

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
            raise storage_error(e, f"Creating {path}", location=self.store.location) from e

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
            raise storage_error(e, f"Reading {path}", location=self.store.location) from e

    def _remove(self, path: str) -> None:
        try:
            if self._local:
                os.unlink(path)
            else:
                self.store.fs.rm_file(path)
        except FileNotFoundError:
            pass
        except OSError as e:
            raise storage_error(e, f"Deleting {path}", location=self.store.location) from e

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
            raise storage_error(e, f"Writing {path}", location=self.store.location) from e

    # ---- state ---------------------------------------------------------------------------
    def _read(self) -> dict | None:
        """The current lease's fields; None when there is none; {} when empty or undecodable."""
        raw = self._read_raw()
        if raw is None:
            return None
        return _decode(raw) or {}

    def _mtime(self, path: str) -> float | None:
        """The modification time of ``path`` by the storage's clock (None: unknown)."""
        try:
            if self._local:
                return os.stat(path).st_mtime
            info = self.store.fs.info(path, **({"refresh": True} if self._s3 else {}))
        except FileNotFoundError:
            return None
        except OSError as e:
            raise storage_error(e, f"Reading {path}", location=self.store.location) from e
        stamp = info.get("LastModified") or info.get("mtime") or info.get("created")
        if hasattr(stamp, "timestamp"):
            return stamp.timestamp()
        return float(stamp) if isinstance(stamp, (int, float)) else None

    def heartbeat_age(self, path: str | None = None) -> float | None:
        """Seconds since the lease (or ``path``) was last written, by the storage's own
        clock: its modification time against that of a probe object written now next to it
        (neither this host's clock nor the holder's enters). None when the storage keeps no
        times."""
        written = self._mtime(path or self.path)
        if written is None:
            return None
        probe = f"{self.path}.probe-{self.token}"
        if not self._create(probe, b""):
            return None
        try:
            now = self._mtime(probe)
        finally:
            self._remove(probe)
        return None if now is None else max(0.0, now - written)

    def _judge(self, other: dict | None) -> tuple[bool, str]:
        """(stale, why) of the lease content ``other``."""
        if not other:
            return True, "empty or undecodable"  # debris of a crash, never a lease being written
        if _overlong(other):
            return True, f"it claims more than {MAX_TTL:.0f} s of validity, which no heartbeat sets"
        if other.get("host") == socket.gethostname():
            if not _here(other):
                return True, "its host has restarted since"
            if _alive_here(other):
                return False, f"its process {other.get('pid')} runs on this host"
            return True, f"its process {other.get('pid')} on this host has exited"
        if "ttl" not in other:  # written by an older version: its expiry is all there is
            left = other.get("expires", 0) - time.time()
            if left < 0:
                return True, "it expired"
            return False, f"valid for {left:.0f} s more"
        age = self.heartbeat_age()
        ttl = min(float(other["ttl"]), MAX_TTL)
        if age is None:  # no times kept: the expiry is the only evidence
            left = other.get("expires", 0) - time.time()
            return (left < 0), ("its expiry passed" if left < 0 else f"valid for {left:.0f} s")
        if age > ttl:
            return True, f"its last heartbeat was {age:.0f} s ago (its ttl is {ttl:.0f} s)"
        return False, f"its last heartbeat was {age:.0f} s ago"

    def _held(self, other: dict, why: str) -> LeaseHeldError:
        return LeaseHeldError(
            f"The output {self.store.url} is being written by another run: "
            f"{other.get('holder')} (host {other.get('host')}, pid {other.get('pid')}; {why}).",
            "wait for that run to finish, or write to another output. If that run is gone "
            "(its machine was lost), clear its lease with: dimred-dask unlock "
            f"{self.store.url}",
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
            if self._breaker_live(name, info):
                return "busy", name, info
            abandoned.append(name)
        raise LeaseHeldError(
            f"The output {self.store.url} has a stale lease and {MAX_GENERATIONS} abandoned "
            f"takeover markers ({self.path}.break-{digest}...); expected at most a few.",
            f"delete the {LEASE}.break-* objects under {self.store.url}, then retry.",
        )

    def _breaker_live(self, name: str, info: dict | None) -> bool:
        """Whether a takeover marker's racer may still be at work: on this host, while its
        process lives; from another host, for `BREAKER_TTL` seconds by the storage's clock."""
        if not info:
            return False
        if info.get("host") == socket.gethostname():
            return _here(info) and _alive_here(info)
        age = self.heartbeat_age(name)
        if age is None:
            return info.get("created", 0) >= time.time() - BREAKER_TTL
        return age <= BREAKER_TTL

    def _take_over(self, raw: bytes, *, create: bool = True):
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
            won = self._create(self.path, self._body()) if create else True
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
                raise storage_error(
                    e, f"Creating {self.store.url}", location=self.store.location
                ) from e
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
            stale, why = self._judge(other)
            if not stale:
                raise self._held(other, why)
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
        """Rewrite the lease (a heartbeat) if it is still ours; whether it was. A lease found
        to be another run's, or gone, sets `lost`."""
        current = self._read()
        if not current or current.get("token") != self.token:
            self.lost = True
            return False
        self._replace(self.path, self._body())
        return True

    def holds(self) -> bool:
        """Whether the lease is still this run's (read now); a stage checks it before it
        commits, so that a run whose lease was taken over commits nothing."""
        current = self._read()
        if not current or current.get("token") != self.token:
            self.lost = True
        return not self.lost

    def keepalive(self):
        """A context manager renewing the lease every ttl / 3 seconds from a daemon thread."""

        @contextlib.contextmanager
        def _cm():
            stop = threading.Event()

            def beat():
                while not stop.wait(self.ttl / 3):
                    try:
                        self.renew()
                    except Exception:  # a missed heartbeat only ages the lease
                        pass

            t = threading.Thread(target=beat, daemon=True, name="dimred-lease")
            t.start()
            try:
                yield self
            finally:
                stop.set()

        return _cm()

    def status(self) -> dict | None:
        """The lease now: None when there is none; else its holder's fields with ``stale``
        and ``why`` (how it is judged), for `dimred-dask inspect` and `unlock`."""
        raw = self._read_raw()
        if raw is None:
            return None
        other = _decode(raw) or {}
        stale, why = self._judge(other)
        return {**other, "stale": stale, "why": why, "digest": _digest(raw)}

    def clear(self) -> dict | None:
        """Remove the lease of a run the operator knows to be gone (`dimred-dask unlock`):
        refused (`LeaseHeldError`) while its holder is a live process on this host; else
        removed through the takeover protocol, so that a lease another run takes at the same
        moment is never deleted. Returns what was removed (None: there was no lease)."""
        raw = self._read_raw()
        if raw is None:
            return None
        other = _decode(raw) or {}
        if other.get("host") == socket.gethostname() and _here(other) and _alive_here(other):
            raise LeaseHeldError(
                f"The lease on {self.store.url} is held by process {other.get('pid')} on this "
                f"host ({other.get('holder')}), which is running.",
                f"stop that run first (Ctrl-C, or kill {other.get('pid')}); it releases its "
                "lease itself.",
                holder=other,
            )
        outcome = self._take_over(raw, create=False)
        if outcome is not True:
            raise LeaseHeldError(
                f"The lease on {self.store.url} changed while it was being cleared.",
                "run `dimred-dask inspect` to see who holds it now.",
            )
        return other

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
