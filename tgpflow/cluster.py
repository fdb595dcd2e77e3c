"""Where a CLI job runs: an existing scheduler, an embedded LocalCluster, or local threads.

The library itself never creates a cluster — it computes on whatever Dask scheduler is
active (a ``distributed.Client`` in scope, else the threaded scheduler). The CLI, and
users who want the same choice, call :func:`dask_client`:

* ``scheduler="tcp://host:8786"`` (or a scheduler file path): connect to it; a cluster file of
  ``type: scheduler`` (YAML, :mod:`tgpflow.cluster_files`) connects with its ``security`` too — the
  way to reach a ``tls://`` scheduler, whose certificates a bare address cannot carry;
* no scheduler (``local="auto"``): the threaded scheduler. Every hot kernel releases the
  GIL (NumPy matmul, the ``nogil`` sincos), and on one machine threads measured faster
  than worker processes: 0.98 vs 0.80 of the SYRK-bound rate for a 2M-row Parquet fit
  on 2 cores (benchmarks/stats_pass.py), since processes add start-up (~2–3 s) and
  inter-process transfers and gain nothing;
* ``local="cluster"``: an embedded ``LocalCluster`` with one single-threaded worker
  process per core — for process isolation, memory limits and spilling, or the dashboard.

Connecting waits at most :data:`connect_timeout` seconds (default
:data:`DEFAULT_CONNECT_TIMEOUT`, 10 s, not distributed's 30 s; the CLI's ``--scheduler-timeout``
sets it) and every failure is one sentence naming the address or the file:
:class:`~tgpflow.errors.SchedulerAddressError` for a ``scheduler`` that is neither an existing
scheduler file nor an address (a usage error), :class:`~tgpflow.errors.SchedulerError` for a
malformed scheduler file or a scheduler that does not answer in time.
"""

from __future__ import annotations

import contextlib
import contextvars
import json
import logging
import os
import socket
import sys
import time
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

from tgpflow.core.backend import GPU_EXTRA
from tgpflow.errors import SchedulerAddressError, SchedulerError, cause

if TYPE_CHECKING:
    from tgpflow.core.engine import Progress

__all__ = ["dask_client", "spec_client", "load_cluster_file", "cluster_from_file", "scheduler_address", "connect",
           "connect_timeout", "DEFAULT_CONNECT_TIMEOUT", "progress_display", "dashboard_link", "worker_malloc",
           "WORKER_MMAP_THRESHOLD"]

logger = logging.getLogger("tgpflow")

#: Seconds to wait for a Dask scheduler before giving up.
DEFAULT_CONNECT_TIMEOUT = 10.0
#: The connect timeout in effect (the CLI's ``--scheduler-timeout`` sets it for one command).
connect_timeout: contextvars.ContextVar[float] = contextvars.ContextVar("tgpflow_connect_timeout",
                                                                         default=DEFAULT_CONNECT_TIMEOUT)
_HOST_PORT_PROTOCOLS = ("tcp", "tls", "ws", "wss", "ucx")


def scheduler_address(scheduler: str) -> tuple[str, str | None]:
    """``(address, file)``: the address ``scheduler`` names — itself, or the one in the scheduler file
    it names (then ``file`` is that file). Raises the errors of the module docstring."""
    if os.path.isfile(scheduler):
        try:
            with open(scheduler) as fh:
                address = json.load(fh).get("address")
        except (OSError, ValueError, AttributeError) as exc:
            raise SchedulerError(f"{scheduler}: not a Dask scheduler file ({cause(exc)})") from None
        if not isinstance(address, str) or not address:
            raise SchedulerError(f"{scheduler}: not a Dask scheduler file (no \"address\" string in it)")
        return address, scheduler
    from distributed.comm.addressing import parse_address, parse_host_port

    try:
        protocol, location = parse_address(scheduler)
        if protocol in _HOST_PORT_PROTOCOLS:
            parse_host_port(location)
    except (ValueError, TypeError):
        a_file = "://" not in scheduler and (scheduler.endswith((".json", ".yaml")) or os.sep in scheduler)
        what = "no such scheduler file" if a_file else "neither a scheduler file nor an address (tcp://host:port)"
        raise SchedulerAddressError(f"{scheduler}: {what}") from None
    return scheduler, None


