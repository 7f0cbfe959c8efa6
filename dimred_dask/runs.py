"""A finished run's model, read back from its run store to place new rows: `load_model`.

What a run keeps, and what it refers to (docs/operations.md, "Placing new rows"):

- the methods that learn a map (PCA, kernel and supervised PCA, classical and landmark MDS,
  Isomap, LLE, Laplacian eigenmaps, MVU, landmark MVU, action respecting embedding) keep
  their model's arrays in ``model/``; those with a row per training row stay in the store
  and are read by the rows a block of new rows needs (`STORED_ARRAYS`);
- t-SNE, UMAP and SNE keep their embedding (``model/embedding_0``) and their setting; the
  training rows they place new rows against are not copied: the model refers to the run's
  input by its location and content fingerprint (for a chain, to the reduced rows its first
  step wrote, inside the store), and each process that places rows reads them once
  (`Reference`). Fitted on a sample, the model places against that sample, found again from
  its recorded size and seed;
- spectral clustering keeps its embedding, its k-means centres and its labels: a new row's
  position is the weighted mean of its nearest training rows' and its cluster the nearest
  centre's.

A reference whose rows changed or vanished since the run is refused (`InputChangedError`,
`InputError`) before anything is placed.
"""

from __future__ import annotations

import dataclasses
import threading
from dataclasses import dataclass

import numpy as np

from .errors import InputChangedError, InputError
from .io import RunStore, array_fingerprint, open_input, open_output

__all__ = [
    "load_model",
    "RunModel",
    "Reference",
    "STORED_ARRAYS",
    "NEIGHBOUR_METHODS",
    "REFERRING_METHODS",
    "placing_methods",
    "MODEL_FORMAT",
    "training_reference",
]

# A model's arrays with a row per training row: left in the run store when a model is loaded,
# read by the rows a transform needs (on the workers for dask input), so loading a model costs
# the size of its small arrays, never the training data's.
STORED_ARRAYS = frozenset(
    {"X_fit_", "embedding_", "reference_", "alphas_", "proj_", "mds_embedding_", "mds_proj_"}
)  # Isomap's MDS of the geodesics
NEIGHBOUR_METHODS = ("tsne", "umap", "sne")
# the methods whose models place against the training rows, which they refer to (`Reference`)
REFERRING_METHODS = (*NEIGHBOUR_METHODS, "spectral")


def placing_methods() -> tuple:
    """Every method whose model places new rows: those whose spec names a model (all
    seventeen); `load_model` refuses anything else (a placement's own store) naming them."""
    from .methods.specs import SPECS

    return tuple(name for name, spec in SPECS.items() if spec.model is not None)


# the layout of what a run keeps for placing; a run store of a later layout is refused
MODEL_FORMAT = 1
DRIFT_NEIGHBOURS = 5  # a row's drift: its mean distance to this many nearest training rows


# --------------------------------------------------------------------------- reference rows

_CACHE: dict = {}  # {Reference.key: (rows, embedding)} in this process (one at a time)
_CACHE_LOCK = threading.Lock()


