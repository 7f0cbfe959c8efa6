"""Where data may be read from and written to, and what a URI may contain.

A URI is a local path, ``file://``, ``s3://`` or ``memory://`` (the allowlist, extendable by
``DIMRED_ALLOWED_SCHEMES``), optionally with ``#path`` naming an array inside a Zarr group.
Credentials never travel in a URI: they come from the environment or storage options.
"""

from __future__ import annotations

import contextlib
import contextvars
import os
import posixpath
from dataclasses import dataclass, field
from urllib.parse import parse_qs, unquote, urlsplit

from ..errors import InputError

DEFAULT_SCHEMES = ("file", "s3", "memory")
_SECRET_QUERY_KEYS = (
    "awsaccesskeyid",
    "x-amz-credential",
    "x-amz-signature",
    "signature",
    "secret",
    "token",
    "password",
    "key",
    "sig",
    "access_key",
)


def allowed_schemes() -> tuple[str, ...]:
    extra = os.environ.get("DIMRED_ALLOWED_SCHEMES", "")
    return DEFAULT_SCHEMES + tuple(s.strip() for s in extra.split(",") if s.strip())


@dataclass(frozen=True)
class Location:
    """A checked URI: ``url`` without fragment, the fragment, and fsspec storage options."""

    url: str
    fragment: str | None = None
    storage_options: dict = field(default_factory=dict, compare=False, hash=False, repr=False)

    @property
    def scheme(self) -> str:
        return urlsplit(self.url).scheme if "://" in self.url else "file"

    @property
    def is_local(self) -> bool:
        return "://" not in self.url

    def __str__(self) -> str:
        return self.url + (f"#{self.fragment}" if self.fragment else "")

    def child(self, name: str) -> str:
        return self.url.rstrip("/") + "/" + name


# Storage options for this run only (e.g. credentials from a secret store), by scheme. A
# context variable: concurrent runs in other threads do not see each other's.
_RUN_OPTIONS: contextvars.ContextVar[dict] = contextvars.ContextVar(
    "dimred_run_storage_options", default={}
)


@contextlib.contextmanager
def run_storage_options(scheme: str, options: dict):
    """Add storage options to every ``scheme`` URI parsed in this context (this run only).

    A context variable: other threads' runs do not see them. They travel to the workers
    inside the Dask graph, never to Prefect. Options given to `parse_uri` take precedence.

    Parameters
    ----------
    scheme : str
        The URL scheme (e.g. ``"s3"``).
    options : dict
        fsspec storage options (e.g. ``{"key": ..., "secret": ...}``), over those of the
        environment and of an enclosing context.

    Yields
    ------
    None
        The options hold until the ``with`` block ends.
    """
    token = _RUN_OPTIONS.set({**_RUN_OPTIONS.get(), scheme: dict(options)})
    try:
        yield
    finally:
        _RUN_OPTIONS.reset(token)


S3_MAX_ATTEMPTS = 6  # botocore "standard" retries: transient 5xx/throttling, with backoff


def env_storage_options(scheme: str) -> dict:
    """Storage options from the environment (S3 endpoint) and the retry policy; never
    credentials, which each process (workers included) reads from its own environment."""
    if scheme != "s3":
        return {}
    so: dict = {"config_kwargs": {"retries": {"max_attempts": S3_MAX_ATTEMPTS, "mode": "standard"}}}
    endpoint = os.environ.get("DIMRED_S3_ENDPOINT_URL") or os.environ.get("AWS_ENDPOINT_URL")
    if endpoint:
        so["client_kwargs"] = {"endpoint_url": endpoint}
    return so


