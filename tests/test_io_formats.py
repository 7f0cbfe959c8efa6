"""Readers of the formats users keep data in, against what their own libraries read: AnnData
(.h5ad and AnnData-Zarr v2 / v3; X, layers, obsm, raw; CSR and CSC; the older layout of
anndata < 0.7, in scanpy's bundled pbmc68k_reduced and in files written as it wrote them; obs
columns as labels), HDF5 datasets (h5py), SciPy sparse .npz (compressed and not), shards
(glob or folder) and Parquet list columns; locally and from a real S3-compatible server; and
every bad input refused by name."""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import pickle
import re
import warnings

import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp

from dimred_dask import InputError
from dimred_dask.errors import InputTypeError
from dimred_dask.io import open_input


@contextlib.contextmanager
def _object_strings():
    """anndata 0.12.6 writes string names only as object arrays, not pandas 3's str dtype."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pd.option_context("future.infer_string", False):
            yield


def _adata(X, **kw):
    import anndata as ad

    with _object_strings():
        return ad.AnnData(X=X, **kw)


def _write(adata, path, zarr_format=None, **kw):
    import anndata as ad

    with _object_strings():
        if str(path).endswith(".h5ad"):
            adata.write_h5ad(path, **kw)
        else:
            with ad.settings.override(zarr_write_format=zarr_format):
                adata.write_zarr(path, **kw)


def _blocks(arr, **kw):
    import dask

    return list(dask.compute(*arr.to_delayed().ravel(), **({"scheduler": "sync"} | kw)))


def _sparse_equal(inp, expected, **kw):
    """The chunks are CSR row blocks of all columns whose rows stack to ``expected``."""
    blocks = _blocks(inp.array, **kw)
    assert all(isinstance(b, sp.csr_matrix) for b in blocks)
    assert inp.array.chunks[1] == (expected.shape[1],)
    assert isinstance(inp.array._meta, sp.csr_matrix)
    sizes = inp.array.chunks[0]
    assert len(set(sizes[:-1])) <= 1 and sizes[-1] <= sizes[0]  # regular row chunks
    got = sp.vstack(blocks).toarray()
    np.testing.assert_array_equal(got, expected.toarray() if sp.issparse(expected) else expected)


def _has(meta: dict, **expected):
    assert {k: meta.get(k) for k in expected} == expected, meta


@pytest.fixture
def cells(rng):
    """An AnnData as users keep one: float32 CSR X, integer counts, a dense layer, obsm, raw."""
    X = sp.random(300, 40, density=0.1, format="csr", random_state=1, dtype=np.float32)
    counts = X.copy()
    counts.data = np.ceil(counts.data * 20)
    return _adata(
        X,
        layers={"counts": counts.astype(np.int32), "dense": rng.standard_normal((300, 40))},
        obsm={"X_pca": rng.standard_normal((300, 5)).astype(np.float32)},
    )


def test_h5ad_elements_equal_what_anndata_reads(tmp_path, cells):
    import anndata as ad

    cells.raw = cells
    path = tmp_path / "cells.h5ad"
    _write(cells, path)
    back = ad.read_h5ad(path)
    inp = open_input(str(path), row_chunk=64)
    _sparse_equal(inp, back.X)
    _has(inp.meta, format="h5ad", sparse=True, element="X", nnz=back.X.nnz, layout="csr")
    assert inp.meta["density"] == pytest.approx(back.X.nnz / (300 * 40))
    counts = open_input(f"{path}#layers/counts", row_chunk=100, as_float=True)
    assert counts.meta["stored_dtype"] == "int32" and counts.array.dtype == np.float64
    _sparse_equal(counts, back.layers["counts"].astype(np.float64))
    _sparse_equal(open_input(f"{path}#raw/X", row_chunk=64), back.raw.X)
    for element, expected in (
        ("layers/dense", back.layers["dense"]),
        ("obsm/X_pca", back.obsm["X_pca"]),
    ):
        dense = open_input(f"{path}#{element}", row_chunk=64)
        assert dense.meta["element"] == element and dense.meta["sparse"] is False
        np.testing.assert_array_equal(dense.array.compute(scheduler="sync"), expected)


def _read(uri, **kw):
    """(input, its values as one dense NumPy array) of ``uri``, read block by block."""
    inp = open_input(uri, **kw)
    blocks = _blocks(inp.array)
    return inp, sp.vstack(blocks).toarray() if inp.meta["sparse"] else np.concatenate(blocks)


def _dense(m):
    return m.toarray() if sp.issparse(m) else np.asarray(m)


def _labels(uri, **kw):
    """(labels, their values) of ``uri``, opened as a run opens its labels (open_labels)."""
    inp = open_input(uri, allow_1d=True, role="labels", **kw)
    return inp, np.concatenate(_blocks(inp.array))[:, 0]


def _quietly(read, path):
    """anndata's own read of an older file (it warns about the layout)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return read(path)


@pytest.mark.parametrize("name", ["cells.h5ad", "cells.zarr"])
def test_a_missing_element_is_refused_listing_every_matrix_by_its_path(tmp_path, cells, name):
    cells.obsm["X_umap"] = np.ones((300, 2))
    cells.raw = cells
    _write(cells, tmp_path / name, zarr_format=3)
    listing = ["X", "raw/X", "obsm/X_pca", "obsm/X_umap", "layers/counts", "layers/dense"]
    with pytest.raises(InputError, match=re.escape(f"its matrices: {listing}")):
        open_input(f"{tmp_path / name}#layers/nope")


