"""One t-SNE or UMAP optimisation spread over the Dask workers (``optimizer="distributed"``):
P built in row blocks without being assembled, the grid's Z from the summed charges, the same
UMAP embedding bit for bit as one worker's, t-SNE equal to rounding, checkpoints and resume,
a worker SIGKILLed mid-fit, bad settings refused."""

from __future__ import annotations

import os
import signal

import dask
import numpy as np
import pytest
from distributed import Client, LocalCluster
from sklearn.datasets import make_blobs

from dimred_dask._compute import workers
from dimred_dask.blocks.tsne_gradient import GridSpec, Interpolation, potentials
from dimred_dask.errors import InputError, StageError
from dimred_dask.graphs import knn_graph
from dimred_dask.graphs.affinities import GraphRows, affinities, affinity_row_blocks_delayed
from dimred_dask.methods import tsne, umap
from dimred_dask.methods._distributed import block_bounds, plan_optimizer
from dimred_dask.methods._neighbor_runs import MemoryCheckpoint, delayed_literal
from dimred_dask.metrics import trustworthiness


@pytest.fixture(scope="module")
def blobs():
    X, _ = make_blobs(1500, 12, centers=6, random_state=0)
    return X.astype(np.float32)


@pytest.mark.parametrize(
    "kind, params", [("tsne", {"perplexity": 10.0}), ("umap", {"n_neighbors": 12})]
)
def test_row_blocks_of_p_equal_the_assembled_p(blobs, kind, params):
    g = knn_graph(blobs, 30)
    full = affinities(g, kind, **params)
    bounds = [(0, 400), (400, 1111), (1111, 1500)]
    whole = delayed_literal(g)
    per_block = [delayed_literal(GraphRows.of(g, s, e)) for s, e in bounds]  # no task sees all
    blocks, again = (
        dask.compute(
            *affinity_row_blocks_delayed(ref, 1500, g.n_neighbors, kind, bounds, **params),
            scheduler="sync",
        )
        for ref in (whole, per_block)
    )
    for b, c in zip(blocks, again):
        np.testing.assert_array_equal(b.data, c.data)
        np.testing.assert_array_equal(b.indices, c.indices)
    assert [b.shape for b in blocks] == [(400, 1500), (711, 1500), (389, 1500)]
    indptr = np.concatenate(
        [[0]]
        + [
            b.indptr[1:] + off
            for b, off in zip(blocks, np.cumsum([0] + [b.nnz for b in blocks[:-1]]))
        ]
    )
    np.testing.assert_array_equal(indptr, full.indptr)
    np.testing.assert_array_equal(np.concatenate([b.indices for b in blocks]), full.indices)
    np.testing.assert_array_equal(np.concatenate([b.data for b in blocks]), full.data)


@pytest.mark.parametrize("d", [1, 2, 3])
def test_z_from_summed_block_charges_matches_the_points_potentials(rng, d):
    Y = rng.normal(size=(6000, d)) * 15
    interp = Interpolation(3, 10 if d == 3 else 50, 1.0)
    Z, phi = potentials(Y, "fft", interp)
    spec = GridSpec.around(Y.min(axis=0), Y.max(axis=0), interp)
    charges = sum(spec.charges(Y[a:b], *spec.weights(Y[a:b])) for a, b in [(0, 2500), (2500, 6000)])
    pot, Z_grid = spec.potentials(charges, 6000)
    assert abs(Z_grid - Z) <= 1e-10 * Z
    np.testing.assert_allclose(
        spec.phi(Y, *spec.weights(Y), pot), phi[:, : d + 1], rtol=0, atol=1e-12 * np.abs(phi).max()
    )


def test_distributed_umap_is_the_single_worker_embedding(client, blobs):
    kw = dict(n_epochs=40, random_state=3, checkpoint_every=0)
    one = umap(blobs, optimizer="single", **kw)
    many = umap(blobs, optimizer="distributed", **kw)
    np.testing.assert_array_equal(many.embedding, one.embedding)
    assert many.cross_entropy == pytest.approx(one.cross_entropy, rel=1e-9)
    info = many.info
    assert info["optimizer"] == "distributed" and info["blocks"] == 2
    assert sorted(info["blocks_per_worker"]) == [1, 1]
    # positions down to each block and back up, float32: (blocks + 1) x n x 2 x 4 bytes; and
    # each block's pull sums on the other ends of its edges, int64: blocks x n x 2 x 8 bytes
    assert info["bytes_per_iteration"] == 3 * 1500 * 2 * 4 + 2 * 1500 * 2 * 8
    assert one.info["optimizer"] == "single"


