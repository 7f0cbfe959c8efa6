"""Adapters of the neighbour-embedding methods: t-SNE (``tsne``), UMAP (``umap``), SNE
(``sne``). Each reads the shared kNN graph (``graph=`` from the knn stage), runs its
embeddings as one Dask task each (a list of values of a sweepable parameter, e.g.
``--param perplexity=[10,30]`` or ``--param random_state=[0,1,2]``, makes one embedding per
setting, in parallel on the workers), and lists every embedding in the manifest with its
parameters, loss (KL / cross-entropy) and trustworthiness on a sample.

Checkpoints: every ``checkpoint_every`` iterations an optimiser writes its state to the run's
store (``checkpoints/<fit fingerprint>-<index>/``, from the worker, through `StoreCheckpoint`);
a fit that is run again (a crash, a killed worker whose task Dask reruns, a killed flow run
again) resumes each embedding from its last checkpoint and ends exactly where an uninterrupted
run ends. The checkpoints are removed once the model is saved. Progress (iteration and loss) is
relayed from the workers to the fit stage's Prefect progress artifact.

Each checkpoint written is announced to the observer ``DIMRED_HOOK`` names, if any
(`flows.stages.notify`, event ``"checkpoint"``).
"""

from __future__ import annotations

import warnings

import numpy as np

from dimred_dask import metrics
from dimred_dask._progress import report
from dimred_dask.errors import DimredWarning, InputError
from dimred_dask.graphs.request import GraphRequest
from dimred_dask.io import RunStore
from dimred_dask.linalg import take_rows
from dimred_dask.methods._neighbor_runs import EmbeddingSet
from dimred_dask.methods.sne import SNE_SWEEPABLE, check_sne_params, sne_sweep
from dimred_dask.methods.specs import SPECS
from dimred_dask.methods.tsne import TSNE_SWEEPABLE, check_tsne_params, tsne_sweep
from dimred_dask.methods.umap import UMAP_SWEEPABLE, check_umap_params, umap_sweep

from .adapter import MethodAdapter, model_loader
from .stages import notify

__all__ = ["METHODS", "StoreCheckpoint", "CHECKPOINTS"]

CHECKPOINTS = "checkpoints"
TRUST_SAMPLE = 2000  # rows of the per-embedding trustworthiness (k = TRUST_K), seed 0
TRUST_K = 10
# how each embedding was optimised (one worker or row blocks over all of them), for the manifest
_OPTIMIZER_KEYS = (
    "optimizer",
    "optimizer_reason",
    "blocks",
    "blocks_per_worker",
    "bytes_per_iteration",
    "seconds_per_iteration",
    "recoveries",
)
STATE_ARRAYS = ("embedding", "update", "gains", "next_sample", "next_negative")


# --------------------------------------------------------------------------- checkpoints


def _task_cancelled() -> bool:
    """Whether this code runs in a Dask task that nobody wants any more (its client went
    away, e.g. a killed flow): such an orphan stops at its next checkpoint."""
    try:
        from distributed import get_worker

        worker = get_worker()
        ts = worker.state.tasks.get(worker.get_current_task())
        return ts is None or ts.state in ("cancelled", "released", "forgotten")
    except Exception:
        return False


