"""Small synthetic manifolds for the SDP embedding tests and benchmark (MVU, landmark MVU,
action respecting embedding). Each returns the data and the ground-truth coordinate."""

from __future__ import annotations

import numpy as np


def swiss_roll(
    n: int,
    *,
    height: float = 8.0,
    turns: tuple = (1.5, 4.5),
    noise: float = 0.0,
    extra_dims: int = 0,
    seed: int = 0,
):
    """Points on the swiss roll (t cos t, h, t sin t), t = pi * U(turns); returns (X, t).
    ``extra_dims`` zero coordinates are appended and the result rotated at random (the same
    roll seen in a higher-dimensional space), then ``noise`` is added to every coordinate."""
    rng = np.random.default_rng(seed)
    t = np.pi * (turns[0] + (turns[1] - turns[0]) * rng.random(n))
    X = np.c_[t * np.cos(t), height * rng.random(n), t * np.sin(t)]
    if extra_dims:
        X = np.c_[X, np.zeros((n, extra_dims))]
        q, _ = np.linalg.qr(rng.standard_normal((X.shape[1], X.shape[1])))
        X = X @ q
    if noise:
        X = X + noise * rng.standard_normal(X.shape)
    return X, t


def curved_sheet(
    n: int, *, length: float = 4.0, width: float = 2.0, radius: float = 1.0, seed: int = 0
):
    """A 2-D sheet bent around a cylinder of ``radius`` in 3-D; returns (X, arc length u)."""
    rng = np.random.default_rng(seed)
    u, v = length * rng.random(n), width * rng.random(n)
    return np.c_[radius * np.sin(u / radius), v, radius * np.cos(u / radius)], u


def robot_walk(
    forward: int = 40,
    back: int = 20,
    *,
    pixels: int = 64,
    step: int = 1,
    smooth: float = 8.0,
    noise: float = 0.01,
    seed: int = 0,
):
    """A robot on a line takes ``forward`` steps forward, then ``back`` steps back, and
    photographs a textured wall at each stop: observation t is the ``pixels``-wide crop of a
    random texture (white noise smoothed by a Gaussian of ``smooth`` pixels) at its position:
    a high-dimensional, nonlinear view of a 1-D position, plus pixel noise. Returns (images
    (n, pixels), actions (n - 1,) with 0 =
    forward and 1 = back, positions (n,))."""
    rng = np.random.default_rng(seed)
    pos = np.r_[np.arange(forward + 1), forward - np.arange(1, back + 1)]
    raw = rng.standard_normal((forward + 2) * step + pixels + 80)
    half = int(4 * smooth)
    kernel = np.exp(-0.5 * (np.arange(-half, half + 1) / smooth) ** 2)
    texture = np.convolve(raw, kernel / kernel.sum(), mode="same")
    texture = (texture - texture.mean()) / texture.std()
    images = np.stack([texture[p * step : p * step + pixels] for p in pos])
    images = images + noise * rng.standard_normal(images.shape)
    actions = np.r_[np.zeros(forward, dtype=np.int64), np.ones(back, dtype=np.int64)]
    return images, actions, pos.astype(np.float64)
