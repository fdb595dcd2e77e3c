"""The statistics store: per-partition statistics in a Zarr group, with an atomically swapped manifest.

Layout (the root is a Zarr group; every artifact below is a checksummed Zarr group written by
:func:`tgpflow.io.artifact.write_artifact`, never pickled)::

    STORE/
      zarr.json                    the group
      manifest.json                the commit point: replaced whole with os.replace
      draws/<model>.zarr           the feature draw / Nyström basis each model's statistics use
      parts/<pfp>/<model>.zarr     statistics of one partition (pfp: partition fingerprint)
      totals/<model>-<run>.zarr    the running total after run <run>
                                   (none for a model without additive statistics, RSR: it is refitted
                                   on the rows of the partitions the manifest lists)
      .lock                        held by a run from start to end (filelock)

A run writes new part and total artifacts first, then swaps ``manifest.json``; a run that dies
before the swap leaves the previous manifest — and everything it references — intact, and its
orphans are removed by the next run (or ``tgpflow gc``). The manifest is also the run's journal
of what follows the swap (:mod:`tgpflow.pipeline.journal`). A second run on the same store
waits ``lock_timeout`` seconds for the lock and then fails, naming the holder. A partition's
fingerprint is a hash of its path, size and modification time (or of its bytes,
``fingerprint: content``).
"""

from __future__ import annotations

import contextlib
import datetime
import hashlib
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tgpflow.errors import ModelFileError, TgpflowError
from tgpflow.io.artifact import read_artifact, read_json_object, write_artifact
from tgpflow.io.atomic import atomic_write_text, discard, remove_temporaries
from tgpflow.io.outputs import output_kind
from tgpflow.models.registry import stats_classes
from tgpflow.stats.split import StatsBundle

__all__ = ["StatsStore", "StoreBusyError", "load_stats", "partition_fingerprint", "MANIFEST_SCHEMA"]

MANIFEST_SCHEMA = 1


class StoreBusyError(TgpflowError, RuntimeError):
    """Another run holds the store's lock."""


def load_stats(path: str | Path) -> Any:
    """Any statistics artifact, or a bundle of them (kind from its metadata; checksums verified)."""
    kinds = stats_classes()  # of every model kind in tgpflow.models.registry
    kind, arrays, meta = read_artifact(path, expected_kinds=(*kinds, "StatsBundle"))
    if kind == "StatsBundle":
        return StatsBundle.from_arrays(meta, arrays, kinds)
    return kinds[kind].from_arrays(meta["fingerprint"], arrays)


def partition_fingerprint(fs: Any, path: str, mode: str = "metadata") -> str:
    """A short hash of (path, size, mtime) — or of the file's bytes with ``mode="content"``."""
    h = hashlib.sha256(path.encode())
    if mode == "content":
        with fs.open(path, "rb") as fh:
            for block in iter(lambda: fh.read(1 << 22), b""):
                h.update(block)
    else:
        info = fs.info(path)
        stamp = info.get("mtime") or info.get("LastModified") or info.get("last_modified") or info.get("ETag") or ""
        h.update(f"|{info.get('size')}|{stamp}".encode())
    return h.hexdigest()[:20]


class StatsStore:
    """A statistics store rooted at ``root`` (see the module docstring)."""

    def __init__(self, root: str | Path):
        self.root = Path(root)

    # -- locking ------------------------------------------------------------------------
    @contextlib.contextmanager
    def lock(self, timeout: float = 0.0) -> Iterator[None]:
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

    def _ensure_group(self) -> None:
        if not (self.root / "zarr.json").exists():
            import zarr

            zarr.open_group(store=str(self.root), mode="a", attributes={"tgpflow": "statistics store"})

    # -- the manifest -------------------------------------------------------------------
    @property
    def manifest_path(self) -> Path:
        return self.root / "manifest.json"

    def read_manifest(self) -> dict[str, Any] | None:
        if not self.manifest_path.exists():
            return None
        manifest = read_json_object(self.manifest_path, "the store manifest")
        if manifest.get("schema") != MANIFEST_SCHEMA:
            raise ModelFileError(f"{self.manifest_path}: manifest schema {manifest.get('schema')!r}, "
                                 f"this tgpflow reads {MANIFEST_SCHEMA}")
        return manifest

    def write_manifest(self, manifest: dict[str, Any]) -> None:
        """Replace the manifest atomically (write a temporary, fsync, os.replace): the commit point."""
        atomic_write_text(self.manifest_path, json.dumps(manifest, indent=1, sort_keys=True))

    # -- artifacts ------------------------------------------------------------------------
    def save(self, stats: Any, rel: str) -> str:
        meta = {"fingerprint": stats.fingerprint, **(stats.artifact_meta() if isinstance(stats, StatsBundle) else {})}
        write_artifact(self.root / rel, type(stats).__name__, stats.to_arrays(), meta)
        return rel

    def load(self, rel: str) -> Any:
        path = self.root / rel
        if not path.exists():
            raise ModelFileError(f"{path}: a statistics entry named by the store manifest is missing")
        return load_stats(path)

    def save_draw(self, model: str, arrays: dict[str, Any], meta: dict[str, Any]) -> str:
        rel = f"draws/{model}.zarr"
        write_artifact(self.root / rel, "Draw", arrays, meta)
        return rel

    def load_draw(self, rel: str) -> tuple[dict[str, Any], dict[str, Any]]:
        _, arrays, meta = read_artifact(self.root / rel, expected_kinds=("Draw",))
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
        removed = remove_temporaries(self.root, dry_run=dry_run)
        for sub in ("parts", "totals", "draws"):
            base = self.root / sub
            if not base.exists():
                continue
            for directory in [base, *sorted(p for p in base.iterdir() if p.is_dir() and not p.name.endswith(".zarr"))]:
                removed += remove_temporaries(directory, dry_run=dry_run)
            for path in sorted(base.rglob("*.zarr")):
                rel = path.relative_to(self.root).as_posix()
                if rel in keep or any(k.startswith(rel + "/") for k in keep) or output_kind(path) != "statistics":
                    continue
                if not dry_run:
                    discard(path)  # a kill midway leaves a temporary, removed next time
                removed.append(str(path))
            for d in sorted(base.glob("*"), reverse=True):
                if not dry_run and d.is_dir() and not any(d.iterdir()):
                    d.rmdir()
        return removed