class StoreCheckpoint:
    """One embedding's checkpoints in a run's store (picklable: a URL and a prefix)."""

    def __init__(self, output: str, prefix: str, every: int = 1):
        self.output, self.prefix, self.every = output, prefix, max(1, int(every))

    def save(self, state: dict) -> None:
        if _task_cancelled():
            raise InterruptedError("the run that asked for this embedding is gone")
        store = RunStore(self.output)
        it = int(state["iteration"])
        names = [k for k in STATE_ARRAYS if k in state]
        for name in names:
            store.write_array(f"{self.prefix}/{it}/{name}", np.asarray(state[name]))
        meta = {
            "iteration": it,
            "arrays": names,
            "rng": state.get("rng"),
            "loss": state.get("loss"),
        }
        store.write_json(f"{self.prefix}/latest.json", meta)  # last: the state is complete
        for entry in store.fs.ls(store._path(self.prefix), detail=False):
            step = entry.rstrip("/").rsplit("/", 1)[-1]
            if step.isdigit() and int(step) < it:
                store.remove(f"{self.prefix}/{step}")
        notify(
            "checkpoint",
            output=self.output,
            prefix=self.prefix,
            iteration=it,
            count=it // self.every,
        )

    def load(self) -> dict | None:
        """The latest checkpoint's state, or None: none written, or one that cannot be read
        (named in a warning; the optimisation then starts from its beginning, never from a
        damaged state)."""
        store = RunStore(self.output)
        try:
            meta = store.read_json(f"{self.prefix}/latest.json")
        except (FileNotFoundError, ValueError):
            return None
        try:
            it = int(meta["iteration"])
            state = {
                name: store.read_array(f"{self.prefix}/{it}/{name}") for name in meta["arrays"]
            }
        except (OSError, KeyError, TypeError, ValueError) as exc:
            warnings.warn(
                DimredWarning(
                    f"The checkpoint {store.location.child(self.prefix)} could not be read "
                    f"({getattr(exc, 'problem', exc)}); the optimisation starts again from its "
                    "beginning."
                ),
                stacklevel=2,
            )
            return None
        return {**state, "iteration": it, "rng": meta.get("rng"), "loss": meta.get("loss")}


class _Checkpoints:
    """The factory the method calls: one `StoreCheckpoint` per embedding of a fit."""

    def __init__(self, output: str, fit_fp: str):
        self.output, self.fit_fp = output, fit_fp

    def __call__(self, index: int, setting: dict) -> StoreCheckpoint | None:
        if not setting.get("checkpoint_every"):
            return None
        return StoreCheckpoint(
            self.output, f"{CHECKPOINTS}/{self.fit_fp[:16]}-{index}", setting["checkpoint_every"]
        )


# --------------------------------------------------------------------------- adapters


class _Family:
    """What differs between t-SNE, UMAP and SNE for the flow."""

    def __init__(self, name, defaults, sweepable, check, sweep, loss_name, k_of):
        self.name, self.defaults, self.sweepable = name, defaults, sweepable
        self._check, self._sweep, self.loss_name, self._k_of = check, sweep, loss_name, k_of

    def check(self, params: dict, shape: tuple) -> dict:
        unknown = sorted(set(params) - set(self.defaults))
        if unknown:
            raise InputError(
                f"Unknown parameter(s) {unknown} for method {self.name!r}; it "
                f"takes {sorted(self.defaults)}.",
                "fix the --param names.",
            )
        self._check(dict(params), shape[0])  # every setting of the sweep, or InputError
        return {
            **{k: v for k, v in self.defaults.items() if not isinstance(v, np.ndarray)},
            **params,
        }

    def graph(self, params: dict, shape: tuple) -> GraphRequest | None:
        settings = self._check(dict(params), shape[0])
        if (settings[0].get("fit_sample") or shape[0]) < shape[0]:
            return None  # fitted on a sample: the method builds that sample's graph itself
        return GraphRequest(
            n_neighbors=self._k_of(settings),
            metric=settings[0]["metric"],
            backend=settings[0]["knn_backend"],
            connected=False,
            nndescent_kwds=settings[0].get("nndescent_kwds") or {},
        )

    def fit(self, X, params: dict, graph=None, run=None, **_):
        n_settings = len(self._check(dict(params), X.shape[0]))
        checkpoints = _Checkpoints(run["output"], run["fingerprint"]) if run else None
        done: dict = {}

        def progress(index, iteration, total, loss):
            done[index] = (iteration, total)
            it = sum(v[0] for v in done.values())
            tot = sum(v[1] for v in done.values()) * n_settings / max(1, len(done))
            tail = "" if loss is None else f", {self.loss_name} {loss:.4f}"
            report(
                f"embedding {index + 1}/{n_settings}: iteration {iteration}/{total}{tail}", it, tot
            )

        models = self._sweep(X, graph=graph, checkpoint=checkpoints, callback=progress, **params)
        losses = [
            getattr(m, "kl_divergence", None) if self.name != "umap" else m.cross_entropy
            for m in models
        ]
        info = [
            {**m.info, "trustworthiness": t}
            for m, t in zip(models, _trustworthiness(X, [m.embedding for m in models]))
        ]
        return EmbeddingSet(
            self.name,
            [np.asarray(m.embedding) for m in models],
            [_jsonable_setting(m.params) for m in models],
            losses,
            info,
        )

    def summary(self, model: EmbeddingSet) -> dict:
        rows = []
        for i, (s, loss, info) in enumerate(zip(model.settings, model.losses, model.info)):
            rows.append(
                {
                    "index": i,
                    "array": "embedding" if i == 0 else f"model/embedding_{i}",
                    "params": {k: s[k] for k in self.sweepable if k in s},
                    "loss": loss,
                    "loss_name": self.loss_name,
                    "trustworthiness": info.get("trustworthiness"),
                    "seconds": info.get("seconds"),
                    "threads": info.get("threads"),
                    "resumed_from": info.get("resumed_from"),
                    "init": info.get("init"),
                    **({"fit_sample": info["fit_sample"]} if info.get("fit_sample") else {}),
                    **{k: info[k] for k in _OPTIMIZER_KEYS if k in info},
                }
            )
        return {
            "n_embeddings": len(rows),
            "embeddings": rows,
            "trustworthiness_sample": f"{TRUST_SAMPLE} rows (seed 0), k = {TRUST_K}",
            "convergence": model.convergence,
        }


