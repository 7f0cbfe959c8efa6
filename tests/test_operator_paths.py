"""What an operator does by accident, through the command line, on every kind of path: each
case asserts the exit status, the typed error's first line, and that no byte of any store the
run did not own changed (`tests.data.tree`).

- a '#' in a folder's name (output, input, labels, graph cache, model, S3);
- the input rewritten between the kNN stage and the fit;
- a lease with a past expiry and a live holder; a forged lease claiming ten years;
- a graph-cache entry with a damaged chunk, and one whose chunks hold another graph;
- an S3 output whose endpoint does not answer; a Prefect API that does not answer;
- a local output disk that is full, read-only or not writable (a small tmpfs);
- inspect of an unfinished store, and --version.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import uuid

import numpy as np
import pytest
import zarr

from dimred_dask.io import RunStore, open_output, save_array
from tests.data import low_rank, tree
from tests.hooks import HOOK, ROOT


def _cli(capsys, *argv) -> tuple[int, str, str]:
    """(exit status, stdout, stderr from its "error:" block on: progress bars left out)."""
    from flows.cli import main

    rc = main(list(argv))
    out = capsys.readouterr()
    err = out.err
    return rc, out.out, err[err.index("error:") :] if "error:" in err else err


def _input(path, n=300, d=6, seed=0, chunk_rows=100) -> tuple[str, np.ndarray]:
    X = low_rank(np.random.default_rng(seed), n=n, d=d, rank=3, dtype=np.float32)
    save_array(X, str(path), chunks=(chunk_rows, d))
    return str(path), X


def _dead_port() -> int:
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _run_store(capsys, inp, out, *extra) -> dict:
    rc, _, err = _cli(capsys, "run", "--input", inp, "--output", str(out), *extra)
    assert rc == 0, err
    return open_output(str(out)).read_json("manifest.json")


PCA = ("--method", "pca", "--n-components", "2")


# ---- a '#' in a name --------------------------------------------------------------------------


def test_a_hash_after_an_existing_store_is_refused_never_cut(client, prefect_api, tmp_path, capsys):
    """``--output runs/base-pca#v2 --overwrite`` beside the store ``runs/base-pca`` used to
    replace that store; it is refused, and the file:// form writes the folder of that name."""
    inp, _ = _input(tmp_path / "in.zarr")
    base = tmp_path / "runs" / "base-pca"
    _run_store(capsys, inp, base, *PCA)
    before = tree(base)
    rc, _, err = _cli(capsys, "run", "--input", inp, "--output", f"{base}#v2", "--overwrite", *PCA)
    assert rc == 2, err
    assert err.startswith("error: InputError: The output ") and "would be the element 'v2'" in err
    assert "%23v2" in err and "Traceback" not in err
    assert tree(base) == before and sorted(os.listdir(base.parent)) == ["base-pca"]
    literal = "file://" + str(base) + "%23v2"
    manifest = _run_store(capsys, inp, literal, *PCA)
    assert (base.parent / "base-pca#v2" / "_COMMITTED").exists()
    assert manifest["output"] == literal  # what was used is what is written
    assert tree(base) == before
    rc, out, _ = _cli(capsys, "inspect", literal)
    assert rc == 0 and f"output      {literal}" in out


def test_a_hash_inside_folder_names_is_part_of_the_name_on_every_path(
    client, prefect_api, tmp_path, capsys
):
    """Input, labels, output and graph cache under ``proj#1/``: each is the path as typed,
    nothing is written to ``proj`` (which exists, a plain folder), the model loads."""
    proj = tmp_path / "proj#1"
    proj.mkdir()
    (tmp_path / "proj").mkdir()
    (tmp_path / "proj" / "keep.txt").write_text("not the run's")
    inp, X = _input(proj / "in.zarr")
    y = (X[:, 0] > np.median(X[:, 0])).astype(np.float32)
    save_array(y[:, None], str(proj / "y#labels.zarr"))
    before = tree(tmp_path / "proj")
    m = _run_store(
        capsys,
        inp,
        proj / "spca",
        "--method",
        "spca",
        "--n-components",
        "1",
        "--labels",
        str(proj / "y#labels.zarr"),
    )
    assert m["input"].endswith("proj%231/in.zarr") and m["labels"].endswith("y%23labels.zarr")
    assert (proj / "spca" / "_COMMITTED").exists()
    m = _run_store(
        capsys,
        inp,
        proj / "iso",
        "--method",
        "isomap",
        "--param",
        "n_neighbors=8",
        "--graph-cache",
        str(proj / "cache#g"),
    )
    assert m["graph"]["cache"].endswith("proj%231/cache%23g")
    assert any(n.startswith("knn-") for n in os.listdir(proj / "cache#g"))
    assert tree(tmp_path / "proj") == before  # nothing went to the folder before the '#'
    from flows.methods import load_model

    model = load_model(str(proj / "iso"))
    assert model.transform(X[:5]).shape == (5, 2)


