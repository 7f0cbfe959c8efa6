"""The output lease: exactly one of several racers takes over a stale lease (on a local disk
and on an S3-compatible server), an empty or undecodable lease is stale, a slow racer never
deletes a newer lease, a breaker left by a crashed racer does not block, and renew / release
touch only their own lease."""

from __future__ import annotations

import functools
import json
import logging
import multiprocessing
import os
import socket
import subprocess
import sys
import threading
import time
import uuid

import pytest

from dimred_dask.io.lease import BREAKER_TTL, LEASE, Lease, LeaseHeldError, _digest
from dimred_dask.io.store import RunStore

TRIALS = 200
RACERS = 4
# The racers start once; a barrier wait covers at most one trial (a few hundred ms on a
# loaded 2-core machine), or the racers' start-up (imports) for the first one.
FIRST_WAIT, TRIAL_WAIT = 120.0, 60.0


@functools.lru_cache(maxsize=None)
def _dead_pid() -> int:
    """The pid of a process of this host that has exited."""
    out = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        capture_output=True,
        text=True,
        check=True,
    )
    return int(out.stdout)


def _stale_bodies(trial: int, local: bool = False) -> tuple[str, bytes]:
    """Four kinds of stale lease, in turn (five on a local disk, where a lease's modification
    time can be set back: a heartbeat from another host that stopped two hours ago)."""
    kinds = ("expired elsewhere", "dead pid here", "empty", "garbage")
    kinds += ("heartbeat stopped elsewhere",) if local else ()
    kind = kinds[trial % len(kinds)]
    if kind == "heartbeat stopped elsewhere":
        body = _foreign(ttl=600.0)
    elif kind == "expired elsewhere":  # written by an older version: no heartbeat fields
        body = json.dumps(
            {
                "token": uuid.uuid4().hex,
                "host": "elsewhere.invalid",
                "pid": 4242,
                "holder": "expired run",
                "expires": time.time() - 5,
            }
        ).encode()
    elif kind == "dead pid here":
        body = json.dumps(
            {
                "token": uuid.uuid4().hex,
                "host": socket.gethostname(),
                "pid": _dead_pid(),
                "holder": "crashed run",
                "expires": time.time() + 600,
            }
        ).encode()
    elif kind == "empty":
        body = b""
    else:
        body = b"\x00\xff{not json" + os.urandom(8)
    return kind, body


def _plant(store: RunStore, name: str, body: bytes, age: float = 0.0) -> None:
    """Write ``name`` into the store; locally, with its modification time ``age`` s ago."""
    if store.location.is_local:
        store.fs.makedirs(store.root, exist_ok=True)
    store.fs.pipe_file(store._path(name), body)
    if age:
        then = time.time() - age
        os.utime(store._path(name), (then, then))


def _foreign(ttl: float = 600.0, expires_in: float | None = None, **extra) -> bytes:
    """A lease in this version's format written by a run on another host."""
    now = time.time()
    return json.dumps(
        {
            "token": uuid.uuid4().hex,
            "host": "elsewhere.invalid",
            "boot": "another-boot",
            "pid": 4242,
            "pid_start": 1,
            "holder": "run elsewhere",
            "ttl": ttl,
            "written": now,
            "expires": now + (ttl if expires_in is None else expires_in),
            **extra,
        }
    ).encode()


def _lease_token(store: RunStore) -> str | None:
    try:
        return json.loads(store.fs.cat_file(store._path(LEASE)))["token"]
    except FileNotFoundError:
        return None


# --------------------------------------------------------------------------- the race
def _racer(url: str, idx: int, barrier, results) -> None:
    """One racer process: at each trial, wait for the planted lease, try to acquire, report,
    and (the winner) release once everyone has reported."""
    store = RunStore(url)
    try:
        for trial in range(TRIALS):
            barrier.wait(FIRST_WAIT if trial == 0 else TRIAL_WAIT)  # a stale lease is planted
            lease = None
            try:
                lease = Lease(store, holder=f"racer {idx}").acquire()
                outcome = ("won", "")
            except LeaseHeldError as e:
                outcome = ("held", str(e))
            except BaseException as e:  # reported; the parent fails the test
                outcome = ("other", f"{type(e).__name__}: {e}")
            results.put((trial, idx, *outcome))
            barrier.wait(TRIAL_WAIT)  # everyone has reported
            if lease is not None:
                lease.release()
            barrier.wait(TRIAL_WAIT)  # released
    except threading.BrokenBarrierError:
        return  # the parent aborted the race