@dataclass(frozen=True)
class Reference:
    """The training rows a model places new rows against, and their embedding, by location:
    small to pickle, each process that places rows reads them once (`rows`).

    ``uri`` / ``columns`` / ``row_chunk``: the rows as the run read them; ``digest`` / ``meta``:
    their content fingerprint and the metadata folded into it (None for rows inside the run
    store, checked by ``stored_chunks`` instead); ``embedding``: the stored array of their
    positions; ``sample``: (n, size, seed) of a fit on a sample, else None.
    """

    uri: str
    columns: tuple | None
    row_chunk: int | None
    digest: str | None
    meta: dict | None
    embedding: str
    storage_options: dict | None = None
    sample: tuple | None = None
    stored_chunks: int | None = None

    @property
    def key(self) -> tuple:
        return (self.uri, self.digest, self.stored_chunks, self.sample, self.embedding)

    def _open(self, row_chunk=None, check_chunks: bool = False):
        return open_input(
            self.uri,
            columns=list(self.columns) if self.columns else None,
            storage_options=self.storage_options,
            row_chunk=row_chunk,
            as_float=True,
            check_chunks=check_chunks,
            role="training rows",
        )

    def verify(self) -> None:
        """Refuse rows that vanished or changed since the run: `InputError` when they cannot
        be opened, `InputChangedError` when their fingerprint (or, inside the run store, their
        chunk count) differs."""
        fix = (
            "place new rows with a run fitted on the rows as they are now (run the fit "
            "again), or restore the training rows the model refers to."
        )
        try:  # rows in the run store: every chunk listed (an absent one is refused)
            inp = self._open(self.row_chunk, check_chunks=self.digest is None)
        except InputError as exc:
            raise InputError(
                f"The model's training rows {self.uri} cannot be read any more: {exc.problem}",
                fix,
            ) from None
        if self.digest is None:
            found = (inp.meta or {}).get("chunk_objects")
            if self.stored_chunks is not None and found != self.stored_chunks:
                raise InputChangedError(
                    f"The model's training rows {self.uri} changed: {found} chunks stored, "
                    f"{self.stored_chunks} when the run committed them.",
                    fix,
                )
            return
        now = array_fingerprint(inp.array, {"source": self.meta})["digest"]
        if now != self.digest:
            raise InputChangedError(
                f"The model's training rows {self.uri} changed since the run: their content "
                f"fingerprint is {now}, the run's was {self.digest}.",
                fix,
            )

    def rows(self) -> tuple[np.ndarray, np.ndarray]:
        """(training rows float64, their embedding), read once per process and kept while
        this is the reference being placed against."""
        with _CACHE_LOCK:
            found = _CACHE.get(self.key)
            if found is None:
                X = np.asarray(self._open().array.compute(scheduler="sync"), dtype=np.float64)
                Y = np.asarray(
                    open_input(self.embedding, storage_options=self.storage_options).array.compute(
                        scheduler="sync"
                    ),
                    dtype=np.float64,
                )
                if self.sample is not None:
                    from .methods._neighbor_runs import fit_sample_rows

                    picked = fit_sample_rows(*self.sample)
                    X, Y = X[picked], Y[picked]
                _CACHE.clear()
                _CACHE[self.key] = found = (np.ascontiguousarray(X), np.ascontiguousarray(Y))
        return found

    @property
    def n_features(self) -> int:
        return int(self._open().shape[1])

    def nearest_distance(self, X_new, k: int = DRIFT_NEIGHBOURS) -> np.ndarray:
        """Each new row's mean distance to its ``k`` nearest training rows."""
        from .graphs.query import reference_topk

        X_ref, _ = self.rows()
        k = int(min(k, X_ref.shape[0]))
        _, dist = reference_topk(np.asarray(X_new, np.float64), X_ref, k, key=self.key)
        return dist.mean(axis=1)

    def own_distances(self, size: int = 2000, seed: int = 0) -> np.ndarray:
        """The same figure for ``size`` training rows against the others (themselves left
        out): the baseline a new row's drift is judged against."""
        from .graphs.query import reference_topk

        X_ref, _ = self.rows()
        n = X_ref.shape[0]
        pick = np.sort(np.random.default_rng(seed).choice(n, size=min(size, n), replace=False))
        k = int(min(DRIFT_NEIGHBOURS, n - 1))
        _, dist = reference_topk(X_ref[pick], X_ref, k + 1, key=self.key)
        return dist[:, 1:].mean(axis=1)


# --------------------------------------------------------------------------- placing maps


class NeighbourMap:
    """A t-SNE, UMAP or SNE run's map, placing new rows against its `Reference` as the
    estimators' ``transform`` does (openTSNE's and umap-learn's behaviour): NumPy in, NumPy
    out; dask in, a lazy dask array out, one task per row chunk, each reading the reference
    once per process."""

    def __init__(self, method: str, setting: dict, reference: Reference):
        self.method, self.setting, self.reference = method, dict(setting), reference

    def transform(self, X):
        from ._validation import is_dask

        if not is_dask(X):
            return _place(np.asarray(X), self.method, self.setting, self.reference)
        X = X if X.numblocks[1] == 1 else X.rechunk({1: -1})
        d = int(self.setting.get("n_components", 2))
        return X.map_blocks(
            _place_block,
            self.method,
            self.setting,
            self.reference,
            chunks=(X.chunks[0], (d,)),
            dtype=X.dtype,
        )