def _is_cluster_file(scheduler: str) -> bool:
    return scheduler.endswith((".yaml", ".yml")) and os.path.isfile(scheduler)


def connect(address: str, *, source: str | None = None, timeout: float | None = None, **kwargs: Any) -> Any:
    """A ``distributed.Client`` of the scheduler at ``address`` (named after ``source``, the file it came
    from, in errors), waiting at most ``timeout`` seconds (default: :data:`connect_timeout`)."""
    from distributed import Client
    from distributed.security import Security

    timeout = connect_timeout.get() if timeout is None else timeout
    where = f"{address} (from {source})" if source else address
    security = kwargs.get("security") or Security()  # Security() is the Dask configuration's distributed.comm.tls
    if address.startswith("tls://") and security.get_connection_args("client").get("ssl_context") is None:
        raise SchedulerError(f"{where}: a TLS scheduler, and no certificates to connect with; pass --scheduler a "
                             f"cluster file with its security (cluster/scheduler-tls.yaml), or set "
                             f"distributed.comm.tls (ca-file, client.cert, client.key) in the Dask configuration")
    try:
        return Client(address=address, timeout=timeout, **kwargs)
    except (OSError, TimeoutError):
        raise SchedulerError(f"{where}: no Dask scheduler answered within {timeout:g} s; check that it runs and is "
                             f"reachable, or wait longer with --scheduler-timeout") from None
    except Exception as exc:  # noqa: BLE001 - whatever answered there is not a scheduler we can use
        raise SchedulerError(f"{where}: could not connect to a Dask scheduler ({cause(exc)})") from None


@contextlib.contextmanager
def dask_client(scheduler: str | None = None, *, work: float | None = None, n_workers: int | None = None,
                local: str = "auto", dashboard: bool = False) -> Iterator[Any]:
    """Yield a ``distributed.Client`` (or None for the threaded scheduler) for a job.

    ``local`` chooses when no scheduler is given: "cluster", or "threads"/"auto" (threads).
    ``work`` (N·S² flops, when known) is logged. ``dashboard``: the embedded cluster serves distributed's
    dashboard (needs Bokeh; port 8787, or any free port when 8787 is taken) — off by default, since a
    second dashboard on a busy port is a warning and the CLI's jobs do not need it.
    """
    from distributed import Client, LocalCluster

    if scheduler:
        if _is_cluster_file(scheduler):
            kind, _ = load_cluster_file(scheduler)
            if kind != "scheduler":
                raise SchedulerAddressError(f"{scheduler}: a {kind} cluster file; --scheduler takes an address, a "
                                            f"scheduler file or a cluster file of type: scheduler (a pipeline "
                                            f"spec's cluster: {{file: ...}} takes the others)")
            with cluster_from_file(scheduler) as client:
                yield client
            return
        address, source = scheduler_address(scheduler)
        with connect(address, source=source) as client:
            logger.info("connected to scheduler %s (%d workers)", client.scheduler.address,
                        len(client.scheduler_info().get("workers", {})))
            yield client
        return
    if local not in ("auto", "cluster", "threads", "gpu"):
        raise ValueError(f"local must be 'auto', 'cluster', 'threads' or 'gpu'; got {local!r}")
    if local == "gpu":
        with gpu_cluster(dashboard) as client:
            yield client
        return
    if local != "cluster":
        logger.info("threaded scheduler on this machine (pass work %.3g flops)", work or 0.0)
        yield None
        return
    workers = n_workers or os.cpu_count() or 1
    address = _dashboard_address() if dashboard else None
    with worker_malloc(), LocalCluster(n_workers=workers, threads_per_worker=1, processes=True,
                                       dashboard_address=address) as cluster, Client(cluster) as client:
        link = dashboard_link(client) if dashboard else None
        logger.info("embedded LocalCluster: %d worker processes × 1 thread%s", workers,
                    f"; dashboard {link}" if link else "")
        yield client


#: glibc's mmap threshold (bytes) for the worker processes a nanny spawns on this machine (:func:`worker_malloc`).
WORKER_MMAP_THRESHOLD = 32 * 2**20


