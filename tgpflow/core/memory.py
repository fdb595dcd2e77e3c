"""The memory planner: how many rows one block of a chunk task may hold (STYLE habit 7).

A chunk task of a statistics kind allocates three kinds of memory, which the kind declares
as a :class:`MemoryCost` derived from the arrays its chunk function allocates:

* ``fixed`` bytes that do not depend on the rows — the float64 accumulators (S×S Gram
  matrices, (md)² systems) and the per-chunk S² temporaries (the product buffer of a SYRK,
  NCFD's level weights W±);
* ``per_row`` bytes for each row of a block — the feature blocks (angles, sin, cos: 3·S
  floats a row for the random Fourier features, d·md for the curl-free blocks);
* ``per_chunk_row`` bytes for each row of the chunk whatever the block — the centred copy of
  the moments (docs/mathematics.md, "Features and the pilot pass"), the shifted copy of the rows.

:func:`plan_blocks` turns a cost, the cap ``block_bytes`` on the per-row part and a budget (the
bytes one task may use) into a :class:`BlockPlan`: ``rows`` per block, and ``planned`` =
``fixed + rows·per_row + chunk_rows·per_chunk_row``, the peak the task should reach. The
budget is the workers' memory limit divided by their threads when a distributed cluster runs
the pass (:func:`cluster_budget`), else this machine's available RAM divided by the threads
of Dask's local scheduler (:func:`local_budget`). When not even one row fits, the plan is
refused with a ``MemoryError`` giving the bytes needed, the bytes available and what to change.

Chunk functions plan their own blocks when they run (:func:`plan_blocks`, with the budget of
the worker they run on, :func:`task_budget`); the engine plans each pass once before it
starts (:func:`plan_pass`), logs the plan and refuses early. Statistics kinds register their
cost with :func:`declare`.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import os
import sys
from collections.abc import Callable
from typing import Any

__all__ = ["DEFAULT_BLOCK_BYTES", "MemoryCost", "BlockPlan", "sequential", "plan_blocks", "plan_pass", "declare",
           "declare_wrapper", "cost_of", "cluster_workers", "cluster_budget", "local_budget", "local_threads",
           "task_budget", "pass_budget", "check_fits", "traced_peak"]

logger = logging.getLogger("tgpflow")

#: Bytes of a float64 / float32 value.
F64, F32 = 8, 4
#: Default cap on the per-row part of a chunk task's memory: its feature blocks (bytes).
DEFAULT_BLOCK_BYTES = 64 * 2**20


@dataclasses.dataclass(frozen=True)
class MemoryCost:
    """The bytes one chunk task of a statistics kind allocates (see the module docstring).

    ``what`` names the kind and its sizes (it starts the messages); ``shrink`` says what to
    change when the fixed part alone does not fit (fewer features S, fewer levels H, a
    smaller basis); ``result`` is the size of the statistics the task returns (part of ``fixed``).
    """

    what: str
    fixed: int
    per_row: int
    per_chunk_row: int = 0
    shrink: str = "use a smaller model"
    result: int = 0


def sequential(costs: list[MemoryCost], what: str, per_chunk_row: int = 0) -> MemoryCost:
    """The cost of running ``costs`` one after the other in one task, keeping every result:
    the largest working set plus the results of the others; ``per_chunk_row`` more per chunk row."""
    if not costs:
        raise ValueError("no costs")
    big = max(costs, key=lambda c: c.fixed)
    held = sum(c.result for c in costs) - big.result
    return MemoryCost(what, big.fixed + held, max(c.per_row for c in costs),
                      max(c.per_chunk_row for c in costs) + per_chunk_row, big.shrink, big.result + held)


@dataclasses.dataclass(frozen=True)
class BlockPlan:
    """Rows per block of one chunk task, and the bytes it plans to use."""

    cost: MemoryCost
    rows: int
    block_bytes: int
    budget: int | None = None
    budget_source: str = "no budget"
    chunk_rows: int = 0

    @property
    def planned(self) -> int:
        """The planned peak of the task: fixed + rows·per_row + chunk_rows·per_chunk_row bytes."""
        c = self.cost
        return c.fixed + self.rows * c.per_row + self.chunk_rows * c.per_chunk_row

    def describe(self) -> str:
        c = self.cost
        budget = "none" if self.budget is None else f"{_mib(self.budget)} ({self.budget_source})"
        blocks = (f"{c.per_row} bytes per row (capped at block_bytes={self.block_bytes}), {self.rows} rows per block"
                  if c.per_row else "no row blocks")
        per_chunk = f", {c.per_chunk_row} bytes per chunk row" if c.per_chunk_row else ""
        return (f"{c.what}: budget {budget}, fixed {_mib(c.fixed)}, {blocks}{per_chunk}, "
                f"planned {_mib(self.planned)} per task plus the chunk's rows")


def _mib(n: int | float) -> str:
    return f"{n / 2**20:.1f} MiB"


def plan_blocks(cost: MemoryCost, block_bytes: int, *, chunk_rows: int | None = None, budget: int | None = None,
                budget_source: str = "") -> BlockPlan:
    """Rows per block for ``cost`` within ``block_bytes`` (the per-row part) and ``budget`` (the task).

    ``rows = min(block_bytes, budget − fixed − chunk_rows·per_chunk_row) // per_row``, at most
    ``chunk_rows``. Raises ``MemoryError`` with both numbers when not even one row fits: the
    budget (what the task needs vs what it has, and what to change) or ``block_bytes``.
    """
    block_bytes = int(block_bytes)
    per_chunk = 0 if chunk_rows is None else int(chunk_rows) * cost.per_chunk_row
    room = block_bytes
    if budget is not None:
        need = cost.fixed + per_chunk + cost.per_row
        if need > budget:
            raise MemoryError(
                f"{cost.what} needs {need} bytes ({_mib(need)}: {_mib(cost.fixed)} fixed for the accumulators "
                f"and S² temporaries + {cost.per_row} bytes per row for one row"
                + (f" + {_mib(per_chunk)} for the chunk's {chunk_rows} rows" if per_chunk else "")
                + f") but a task has {budget} bytes ({_mib(budget)}, {budget_source or 'the budget'}); "
                f"{cost.shrink}, or give the workers more memory (fewer threads per worker, a larger "
                f"memory_limit)" + (", or use smaller chunks" if per_chunk else ""))
        room = min(room, budget - cost.fixed - per_chunk)
    if cost.per_row == 0:  # no blocks: the chunk in one piece
        rows = int(chunk_rows or 0)
    else:
        rows = room // cost.per_row
        if rows < 1:
            raise MemoryError(
                f"{cost.what} needs {cost.per_row} bytes per row for its feature blocks, more than the cap "
                f"block_bytes={block_bytes}; raise block_bytes")
        if chunk_rows is not None:
            rows = max(1, min(rows, int(chunk_rows)))
    return BlockPlan(cost, int(rows), block_bytes, budget, budget_source, int(chunk_rows or 0))


# -- budgets ----------------------------------------------------------------------------------
def cluster_workers(client: Any) -> dict[str, dict[str, Any]]:
    """Every worker of the client's cluster, address → the scheduler's record of it (memory_limit, nthreads,
    resources, …)."""
    try:
        return client.scheduler_info(n_workers=-1)["workers"]
    except TypeError:  # older distributed: every worker is listed
        return client.scheduler_info()["workers"]


def cluster_budget(client: Any) -> tuple[int | None, str]:
    """The smallest ``memory_limit / nthreads`` over the client's workers (None when none sets a limit)."""
    workers = cluster_workers(client)
    best: tuple[int, str] | None = None
    for addr, w in workers.items():
        limit, threads = int(w.get("memory_limit") or 0), max(1, int(w.get("nthreads") or 1))
        if limit > 0 and (best is None or limit // threads < best[0]):
            best = (limit // threads, f"worker {addr}: memory_limit {_mib(limit)} / {threads} threads")
    return (None, "the workers set no memory_limit") if best is None else best


def local_budget() -> tuple[int, str]:
    """This machine's available RAM (psutil) divided by the threads of Dask's local scheduler."""
    import psutil

    avail = int(psutil.virtual_memory().available)
    threads = local_threads()
    return avail // threads, f"this machine's available RAM {_mib(avail)} / {threads} threads"


def local_threads() -> int:
    """The threads of Dask's local scheduler: ``num_workers`` when set, else the cores."""
    import dask

    n = dask.config.get("num_workers", None)
    return max(1, int(n) if n else os.cpu_count() or 1)


def task_budget() -> tuple[int | None, str]:
    """The budget of the distributed worker this code runs in (None outside a worker, or with no limit).

    Read from the worker itself, so that a task sizes its blocks for the memory it really has;
    ``distributed`` is only consulted when it is already imported.
    """
    if "distributed" not in sys.modules:
        return None, ""
    from distributed import get_worker

    try:
        worker = get_worker()
    except ValueError:
        return None, ""
    limit = int(getattr(getattr(worker, "memory_manager", None), "memory_limit", None) or 0)
    threads = max(1, int(getattr(worker.state, "nthreads", 0) or getattr(worker, "nthreads", 1) or 1))
    if limit <= 0:
        return None, ""
    return limit // threads, f"worker {worker.address}: memory_limit {_mib(limit)} / {threads} threads"


def pass_budget() -> tuple[int, str, bool]:
    """(budget, where it came from, whether tasks see it) for one task of a pass started here:
    the workers' (:func:`cluster_budget`) when a distributed client is active and they set a
    memory limit, else this machine's (:func:`local_budget`)."""
    if "distributed" in sys.modules:
        from distributed import get_client

        try:
            client = get_client()
        except ValueError:
            client = None
        if client is not None:
            budget, source = cluster_budget(client)
            if budget is not None:
                return budget, source, True
    return *local_budget(), False


# -- the registry of declared costs ------------------------------------------------------------
_COSTS: dict[Callable[..., Any], Callable[..., tuple[MemoryCost, int] | None]] = {}


def declare(chunk_fn: Callable[..., Any], cost_fn: Callable[..., tuple[MemoryCost, int] | None]) -> None:
    """Register ``cost_fn(n_dims, *args)`` → (cost, block_bytes) for ``chunk_fn(rows, *args)``."""
    _COSTS[chunk_fn] = cost_fn


#: Wrappers of a chunk function → the position, among a ``functools.partial``'s arguments, of the function they wrap
#: (:func:`declare_wrapper`).
_WRAPPERS: dict[Callable[..., Any], int] = {}


def declare_wrapper(wrapper: Callable[..., Any], inner: int) -> None:
    """Register ``wrapper``: ``functools.partial(wrapper, *a)`` runs the chunk function ``a[inner]`` on the same rows
    and arguments (moved to a device, say), so it is planned as that function is."""
    _WRAPPERS[wrapper] = int(inner)


def cost_of(chunk_fn: Callable[..., Any], args: tuple[Any, ...], n_dims: int) -> tuple[MemoryCost, int] | None:
    """The declared (cost, block_bytes) of ``chunk_fn`` called with ``args`` after rows of ``n_dims``
    columns (seen through the wrappers of :func:`declare_wrapper`), or None when it declared none."""
    while isinstance(chunk_fn, functools.partial) and chunk_fn.func in _WRAPPERS:
        chunk_fn = chunk_fn.args[_WRAPPERS[chunk_fn.func]]
    try:
        fn = _COSTS.get(chunk_fn)
    except TypeError:  # an unhashable callable declares nothing
        return None
    return None if fn is None else fn(int(n_dims), *args)


def plan_pass(chunk_fn: Callable[..., Any], args: tuple[Any, ...], n_dims: int, *, budget: int | None = None,
              budget_source: str = "") -> BlockPlan | None:
    """Plan a pass of ``chunk_fn(rows, *args)`` over ``n_dims`` columns once, before it starts: log
    the plan at INFO and refuse (``MemoryError``, both numbers) when one row cannot fit.

    The budget is ``budget`` if given, else :func:`pass_budget`: the workers' limits when a
    distributed client is active (the tasks then size their blocks within it too,
    :func:`task_budget`), else this machine's available RAM — then only to refuse, since rows
    per block must not follow the RAM that happens to be free (same chunking, same statistics).
    Returns None for a chunk function that declared no cost (e.g. a metric's small sums).
    """
    declared = cost_of(chunk_fn, args, n_dims)
    if declared is None:
        return None
    cost, block_bytes = declared
    binding = True
    if budget is None:
        budget, budget_source, binding = pass_budget()
    plan = plan_blocks(cost, block_bytes, budget=budget, budget_source=budget_source)
    if not binding:
        plan = dataclasses.replace(plan, rows=plan_blocks(cost, block_bytes).rows)
    logger.info("memory plan: %s", plan.describe())
    return plan


def check_fits(need: int, what: str, shrink: str) -> None:
    """Raise ``MemoryError`` with both numbers when ``need`` bytes exceed this machine's available RAM.

    For the work that runs where it is called (a solve after the pass), not in a task.
    """
    import psutil

    have = int(psutil.virtual_memory().available)
    if need > have:
        raise MemoryError(f"the {what} needs {need / 2**30:.2f} GiB, more than the {have / 2**30:.2f} GiB of RAM "
                          f"available on this machine; {shrink}")


def traced_peak(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> tuple[Any, int]:
    """``fn(*args, **kwargs)`` and the peak bytes it allocated above what was allocated before,
    as :mod:`tracemalloc` sees them (NumPy's allocations are traced; BLAS workspaces and
    Numba's are not). For checking a declared :class:`MemoryCost` against the code; slow while
    tracing, so not for production passes."""
    import tracemalloc

    started = not tracemalloc.is_tracing()
    if started:
        tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        tracemalloc.reset_peak()
        out = fn(*args, **kwargs)
        peak = tracemalloc.get_traced_memory()[1] - before
    finally:
        if started:
            tracemalloc.stop()
    return out, int(peak)
