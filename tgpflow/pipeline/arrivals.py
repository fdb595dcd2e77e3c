"""Which listed partitions a run may read: one odd partition must not stop every later run.

Partitions land while runs are scheduled: a day with no rows is a valid file with zero rows, a file still
being written has no footer yet, a writer may mark a finished directory with a ``_SUCCESS`` file. Before a
run plans its work, :func:`arrivals` sorts the partitions it has not committed (new, or changed since) into

* **ready**: read by this run;
* **empty**: readable, with no rows: committed with 0 rows (no statistics, no scores), so that a refit is not
  blocked and the day is not read again;
* **held back** for this run, with a one-line warning naming each and why, and looked at again by the next run:
  modified less than ``source.settle_seconds`` ago (still being written); without the marker file
  ``source.marker`` in its directory (a Zarr store: inside it) when the spec names one; or not readable yet (not
  a Parquet file, no footer, no Zarr metadata). A partition that is still unreadable after
  ``source.max_retries`` runs is refused by name: the run fails until it is fixed or removed.

The run's plan (:mod:`tgpflow.pipeline.runner`) takes its window over every listed partition, then leaves out the
new ones held back, while a committed one being rewritten keeps its committed statistics until it can be read.
The unreadable partitions' counts of runs live in the store beside the manifest (``pending.json``, written under
the run's lock, atomically); a partition that becomes readable, or changes, starts again from 0. Committed
partitions are not probed again: a committed partition that becomes unreadable is found when it is read.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import time
from typing import Any

from tgpflow.errors import EmptySourceError, SourceError, TgpflowError
from tgpflow.io.atomic import atomic_write_text
from tgpflow.pipeline.discover import Partitions
from tgpflow.pipeline.partitions import partition_source
from tgpflow.pipeline.spec import PipelineSpec
from tgpflow.pipeline.store import StatsStore

__all__ = ["Arrivals", "arrivals", "is_unreadable", "PENDING"]

logger = logging.getLogger("tgpflow")

#: The store's record of unreadable partitions: {key: {"fingerprint": …, "runs": n, "reason": …}}.
PENDING = "pending.json"


@dataclasses.dataclass(frozen=True)
class Arrivals:
    """The empty partitions among those not committed, and those held back with their reasons."""

    empty: frozenset[str]
    held: dict[str, str]

    def warnings(self) -> list[str]:
        return [f"{key}: left out of this run ({why}); the next run looks at it again" for key, why in
                self.held.items()]


def arrivals(spec: PipelineSpec, store: StatsStore, parts: Partitions, manifest: dict[str, Any] | None, *,
             record: bool = True, now: float | None = None) -> Arrivals:
    """Sort the uncommitted partitions of ``parts`` (module docstring). ``record``: update the store's count of
    unreadable partitions (False for a dry run)."""
    committed = (manifest or {}).get("partitions", {})
    pending = _read_pending(store)
    source = spec.source
    now = time.time() if now is None else now
    held: dict[str, str] = {}
    empty: set[str] = set()
    unreadable: dict[str, dict[str, Any]] = {}
    for key in parts.keys:
        fp = parts.fingerprint(key, source.fingerprint)
        if key in committed and committed[key]["fingerprint"] == fp:
            continue
        path = parts.path(key)
        if key not in parts.ranges:  # a file or a store (a date's rows are appended to a committed store)
            age = now - _modified(parts.fs, path)
            if source.settle_seconds and age < source.settle_seconds:
                held[key] = f"modified {age:.0f} s ago, less than source.settle_seconds = {source.settle_seconds:g}"
                continue
            if source.marker and not _has_marker(parts.fs, path, parts.format, source.marker):
                held[key] = f"no {source.marker} marker beside it yet (source.marker)"
                continue
        try:
            partition_source(spec, key, source.columns, parts.format, parts.ranges.get(key))
        except EmptySourceError:
            empty.add(key)
        except SourceError as exc:
            if not is_unreadable(exc):
                raise  # a readable partition that the spec does not fit (a missing column): the run says so
            before = pending.get(key, {})
            runs = (before.get("runs", 0) if before.get("fingerprint") == fp else 0) + 1
            if runs > source.max_retries:
                raise TgpflowError(f"{path}: still unreadable after {runs - 1} runs (source.max_retries = "
                                   f"{source.max_retries}): {exc}; fix or remove it") from None
            unreadable[key] = {"fingerprint": fp, "runs": runs, "reason": str(exc)}
            held[key] = f"not readable yet, run {runs} of {source.max_retries}: {exc}"
    if record and (unreadable or pending):
        _write_pending(store, unreadable)
    arrived = Arrivals(frozenset(empty), held)
    for line in arrived.warnings():
        logger.warning("%s: %s", spec.name, line)
    return arrived


def is_unreadable(exc: SourceError) -> bool:
    """Whether a partition's error is about its bytes (not yet written, truncated) rather than its contents."""
    text = str(exc)
    return "not a readable Parquet file" in text or "not a readable Zarr store" in text


def _modified(fs: Any, path: str) -> float:
    """The latest modification time (seconds since the epoch) of a file, or of any file of a store."""
    infos = fs.find(path, detail=True).values() if fs.isdir(path) else [fs.info(path)]
    stamps = [_stamp(info) for info in infos]
    return max(stamps) if stamps else time.time()


def _stamp(info: dict[str, Any]) -> float:
    value = info.get("mtime") or info.get("LastModified") or info.get("last_modified") or info.get("created")
    if hasattr(value, "timestamp"):
        return float(value.timestamp())
    return float(value) if value is not None else 0.0


def _has_marker(fs: Any, path: str, fmt: str, marker: str) -> bool:
    folder = path.rstrip("/") if fmt == "zarr" else path.rstrip("/").rsplit("/", 1)[0]
    return bool(fs.exists(f"{folder}/{marker}"))


def _read_pending(store: StatsStore) -> dict[str, Any]:
    path = store.root / PENDING
    return json.loads(path.read_text()) if path.exists() else {}


def _write_pending(store: StatsStore, pending: dict[str, Any]) -> None:
    store.root.mkdir(parents=True, exist_ok=True)
    atomic_write_text(store.root / PENDING, json.dumps(pending, indent=1, sort_keys=True))
