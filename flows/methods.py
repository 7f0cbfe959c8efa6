"""How the flow drives each method: parameter checks, fit, saving/loading the model, transform,
and the method's own metrics (the contract is `flows.adapter.MethodAdapter`).

Each method's parameters and defaults come from its spec (`dimred_dask.methods.specs`).
``METHODS`` holds PCA, kernel PCA and MDS, defined here; the neighbour embeddings keep their
adapters in their family's module (``flows/methods_neighbor.py``, a dict ``METHODS``) that is
merged below; every other method (supervised PCA, kernel supervised PCA, landmark MDS, the
graph methods and the semidefinite methods) gets its adapter from its spec
(`flows.adapter.adapter_from_spec`)."""

from __future__ import annotations

import warnings

import numpy as np

from dimred_dask import metrics
from dimred_dask._validation import check_n_components, is_dask
from dimred_dask.errors import DimredWarning, InputError, StageError
from dimred_dask.linalg import LANDMARK_METHODS, choose_eigen_solver
from dimred_dask.methods.kpca import KernelPCAModel, check_kpca_params, kernel_pca
from dimred_dask.methods.mds import MDSModel, classical_mds
from dimred_dask.methods.pca import SOLVERS, PCAModel, check_max_error, pca, plan_solver
from dimred_dask.methods.specs import SPECS
from dimred_dask.pairwise import check_metric
from dimred_dask.runs import RunModel, load_model  # noqa: F401 (a run's model, for new rows)

from .adapter import (
    MethodAdapter,
    adapter_from_spec,
    check_known,
    model_loader,
    training_embedding,
)

PCA_DEFAULTS = SPECS["pca"].flow_defaults()


def _pca_check(params: dict, shape: tuple) -> dict:
    p = check_known("pca", params, PCA_DEFAULTS)
    check_n_components(p["n_components"], shape[0], shape[1], method="PCA", allow_none=False)
    if p["solver"] not in SOLVERS:
        raise InputError(
            f"PCA solver must be one of {SOLVERS}; found {p['solver']!r}.",
            "pass --param solver=covariance (exact, one pass) or leave it out.",
        )
    if p["solver"] == "single-pass" and not isinstance(p["n_components"], int):
        raise InputError(
            f"PCA with solver='single-pass' needs n_components as an int; found "
            f"{p['n_components']!r} (a fraction of variance needs the whole "
            "spectrum).",
            "pass --n-components 50 (an int), or use --param solver=covariance.",
        )
    check_max_error(p["max_error"])
    if not isinstance(p["whiten"], bool):
        raise InputError(
            f"whiten must be true or false; found {p['whiten']!r}.", "pass --param whiten=true."
        )
    return p


# what a fit writes for the transform stage only, removed once the embedding is committed:
# single-pass PCA's row sketch
SCRATCH = "sketch"
ROW_SKETCH = f"{SCRATCH}/rows"


