"""The t-SNE gradient and KL divergence on in-memory arrays: attraction over the sparse P plus
repulsion, exact or by FFT-accelerated interpolation (see ``tsne_kernels``).

``Interpolation`` holds the grid parameters: ``n_interp`` nodes per box and dimension (p = 3),
at least ``min_intervals`` boxes per dimension, boxes of side at most ``ints_in_interval``
embedding units (Linderman et al. 2019; openTSNE's defaults 3, 50, 1 in 2-D), and a cap on
boxes per dimension so that the grid stays bounded (``MAX_BOXES``). The circular convolution is
done with ``scipy.fft`` on a padded length L >= 2N - 1 with small prime factors.
"""

from __future__ import annotations

from dataclasses import dataclass

import numba
import numpy as np
import scipy.fft

from .tsne_kernels import (
    attraction,
    exact_repulsion,
    fused_step,
    interp_gather,
    interp_scatter,
    interp_weights,
    kl_attractive_part,
)

__all__ = [
    "Interpolation",
    "InterpolationGrid",
    "GridSpec",
    "convolve",
    "potentials",
    "repulsion",
    "tsne_gradient",
    "tsne_step",
    "kl_divergence",
    "point_z",
    "MAX_BOXES",
]

MAX_BOXES = {1: 4096, 2: 400, 3: 24}  # grid side N = boxes * p: 2-D 1200^2, 3-D 72^3 nodes


@dataclass(frozen=True)
class Interpolation:
    n_interp: int = 3
    min_intervals: int = 50
    ints_in_interval: float = 1.0


_KERNEL_CACHE: dict = {}  # (d, L, delta) -> FFT of the kernel; few entries, reused while
# the grid keeps its node spacing (boxes of exactly ``ints_in_interval`` once the embedding is
# wider than min_intervals boxes)


def _kernel_hat(d: int, N: int, L: int, delta: float, workers: int):
    """FFT of w^2 = (1 + r^2)^-2 at the node offsets, laid out circularly (length L)."""
    key = (d, L, N, delta)
    hat = _KERNEL_CACHE.get(key)
    if hat is not None:
        return hat
    idx = np.arange(L)
    off = np.where(idx < N, idx, idx - L).astype(np.float64)
    off[(idx >= N) & (idx <= L - N)] = 0.0  # offsets the crop never uses
    r2 = np.zeros((L,) * d)
    for k in range(d):
        shape = [1] * d
        shape[k] = L
        r2 = r2 + (delta * off).reshape(shape) ** 2
    hat = scipy.fft.rfftn(1.0 / (1.0 + r2) ** 2, workers=workers).astype(np.complex64)
    if len(_KERNEL_CACHE) >= 4:
        _KERNEL_CACHE.pop(next(iter(_KERNEL_CACHE)))
    _KERNEL_CACHE[key] = hat
    return hat


