"""What every stage checks before it commits: the run still holds its output's lease, and the
inputs are those the validate stage saw.

`stage_guard` makes the check that `RunStore.mark_stage` and `RunStore.commit` call before
they write a marker: a stage whose check fails commits nothing, so a store never claims a
result computed from another input than its manifest names, or written while another run
held the store.

What is compared (docs/operations.md, "An input that changes during a run"):

- the listing of the input's files or objects (`dimred_dask.io.identity.source_files`):
  a chunk rewritten, removed or added, the metadata document rewritten (a new shape or
  dtype), a file replaced; for the input, the labels, the actions, and a chain's own input;
- the content fingerprint of the input (the chunks validate hashed, all of them up to
  `FULL_HASH_BYTES`), before `_COMMITTED`, and before every stage when the input is that
  small: a change of a hashed chunk's bytes that kept its file's size, time and inode.

Not detected: bytes of a chunk that validate did not hash, changed in place with the file's
size, modification time and inode kept (a writer that sets the time back).
"""

from __future__ import annotations

from dimred_dask.errors import InputChangedError, StoreError
from dimred_dask.io import RunStore, array_fingerprint, parse_uri
from dimred_dask.io.fingerprint import FULL_HASH_BYTES
from dimred_dask.io.identity import changed_sources, source_files
from dimred_dask.io.lease import LEASE, Lease

from .inputs import open_run_input
from .request import RunRequest, Validated

__all__ = ["sources_of", "stage_guard"]

FIX = (
    "make sure nothing writes the input while a run reads it (write a new version under a "
    "new name, then point the run at it), then run the same command again: it starts from "
    "the input as it is then (the stages it committed before are not reused with another "
    "input)."
)


def sources_of(req: RunRequest) -> list[dict]:
    """The listings of the run's inputs now (validate): the input and, when given, the
    labels, the actions and the labels for evaluation."""
    out = []
    for role, name in (
        ("input", "input"),
        ("labels", "labels"),
        ("actions", "actions"),
        ("eval labels", "eval_labels"),
    ):
        if getattr(req, name, None):  # a placement has an input only
            loc = parse_uri(getattr(req, name), role=role)
            out.append({"role": role, "uri": str(loc), "files": source_files(loc)})
    return out


def _check_lease(v: Validated, stage: str) -> None:
    ref = v.lease
    if not ref:
        return
    if not Lease.existing(RunStore(ref["store"]), ref["token"]).holds():
        raise StoreError(
            f"Stage {stage!r} did not commit: the run no longer holds the lease on "
            f"{ref['store']} ({LEASE} is gone or another run's, which took it over); two "
            "runs must never write one store at once.",
            "check which run holds it (dimred-dask inspect), let that one finish, then run "
            "the same command again.",
        )


def _check_listings(v: Validated, stage: str) -> None:
    for source in v.sources or ():
        now = source_files(parse_uri(source["uri"], role=source["role"]))
        changes = changed_sources(source["files"], now)
        if changes:
            raise InputChangedError(
                f"Stage {stage!r} did not commit: the {source['role']} {source['uri']} "
                f"changed while the run read it: {'; '.join(changes)}.",
                FIX,
            )


def _check_content(req: RunRequest, v: Validated, stage: str) -> None:
    before = v.input_fingerprint
    try:
        inp = open_run_input(req, v)
        if list(inp.shape) != list(v.shape):
            raise InputChangedError(
                f"Stage {stage!r} did not commit: the input {req.input} changed while the "
                f"run read it: its shape is now {list(inp.shape)}, was {list(v.shape)}.",
                FIX,
            )
        now = array_fingerprint(inp.array, {"source": v.input_meta})
    except InputChangedError:
        raise
    except Exception as exc:  # it no longer opens as it did
        raise InputChangedError(
            f"Stage {stage!r} did not commit: the input {req.input} changed while the run "
            f"read it: it no longer opens as validated ({type(exc).__name__}: {exc}).",
            FIX,
        ) from None
    if now["digest"] == before["digest"]:
        return
    chunks = {int(i): dg for i, dg in (before.get("chunks") or {}).items()}
    bad = sorted(int(i) for i, dg in now["chunks"].items() if chunks.get(int(i)) != dg)
    starts = [0]
    for size in inp.array.chunks[0]:
        starts.append(starts[-1] + size)
    rows = ", ".join(
        f"rows {starts[i]}-{starts[i + 1] - 1}" for i in bad[:5] if i + 1 < len(starts)
    )
    raise InputChangedError(
        f"Stage {stage!r} did not commit: the input {req.input} changed while the run "
        f"read it: the bytes of {len(bad)} hashed chunk(s) differ from what validate hashed"
        + (f" ({rows})" if rows else "")
        + ".",
        FIX,
    )


def stage_guard(req: RunRequest, v: Validated, stage: str, *, final: bool = False):
    """The check `RunStore.mark_stage` / `RunStore.commit` call before committing ``stage``:
    the lease is still this run's, the inputs' listings are unchanged, and (``final``, or an
    input of at most `FULL_HASH_BYTES`) so is the input's content fingerprint. Raises
    `StoreError` (lease lost) or `InputChangedError`."""

    def check() -> None:
        _check_lease(v, stage)
        _check_listings(v, stage)
        if v.input_fingerprint and (final or v.input_bytes <= FULL_HASH_BYTES):
            _check_content(req, v, stage)

    return check