def test_an_s3_output_never_names_an_element(client, prefect_api, s3_server, tmp_path, capsys):
    inp, _ = _input(tmp_path / "in.zarr")
    rc, _, err = _cli(capsys, "run", "--input", inp, "--output", "s3://lab/runs/a#v2", *PCA)
    assert rc == 2 and err.startswith("error: InputError: The output 's3://lab/runs/a#v2' names")


# ---- the input changes during the run ---------------------------------------------------------


def test_an_input_rewritten_between_the_graph_and_the_fit_commits_nothing(
    client, prefect_api, tmp_path, capsys, monkeypatch
):
    """A producer rewrites a chunk of the input after the kNN stage: the fit is refused with
    the chunk named and nothing is committed; the same command then starts from the new
    input and gives what a run on the new input gives."""
    inp, X = _input(tmp_path / "in.zarr", chunk_rows=100)
    changed = X.copy()
    changed[100:200] = changed[100:200][::-1] + 0.5
    _input(tmp_path / "new.zarr", chunk_rows=100)  # the same layout, other rows
    new = zarr.open_array(str(tmp_path / "new.zarr"), mode="r+")
    new[...] = changed
    chunk = "c/1/0"  # rows 100-199
    monkeypatch.setenv("DIMRED_HOOK", HOOK)
    monkeypatch.setenv(
        "DIMRED_TEST_REWRITE", f"knn:{tmp_path}/in.zarr/{chunk}:{tmp_path}/new.zarr/{chunk}"
    )
    out = tmp_path / "map"
    argv = (
        "run",
        "--input",
        inp,
        "--output",
        str(out),
        "--method",
        "umap",
        "--param",
        "n_epochs=40",
        "--param",
        "n_neighbors=10",
        "--graph-cache",
        "none",
    )
    rc, _, err = _cli(capsys, *argv)
    assert rc == 2, err
    first = err.splitlines()[0]
    assert "Traceback" not in err
    assert first.startswith("error: InputChangedError: Stage 'fit' did not commit: the input")
    assert f"1 file(s) rewritten ('{chunk}')" in first
    store = RunStore(str(out))
    assert not store.committed() and store.stage_marker("fit") is None
    assert store.stage_marker("knn") is not None  # committed while the input was the old one
    monkeypatch.delenv("DIMRED_TEST_REWRITE")
    np.testing.assert_array_equal(zarr.open_array(inp, mode="r")[...], changed)
    rc, _, err = _cli(capsys, *argv)
    assert rc == 0, err
    again = open_output(str(out)).read_json("manifest.json")
    assert again["stages"]["knn"] == "computed"  # the new input's graph, not the old one
    fresh = _run_store(capsys, str(tmp_path / "new.zarr"), tmp_path / "fresh", *argv[5:])
    ours, theirs = open_output(str(out)), open_output(str(tmp_path / "fresh"))
    for name in ("graph/indices", "embedding"):  # what a run on the new input gives
        np.testing.assert_array_equal(ours.read_array(name), theirs.read_array(name))
    assert fresh["metrics"]["trustworthiness"] == again["metrics"]["trustworthiness"]


# ---- leases -------------------------------------------------------------------------------------

HOLDER = """
import json, os, sys, time
from dimred_dask.io.lease import Lease
from dimred_dask.io.store import RunStore
store = RunStore(sys.argv[1])
lease = Lease(store, holder="stalled nightly run", ttl=0.05).acquire()
print("held", flush=True)
time.sleep(600)
"""