def _race(url: str) -> dict:
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(RACERS + 1)
    results = ctx.Queue()
    procs = [
        ctx.Process(target=_racer, args=(url, i, barrier, results), daemon=True)
        for i in range(RACERS)
    ]
    for p in procs:
        p.start()
    # the planting side's own S3 client, not the one cached from earlier tests of the session
    store = RunStore(
        url, storage_options={"skip_instance_cache": True} if url.startswith("s3://") else None
    )
    bad, debris, kinds, named = [], [], {}, 0
    t0 = None
    try:
        for trial in range(TRIALS):
            kind, body = _stale_bodies(trial, local=store.location.is_local)
            kinds[kind] = kinds.get(kind, 0) + 1
            _plant(store, LEASE, body, age=7200.0 if "heartbeat" in kind else 0.0)
            barrier.wait(FIRST_WAIT if trial == 0 else TRIAL_WAIT)  # go
            if t0 is None:
                t0 = time.perf_counter()
            got = sorted(results.get(timeout=TRIAL_WAIT) for _ in range(RACERS))
            assert {g[0] for g in got} == {trial}, got
            winners = [g[1] for g in got if g[2] == "won"]
            others = [g for g in got if g[2] == "other"]
            if len(winners) != 1 or others:
                bad.append((trial, kind, [g[1:] for g in got]))
            elif all(f"racer {winners[0]}" in g[3] for g in got if g[2] == "held"):
                named += 1
            barrier.wait(TRIAL_WAIT)  # reported
            barrier.wait(TRIAL_WAIT)  # released
            left = _leftovers(store)
            if left:
                debris.append((trial, kind, left))
                for p in left:
                    store.fs.rm_file(p)
    finally:
        barrier.abort()
        for p in procs:
            p.join(timeout=10)
            if p.is_alive():
                p.terminate()
    return {
        "bad": bad,
        "debris": debris,
        "kinds": kinds,
        "named": named,
        "seconds": time.perf_counter() - (t0 or time.perf_counter()),
    }


def _leftovers(store: RunStore) -> list[str]:
    try:
        return store.fs.ls(store.root, detail=False, refresh=True)
    except FileNotFoundError:  # S3: no object under the prefix
        return []


def _check_race(report: dict) -> None:
    print(
        f"{TRIALS} trials x {RACERS} racers in {report['seconds']:.1f} s; stale kinds "
        f"{report['kinds']}; trials where every loser named the winner: {report['named']}"
    )
    assert not report["bad"], f"trials without exactly one winner: {report['bad'][:5]}"
    assert not report["debris"], f"objects left after release: {report['debris'][:5]}"


def test_race_for_a_stale_lease_local(tmp_path):
    _check_race(_race(str(tmp_path / "out")))


@pytest.fixture
def bucket(s3_server):
    import s3fs

    name = f"lease-{uuid.uuid4().hex[:8]}"
    s3fs.S3FileSystem().mkdir(name)
    return name


@pytest.mark.timeout(240)  # ~30 s here: a stuck request fails the test, not the suite's budget
def test_race_for_a_stale_lease_s3(bucket, caplog):
    caplog.set_level(logging.WARNING, logger="werkzeug")  # not a log line per request
    _check_race(_race(f"s3://{bucket}/runs/out"))


