"""numba kernels that turn a kNN graph into the affinities of t-SNE, SNE and UMAP (in memory).

- `perplexity_rows`: per row, the Gaussian precision beta_i = 1 / (2 sigma_i^2) whose
  conditional distribution p_{j|i} ~ exp(-beta_i d_ij^2) over the row's neighbours has
  entropy log(perplexity) (van der Maaten & Hinton 2008), by bisection on beta (H(beta) is
  decreasing).
- `smooth_knn_rows`: UMAP's rho_i (distance to the nearest neighbour) and sigma_i with
  sum_j exp(-max(0, d_ij - rho_i) / sigma_i) = log2(k) (McInnes, Healy & Melville 2018).
- `symmetric_merge`: the union of a directed graph and its transpose as CSR, with the value of
  (i, j) and of (j, i) combined by a rule: t-SNE's (a + b) * scale, or UMAP's fuzzy union
  a + b - a b (mixed with the intersection a b by ``mix``). Built without scipy's COO
  temporaries (int32 columns, one float64 value per stored edge).

Every row is independent and is written by one thread, so results do not depend on the
number of threads.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

__all__ = [
    "perplexity_rows",
    "smooth_knn_rows",
    "membership_rows",
    "symmetric_merge",
    "symmetric_merge_rows",
    "reverse_entries",
    "MERGE_SUM",
    "MERGE_FUZZY",
]

MERGE_SUM = 0  # (a + b) * scale: t-SNE's (p_j|i + p_i|j) / 2n
MERGE_FUZZY = 1  # mix * (a + b - a b) + (1 - mix) * a b: UMAP's fuzzy union / intersection


@njit(cache=True, nogil=True)
def _entropy_at(d, beta, dmin):
    """(entropy in nats, normaliser) of p_j ~ exp(-beta (d_j - dmin)) over the finite d_j."""
    s = 0.0
    sd = 0.0
    for j in range(d.shape[0]):
        if np.isfinite(d[j]):
            x = d[j] - dmin
            e = np.exp(-beta * x)
            s += e
            sd += x * e
    return np.log(s) + beta * sd / s, s


@njit(parallel=True, cache=True, nogil=True)
def perplexity_rows(dist2, target, tol, max_iter, P, beta_out, err_out):
    """Fill ``P`` (n, k) with p_{j|i} and ``beta_out`` with beta_i so that the entropy (nats) of
    each row is ``target`` = log(perplexity) to within ``tol``; ``err_out`` holds
    |H_i - target| reached. Non-finite distances (missing neighbours) get p = 0."""
    n, k = dist2.shape
    for i in prange(n):
        d = dist2[i]
        dmin = np.inf
        mean = 0.0
        cnt = 0
        for j in range(k):
            if np.isfinite(d[j]):
                dmin = min(dmin, d[j])
                mean += d[j]
                cnt += 1
        mean = mean / max(cnt, 1) - dmin
        beta = 1.0 / mean if mean > 0 else 1.0
        lo, hi = 0.0, np.inf
        H, s = _entropy_at(d, beta, dmin)
        for _ in range(max_iter):
            diff = H - target
            if abs(diff) <= tol:
                break
            if diff > 0:  # too flat: sharpen
                lo = beta
                beta = beta * 2.0 if hi == np.inf else 0.5 * (beta + hi)
            else:
                hi = beta
                beta = 0.5 * (beta + lo)
            H, s = _entropy_at(d, beta, dmin)
        for j in range(k):
            P[i, j] = np.exp(-beta * (d[j] - dmin)) / s if np.isfinite(d[j]) else 0.0
        beta_out[i] = beta
        err_out[i] = abs(H - target)


@njit(parallel=True, cache=True, nogil=True)
def smooth_knn_rows(
    dist, k_eff, local_connectivity, bandwidth, n_iter, tol, min_scale, rho_out, sigma_out
):
    """UMAP's rho_i and sigma_i per row of the (n, k) distances (ascending, self excluded):
    rho_i interpolates the ``local_connectivity``-th nearest nonzero distance; sigma_i solves
    sum_j exp(-max(0, d_ij - rho_i) / sigma_i) = log2(k_eff) * bandwidth by bisection,
    floored at ``min_scale`` times the mean distance (of the row, or of all rows)."""
    n, k = dist.shape
    target = np.log2(k_eff) * bandwidth
    total = 0.0
    cnt = 0
    for i in range(n):
        for j in range(k):
            if np.isfinite(dist[i, j]):
                total += dist[i, j]
                cnt += 1
    mean_all = total / max(cnt, 1)
    for i in prange(n):
        d = dist[i]
        nz = 0
        for j in range(k):
            if d[j] > 0.0 and np.isfinite(d[j]):
                nz += 1
        rho = 0.0
        if nz >= local_connectivity:
            idx = int(np.floor(local_connectivity))
            frac = local_connectivity - idx
            # the idx-th and (idx+1)-th positive distances
            seen = 0
            prev = 0.0
            for j in range(k):
                if d[j] > 0.0 and np.isfinite(d[j]):
                    seen += 1
                    if seen == idx:
                        prev = d[j]
                        if frac <= tol:
                            break
                    elif seen == idx + 1:
                        prev = prev + frac * (d[j] - prev)
                        break
            rho = prev
        elif nz > 0:
            for j in range(k):
                if d[j] > rho and np.isfinite(d[j]):
                    rho = d[j]
        lo, hi, mid = 0.0, np.inf, 1.0
        for _ in range(n_iter):
            psum = 0.0
            for j in range(k):
                if np.isfinite(d[j]):
                    x = d[j] - rho
                    psum += np.exp(-(x / mid)) if x > 0 else 1.0
            if abs(psum - target) < tol:
                break
            if psum > target:
                hi = mid
                mid = 0.5 * (lo + hi)
            else:
                lo = mid
                mid = mid * 2.0 if hi == np.inf else 0.5 * (lo + hi)
        mean_i = 0.0
        c = 0
        for j in range(k):
            if np.isfinite(d[j]):
                mean_i += d[j]
                c += 1
        mean_i /= max(c, 1)
        floor = min_scale * (mean_i if rho > 0.0 else mean_all)
        rho_out[i] = rho
        sigma_out[i] = max(mid, floor)


@njit(parallel=True, cache=True, nogil=True)
def membership_rows(dist, rho, sigma, out):
    """UMAP's directed memberships exp(-max(0, d_ij - rho_i) / sigma_i) (0 for missing)."""
    n, k = dist.shape
    for i in prange(n):
        for j in range(k):
            x = dist[i, j] - rho[i]
            if not np.isfinite(dist[i, j]):
                out[i, j] = 0.0
            elif x <= 0.0 or sigma[i] == 0.0:
                out[i, j] = 1.0
            else:
                out[i, j] = np.exp(-x / sigma[i])


