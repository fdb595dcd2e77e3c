"""Model versions: every run writes a new version; only a published one is ever seen.

Layout of ``<models>/<model>/``: ``v000001.zarr`` … (each a saved model, checksummed),
``v000001.json`` … (the run that made it: rows, partitions, preprocessing, anomaly threshold;
with the SHA-256 of its content), and ``CURRENT`` holding the name of the live version.

A version goes through two steps. :meth:`ModelVersions.write` saves the model (atomically) and
nothing else: the version is *unpublished*. After the run's commit point (the statistics store's
manifest swap, which records the run info), :meth:`ModelVersions.publish` writes the run info
and then swaps ``CURRENT`` (each atomically). A version is **published** when its run info
exists and it is not newer than ``CURRENT``; ``CURRENT`` only moves forward. Everything that
lists, describes or loads versions sees published ones only; an unpublished one is what a run
killed before (or while) publishing left behind, and :meth:`ModelVersions.remove_unpublished`
deletes it (the next run, or ``tgpflow gc``) unless the store's manifest names it — then the
next run publishes it. Earlier versions are kept. ``tgpflow.load(<models>/<model>)`` loads the
current one.

``root`` may be a path or an fsspec URL (``memory://``, ``s3://`` …): every step is then the
single-object write of :mod:`tgpflow.io.atomic` (a version is a directory target with its pointer;
the run info and ``CURRENT`` are one object each), and the order above is what makes it safe.
"""

from __future__ import annotations

import dataclasses
import json
import re
import warnings
from typing import Any

from tgpflow.errors import ModelFileError, UnverifiedMetadataWarning
from tgpflow.features.scaling import Scaling
from tgpflow.io.artifact import json_checksum, read_json_object
from tgpflow.io.atomic import AnyPath, as_path, atomic_write_text, discard, remove_temporaries
from tgpflow.io.outputs import output_kind

__all__ = ["ModelVersions", "is_versions_dir"]

_VERSION = re.compile(r"^v(\d{6})\.(zarr|json)$")
_CHECKSUM_KEY = "sha256"


def is_versions_dir(path: AnyPath) -> bool:
    return (as_path(path) / "CURRENT").is_file()


def _adopt_preprocess(est: Any, info: dict[str, Any]) -> None:
    """A version written before models carried their standardization (:mod:`tgpflow.features.scaling`) was fitted
    to rows the pipeline had preprocessed, and its bounds, support box and own anomaly threshold are in those
    units: give it the run's preprocessing as its scaling, its bounds and box in the data's units, and the run's
    threshold (learned on raw rows), so that it too takes raw rows and flags what the pipeline flagged."""
    scaling = Scaling.from_dict(info["preprocess"])
    est.scaling_ = scaling
    if info.get("anomaly_threshold") is not None:  # the legacy sign rule: a log-density quantile, log p < t
        threshold = float(info["anomaly_threshold"])
        est.anomaly_threshold_ = threshold if info.get("threshold_of") == "anomaly_score" else -threshold
    if getattr(est, "bounds_", None) is not None:
        est.bounds_ = est.bounds_.unscaled(scaling)
    box = getattr(est, "support_", None)
    if box is not None:
        est.support_ = dataclasses.replace(box, lower=scaling.inverse(box.lower), upper=scaling.inverse(box.upper))


def _number(name: str) -> int:
    return int(name[1:])