def test_a_live_holder_with_a_past_expiry_keeps_its_store(client, prefect_api, tmp_path, capsys):
    """Its heartbeat stalled past the lease's expiry (here 0.05 s): a second run on the same
    store is refused, naming the holder, and writes nothing; inspect names the holder."""
    inp, _ = _input(tmp_path / "in.zarr")
    out = tmp_path / "out"
    rc, _, err = _cli(
        capsys, "run", "--input", inp, "--output", str(out), *PCA, "--param", "solver=covariance"
    )
    assert rc == 0, err
    (out / "_COMMITTED").unlink()  # an unfinished run's store
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(out)], stdout=subprocess.PIPE, text=True, cwd=ROOT
    )
    try:
        assert proc.stdout.readline().strip() == "held"
        time.sleep(0.3)
        lease = json.loads((out / "_LEASE").read_text())
        assert lease["expires"] < time.time()
        before = tree(out)
        rc, _, err = _cli(capsys, "run", "--input", inp, "--output", str(out), *PCA)
        assert rc == 2, err
        assert err.startswith("error: LeaseHeldError: The output ")
        assert f"stalled nightly run (host {socket.gethostname()}, pid {proc.pid}" in err
        assert "runs on this host" in err and "dimred-dask unlock" in err
        assert tree(out) == before
        rc, shown, _ = _cli(capsys, "inspect", str(out))
        assert rc == 3
        assert "stages      committed: " in shown and "fit (" in shown and "evaluate (" in shown
        assert (
            f"lease       held by stalled nightly run (host {socket.gethostname()}, pid "
            f"{proc.pid}; its process {proc.pid} runs on this host)" in shown
        )
        rc, _, err = _cli(capsys, "unlock", str(out))
        assert rc == 2 and err.startswith("error: LeaseHeldError") and f"kill {proc.pid}" in err
    finally:
        proc.kill()
        proc.wait()
    rc, _, err = _cli(capsys, "run", "--input", inp, "--output", str(out), *PCA)
    assert rc == 0, err  # the holder is gone: its lease is stale, the run resumes


def test_a_forged_lease_of_ten_years_is_stale_and_inspect_says_so(
    client, prefect_api, tmp_path, capsys
):
    inp, _ = _input(tmp_path / "in.zarr")
    out = tmp_path / "out"
    out.mkdir()
    forged = {
        "token": uuid.uuid4().hex,
        "host": "elsewhere.invalid",
        "pid": 7,
        "holder": "forged",
        "expires": time.time() + 10 * 365 * 86400,
    }
    (out / "_LEASE").write_text(json.dumps(forged))
    rc, _, err = _cli(capsys, "run", "--input", inp, "--output", str(out), *PCA)
    assert rc == 0, err
    assert not (out / "_LEASE").exists()


def test_inspect_of_a_run_stopped_part_way_lists_its_stages(
    client, prefect_api, tmp_path, capsys, monkeypatch
):
    inp, _ = _input(tmp_path / "in.zarr")
    out = tmp_path / "map"
    monkeypatch.setenv("DIMRED_HOOK", HOOK)
    monkeypatch.setenv("DIMRED_TEST_FAIL", "after:knn")  # the final step's: PCA has none
    argv = (
        "run",
        "--input",
        inp,
        "--output",
        str(out),
        "--method",
        "pca+isomap",
        "--param",
        "pca.n_components=4",
        "--param",
        "n_neighbors=8",
    )
    rc, _, err = _cli(capsys, *argv)
    assert rc == 1 and "stopped by the test after the knn stage" in err
    rc, shown, _ = _cli(capsys, "inspect", str(out))
    assert rc == 3
    lines = shown.splitlines()
    assert lines[1].startswith("status      unfinished")
    step = next(line for line in lines if line.startswith("step pca"))
    assert all(f"{s} (" in step for s in ("fit", "transform", "evaluate"))
    final = next(line for line in lines if line.startswith("stages"))
    assert "knn (" in final and "fit" not in final
    assert "lease       none: no run is writing it" in shown
    rc, shown, _ = _cli(capsys, "inspect", "--json", str(out))
    report = json.loads(shown)
    assert rc == 3 and report["committed"] is False and report["lease"] is None
    monkeypatch.delenv("DIMRED_TEST_FAIL")
    rc, _, err = _cli(capsys, *argv)
    assert rc == 0, err


def test_version(capsys):
    import dimred_dask

    with pytest.raises(SystemExit) as done:
        _cli(capsys, "--version")
    assert done.value.code == 0
    assert capsys.readouterr().out.startswith(f"dimred-dask {dimred_dask.__version__} (numpy ")


# ---- the graph cache ----------------------------------------------------------------------------

ISOMAP = ("--method", "isomap", "--param", "n_neighbors=8")


def _entry(cache) -> str:
    (name,) = [n for n in os.listdir(cache) if n.startswith("knn-")]
    return os.path.join(cache, name)


