"""Where a CLI job runs: an existing scheduler, an embedded LocalCluster, or local threads.

The library itself never creates a cluster — it computes on whatever Dask scheduler is
active (a ``distributed.Client`` in scope, else the threaded scheduler). The CLI, and
users who want the same choice, call :func:`dask_client`:

* ``scheduler="tcp://host:8786"`` (or a scheduler file path): connect to it;
* no scheduler and a pass estimated below :data:`LOCAL_CLUSTER_MIN_WORK` floating-point
  operations (N·S², a few seconds on one core): the threaded scheduler, since starting
  worker processes costs ~2–3 s (measured: benchmarks/stats_pass.py);
* otherwise an embedded ``LocalCluster`` with one single-threaded worker process per core
  (``processes=True``: the statistics kernels hold the GIL between BLAS calls).
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterator
from typing import Any

__all__ = ["dask_client", "LOCAL_CLUSTER_MIN_WORK"]

logger = logging.getLogger("tgpflow")

#: Pass work (N·S² flops) below which the threaded scheduler is used instead of a LocalCluster.
LOCAL_CLUSTER_MIN_WORK = 2e11


@contextlib.contextmanager
def dask_client(scheduler: str | None = None, *, work: float | None = None, n_workers: int | None = None,
                local: str = "auto") -> Iterator[Any]:
    """Yield a ``distributed.Client`` (or None for the threaded scheduler) for a job.

    ``local`` forces the choice when no scheduler is given: "cluster", "threads" or "auto".
    """
    from distributed import Client, LocalCluster

    if scheduler:
        kwargs = {"scheduler_file": scheduler} if os.path.isfile(scheduler) else {"address": scheduler}
        with Client(**kwargs) as client:
            logger.info("connected to scheduler %s (%d workers)", client.scheduler.address,
                        len(client.scheduler_info().get("workers", {})))
            yield client
        return
    if local not in ("auto", "cluster", "threads"):
        raise ValueError(f"local must be 'auto', 'cluster' or 'threads'; got {local!r}")
    use_cluster = local == "cluster" or (local == "auto" and (work is None or work >= LOCAL_CLUSTER_MIN_WORK))
    if not use_cluster:
        logger.info("small job (%.3g flops): threaded scheduler", work or 0.0)
        yield None
        return
    workers = n_workers or os.cpu_count() or 1
    with LocalCluster(n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=None) as cluster, \
            Client(cluster) as client:
        logger.info("embedded LocalCluster: %d worker processes × 1 thread", workers)
        yield client