class SpectralMap:
    """A spectral clustering run's map: new rows' positions in its spectral embedding and
    their clusters (`methods.spectral_clustering.place_spectral_rows`). ``transform`` gives the
    positions, ``predict`` the clusters."""

    def __init__(self, reference: Reference, centres, n_neighbors: int, metric: str):
        self.reference, self.centres = reference, np.asarray(centres, np.float64)
        self.n_neighbors, self.metric = int(n_neighbors), metric

    def _rows(self, X, part: int):
        from .methods.spectral_clustering import place_spectral_rows

        X_ref, Y_ref = self.reference.rows()
        out = place_spectral_rows(
            X, X_ref, Y_ref, self.centres, self.n_neighbors, self.metric, self.reference.key
        )
        return out[part].astype(np.float64 if part == 0 else np.int64)

    def transform(self, X):
        return self._lazy(X, 0, self.centres.shape[1])

    def predict(self, X):
        return self._lazy(X, 1, None)

    def _lazy(self, X, part: int, d):
        from ._validation import is_dask

        if not is_dask(X):
            return self._rows(np.asarray(X), part)
        X = X if X.numblocks[1] == 1 else X.rechunk({1: -1})
        if d is None:
            return X.map_blocks(
                lambda x: self._rows(x, 1), drop_axis=1, chunks=(X.chunks[0],), dtype=np.int64
            )
        return X.map_blocks(
            lambda x: self._rows(x, 0).astype(x.dtype), chunks=(X.chunks[0], (d,)), dtype=X.dtype
        )


def _place(X, method: str, setting: dict, reference: Reference):
    from .methods._tsne_transform import (
        TRANSFORM_DEFAULTS,
        reference_grid,
        sne_place_rows,
    )
    from .methods._tsne_transform import (
        place_rows as tsne_rows,
    )
    from .methods._umap_transform import place_rows as umap_rows

    X_ref, Y_ref = reference.rows()
    if method == "umap":
        return umap_rows(X, X_ref, np.asarray(Y_ref, np.float32), setting, key=reference.key)
    opts = dict(TRANSFORM_DEFAULTS)
    if method == "sne":
        return sne_place_rows(X, X_ref, Y_ref, setting["metric"], opts, key=reference.key)
    grid = _grid(reference, Y_ref, setting, reference_grid)
    return tsne_rows(X, X_ref, Y_ref, grid, setting["metric"], opts, key=reference.key)


_GRIDS: dict = {}


def _grid(reference, Y_ref, setting, reference_grid):
    """t-SNE's interpolation grid of the training embedding, once per process."""
    with _CACHE_LOCK:
        if reference.key not in _GRIDS:
            _GRIDS.clear()
            _GRIDS[reference.key] = reference_grid(
                Y_ref,
                "auto",
                setting.get("n_interpolation_points", 3),
                setting.get("min_num_intervals"),
                setting.get("ints_in_interval", 1.0),
            )
        return _GRIDS[reference.key]


def _place_block(x, method, setting, reference, block_info=None):
    from .methods._base import refuse_nonfinite_block

    refuse_nonfinite_block(x, f"{method.upper()} transform", block_info)
    return _place(x, method, setting, reference).astype(x.dtype)


# --------------------------------------------------------------------------- loading