def _pbmc68k_reduced() -> str:
    """scanpy's bundled pbmc68k_reduced: a real .h5ad in anndata < 0.7's layout (raw.X an
    h5sparse group, compound obs / var / obsm / varm, neighbour graphs in uns)."""
    spec = importlib.util.find_spec("scanpy")
    if spec is None:
        pytest.skip("scanpy is not installed")
    return os.path.join(spec.submodule_search_locations[0], "datasets", "10x_pbmc68k_reduced.h5ad")


def test_pbmc68k_reduced_in_the_older_layout_reads_as_anndata_reads_it():
    import anndata as ad

    path = _pbmc68k_reduced()
    back = _quietly(ad.read_h5ad, path)
    for element, expected in (
        ("X", back.X),
        ("raw/X", back.raw.X),
        ("obsm/X_pca", back.obsm["X_pca"]),
        ("obsm/X_umap", back.obsm["X_umap"]),
        ("obsp/distances", back.obsp["distances"]),
    ):
        inp, got = _read(f"{path}#{element}", row_chunk=128)
        assert inp.meta["element"] == element and inp.shape == expected.shape
        np.testing.assert_array_equal(got, _dense(expected))
    raw = open_input(f"{path}#raw/X")
    _has(raw.meta, sparse=True, layout="csr", stored_as="raw.X", nnz=back.raw.X.nnz)
    listing = [
        "X",
        "raw/X",
        "obsm/X_pca",
        "obsm/X_umap",
        "obsp/connectivities",
        "obsp/distances",
        "varm/PCs",
    ]
    with pytest.raises(InputError, match=re.escape(f"its matrices: {listing}")):
        open_input(f"{path}#layers/counts")
    for column in ("louvain", "bulk_labels", "phase"):
        inp, codes = _labels(f"{path}#obs/{column}", row_chunk=128)
        np.testing.assert_array_equal(codes, back.obs[column].cat.codes.to_numpy())
        assert inp.meta["categories"] == list(back.obs[column].cat.categories)
        assert inp.array.dtype == back.obs[column].cat.codes.dtype
    inp, genes = _labels(f"{path}#obs/n_genes")
    np.testing.assert_array_equal(genes, back.obs["n_genes"].to_numpy())
    assert "categories" not in inp.meta
    with pytest.raises(InputTypeError, match=r"(?s)#obs/louvain is a column of obs.*--labels.*#X"):
        open_input(f"{path}#obs/louvain")


def _write_anndata_06(path, rng, n=40, d=6, d_raw=9):
    """An .h5ad as anndata < 0.7 wrote one: X an h5sparse group; raw.X a dataset beside
    raw.var and raw.varm; obs, var, obsm, varm compound datasets (the index the first field,
    text as fixed-width bytes, a categorical as its codes with its categories in
    uns/<column>_categories); the neighbour graph in uns/neighbors."""
    import h5py

    def records(fields, size):
        return np.zeros(size, dtype=fields)

    with h5py.File(path, "w") as f:

        def h5sparse(name, m):
            group = f.create_group(name)
            group.attrs["h5sparse_format"] = "csr"
            group.attrs["h5sparse_shape"] = np.array(m.shape)
            for key in ("data", "indices", "indptr"):
                group[key] = getattr(m, key)

        h5sparse("X", sp.random(n, d, density=0.3, format="csr", random_state=3, dtype=np.float32))
        f["raw.X"] = rng.standard_normal((n, d_raw)).astype(np.float32)
        raw_var = records([("index", "S4")], d_raw)
        raw_var["index"] = [b"r%d" % i for i in range(d_raw)]
        f["raw.var"] = raw_var
        raw_varm = records([("PCs", "<f8", (2,))], d_raw)
        raw_varm["PCs"] = rng.standard_normal((d_raw, 2))
        f["raw.varm"] = raw_varm
        obs = records(
            [
                ("index", "S4"),
                ("louvain", "i1"),
                ("batch", "i1"),
                ("barcode", "S5"),
                ("n_counts", "<f4"),
            ],
            n,
        )
        obs["index"] = [b"c%d" % i for i in range(n)]
        obs["louvain"] = rng.integers(0, 3, n)
        obs["batch"] = np.arange(n) % 3  # codes past its one category: anndata keeps numbers
        obs["barcode"] = [b"AC%03d" % (n - i) for i in range(n)]
        obs["n_counts"] = rng.random(n)
        f["obs"] = obs
        var = records([("index", "S4"), ("highly_variable", "?")], d)
        var["index"] = [b"g%d" % i for i in range(d)]
        f["var"] = var
        obsm = records([("X_pca", "<f4", (3,)), ("X_umap", "<f8", (2,))], n)
        obsm["X_pca"], obsm["X_umap"] = rng.standard_normal((n, 3)), rng.standard_normal((n, 2))
        f["obsm"] = obsm
        varm = records([("PCs", "<f8", (3,))], d)
        varm["PCs"] = rng.standard_normal((d, 3))
        f["varm"] = varm
        f["uns/louvain_categories"] = np.array([b"B", b"NK", b"T"])
        f["uns/batch_categories"] = np.array([b"only"])
        h5sparse(
            "uns/neighbors/distances", sp.random(n, n, density=0.1, format="csr", random_state=4)
        )