@njit(cache=True, nogil=True)
def _scatter_both(indices, values, n):
    deg = np.zeros(n + 1, np.int64)
    nr, k = indices.shape
    for i in range(nr):
        for t in range(k):
            j = indices[i, t]
            if j >= 0 and j != i:
                deg[i + 1] += 1
                deg[j + 1] += 1
    ptr = np.cumsum(deg)
    cols = np.empty(ptr[n], np.int32)
    vals = np.empty(ptr[n], np.float64)
    out = np.empty(ptr[n], np.bool_)
    fill = ptr[:n].copy()
    for i in range(nr):
        for t in range(k):
            j = indices[i, t]
            if j < 0 or j == i:
                continue
            p = fill[i]
            cols[p], vals[p], out[p] = j, values[i, t], True
            fill[i] += 1
            p = fill[j]
            cols[p], vals[p], out[p] = i, values[i, t], False
            fill[j] += 1
    return ptr, cols, vals, out


@njit(parallel=True, cache=True, nogil=True)
def _merge_rows(ptr, cols, vals, out, mode, scale, mix, counts):
    n = ptr.shape[0] - 1
    for i in prange(n):
        s, e = ptr[i], ptr[i + 1]
        if e == s:
            counts[i] = 0
            continue
        order = np.argsort(cols[s:e], kind="mergesort")
        c = cols[s:e][order]
        v = vals[s:e][order]
        o = out[s:e][order]
        w = 0
        t = 0
        m = e - s
        while t < m:
            a = 0.0
            b = 0.0
            col = c[t]
            while t < m and c[t] == col:
                if o[t]:
                    a += v[t]
                else:
                    b += v[t]
                t += 1
            if mode == 0:
                r = (a + b) * scale
            else:
                r = mix * (a + b - a * b) + (1.0 - mix) * a * b
            if r != 0.0:
                cols[s + w] = col
                vals[s + w] = r
                w += 1
        counts[i] = w


@njit(cache=True, nogil=True)
def _compact(ptr, cols, vals, counts):
    n = counts.shape[0]
    new_ptr = np.zeros(n + 1, np.int64)
    for i in range(n):
        new_ptr[i + 1] = new_ptr[i] + counts[i]
    c2 = np.empty(new_ptr[n], np.int32)
    v2 = np.empty(new_ptr[n], np.float64)
    for i in range(n):
        s = ptr[i]
        d = new_ptr[i]
        for t in range(counts[i]):
            c2[d + t] = cols[s + t]
            v2[d + t] = vals[s + t]
    return new_ptr, c2, v2


