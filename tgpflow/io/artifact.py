"""Artifacts on disk: named float/int arrays plus JSON metadata, checksummed, never pickled.

Two containers: a Zarr v3 group (``*.zarr``, the default for models) and a NumPy ``.npz``
(convenient for statistics). Either holds:

* ``tgpflow_schema`` — the schema version of this layout (:data:`SCHEMA_VERSION`);
* ``kind`` — what the artifact is (e.g. ``"GPTiltedDensity"``, ``"TGPStats"``);
* ``meta`` — JSON metadata (parameters, provenance);
* ``checksums`` — SHA-256 of every array's dtype, shape and little-endian bytes;
* ``header_checksum`` — SHA-256 of the canonical JSON (:func:`json_checksum`) of the schema
  version, ``kind``, ``meta`` and ``checksums``: the metadata is covered like the arrays.

Loading verifies the schema version, the header checksum and every array checksum, accepts
only numeric dtypes, and reads ``.npz`` with ``allow_pickle=False``: a tampered, truncated or
foreign file is refused with :class:`~tgpflow.errors.ModelFileError` naming the file (for an
edited header of a Zarr group, its ``zarr.json``), and no code path unpickles.

An artifact can live on any fsspec filesystem (a path, ``file://``, ``memory://``, ``s3://`` …, with
``storage_options``): it is written through :func:`tgpflow.io.atomic.atomic_path` (atomic on each kind
of filesystem as that module says), a Zarr group encoded in memory and its objects written through the path
(:func:`_write_zarr`), and a Zarr group is read through :class:`zarr.storage.FsspecStore` off the local
filesystem, from the version its pointer names.

Files written before ``header_checksum`` existed (same schema version) still load: their
arrays are verified, their metadata cannot be, and loading says so with an
:class:`~tgpflow.errors.UnverifiedMetadataWarning` (re-saving adds the checksum). Refusing them
would strand every model and statistics store already written.
"""

from __future__ import annotations

import hashlib
import json
import zipfile
from typing import Any

import numpy as np

from tgpflow.errors import ModelFileError, UnverifiedMetadataWarning, cause
from tgpflow.io.atomic import AnyPath, as_path, atomic_path, is_local, resolve, zarr_store

__all__ = ["SCHEMA_VERSION", "write_artifact", "read_artifact", "json_checksum", "read_json_object"]

SCHEMA_VERSION = 1
_ALLOWED_KINDS = "fiub"  # float, signed int, unsigned int, bool
_META_KEY = "__tgpflow_meta__"


def _checksum(a: np.ndarray) -> str:
    a = np.asarray(a)
    h = hashlib.sha256(f"{a.dtype.str}|{a.shape}".encode())
    h.update(np.ascontiguousarray(a.astype(a.dtype.newbyteorder("<"), copy=False)).reshape(-1).view(np.uint8))
    return h.hexdigest()


def json_checksum(value: Any) -> str:
    """SHA-256 of a JSON value in canonical form (sorted keys, no whitespace, ASCII): equal values, equal sums."""
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=True)
    return hashlib.sha256(text.encode()).hexdigest()


def read_json_object(path: AnyPath, what: str) -> dict[str, Any]:
    """The JSON object in ``path`` (a manifest, a version's run info); :class:`ModelFileError` naming the
    file and ``what`` it should be otherwise."""
    path = as_path(path)
    try:
        value = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ModelFileError(f"{path}: {what} is not valid JSON ({exc})") from None
    if not isinstance(value, dict):
        raise ModelFileError(f"{path}: {what} is not a JSON object")
    return value


def _header_checksum(header: dict[str, Any]) -> str:
    return json_checksum({k: header.get(k) for k in ("tgpflow_schema", "kind", "meta", "checksums")})