def test_h5ad_written_as_anndata_0_6_did_reads_as_anndata_reads_it(tmp_path, rng):
    import anndata as ad

    path = tmp_path / "old.h5ad"
    _write_anndata_06(path, rng)
    back = _quietly(ad.read_h5ad, path)
    for element, expected, stored in (
        ("X", back.X, None),
        ("raw/X", back.raw.X, "raw.X"),
        ("obsm/X_pca", back.obsm["X_pca"], "obsm"),
        ("obsm/X_umap", back.obsm["X_umap"], "obsm"),
        ("varm/PCs", back.varm["PCs"], "varm"),
        ("raw/varm/PCs", back.raw.varm["PCs"], "raw.varm"),
        ("obsp/distances", back.obsp["distances"], "uns/neighbors/distances"),
    ):
        inp, got = _read(f"{path}#{element}", row_chunk=16)
        assert inp.meta["element"] == element and inp.meta.get("stored_as") == stored
        assert got.dtype == expected.dtype
        np.testing.assert_array_equal(got, _dense(expected))
    listing = [
        "X",
        "raw/X",
        "obsm/X_pca",
        "obsm/X_umap",
        "obsp/distances",
        "varm/PCs",
        "raw/varm/PCs",
    ]
    with pytest.raises(InputError, match=re.escape(f"its matrices: {listing}")):
        open_input(f"{path}#layers/counts")
    inp, codes = _labels(f"{path}#obs/louvain", row_chunk=16)
    np.testing.assert_array_equal(codes, back.obs["louvain"].cat.codes.to_numpy())
    assert inp.meta["categories"] == ["B", "NK", "T"] == list(back.obs["louvain"].cat.categories)
    inp, batch = _labels(f"{path}#obs/batch")  # anndata left it numeric: so do we
    assert back.obs["batch"].dtype == np.int8 and "categories" not in inp.meta
    np.testing.assert_array_equal(batch, back.obs["batch"].to_numpy())
    inp, barcodes = _labels(f"{path}#obs/barcode", row_chunk=16)  # text: codes of sorted values
    text = pd.Categorical(back.obs["barcode"])
    np.testing.assert_array_equal(barcodes, text.codes)
    assert inp.meta["categories"] == list(text.categories)
    _, counts = _labels(f"{path}#obs/n_counts")
    np.testing.assert_array_equal(counts, back.obs["n_counts"].to_numpy())
    with pytest.raises(InputError, match=r"No column 'index'.*\['louvain', 'batch', 'barcode'"):
        _labels(f"{path}#obs/index")
    with pytest.raises(InputTypeError, match=r"#obs is a table of records"):
        open_input(f"{path}#obs")


def test_anndata_zarr_store_of_anndata_0_6_reads_as_anndata_reads_it(tmp_path, rng):
    """No anndata attributes at its root (obs and var say what it is); raw.X an h5sparse
    group; obs a compound array, its categories in uns."""
    import anndata as ad
    import zarr

    n, d, path = 30, 5, tmp_path / "old.zarr"
    raw = sp.random(n, d + 2, density=0.3, format="csr", random_state=5, dtype=np.float32)
    root = zarr.open_group(path, mode="w", zarr_format=2)
    root.create_array("X", data=rng.standard_normal((n, d)).astype(np.float32), chunks=(8, d))
    group = root.create_group("raw.X")
    group.attrs.update(h5sparse_format="csr", h5sparse_shape=[n, d + 2])
    for key in ("data", "indices", "indptr"):
        group.create_array(key, data=getattr(raw, key))
    root.create_group("uns").create_array("louvain_categories", data=np.array([b"a", b"b"]))
    obs = np.zeros(n, dtype=[("index", "S3"), ("louvain", "i1")])
    obs["index"], obs["louvain"] = [b"c%d" % i for i in range(n)], rng.integers(0, 2, n)
    var = np.zeros(d, dtype=[("index", "S3")])
    var["index"] = [b"g%d" % i for i in range(d)]
    for name, table in (("obs", obs), ("var", var)):  # as zarr 2 wrote them
        (path / name).mkdir()
        meta = {"zarr_format": 2, "shape": [len(table)], "chunks": [len(table)], "order": "C"}
        meta.update(dtype=[list(f) for f in table.dtype.descr], compressor=None)
        (path / name / ".zarray").write_text(json.dumps({**meta, "fill_value": None}))
        (path / name / "0").write_bytes(table.tobytes())
    back = _quietly(ad.read_zarr, path)
    inp, got = _read(str(path), row_chunk=8)
    assert inp.meta["format"] == "anndata-zarr"
    np.testing.assert_array_equal(got, back.X)
    inp, got = _read(f"{path}#raw/X", row_chunk=8)
    _has(inp.meta, format="anndata-zarr", sparse=True, stored_as="raw.X")
    np.testing.assert_array_equal(got, back.raw.X.toarray())
    inp, codes = _labels(f"{path}#obs/louvain", row_chunk=8)
    np.testing.assert_array_equal(codes, back.obs["louvain"].cat.codes.to_numpy())
    assert inp.meta["categories"] == ["a", "b"] and inp.meta["missing_chunks"] == 0
    with pytest.raises(InputError, match=re.escape("its matrices: ['X', 'raw/X']")):
        open_input(f"{path}#obsm/X_pca")


