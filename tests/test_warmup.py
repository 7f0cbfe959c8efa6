"""`python -m dimred_dask.warmup`: each numba path of the package runs once."""

from __future__ import annotations


def test_warmup_runs_every_numba_path_once():
    import io

    from dimred_dask.warmup import warm

    out = io.StringIO()
    seconds = warm(out)
    lines = out.getvalue().splitlines()
    assert [line.rsplit(" (", 1)[0].split(": ")[1] for line in lines] == [
        "kNN graph (NN-descent)",
        "kNN graph of sparse rows (NN-descent)",
        "kNN index and its query",
        "UMAP",
        "t-SNE",
        "Isomap",
    ]
    assert seconds > 0
