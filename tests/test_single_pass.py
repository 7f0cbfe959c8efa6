"""Single-pass PCA (``solver="single-pass"``): the mergeable block sketch against a float64
oracle, the factorisation against exact PCA and the randomized range finder's error bound, the
API's input kinds, and the flow writing and embedding from the row sketch."""

from __future__ import annotations

import json
import os
import warnings

import dask.array as da
import numpy as np
import pytest
import scipy.sparse as sps

from dimred_dask import PCA, DimredWarning, InputError, pca
from dimred_dask.blocks.sketch import dense_block_sketch, merge_sketches, rereference
from dimred_dask.errors import StageError
from dimred_dask.linalg.single_pass import single_pass_eigh


def _decaying(rng, n=3000, d=60, power=1.5, offset=7.0, dtype=np.float64):
    """Rows with singular values j^-power (j = 1..d) times sqrt(n), shifted by ``offset``."""
    sig = np.arange(1, d + 1) ** -power
    V, _ = np.linalg.qr(rng.standard_normal((d, d)))
    U, _ = np.linalg.qr(rng.standard_normal((n, d)))
    return ((U * sig) @ V.T * np.sqrt(n) + offset).astype(dtype)


def _row_sketch(sk):
    return np.asarray(sk.rows, np.float64) + np.repeat(sk.block_offsets, sk.block_rows, axis=0)


def test_block_sketches_merge_to_the_centred_products(rng):
    """Z = Xc^T Xc Omega and G = Omega^T Xc^T Xc Omega of the whole, from float32 blocks far
    from the origin (offset 1e4, spread 1), against float64 products of the centred data."""
    X = (rng.standard_normal((5000, 12)) + 1e4).astype(np.float32)
    X[2500:] += 3.0  # the two blocks have different means
    omega = rng.standard_normal((12, 4))
    a, ya = dense_block_sketch(X[:2500], omega, 0)
    b, yb = dense_block_sketch(X[2500:], omega, 2500)
    merged = merge_sketches(a, b, omega)
    x64 = X.astype(np.float64)
    mu = x64.mean(axis=0)
    Yc = (x64 - mu) @ omega
    whole = rereference(merged, mu, omega)
    np.testing.assert_allclose(
        whole.Z, (x64 - mu).T @ Yc, rtol=2e-5, atol=1e-6 * np.abs(whole.Z).max()
    )
    np.testing.assert_allclose(whole.G, Yc.T @ Yc, rtol=2e-5)
    np.testing.assert_allclose(whole.ys, 0.0, atol=1e-6 * np.abs(Yc).sum())
    # each block's stored rows are (X_b - r_b) Omega; + Omega^T (r_b - mu) gives the centred rows
    rows = np.vstack([ya, yb]).astype(np.float64)
    shift = np.repeat(np.stack(merged.block_refs) - omega.T @ mu, [2500, 2500], axis=0)
    np.testing.assert_allclose(rows + shift, Yc, rtol=1e-4, atol=1e-4 * np.abs(Yc).max())