@pytest.mark.parametrize("name,zarr_format", [("o.h5ad", None), ("o2.zarr", 2), ("o3.zarr", 3)])
def test_obs_columns_open_as_labels(tmp_path, name, zarr_format):
    import anndata as ad
    import cloudpickle

    n, r = 50, np.random.default_rng(7)
    cell_type = r.choice(["B", "NK", "T"], n).astype(object)
    cell_type[[1, 3]] = None  # missing: code -1, as in pandas
    with _object_strings():
        obs = pd.DataFrame(
            {
                "cell_type": pd.Categorical(cell_type, categories=["B", "NK", "T"]),
                "stage": pd.Categorical(r.choice([3, 1, 2], n), ordered=True),
                "donor": np.array([f"d{i % 7}" for i in r.permutation(n)], dtype=object),
                "n_genes": r.integers(100, 900, n),
                "score": r.random(n),
                "doublet": r.random(n) < 0.2,
                "n_umis": pd.array(r.integers(0, 9, n), dtype="Int64"),
            },
            index=[f"c{i}" for i in range(n)],
        )
        obs.loc["c4", "n_umis"] = pd.NA
    path = tmp_path / name
    adata = _adata(np.ones((n, 2), np.float32), obs=obs)
    _write(adata, path, zarr_format, convert_strings_to_categoricals=False)
    back = ad.read_h5ad(path) if zarr_format is None else ad.read_zarr(path)
    for column in ("cell_type", "stage"):
        inp, codes = _labels(f"{path}#obs/{column}", row_chunk=16)
        np.testing.assert_array_equal(codes, back.obs[column].cat.codes.to_numpy())
        assert inp.meta["categories"] == list(back.obs[column].cat.categories)
        assert inp.meta["ordered"] is back.obs[column].cat.ordered
        assert inp.meta["encoding"] == "categorical"
    assert len(cloudpickle.dumps(dict(inp.array.dask))) < 20_000  # no data in the graph
    inp, donors = _labels(f"{path}#obs/donor", row_chunk=16)  # kept as text by the writer
    text = pd.Categorical(back.obs["donor"])
    assert inp.meta["encoding"] == "string-array"
    np.testing.assert_array_equal(donors, text.codes)
    assert inp.meta["categories"] == list(text.categories)
    for column in ("n_genes", "score", "doublet"):
        inp, got = _labels(f"{path}#obs/{column}", row_chunk=16)
        assert got.dtype == back.obs[column].dtype and "categories" not in inp.meta
        np.testing.assert_array_equal(got, back.obs[column].to_numpy())
    with pytest.raises(InputError, match=r"obs/n_umis has missing \(NA\) values at rows 4\."):
        _labels(f"{path}#obs/n_umis", row_chunk=16)
    with pytest.raises(
        InputTypeError,
        match=r"(?s)The input .*#obs/cell_type is a column of obs.*Fix: pass it as --labels"
        r".*\['X'\]",
    ):
        open_input(f"{path}#obs/cell_type")
    with pytest.raises(InputError, match=r"No column 'nope' .*\['cell_type', 'stage', 'donor'"):
        _labels(f"{path}#obs/nope")


def test_obs_of_anndata_0_7_codes_with_a_reference_to_their_categories(tmp_path):
    """The dataframe layout of anndata 0.7 (encoding-version 0.1.0): a categorical is its
    codes, whose ``categories`` attribute refers to a dataset in obs/__categories."""
    import anndata as ad
    import h5py

    path, n, text = tmp_path / "v07.h5ad", 6, h5py.special_dtype(vlen=str)
    with h5py.File(path, "w") as f:
        f.attrs.update({"encoding-type": "anndata", "encoding-version": "0.1.0"})
        f["X"] = np.ones((n, 2), np.float32)
        for name, size, order in (("obs", n, ["cell_type", "score"]), ("var", 2, [])):
            group = f.create_group(name)
            group.attrs.update({"encoding-type": "dataframe", "encoding-version": "0.1.0"})
            group.attrs["_index"] = "_index"
            group.attrs["column-order"] = np.array(order, dtype=object if order else float)
            group.create_dataset("_index", data=[f"{name}{i}" for i in range(size)], dtype=text)
        obs = f["obs"]
        obs.create_dataset("__categories/cell_type", data=["B", "T"], dtype=text)
        obs["cell_type"] = np.array([1, 0, 1, 1, -1, 0], dtype=np.int8)
        obs["cell_type"].attrs["categories"] = obs["__categories/cell_type"].ref
        obs["__categories/cell_type"].attrs["ordered"] = True
        obs["score"] = np.linspace(0, 1, n)
    back = _quietly(ad.read_h5ad, path)
    inp, codes = _labels(f"{path}#obs/cell_type")
    np.testing.assert_array_equal(codes, back.obs["cell_type"].cat.codes.to_numpy())
    assert inp.meta["categories"] == ["B", "T"] and inp.meta["ordered"] is True
    _, score = _labels(f"{path}#obs/score")
    np.testing.assert_array_equal(score, back.obs["score"].to_numpy())