def _pca_fit(X, p: dict, run=None, **_):
    """Single-pass on a dask input writes its row sketch into the run's store in the same
    pass (the transform stage embeds from it instead of reading X again). Its accuracy
    warning is the fit stage's to report (run log, manifest, CLI), once."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "PCA single-pass", DimredWarning)
        return _pca_fit_quietly(X, p, run)


def _pca_fit_quietly(X, p: dict, run):
    if (
        run is None
        or not is_dask(X)
        or plan_solver(
            X,
            p["solver"],
            p["n_components"],
            max_error=p["max_error"],
            n_oversamples=p["n_oversamples"],
            n_iter=p["n_iter"],
        )[0]
        != "single-pass"
    ):
        return pca(X, **p)
    from dimred_dask.io import RunStore
    from dimred_dask.linalg.single_pass import sketch_width

    n, d = X.shape
    k = p["n_components"]
    width = sketch_width(k, p["n_oversamples"], n, d)
    rows = max(X.chunks[0])
    dtype = np.float32 if X.dtype == np.float32 else np.float64
    store = RunStore(run["output"])
    fresh = not store.exists()  # new: nothing but this run's lease is there yet
    target = store.create_array(
        ROW_SKETCH, (n, width), (rows, width), dtype, compressors=None
    )  # floats: no gain
    try:
        model = pca(X, row_sketch=target, **p)
    except BaseException:  # bad values found by the pass, a lost worker, Ctrl-C: the store
        store.remove(SCRATCH)  # is left as it was before the fit
        if fresh:
            store.remove("zarr.json")
        raise
    if model.solver != "single-pass":  # auto refitted exactly: the sketch is not needed
        store.remove(SCRATCH)
        return model
    model.info["row_sketch"] = {
        "array": ROW_SKETCH,
        "shape": [n, width],
        "chunks": [rows, width],
        "dtype": np.dtype(dtype).name,
        "stored_chunks": int(target.nchunks),
    }
    return model


def _pca_load(store) -> PCAModel:
    model = PCAModel.from_arrays(store.read_group("model"), store.read_attrs("model"))
    if model.info.get("row_sketch"):  # a handle on the stored row sketch, not its data
        model.sketch["store"] = store
    return model


def _pca_transform(model: PCAModel, X):
    """The embedding: from the stored row sketch for a single-pass fit (no read of X), else
    X's projection."""
    info = model.info.get("row_sketch")
    if not info or model.sketch is None or "store" not in (model.sketch or {}):
        return model.transform(X)
    from dimred_dask.io import open_input

    store = model.sketch["store"]
    stored = store.chunk_count(info["array"])
    if stored != info["stored_chunks"] or tuple(X.shape[:1]) != (info["shape"][0],):
        raise StageError(
            f"Stage 'transform': the single-pass fit's row sketch ({info['array']}) has "
            f"{stored} of its {info['stored_chunks']} chunks in the store; it was changed "
            "after the fit was committed.",
            "re-run with --overwrite to fit again.",
        )
    # the input's read path: a local store's raw chunks from their files, else through zarr;
    # an absent chunk refused either way
    rows = open_input(
        store.array_url(info["array"]),
        storage_options=store.location.storage_options,
        row_chunk=int(info["chunks"][0]),
        role="single-pass row sketch",
        check_chunks=False,
    ).array
    return model.embed_row_sketch(rows)


def _pca_summary(model: PCAModel) -> dict:
    extra = {k: model.info[k] for k in ("sketch", "row_sketch", "solver_choice") if k in model.info}
    return {
        "n_components": model.n_components,
        "solver": model.solver,
        "passes": model.passes,
        "noise_variance": model.noise_variance,
        "convergence": model.convergence,
        **extra,
        **metrics.explained_variance_summary(
            model.explained_variance, model.explained_variance_ratio
        ),
    }


def _pca_sample_metrics(model: PCAModel, Xs, Ys: np.ndarray) -> dict:
    """Xs dense or sparse; reconstructed a block of rows at a time."""
    return {
        "reconstruction_error": metrics.reconstruction_error(
            Xs, lambda rows: model.inverse_transform(Ys[rows]), model.mean
        )
    }


KPCA_DEFAULTS = SPECS["kpca"].flow_defaults()


def _kpca_check(params: dict, shape: tuple) -> dict:
    p = check_known("kpca", params, KPCA_DEFAULTS)
    n, d = shape
    if (
        p["solver"] in ("auto", "nystrom")
        and isinstance(p["n_landmarks"], int)
        and p["n_landmarks"] > n
        and "n_landmarks" not in params
    ):
        p["n_landmarks"] = n  # the default, on data smaller than it
    k, solver, kern = check_kpca_params(
        n,
        d,
        n_components=p["n_components"],
        solver=p["solver"],
        n_landmarks=p["n_landmarks"],
        kernel_params={q: p[q] for q in ("kernel", "gamma", "width", "degree", "coef0")},
    )
    if p["landmarks"] not in LANDMARK_METHODS:
        raise InputError(
            f"landmarks must be one of {LANDMARK_METHODS}; found {p['landmarks']!r}.",
            "pass --param landmarks=auto.",
        )
    return {**p, "solver": solver}