@contextlib.contextmanager
def worker_malloc() -> Iterator[None]:
    """Start worker processes here with ``MALLOC_MMAP_THRESHOLD_`` = :data:`WORKER_MMAP_THRESHOLD`.

    Distributed's nanny starts workers with ``MALLOC_TRIM_THRESHOLD_=65536`` (freed memory goes back to the OS).
    Setting it also freezes glibc's mmap threshold at 128 KiB, so every S×S matrix and feature block a task
    allocates is a fresh mapping whose pages fault in one by one. Measured on one bandwidth-selection task
    (S = 1000, 30 000 pilot rows, one thread): 3.1–3.6 s under the nanny's setting against 2.7 s without it,
    and 2.7–2.8 s with the trim threshold kept and this mmap threshold (glibc's own dynamic ceiling) added. A
    value in the Dask configuration (``distributed.nanny.pre-spawn-environ``) or in the environment wins (the
    nanny lets the environment override its configuration, and writes what it sets into this process's).
    """
    import dask
    import distributed  # noqa: F401 - its defaults enter the Dask configuration on import

    environ = dict(dask.config.get("distributed.nanny.pre-spawn-environ", default=None) or {})
    environ.setdefault("MALLOC_MMAP_THRESHOLD_", WORKER_MMAP_THRESHOLD)
    with dask.config.set({"distributed.nanny.pre-spawn-environ": environ}):
        yield


def _has_bokeh() -> bool:
    import importlib.util

    return importlib.util.find_spec("bokeh") is not None


def dashboard_link(client: Any) -> str | None:
    """The link to the scheduler's dashboard, or None when it has none: distributed's HTTP server (and its
    "dashboard" service) runs whatever the arguments, but its pages need Bokeh."""
    if not _has_bokeh() or "dashboard" not in client.scheduler_info().get("services", {}):
        return None
    return str(client.dashboard_link)


def _dashboard_address() -> str | None:
    """":8787" when free, else ":0" (any free port); None without Bokeh (there would be no pages to serve)."""
    if not _has_bokeh():
        return None
    with socket.socket() as s:
        try:
            s.bind(("", 8787))
        except OSError:
            return ":0"
    return ":8787"


def _cuda_cluster(what: str, kw: dict[str, Any]) -> Any:
    """dask-cuda's ``LocalCUDACluster`` class, or an ImportError saying that ``what`` needs the gpu extra; ``kw`` (the
    cluster's keywords) gets each worker's ``GPU`` resource, which device tasks ask for
    (:func:`tgpflow.core.engine.task_resources`)."""
    try:
        from dask_cuda import LocalCUDACluster
    except ImportError as exc:
        raise ImportError(f"{what} needs dask-cuda: {GPU_EXTRA}") from exc
    kw.setdefault("resources", {"GPU": 1})
    return LocalCUDACluster


@contextlib.contextmanager
def gpu_cluster(dashboard: bool = False, **kw: Any) -> Iterator[Any]:
    """dask-cuda's ``LocalCUDACluster`` (one worker per visible GPU, each advertising a ``GPU`` resource that device
    tasks ask for: docs/gpu.md, "GPU workers") and a Client; ``kw`` go to the cluster (``rmm_pool_size``, …)."""
    from distributed import Client

    cls = _cuda_cluster("--local gpu", kw)
    address = _dashboard_address() if dashboard else None
    with worker_malloc(), cls(dashboard_address=address, **kw) as cluster, Client(cluster) as client:
        logger.info("embedded LocalCUDACluster: %d GPU workers", len(cluster.workers))
        yield client


def load_cluster_file(path: str | os.PathLike[str]) -> tuple[str, dict[str, Any]]:
    """A cluster file of ``cluster/`` (YAML), validated (:mod:`tgpflow.cluster_files`): its ``type``
    (local | cuda | slurm | scheduler) and the keys it sets, as keyword arguments."""
    from tgpflow.cluster_files import read_cluster_file

    spec = read_cluster_file(path)
    return spec.type, spec.model_dump(exclude_unset=True, exclude={"type"})