def test_a_damaged_cache_entry_is_named_set_aside_and_rebuilt(
    client, prefect_api, tmp_path, capsys
):
    inp, _ = _input(tmp_path / "in.zarr")
    cache = tmp_path / "cache"
    first = _run_store(capsys, inp, tmp_path / "a", *ISOMAP, "--graph-cache", str(cache))
    entry = _entry(cache)
    chunk = os.path.join(entry, "graph", "indices", "c", "0", "0")
    with open(chunk, "r+b") as f:  # a damaged byte range in the middle of the chunk
        f.seek(8)
        f.write(b"\xff" * 16)
    second = _run_store(capsys, inp, tmp_path / "b", *ISOMAP, "--graph-cache", str(cache))
    (problem,) = second["graph"]["cache_problems"]
    assert f"entry {entry} could not be read" in problem and "graph/indices" in problem
    assert second["stages"]["knn"] == "computed"
    assert os.listdir(cache / "set-aside")  # moved, not deleted
    np.testing.assert_array_equal(
        open_output(str(tmp_path / "a")).read_array("graph/indices"),
        open_output(str(tmp_path / "b")).read_array("graph/indices"),
    )
    third = _run_store(capsys, inp, tmp_path / "c", *ISOMAP, "--graph-cache", str(cache))
    assert third["stages"]["knn"] == "reused from cache"  # the rebuilt entry
    assert first["metrics"] == third["metrics"]


def test_a_cache_entry_holding_another_graph_is_never_used(client, prefect_api, tmp_path, capsys):
    """Its chunks replaced by those of another input's graph of the same shape: the digest
    written with the entry does not match, so the graph is rebuilt, not used."""
    inp, _ = _input(tmp_path / "in.zarr", seed=0)
    other, _ = _input(tmp_path / "other.zarr", seed=1)
    cache, elsewhere = tmp_path / "cache", tmp_path / "cache2"
    _run_store(capsys, inp, tmp_path / "a", *ISOMAP, "--graph-cache", str(cache))
    _run_store(capsys, other, tmp_path / "o", *ISOMAP, "--graph-cache", str(elsewhere))
    entry, foreign = _entry(cache), _entry(elsewhere)
    for name in ("indices", "distances"):
        shutil.rmtree(os.path.join(entry, "graph", name, "c"))
        shutil.copytree(
            os.path.join(foreign, "graph", name, "c"), os.path.join(entry, "graph", name, "c")
        )
    second = _run_store(capsys, inp, tmp_path / "b", *ISOMAP, "--graph-cache", str(cache))
    (problem,) = second["graph"]["cache_problems"]
    assert "does not match the digest of its content" in problem
    assert second["stages"]["knn"] == "computed"
    np.testing.assert_array_equal(
        open_output(str(tmp_path / "a")).read_array("graph/indices"),
        open_output(str(tmp_path / "b")).read_array("graph/indices"),
    )


# ---- services -----------------------------------------------------------------------------------


def test_an_unreachable_s3_output_is_a_store_error_at_once(
    client, prefect_api, tmp_path, capsys, monkeypatch
):
    inp, _ = _input(tmp_path / "in.zarr")
    before = tree(tmp_path)
    monkeypatch.setenv("DIMRED_S3_ENDPOINT_URL", f"http://127.0.0.1:{_dead_port()}")
    t0 = time.monotonic()
    rc, _, err = _cli(capsys, "run", "--input", inp, "--output", "s3://lab/runs/pca", *PCA)
    assert rc == 2, err
    assert err.startswith(
        "error: StoreError: The output s3://lab/runs/pca: could not reach the storage endpoint"
    )
    assert "AWS_ENDPOINT_URL" in err and "Traceback" not in err
    assert time.monotonic() - t0 < 20  # refused in the preflight, not after the retries
    assert tree(tmp_path) == before


def _subprocess_cli(args, env=None, user=None, timeout=120):
    cmd = [sys.executable, "-m", "flows.cli", *args]
    if user:
        cmd = ["setpriv", f"--reuid={user}", f"--regid={user}", "--clear-groups", *cmd]
    return subprocess.run(
        cmd,
        env={**os.environ, "PYTHONPATH": ROOT, **(env or {})},
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_an_unreachable_prefect_api_is_a_service_error_before_anything_starts(tmp_path):
    inp, _ = _input(tmp_path / "in.zarr")
    api = f"http://127.0.0.1:{_dead_port()}/api"
    t0 = time.monotonic()
    res = _subprocess_cli(
        ["run", "--input", inp, "--output", str(tmp_path / "out"), *PCA],
        env={"PREFECT_API_URL": api},
    )
    assert res.returncode == 2, res.stderr
    assert res.stderr.startswith(
        f"error: ServiceError: Prefect's API at {api} (PREFECT_API_URL) does not answer"
    )
    assert "prefect server start" in res.stderr and "Traceback" not in res.stderr
    assert not (tmp_path / "out").exists()
    assert time.monotonic() - t0 < 60


def test_an_unreachable_scheduler_is_a_service_error(tmp_path, capsys):
    inp, _ = _input(tmp_path / "in.zarr")
    addr = f"tcp://127.0.0.1:{_dead_port()}"
    rc, _, err = _cli(
        capsys, "run", "--input", inp, "--output", str(tmp_path / "o"), "--scheduler", addr, *PCA
    )
    assert rc == 2 and err.startswith(f"error: ServiceError: The Dask scheduler at {addr}")
    assert not (tmp_path / "o").exists()


# ---- a local output disk: full, read-only, not writable ---------------------------------------


@contextlib.contextmanager
def _tmpfs(path, size: str):
    os.makedirs(path, exist_ok=True)
    res = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
        capture_output=True,
        text=True,
    )
    if res.returncode != 0:
        pytest.skip(
            "mounting a small tmpfs needs root (CAP_SYS_ADMIN) in this machine's mount "
            f"namespace, which this run does not have: {res.stderr.strip()}"
        )
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], capture_output=True)


