"""Chains of methods in one run: ``pca+umap``, ``pca+tsne``, ``pca+isomap`` ... PCA reduces
the input (dense or sparse) to ``pca.n_components`` columns, the second method embeds that.

One run store holds both steps:

    <output>/                  the final step's run store (embedding, model, manifest, ...)
    <output>/steps/pca/        the PCA step's own run store (its embedding is the next input)

Each step has its own stage markers, so a chain stopped anywhere resumes where it stopped (a
finished PCA step is reused, not recomputed). Parameters are addressed per step
(``pca.n_components=50``, ``umap.n_neighbors=30``); a parameter without a step goes to the final
step, as ``--n-components`` does. The PCA step keeps 50 components unless told otherwise
(fewer when the input has fewer columns or rows).
"""

from __future__ import annotations

import dataclasses

from dimred_dask.errors import InputError

from .request import ChainStep, RunRequest, expand_output

__all__ = [
    "SEPARATOR",
    "STEPS",
    "FIRST_STEPS",
    "PCA_DEFAULT_COMPONENTS",
    "chain_steps",
    "expand_output",  # re-exported from flows.request, where requests are built
]

SEPARATOR = "+"
STEPS = "steps"  # the folder of the intermediate steps' run stores
FIRST_STEPS = ("pca",)
PCA_DEFAULT_COMPONENTS = 50  # the usual reduction before a neighbour embedding of cells


def is_chain(method: str) -> bool:
    return SEPARATOR in str(method)


def _names(method: str, available) -> list[str]:
    names = [n.strip() for n in str(method).split(SEPARATOR)]
    if len(names) != 2 or names[0] not in FIRST_STEPS or names[1] in FIRST_STEPS:
        raise InputError(
            f"A chain is PCA then one other method, e.g. pca+umap; found {method!r}.",
            "pass --method pca+<method> (e.g. pca+umap, "
            "pca+tsne, pca+isomap, pca+laplacian, pca+spectral).",
        )
    if names[1] not in available:
        raise InputError(
            f"Unknown method {names[1]!r} in the chain {method!r}; available: {sorted(available)}.",
            "pass --method pca+<one of those>.",
        )
    return names


def _split_params(method: str, names: list[str], params: dict) -> dict[str, dict]:
    out = {n: {} for n in names}
    for key, value in params.items():
        head, dot, rest = str(key).partition(".")
        if not dot:
            out[names[-1]][key] = value
        elif head in out and rest:
            out[head][rest] = value
        else:
            raise InputError(
                f"The parameter {key!r} names no step of the chain {method!r} "
                f"(its steps: {', '.join(names)}).",
                f"address a step's parameter as <step>.<name>, e.g. "
                f"--param {names[0]}.n_components=50 --param "
                f"{names[-1]}.n_neighbors=30.",
            )
    return out


def chain_steps(req: RunRequest, available) -> list[RunRequest]:
    """The run's steps: ``[req]`` for one method, two step requests for a chain (each with
    its `ChainStep`)."""
    if not is_chain(req.method):
        return [req]
    names = _names(req.method, available)
    params = _split_params(req.method, names, req.params)
    root = req.output.rstrip("/")
    first_out = f"{root}/{STEPS}/{names[0]}"
    role = ChainStep(
        chain=req.method,
        steps=tuple(names),
        root=root,
        input=req.input,
        columns=req.columns,
        first_output=first_out,
        final=False,
    )
    first = req.but(
        method=names[0],
        params=params[names[0]],
        output=first_out,
        overwrite=False,
        labels=None,
        actions=None,
        step=role,
        default_components="n_components" not in params[names[0]],
    )
    last = req.but(
        method=names[1],
        params=params[names[1]],
        input=f"{first_out}/embedding",
        columns=None,
        overwrite=False,
        allow_missing_chunks=False,
        step=dataclasses.replace(role, final=True),
    )
    return [first, last]
