"""The cluster helpers every stage uses (dimred_dask._compute): the workers listed as the
scheduler has them, whatever the client's periodic refresh does meanwhile."""

from __future__ import annotations

import dask

from dimred_dask._compute import smallest_worker_memory, workers


def test_the_workers_are_listed_between_the_clients_refreshes(client):
    """The client's own cache is rewritten with no worker listed by its refresh (here every
    millisecond, so that the refresh lands between a call's update and its read often:
    about a third of ``scheduler_info()`` calls came back without workers); `workers` asks
    the scheduler and lists both, every time."""
    from distributed import Client

    with dask.config.set({"distributed.client.scheduler-info-interval": "1ms"}):
        with Client(client.scheduler.address) as busy:
            counts = [len(workers(busy)) for _ in range(300)]
            limit = smallest_worker_memory(busy)
    assert counts == [2] * 300
    assert limit == min(w["memory_limit"] for w in workers(client).values()) and limit > 0