def _thread_race(url: str, trials: int) -> None:
    store = RunStore(url)
    for trial in range(trials):
        _plant(store, LEASE, _stale_bodies(trial)[1])
        go = threading.Barrier(RACERS)
        outcomes = [None] * RACERS

        def run(i):
            go.wait()
            try:
                outcomes[i] = Lease(store, holder=f"thread {i}").acquire()
            except LeaseHeldError:
                outcomes[i] = "held"
            except BaseException as e:
                outcomes[i] = e

        threads = [threading.Thread(target=run, args=(i,)) for i in range(RACERS)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        won = [o for o in outcomes if isinstance(o, Lease)]
        assert len(won) == 1 and outcomes.count("held") == RACERS - 1, (trial, outcomes)
        won[0].release()
        assert store.fs.find(store.root) == []


def test_race_between_threads_on_memory():
    """Filesystems without an atomic exclusive create (memory://) serialise in-process."""
    _thread_race(f"memory://lease-{uuid.uuid4().hex[:8]}/out", 40)


def test_race_between_threads_without_o_tmpfile(tmp_path, monkeypatch):
    """Local disks without O_TMPFILE: a named temporary file, hard-linked, then removed."""
    import dimred_dask.io.lease as lease_module

    monkeypatch.setattr(lease_module, "_TMPFILE", False)
    _thread_race(str(tmp_path / "out"), 40)


# --------------------------------------------------------------------------- stale content
@pytest.mark.parametrize(
    "body",
    [
        b"",
        b"\x00\xff\xfe garbage",
        b"[1, 2]",
        b'{"expires": "later"}',
        b'{"token": "t", "host": "h"}',
    ],
    ids=["empty", "garbage", "not-an-object", "bad-expiry", "no-expiry"],
)
def test_empty_or_undecodable_lease_is_taken_over(tmp_path, body):
    store = RunStore(str(tmp_path / "out"))
    _plant(store, LEASE, body)
    t0 = time.perf_counter()
    lease = Lease(store, holder="re-run").acquire()
    assert time.perf_counter() - t0 < 1.0
    assert _lease_token(store) == lease.token
    assert renew_ok(lease)
    lease.release()
    assert os.listdir(store.root) == []


def renew_ok(lease: Lease) -> bool:
    before = json.loads(lease.store.fs.cat_file(lease.path))["expires"]
    time.sleep(0.01)
    ok = lease.renew()
    return ok and json.loads(lease.store.fs.cat_file(lease.path))["expires"] > before


def test_live_lease_of_this_process_is_refused_naming_the_holder(tmp_path):
    store = RunStore(str(tmp_path / "out"))
    holder = Lease(store, holder="nightly job 7").acquire()
    try:
        t0 = time.perf_counter()
        with pytest.raises(
            LeaseHeldError, match=r"(?s)nightly job 7.*pid %d.*Fix: wait" % os.getpid()
        ) as err:
            Lease(store, holder="second run").acquire()
        assert time.perf_counter() - t0 < 0.5  # refused at once, no waiting
        assert err.value.holder["token"] == holder.token
        assert _lease_token(store) == holder.token  # untouched
        assert sorted(os.listdir(store.root)) == [LEASE]  # no breaker made for a live lease
    finally:
        holder.release()


def _clock(monkeypatch, step: float) -> None:
    """This process's clock stepped by ``step`` seconds (the kernel's, which stamps files,
    is not)."""
    real = time.time
    monkeypatch.setattr(time, "time", lambda: real() + step)


HOLDER = """
import sys, time
from dimred_dask.io.lease import Lease
from dimred_dask.io.store import RunStore
lease = Lease(RunStore(sys.argv[1]), holder="stalled run", ttl=0.05).acquire()
print("held", flush=True)
time.sleep(600)
"""


@pytest.mark.parametrize("step", [0.0, 86400.0, -86400.0], ids=["calm", "forward", "back"])
def test_a_live_holder_keeps_its_lease_whatever_the_clock_says(tmp_path, monkeypatch, step):
    """A run alive on this host holds its lease although its expiry is long past (its
    heartbeat stalled, or the clock stepped either way): a second run is refused, naming it."""
    store = RunStore(str(tmp_path / "out"))
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLDER, store.url], stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout.readline().strip() == "held"
        time.sleep(0.2)  # its 0.05 s expiry has passed
        _clock(monkeypatch, step)
        with pytest.raises(
            LeaseHeldError,
            match=r"(?s)stalled run.*pid %d.*runs on this host.*"
            r"dimred-dask unlock" % proc.pid,
        ):
            Lease(store, holder="second run").acquire()
        assert json.loads(store.fs.cat_file(store._path(LEASE)))["pid"] == proc.pid
    finally:
        proc.kill()
        proc.wait()
    monkeypatch.undo()
    new = Lease(store, holder="re-run").acquire()  # its process is gone: stale
    assert _lease_token(store) == new.token
    new.release()


def test_a_recycled_pid_or_a_reboot_does_not_hold_a_lease(tmp_path):
    store = RunStore(str(tmp_path / "out"))
    me = Lease(store).info
    for body in (
        {**me, "token": "x", "pid_start": (me["pid_start"] or 0) + 1},  # another process's
        {**me, "token": "y", "boot": "a-boot-before-the-last"},  # before this host restarted
    ):
        _plant(
            store, LEASE, json.dumps({**body, "ttl": 600.0, "expires": time.time() + 600}).encode()
        )
        lease = Lease(store).acquire()
        assert _lease_token(store) == lease.token
        lease.release()


