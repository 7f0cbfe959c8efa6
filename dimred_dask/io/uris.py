"""Where data may be read from and written to, and what a URI may contain.

A URI is a local path, ``file://``, ``s3://`` or ``memory://`` (the allowlist, extendable by
``DIMRED_ALLOWED_SCHEMES``), optionally with ``#element`` naming an array inside a container
(a Zarr group, an HDF5 or ``.h5ad`` file). `parse_uri` is the one parser every location goes
through, into a `Location`; in a local path a ``#`` is part of the name unless what precedes
it is an existing file or Zarr store. Credentials never travel in a URI: they come from the
environment or storage options.
"""

from __future__ import annotations

import contextlib
import contextvars
import glob
import os
import posixpath
from dataclasses import dataclass, field
from urllib.parse import parse_qs, quote, unquote, urlsplit

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
    """A checked location: ``url``, the element inside it, and fsspec storage options.

    ``url`` is an absolute local path (which may hold ``#`` and spaces: it is a path, never
    re-parsed) or ``scheme://netloc/path``; ``element`` names an array inside a container
    (a Zarr group, an HDF5 or ``.h5ad`` file), None for the container itself. A store a run
    writes (an output, a graph cache, a run store read as a model) never has an element.
    ``str(location)`` is its canonical form: parsed again (`parse_uri`), it gives the same
    location, also for a local path with ``#`` in its name (written ``file://...%23...``).
    """

    url: str
    element: str | None = None
    storage_options: dict = field(default_factory=dict, compare=False, hash=False, repr=False)

    @property
    def scheme(self) -> str:
        return urlsplit(self.url).scheme if "://" in self.url else "file"

    @property
    def is_local(self) -> bool:
        return "://" not in self.url

    @property
    def base(self) -> str:
        """The container's canonical form (`str` without the element)."""
        if self.is_local and "#" in self.url:
            return "file://" + quote(self.url, safe="/")
        return self.url

    def with_element(self, element: str | None) -> str:
        """The canonical form of ``element`` inside this container (e.g. in a fix)."""
        return self.base + (f"#{element}" if element else "")

    def __str__(self) -> str:
        return self.with_element(self.element)

    def child(self, name: str) -> "Location":
        """The location ``name`` below this one (a folder or prefix), without element."""
        return Location(self.url.rstrip("/") + "/" + name.strip("/"), None, self.storage_options)

    def parent(self) -> "Location | None":
        """The folder or prefix holding this location; None at a bucket's (or a disk's) root."""
        head = self.url.rstrip("/")
        rest = head.split("://", 1)[-1]
        if "/" not in rest.strip("/"):
            return None
        return Location(head.rsplit("/", 1)[0] or "/", None, self.storage_options)


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


def _container(path: str) -> bool:
    """Whether ``path`` (or, for a glob, its first match) is an existing file or Zarr store:
    something a ``#element`` can name a part of."""
    if any(c in path for c in "*?["):
        matches = sorted(glob.glob(path))
        return bool(matches) and _container(matches[0])
    if os.path.isfile(path):
        return True
    return os.path.isdir(path) and any(
        os.path.isfile(os.path.join(path, doc)) for doc in ("zarr.json", ".zgroup", ".zarray")
    )


def _split_local(text: str) -> tuple[str, str | None, str | None]:
    """(absolute path, element, container) of a local path as typed.

    A ``#`` is part of the name unless what precedes it is an existing container (a file,
    or a Zarr store; for a glob, what it matches): ``runs/base#v2`` is the folder of that
    name, ``cells.h5ad#layers/counts`` the element of an existing file. When the whole text
    exists, it is a path; else the longest prefix that is a container takes the element.
    ``container``: that prefix, when a split was made."""

    def absolute(p: str) -> str:
        return os.path.abspath(os.path.expanduser(p))

    whole = absolute(text)
    if "#" not in text or os.path.lexists(whole):
        return whole, None, None
    cuts = [i for i, c in enumerate(text) if c == "#"]
    for i in reversed(cuts):  # the longest container first
        head = absolute(text[:i])
        if text[:i] and _container(head):
            return head, text[i + 1 :].strip("/") or None, head
    return whole, None, None


