"""A picture of the first two dimensions of an embedding: points, or density for large n."""

from __future__ import annotations

import io

import numpy as np

SCATTER_MAX = 20_000


def embedding_png(
    Y: np.ndarray,
    *,
    title: str = "",
    n_total: int | None = None,
    labels: np.ndarray | None = None,
    background: np.ndarray | None = None,
) -> bytes:
    """A PNG picture of the first two dimensions of an embedding.

    Up to `SCATTER_MAX` rows: a scatter plot (coloured by ``labels`` if given); more: a
    hexagonal-bin density with a log colour scale (``labels`` unused). A one-column
    embedding is drawn against 0. Drawn with matplotlib's Agg backend, off screen.

    Parameters
    ----------
    Y : array-like of shape (n, k)
        The embedding (in memory), k >= 1.
    title : str, default ""
        The title, above the point count.
    n_total : int or None, default None
        The rows of the whole embedding when ``Y`` is a sample of them (shown as
        "n of n_total points").
    labels : numpy.ndarray of shape (n,) or None, default None
        Values colouring the points (matplotlib's ``tab10`` colour map).
    background : array-like of shape (m, k) or None, default None
        Points drawn first, in light grey, under the others (a map that new rows were
        placed on).

    Returns
    -------
    bytes
        The PNG file (600 x 600 pixels).
    """
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    Y = np.asarray(Y, dtype=np.float64)
    fig, ax = plt.subplots(figsize=(6, 6), dpi=100)
    x = Y[:, 0]
    y = Y[:, 1] if Y.shape[1] > 1 else np.zeros_like(x)
    if background is not None:
        B = np.asarray(background, dtype=np.float64)
        by = B[:, 1] if B.shape[1] > 1 else np.zeros(len(B))
        ax.scatter(B[:, 0], by, s=2, c="0.8", alpha=0.5, linewidths=0, label="map")
    if len(Y) > SCATTER_MAX:
        hb = ax.hexbin(x, y, gridsize=120, bins="log", cmap="viridis", mincnt=1)
        fig.colorbar(hb, ax=ax, label="points (log)")
    else:
        ax.scatter(
            x,
            y,
            s=3,
            c=labels if labels is not None else "tab:blue",
            cmap=(None if labels is None else "tab10" if len(np.unique(labels)) <= 10 else "tab20"),
            alpha=0.6,
            linewidths=0,
        )
    shown = f"{len(Y):,}" + (f" of {n_total:,}" if n_total and n_total != len(Y) else "")
    ax.set_title(f"{title}\n{shown} points" if title else f"{shown} points", fontsize=10)
    ax.set_xlabel("dimension 1")
    ax.set_ylabel("dimension 2" if Y.shape[1] > 1 else "")
    buf = io.BytesIO()
    fig.tight_layout()
    fig.savefig(buf, format="png")
    plt.close(fig)
    return buf.getvalue()
