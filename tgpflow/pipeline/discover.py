"""A pipeline's partitions: what ``source.path`` matches, keyed relative to its root, and fingerprinted.

A partition is one Parquet file, or one Zarr store — a directory holding ``zarr.json`` (a group or an
array; Zarr v2: ``.zgroup`` or ``.zarray``; :func:`tgpflow.io.backends.zarr.is_zarr_store`, on any fsspec
filesystem), e.g. ``data/date=2026-11-01.zarr`` or ``data/2026-11-01/``, read as Zarr whatever its name.
``source.path`` is a file, a directory or a glob, as for any source: a glob's matches that are Zarr stores
are Zarr partitions; a directory whose children are Zarr stores has those as its partitions; anything else
lists files (:func:`tgpflow.io.parquet.list_parquet_files`): CSV files when every one is named so (``.csv``,
``.tsv``, compressed or not: docs/data.md), else Parquet files (a directory's ``*.parquet`` files when it holds
any). One pipeline reads one format: matches, or a directory's children, that are both Zarr stores and other files
(a Zarr store beside Parquet files), and a glob's matches that are both CSV and other files, are refused, naming
one of each — never read as one kind alone.

**A date dimension.** With ``source.partition_by: date`` a Zarr store is not one partition but one per value
of its 1-D coordinate array ``date`` (strings, integers or datetime64, one value per row of the group's
``source.array``, or of its 1-D column arrays — the layout ``xarray.Dataset.to_zarr`` writes, and extends
with ``append_dim``; the CF-encoded time it writes for datetime64, counts in ``units: "days since …"``, is
decoded to its dates: :mod:`tgpflow.io.cf_time`): partition ``data.zarr#date=2026-11-01`` is the rows of that date
(:func:`tgpflow.io.backends.zarr.zarr_row_runs`; keys in store order, then in row order, which is date order). A
date's rows must be one contiguous run and the coordinate sorted (non-decreasing): new dates arrive as rows
appended to the store (zarr ``append``/``resize``), and the keys of the dates already there do not change.
``partition_by`` applies to Zarr stores only; Parquet files are refused.

**Keys.** The statistics store keys a partition by its POSIX path relative to the source's *root*
(:func:`data_root`: ``source.path`` up to the directory before its first glob character; the
directory itself, or a file's directory, without one). A store therefore does not depend on where the
project lives: copy the project (data, spec, store) to another machine or to object storage, point
the spec at it, and the next run finds its partitions already accumulated. Stores written before
keys were relative (manifest schema 1: absolute keys) are migrated by :func:`migrate_keys` on the
first run of this version — before any move.

**Fingerprints.** A partition's fingerprint is a hash of its key and, per file (a Zarr store: every
file in it, by its path inside the store), size and modification time — or the files' bytes with
``fingerprint: content``. A rewritten partition gets a new fingerprint, and the run replaces its
statistics. A copy that does not keep modification times (``cp`` without ``-p``) changes every
``metadata`` fingerprint, and the next run re-accumulates everything (correctly, at the cost of a
full pass); ``cp -p``, ``rsync -t``, ``shutil.copytree`` keep them, and ``content`` does not depend on them.

A date's fingerprint (``partition_by``) hashes its key, its row range and, per array holding the rows, the
size and modification time of each chunk file (shard file, for a sharded array) that the range covers — or
the rows' values with ``content``; never the arrays' metadata, which an append rewrites, but for the attributes
that decide the values read (CF missing-value markers, ``scale_factor``, ``add_offset``:
:mod:`tgpflow.io.cf_packing`) where an array has them, so that a changed encoding re-reads every date. Appending a date
leaves the fingerprints of the earlier dates unchanged, but for one case: when the last earlier date ends
inside a chunk, the append rewrites that chunk, and that date (its rows unchanged) is read again — correctly,
at the cost of one partition. Dates that start on a chunk boundary avoid it (chunks of one day's rows, or
``fingerprint: content``).
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
from typing import Any

import fsspec
import numpy as np

from tgpflow.errors import SourceError
from tgpflow.io.cf_packing import cf_encoding
from tgpflow.io.hidden import is_hidden
from tgpflow.io.parquet import list_parquet_files
from tgpflow.io.backends.zarr import is_zarr_store, zarr_data_arrays, zarr_row_runs

__all__ = ["Partitions", "discover", "data_root", "resolve", "split_key", "fingerprint", "migrate_keys",
           "KEYS_SCHEMA"]

#: The manifest schema from which partition keys are relative to the source's root.
KEYS_SCHEMA = 2
_GLOB = "*?["


def data_root(path: str) -> str:
    """The directory partition keys are relative to: ``path`` up to the directory before its first glob
    character; without one, ``path`` when it is a directory that is not itself a Zarr store, else its
    directory (``"."`` for a bare name)."""
    cut = min((path.find(c) for c in _GLOB if c in path), default=-1)
    if cut < 0:
        path = path.rstrip("/") or "/"
        fs, local = fsspec.core.url_to_fs(path)
        if fs.isdir(local) and not _is_zarr(fs, local):
            return path
        cut = len(path)
    head = path[:cut]
    if "/" not in head:
        return "."
    return head.rsplit("/", 1)[0] or "/"


def resolve(root: str, key: str) -> str:
    """The path (or URL) of partition ``key`` under ``root``; a legacy absolute key is returned as it is."""
    if key.startswith("/") or "://" in key:
        return key
    return key if root == "." else f"{root.rstrip('/')}/{key}"


def split_key(key: str, coordinate: str) -> tuple[str, str] | None:
    """A date partition's key ``store#coordinate=value`` as (the store's key, the value); None for another key."""
    store, sep, label = key.partition(f"#{coordinate}=")
    return (store, label) if sep else None


def _is_zarr(fs: Any, path: str) -> bool:
    return is_zarr_store(path, fs=fs)


@dataclasses.dataclass(frozen=True)
class Partitions:
    """The partitions a source path matches now.

    Attributes
    ----------
    root : the source's root as the spec names it (:func:`data_root`); keys resolve against it.
    fs : the fsspec filesystem of the data.
    base : ``root`` as ``fs`` names paths (absolute for local paths, no protocol).
    format : ``"parquet"`` or ``"zarr"``.
    keys : the partitions' keys, relative to ``root``, sorted (date partitions: in store, then row order).
    partition_by : the coordinate array that splits each Zarr store into dates (None: a store is a partition).
    array : the group's array holding the rows (``source.array``; None: its 1-D column arrays).
    ranges : per date partition's key, its rows in its store (start, stop).
    """

    root: str
    fs: Any
    base: str
    format: str
    keys: tuple[str, ...]
    partition_by: str | None = None
    array: str | None = None
    ranges: dict[str, tuple[int, int]] = dataclasses.field(default_factory=dict)

    def path(self, key: str) -> str:
        """The path of partition ``key`` on ``fs``."""
        return key if key.startswith("/") or "://" in key else f"{self.base.rstrip('/')}/{key}"

    def key_of(self, path: str) -> str:
        """The key of a path on ``fs`` (as it lists it): relative to ``base``; unchanged when outside it."""
        base = self.base.rstrip("/") + "/"
        return path[len(base):] if path.startswith(base) else path

    def fingerprint(self, key: str, mode: str = "metadata") -> str:
        """Partition ``key``'s fingerprint (module docstring): :func:`fingerprint` of its file or store, or of a
        date's rows."""
        if key not in self.ranges:
            return fingerprint(self.fs, self.path(key), key, mode)
        store, _ = split_key(key, self.partition_by)
        start, stop = self.ranges[key]
        h = hashlib.sha256(f"{key}|rows {start}-{stop}".encode())
        for arr in zarr_data_arrays(resolve(self.root, store), self.array, self.partition_by):
            h.update(f"|{arr.path}|{arr.dtype}|{arr.attrs.get('columns')}".encode())
            encoding = cf_encoding(arr, f"{self.path(store)}: the array {arr.path!r}")
            if encoding is not None:  # attributes that decide the values (a store without them keeps its fingerprints)
                h.update(f"|{encoding!r}".encode())
            if mode == "content":
                for a in range(start, stop, arr.chunks[0]):
                    h.update(np.ascontiguousarray(arr[a:min(a + arr.chunks[0], stop)]).tobytes())
                continue
            shape = arr.shards or arr.chunks  # the grid of the stored objects
            across = [()] if arr.ndim == 1 else [(j,) for j in range(-(-arr.shape[1] // shape[1]))]
            for i in range(start // shape[0], -(-stop // shape[0])):
                for j in across:
                    name = f"{arr.path}/{arr.metadata.encode_chunk_key((i, *j))}"
                    h.update(f"|{name}".encode())
                    file = f"{self.path(store).rstrip('/')}/{name}"
                    if self.fs.exists(file):
                        _update(h, self.fs, file, None, "metadata")
                    else:  # never written: the fill value
                        h.update(b"|absent")
        return h.hexdigest()[:20]


def discover(path: str, partition_by: str | None = None, array: str | None = None) -> Partitions:
    """List the partitions ``path`` matches (module docstring); refuses a path that matches none, and a mix
    of Zarr stores and other files. ``partition_by``: each Zarr store's dates are its partitions (``array``:
    the array holding the rows); refused for Parquet files."""
    root = data_root(path)
    base = fsspec.core.url_to_fs(root)[1]
    fs, pattern = fsspec.core.url_to_fs(path)
    if any(c in path for c in _GLOB):
        matches = sorted(fs.glob(pattern))  # files and directories (Zarr stores)
    else:
        matches = [pattern] if fs.exists(pattern) else []
    stores, other = [], []
    for match in matches:
        if _is_zarr(fs, match):
            stores.append(match)
        elif fs.isdir(match):  # its children, as a glob's matches (hidden ones, as list_parquet_files skips them)
            for info in sorted(fs.ls(match, detail=True), key=lambda i: i["name"]):
                child = info["name"].rstrip("/")
                if is_hidden(child):
                    continue
                (stores if info["type"] == "directory" and _is_zarr(fs, child) else other).append(child)
        else:
            other.append(match)
    if stores and other:
        raise SourceError(f"{path}: matches both Zarr stores ({stores[0]}) and other files ({other[0]}); a pipeline "
                          f"reads one format: narrow source.path to one of them, or move the other out")
    if stores:
        files, fmt = stores, "zarr"
    else:
        fs, files = list_parquet_files(path)
        fmt = _files_format(path, files)
    found = Partitions(root, fs, base, fmt, (), partition_by, array)
    keys = sorted(found.key_of(f.rstrip("/")) for f in files)
    if partition_by is None:
        return dataclasses.replace(found, keys=tuple(keys))
    if fmt != "zarr":
        raise SourceError(f"{files[0] if files else path}: is a {'CSV' if fmt == 'csv' else 'Parquet'} file, and "
                          f"source.partition_by ({partition_by!r}) splits a Zarr store by its coordinate array; drop "
                          f"partition_by, or point source.path at a Zarr store")
    ranges = {f"{key}#{partition_by}={label}": rows for key in keys
              for label, rows in zarr_row_runs(resolve(root, key), partition_by, array).items()}
    return dataclasses.replace(found, keys=tuple(ranges), ranges=ranges)


def _files_format(path: str, files: list[str]) -> str:
    """"csv" when every file is named as CSV (:func:`tgpflow.io.backends.csv.is_csv_name`), else "parquet"; a mix
    is refused."""
    from tgpflow.io.backends.csv import is_csv_name

    text = [f for f in files if is_csv_name(f)]
    if text and len(text) < len(files):
        other = next(f for f in files if not is_csv_name(f))
        raise SourceError(f"{path}: matches both CSV files ({text[0]}) and other files ({other}); a pipeline reads "
                          f"one format: narrow source.path to one of them, or move the other out")
    return "csv" if text else "parquet"


def fingerprint(fs: Any, path: str, key: str, mode: str = "metadata") -> str:
    """A short hash of ``key`` and the size and modification time of each file at ``path`` (a file, or a
    Zarr store's every file by its path inside it) — or of their bytes with ``mode="content"``."""
    h = hashlib.sha256(key.encode())
    if fs.isdir(path):
        base = path.rstrip("/") + "/"
        files = sorted(fs.find(path, detail=True).items())
        for name, info in files:
            h.update(f"|{name[len(base):] if name.startswith(base) else name}".encode())
            _update(h, fs, name, info, mode)
    else:
        _update(h, fs, path, None, mode)
    return h.hexdigest()[:20]


def _update(h: Any, fs: Any, path: str, info: dict[str, Any] | None, mode: str) -> None:
    if mode == "content":
        with fs.open(path, "rb") as fh:
            for block in iter(lambda: fh.read(1 << 22), b""):
                h.update(block)
        return
    info = info if info is not None and "size" in info else fs.info(path)
    stamp = info.get("mtime") or info.get("LastModified") or info.get("last_modified") or info.get("ETag") or ""
    h.update(f"|{info.get('size')}|{stamp}".encode())


def migrate_keys(manifest: dict[str, Any] | None, parts: Partitions, mode: str) -> tuple[dict[str, Any] | None, bool]:
    """A manifest written with absolute partition keys (schema 1), with keys relative to ``parts.root``;
    returns it and whether anything changed.

    A key under the root becomes relative. Its fingerprint hashed the absolute path: where the partition's
    fingerprint under the old key still matches (the file is unchanged), it is replaced by the fingerprint
    under the new key; otherwise it is left, and the run treats the partition as changed. A key outside the
    root (data moved before this migration) stays as it is: the run sees that partition as removed, and its
    counterpart under the root as new.

    The last run's score files (``steps.scores``) record the fingerprints they scored, the old ones: the
    step keeps them as ``fingerprints_before`` (new key → old fingerprint, for the partitions whose
    fingerprint was replaced), and :func:`tgpflow.pipeline.journal.finish` takes a score file recording
    either as done — the migration does not make the next run score those partitions again. The map lives
    in the migrated manifest's journal (written in the same atomic swap) and goes with the next commit.
    """
    if manifest is None or manifest.get("schema", 1) >= KEYS_SCHEMA:
        return manifest, False
    out = copy.deepcopy(manifest)
    mapping = {old: parts.key_of(old) for old in manifest["partitions"]}
    present = set(parts.keys)
    before: dict[str, str] = {}  # new key → its fingerprint under the old key
    out["partitions"] = {}
    for old, entry in manifest["partitions"].items():
        key, entry = mapping[old], dict(entry)
        if key != old and key in present and fingerprint(parts.fs, parts.path(key), old, mode) == entry["fingerprint"]:
            before[key], entry["fingerprint"] = entry["fingerprint"], fingerprint(parts.fs, parts.path(key), key, mode)
        out["partitions"][key] = entry
    for model in out["models"].values():
        if isinstance(model.get("info"), dict) and "partitions" in model["info"]:
            model["info"]["partitions"] = sorted(mapping.get(p, p) for p in model["info"]["partitions"])
    scores = (out.get("steps") or {}).get("scores")
    if scores:
        scores["partitions"] = sorted(mapping.get(p, p) for p in scores["partitions"])
        scored_before = {k: before[k] for k in scores["partitions"] if k in before}
        if scored_before:
            scores["fingerprints_before"] = scored_before
    out["schema"] = KEYS_SCHEMA
    return out, True
