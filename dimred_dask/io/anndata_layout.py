"""Where anndata keeps each element of an AnnData file or store, in every layout it reads:
`locate` finds an element under the path anndata gives it (``raw/X`` in a ``raw`` group, or
as the older top-level ``raw.X``; a field of an older compound ``obsm``; ``obsp/distances``
kept in ``uns/neighbors``), `elements` lists every matrix under the path that reads it. The
readers (`dimred_dask.io.anndata`) and the obs columns (`dimred_dask.io.obs`) share it."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import DimredError, InputError, is_storage_error
from .hdf5 import is_array, sparse_layout, text_attr
from .uris import Location

__all__ = ["Element", "check_anndata", "check_raw", "child", "elements", "locate"]


SLOTS = ("obsm", "layers", "obsp", "varm", "varp")  # listed in this order, after X and raw/X
GRAPHS = ("distances", "connectivities")  # uns/neighbors/<name> of older files: obsp/<name>


@dataclass(frozen=True)
class Element:
    """An element as anndata names it (``path``) and where the file keeps it: the node
    ``stored`` and, in a compound dataset, its ``field``."""

    path: str
    stored: str
    field: str | None = None

    def meta(self) -> dict:
        moved = self.stored != self.path or self.field
        return {
            "element": self.path,
            **({"stored_as": self.stored} if moved else {}),
            **({"field": self.field} if self.field else {}),
        }


def child(root, path: str, strict: bool = False):
    """The node at ``path`` in ``root``, or None when there is none. A node its library
    cannot open (zarr cannot open a compound array whose fields hold several values) is None
    in a listing and refused by name when it is the one asked for (``strict``)."""
    try:
        return root[path] if path in root else None
    except KeyError:
        return None
    except DimredError:
        raise
    except Exception as exc:
        if is_storage_error(exc) and not type(exc).__module__.startswith("h5py"):
            raise
        if not strict:
            return None
        name = getattr(root, "filename", None) or getattr(root.store, "where", "the store")
        raise InputError(
            f"The element {path!r} of {name} cannot be opened ({type(exc).__name__}: {exc}).",
            "write it again with a current anndata (read_h5ad / read_zarr, then write).",
        ) from None


def is_matrix(node) -> bool:
    return bool(sparse_layout(node)) or (
        is_array(node) and not np.dtype(node.dtype).names and np.dtype(node.dtype).kind in "fiub"
    )


def numeric_fields(node) -> list[str]:
    """The fields of a compound dataset that hold numbers: the matrices of the ``obsm`` /
    ``varm`` that anndata < 0.7 wrote, one field each."""
    dtype = np.dtype(node.dtype)
    return [k for k in dtype.names or () if dtype.fields[k][0].base.kind in "fiub"]


def _member(root, container: str, name: str, path: str, strict: bool) -> Element | None:
    """``name`` in ``container``: a member of a group, or a numeric field of a compound
    dataset (``path`` is how anndata names it)."""
    node = child(root, container, strict)
    if node is None:
        return None
    if is_array(node):
        return Element(path, container, name) if name in numeric_fields(node) else None
    stored = f"{container}/{name}"
    return Element(path, stored) if child(root, stored, strict) is not None else None


def _is_graph(node) -> bool:
    """What anndata moves from ``uns/neighbors`` to ``obsp``: a sparse or 2-D matrix."""
    return bool(sparse_layout(node)) or (is_array(node) and len(node.shape) == 2)


def check_raw(root, where: str) -> None:
    """anndata refuses a file that keeps raw twice: a ``raw`` group and ``raw.*`` entries."""
    modern = child(root, "raw")
    legacy = sorted(k for k in root.keys() if k.startswith("raw."))
    if modern is not None and not is_array(modern) and len(modern.keys()) and legacy:
        raise InputError(
            f"{where} keeps raw twice: a raw group and the older {legacy} (anndata refuses "
            "to read such a file).",
            "remove one of them (keep the raw group), e.g. with h5py: del f['raw.X'].",
        )


def locate(root, element: str, strict: bool = False) -> Element | None:
    """Where ``root`` keeps the element anndata names ``element`` (in any of its layouts),
    or None."""
    head, _, rest = element.partition("/")
    if head == "obsp" and rest in GRAPHS:  # anndata moves these over any obsp/<name>
        graph = f"uns/neighbors/{rest}"
        node = child(root, graph, strict)
        if node is not None and _is_graph(node):
            return Element(element, graph)
    if child(root, element, strict) is not None:
        return Element(element, element)
    if head == "raw" and rest:
        sub, _, name = rest.partition("/")
        if not name:
            stored = f"raw.{sub}"
            return Element(element, stored) if child(root, stored, strict) is not None else None
        if "/" not in name:
            return _member(root, f"raw.{sub}", name, element, strict)
    if head in SLOTS and rest and "/" not in rest:
        return _member(root, head, rest, element, strict)
    return None


def _names(root, container: str) -> list[str]:
    node = child(root, container)
    if node is None:
        return []
    return numeric_fields(node) if is_array(node) else sorted(node.keys())


def _holds_matrix(root, element: str) -> bool:
    try:
        found = locate(root, element)
    except InputError:
        return False
    if found is None:
        return False
    return found.field is not None or is_matrix(child(root, found.stored))


def elements(root) -> list[str]:
    """Every matrix an AnnData file holds, under the #path that reads it: X, raw/X, obsm/...,
    layers/..., obsp/..., varm/..., varp/..., raw/varm/...; in any layout anndata reads."""
    candidates = ["X", "raw/X"]
    for slot in SLOTS:
        names = set(_names(root, slot))
        if slot == "obsp":
            names |= {g for g in GRAPHS if child(root, f"uns/neighbors/{g}") is not None}
        candidates += [f"{slot}/{k}" for k in sorted(names)]
    raw_varm = set(_names(root, "raw/varm")) | set(_names(root, "raw.varm"))
    candidates += [f"raw/varm/{k}" for k in sorted(raw_varm)]
    return [path for path in candidates if _holds_matrix(root, path)]


def check_anndata(root, loc: Location, kind: str) -> None:
    if text_attr(root, "encoding-type") != "anndata" and not ("obs" in root and "var" in root):
        raise InputError(
            f"{loc.url} is not an AnnData {kind} (its root has no "
            "encoding-type 'anndata', nor obs and var).",
            "write it with anndata, or read a plain array: a .h5 / .zarr path "
            "with #path naming the dataset.",
        )