def test_obs_column_shards_must_share_their_categories(tmp_path):
    def shard(i, values, categories):
        with _object_strings():
            obs = pd.DataFrame(
                {"cell_type": pd.Categorical(values, categories=categories)},
                index=[f"s{i}c{j}" for j in range(len(values))],
            )
        _write(_adata(np.ones((len(values), 2), np.float32), obs=obs), tmp_path / f"s-{i}.h5ad")

    shard(0, ["B", "T", "T"], ["B", "T"])
    shard(1, ["T", "B"], ["B", "T"])
    inp, codes = _labels(f"{tmp_path}/s-*.h5ad#obs/cell_type")
    _has(inp.meta, format="h5ad-shards", shards=2, categories=["B", "T"])
    np.testing.assert_array_equal(codes, [0, 1, 1, 1, 0])
    shard(2, ["NK"], ["B", "NK", "T"])
    with pytest.raises(
        InputError,
        match=r"(?s)code their column differently: .*s-2\.h5ad#obs/cell_type has the categories "
        r"\['B', 'NK', 'T'\].*Fix: write every shard with the same categories",
    ):
        _labels(f"{tmp_path}/s-*.h5ad#obs/cell_type")


def test_a_run_takes_its_labels_from_an_obs_column(client, prefect_api, tmp_path):
    """Supervised PCA of pbmc68k_reduced's X with its louvain clusters as the labels, both
    from the file: the run's labels are the codes anndata gives them."""
    import anndata as ad

    from dimred_dask import SupervisedPCA
    from dimred_dask.io import open_output
    from flows.embed import embed

    path = _pbmc68k_reduced()
    back = _quietly(ad.read_h5ad, path)
    out = str(tmp_path / "spca.zarr")
    labels = f"{path}#obs/louvain"
    m = embed(path, out, method="spca", params={"n_components": 2}, labels=labels)
    assert m["labels"] == labels and m["stages"]["fit"] == "computed"
    Y = open_output(out).read_array("embedding").astype(np.float64)
    ref = SupervisedPCA(2).fit(back.X, back.obs["louvain"].cat.codes.to_numpy())
    expected = ref.transform(back.X).astype(np.float64)
    np.testing.assert_allclose(Y * np.sign(np.sum(Y * expected, axis=0)), expected, atol=1e-3)


def test_csc_is_read_by_rows_and_refused_above_the_scan_limit(tmp_path, cells, monkeypatch):
    import dimred_dask.io.sparse as sparse

    csc = _adata(sp.csc_matrix(cells.X))
    _write(csc, tmp_path / "csc.h5ad")
    _write(csc, tmp_path / "csc.zarr", zarr_format=3)
    for path in ("csc.h5ad", "csc.zarr"):
        inp = open_input(str(tmp_path / path), row_chunk=70)
        assert inp.meta["layout"] == "csc"
        _sparse_equal(inp, cells.X)
    monkeypatch.setattr(sparse, "SLAB_ENTRIES", 97)  # many slabs: the scan crosses columns
    _sparse_equal(open_input(str(tmp_path / "csc.h5ad"), row_chunk=33), cells.X)
    monkeypatch.setattr(sparse, "SCAN_MAX_BYTES", 1000)
    with pytest.raises(
        InputError,
        match=r"(?s)stored by columns \(CSC\).*Fix: convert it to "
        r"CSR once.*tocsr",
    ):
        open_input(str(tmp_path / "csc.h5ad"))


@pytest.mark.parametrize("zarr_format", [2, 3])
def test_anndata_zarr_and_its_missing_chunks(tmp_path, cells, zarr_format):
    import anndata as ad

    path = tmp_path / f"cells-v{zarr_format}.zarr"
    _write(cells, path, zarr_format=zarr_format)
    back = ad.read_zarr(path)
    inp = open_input(str(path), row_chunk=64)
    assert inp.meta["format"] == "anndata-zarr" and inp.meta["zarr_format"] == zarr_format
    assert inp.meta["chunk_objects"] >= 3 and inp.meta["missing_chunks"] == 0
    _sparse_equal(inp, back.X)
    pca = open_input(f"{path}#obsm/X_pca")
    np.testing.assert_array_equal(pca.array.compute(scheduler="sync"), back.obsm["X_pca"])
    chunk = next(
        p
        for p in sorted((path / "X" / "data").rglob("*"))
        if p.is_file() and p.name not in ("zarr.json", ".zarray", ".zattrs")
    )
    chunk.unlink()
    with pytest.raises(InputError, match=r"incomplete: 1 of its \d+ chunk objects missing"):
        open_input(str(path))
    unchecked = open_input(str(path), check_chunks=False)  # a chunk lost after validation
    with pytest.raises(InputError, match="X/data"):
        _blocks(unchecked.array)


def test_hdf5_datasets_dense_sparse_and_1d(tmp_path, rng):
    import h5py

    X = rng.standard_normal((500, 7))
    with h5py.File(tmp_path / "d.h5", "w") as f:
        f.create_dataset("g/x", data=X, chunks=(64, 7), compression="gzip")
        f.create_dataset("y", data=np.arange(500, dtype=np.int16))
        f.create_dataset("names", data=np.array([b"a", b"b"]))
    inp = open_input(f"{tmp_path}/d.h5#g/x", row_chunk=100)
    _has(inp.meta, format="hdf5", sparse=False, stored_chunks=[64, 7])
    np.testing.assert_array_equal(inp.array.compute(scheduler="sync"), X)
    y = open_input(f"{tmp_path}/d.h5#y", allow_1d=True, as_float=True)
    np.testing.assert_array_equal(y.array.compute(scheduler="sync")[:, 0], np.arange(500.0))
    for uri, pattern in (
        (f"{tmp_path}/d.h5", r"(?s)name the dataset.*\['g/x', 'y'\].*#g/x"),
        (f"{tmp_path}/d.h5#g", r"HDF5 group, not a dataset.*\['x'\]"),
        (f"{tmp_path}/d.h5#zz", r"No dataset 'zz'.*\['g/x', 'y'\]"),
    ):
        with pytest.raises(InputError, match=pattern):
            open_input(uri)
    with pytest.raises(InputTypeError, match=r"names .*\|S1.*real numbers"):
        open_input(f"{tmp_path}/d.h5#names", allow_1d=True)