def symmetric_merge(
    indices: np.ndarray, values: np.ndarray, n: int, mode: int, scale: float = 1.0, mix: float = 1.0
):
    """(indptr int64, indices int32, data float64) of the symmetric n x n matrix combining
    the directed (n, k) graph ``indices`` / ``values`` with its transpose (see the module
    docstring); columns sorted within each row, zeros dropped."""
    indices = np.ascontiguousarray(indices, dtype=np.int64)
    values = np.ascontiguousarray(values, dtype=np.float64)
    ptr, cols, vals, out = _scatter_both(indices, values, int(n))
    counts = np.empty(int(n), np.int64)
    _merge_rows(ptr, cols, vals, out, int(mode), float(scale), float(mix), counts)
    return _compact(ptr, cols, vals, counts)


@njit(cache=True, nogil=True)
def _scatter_rows(indices, values, start, rsrc, rdst, rvals, nrows):
    """`_scatter_both` for rows [start, start + nrows) only: their own directed edges and the
    reverse entries (rsrc -> rdst, rdst in the block) of edges listed by other rows."""
    deg = np.zeros(nrows + 1, np.int64)
    nr, k = indices.shape
    for i in range(nr):
        for t in range(k):
            j = indices[i, t]
            if j >= 0 and j != start + i:
                deg[i + 1] += 1
    for t in range(rdst.shape[0]):
        deg[rdst[t] - start + 1] += 1
    ptr = np.cumsum(deg)
    cols = np.empty(ptr[nrows], np.int32)
    vals = np.empty(ptr[nrows], np.float64)
    out = np.empty(ptr[nrows], np.bool_)
    fill = ptr[:nrows].copy()
    for i in range(nr):
        for t in range(k):
            j = indices[i, t]
            if j < 0 or j == start + i:
                continue
            p = fill[i]
            cols[p], vals[p], out[p] = j, values[i, t], True
            fill[i] += 1
    for t in range(rdst.shape[0]):
        r = rdst[t] - start
        p = fill[r]
        cols[p], vals[p], out[p] = rsrc[t], rvals[t], False
        fill[r] += 1
    return ptr, cols, vals, out


def reverse_entries(indices: np.ndarray, values: np.ndarray, start: int, bounds):
    """The edges (i, j) of rows [start, start + len(indices)) as reverse entries for the row
    blocks ``bounds`` [(s, e), ...]: per block, (src i, dst j, value) with j in [s, e), in
    the order of the rows (missing neighbours and self-loops dropped). Row numbers are int32
    when they fit (a block's pieces are held until every block has merged its rows)."""
    indices = np.asarray(indices)
    n, k = indices.shape
    itype = np.int32 if bounds and max(e for _, e in bounds) <= np.iinfo(np.int32).max else np.int64
    src = np.repeat(np.arange(start, start + n, dtype=itype), k)
    dst = indices.reshape(-1)
    vals = np.asarray(values, dtype=np.float64).reshape(-1)
    keep = (dst >= 0) & (dst != src)
    pieces = []
    for s, e in bounds:  # one pass per block: no sort, no filtered copy of every edge
        sel = keep & (dst >= s) & (dst < e)
        pieces.append((src[sel], dst[sel].astype(itype), vals[sel]))
    return pieces


def symmetric_merge_rows(
    indices: np.ndarray,
    values: np.ndarray,
    start: int,
    reverse,
    mode: int,
    scale: float = 1.0,
    mix: float = 1.0,
):
    """Rows [start, start + len(indices)) of `symmetric_merge` (the same values, bit for bit):
    ``indices`` / ``values`` are those rows of the directed graph, ``reverse`` the
    `reverse_entries` pieces for this block from every block of rows."""
    indices = np.ascontiguousarray(indices, dtype=np.int64)
    values = np.ascontiguousarray(values, dtype=np.float64)
    nrows = indices.shape[0]
    if reverse:
        rsrc = np.concatenate([r[0] for r in reverse]).astype(np.int64, copy=False)
        rdst = np.concatenate([r[1] for r in reverse]).astype(np.int64, copy=False)
        rvals = np.concatenate([r[2] for r in reverse])
    else:
        rsrc = rdst = np.empty(0, np.int64)
        rvals = np.empty(0, np.float64)
    ptr, cols, vals, out = _scatter_rows(indices, values, int(start), rsrc, rdst, rvals, nrows)
    counts = np.empty(nrows, np.int64)
    _merge_rows(ptr, cols, vals, out, int(mode), float(scale), float(mix), counts)
    return _compact(ptr, cols, vals, counts)
