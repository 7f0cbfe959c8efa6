"""numba kernels of the t-SNE and SNE optimisers (in memory).

Gradient convention (as openTSNE's): the optimiser works with
g_i = sum_j (p_ij - q_ij) w_ij (y_i - y_j), w_ij = (1 + |y_i - y_j|^2)^-1, which is a quarter
of dKL/dy_i (van der Maaten & Hinton 2008: 4 sum_j ...); the learning rate n / exaggeration is
meant for it.
g_i = attraction - repulsion with attraction = sum_j p_ij w_ij (y_i - y_j) over the sparse P and
repulsion = sum_j w_ij^2 (y_i - y_j) / Z, Z = sum_{k != l} w_kl.

Repulsion is computed exactly (all pairs, O(n^2), for small n) or by FFT-accelerated
interpolation (Linderman et al. 2019, "FIt-SNE"): the box [lo, lo + n_boxes h)^d is cut into
boxes with ``p`` equispaced interpolation nodes each; a point's charges
(1, y_1..y_d, |y|^2) are spread to the p^d nodes of its box with Lagrange weights, the nodes'
potentials under the kernel w^2 are one circular convolution (FFT, Toeplitz structure of
equispaced nodes), and each point reads its potentials back with the same weights. From the
potentials phi_0 = sum_j w_ij^2, phi_k = sum_j w_ij^2 y_jk, phi_{d+1} = sum_j w_ij^2 |y_j|^2:
repulsion_i = (y_i phi_0 - phi) / Z and, because w = w^2 (1 + |y_i|^2 - 2 y_i.y_j + |y_j|^2),
Z = sum_i [(1 + |y_i|^2) phi_0 - 2 y_i . phi + phi_{d+1}] - n.

Determinism: every per-point sum is done by the thread that owns the point, in index order;
in the spread to the grid, every node sums its box's points in index order (each thread owns a
slab of boxes). Results are identical for any number of threads.
"""

from __future__ import annotations

import os

# OpenMP threads that spin while waiting burn the cores other processes (Dask workers, other
# jobs) need; passive waiting costs little here (few parallel regions per iteration) and
# avoids collapses of 100x on a busy machine. Read by libgomp when numba first loads it.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import numpy as np  # noqa: E402
from numba import njit, prange  # noqa: E402

__all__ = [
    "attraction",
    "fused_step",
    "exact_repulsion",
    "interp_weights",
    "interp_scatter",
    "interp_gather",
    "gains_step",
    "kl_attractive_part",
    "sne_cost_grad",
]


@njit(cache=True, nogil=True, fastmath=True, inline="always")
def _attract_row(i, indptr, indices, data, Y, Yref, acc):
    """acc = sum_j p_ij w_ij (y_i - yref_j) over row i (2-D unrolled)."""
    d = Y.shape[1]
    for k in range(d):
        acc[k] = 0.0
    if d == 2:
        y0, y1 = Y[i, 0], Y[i, 1]
        a0 = 0.0
        a1 = 0.0
        for e in range(indptr[i], indptr[i + 1]):
            j = indices[e]
            t0 = y0 - Yref[j, 0]
            t1 = y1 - Yref[j, 1]
            w = data[e] / (1.0 + t0 * t0 + t1 * t1)
            a0 += w * t0
            a1 += w * t1
        acc[0] = a0
        acc[1] = a1
        return
    for e in range(indptr[i], indptr[i + 1]):
        j = indices[e]
        r2 = 0.0
        for k in range(d):
            t = Y[i, k] - Yref[j, k]
            r2 += t * t
        w = data[e] / (1.0 + r2)
        for k in range(d):
            acc[k] += w * (Y[i, k] - Yref[j, k])


@njit(parallel=True, cache=True, nogil=True, fastmath=True)
def attraction(indptr, indices, data, Y, Yref, scale, out):
    """out_i = scale * sum_j p_ij w_ij (y_i - yref_j) over row i of the CSR P."""
    n, d = Y.shape
    for i in prange(n):
        acc = np.empty(d)
        _attract_row(i, indptr, indices, data, Y, Yref, acc)
        for k in range(d):
            out[i, k] = scale * acc[k]