@pytest.mark.parametrize("step", [0.0, 86400.0, -86400.0], ids=["calm", "forward", "back"])
def test_another_hosts_lease_is_judged_by_its_heartbeats_age(tmp_path, monkeypatch, step):
    """From another host, the heartbeat's age by the storage's clock decides, not an expiry
    written by that host nor this host's clock: a fresh heartbeat holds whatever its expiry
    says, one older than its ttl is stale whatever its expiry says."""
    store = RunStore(str(tmp_path / "out"))
    _clock(monkeypatch, step)
    _plant(store, LEASE, _foreign(ttl=600.0, expires_in=-86400.0))  # written now
    with pytest.raises(LeaseHeldError, match=r"last heartbeat was \d+ s ago"):
        Lease(store).acquire()
    _plant(store, LEASE, _foreign(ttl=600.0, expires_in=86400.0), age=601.0)
    lease = Lease(store).acquire()
    assert _lease_token(store) == lease.token
    assert sorted(os.listdir(store.root)) == [LEASE]  # the clock probe is removed
    lease.release()


def test_a_lease_no_heartbeat_could_write_is_stale(tmp_path):
    """A lease claiming ten years (forged, or written by hand) holds nothing."""
    store = RunStore(str(tmp_path / "out"))
    for body in (
        _foreign(ttl=600.0, expires_in=10 * 365 * 86400.0),
        _foreign(ttl=10 * 365 * 86400.0),
        json.dumps(
            {
                "token": "t",
                "host": "elsewhere.invalid",
                "pid": 1,
                "expires": time.time() + 10 * 365 * 86400.0,
            }
        ).encode(),
    ):
        _plant(store, LEASE, body)
        lease = Lease(store).acquire()
        assert _lease_token(store) == lease.token
        lease.release()


def test_a_run_whose_lease_was_taken_over_knows_it(tmp_path):
    store = RunStore(str(tmp_path / "out"))
    old = Lease(store, holder="stalled run").acquire()
    assert old.holds()
    _plant(store, LEASE, _foreign())  # another run took the store over meanwhile
    assert not old.holds() and old.renew() is False and old.lost
    old.release()
    assert json.loads(store.fs.cat_file(store._path(LEASE)))["holder"] == "run elsewhere"


def test_unlock_clears_a_gone_runs_lease_never_a_live_one(tmp_path):
    store = RunStore(str(tmp_path / "out"))
    mine = Lease(store, holder="live run").acquire()
    with pytest.raises(
        LeaseHeldError, match=r"(?s)process %d on this host.*kill %d" % (os.getpid(), os.getpid())
    ):
        Lease(store).clear()
    assert _lease_token(store) == mine.token
    mine.release()
    _plant(store, LEASE, _foreign())
    assert Lease(store).clear()["holder"] == "run elsewhere"
    assert sorted(os.listdir(store.root)) == []
    assert Lease(store).clear() is None


# --------------------------------------------------------------------------- slow racers
def _plant_expired(store: RunStore) -> bytes:
    body = json.dumps(
        {
            "token": uuid.uuid4().hex,
            "host": "elsewhere.invalid",
            "pid": 1,
            "holder": "expired run",
            "expires": time.time() - 1,
        }
    ).encode()
    _plant(store, LEASE, body)
    return body


def test_slow_racer_never_deletes_a_newer_lease(tmp_path):
    """The slow racer read the stale lease; a fast one replaced it before the slow one acted."""
    store = RunStore(str(tmp_path / "out"))
    _plant_expired(store)
    slow = Lease(store, holder="slow racer")
    seen = slow._read_raw()
    fast = Lease(store, holder="fast racer").acquire()
    assert slow._take_over(seen) is False  # its breaker's re-read finds another lease
    assert _lease_token(store) == fast.token
    with pytest.raises(LeaseHeldError, match="fast racer"):
        slow.acquire()
    assert _lease_token(store) == fast.token
    assert sorted(os.listdir(store.root)) == [LEASE]  # the slow racer's breaker is gone
    fast.release()


