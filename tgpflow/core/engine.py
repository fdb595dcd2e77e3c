"""The pass: map every chunk to a statistics value, tree-reduce with bounded fan-in.

``accumulate`` builds one Dask graph — read → validate → chunk statistics → a fixed tree of
merges with at most ``split_every`` inputs per node (the shape of ``dask.array.reduction``)
— and computes it once, together with the count of dropped rows. The tree's shape depends
only on the number of chunks, so the same data, chunking and features give bit-identical
statistics on any scheduler and after retries. Nothing is read twice and no length is
learnt before the pass.

Progress is a parameter, not a setting the engine looks up: ``compute`` and ``accumulate`` take
``progress``, a :data:`Progress` callback that receives the futures of a distributed compute (e.g.
``distributed.progress``); the estimators' ``fit``/``accumulate``/``partial_fit``, ``pilot_sample``
and ``run_pipeline`` pass theirs down. On Dask's local schedulers there are no futures: a
``dask.diagnostics.ProgressBar`` (or any ``dask.callbacks.Callback``) entered by the caller sees the
tasks instead, as it does for every ``dask.compute``.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Protocol

import dask
from threadpoolctl import ThreadpoolController

from tgpflow.core.memory import cluster_workers, local_threads, plan_pass

__all__ = ["accumulate", "tree_reduce", "compute", "Progress", "ChunkSource", "task_resources", "annotated",
           "cluster_has_gpus", "parallel_tasks", "blas_controller", "single_blas_thread"]

#: Called with the futures of a distributed compute, before the engine waits for them (to show progress).
Progress = Callable[[Sequence[Any]], None]


class ChunkSource(Protocol):
    """What the pass reads: the delayed, validated row blocks of a source (:class:`tgpflow.io.sources.Source`)."""

    @property
    def n_columns(self) -> int: ...

    def blocks(self) -> Iterable[Any]: ...

    def row_keys(self) -> Iterable[Any]: ...

    def dropped_counts(self) -> list[Any]: ...


def _merge(*parts: Any) -> Any:
    total = parts[0]
    for p in parts[1:]:
        total = total + p
    return total


def tree_reduce(parts: Sequence[Any], split_every: int = 8) -> Any:
    """A balanced tree of ``_merge`` delayed calls over ``parts`` (fan-in ≤ split_every)."""
    if split_every < 2:
        raise ValueError(f"split_every must be >= 2; got {split_every}")
    if not parts:
        raise ValueError("nothing to reduce")
    merge = dask.delayed(_merge, pure=True)
    level = list(parts)
    while len(level) > 1:
        level = [merge(*level[i:i + split_every]) for i in range(0, len(level), split_every)]
    return level[0]


def _active_client() -> Any:
    try:
        from distributed import get_client

        return get_client()
    except (ImportError, ValueError):
        return None


def cluster_has_gpus() -> bool | None:
    """Whether the active distributed cluster has workers that advertise a ``GPU`` resource (dask-cuda's, or a
    ``type: cuda`` cluster file's); None without a distributed client (the tasks run on this machine)."""
    client = _active_client()
    if client is None:
        return None
    return any((w.get("resources") or {}).get("GPU") for w in cluster_workers(client).values())


def parallel_tasks() -> int:
    """How many tasks the active scheduler runs at once: the threads of the distributed cluster's workers, else those
    of Dask's local scheduler (``num_workers``, else the cores)."""
    client = _active_client()
    if client is None:
        return local_threads()
    return max(1, sum(int(w.get("nthreads") or 1) for w in cluster_workers(client).values()))


def task_resources(on_device: bool) -> dict[str, int] | None:
    """The resources a chunk task asks for (docs/gpu.md, "GPU workers"): ``{"GPU": 1}`` for a task on the device when
    the active distributed cluster has workers that advertise a ``GPU`` resource (a mixed CPU/GPU cluster then sends
    such tasks to them only), else None (no worker would match, and the tasks would wait forever)."""
    return {"GPU": 1} if on_device and cluster_has_gpus() else None


def annotated(resources: dict[str, int] | None) -> Any:
    """``dask.annotate(resources=…)`` for the tasks built inside it, or nothing without resources."""
    return dask.annotate(resources=resources) if resources else contextlib.nullcontext()


_controller: tuple[int, ThreadpoolController] | None = None


def blas_controller() -> ThreadpoolController:
    """threadpoolctl's controller of the loaded thread pools, found once and again only after a module was imported
    (an import may load another BLAS): a fresh scan took 4.7 ms here, and a fit asks dozens of times."""
    global _controller
    loaded = len(sys.modules)
    if _controller is None or _controller[0] != loaded:
        _controller = (loaded, ThreadpoolController())
    return _controller[1]


def single_blas_thread() -> Any:
    """A context that runs BLAS with one thread (:func:`blas_controller`), then restores its count (0.05 ms)."""
    return blas_controller().limit(limits=1, user_api="blas")


def compute(*objs: Any, progress: Progress | None = None) -> tuple[Any, ...]:
    """Compute lazy objects in one graph on the active scheduler.

    A distributed ``Client`` in scope is used (``progress``, if given, is called with the futures
    before they are gathered); otherwise Dask's default scheduler. BLAS runs single-threaded inside tasks, since
    parallelism comes from the chunks (and multi-threaded BLAS under several Dask threads
    oversubscribes the cores; distributed's nanny does the same for worker processes).
    """
    client = _active_client()
    with single_blas_thread():
        if client is None:
            return dask.compute(*objs)
        futures = client.compute(list(objs))
        if progress is not None:
            progress(futures)
        return tuple(client.gather(futures))


def accumulate(source: ChunkSource, chunk_fn: Callable[..., Any], *args: Any, split_every: int = 8,
               with_row_keys: bool = False, progress: Progress | None = None,
               resources: dict[str, int] | None = None) -> tuple[Any, int]:
    """Run the one pass: ``chunk_fn(block, *args)`` on every validated chunk, merged by a tree.

    With ``with_row_keys`` the call is ``chunk_fn(block, keys, *args)``, ``keys`` the stable
    row keys of ``source.row_keys()`` (for a hashed train/validation split).
    ``args`` (e.g. the feature draw) enter the graph once, not once per task. Returns
    ``(statistics, rows_dropped)``. A chunk function that declared its memory
    (:func:`tgpflow.core.memory.declare`) is planned first: the plan is logged, and a pass whose
    task cannot fit one row in the workers' memory is refused before it starts. ``resources``: what each chunk task
    asks of its worker (:func:`task_resources`).
    """
    plan_pass(chunk_fn, args, source.n_columns)
    fn = dask.delayed(chunk_fn, pure=True)
    shared = [dask.delayed(a, pure=True) for a in args]
    with annotated(resources):
        if with_row_keys:
            parts = [fn(block, keys, *shared) for block, keys in zip(source.blocks(), source.row_keys(), strict=True)]
        else:
            parts = [fn(block, *shared) for block in source.blocks()]
    root = tree_reduce(parts, split_every)
    dropped = dask.delayed(sum, pure=True)(source.dropped_counts())
    stats, n_dropped = compute(root, dropped, progress=progress)
    return stats, int(n_dropped)