def test_damaged_hdf5_chunk_is_an_input_error_naming_it(tmp_path, cells):
    import h5py

    path = tmp_path / "z.h5ad"
    _write(cells, path, compression="gzip")
    with h5py.File(path, "r") as f:
        info = f["X/data"].id.get_chunk_info(0)
    with open(path, "r+b") as f:
        f.seek(info.byte_offset + 4)
        f.write(b"\xff" * 16)
    inp = open_input(str(path), row_chunk=100)
    with pytest.raises(
        InputError,
        match=r"(?s)Could not read entries .* of '/X/data' of "
        r".*z\.h5ad#X.*Fix: the file is damaged",
    ):
        _blocks(inp.array)


def test_npz_stored_deflated_csc_and_refusals(tmp_path, monkeypatch):
    import dimred_dask.io.npz as npz

    X = sp.random(300, 40, density=0.1, format="csr", random_state=2)
    sp.save_npz(tmp_path / "deflated.npz", X)
    sp.save_npz(tmp_path / "stored.npz", X, compressed=False)
    sp.save_npz(tmp_path / "csc.npz", X.tocsc(), compressed=False)
    for name, compressed in (("deflated", True), ("stored", False), ("csc", False)):
        inp = open_input(str(tmp_path / f"{name}.npz"), row_chunk=70)
        assert inp.meta["format"] == "npz" and inp.meta["compressed"] is compressed
        assert inp.meta["nnz"] == X.nnz
        _sparse_equal(inp, sp.load_npz(tmp_path / f"{name}.npz"))
    monkeypatch.setattr(npz, "SCAN_MAX_BYTES", 1000)
    with pytest.raises(InputError, match=r"(?s)compressed \(deflate.*compressed=False"):
        open_input(str(tmp_path / "deflated.npz"))
    open_input(str(tmp_path / "stored.npz"))  # read by byte range: no limit
    sp.save_npz(tmp_path / "coo.npz", X.tocoo())
    np.savez(tmp_path / "plain.npz", a=np.ones(3))
    for name, pattern in (("coo", "not a scipy.sparse .npz"), ("plain", r"members: \['a.npy'\]")):
        with pytest.raises(InputError, match=pattern):
            open_input(str(tmp_path / f"{name}.npz"))


def test_npy_shards_by_glob_and_folder_in_sorted_order(tmp_path, rng):
    parts = [rng.standard_normal((n, 6)).astype(np.float32) for n in (100, 57, 200)]
    (tmp_path / "sh").mkdir()
    for i, part in reversed(list(enumerate(parts))):
        np.save(tmp_path / "sh" / f"part-{i:02d}.npy", part)
    (tmp_path / "sh" / "_SUCCESS").write_text("")
    for uri in (f"{tmp_path}/sh", f"{tmp_path}/sh/part-*.npy"):
        inp = open_input(uri, row_chunk=90)
        assert inp.meta["format"] == "npy-shards" and inp.meta["shards"] == 3
        assert inp.array.chunks[0] == (90, 90, 90, 87)  # regular, across shard ends
        np.testing.assert_array_equal(inp.array.compute(scheduler="sync"), np.concatenate(parts))
    reader = inp.array.dask[(inp.array.name, 0, 0)]
    assert len(pickle.dumps(reader)) < 20_000  # the graph carries paths, never data
    np.save(tmp_path / "sh" / "part-03.npy", np.ones((5, 7), np.float32))
    with pytest.raises(
        InputError,
        match=r"(?s)shards of .* differ: .*part-03\.npy has 7 "
        r"columns.*part-00\.npy has 6 columns",
    ):
        open_input(f"{tmp_path}/sh")
    np.save(tmp_path / "sh" / "part-03.npy", np.ones((5, 6), np.float64))
    with pytest.raises(InputError, match=r"part-03\.npy has 6 columns of float64"):
        open_input(f"{tmp_path}/sh/part-*.npy")
    with pytest.raises(InputError, match="matches no file"):
        open_input(f"{tmp_path}/sh/nothing-*.npy")


def test_sparse_h5ad_shards_with_an_element(tmp_path, cells):
    for i, rows in enumerate((slice(0, 120), slice(120, 300))):
        _write(cells[rows].copy(), tmp_path / f"cells-{i}.h5ad")
    inp = open_input(f"{tmp_path}/cells-*.h5ad#layers/counts", row_chunk=50)
    _has(inp.meta, format="h5ad-shards", shards=2, sparse=True, element="layers/counts")
    assert inp.meta["nnz"] == cells.layers["counts"].nnz
    _sparse_equal(inp, cells.layers["counts"])