@njit(parallel=True, cache=True, nogil=True, fastmath=True)
def fused_step(
    indptr,
    indices,
    data,
    Y,
    Yref,
    phi,
    inv_z,
    exaggeration,
    update,
    gains,
    momentum,
    learning_rate,
    min_gain,
    max_step,
    Ynew,
):
    """One optimiser step for every row of ``Y``: g_i = exaggeration * attraction_i
    - (y_i phi_0 - phi_{1..d}) / Z, then the gains / momentum / clipped update of
    `gains_step`, written to ``Ynew`` (Y is only read, so rows never race). ``Yref`` holds
    the points P's columns refer to: Y itself in a fit on one worker, all points when Y is
    one block of rows of them."""
    n, d = Y.shape
    for i in prange(n):
        acc = np.empty(d)
        _attract_row(i, indptr, indices, data, Y, Yref, acc)
        norm = 0.0
        for k in range(d):
            g = exaggeration * acc[k] - (Y[i, k] * phi[i, 0] - phi[i, 1 + k]) * inv_z
            if (update[i, k] > 0.0) != (g > 0.0):
                gains[i, k] += 0.2
            else:
                gains[i, k] = max(gains[i, k] * 0.8, min_gain)
            u = momentum * update[i, k] - learning_rate * gains[i, k] * g
            update[i, k] = u
            norm += u * u
        if max_step > 0.0 and norm > max_step * max_step:
            s = max_step / np.sqrt(norm)
            for k in range(d):
                update[i, k] *= s
        for k in range(d):
            Ynew[i, k] = Y[i, k] + update[i, k]


@njit(parallel=True, cache=True, nogil=True)
def kl_attractive_part(indptr, indices, data, Y, Yref, out_rows):
    """Per row: sum_j p_ij log(p_ij / w_ij) (the KL is its sum plus log Z times sum p)."""
    n, d = Y.shape
    for i in prange(n):
        acc = 0.0
        for e in range(indptr[i], indptr[i + 1]):
            p = data[e]
            if p <= 0.0:
                continue
            j = indices[e]
            r2 = 0.0
            for k in range(d):
                t = Y[i, k] - Yref[j, k]
                r2 += t * t
            acc += p * (np.log(p) + np.log1p(r2))
        out_rows[i] = acc


@njit(parallel=True, cache=True, nogil=True, fastmath=True)
def _exact_repulsion2(Y, Yref, skip_self, y2, phi):
    n = Y.shape[0]
    m = Yref.shape[0]
    for i in prange(n):
        a0 = 0.0
        a1 = 0.0
        a2 = 0.0
        a3 = 0.0
        a4 = 0.0
        y0, y1 = Y[i, 0], Y[i, 1]
        for j in range(m):
            t0 = y0 - Yref[j, 0]
            t1 = y1 - Yref[j, 1]
            w = 1.0 / (1.0 + t0 * t0 + t1 * t1)
            w2 = w * w
            a0 += w2
            a1 += w2 * Yref[j, 0]
            a2 += w2 * Yref[j, 1]
            a3 += w2 * y2[j]
            a4 += w
        if skip_self:  # the j == i term: w = 1
            a0 -= 1.0
            a1 -= Yref[i, 0]
            a2 -= Yref[i, 1]
            a3 -= y2[i]
            a4 -= 1.0
        phi[i, 0] = a0
        phi[i, 1] = a1
        phi[i, 2] = a2
        phi[i, 3] = a3
        phi[i, 4] = a4


@njit(parallel=True, cache=True, nogil=True, fastmath=True)
def exact_repulsion(Y, Yref, skip_self, phi):
    """phi[i] = (sum_j w_ij^2, sum_j w_ij^2 y_j (d), sum_j w_ij^2 |y_j|^2, sum_j w_ij) over
    all reference points j (j != i when ``skip_self``)."""
    n, d = Y.shape
    m = Yref.shape[0]
    y2 = np.empty(m)
    for j in range(m):
        s = 0.0
        for k in range(d):
            s += Yref[j, k] * Yref[j, k]
        y2[j] = s
    if d == 2:
        _exact_repulsion2(Y, Yref, skip_self, y2, phi)
        return
    for i in prange(n):
        acc = np.zeros(d + 3)
        for j in range(m):
            if skip_self and j == i:
                continue
            r2 = 0.0
            for k in range(d):
                t = Y[i, k] - Yref[j, k]
                r2 += t * t
            w = 1.0 / (1.0 + r2)
            w2 = w * w
            acc[0] += w2
            for k in range(d):
                acc[1 + k] += w2 * Yref[j, k]
            acc[d + 1] += w2 * y2[j]
            acc[d + 2] += w
        for c in range(d + 3):
            phi[i, c] = acc[c]