def _fill(folder, leave: int) -> None:
    """Write a file into ``folder`` until about ``leave`` bytes are free."""
    st = os.statvfs(folder)
    free = st.f_bavail * st.f_frsize
    with open(os.path.join(folder, "filler"), "wb") as f:
        f.write(b"\0" * max(0, free - leave))


def test_a_full_local_disk_is_refused_with_a_local_fix(client, prefect_api, tmp_path, capsys):
    inp, _ = _input(tmp_path / "in.zarr", n=4000, d=6, chunk_rows=1000)
    with _tmpfs(tmp_path / "small", "1m") as disk:
        _fill(disk, leave=16 * 1024)  # less than the 4000 x 2 float32 embedding and more
        t0 = time.monotonic()
        rc, _, err = _cli(capsys, "run", "--input", inp, "--output", f"{disk}/o", *PCA)
        assert rc == 2, err
        assert err.startswith(f"error: StoreError: The output {disk}/o needs about ")
        assert "df -h" in err and "AWS_ENDPOINT_URL" not in err and "bucket" not in err
        assert time.monotonic() - t0 < 15  # the preflight, before Prefect and the cluster
        assert sorted(os.listdir(disk)) == ["filler"]
        # room for the estimate, not for the whole run: the write that fails is named
        os.unlink(f"{disk}/filler")
        _fill(disk, leave=80 * 1024)
        rc, _, err = _cli(capsys, "run", "--input", inp, "--output", f"{disk}/o", *PCA)
        assert rc == 2, err
        assert err.startswith("error: StoreError: ") and "the disk is full" in err
        assert "df -h" in err and "AWS_ENDPOINT_URL" not in err
        os.unlink(f"{disk}/filler")
        rc, _, err = _cli(capsys, "run", "--input", inp, "--output", f"{disk}/o", *PCA)
        assert rc == 0, err  # space freed: the same command finishes the run


def test_a_read_only_disk_is_refused_with_a_local_fix(tmp_path, capsys):
    inp, _ = _input(tmp_path / "in.zarr")
    with _tmpfs(tmp_path / "ro", "1m") as disk:
        subprocess.run(["mount", "-o", "remount,ro", str(disk)], check=True)
        rc, _, err = _cli(capsys, "run", "--input", inp, "--output", f"{disk}/o", *PCA)
        assert rc == 2, err
        assert err.startswith(f"error: StoreError: The output {disk}/o is on a read-only")
        assert "writable disk" in err and "AWS_ENDPOINT_URL" not in err


def test_a_folder_the_user_may_not_write_is_refused_with_a_local_fix():
    """Run as the unprivileged user ``nobody`` (root may write anywhere)."""
    if os.geteuid() != 0 or not shutil.which("setpriv"):
        pytest.skip("running the command as another user needs root and setpriv")
    top = tempfile.mkdtemp(prefix="dimred-perm-")
    try:
        os.chmod(top, 0o755)
        inp, _ = _input(os.path.join(top, "in.zarr"))
        home = os.path.join(top, "home")
        os.mkdir(home)
        os.chown(home, 65534, 65534)
        locked = os.path.join(top, "locked")
        os.mkdir(locked, 0o755)  # root's, not writable for nobody
        res = _subprocess_cli(
            ["run", "--input", inp, "--output", f"{locked}/o", *PCA],
            env={"HOME": home, "PREFECT_HOME": os.path.join(home, ".prefect")},
            user=65534,
        )
        assert res.returncode == 2, res.stderr
        assert res.stderr.startswith(f"error: StoreError: The output {locked}/o cannot be written")
        assert "permission denied" in res.stderr and "ls -ld" in res.stderr
        assert os.listdir(locked) == []
    finally:
        shutil.rmtree(top)
