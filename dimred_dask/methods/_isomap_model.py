"""The model `isomap` and `landmark_isomap` return (`methods.isomap`): the training
embedding, the classical MDS of the reference points' geodesics, and what ``transform`` of new
points reads (their neighbours among the training rows, the geodesics through them)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..graphs import geodesics_through_neighbours
from ._base import kept, rows_at
from ._graph_common import GraphModel
from .mds import MDSModel

__all__ = ["IsomapModel"]


@dataclass
class IsomapModel(GraphModel):
    """A fitted (landmark) Isomap. ``reference`` holds the geodesics from every training row
    to the reference points (all n training rows, or the m landmarks): (n, n) or (n, m)."""

    embedding: np.ndarray  # (n, k)
    mds: MDSModel  # classical MDS of the reference points' geodesics (precomputed)
    reference: np.ndarray  # (n, r) geodesics training row -> reference point
    X_fit: np.ndarray  # (n, d) the training rows (new points find their neighbours there)
    rotation: np.ndarray  # (k, k) landmark alignment (identity for full Isomap)
    offset: np.ndarray  # (k,) subtracted before the rotation (zero for full Isomap)
    n_neighbors: int
    metric: str
    landmark_indices: np.ndarray | None = None  # (m,) landmark rows; None for full Isomap
    info: dict = field(default_factory=dict)

    _ARRAYS = ("embedding", "reference", "X_fit", "rotation", "offset", "landmark_indices")

    @property
    def eigenvalues(self) -> np.ndarray:
        return self.mds.eigenvalues

    def arrays(self) -> dict:
        return {**super().arrays(), **{f"mds_{k}": v for k, v in self.mds.arrays().items()}}

    def summary(self) -> dict:
        """`ArrayModel.summary` and the classical MDS's negative part, stress and
        explained variance."""
        mds = self.mds
        return {
            **super().summary(),
            "negative_mass": mds.negative_mass,
            "negative_ratio": mds.negative_ratio,
            "stress": float(mds.stress),
            "explained_variance_ratio": np.asarray(mds.explained_variance_ratio, float).tolist(),
        }

    def scalars(self) -> dict:
        return {
            "n_neighbors": int(self.n_neighbors),
            "metric": self.metric,
            "mds": self.mds.scalars(),
            **self.info,
        }

    @classmethod
    def from_arrays(cls, arrays: dict, scalars: dict):
        mds = MDSModel.from_arrays(
            {k[4:]: v for k, v in arrays.items() if k.startswith("mds_")}, scalars["mds"]
        )
        kw = {n: kept(arrays[f"{n}_"]) for n in cls._ARRAYS if f"{n}_" in arrays}
        info = {k: v for k, v in scalars.items() if k not in ("n_neighbors", "metric", "mds")}
        return cls(
            mds=mds,
            n_neighbors=int(scalars["n_neighbors"]),
            metric=scalars["metric"],
            info=info,
            **kw,
        )

    def _placer(self):
        """A new row's geodesics to the reference points through its neighbours, then the
        MDS triangulation (and the landmark alignment)."""
        ref, mds, rot, off = self.reference, self.mds, self.rotation, self.offset

        def place(block, idx, dist):
            uniq, at = np.unique(idx, return_inverse=True)  # only these rows of ref are read
            g = geodesics_through_neighbours(at.reshape(idx.shape), dist, rows_at(ref, uniq))
            y = np.asarray(mds.transform(g), np.float64)
            return (y - off) @ rot

        return place