def _embeddings(rng, n=250, k=8):
    import pyarrow as pa

    emb = rng.standard_normal((n, k)).astype(np.float32)
    offsets = pa.array(np.arange(n + 1, dtype=np.int32) * k)
    return emb, pa.table(
        {
            "id": np.arange(n, dtype=np.int64),
            "embedding": pa.ListArray.from_arrays(offsets, pa.array(emb.ravel())),
            "fixed": pa.FixedSizeListArray.from_arrays(pa.array(emb.ravel().astype(np.float64)), k),
            "name": pa.array([f"c{i}" for i in range(n)]),
        }
    )


def test_parquet_list_columns(tmp_path, rng):
    import pyarrow.parquet as pq

    emb, table = _embeddings(rng)
    pq.write_table(table, tmp_path / "e.parquet", row_group_size=60)
    inp = open_input(str(tmp_path / "e.parquet"), columns=["embedding"], row_chunk=100)
    assert inp.meta["list_columns"] == {"embedding": 8} and inp.array.dtype == np.float32
    np.testing.assert_array_equal(inp.array.compute(scheduler="sync"), emb)
    both = open_input(str(tmp_path / "e.parquet"), columns=["id", "fixed"], row_chunk=64)
    expected = np.column_stack([np.arange(250.0), emb.astype(np.float64)])
    np.testing.assert_array_equal(both.array.compute(scheduler="sync"), expected)
    for name, values in (
        ("ragged", [[1.0, 2.0]] * 70 + [[1.0]] + [[1.0, 2.0]] * 29),
        ("null list", [[1.0, 2.0]] * 70 + [None] + [[1.0, 2.0]] * 29),
        ("null value", [[1.0, 2.0]] * 70 + [[1.0, None]] + [[1.0, 2.0]] * 29),
    ):
        import pyarrow as pa

        path = tmp_path / f"{name.replace(' ', '-')}.parquet"
        pq.write_table(pa.table({"embedding": pa.array(values)}), path, row_group_size=50)
        bad = open_input(str(path), columns=["embedding"])
        with pytest.raises(
            InputError,
            match=rf"(?s)'embedding' of the Parquet file .*{path.name}"
            r", row group 1 has 1 .*first at row 70",
        ):
            bad.array.compute(scheduler="sync")


def test_parquet_chunks_are_whole_row_groups(tmp_path, rng, monkeypatch):
    """Row groups larger than the planned chunk: opening reads none, chunks take whole row
    groups, each read once; a chunk that takes part of a row group does not hold all of it."""
    import pyarrow.parquet as pq

    from dimred_dask.io import base, read, tables

    emb, table = _embeddings(rng, n=600)
    folder = tmp_path / "emb"
    folder.mkdir()
    for i in range(3):
        pq.write_table(table.slice(200 * i, 200), folder / f"part-{i}.parquet", row_group_size=100)
    monkeypatch.setattr(
        read,
        "plan_row_chunk",
        lambda n, d, size, base=1: base_plan(n, d, size, base=base, target_bytes=40 * d * size),
    )  # 40 rows planned
    base_plan = base.plan_row_chunk
    reads, opened = [], tables._parquet_file

    def counting(handle):
        pf = opened(handle)
        whole = pf.read_row_group
        pf.read_row_group = lambda i, **kw: reads.append(i) or whole(i, **kw)
        return pf

    monkeypatch.setattr(tables, "_parquet_file", counting)
    inp = open_input(str(folder), columns=["fixed"])
    assert reads == []  # opening reads metadata only
    assert inp.meta["stored_chunks"] == [100, 8] and inp.array.chunks[0] == (100,) * 6
    np.testing.assert_array_equal(inp.array.compute(scheduler="sync"), emb)
    assert len(reads) == 6
    part = open_input(str(folder), columns=["fixed"], row_chunk=150)
    reader = next(v for v in part.array.dask.values() if isinstance(v, tables.ParquetRows))
    rows = reader[150:300]
    np.testing.assert_array_equal(rows, emb[150:300])
    assert rows.base is None


def test_bad_anndata_inputs_are_refused_by_name(tmp_path, cells):
    import anndata as ad
    import h5py

    with _object_strings():
        obs = pd.DataFrame(index=[f"c{i}" for i in range(5)])
    _write(_adata(None, obs=obs, obsm={"X_pca": np.ones((5, 2))}), tmp_path / "nox.h5ad")
    with pytest.raises(InputError, match=r"(?s)has no X.*\['obsm/X_pca'\].*#obsm/X_pca"):
        open_input(str(tmp_path / "nox.h5ad"))
    strings = _adata(np.array([["a", "b"], ["c", "d"]], dtype=object))
    _write(strings, tmp_path / "strings.h5ad")
    with pytest.raises(InputTypeError, match="real numbers"):
        open_input(str(tmp_path / "strings.h5ad"))
    with _object_strings():
        frame = cells.copy()
        frame.obsm["table"] = pd.DataFrame({"u": np.arange(300.0)}, index=cells.obs_names)
    _write(frame, tmp_path / "frame.h5ad")
    with h5py.File(tmp_path / "frame.h5ad", "r+") as f, _object_strings():
        del f["X"]
        ad.io.write_elem(f, "X", pd.DataFrame({"u": ["x"] * 300}, index=cells.obs_names))
    for element in ("", "#obsm/table"):
        with pytest.raises(
            InputTypeError,
            match=r"is a dataframe with columns \['u'\], not a "
            "numeric matrix",
        ):
            open_input(f"{tmp_path}/frame.h5ad{element}")
    _write(cells, tmp_path / "cells.zarr", zarr_format=3)
    for uri in (f"{tmp_path}/frame.h5ad#layers/nope", f"{tmp_path}/cells.zarr#obsm/nope"):
        with pytest.raises(
            InputError,
            match=r"No element '.*nope'.*\[('X', )?'obsm/X_pca', "
            r"'layers/counts', 'layers/dense'\]",
        ):
            open_input(uri)