def _check_arrays(arrays: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    out = {}
    for name, a in arrays.items():
        a = np.asarray(a)
        if a.dtype.kind not in _ALLOWED_KINDS:
            raise TypeError(f"array {name!r} has dtype {a.dtype}; artifacts hold numeric arrays only")
        if "/" in name or name.startswith("__"):
            raise ValueError(f"invalid array name {name!r}")
        out[name] = a
    return out


def write_artifact(path: AnyPath, kind: str, arrays: dict[str, np.ndarray], meta: dict[str, Any], *,
                   overwrite: bool = True, storage_options: dict[str, Any] | None = None) -> Any:
    """Write ``arrays`` and ``meta`` atomically to ``path`` (``.npz`` file or Zarr group, on any fsspec
    filesystem); returns the path (:func:`~tgpflow.io.atomic.as_path`).

    An existing ``path`` is replaced only when it is a tgpflow artifact of the same family (a model
    by a model, statistics by statistics) and ``overwrite``; anything else is refused untouched.
    """
    path = as_path(path, storage_options)
    arrays = _check_arrays(arrays)
    header = {
        "tgpflow_schema": SCHEMA_VERSION,
        "kind": kind,
        "meta": meta,
        "checksums": {k: _checksum(a) for k, a in arrays.items()},
    }
    header = json.loads(json.dumps(header))  # fail before touching the disk if meta is not JSON; as it reads back
    header["header_checksum"] = _header_checksum(header)
    from tgpflow.io.outputs import artifact_output

    npz = path.suffix == ".npz"
    with atomic_path(path, artifact_output(meta), overwrite=overwrite, directory=not npz) as tmp:
        if npz:
            with tmp.open("wb") as fh:
                np.savez(fh, **arrays, **{_META_KEY: np.array(json.dumps(header))})
        else:
            _write_zarr(tmp, arrays, header)
    return path


def _write_zarr(tmp: Any, arrays: dict[str, np.ndarray], header: dict[str, Any]) -> None:
    """The Zarr v3 group encoded in memory, then each of its objects written under ``tmp`` (a directory nobody
    reads before the commit): Zarr's local store hands every file operation to a thread, several per array, which
    made a model's write 1.6–1.9× as slow (21 small arrays, measured), and its object-store writes went one array
    after another; the objects are the same bytes."""
    import zarr
    from zarr.storage import MemoryStore

    objects: dict[str, Any] = {}
    group = zarr.open_group(store=MemoryStore(objects), mode="w-")
    for name, a in arrays.items():
        group.create_array(name, data=np.require(a, requirements="C"))  # keeps 0-d shapes
    group.attrs.update(header)
    if not is_local(tmp):  # one call: an asynchronous filesystem (s3fs, gcsfs) puts the objects concurrently
        tmp.fs.pipe({f"{tmp.path.rstrip('/')}/{key}": buffer.to_bytes() for key, buffer in objects.items()})
        return
    for key, buffer in objects.items():
        target = tmp / key
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(buffer.to_bytes())


def read_artifact(path: AnyPath, expected_kinds: tuple[str, ...] | None = None, *,
                  storage_options: dict[str, Any] | None = None) -> tuple[str, dict[str, np.ndarray], dict[str, Any]]:
    """Read and verify an artifact (on any fsspec filesystem); returns ``(kind, arrays, meta)``."""
    path = as_path(path, storage_options)
    if not path.exists():
        raise ModelFileError(f"{path}: no such file or directory")
    try:
        data = resolve(path)  # a directory written without atomic rename: the version its pointer names
        if data.is_dir():
            header, arrays = _read_zarr(data)
        else:
            header, arrays = _read_npz(data)
    except ModelFileError:
        raise
    except Exception as exc:  # corrupt container: zarr/json/zip errors of every kind
        raise ModelFileError(f"{path}: not a readable tgpflow artifact ({cause(exc)})") from exc
    version = header.get("tgpflow_schema")
    if version != SCHEMA_VERSION:
        raise ModelFileError(
            f"{path}: schema version {version!r} is not supported (this tgpflow reads version "
            f"{SCHEMA_VERSION}); re-save it with the tgpflow that wrote it, or refit")
    _verify_header(path, data, header)
    kind = header.get("kind")
    if expected_kinds is not None and kind not in expected_kinds:
        raise ModelFileError(f"{path}: holds a {kind!r}, expected one of {list(expected_kinds)}")
    sums = header.get("checksums", {})
    if set(sums) != set(arrays):
        missing = sorted(set(sums) ^ set(arrays))
        raise ModelFileError(f"{path}: arrays and checksums disagree (missing or extra: {missing}); the file is incomplete or tampered with")
    for name, a in arrays.items():
        if a.dtype.kind not in _ALLOWED_KINDS:
            raise ModelFileError(f"{path}: array {name!r} has non-numeric dtype {a.dtype}; refusing it")
        if _checksum(a) != sums[name]:
            raise ModelFileError(f"{path}: checksum mismatch in array {name!r}; the file is corrupt or was modified after it was written")
    return kind, arrays, header.get("meta", {})


def _verify_header(path: Any, data: Any, header: dict[str, Any]) -> None:
    stored = header.get("header_checksum")
    where = data / "zarr.json" if data.is_dir() else path
    if stored is None:
        import warnings

        warnings.warn(f"{where}: written before tgpflow checksummed metadata; its arrays are verified, its "
                      f"metadata (parameters, thresholds, selection) is not. Load and save it again to add the "
                      f"checksum", UnverifiedMetadataWarning, stacklevel=3)
    elif stored != _header_checksum(header):
        raise ModelFileError(f"{where}: the metadata does not match its checksum (parameters, thresholds or "
                             f"selection were edited after the file was written); refit, or restore the file")


def _read_zarr(path: Any) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    import zarr

    if not (path / "zarr.json").is_file():
        raise ModelFileError(f"{path}: not a Zarr v3 group (no zarr.json)")
    group = zarr.open_group(store=zarr_store(path, read_only=True), mode="r")
    header = dict(group.attrs)
    if "tgpflow_schema" not in header:
        raise ModelFileError(f"{path}: a Zarr group, but not a tgpflow artifact (no tgpflow_schema attribute)")
    arrays = {name: np.asarray(arr[...]) for name, arr in group.arrays()}
    return header, arrays


def _read_npz(path: Any) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    with path.open("rb") as fh:
        if not zipfile.is_zipfile(fh):
            raise ModelFileError(f"{path}: not a tgpflow artifact (neither a Zarr group nor an .npz archive)")
        fh.seek(0)
        with np.load(fh, allow_pickle=False) as npz:
            if _META_KEY not in npz.files:
                raise ModelFileError(f"{path}: an .npz archive, but not a tgpflow artifact")
            header = json.loads(str(npz[_META_KEY]))
            arrays = {k: np.asarray(npz[k]) for k in npz.files if k != _META_KEY}
    return header, arrays