def test_distributed_tsne_equals_one_worker_up_to_rounding(client, blobs):
    kw = dict(gradient="fft", perplexity=15.0, early_exaggeration_iter=60, random_state=0)
    few = [tsne(blobs, optimizer=o, n_iter=8, **kw) for o in ("single", "distributed")]
    # the same arithmetic but Z summed in another order: 1e-13 apart at first; later the
    # descent amplifies such differences (a 1e-15 nudge of the start does the same)
    scale = np.abs(few[0].embedding).max()
    np.testing.assert_allclose(few[1].embedding, few[0].embedding, rtol=0, atol=1e-9 * scale)
    one, many = [tsne(blobs, optimizer=o, n_iter=200, **kw) for o in ("single", "distributed")]
    assert abs(many.kl_divergence - one.kl_divergence) <= 0.02 * one.kl_divergence
    t1, t2 = (trustworthiness(blobs, m.embedding, 10) for m in (one, many))
    assert abs(t1 - t2) <= 0.01 and t2 > 0.9
    again = tsne(blobs, optimizer="distributed", n_iter=200, **kw)
    np.testing.assert_array_equal(again.embedding, many.embedding)  # same seed, same workers
    grid_bytes = many.info["bytes_per_iteration"] - 3 * 1500 * 2 * 8  # positions: 2 down, 1 up
    assert grid_bytes > 0 and many.info["recoveries"] == 0


def test_distributed_tsne_resumes_from_a_checkpoint_exactly(client, blobs):
    kw = dict(
        gradient="fft",
        perplexity=15.0,
        n_iter=120,
        early_exaggeration_iter=50,
        checkpoint_every=40,
        optimizer="distributed",
    )
    calm = tsne(blobs, **kw)
    ck = MemoryCheckpoint(fail_after=2)  # the coordinator dies right after checkpoint 2
    with pytest.raises(InterruptedError):
        tsne(blobs, checkpoint=ck, **kw)
    assert ck.states[-1]["iteration"] == 80
    resumed = tsne(blobs, checkpoint=ck, **kw)
    assert resumed.info["resumed_from"] == 80
    np.testing.assert_array_equal(resumed.embedding, calm.embedding)


class _KillAWorker(MemoryCheckpoint):
    """Checkpoints in memory; at the ``at``-th save, SIGKILLs one worker process."""

    def __init__(self, client, at: int):
        super().__init__()
        self.client, self.at = client, at

    def save(self, state):
        super().save(state)
        if len(self.states) == self.at:
            victim = sorted(workers(self.client))[0]
            pid = self.client.run(os.getpid, workers=[victim])[victim]
            os.kill(pid, signal.SIGKILL)


@pytest.mark.parametrize("method", ["umap", "tsne"])
def test_worker_killed_mid_fit_resumes_on_the_workers_left(blobs, method):
    kw = (
        dict(n_epochs=60, checkpoint_every=20, random_state=1)
        if method == "umap"
        else dict(
            gradient="fft",
            perplexity=15.0,
            n_iter=90,
            early_exaggeration_iter=40,
            checkpoint_every=30,
        )
    )
    fit = umap if method == "umap" else tsne
    with (
        LocalCluster(
            n_workers=2,
            threads_per_worker=1,
            processes=True,
            host="127.0.0.1",
            dashboard_address="127.0.0.1:0",
        ) as cluster,
        Client(cluster) as c,
    ):
        calm = fit(blobs, optimizer="distributed", **kw)
        before = set(workers(c))
        stormy = fit(blobs, optimizer="distributed", checkpoint=_KillAWorker(c, 2), **kw)
        after = set(workers(c))
    assert before != after  # a worker process died and was replaced
    assert stormy.info["recoveries"] == 1
    np.testing.assert_array_equal(stormy.embedding, calm.embedding)


def test_a_loss_past_the_limit_stops_with_a_stage_error(blobs, monkeypatch):
    """Past MAX_RECOVERIES worker losses in one fit (0 here): a StageError that says so and
    how to go on, never a hang."""
    import dimred_dask.methods._distributed as dist

    monkeypatch.setattr(dist, "MAX_RECOVERIES", 0)
    with (
        LocalCluster(
            n_workers=2,
            threads_per_worker=1,
            processes=True,
            host="127.0.0.1",
            dashboard_address="127.0.0.1:0",
        ) as cluster,
        Client(cluster) as c,
    ):
        with pytest.raises(StageError, match="lost a worker 1 times") as err:
            umap(
                blobs,
                optimizer="distributed",
                n_epochs=60,
                checkpoint_every=20,
                random_state=1,
                checkpoint=_KillAWorker(c, 2),
            )
    assert "resumes from its last checkpoint" in err.value.fix


def test_bad_optimizer_settings_are_refused(blobs):
    with pytest.raises(InputError, match="optimizer must be one of auto, single, distributed"):
        umap(blobs, optimizer="cluster")
    with pytest.raises(InputError, match="no Dask client is active"):
        plan_optimizer("distributed", 1500, 1500 * 30, 2, None)
    assert plan_optimizer("auto", 1500, 1500 * 30, 2, None)["optimizer"] == "single"


def test_exact_gradient_is_refused_on_the_blocks(client, blobs):
    with pytest.raises(InputError, match="pass gradient='fft'"):
        tsne(blobs[:300], optimizer="distributed", gradient="exact", n_iter=10)


def test_auto_plan_spreads_what_would_crowd_one_worker(client):
    n_workers = len(workers(client))
    small = plan_optimizer("auto", 10_000, 10_000 * 90, 2, client)
    assert small["optimizer"] == "single" and "fit in" in small["reason"]
    huge = plan_optimizer("auto", 10**9, 10**9 * 90, 2, client)
    assert huge["optimizer"] == "distributed" and huge["blocks"] == n_workers
    assert "exceed" in huge["reason"]
    assert block_bounds(10, 3) == [(0, 3), (3, 7), (7, 10)]