def test_sparse_nan_and_inf_are_refused_naming_rows(tmp_path):
    dense = np.zeros((100, 10))
    dense[::3, 2] = 1.0
    dense[5, 4] = dense[6, 0] = np.nan  # rows 5 and 6 hold a NaN each, row 40 an inf
    dense[40, 9] = np.inf
    sp.save_npz(tmp_path / "nan.npz", sp.csr_matrix(dense), compressed=False)
    inp = open_input(str(tmp_path / "nan.npz"), row_chunk=30)
    with pytest.raises(
        InputError,
        match=r"(?s)found 2 NaN in rows 5-6 of .*nan\.npz.*Fix: "
        "impute or drop",
    ):
        _blocks(inp.array[:30])
    with pytest.raises(InputError, match=r"1 inf in row 40 "):
        _blocks(inp.array[30:60])


def test_sparse_row_chunks_are_planned_from_nnz(tmp_path, monkeypatch):
    import dimred_dask.io.base as base
    from dimred_dask.io.sparse import plan_sparse_rows

    X = sp.random(2000, 50, density=0.05, format="csr", random_state=4, dtype=np.float32)
    sp.save_npz(tmp_path / "x.npz", X, compressed=False)
    monkeypatch.setattr(base, "TARGET_CHUNK_BYTES", 8000)
    monkeypatch.setattr("dimred_dask.io.npz.TARGET_CHUNK_BYTES", 8000)
    inp = open_input(str(tmp_path / "x.npz"))
    rows = plan_sparse_rows(2000, X.nnz, 4 + 4, 8000)
    assert inp.array.chunks[0][0] == rows and 100 < rows < 2000
    _sparse_equal(inp, X)
    assert open_input(str(tmp_path / "x.npz"), row_chunk=333).array.chunks[0][0] == 333


# --- object storage: the same readers through a real S3-compatible server, read by the workers


@pytest.fixture
def bucket(s3_server):
    import boto3

    name = f"fmt-{os.urandom(4).hex()}"
    boto3.client("s3", endpoint_url=s3_server).create_bucket(Bucket=name)
    return name


def _s3fs():
    import fsspec

    return fsspec.filesystem("s3", client_kwargs={"endpoint_url": os.environ["AWS_ENDPOINT_URL"]})


def test_s3_h5ad_anndata_zarr_hdf5_npz(client, bucket, tmp_path, cells, rng):
    import h5py

    fs = _s3fs()
    _write(cells, tmp_path / "cells.h5ad")
    _write(cells, tmp_path / "cells.zarr", zarr_format=3)
    sp.save_npz(tmp_path / "x.npz", cells.X, compressed=False)
    X = rng.standard_normal((400, 9))
    with h5py.File(tmp_path / "d.h5", "w") as f:
        f.create_dataset("emb/x", data=X, chunks=(50, 9))
    for name in ("cells.h5ad", "x.npz", "d.h5"):
        fs.put(str(tmp_path / name), f"{bucket}/{name}")
    fs.put(str(tmp_path / "cells.zarr"), f"{bucket}/cells.zarr", recursive=True)
    for uri in (f"s3://{bucket}/cells.h5ad", f"s3://{bucket}/cells.zarr", f"s3://{bucket}/x.npz"):
        inp = open_input(uri, row_chunk=64)
        assert inp.meta["sparse"] and inp.meta["nnz"] == cells.X.nnz
        _sparse_equal(inp, cells.X, scheduler=client)
    counts = open_input(f"s3://{bucket}/cells.h5ad#layers/counts", row_chunk=128)
    _sparse_equal(counts, cells.layers["counts"], scheduler=client)
    pca = open_input(f"s3://{bucket}/cells.zarr#obsm/X_pca")
    np.testing.assert_array_equal(pca.array.compute(), cells.obsm["X_pca"])
    np.testing.assert_array_equal(
        open_input(f"s3://{bucket}/d.h5#emb/x", row_chunk=64).array.compute(), X
    )
    fs.rm(f"{bucket}/cells.zarr/X/indices/c/0")
    with pytest.raises(InputError, match=r"missing \(X/indices/c/0\)"):
        open_input(f"s3://{bucket}/cells.zarr")


def test_s3_parquet_glob_of_list_columns(client, bucket, tmp_path, rng):
    import pyarrow.parquet as pq

    fs = _s3fs()
    emb, table = _embeddings(rng, n=300)
    for i, (a, b) in enumerate(((0, 100), (100, 180), (180, 300))):
        pq.write_table(table.slice(a, b - a), tmp_path / "p.parquet", row_group_size=40)
        fs.put(str(tmp_path / "p.parquet"), f"{bucket}/emb/part-{i:03d}.parquet")
    inp = open_input(f"s3://{bucket}/emb/part-*.parquet", columns=["embedding"], row_chunk=64)
    assert inp.meta["shards"] == 3 and inp.meta["format"] == "parquet"
    np.testing.assert_array_equal(inp.array.compute(), emb)
    with pytest.raises(InputError, match="matches no file"):
        open_input(f"s3://{bucket}/emb/other-*.parquet")