def parse_uri(
    uri,
    *,
    role: str = "input",
    storage_options: dict | None = None,
    element: bool = True,
) -> Location:
    """Check ``uri`` and return a `Location`; raise `InputError` saying what to fix.

    The one parser of every location the package reads or writes. A local path becomes an
    absolute path (``~`` expanded), a ``#`` in it part of the name unless what precedes it
    is an existing file or Zarr store (then it names an element inside that container); a
    ``file://`` URL is percent-decoded (``%23`` is a ``#`` in the name) and its ``#``
    always names an element; another URL is normalised (lower-case scheme, no trailing
    slash) and its ``#`` names an element. The storage options are those of the
    environment (`env_storage_options`), then of `run_storage_options`, then
    ``storage_options``.

    Parameters
    ----------
    uri : str, os.PathLike or Location
        The path or URL. A `Location` is returned as it is (after the element check).
    role : str, default "input"
        What the location is, named in error messages.
    storage_options : dict or None, default None
        fsspec options of the storage, over the others.
    element : bool, default True
        Whether the location may name an element inside a container. False for a store
        of its own (an output, a graph cache, a run store): one that would name an
        element is refused (`parse_store`).

    Returns
    -------
    Location
        The URL, the element (or None) and the storage options.

    Raises
    ------
    InputError
        ``uri`` is empty or not a path; its scheme is not allowed (`allowed_schemes`); it
        carries credentials (user or password, or a secret in its query); it has a ``..``
        segment; it names an element where none is allowed.
    """
    if isinstance(uri, Location):
        if not element and uri.element:
            raise _element_error(role, str(uri), uri.base, uri.element, None)
        return uri
    if not isinstance(uri, (str, os.PathLike)) or not str(uri).strip():
        raise InputError(
            f"The {role} must be a path or URL; found {uri!r}.",
            "pass e.g. ./data.zarr or s3://bucket/data.zarr.",
        )
    text = os.fspath(uri).strip()
    parts = urlsplit(text) if "://" in text else None
    scheme = parts.scheme.lower() if parts else "file"
    if scheme not in allowed_schemes():
        raise InputError(
            f"The {role} URL scheme {scheme!r} is not allowed ({text!r}); allowed: "
            f"{', '.join(allowed_schemes())} and local paths.",
            "use one of those schemes, or add it to DIMRED_ALLOWED_SCHEMES if you trust it.",
        )
    container = None
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
        # a file:// URL is percent-encoded (Path.as_uri writes a space as %20, a # as %23)
        path = unquote(parts.path) if scheme == "file" else parts.path
        fragment = parts.fragment.strip("/") or None
    else:
        path, fragment, container = _split_local(text)
    typed = path if parts is not None else text.replace("#", "/")  # as typed, not resolved
    segments = typed.replace("\\", "/").split("/") + (fragment.split("/") if fragment else [])
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
        url = os.path.abspath(os.path.expanduser(path))
    else:
        url = f"{scheme}://{parts.netloc}{posixpath.normpath(parts.path) if parts.path else ''}"
        url = url.rstrip("/") if parts.path not in ("", "/") else url
    so = {
        **env_storage_options(scheme),
        **_RUN_OPTIONS.get().get(scheme, {}),
        **(storage_options or {}),
    }
    loc = Location(url, fragment, so)
    if fragment and not element:
        raise _element_error(role, text, loc.base, fragment, container)
    return loc


def parse_store(uri, *, role: str = "output", storage_options: dict | None = None) -> Location:
    """`parse_uri` for a store of its own (an output, a graph cache, a run store read back):
    a location that would name an element inside a container is refused.

    Parameters
    ----------
    uri : str, os.PathLike or Location
        The path or URL of the store.
    role : str, default "output"
        What the location is, named in error messages.
    storage_options : dict or None, default None
        fsspec options of the storage, over those of the environment.

    Returns
    -------
    Location
        The store's location (its ``element`` is None).

    Raises
    ------
    InputError
        As `parse_uri`; also a location that would name an element (a ``#`` after an
        existing file or store, or in a URL), with the ``file://...%23...`` form of a local
        folder whose name holds the ``#`` in its fix.
    """
    return parse_uri(uri, role=role, storage_options=storage_options, element=False)


def _element_error(role: str, text: str, base: str, element: str, container) -> InputError:
    if container is not None:  # a local path whose '#' follows an existing container
        literal = "file://" + quote(f"{container}#{element}", safe="/")
        return InputError(
            f"The {role} {text!r} would be the element {element!r} inside the existing "
            f"{'file' if os.path.isfile(container) else 'store'} {container} (a '#' after an "
            f"existing file or Zarr store names a part of it); the {role} must be a folder of "
            "its own, never a part of another store.",
            f"to name a folder with '#' in its name, write it as a file:// URL with the '#' "
            f"as %23: {literal}; or choose a name without '#'.",
        )
    return InputError(
        f"The {role} {text!r} names an element ({element!r}) inside {base}; the {role} must "
        "be a folder or prefix of its own, never a part of another store.",
        f"give the {role} without '#{element}' (a file:// URL writes a '#' in a local "
        "name as %23).",
    )


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