class RunModel:
    """A finished run's model (`load_model`): ``transform`` checks new rows as the
    estimators do (a 2-D finite float array of the training rows' columns) before placing
    them; every other attribute is the model's. A chain's model places through every step
    (``steps``: the step models, first to last)."""

    def __init__(self, method: str, model, n_features: int | None, steps: list | None = None):
        self.method, self.model, self.n_features = method, model, n_features
        self.steps = steps or [model]

    def __getattr__(self, name):
        return getattr(self.model, name)

    def __repr__(self) -> str:
        return f"RunModel({self.method!r}, {type(self.model).__name__})"

    def check(self, X):
        """X as the model takes it, or `InputError` (wrong columns, non-finite values)."""
        from ._validation import check_array
        from .methods import accepts_sparse

        first = self.method.split("+")[0]
        X = check_array(
            X,
            method=self.method.upper(),
            where="X",
            min_samples=1,
            accept_sparse=accepts_sparse(first),
        )
        if self.n_features is not None and X.shape[1] != self.n_features:
            raise InputError(
                f"The {self.method.upper()} model was fitted on {self.n_features} "
                f"columns; X has {X.shape[1]}.",
                "pass rows with the training data's columns, in its order.",
            )
        return X

    def reduce(self, X):
        """X through every step but the last (a chain's PCA), as the last step takes it."""
        for step in self.steps[:-1]:
            X = step.transform(X)
        return X

    def transform(self, X):
        """Place the rows of X (NumPy, SciPy sparse where the method takes it, or dask for a
        lazy result computed where it runs)."""
        return self.steps[-1].transform(self.reduce(self.check(X)))


def load_model(run, *, storage_options: dict | None = None, verify: bool = True) -> RunModel:
    """The fitted model of a finished run, ready to place new rows (``transform``).

    Parameters
    ----------
    run : str, os.PathLike or Location
        The run's output (a local folder, ``file://`` or ``s3://``), as given to
        ``dimred-dask run --output``; a chain's places through each of its steps.
    storage_options : dict, optional
        fsspec options for object storage (endpoint, credentials).
    verify : bool, default True
        Check that the training rows a t-SNE, UMAP, SNE or spectral clustering model refers
        to are still those the run read (their content fingerprint).

    Returns
    -------
    RunModel
        The model (attribute ``model``, the last step's), whose ``transform`` checks new rows
        first. Arrays with a row per training row stay in the run store, or where the run's
        input is, and are read by the process that places each block.

    Raises
    ------
    StoreError, UncommittedOutputError
        Not a run store, or its run did not finish.
    InputError
        The method places no new rows, the run store was written in a later layout, or the
        training rows the model refers to vanished.
    InputChangedError
        The training rows the model refers to changed since the run.
    """
    store = open_output(run, storage_options=storage_options)
    manifest = store.read_json("manifest.json")
    if manifest.get("kind") == "placement":
        raise InputError(
            f"{store.url} holds rows placed on the map of {manifest.get('model')}, not a "
            "fitted run: it has no model of its own to place rows with.",
            f"give the run that fitted the map ({manifest.get('model')}) as the model; "
            f"methods whose runs place new rows: {', '.join(placing_methods())}.",
        )
    chain = manifest.get("chain")
    if not chain:
        model = _step_model(store, manifest, manifest["method"], verify, None)
        return RunModel(manifest["method"], model, _n_features(model, manifest))
    first_store = RunStore(store.location.child(f"steps/{chain['steps'][0]}"))
    first_manifest = first_store.read_json("manifest.json")
    first = _step_model(first_store, first_manifest, chain["steps"][0], verify, None)
    inner = (first_store, "embedding")
    last = _step_model(store, manifest, chain["steps"][-1], verify, inner)
    return RunModel(manifest["method"], last, _n_features(first, first_manifest), [first, last])


