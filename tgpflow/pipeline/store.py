"""The statistics store: per-partition statistics in a Zarr group, with an atomically swapped manifest.

Layout (the root is a Zarr group; every artifact below is a checksummed Zarr group written by
:func:`tgpflow.io.artifact.write_artifact`, never pickled)::

    STORE/
      zarr.json                    the group
      manifest.json                the commit point: replaced whole with os.replace
      draws/<model>.zarr           the feature draw / Nyström basis each model's statistics use
      parts/<pfp>/<model>.zarr     statistics of one partition (pfp: partition fingerprint), with their
                                   draw (written before statistics carried it: its fingerprint only)
      totals/<model>-<run>.zarr    the running total after run <run>
                                   (none for a model without additive statistics, RSR: it is refitted
                                   on the rows of the partitions the manifest lists)
      drift/frame-<run>.zarr       the bins and directions the partitions' drift sums use (frozen once)
      drift/parts/<pfp>.zarr       one partition's drift sums (:mod:`tgpflow.pipeline.drift_sums`)
      drift/reference-<run>.zarr   the drift sums of the partitions of the version run <run> wrote
      .lock                        held by a run from start to end (see below)

A run writes new part and total artifacts first, then swaps ``manifest.json``; a run that dies
before the swap leaves the previous manifest — and everything it references — intact, and its
orphans are removed by the next run (or ``tgpflow gc``). The manifest is also the run's journal
of what follows the swap (:mod:`tgpflow.pipeline.journal`). A second run on the same store
waits ``lock_timeout`` seconds for the lock and then fails, naming the holder. The manifest keys
partitions by their paths relative to the source's root, and fingerprints them as
:mod:`tgpflow.pipeline.discover` says: a store can move with its data (another machine, object
storage) and still knows which partitions it holds.

The store may live on any fsspec filesystem (``StatsStore("s3://bucket/stats.zarr")``,
``memory://``, ``file://``): its artifacts are then written as :mod:`tgpflow.io.atomic` says for
filesystems without atomic rename (each a new hidden version made current by one pointer object)
and the manifest is replaced in one single-object write, so the commit point is still one atomic
step. The run lock differs:

* on the local filesystem it is a :mod:`filelock` lock: exclusive among processes on that machine
  (and on network filesystems that honour ``fcntl`` locks), released by the OS when a run dies;
* elsewhere it is a lock object ``.lock`` created with fsspec's exclusive-create mode (``"xb"``)
  and deleted at the end of the run. Exclusive creation is atomic where the filesystem implements it
  with a conditional write (S3 through s3fs 2025.7 or newer — ``If-None-Match``; Azure through adlfs);
  ``memory://`` (one process, for tests) checks and then writes. Where
  the filesystem can only check and then write, two runs started at the same moment can both
  get it, so **keeping concurrent runs of one store apart is then the scheduler's job** (one cron
  entry, one Airflow task with ``max_active_runs=1`` …). A run that is killed leaves its lock object
  behind (no OS releases it): the next run is refused with the holder's note until it is deleted by
  hand, after checking that the run it names is gone.
"""

from __future__ import annotations

import contextlib
import datetime
import json
import os
import socket
import time
from collections.abc import Iterator
from typing import Any

from tgpflow.errors import ModelFileError, TgpflowError
from tgpflow.io.artifact import read_artifact, read_json_object, write_artifact
from tgpflow.io.atomic import AnyPath, as_path, atomic_write_text, discard, is_local, remove_temporaries, zarr_store
from tgpflow.io.outputs import output_kind
from tgpflow.models.registry import stats_classes
from tgpflow.stats.split import StatsBundle

__all__ = ["StatsStore", "StoreBusyError", "load_stats", "MANIFEST_SCHEMA"]

#: 2: partition keys relative to the source's root; 1 (read, migrated by the next run): absolute keys.
MANIFEST_SCHEMA = 2
_READABLE_SCHEMAS = (1, 2)