class ModelVersions:
    """The versions of one model under ``root``, a path or an fsspec URL (``storage_options`` for its filesystem)."""

    def __init__(self, root: AnyPath, storage_options: dict[str, Any] | None = None):
        self.root = as_path(root, storage_options)

    def on_disk(self, suffix: str = "zarr") -> list[str]:
        """Every version with a ``.zarr`` (or ``.json``) on disk, published or not."""
        if not self.root.is_dir():
            return []
        return sorted(m[0][:-len(suffix) - 1] for p in self.root.iterdir()
                      if (m := _VERSION.match(p.name)) and m[2] == suffix)

    def current(self) -> str | None:
        pointer = self.root / "CURRENT"
        return pointer.read_text().strip() if pointer.exists() else None

    def list(self) -> list[str]:
        """The published versions, oldest first."""
        current = self.current()
        if current is None:
            return []
        described = set(self.on_disk("json"))
        return [v for v in self.on_disk() if v in described and _number(v) <= _number(current)]

    def unpublished(self, keep: str | None = None) -> list[str]:
        """Versions on disk that are not published (but ``keep``, the one a committed manifest names)."""
        published = set(self.list())
        return [v for v in sorted(set(self.on_disk()) | set(self.on_disk("json")))
                if v not in published and v != keep]

    def next_name(self) -> str:
        versions = self.on_disk()
        return f"v{(_number(versions[-1]) + 1) if versions else 1:06d}"

    def write(self, est: Any) -> str:
        """Save ``est`` as the next version, unpublished; returns its name."""
        name = self.next_name()
        self.root.mkdir(parents=True, exist_ok=True)
        est.save(self.root / f"{name}.zarr")
        return name

    def publish(self, name: str, info: dict[str, Any]) -> None:
        """Write the run info of ``name`` and make it current (each step atomic; repeating it is harmless)."""
        if not (self.root / f"{name}.zarr").exists():
            raise ModelFileError(f"{self.root}: version {name} does not exist")
        info = json.loads(json.dumps(info, default=float))
        text = json.dumps({**info, _CHECKSUM_KEY: json_checksum(info)}, indent=1, sort_keys=True)
        path = self.root / f"{name}.json"
        if not path.exists() or path.read_text() != text:
            atomic_write_text(path, text)
        if self.current() != name:
            atomic_write_text(self.root / "CURRENT", name + "\n")

    def info(self, name: str | None = None) -> dict[str, Any]:
        """The run info of a published version (the current one by default), its checksum verified."""
        name = name or self.current()
        if name is None:
            raise ModelFileError(f"{self.root}: no current model version")
        path = self.root / f"{name}.json"
        if not path.exists():
            return {}
        info = read_json_object(path, "the version's run info")
        stored = info.pop(_CHECKSUM_KEY, None)
        if stored is None:
            warnings.warn(f"{path}: written before run info had checksums; its content is not verified",
                          UnverifiedMetadataWarning, stacklevel=2)
        elif stored != json_checksum(info):
            raise ModelFileError(f"{path}: the version's run info does not match its checksum; the file was "
                                 f"modified after it was written")
        return info

    def load(self, name: str | None = None, *, verify: bool = False) -> Any:
        import tgpflow

        name = name or self.current()
        if name is None:
            raise ModelFileError(f"{self.root}: no current model version (CURRENT is missing)")
        est = tgpflow.load(self.root / f"{name}.zarr", verify=verify)
        info = self.info(name) if name in self.list() else {}
        if info.get("preprocess") and getattr(est, "scaling_", None) is None:
            _adopt_preprocess(est, info)
        return est

    def remove_unpublished(self, keep: str | None = None, *, dry_run: bool = False) -> list[str]:
        """Delete the unpublished versions (not ``keep``) and writers' temporaries; returns their paths.

        Only tgpflow's own files go: a ``vNNNNNN.zarr`` that is a tgpflow model, its run info, and the
        temporaries of :mod:`tgpflow.io.atomic`. Call it under the store's lock.
        """
        removed = remove_temporaries(self.root, dry_run=dry_run)
        for name in self.unpublished(keep):
            for path in (self.root / f"{name}.json", self.root / f"{name}.zarr"):  # run info first
                if not path.exists() or (path.suffix == ".zarr" and output_kind(path) != "model"):
                    continue
                if not dry_run:
                    discard(path)
                removed.append(str(path))
        return removed