def _step_model(store: RunStore, manifest: dict, method: str, verify: bool, inner):
    """One step's model; ``inner``: (store, array) of a chain's reduced rows, its input."""
    fmt = manifest.get("model_format", 1)
    if fmt > MODEL_FORMAT:
        raise InputError(
            f"The run at {store.url} keeps its model in layout {fmt}; this version of "
            f"dimred-dask reads layout {MODEL_FORMAT} and older.",
            "place its rows with the dimred-dask version that wrote it "
            f"({(manifest.get('versions') or {}).get('dimred-dask', 'a later one')}) or newer.",
        )
    if method not in placing_methods():
        raise InputError(
            f"The {method} run at {store.url} has no model that places new rows.",
            f"methods that place new rows: {', '.join(placing_methods())}.",
        )
    attrs = store.read_attrs("model")
    if method in NEIGHBOUR_METHODS:
        from .methods._neighbor_runs import EmbeddingSet

        found = EmbeddingSet.from_arrays(store.read_group("model"), attrs)
        info = (found.info or [{}])[0] or {}
        sample = info.get("fit_sample")
        reference = training_reference(store, manifest, "model/embedding_0", inner, verify, sample)
        return NeighbourMap(method, found.settings[0], reference)
    if method == "spectral":
        centres = store.read_array("model/centres_")
        reference = training_reference(store, manifest, "model/embedding_", inner, verify, None)
        params = manifest.get("params") or {}
        params = params.get(method, params) if manifest.get("chain") else params
        return SpectralMap(
            reference, centres, params.get("n_neighbors", 10), params.get("metric", "euclidean")
        )
    from .methods.specs import SPECS

    cls = SPECS[method].model
    model = cls.from_arrays(store.read_group("model", lazy=STORED_ARRAYS), attrs)
    if not hasattr(model, "transform") or getattr(model, "X_fit", True) is None:
        raise InputError(
            f"The {method} run at {store.url} keeps no training rows (written before they "
            "were kept in the run store); its model places no new rows.",
            "run the fit again with this version.",
        )
    return model


def training_reference(store, manifest, embedding, inner, verify, sample) -> Reference:
    """The training rows of a run's step and its stored embedding array ``embedding``, as a
    `Reference` (see the module doc): its input by location and fingerprint, or (``inner``:
    (store, array)) a chain's reduced rows inside the run store; ``sample``: a fit sample's
    record (``rows``, ``of``, ``seed``); ``verify``: check the rows now."""
    where = store.location
    if inner is not None:  # a chain's final step: the reduced rows its first step wrote
        step_store, name = inner
        marker = step_store.stage_marker("transform") or {}
        ref = Reference(
            uri=step_store.array_url(name),
            columns=None,
            row_chunk=None,
            digest=None,
            meta=None,
            embedding=str(where.child(embedding)),
            storage_options=where.storage_options or None,
            stored_chunks=(marker.get("info") or {}).get("stored_chunks"),
        )
    else:
        if not manifest.get("input") or not manifest.get("input_fingerprint"):
            raise InputError(
                f"The {manifest.get('method')} run at {store.url} does not name the rows it "
                "was fitted on (its manifest has no input and fingerprint); its model "
                "keeps its embeddings only and places no new rows.",
                "run the fit again with this version: its model then refers to its input.",
            )
        columns = manifest.get("columns") or (manifest.get("input_meta") or {}).get("columns")
        ref = Reference(
            uri=manifest["input"],
            columns=tuple(columns) if columns else None,
            row_chunk=(manifest.get("chunking") or {}).get("row_chunk"),
            digest=manifest["input_fingerprint"]["digest"],
            meta=manifest.get("input_meta"),
            embedding=str(where.child(embedding)),
            storage_options=where.storage_options or None,
        )
    if sample:
        ref = dataclasses.replace(ref, sample=(sample["of"], sample["rows"], sample["seed"]))
    if verify:
        ref.verify()
    return ref


def _n_features(model, manifest: dict) -> int | None:
    """The number of columns the model's transform takes (None when it cannot tell)."""
    shape = (manifest.get("input_meta") or {}).get("shape")
    if shape and len(shape) == 2:
        return int(shape[1])
    for name in ("n_features_in", "X_fit", "mean", "landmarks", "components"):
        value = getattr(model, name, None)
        if isinstance(value, (int, np.integer)):
            return int(value)
        dims = getattr(value, "shape", None)
        if dims:
            return int(dims[-1] if name in ("X_fit", "landmarks", "components") else dims[0])
    return None