@njit(parallel=True, cache=True, nogil=True)
def interp_weights(Y, lo, h, n_boxes, p, boxes, weights):
    """Per point and dimension: its box and the p Lagrange weights of its position among the
    box's nodes at (j + 1/2) / p (box-local units)."""
    n, d = Y.shape
    nodes = (np.arange(p) + 0.5) / p
    denom = np.ones(p)
    for j in range(p):
        for l in range(p):
            if l != j:
                denom[j] *= nodes[j] - nodes[l]
    for i in prange(n):
        for k in range(d):
            u = (Y[i, k] - lo[k]) / h
            b = int(np.floor(u))
            b = min(max(b, 0), n_boxes - 1)
            u -= b
            boxes[i, k] = b
            for j in range(p):
                w = 1.0
                for l in range(p):
                    if l != j:
                        w *= u - nodes[l]
                weights[i, k, j] = w / denom[j]


@njit(cache=True, nogil=True, inline="always")
def _node(i, m, boxes, weights, p, N, d):
    flat = 0
    w = 1.0
    for k in range(d):
        j = m % p
        m //= p
        flat = flat * N + boxes[i, k] * p + j
        w *= weights[i, k, j]
    return flat, w


@njit(cache=True, nogil=True)
def _scatter2(Y, boxes, weights, p, N, g, b_lo, b_hi):
    """The points whose first box index is in [b_lo, b_hi), in index order."""
    full = g.shape[1] == 4  # with the |y|^2 charge (per-point Z: transforms)
    for i in range(Y.shape[0]):
        if boxes[i, 0] < b_lo or boxes[i, 0] >= b_hi:
            continue
        y0, y1 = Y[i, 0], Y[i, 1]
        y2 = y0 * y0 + y1 * y1
        b0 = boxes[i, 0] * p
        b1 = boxes[i, 1] * p
        for a in range(p):
            wa = weights[i, 0, a]
            row = (b0 + a) * N + b1
            for c in range(p):
                w = wa * weights[i, 1, c]
                f = row + c
                g[f, 0] += w
                g[f, 1] += w * y0
                g[f, 2] += w * y1
                if full:
                    g[f, 3] += w * y2


@njit(parallel=True, cache=True, nogil=True)
def interp_scatter(Y, boxes, weights, p, N, grid, stripes):
    """Spread the charges (1, y[, |y|^2]) of the points to the grid nodes: ``grid`` is
    (N^d, d + 1 or d + 2), overwritten. A box's nodes belong to that box alone, so each node
    sums the points of one box; each of ``stripes`` slabs of boxes along the first axis (one
    per thread) adds its points in index order: the same sums, bit for bit, for any number of
    stripes or threads."""
    n, d = Y.shape
    pd = p**d
    slab = grid.shape[0] // N  # nodes per grid row along the first axis
    n_boxes = N // p
    stripes = max(1, min(stripes, n_boxes))
    for s in prange(stripes):
        b_lo = s * n_boxes // stripes
        b_hi = (s + 1) * n_boxes // stripes
        grid[b_lo * p * slab : b_hi * p * slab] = 0.0
        if d == 2:
            _scatter2(Y, boxes, weights, p, N, grid, b_lo, b_hi)
            continue
        for i in range(n):
            if boxes[i, 0] < b_lo or boxes[i, 0] >= b_hi:
                continue
            y2 = 0.0
            for k in range(d):
                y2 += Y[i, k] * Y[i, k]
            for m in range(pd):
                flat, w = _node(i, m, boxes, weights, p, N, d)
                grid[flat, 0] += w
                for k in range(d):
                    grid[flat, 1 + k] += w * Y[i, k]
                if grid.shape[1] == d + 2:
                    grid[flat, d + 1] += w * y2


@njit(parallel=True, cache=True, nogil=True)
def interp_gather(boxes, weights, p, N, pot, phi):
    """phi[i] = the potentials of the grid nodes of point i's box, interpolated."""
    n, d = boxes.shape
    nc = pot.shape[1]
    pd = p**d
    if d == 2:
        for i in prange(n):
            s0 = 0.0
            s1 = 0.0
            s2 = 0.0
            s3 = 0.0
            b0 = boxes[i, 0] * p
            b1 = boxes[i, 1] * p
            for a in range(p):
                wa = weights[i, 0, a]
                row = (b0 + a) * N + b1
                for c in range(p):
                    w = wa * weights[i, 1, c]
                    f = row + c
                    s0 += w * pot[f, 0]
                    s1 += w * pot[f, 1]
                    s2 += w * pot[f, 2]
                    if nc == 4:
                        s3 += w * pot[f, 3]
            phi[i, 0] = s0
            phi[i, 1] = s1
            phi[i, 2] = s2
            if nc == 4:
                phi[i, 3] = s3
        return
    for i in prange(n):
        for c in range(nc):
            phi[i, c] = 0.0
        for m in range(pd):
            flat, w = _node(i, m, boxes, weights, p, N, d)
            for c in range(nc):
                phi[i, c] += w * pot[flat, c]