def test_slow_racer_with_an_empty_lease_never_deletes_a_newer_lease(tmp_path):
    """Same with a crash's empty lease, whose digest is the same every time."""
    store = RunStore(str(tmp_path / "out"))
    _plant(store, LEASE, b"")
    slow = Lease(store, holder="slow racer")
    seen = slow._read_raw()
    assert seen == b""
    fast = Lease(store, holder="fast racer").acquire()
    assert slow._take_over(seen) is False
    assert _lease_token(store) == fast.token
    fast.release()


def test_fresh_lease_planted_between_read_and_break_survives(tmp_path, monkeypatch):
    """Interleave inside acquire: right after the racer has read the stale lease, another
    run replaces it; the racer then tries to break what it read."""
    store = RunStore(str(tmp_path / "out"))
    _plant_expired(store)
    racer = Lease(store, holder="racer")
    other = Lease(store, holder="third run")
    real_take_over = Lease._take_over

    def replaced_first(self, raw):
        os.unlink(self.path)
        assert other._create(other.path, other._body())
        return real_take_over(self, raw)

    monkeypatch.setattr(Lease, "_take_over", replaced_first)
    with pytest.raises(LeaseHeldError, match="third run"):
        racer.acquire()
    assert _lease_token(store) == other.token


def test_racer_waits_for_a_live_breaker_and_never_deletes(tmp_path):
    """Another racer holds the breaker of the stale lease and is still working: this one
    waits, then is refused; the stale lease is not deleted by it."""
    store = RunStore(str(tmp_path / "out"))
    stale = _plant_expired(store)
    breaker = f"{LEASE}.break-{_digest(stale)}"
    _plant(
        store,
        breaker,
        json.dumps(
            {
                "token": "t",
                "host": "elsewhere.invalid",
                "pid": 1,
                "holder": "busy racer",
                "created": time.time(),
            }
        ).encode(),
    )
    t0 = time.perf_counter()
    with pytest.raises(LeaseHeldError, match=r"(?s)taking over.*elsewhere\.invalid.*Fix: retry"):
        Lease(store, wait=0.3).acquire()
    assert 0.3 <= time.perf_counter() - t0 < 2.0
    assert store.fs.cat_file(store._path(LEASE)) == stale
    assert store.fs.exists(store._path(breaker))


def test_racer_waiting_on_a_breaker_proceeds_when_it_finishes(tmp_path):
    """The breaker's owner finishes while another racer waits: the waiter then sees the
    winner's live lease and is refused with the winner named."""
    store = RunStore(str(tmp_path / "out"))
    stale = _plant_expired(store)
    winner = Lease(store, holder="winner")
    breaker = winner._breaker_name(_digest(stale), 1)
    assert winner._create(breaker, json.dumps({**winner.info, "created": time.time()}).encode())

    def finish():
        time.sleep(0.2)
        os.unlink(winner.path)
        assert winner._create(winner.path, winner._body())
        os.unlink(breaker)

    t = threading.Thread(target=finish)
    t.start()
    with pytest.raises(LeaseHeldError, match="winner"):
        Lease(store, wait=5.0).acquire()
    t.join()
    assert _lease_token(store) == winner.token


# --------------------------------------------------------------------------- crashed breakers
@pytest.mark.parametrize(
    "breaker",
    [
        {"host": "elsewhere.invalid", "pid": 1, "created": -BREAKER_TTL - 5},  # old
        {"host": socket.gethostname(), "pid": "dead", "created": 0},  # dead pid here
        None,  # empty
    ],
    ids=["old", "dead-pid", "empty"],
)
def test_breaker_left_by_a_crashed_racer_does_not_block(tmp_path, breaker):
    store = RunStore(str(tmp_path / "out"))
    stale = _plant_expired(store)
    name = f"{LEASE}.break-{_digest(stale)}"
    body = (
        b""
        if breaker is None
        else json.dumps(
            {
                **breaker,
                "token": "t",
                "holder": "crashed racer",
                "pid": _dead_pid() if breaker["pid"] == "dead" else breaker["pid"],
                "created": time.time() + breaker["created"],
            }
        ).encode()
    )
    # a breaker from another host is judged by its age on the storage's clock
    old = breaker is not None and breaker["created"] < 0
    _plant(store, name, body, age=-breaker["created"] if old else 0.0)
    t0 = time.perf_counter()
    lease = Lease(store, holder="re-run").acquire()
    assert time.perf_counter() - t0 < 1.0
    assert _lease_token(store) == lease.token
    assert sorted(os.listdir(store.root)) == [LEASE]  # abandoned breaker cleaned up
    lease.release()


