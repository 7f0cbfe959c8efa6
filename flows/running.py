"""What every flow of a run does around its stages: hold the output's lease while it
writes, take the date of a scheduled run, read object-storage credentials from a Prefect
Secret block."""

from __future__ import annotations

import os

from dimred_dask.errors import InputError
from dimred_dask.io import Lease, RunStore

from .publish import flow_run_id

__all__ = ["block_credentials", "leased", "scheduled_start"]


def scheduled_start():
    """The run's scheduled start (a deployment's schedule), or None (now)."""
    try:
        from prefect.runtime import flow_run

        return flow_run.scheduled_start_time
    except Exception:
        return None


S3_SECRET_KEYS = {
    "aws_access_key_id": "key",
    "aws_secret_access_key": "secret",
    "aws_session_token": "token",
    "key": "key",
    "secret": "secret",
    "token": "token",
}


def block_credentials(name: str) -> dict:
    """s3fs options from a Prefect Secret block holding a JSON object with
    aws_access_key_id / aws_secret_access_key (and optionally aws_session_token)."""
    from prefect.blocks.system import Secret

    try:
        value = Secret.load(name).get()
    except ValueError as exc:
        raise InputError(
            f"No Prefect Secret block named {name!r} ({exc}).",
            "create it: Secret(value={'aws_access_key_id': ..., "
            "'aws_secret_access_key': ...}).save(name)",
        ) from None
    if not isinstance(value, dict) or not {"key", "secret"} <= {
        S3_SECRET_KEYS.get(k) for k in value
    }:
        raise InputError(
            f"The Secret block {name!r} must hold a JSON object with "
            "aws_access_key_id and aws_secret_access_key (its value is not shown).",
            "save it again with those two fields.",
        )
    return {S3_SECRET_KEYS[k]: v for k, v in value.items() if k in S3_SECRET_KEYS}


def leased(output: str, body):
    """Run ``body(lease)`` holding the output's lease (renewed while it runs); ``lease`` is
    ``{"store", "token"}``, which every stage's commit guard checks (`flows.guard`). A run
    that fails removes the folder the lease made if it is left empty, never a folder that
    was there."""
    store = RunStore(output)
    existed = store.location.is_local and os.path.lexists(store.root)
    lease = Lease(store, holder=f"flow run {flow_run_id()}").acquire()
    done = False
    try:
        with lease.keepalive():
            result = body({"store": store.url, "token": lease.token})
            done = True
            return result
    finally:
        lease.release(remove_empty_root=not done and not existed)