def _kpca_matrix(p: dict, shape: tuple):
    if p["solver"] not in ("randomized", "lanczos"):
        return None  # dense holds K in memory once; Nyström never forms it
    return {"kind": "kernel", **{q: p[q] for q in ("kernel", "gamma", "width", "degree", "coef0")}}


def _kpca_fit(X, p: dict, matrix=None, **_):
    return kernel_pca(X, kernel_matrix=matrix, **p)


def _kpca_transform(model: KernelPCAModel, X):
    if model.training_embedding() is None:  # Nyström on the cluster's passes: one more pass
        return model.transform(X)
    return training_embedding(model.training_embedding(), X)  # already known


def _eigen_summary(model) -> dict:
    lam = np.asarray(model.eigenvalues, dtype=np.float64)
    info = {k: v for k, v in model.scalars().items() if k != "n_samples"}
    return {
        "n_components": int(lam.size),
        "eigenvalues": lam.tolist(),
        **info,
        "convergence": model.convergence,
    }


MDS_DEFAULTS = SPECS["mds"].flow_defaults()


def _mds_check(params: dict, shape: tuple) -> dict:
    p = check_known("mds", params, MDS_DEFAULTS)
    n, d = shape
    if p["metric"] == "precomputed":
        if n != d:
            raise InputError(
                f"MDS with metric=precomputed needs a square n x n distance matrix "
                f"as input; found shape ({n}, {d}).",
                "pass the distance matrix itself, or the data with a metric such "
                "as --param metric=euclidean.",
            )
    else:
        check_metric(p["metric"], p["p"])
    if not isinstance(p["n_components"], int) or not 1 <= p["n_components"] < n:
        raise InputError(
            f"MDS needs 1 <= n_components < n_samples = {n}; found {p['n_components']!r}.",
            f"pass an n_components below {n}.",
        )
    p["solver"] = choose_eigen_solver(p["solver"], n)
    return p


def _mds_matrix(p: dict, shape: tuple):
    if p["metric"] == "precomputed" or p["solver"] == "dense":
        return None  # the input is the matrix, or it is held in memory once
    return {"kind": "distance", "metric": p["metric"], "p": p["p"]}


def _mds_fit(X, p: dict, matrix=None, **_):
    if matrix is None:
        return classical_mds(X, **p)
    # the distance matrix from the kernel stage: MDS of it, with the training rows kept so
    # that new points can be placed by triangulation
    model = classical_mds(matrix, **{**p, "metric": "precomputed", "p": 2.0})
    return model


def _mds_transform(model, X):
    return training_embedding(model.embedding, X)  # part of the model


METHODS = {
    "pca": MethodAdapter(
        name="pca",
        defaults=PCA_DEFAULTS,
        check=_pca_check,
        fit=_pca_fit,
        load=_pca_load,
        transform=_pca_transform,
        summary=_pca_summary,
        sample_metrics=_pca_sample_metrics,
        run_context=True,
    ),
    "kpca": MethodAdapter(
        name="kpca",
        defaults=KPCA_DEFAULTS,
        check=_kpca_check,
        fit=_kpca_fit,
        load=model_loader(KernelPCAModel),
        transform=_kpca_transform,
        summary=_eigen_summary,
        matrix=_kpca_matrix,
    ),
    "mds": MethodAdapter(
        name="mds",
        defaults=MDS_DEFAULTS,
        check=_mds_check,
        fit=_mds_fit,
        load=model_loader(MDSModel),
        transform=_mds_transform,
        matrix=_mds_matrix,
    ),
}

# the neighbour embeddings' adapters (the kNN graph in the run store, checkpoints, the
# distributed optimiser)
from .methods_neighbor import METHODS as _NEIGHBOR  # noqa: E402

METHODS.update(_NEIGHBOR)
# every other method: its adapter from its spec (its model and its parameter checks)
for _name, _spec in SPECS.items():
    if _name not in METHODS:
        METHODS[_name] = adapter_from_spec(_spec)


def get_method(name: str) -> MethodAdapter:
    try:
        return METHODS[name]
    except KeyError:
        raise InputError(
            f"Unknown method {name!r}; available: {sorted(METHODS)}.",
            f"pass --method with one of {', '.join(sorted(METHODS))}.",
        ) from None