def test_chain_of_abandoned_breakers_uses_the_next_generation(tmp_path, monkeypatch):
    store = RunStore(str(tmp_path / "out"))
    stale = _plant_expired(store)
    d = _digest(stale)
    old = json.dumps(
        {
            "token": "t",
            "host": "elsewhere.invalid",
            "pid": 1,
            "created": time.time() - BREAKER_TTL - 1,
        }
    ).encode()
    for name in (f"{LEASE}.break-{d}", f"{LEASE}.break-{d}.2"):
        _plant(store, name, old, age=BREAKER_TTL + 1)
    made = []
    real_create = Lease._create

    def record(self, path, data):
        ok = real_create(self, path, data)
        made.append((os.path.basename(path), ok))
        return ok

    monkeypatch.setattr(Lease, "_create", record)
    lease = Lease(store).acquire()
    assert (f"{LEASE}.break-{d}.3", True) in made
    assert (f"{LEASE}.break-{d}", True) not in made  # an abandoned name is never re-made
    assert sorted(os.listdir(store.root)) == [LEASE]
    lease.release()


# --------------------------------------------------------------------------- renew / release
def test_renew_and_release_touch_only_their_own_lease(tmp_path):
    store = RunStore(str(tmp_path / "out"))
    mine = Lease(store, holder="mine").acquire()
    other = json.dumps(
        {
            "token": "someone-else",
            "host": "elsewhere.invalid",
            "pid": 1,
            "holder": "other",
            "expires": time.time() + 600,
        }
    ).encode()
    store.fs.pipe_file(mine.path, other)
    assert mine.renew() is False
    mine.release()
    assert store.fs.cat_file(mine.path) == other
    # vanished: neither recreated nor an error
    os.unlink(mine.path)
    assert mine.renew() is False
    mine.release(remove_empty_root=True)
    assert not os.path.exists(mine.path)


def test_release_removes_only_an_empty_root(tmp_path):
    store = RunStore(str(tmp_path / "out"))
    lease = Lease(store).acquire()
    store.fs.pipe_file(store._path("kept.txt"), b"x")
    lease.release(remove_empty_root=True)
    assert os.listdir(store.root) == ["kept.txt"]
    os.unlink(store._path("kept.txt"))
    lease = Lease(store).acquire()
    lease.release(remove_empty_root=True)
    assert not os.path.exists(store.root)
    assert os.path.exists(tmp_path)


def test_acquire_after_the_root_was_removed(tmp_path):
    """A racer may create the folder just before another run removes it as empty."""
    store = RunStore(str(tmp_path / "out"))
    store.fs.makedirs(store.root, exist_ok=True)
    os.rmdir(store.root)
    lease = Lease(store)
    assert lease._create(lease.path, lease._body())
    assert _lease_token(store) == lease.token


def test_s3_lease_takeover_and_refusal(bucket):
    store = RunStore(f"s3://{bucket}/runs/one")
    _plant(store, LEASE, b"")
    lease = Lease(store, holder="s3 run").acquire()
    with pytest.raises(LeaseHeldError, match="s3 run"):
        Lease(store).acquire()
    assert lease.renew() is True
    lease.release(remove_empty_root=True)
    store.fs.invalidate_cache()
    assert store.fs.find(store.root) == []
    assert store.fs.exists(bucket)  # the bucket is never removed


def test_s3_another_hosts_lease_by_its_heartbeat_on_the_stores_clock(bucket, monkeypatch):
    """On S3 the heartbeat's age is the lease's LastModified against a probe's, both the
    server's: a fresh lease holds whatever this host's clock says, and lapses after its ttl."""
    store = RunStore(f"s3://{bucket}/runs/foreign")
    _plant(store, LEASE, _foreign(ttl=2.0, expires_in=-86400.0))
    _clock(monkeypatch, 86400.0)
    with pytest.raises(LeaseHeldError, match=r"last heartbeat was \d+ s ago"):
        Lease(store).acquire()
    monkeypatch.undo()
    time.sleep(3.5)  # past its ttl by the server's clock (LastModified has 1 s steps)
    lease = Lease(store, holder="re-run").acquire()
    assert _lease_token(store) == lease.token
    store.fs.invalidate_cache()
    assert [p.rsplit("/", 1)[-1] for p in store.fs.find(store.root)] == [LEASE]  # no probe left
    lease.release()