def _jsonable_setting(s: dict) -> dict:
    return {
        k: (v.tolist() if isinstance(v, np.ndarray) else v)
        for k, v in s.items()
        if k != "init" or not isinstance(v, np.ndarray)
    }


def _trustworthiness(X, embeddings: list) -> list[float]:
    n = X.shape[0]
    idx = metrics.sample_rows(n, TRUST_SAMPLE, 0)
    Xs = np.asarray(take_rows(X, idx, "trustworthiness sample"), dtype=np.float64)
    k = int(min(TRUST_K, max(1, len(idx) // 2 - 1)))
    return [metrics.trustworthiness(Xs, np.asarray(Y)[idx], k) for Y in embeddings]


def _save(model: EmbeddingSet, store) -> None:
    for name, value in model.arrays().items():
        store.write_array(f"model/{name}", value)
    store.write_attrs("model", model.scalars())
    store.remove(CHECKPOINTS)  # the model holds the result now


def _transform(model: EmbeddingSet, X):
    import dask.array as da  # the first setting's embedding, in the input's row chunks

    Y = np.asarray(model.embeddings[0])
    return da.from_array(Y.astype(X.dtype), chunks=(X.chunks[0], Y.shape[1]))


def _adapter(family: _Family) -> MethodAdapter:
    return MethodAdapter(
        name=family.name,
        defaults=family.defaults,
        check=family.check,
        fit=family.fit,
        save=_save,
        load=model_loader(EmbeddingSet),
        transform=_transform,
        summary=family.summary,
        graph=family.graph,
        run_context=True,
        graph_in_store=True,
    )


def _tsne_k(settings):
    return settings[0]["n_neighbors"]


def _umap_k(settings):
    return max(s["n_neighbors"] for s in settings) - 1


METHODS = {
    "tsne": _adapter(
        _Family(
            "tsne",
            SPECS["tsne"].flow_defaults(),
            TSNE_SWEEPABLE,
            check_tsne_params,
            tsne_sweep,
            "KL",
            _tsne_k,
        )
    ),
    "umap": _adapter(
        _Family(
            "umap",
            SPECS["umap"].flow_defaults(),
            UMAP_SWEEPABLE,
            check_umap_params,
            umap_sweep,
            "cross-entropy",
            _umap_k,
        )
    ),
    "sne": _adapter(
        _Family(
            "sne",
            SPECS["sne"].flow_defaults(),
            SNE_SWEEPABLE,
            check_sne_params,
            sne_sweep,
            "KL (sum over points)",
            _tsne_k,
        )
    ),
}