@contextlib.contextmanager
def cluster_from_file(path: str | os.PathLike[str]) -> Iterator[Any]:
    """Start (or connect to) the cluster a ``cluster/`` file describes and yield a Client."""
    from distributed import Client

    kind, kw = load_cluster_file(path)
    if kind == "scheduler":
        security = kw.pop("security", None)
        if security:
            from distributed.security import Security

            kw["security"] = Security(**security)
        with connect(kw.pop("address"), source=str(path), **kw) as client:
            yield client
        return
    jobs = kw.pop("jobs", None)
    if kind == "local":
        from distributed import LocalCluster as cls
    elif kind == "cuda":
        cls = _cuda_cluster(f"{path}: a CUDA cluster", kw)
    else:
        try:
            from dask_jobqueue import SLURMCluster as cls
        except ImportError as exc:
            raise ImportError(f"{path}: a SLURM cluster needs dask-jobqueue: pip install 'tgpflow[cluster]'") from exc
    # workers started here (local, cuda) get the mmap threshold; SLURM's start on their nodes, with their config
    with (worker_malloc() if kind in ("local", "cuda") else contextlib.nullcontext()), cls(**kw) as cluster:
        if jobs:
            cluster.scale(jobs=int(jobs))
        with Client(cluster) as client:
            logger.info("cluster from %s (%s)", path, kind)
            yield client


def describe_spec_cluster(cluster: Any) -> str:
    """What a pipeline spec's ``cluster`` section would run on, checked without starting or reaching anything: a
    cluster file is read and validated (:func:`load_cluster_file`), a scheduler address parsed or its scheduler
    file read (:func:`scheduler_address`); each raises as the run would."""
    if cluster.file:
        return f"{cluster.file} ({load_cluster_file(cluster.file)[0]} cluster file)"
    if cluster.scheduler:
        address, file = scheduler_address(cluster.scheduler)
        return address if file is None else f"{address} (from {file})"
    return "embedded LocalCluster" if cluster.kind == "embedded" else "threads"


@contextlib.contextmanager
def spec_client(cluster: Any) -> Iterator[Any]:
    """The client of a pipeline spec's ``cluster`` section (threads when nothing is given)."""
    if cluster.file:
        with cluster_from_file(cluster.file) as client:
            yield client
    elif cluster.scheduler:
        with dask_client(cluster.scheduler) as client:
            yield client
    else:
        with dask_client(local="cluster" if cluster.kind == "embedded" else "threads") as client:
            yield client


# -- progress of a job's computes (the CLI's --progress, the demo's bars) --------------------------

@contextlib.contextmanager
def progress_display(mode: str, client: Any) -> Iterator[Progress | None]:
    """Progress for the computes inside: a bar or periodic log lines; none for tiny jobs.

    With a distributed client, yields the callback to pass as ``progress=`` to the call that runs the
    passes (it is given each compute's futures); on the local schedulers, yields None and shows the
    progress of every compute inside through a dask callback."""
    if mode == "auto":
        mode = "bar" if sys.stderr.isatty() else "log"
    if mode == "none":
        yield None
        return
    if client is not None:
        yield _distributed_bar if mode == "bar" else _distributed_log
        return
    from dask.diagnostics import ProgressBar

    cb = ProgressBar(minimum=2.0, out=sys.stderr) if mode == "bar" else _LogProgress()
    with cb:
        yield None


def _distributed_bar(futures: Sequence[Any]) -> None:
    from distributed import progress

    with contextlib.redirect_stdout(sys.stderr):  # distributed's text bar writes to stdout, where results go
        progress(futures, notebook=False)


def _distributed_log(futures: Sequence[Any], interval: float = 10.0) -> None:
    from distributed import wait

    start = time.perf_counter()
    while True:
        try:
            wait(futures, timeout=interval)
            return
        except TimeoutError:
            logger.info("still computing after %.0f s", time.perf_counter() - start)


class _LogProgress:
    """A dask local-scheduler callback that logs done/total tasks every ``interval`` s."""

    def __new__(cls, interval: float = 10.0):  # built lazily so that importing the CLI stays cheap
        from dask.callbacks import Callback

        class LogProgress(Callback):
            def _start_state(self, dsk, state):
                self._total = sum(len(state[k]) for k in ("ready", "waiting", "running")) + len(state["finished"])
                self._done = 0
                self._t0 = self._last = time.perf_counter()

            def _posttask(self, key, result, dsk, state, worker_id):
                self._done += 1
                now = time.perf_counter()
                if now - self._last >= interval:
                    self._last = now
                    logger.info("progress: %d/%d tasks, %.0f s", self._done, self._total, now - self._t0)

        return LogProgress()