@njit(parallel=True, cache=True, nogil=True)
def gains_step(Y, grad, update, gains, momentum, learning_rate, min_gain, max_step):
    """Delta-bar-delta gains (+0.2 when the step keeps its direction against the gradient,
    x0.8 otherwise, floored at ``min_gain``), momentum, step-norm clipping, Y += update."""
    n, d = Y.shape
    for i in prange(n):
        norm = 0.0
        for k in range(d):
            g = grad[i, k]
            if (update[i, k] > 0.0) != (g > 0.0):
                gains[i, k] += 0.2
            else:
                gains[i, k] = max(gains[i, k] * 0.8, min_gain)
            u = momentum * update[i, k] - learning_rate * gains[i, k] * g
            update[i, k] = u
            norm += u * u
        if max_step > 0.0 and norm > max_step * max_step:
            s = max_step / np.sqrt(norm)
            for k in range(d):
                update[i, k] *= s
        for k in range(d):
            Y[i, k] += update[i, k]


@njit(parallel=True, cache=True, nogil=True)
def _sne_row_norms(Y, logz):
    n, d = Y.shape
    for i in prange(n):
        mx = -np.inf
        vals = np.empty(n)
        for j in range(n):
            if j == i:
                vals[j] = -np.inf
                continue
            r2 = 0.0
            for k in range(d):
                t = Y[i, k] - Y[j, k]
                r2 += t * t
            vals[j] = -r2
            mx = max(mx, -r2)
        s = 0.0
        for j in range(n):
            if j != i:
                s += np.exp(vals[j] - mx)
        logz[i] = mx + np.log(s)


@njit(parallel=True, cache=True, nogil=True)
def _sne_grad_rows(indptr, indices, data, t_indptr, t_indices, t_data, Y, logz, grad, cost):
    n, d = Y.shape
    for i in prange(n):
        g = np.zeros(d)
        for e in range(indptr[i], indptr[i + 1]):  # p_{j|i}
            j = indices[e]
            for k in range(d):
                g[k] += data[e] * (Y[i, k] - Y[j, k])
        for e in range(t_indptr[i], t_indptr[i + 1]):  # p_{i|j}
            j = t_indices[e]
            for k in range(d):
                g[k] += t_data[e] * (Y[i, k] - Y[j, k])
        for j in range(n):  # q_{j|i} + q_{i|j}
            if j == i:
                continue
            r2 = 0.0
            for k in range(d):
                t = Y[i, k] - Y[j, k]
                r2 += t * t
            q = np.exp(-r2 - logz[i]) + np.exp(-r2 - logz[j])
            for k in range(d):
                g[k] -= q * (Y[i, k] - Y[j, k])
        c = 0.0
        for e in range(indptr[i], indptr[i + 1]):
            p = data[e]
            if p > 0.0:
                j = indices[e]
                r2 = 0.0
                for k in range(d):
                    t = Y[i, k] - Y[j, k]
                    r2 += t * t
                c += p * (np.log(p) + r2 + logz[i])
        cost[i] = c
        for k in range(d):
            grad[i, k] = 2.0 * g[k]


def sne_cost_grad(indptr, indices, data, t_indptr, t_indices, t_data, Y):
    """SNE (Hinton & Roweis 2002): C = sum_i KL(P_i || Q_i) with q_{j|i} ~ exp(-|y_i - y_j|^2),
    and its
    gradient 2 sum_j (p_{j|i} - q_{j|i} + p_{i|j} - q_{i|j}) (y_i - y_j). O(n^2)."""
    n = Y.shape[0]
    logz = np.empty(n)
    _sne_row_norms(Y, logz)
    grad = np.empty_like(Y)
    cost = np.empty(n)
    _sne_grad_rows(indptr, indices, data, t_indptr, t_indices, t_data, Y, logz, grad, cost)
    return float(cost.sum()), grad