class StoreBusyError(TgpflowError, RuntimeError):
    """Another run holds the store's lock."""


def load_stats(path: AnyPath, storage_options: dict[str, Any] | None = None) -> Any:
    """Any statistics artifact, or a bundle of them (kind from its metadata; checksums verified); a path or
    an fsspec URL."""
    kinds = stats_classes()  # of every model kind in tgpflow.models.registry
    kind, arrays, meta = read_artifact(path, expected_kinds=(*kinds, "StatsBundle"), storage_options=storage_options)
    if kind == "StatsBundle":
        return StatsBundle.from_arrays(meta, arrays, kinds)
    return kinds[kind].from_artifact(arrays, meta)


class StatsStore:
    """A statistics store rooted at ``root``, a path or an fsspec URL (see the module docstring)."""

    def __init__(self, root: AnyPath, storage_options: dict[str, Any] | None = None):
        self.root = as_path(root, storage_options)

    # -- locking ------------------------------------------------------------------------
    @contextlib.contextmanager
    def lock(self, timeout: float = 0.0) -> Iterator[None]:
        """Hold the store's run lock (module docstring) for the ``with`` block, waiting up to ``timeout`` s."""
        if not is_local(self.root):
            with self._object_lock(timeout):
                self._ensure_group()
                yield
            return
        from filelock import FileLock, Timeout

        self.root.mkdir(parents=True, exist_ok=True)
        holder = self.root / ".lock.holder"
        lock = FileLock(str(self.root / ".lock"))
        try:
            lock.acquire(timeout=timeout)
        except Timeout:
            who = holder.read_text() if holder.exists() else "unknown"
            raise StoreBusyError(f"{self.root}: another run holds the store lock ({who}); waited {timeout:g} s. "
                                 f"Retry later, or raise lock_timeout in the spec") from None
        try:
            holder.write_text(f"pid {os.getpid()} since {datetime.datetime.now().isoformat(timespec='seconds')}")
            self._ensure_group()
            yield
        finally:
            with contextlib.suppress(OSError):
                holder.unlink()
            lock.release()

    @contextlib.contextmanager
    def _object_lock(self, timeout: float) -> Iterator[None]:
        """The lock object of a store off the local filesystem: exclusive creation, deleted at the end."""
        lock = self.root / ".lock"
        note = (f"pid {os.getpid()} on {socket.gethostname()} since "
                f"{datetime.datetime.now().isoformat(timespec='seconds')}")
        deadline = time.monotonic() + timeout
        while True:
            try:
                with lock.open("xb") as fh:  # exclusive create: FileExistsError when another run holds it
                    fh.write(note.encode())
                break
            except FileExistsError:
                if time.monotonic() >= deadline:
                    try:
                        who = lock.read_text()
                    except OSError:
                        who = "unknown"
                    raise StoreBusyError(
                        f"{self.root}: another run holds the store lock ({who}); waited {timeout:g} s. Retry later, "
                        f"or raise lock_timeout in the spec. If that run was killed, its lock object stays (object "
                        f"storage has no OS to release it): delete {lock} once you know it is gone") from None
                time.sleep(min(1.0, max(0.0, deadline - time.monotonic())))
        try:
            yield
        finally:
            with contextlib.suppress(FileNotFoundError):
                lock.fs.rm_file(lock.path)

    def _ensure_group(self) -> None:
        if not (self.root / "zarr.json").exists():
            import zarr

            zarr.open_group(store=zarr_store(self.root), mode="a", attributes={"tgpflow": "statistics store"})

    # -- the manifest -------------------------------------------------------------------
    @property
    def manifest_path(self) -> Any:
        return self.root / "manifest.json"

    def read_manifest(self) -> dict[str, Any] | None:
        if not self.manifest_path.exists():
            return None
        manifest = read_json_object(self.manifest_path, "the store manifest")
        if manifest.get("schema") not in _READABLE_SCHEMAS:
            raise ModelFileError(f"{self.manifest_path}: manifest schema {manifest.get('schema')!r}, "
                                 f"this tgpflow reads {list(_READABLE_SCHEMAS)}")
        return manifest

    def write_manifest(self, manifest: dict[str, Any]) -> None:
        """Replace the manifest atomically (locally a temporary, fsync, os.replace; elsewhere one object): the
        commit point."""
        atomic_write_text(self.manifest_path, json.dumps(manifest, indent=1, sort_keys=True))

    # -- artifacts ------------------------------------------------------------------------
    def save(self, stats: Any, rel: str) -> str:
        write_artifact(self.root / rel, type(stats).__name__, stats.to_arrays(), stats.artifact_meta())
        return rel

    def load(self, rel: str) -> Any:
        path = self.root / rel
        if not path.exists():
            raise ModelFileError(f"{path}: a statistics entry named by the store manifest is missing")
        return load_stats(path)

    def save_draw(self, model: str, arrays: dict[str, Any], meta: dict[str, Any]) -> str:
        return self.save_arrays(f"draws/{model}.zarr", "Draw", arrays, meta)

    def load_draw(self, rel: str) -> tuple[dict[str, Any], dict[str, Any]]:
        return self.load_arrays(rel, "Draw")

    def save_arrays(self, rel: str, kind: str, arrays: dict[str, Any], meta: dict[str, Any]) -> str:
        """Write an artifact of ``kind`` (a draw, drift sums) at ``rel``; returns ``rel``."""
        write_artifact(self.root / rel, kind, arrays, meta)
        return rel

    def load_arrays(self, rel: str, kind: str) -> tuple[dict[str, Any], dict[str, Any]]:
        """The arrays and metadata of the artifact of ``kind`` at ``rel`` (checksums verified)."""
        _, arrays, meta = read_artifact(self.root / rel, expected_kinds=(kind,))
        return arrays, meta

    def collect_garbage(self, manifest: dict[str, Any] | None, *, dry_run: bool = False) -> list[str]:
        """Remove the part/total/draw artifacts that ``manifest`` does not reference (all of them without a
        committed manifest; only tgpflow statistics artifacts) and writers' temporaries; returns the paths
        (``dry_run``: only lists them)."""
        keep: set[str] = set()
        if manifest is not None:
            keep = {m["total"] for m in manifest["models"].values() if m.get("total")}  # none: refit from rows
            keep |= {rel for p in manifest["partitions"].values() for rel in p["stats"].values()}
            keep |= {manifest["models"][m]["draw"] for m in manifest["models"]}
            keep |= {rel for rel in (manifest.get("drift") or {}).values() if isinstance(rel, str)}
            keep |= {p["drift"]["sums"] for p in manifest["partitions"].values() if (p.get("drift") or {}).get("sums")}
        removed = remove_temporaries(self.root, dry_run=dry_run)
        for sub in ("parts", "totals", "draws", "drift"):
            base = self.root / sub
            if not base.exists():
                continue
            for directory in [base, *sorted(p for p in base.iterdir() if p.is_dir() and not p.name.endswith(".zarr"))]:
                removed += remove_temporaries(directory, dry_run=dry_run)
            for path in sorted(base.rglob("*.zarr"), key=str):
                rel = path.relative_to(self.root).as_posix()
                if any(part.startswith(".") for part in rel.split("/")):  # inside a version or a temporary
                    continue
                if rel in keep or any(k.startswith(rel + "/") for k in keep) or output_kind(path) != "statistics":
                    continue
                if not dry_run:
                    discard(path)  # a kill midway leaves a temporary, removed next time
                removed.append(str(path))
            for d in sorted(base.glob("*"), key=str, reverse=True):
                if not dry_run and d.is_dir() and not any(d.iterdir()):
                    d.rmdir()
        return removed
