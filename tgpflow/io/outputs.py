"""What may be replaced: tgpflow writes over a path only when it holds a tgpflow output of the same kind.

Every output tgpflow writes says what it is, so that a later command can tell its own output from a
user's data before it replaces anything:

* models and statistics are artifacts (:mod:`tgpflow.io.artifact`): their header names their kind, and
  a model's metadata holds the parameters of the estimator that :func:`tgpflow.load` rebuilds
  (:func:`artifact_output`);
* a Parquet file (samples, a pipeline's per-partition scores) carries ``tgpflow.output`` in its
  schema metadata;
* a directory (a scores dataset, a report) holds a marker file :data:`MARKER` — Parquet readers
  skip names starting with ``_``, so the dataset reads as before. Off the local filesystem every
  directory output (a Zarr artifact too) has one, and it is also the pointer to the current version
  (:mod:`tgpflow.io.atomic`).

:func:`check_replace` is the rule (docs/architecture.md, "Bad input and faults": never delete anything the user
did not ask to replace): a path that does not exist may be written; one that holds a tgpflow output
of the same kind may be replaced when the caller says so (the CLI's ``--overwrite``); anything else
— a user's directory, a data file, the model passed as input, a tgpflow output of another kind — is
refused and left untouched. A directory off the local filesystem that holds only the unreferenced
versions a killed first write left counts as absent. :func:`~tgpflow.io.atomic.atomic_path` applies
the rule twice, before the work starts and again just before the swap. All of it works on any fsspec
filesystem (a path or a URL).
"""

from __future__ import annotations

import json
import zipfile
from collections.abc import Mapping
from typing import Any

from tgpflow.core.version import __version__
from tgpflow.errors import OutputExistsError
from tgpflow.io.atomic import AnyPath, only_leftovers, as_path, is_local

__all__ = ["MARKER", "PARQUET_KEY", "output_kind", "artifact_output", "check_replace", "write_marker"]

#: The marker file inside a directory output; its JSON names the kind.
MARKER = "_tgpflow_output.json"
#: The Parquet schema-metadata key that names a file output's kind.
PARQUET_KEY = b"tgpflow.output"


def output_kind(path: AnyPath) -> str | None:
    """``"model"``, ``"statistics"``, ``"scores"``, ``"samples"``, ``"report"`` … for a tgpflow output; None otherwise.

    Reads only headers (Zarr attributes, the .npz metadata entry, a Parquet footer, the marker — which
    off the local filesystem is also the pointer to the current version, :mod:`tgpflow.io.atomic`), on
    any fsspec filesystem, and never raises: an unreadable path is simply not a tgpflow output.
    """
    try:
        path = as_path(path)
        if is_local(path) and path.is_symlink():
            return None  # never replace a link (os.rename would replace the link, not what it names)
        if path.is_dir():
            marker = path / MARKER
            if marker.is_file():
                kind = json.loads(marker.read_text()).get("kind")
                return str(kind) if kind else None
            if (path / "zarr.json").is_file():
                attrs = json.loads((path / "zarr.json").read_text()).get("attributes", {})
                return _artifact_output(attrs)
            return None
        if not path.is_file():
            return None
        with path.open("rb") as fh:
            if zipfile.is_zipfile(fh):
                import numpy as np

                from tgpflow.io.artifact import _META_KEY  # the .npz entry that holds an artifact's header

                fh.seek(0)
                with np.load(fh, allow_pickle=False) as npz:
                    if _META_KEY not in npz.files:
                        return None
                    return _artifact_output(json.loads(str(npz[_META_KEY])))
            import pyarrow.parquet as pq

            fh.seek(0)
            meta = pq.read_schema(fh).metadata or {}
        if PARQUET_KEY in meta:
            return meta[PARQUET_KEY].decode()
        if b"tgpflow.partition" in meta:  # a pipeline's score file written before the key existed
            return "scores"
    except Exception:  # noqa: BLE001 - any unreadable container is "not ours"
        return None
    return None


def _artifact_output(header: dict) -> str | None:
    return artifact_output(header.get("meta") or {}) if "tgpflow_schema" in header else None


def artifact_output(meta: Mapping[str, Any]) -> str:
    """The output kind of an artifact with metadata ``meta``: ``"model"`` for what :func:`tgpflow.load` reads,
    else ``"statistics"`` (statistics, a statistics store's feature draws).

    A model file's metadata holds ``params``, the estimator's parameters that loading rebuilds it from
    (every layout has them; :func:`tgpflow.models.model_file.write_model` refuses metadata without them);
    no other artifact has them. Deciding from the file itself keeps this layer from asking the models
    layer for its list of kinds.
    """
    return "model" if isinstance(meta.get("params"), Mapping) else "statistics"


def check_replace(path: AnyPath, kind: str, *, overwrite: bool) -> None:
    """Raise :class:`OutputExistsError` unless ``path`` may be written as a ``kind`` output (module docstring)."""
    path = as_path(path)
    if is_local(path):
        if not path.exists() and not path.is_symlink():
            return
    elif not path.exists() or only_leftovers(path):  # what a killed first write left counts as absent
        return
    found = output_kind(path)
    if found is None:
        what = "a directory" if path.is_dir() else "a file"
        raise OutputExistsError(f"{path} exists and is {what} that tgpflow did not write; refusing to replace it "
                                f"(nothing was written). Choose another output path, or remove it yourself.")
    if found != kind:
        raise OutputExistsError(f"{path} holds a tgpflow {found}, not a {kind}; refusing to replace it "
                                f"(nothing was written). Choose another output path.")
    if not overwrite:
        raise OutputExistsError(f"{path} already holds a tgpflow {kind}; pass --overwrite to replace it "
                                f"(the replacement is atomic: the old one stays until the new one is complete).")


def write_marker(directory: AnyPath, kind: str) -> None:
    """Mark a directory output (written inside its temporary, before the swap) as a tgpflow ``kind``."""
    (as_path(directory) / MARKER).write_text(json.dumps({"kind": kind, "tgpflow": __version__}))