def parse_uri(uri, *, role: str = "input", storage_options: dict | None = None) -> Location:
    """Check ``uri`` and return a `Location`; raise `InputError` saying what to fix.

    A local path (or ``file://`` URL) becomes an absolute path, ``~`` expanded; another URL
    is normalised (lower-case scheme, no trailing slash). The storage options are those of
    the environment (`env_storage_options`), then of `run_storage_options`, then
    ``storage_options``.

    Parameters
    ----------
    uri : str, os.PathLike or Location
        The path or URL, optionally with ``#path`` naming an array inside a group. A
        `Location` is returned as it is.
    role : str, default "input"
        What the location is, named in error messages.
    storage_options : dict or None, default None
        fsspec options of the storage, over the others.

    Returns
    -------
    Location
        The URL without its fragment, the fragment (or None) and the storage options.

    Raises
    ------
    InputError
        ``uri`` is empty or not a path; its scheme is not allowed (`allowed_schemes`); it
        carries credentials (user or password, or a secret in its query); it has a ``..``
        segment.
    """
    if isinstance(uri, Location):
        return uri
    if not isinstance(uri, (str, os.PathLike)) or not str(uri).strip():
        raise InputError(
            f"The {role} must be a path or URL; found {uri!r}.",
            "pass e.g. ./data.zarr or s3://bucket/data.zarr.",
        )
    text = os.fspath(uri).strip()
    base, _, fragment = text.partition("#")
    parts = urlsplit(base) if "://" in base else None
    scheme = parts.scheme.lower() if parts else "file"
    if scheme not in allowed_schemes():
        raise InputError(
            f"The {role} URL scheme {scheme!r} is not allowed ({text!r}); allowed: "
            f"{', '.join(allowed_schemes())} and local paths.",
            "use one of those schemes, or add it to DIMRED_ALLOWED_SCHEMES if you trust it.",
        )
    if parts is not None:
        if "@" in parts.netloc or parts.password or parts.username:
            raise InputError(
                f"The {role} URL carries credentials ({scheme}://<user:secret>@...); URLs are "
                "logged and stored in manifests, so they must not contain secrets.",
                "remove them from the URL and set AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY "
                "(or pass storage options) instead.",
            )
        leaked = [k for k in parse_qs(parts.query) if k.lower() in _SECRET_QUERY_KEYS]
        if leaked:
            raise InputError(
                f"The {role} URL carries credentials in its query ({leaked}).",
                "drop the query and use environment credentials instead.",
            )
        # a file:// URL is percent-encoded (Path.as_uri writes a space as %20); a path is not
        path = unquote(parts.path) if scheme == "file" else parts.path
    else:
        path = base
    segments = path.replace("\\", "/").split("/") + (fragment.split("/") if fragment else [])
    if ".." in segments:
        raise InputError(
            f"The {role} {text!r} contains a '..' segment (path traversal).",
            "give the resolved path (e.g. realpath) without '..'.",
        )
    if scheme == "file" and parts is not None and parts.netloc not in ("", "localhost"):
        raise InputError(
            f"The {role} {text!r} names a host ({parts.netloc!r}): a file:// URL takes an "
            "absolute path after its two slashes.",
            f"write file:///{parts.netloc}{parts.path} (three slashes) for an absolute path, or "
            f"a plain path such as ./{parts.netloc}{parts.path}.",
        )
    if scheme == "file":
        local = path
        url = os.path.abspath(os.path.expanduser(local))
    else:
        url = f"{scheme}://{parts.netloc}{posixpath.normpath(parts.path) if parts.path else ''}"
        url = url.rstrip("/") if parts.path not in ("", "/") else url
    so = {
        **env_storage_options(scheme),
        **_RUN_OPTIONS.get().get(scheme, {}),
        **(storage_options or {}),
    }
    return Location(url, fragment or None, so)


def _keys(loc: Location) -> set[str]:
    """The location as a prefix key; a local path also as resolved through symbolic links."""
    keys = {loc.url.rstrip("/") + "/"}
    if loc.is_local:
        keys.add(os.path.realpath(loc.url).rstrip("/") + "/")
    return keys


def check_output_location(output: Location, *inputs) -> None:
    """Refuse an output equal to, inside, or containing any input of the run.

    Locations are compared as written and, for local paths, after resolving symbolic links
    (fragments aside): a run never writes into, or deletes, what it reads or shares.

    Parameters
    ----------
    output : Location
        The run's output.
    *inputs : Location, (str, Location) or None
        What the run reads, as Locations or ``(role, Location)`` pairs naming what each is
        ("labels", "graph cache" ...); None entries are skipped.

    Raises
    ------
    InputError
        The output is an input, lies inside one, or contains one.
    """
    for item in inputs:
        role, loc = item if isinstance(item, tuple) else ("input", item)
        if loc is None:
            continue
        pairs = [(o, i) for o in _keys(output) for i in _keys(loc)]
        linked = (
            ""
            if _keys(output) == {output.url.rstrip("/") + "/"}
            and _keys(loc) == {loc.url.rstrip("/") + "/"}
            else " (paths compared after resolving symbolic links)"
        )
        if any(o == i for o, i in pairs):
            raise InputError(
                f"The output {output} is the {role} itself{linked}; a run would "
                "overwrite its data.",
                "choose another output location.",
            )
        if any(o.startswith(i) for o, i in pairs):
            raise InputError(
                f"The output {output} lies inside the {role} {loc.url}{linked}; "
                f"writing there would change the {role}.",
                f"choose an output outside the {role}.",
            )
        if any(i.startswith(o) for o, i in pairs):
            raise InputError(
                f"The output {output} contains the {role} {loc.url}{linked}; "
                f"--overwrite would delete the {role}.",
                f"choose an output that does not contain the {role}.",
            )
