"""Model versions: every run writes a new version; a ``CURRENT`` pointer is swapped atomically.

Layout of ``<models>/<model>/``: ``v000001.zarr`` … (each a saved model, checksummed),
``v000001.json`` … (the run that made it: rows, partitions, preprocessing, anomaly threshold),
and ``CURRENT`` holding the name of the live version, replaced with ``os.replace`` only after
the version is written whole. Earlier versions are kept. ``tgpflow.load(<models>/<model>)``
loads the current one.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

from tgpflow.errors import ModelFileError

__all__ = ["ModelVersions", "is_versions_dir"]

_VERSION = re.compile(r"^v(\d{6})\.zarr$")


def is_versions_dir(path: str | Path) -> bool:
    return (Path(path) / "CURRENT").is_file()


class ModelVersions:
    """The versions of one model under ``root``."""

    def __init__(self, root: str | Path):
        self.root = Path(root)

    def list(self) -> list[str]:
        if not self.root.exists():
            return []
        return sorted(p.name[:-5] for p in self.root.iterdir() if _VERSION.match(p.name))

    def current(self) -> str | None:
        pointer = self.root / "CURRENT"
        return pointer.read_text().strip() if pointer.exists() else None

    def next_name(self) -> str:
        versions = self.list()
        return f"v{(int(versions[-1][1:]) + 1) if versions else 1:06d}"

    def write(self, est: Any, info: dict[str, Any]) -> str:
        """Save ``est`` as the next version with its run info (not yet current)."""
        name = self.next_name()
        self.root.mkdir(parents=True, exist_ok=True)
        est.save(self.root / f"{name}.zarr")
        tmp = self.root / f".{name}.json.tmp-{os.getpid()}"
        tmp.write_text(json.dumps(info, indent=1, sort_keys=True, default=float))
        os.replace(tmp, self.root / f"{name}.json")
        return name

    def set_current(self, name: str) -> None:
        if not (self.root / f"{name}.zarr").exists():
            raise ModelFileError(f"{self.root}: version {name} does not exist")
        tmp = self.root / f".CURRENT.tmp-{os.getpid()}"
        tmp.write_text(name + "\n")
        os.replace(tmp, self.root / "CURRENT")

    def info(self, name: str | None = None) -> dict[str, Any]:
        name = name or self.current()
        if name is None:
            raise ModelFileError(f"{self.root}: no current model version")
        path = self.root / f"{name}.json"
        return json.loads(path.read_text()) if path.exists() else {}

    def load(self, name: str | None = None) -> Any:
        import tgpflow

        name = name or self.current()
        if name is None:
            raise ModelFileError(f"{self.root}: no current model version (CURRENT is missing)")
        return tgpflow.load(self.root / f"{name}.zarr")