def _geometry(span: float, d: int, interp: Interpolation) -> tuple[int, float]:
    """(boxes per dimension, box side h). Boxes of side exactly ``ints_in_interval`` once the
    span needs more than ``min_intervals`` of them (so the node spacing, hence the kernel's
    FFT, stays the same from one iteration to the next), padded up to the FFT length."""
    p, hmax = int(interp.n_interp), float(interp.ints_in_interval)
    if span <= 0:
        return int(interp.min_intervals), 1.0
    if span <= interp.min_intervals * hmax:
        return int(interp.min_intervals), span / interp.min_intervals
    boxes = int(np.ceil(span / hmax))
    if boxes > MAX_BOXES[d]:
        return MAX_BOXES[d], span / MAX_BOXES[d]
    L = scipy.fft.next_fast_len(2 * boxes * p - 1, real=True)
    return int(min(max(boxes, (L + 1) // (2 * p)), MAX_BOXES[d])), hmax


class InterpolationGrid:
    """The grid laid over a set of points and the nodes' potentials under w^2 from the
    charges of those points (built once for a fixed reference embedding; rebuilt every
    iteration in a fit)."""

    def __init__(
        self, Y: np.ndarray, interp: Interpolation, workers: int = 1, per_point: bool = True
    ):
        """``per_point``: also the |y|^2 charge, for per-point normalisations Z_i (a
        transform); a fit needs only the total Z, which follows from d + 1 charges."""
        d = Y.shape[1]
        # charges and potentials are taken relative to the centre (smaller magnitudes for
        # the single-precision FFT); `potentials_at` converts back
        self.spec = spec = GridSpec.around(Y.min(axis=0), Y.max(axis=0), interp)
        self.center = np.asarray(spec.center, dtype=np.float64)
        self.lo = np.asarray(spec.lo, dtype=np.float64)
        self.h, self.n_boxes, self.p, self.d, self.N = spec.h, spec.n_boxes, spec.p, d, spec.N
        self.workers = workers
        self.boxes, self.weights = spec.weights(Y)
        self.nc = d + 2 if per_point else d + 1
        self.potentials = convolve(
            spec.charges(Y, self.boxes, self.weights, self.nc), self.N, d, self.h / self.p, workers
        )

    def potentials_at(self, Y, boxes=None, weights=None, centred: bool = False):
        """(n, nc): sum_j w^2, sum_j w^2 y_j (, sum_j w^2 |y_j|^2) over the grid's points,
        interpolated at ``Y`` (its own points when boxes/weights are the grid's); in the
        grid's centred coordinates y - center when ``centred``."""
        if boxes is None:
            boxes, weights = self.spec.weights(Y)
        phi = np.empty((Y.shape[0], self.nc))
        interp_gather(boxes, weights, self.p, self.N, self.potentials, phi)
        if not centred:
            self.uncentre(phi)
        return phi

    def uncentre(self, phi):
        """Potentials from centred to absolute coordinates (in place): y_j = yc_j + c."""
        c, d = self.center, self.d
        if self.nc == d + 2:
            phi[:, -1] += 2.0 * phi[:, 1 : d + 1] @ c + (c @ c) * phi[:, 0]
        phi[:, 1 : d + 1] += phi[:, :1] * c
        return phi

    def clip(self, Y):
        """Y clipped into the grid's box (new points must stay where potentials are known)."""
        return np.clip(Y, self.center + self.lo, self.center + self.lo + self.h * self.n_boxes)


def convolve(charges, N: int, d: int, delta: float, workers: int = 1):
    """The nodes' potentials: the charges (N^d, nc) convolved with w^2 over a grid of node
    spacing ``delta`` (single-precision FFT: relative error ~3e-7 of the largest potential,
    far below the interpolation's)."""
    L = scipy.fft.next_fast_len(2 * N - 1, real=True)
    hat = _kernel_hat(d, N, L, delta, workers)
    nc = charges.shape[1]
    grid = np.moveaxis(charges.reshape((N,) * d + (nc,)), -1, 0).astype(np.float32)
    w = workers
    if d == 2:  # pruned: the padding rows are zero on the way in and cropped on the way out
        A = scipy.fft.rfft(grid, n=L, axis=2, workers=w)
        A = scipy.fft.fft(A, n=L, axis=1, workers=w, overwrite_x=True)
        A *= hat[None]
        A = scipy.fft.ifft(A, axis=1, workers=w, overwrite_x=True)[:, :N]
        pot = scipy.fft.irfft(A, n=L, axis=2, workers=w)[:, :, :N]
    else:
        axes = tuple(range(1, d + 1))
        A = scipy.fft.rfftn(grid, s=(L,) * d, axes=axes, workers=w)
        A *= hat[None]
        pot = scipy.fft.irfftn(A, s=(L,) * d, axes=axes, workers=w)
        pot = pot[(slice(None),) + (slice(0, N),) * d]
    return np.ascontiguousarray(np.moveaxis(pot, 0, -1).reshape(N**d, nc), dtype=np.float64)


@dataclass(frozen=True)
class GridSpec:
    """Where the interpolation grid lies, from the bounding box of all points: what the
    blocks of a distributed fit need to put their points' charges on one shared grid."""

    center: tuple
    lo: tuple  # the grid's corner, relative to the centre
    h: float
    n_boxes: int
    p: int

    @classmethod
    def around(cls, lo, hi, interp: Interpolation) -> "GridSpec":
        lo, hi = np.asarray(lo, np.float64), np.asarray(hi, np.float64)
        boxes, h = _geometry(float((hi - lo).max()), lo.size, interp)
        c = (lo + hi) / 2
        return cls(tuple(c), tuple(lo - c), float(h), int(boxes), int(interp.n_interp))

    @property
    def d(self) -> int:
        return len(self.center)

    @property
    def N(self) -> int:
        return self.n_boxes * self.p

    def weights(self, Y):
        """(boxes, weights) of the points Y (absolute coordinates)."""
        Yc = np.ascontiguousarray(Y - np.asarray(self.center))
        n, d = Yc.shape
        boxes = np.empty((n, d), dtype=np.int64)
        weights = np.empty((n, d, self.p))
        interp_weights(Yc, np.asarray(self.lo), self.h, self.n_boxes, self.p, boxes, weights)
        return boxes, weights

    def charges(self, Y, boxes, weights, nc: int | None = None):
        """(N^d, nc): the charges 1, y (, |y|^2: nc = d + 2, the default) of the points Y
        (centred), summed per node."""
        d = Y.shape[1]
        Yc = np.ascontiguousarray(Y - np.asarray(self.center))
        charges = np.empty((self.N**d, d + 2 if nc is None else nc))
        interp_scatter(Yc, boxes, weights, self.p, self.N, charges, numba.get_num_threads())
        return charges

    def potentials(self, charges, n: int, workers: int = 1):
        """(potentials (N^d, d + 1) of the charges 1 and y, Z of all the points): Z from the
        grid alone, sum_i [(1 + 2|y_i|^2) phi_0(y_i) - 2 y_i . phi(y_i)] - n with
        sum_i g(y_i) phi(y_i) = potentials . (charges of g) (centred coordinates)."""
        d = self.d
        pot = convolve(
            np.ascontiguousarray(charges[:, : d + 1]), self.N, d, self.h / self.p, workers
        )
        Z = float(
            pot[:, 0] @ charges[:, 0]
            + 2.0 * (pot[:, 0] @ charges[:, d + 1])
            - 2.0 * sum(pot[:, 1 + k] @ charges[:, 1 + k] for k in range(d))
        )
        return pot, Z - n

    def phi(self, Y, boxes, weights, pot):
        """(n, d + 1) potentials at the points Y, in absolute coordinates."""
        phi = np.empty((Y.shape[0], self.d + 1))
        interp_gather(boxes, weights, self.p, self.N, pot, phi)
        c = np.asarray(self.center)
        phi[:, 1:] += phi[:, :1] * c
        return phi


def point_z(Y, phi):
    """Z_i = sum_j w_ij = (1 + |y_i|^2) phi_0 - 2 y_i . phi + phi_{|y|^2} (full potentials)."""
    d = Y.shape[1]
    y2 = (Y * Y).sum(axis=1)
    return (1.0 + y2) * phi[:, 0] - 2.0 * (Y * phi[:, 1 : d + 1]).sum(axis=1) + phi[:, d + 1]


def potentials(Y, method: str, interp: Interpolation, workers: int = 1):
    """(Z, phi (n, >= d + 1)) of the points Y among themselves (see the module docstring).
    FFT: d + 1 charges only, since sum_i phi_{|y|^2}(y_i) = sum_i |y_i|^2 phi_0(y_i) by the
    symmetry of w, so Z = sum_i [(1 + 2|y_i|^2) phi_0 - 2 y_i . phi] - n (in the grid's
    centred coordinates, where the magnitudes that cancel are smallest)."""
    n, d = Y.shape
    if method == "exact":
        phi = np.empty((n, d + 3))
        exact_repulsion(Y, Y, True, phi)
        return float(phi[:, d + 2].sum()), np.ascontiguousarray(phi[:, : d + 2])
    grid = InterpolationGrid(Y, interp, workers, per_point=False)
    phi = grid.potentials_at(Y, grid.boxes, grid.weights, centred=True)
    Yc = Y - grid.center
    Z = (
        float(
            (
                (1.0 + 2.0 * (Yc * Yc).sum(axis=1)) * phi[:, 0]
                - 2.0 * (Yc * phi[:, 1:]).sum(axis=1)
            ).sum()
        )
        - n
    )
    return Z, grid.uncentre(phi)


def repulsion(Y, method: str, interp: Interpolation, workers: int = 1):
    """(Z, (n, d) array sum_j w_ij^2 (y_i - y_j)) of the points Y among themselves."""
    d = Y.shape[1]
    Z, phi = potentials(Y, method, interp, workers)
    return Z, Y * phi[:, :1] - phi[:, 1 : d + 1]


def tsne_step(
    indptr,
    indices,
    data,
    Y,
    Ynew,
    update,
    gains,
    *,
    exaggeration,
    momentum,
    learning_rate,
    min_gain,
    max_step,
    method,
    interp,
    workers=1,
    kl=False,
    data32=None,
):
    """One iteration: Ynew = Y + update (see ``tsne_kernels.fused_step``); returns (Z, KL of
    Y or None), Z and KL at Y (before the step). ``data32``: P's values in single precision
    for the attraction (a third less memory traffic; relative error 6e-8 per term)."""
    Z, phi = potentials(Y, method, interp, workers)
    loss = kl_divergence(indptr, indices, data, Y, Z) if kl else None
    fused_step(
        indptr,
        indices,
        data if data32 is None else data32,
        Y,
        Y,
        phi,
        1.0 / Z,
        exaggeration,
        update,
        gains,
        momentum,
        learning_rate,
        min_gain,
        max_step,
        Ynew,
    )
    return Z, loss


def tsne_gradient(
    indptr,
    indices,
    data,
    Y,
    exaggeration: float,
    method: str,
    interp: Interpolation,
    workers: int = 1,
):
    """(Z, g) with g_i = exaggeration * sum_j p_ij w_ij (y_i - y_j) - sum_j w_ij^2 (y_i - y_j) / Z,
    a quarter of the gradient of KL(exaggeration * P || Q)."""
    Z, rep = repulsion(Y, method, interp, workers)
    grad = np.empty_like(Y)
    attraction(indptr, indices, data, Y, Y, float(exaggeration), grad)
    grad -= rep / Z
    return Z, grad


def kl_divergence(indptr, indices, data, Y, Z: float) -> float:
    """KL(P || Q) = sum p log(p / w) + log Z (sum p = 1), with Z from the repulsion."""
    rows = np.empty(Y.shape[0])
    kl_attractive_part(indptr, indices, data, Y, Y, rows)
    return float(rows.sum() + data.sum() * np.log(Z))