def test_float32_products_that_overflow_are_redone_in_float64(rng):
    """Values near 1e18: their float32 products overflow, their variances (1e37) do not; the
    block is redone in float64 and the fit equals the float64 fit of the data scaled down (the
    scale is a power of two, so the scaled values are exact)."""
    from dimred_dask.blocks.sketch import _dense_sums

    w = rng.standard_normal((3, 10))
    small = (rng.standard_normal((800, 3)) @ w).astype(np.float32)
    scale = np.float32(2.0**60)
    kw = dict(n_components=2, solver="single-pass", n_oversamples=4, random_state=0)
    assert _dense_sums(small * scale, np.ones((10, 6)), np.float32) is None
    big, ref = pca(small * scale, **kw), pca(small.astype(np.float64), **kw)
    np.testing.assert_allclose(big.components, ref.components, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(
        big.explained_variance / np.float64(scale) ** 2, ref.explained_variance, rtol=1e-6
    )


@pytest.mark.parametrize("seed", range(4))
def test_float32_fit_of_rank_deficient_data_is_as_good_as_float32_allows(seed):
    """Rank-3 float32 data and a sketch of 6 columns: the float32 products leave rounding
    eigenvalues (of either sign, ~1e-8 of the largest) in G = Y^T Y; they are dropped, not
    inverted, so the components agree with the float64 fit to float32 accuracy."""
    rng = np.random.default_rng(12345 + seed)
    small = (rng.standard_normal((800, 3)) @ rng.standard_normal((3, 10))).astype(np.float32)
    kw = dict(n_components=2, solver="single-pass", n_oversamples=4, random_state=0)
    f32, f64 = pca(small, **kw), pca(small.astype(np.float64), **kw)
    np.testing.assert_allclose(f32.components, f64.components, rtol=1e-5, atol=2e-6)
    np.testing.assert_allclose(f32.explained_variance, f64.explained_variance, rtol=1e-5)


def test_float32_fit_keeps_components_down_to_float32s_precision(rng):
    """sigma_j = j^-2 and k = 32: the 32nd component's variance is 1e-6 of the first's, well
    within what float32 rows hold, but below the rounding of a Gram matrix summed in float32
    (its directions past the 19th were dropped as rounding, their embedding columns zero).
    The float32 fit keeps every component and agrees with the float64 fit of the same rows and
    sketch to what float32's rounding of Z = Xc^T Y allows (6e-2 for the 32nd component, whose
    error against exact PCA is 0.46 in float64: the one pass's own error dominates)."""
    X = _decaying(rng, n=8192, d=128, power=2.0, dtype=np.float32)
    kw = dict(n_components=32, solver="single-pass", random_state=0)
    f32, f64 = PCA(**kw), PCA(**kw)
    Y32, Y64 = f32.fit_transform(X), f64.fit_transform(X.astype(np.float64))
    assert np.all(f32.explained_variance_ > 0)
    np.testing.assert_allclose(f32.explained_variance_, f64.explained_variance_, rtol=2e-2)
    signs = np.sign(np.sum(f32.components_ * f64.components_, axis=1))
    per = np.linalg.norm(Y32 * signs - Y64, axis=0) / np.linalg.norm(Y64, axis=0)
    assert per[:10].max() < 5e-3 and per.max() < 0.1, per


def test_exact_when_the_sketch_spans_the_data(rng):
    """Rank-6 data and a sketch of 12 columns: one pass gives exact PCA (float64 rounding)."""
    w = rng.standard_normal((6, 30))
    X = rng.standard_normal((2000, 6)) @ w + 5.0
    ref = PCA(4, solver="covariance").fit(X)
    ours = PCA(4, solver="single-pass", n_oversamples=8, random_state=0)
    Y = ours.fit_transform(X)
    np.testing.assert_allclose(ours.explained_variance_, ref.explained_variance_, rtol=1e-10)
    np.testing.assert_allclose(ours.components_, ref.components_, rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose(Y, ref.transform(X), rtol=1e-8, atol=1e-8 * np.abs(Y).max())
    assert ours._model.info["sketch"]["captured_variance"] == pytest.approx(1.0, abs=1e-12)


def test_variance_outside_the_sketch_within_the_range_finders_bound(rng):
    """The variance the sketch misses (reported exactly as 1 - captured_variance) is at least
    the best rank-s tail (Eckart-Young) and within the expected-error bound of the randomized
    range finder, (1 + k / (p - 1)) sum_{j > k} sigma_j^2 for k + p samples (Halko, Martinsson
    & Tropp 2011, theorem 10.5; the seed is fixed)."""
    X = _decaying(rng)
    k = 5
    spec, sk = single_pass_eigh(X, k, n_oversamples=5, random_state=3)
    s = np.linalg.svd(X - X.mean(axis=0), compute_uv=False)
    missed = (1 - sk.captured_variance) * np.sum(s**2)
    p = sk.width - k
    assert np.sum(s[sk.width :] ** 2) <= missed <= (1 + k / (p - 1)) * np.sum(s[k:] ** 2)


def test_embedding_close_to_exact_on_a_decaying_spectrum_and_its_estimate(rng):
    """sigma_j = j^-2: the training embedding from the row sketch within 1e-2 of exact PCA's,
    and the reported estimate not below half the error it estimates."""
    X = _decaying(rng, n=20000, d=80, power=2.0, dtype=np.float32)
    ref = PCA(6, solver="covariance").fit(X)
    model = PCA(6, solver="single-pass", random_state=0)
    Y = model.fit_transform(X)
    Ye = ref.transform(X)
    signs = np.sign(np.sum(model.components_ * ref.components_, axis=1))
    err = np.linalg.norm(Y * signs - Ye) / np.linalg.norm(Ye)
    est = model._model.info["sketch"]["embedding_error_estimate"]
    assert err < 1e-2 and est >= err / 2, (err, est)
    # transform of the training rows is their exact projection on the single-pass components
    np.testing.assert_allclose(
        model.transform(X),
        (X - model.mean_) @ model.components_.T,
        rtol=1e-4,
        atol=1e-4 * np.abs(Ye).max(),
    )


@pytest.mark.filterwarnings("ignore::dimred_dask.DimredWarning")  # masked: a flat spectrum
def test_sparse_dask_and_numpy_give_the_same_fit(client, rng):
    """One seed, one test matrix: CSR rows (centred implicitly), dask blocks on the workers and
    NumPy in process agree to float64 rounding; the embedding too."""
    X = _decaying(rng, n=3000, d=40, power=2.0, offset=0.0)
    X *= rng.random(X.shape) < 0.3  # 30 % of the values stored
    S = sps.csr_matrix(X)
    kw = dict(n_components=4, solver="single-pass", random_state=5)
    dense, sparse = pca(X, **kw), pca(S, **kw)
    np.testing.assert_allclose(sparse.components, dense.components, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(
        sparse.training_embedding(), dense.training_embedding(), rtol=1e-8, atol=1e-10
    )
    Xd = da.from_array(X, chunks=(700, 40))
    rows = np.zeros((3000, dense.info["sketch"]["width"]))
    on_workers = pca(Xd, row_sketch=rows, **kw)
    assert on_workers.training_embedding() is None  # dask input: the rows went to row_sketch
    np.testing.assert_allclose(on_workers.components, dense.components, rtol=1e-9, atol=1e-12)


def test_refusals_and_the_warning_on_a_flat_spectrum(rng):
    X = rng.standard_normal((3000, 40))  # no decay at all
    with pytest.raises(InputError, match="single-pass.*fraction"):
        pca(X, n_components=0.9, solver="single-pass")
    bad = X.copy()
    bad[17, 3] = np.nan
    with pytest.raises(InputError, match="17"):
        pca(da.from_array(bad, chunks=(1000, 40)), n_components=3, solver="single-pass")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model = pca(X, n_components=5, solver="single-pass", random_state=0)
    assert any(
        issubclass(w.category, DimredWarning) and "n_oversamples" in str(w.message) for w in caught
    )
    assert "n_oversamples" in model.info["sketch"]["warning"]


def test_flow_embeds_from_the_stored_row_sketch(client, prefect_api, tmp_path, rng):
    """Through the CLI: the fit's one pass writes the row sketch into the run store; the
    embedding is that sketch times the model's map (not X's projection, which differs), the
    manifest and the CLI report the sketch; a changed sketch is refused, not read as zeros."""
    import zarr

    from dimred_dask.io import RunStore, save_array
    from flows.cli import main
    from flows.methods import get_method

    X = _decaying(rng, n=6000, d=50, power=2.0, dtype=np.float32)
    uri = str(tmp_path / "in.zarr")
    save_array(da.from_array(X, chunks=(1500, 50)), uri)
    out = str(tmp_path / "out")
    code = main(
        [
            "run",
            "--input",
            uri,
            "--output",
            out,
            "--method",
            "pca",
            "--n-components",
            "3",
            "--param",
            "solver=single-pass",
            "--chunk-rows",
            "1500",
        ]
    )
    assert code == 0
    m = json.loads(open(os.path.join(out, "manifest.json")).read())
    sketch, stored = m["model"]["sketch"], m["model"]["row_sketch"]
    assert m["model"]["passes"] == 1 and sketch["width"] == 3 + 10  # k + max(p, k)
    assert stored["shape"] == [6000, 13] and stored["stored_chunks"] == 4
    assert 0.99 < sketch["captured_variance"] <= 1.0
    assert not os.path.exists(os.path.join(out, "sketch"))  # removed once used
    store = RunStore(out)
    model = get_method("pca").load(store)
    Y = zarr.open_array(os.path.join(out, "embedding"))[...]
    exact_projection = model.transform(X)
    assert 1e-7 < np.abs(Y - exact_projection).max() / np.abs(Y).max() < 1e-2
    # the fit stage alone, into a store of its own: the embedding is the stored row sketch
    # times the model's map; a chunk of the sketch lost before the transform is refused
    adapter, out2 = get_method("pca"), str(tmp_path / "fit-only")
    Xd = da.from_array(X, chunks=(1500, 50))
    p = adapter.check({"n_components": 3, "solver": "single-pass"}, X.shape)
    fitted = adapter.fit(Xd, p, run={"output": out2, "fingerprint": "f"})
    adapter.save(fitted, RunStore(out2))
    rows = zarr.open_array(os.path.join(out2, "sketch", "rows"))[...]
    np.testing.assert_allclose(
        adapter.transform(adapter.load(RunStore(out2)), Xd).compute(),
        fitted.embed_row_sketch(da.from_array(rows, chunks=(1500, 13))).compute(),
        rtol=1e-6,
        atol=1e-6,
    )
    # read as the input is: a local store's raw chunks from their files, a damaged one named
    from dimred_dask.io.raw_chunks import RawRows

    lazy = adapter.transform(adapter.load(RunStore(out2)), Xd)
    graph = dict(lazy.__dask_graph__())
    assert any(isinstance(v, RawRows) for v in graph.values())
    chunk = os.path.join(out2, "sketch", "rows", "c", "1", "0")
    with open(chunk, "r+b") as f:
        f.truncate(100)
    with pytest.raises(InputError, match=r"(?s)chunk 'c/1/0'.*damaged or truncated"):
        adapter.transform(adapter.load(RunStore(out2)), Xd).compute()
    os.remove(chunk)
    with pytest.raises(StageError, match="row sketch"):
        adapter.transform(adapter.load(RunStore(out2)), Xd)


def test_a_pass_reads_and_computes_each_block_in_one_task(tmp_path, rng):
    """block_tasks: one task per row block that reads it and runs the kernel (dask fuses the
    read into it), not a read task and a kernel task; offsets and order as the rows'."""
    from dask import compute

    from dimred_dask.linalg.moments import block_tasks

    def kernel(block, offset, k):
        return offset, block.shape[0], block.shape[1], k

    from dimred_dask.io import open_input, save_array

    X = rng.standard_normal((1000, 6))
    save_array(da.from_array(X, chunks=(150, 6)), str(tmp_path / "x.zarr"))
    tasks = block_tasks(open_input(str(tmp_path / "x.zarr"), row_chunk=150).array, kernel, 7)
    graph = dict(tasks[0].__dask_graph__())
    n_blocks = 7
    assert (
        len([k for k in graph if str(k[0] if isinstance(k, tuple) else k).startswith("kernel-")])
        == n_blocks
    )  # named after the kernel
    assert len(graph) <= n_blocks + 2  # + the reader's handle and the one result cell
    expected = [(150 * i, min(150, 1000 - 150 * i), 6, 7) for i in range(n_blocks)]
    assert list(compute(*tasks, scheduler="sync")) == expected
    split = block_tasks(da.from_array(X, chunks=(150, 3)), kernel, 7)  # columns joined first
    assert list(compute(*split, scheduler="sync")) == expected


def test_values_refused_by_the_pass_leave_the_output_as_it_was(client, prefect_api, tmp_path, rng):
    """NaN is found by the fit's one pass, after it began writing its row sketch: the run
    fails with the rows named and the output is as before, absent or an earlier run."""
    from dimred_dask.io import save_array
    from flows.embed import embed

    X = _decaying(rng, n=3000, d=20, dtype=np.float32)
    X[2500, 4] = np.nan
    bad = str(tmp_path / "bad.zarr")
    save_array(da.from_array(X, chunks=(500, 20)), bad)
    params = {"n_components": 2, "solver": "single-pass"}

    def files(path):
        return (
            sorted(
                os.path.relpath(os.path.join(r, f), path) for r, _, fs in os.walk(path) for f in fs
            )
            if os.path.exists(path)
            else None
        )

    out = str(tmp_path / "new")
    with pytest.raises(InputError, match="2500"):
        embed(bad, out, method="pca", params=params, chunk_rows=500)
    assert files(out) is None
    good = str(tmp_path / "good.zarr")
    save_array(da.from_array(np.nan_to_num(X), chunks=(500, 20)), good)
    earlier = str(tmp_path / "earlier")
    embed(good, earlier, method="pca", params=params, chunk_rows=500)
    before = files(earlier)
    with pytest.raises(InputError, match="2500"):
        embed(bad, earlier, method="pca", params=params, chunk_rows=500, overwrite=True)
    assert files(earlier) == before and "sketch/rows/zarr.json" not in before


def test_cli_reports_a_short_sketch_once(prefect_api, tmp_path, rng):
    """Noise has no decaying spectrum: the run commits, and the CLI (a process of its own)
    shows the warning on its own line with the fix, not a Python warning as well."""
    import subprocess
    import sys

    from dimred_dask.io import save_array

    uri = str(tmp_path / "noise.zarr")
    save_array(
        da.from_array(rng.standard_normal((4000, 30)).astype(np.float32), chunks=(1000, 30)), uri
    )
    cli = os.path.join(os.path.dirname(sys.executable), "dimred-dask")
    done = subprocess.run(
        [
            cli,
            "run",
            "--input",
            uri,
            "--output",
            str(tmp_path / "o"),
            "--method",
            "pca",
            "--n-components",
            "3",
            "--param",
            "solver=single-pass",
        ],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "PREFECT_API_URL": prefect_api},
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.count("warning     PCA single-pass") == 1
    assert "n_oversamples" in done.stdout and "DimredWarning" not in done.stderr


def test_auto_takes_single_pass_out_of_core_when_max_error_allows(
    client, tmp_path, rng, monkeypatch
):
    """solver="auto": exact without max_error, for data in memory and where the sketch would
    be as costly as a second read; single-pass for data out of core (here: any dask data, the
    share lowered) when max_error is given, its row sketch in the run store; refitted exactly,
    the sketch removed, when its estimated error is above max_error (a flat spectrum). The
    manifest's solver_choice and the CLI say which and why."""
    import importlib
    import io

    from flows.cli import print_summary
    from flows.methods import get_method

    pca_module = importlib.import_module("dimred_dask.methods.pca")
    plan_module = importlib.import_module("dimred_dask.methods._pca_plan")
    X = _decaying(rng, n=6000, d=50, power=2.0, dtype=np.float32)
    Xd = da.from_array(X, chunks=(1500, 50))
    plan = plan_module.plan_solver
    assert plan(Xd, "auto", 3, max_error=0.02)[1]["why"].startswith("exact: the data")
    monkeypatch.setattr(plan_module, "OUT_OF_CORE_SHARE", 1e-9)  # the plan runs here
    assert plan(Xd, "auto", 3)[0] == "covariance"
    assert plan(X, "auto", 3, max_error=0.02)[0] == "covariance"
    wide, why = plan(Xd, "auto", 20, max_error=0.02)  # a sketch of 40 of the 50 columns
    assert (
        wide == "covariance"
        and why["predicted_s"]["single-pass"] > why["predicted_s"]["covariance"]
    )
    assert plan(Xd, "single-pass", 3, max_error=0.02) == ("single-pass", {})

    adapter = get_method("pca")
    p = adapter.check({"n_components": 3, "max_error": 0.05}, X.shape)
    model = adapter.fit(Xd, p, run={"output": str(tmp_path / "a"), "fingerprint": "f"})
    choice = model.info["solver_choice"]
    assert model.solver == "single-pass" and choice["solver"] == "single-pass", choice
    assert "fallback" not in choice and model.info["row_sketch"]["shape"] == [6000, 13]
    assert os.path.isdir(tmp_path / "a" / "sketch" / "rows")

    flat = rng.standard_normal((6000, 50)).astype(np.float32)
    out = tmp_path / "b"
    model = adapter.fit(
        da.from_array(flat, chunks=(1500, 50)),
        {**p, "max_error": 0.01},
        run={"output": str(out), "fingerprint": "f"},
    )
    choice = model.info["solver_choice"]
    assert model.solver == "covariance" and choice["solver"] == "single-pass"
    assert "above max_error 0.01: refitted with covariance" in choice["fallback"]
    assert model.sketch is None and not os.path.exists(out / "sketch")
    ref = pca_module.pca(flat, n_components=3, solver="covariance")
    np.testing.assert_allclose(model.components, ref.components, atol=1e-5)
    shown = io.StringIO()
    print_summary(
        {
            "output": str(out),
            "method": "pca",
            "params": p,
            "input": "x",
            "input_meta": {"shape": [6000, 50], "dtype": "float32"},
            "model": adapter.summary(model),
            "timings": {},
            "stages": {},
        },
        shown,
    )
    assert "solver      single-pass: the data" in shown.getvalue()
    assert "then the sketch's estimated embedding error" in shown.getvalue()
    with pytest.raises(InputError, match="max_error"):
        adapter.check({"n_components": 3, "max_error": 2}, X.shape)
    with pytest.raises(InputError, match="solver must be one of"):  # sparse input too
        pca(
            sps.random(50, 10, density=0.3, format="csr", random_state=0),
            n_components=2,
            solver="bogus",
        )
