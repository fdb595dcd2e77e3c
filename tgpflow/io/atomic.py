"""Atomic writes over fsspec: an artifact appears whole or not at all, and a good one is never lost.

One helper, :func:`atomic_path`, writes every tgpflow output (models, statistics, a store's
entries, scores, samples, reports) to a plain path, a ``file://`` URL or any other fsspec URL
(``memory://``, ``s3://`` …). :func:`as_path` turns a target into a :class:`pathlib.Path` when it
is on the local filesystem and into a :class:`upath.UPath` (which carries its
``storage_options``) otherwise; the guarantee depends on which.

**Local filesystem** (a plain path, ``file://``). Everything is written to a temporary sibling
(same directory, so the final rename stays on one filesystem) and renamed into place only after it
is complete. A file is replaced with ``os.replace`` (atomic on POSIX). An existing directory (Zarr
store, Parquet dataset) is exchanged with the new one in one step where the OS can (Linux
``renameat2`` with ``RENAME_EXCHANGE``: :func:`exchange`), and the old one, now at the temporary's
name, is deleted; elsewhere the old one is first renamed aside and deleted only after the new one is
in place (a kill between those two renames leaves it at a ``.old-*`` name). A failed or killed
writer leaves at most a hidden ``.tmp-*`` / ``.old-*`` sibling (:data:`TEMPORARY`; Parquet and Zarr
readers skip hidden names), never a half-written target.

**Any other filesystem** (object stores, ``memory://``) has no atomic rename; what it does
atomically is write one object (a PUT, a completed multipart upload, a server-side copy; an
assignment for ``memory://``). So the commit point is always one single-object write:

* a *file* target (an ``.npz``, a Parquet file) is written to a hidden sibling object
  ``.<name>.tmp-<hex>`` and then copied onto the target in one single-object copy; the temporary
  is deleted afterwards. A killed writer leaves at most that hidden sibling.
* a *directory* target (a Zarr group, a Parquet dataset, a report) holds versions: each write goes
  into a fresh hidden prefix ``<target>/.v-<hex>/`` (:data:`VERSION`), and once that is complete the
  pointer ``<target>/_tgpflow_output.json`` (:data:`~tgpflow.io.outputs.MARKER`: the output's kind
  and ``current``, the version's name) is written in one object: the commit point. Readers
  (:func:`resolve`, hence ``read_artifact``, ``tgpflow.load``, ``output_kind``) read the version the
  pointer names, and versions never change once written, so a reader never sees a mix; the version
  replaced is deleted after the commit (a reader that was still reading it then fails, and reads the
  new one on a retry). A killed writer leaves an unreferenced ``.v-*`` version (and, before the
  first commit, a target holding nothing else, which counts as absent: it may be written). Each
  writer deletes only the version it replaced, so with two writers of one target the last pointer
  wins and never names a deleted version.
* a small text file (a store's manifest, a model directory's ``CURRENT``, a version's run info) is
  written in one object.

This relies on the filesystem writing one object atomically, which object stores and ``memory://``
do; an fsspec filesystem that does not (sftp, ftp) can show a partial object after a kill, so write
there through a local mount instead.

On both kinds, :func:`remove_temporaries` deletes what killed writers left (the pipeline calls it
under its run lock, ``tgpflow gc`` too), and :func:`discard` deletes an output so that a kill midway
leaves temporaries, never a half-deleted output. Only a tgpflow output of the same kind is ever
replaced (:func:`tgpflow.io.outputs.check_replace`): the rule is checked when the context is entered,
before any work, and again just before the commit.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import functools
import json
import os
import re
import shutil
import uuid
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeAlias

from tgpflow.core.version import __version__

if TYPE_CHECKING:
    from upath import UPath

__all__ = ["atomic_path", "atomic_write_text", "discard", "exchange", "remove_temporaries", "TEMPORARY", "VERSION",
           "as_path", "absolute", "is_local", "resolve", "zarr_store", "only_leftovers", "AnyPath"]

#: A target or source of tgpflow I/O: a local path, a URL string, or a path object of either kind.
AnyPath: TypeAlias = "str | os.PathLike[str] | UPath"

#: The names of the temporaries of this module (and of tgpflow before it used them everywhere):
#: ``.<target name>.tmp-<hex>`` (being written) and ``.<target name>.old-<hex>`` (being deleted).
TEMPORARY = re.compile(r"^\.(?P<target>.+)\.(?:tmp|old)-[0-9a-f]+$")
#: The versions inside a directory target on a filesystem without atomic rename (module docstring).
VERSION = re.compile(r"^\.v-[0-9a-f]{12}$")

_AT_FDCWD = -100
_RENAME_EXCHANGE = 2
_UNSUPPORTED = {errno.ENOSYS, errno.EINVAL, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EXDEV}


# -- where a target lives -------------------------------------------------------------------------------

def as_path(target: AnyPath, storage_options: dict[str, Any] | None = None) -> Path | UPath:
    """``target`` as a :class:`~pathlib.Path` when it is on the local filesystem (a plain path, a
    ``file://`` URL), else as a :class:`~upath.UPath` over its fsspec filesystem, with ``storage_options``."""
    from upath import UPath

    if isinstance(target, UPath):
        path = UPath(str(target), **{**target.storage_options, **storage_options}) if storage_options else target
    elif isinstance(target, Path):
        return target
    else:
        text = os.fspath(target)
        if "://" not in text and "::" not in text:
            return Path(text)
        path = UPath(text, **(storage_options or {}))
    if path.protocol in ("", "file", "local"):
        return Path(path.path)
    return path


def absolute(path: Path | UPath) -> str:
    """``path`` as a string another process can open from anywhere: absolute on the local filesystem, the URL
    elsewhere."""
    return str(path.resolve()) if is_local(path) else str(path)


def is_local(path: Path | UPath) -> bool:
    """Whether ``path`` (from :func:`as_path`) is on the local filesystem, where renames are atomic."""
    from upath import UPath

    return not isinstance(path, UPath)


def _pointer_version(path: Path | UPath) -> str | None:
    """The version a directory target's pointer names (module docstring), or None when it has none."""
    from tgpflow.io.outputs import MARKER

    marker = path / MARKER
    try:
        current = json.loads(marker.read_text()).get("current")
    except (OSError, ValueError, AttributeError):  # no pointer (or a local marker, which has no version)
        return None
    return current if isinstance(current, str) and VERSION.match(current) else None


def resolve(target: AnyPath, storage_options: dict[str, Any] | None = None) -> Path | UPath:
    """Where the committed content of ``target`` is: the version its pointer names for a directory written on
    a filesystem without atomic rename (module docstring), ``target`` itself otherwise. Read a Parquet dataset
    or a Zarr group that tgpflow wrote to object storage from here."""
    path = as_path(target, storage_options)
    if is_local(path) and not path.is_dir():
        return path
    version = _pointer_version(path)
    return path / version if version else path


def zarr_store(path: Path | UPath, *, read_only: bool = False) -> Any:
    """A Zarr v3 store at ``path``: the local directory, or :class:`zarr.storage.FsspecStore` over its filesystem."""
    if is_local(path):
        return str(path)
    from zarr.storage import FsspecStore

    return FsspecStore.from_url(str(path), storage_options=dict(path.storage_options), read_only=read_only)


def only_leftovers(path: UPath) -> bool:
    """A directory target holding nothing but unreferenced versions (or nothing: an empty pseudo-directory):
    what a killed first write leaves; absent for every purpose (it may be written, and
    :func:`remove_temporaries` deletes it)."""
    from tgpflow.io.outputs import MARKER

    if not path.is_dir():
        return False
    names = [p.name for p in path.iterdir()]
    return MARKER not in names and all(VERSION.match(n) for n in names)


# -- the local filesystem ------------------------------------------------------------------------------

@functools.cache
def _renameat2() -> Any:
    try:
        return ctypes.CDLL(None, use_errno=True).renameat2
    except (OSError, AttributeError):  # not Linux, or a C library without it (glibc < 2.28)
        return None


def exchange(a: str | os.PathLike[str], b: str | os.PathLike[str]) -> None:
    """Swap two existing paths in one atomic step (Linux ``renameat2(RENAME_EXCHANGE)``).

    Raises :class:`NotImplementedError` where the OS or the filesystem cannot, and ``OSError`` otherwise.
    """
    fn = _renameat2()
    if fn is None:
        raise NotImplementedError("renameat2 is not available")
    if fn(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) != 0:
        err = ctypes.get_errno()
        if err in _UNSUPPORTED:
            raise NotImplementedError(f"RENAME_EXCHANGE is not supported here ({os.strerror(err)})")
        raise OSError(err, os.strerror(err), os.fspath(a), None, os.fspath(b))


def _temporary(target: Path | UPath, what: str = "tmp") -> Path | UPath:
    return target.with_name(f".{target.name}.{what}-{uuid.uuid4().hex[:12]}")


def _remove(path: Path | UPath) -> None:
    if not is_local(path):
        with contextlib.suppress(FileNotFoundError):
            path.fs.rm(path.path, recursive=True)
    elif path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()


@contextlib.contextmanager
def atomic_path(target: AnyPath, kind: str, *, overwrite: bool = True, marker: bool = False,
                directory: bool = False, storage_options: dict[str, Any] | None = None) -> Iterator[Path | UPath]:
    """Yield a temporary path to write; on success it replaces ``target`` atomically (module docstring).

    ``target`` may exist only as a tgpflow ``kind`` output, and then only with ``overwrite``
    (:class:`~tgpflow.errors.OutputExistsError` otherwise, before anything is written). With
    ``marker`` the written directory gets the marker that names its kind. ``directory`` says what the
    caller writes (a directory, or a single file): on a filesystem without atomic rename the two are
    committed differently. On an exception the temporary is removed and ``target`` is left exactly as it
    was. The path yielded is a :class:`~pathlib.Path` or a :class:`~upath.UPath` (:func:`as_path`): write
    through its ``open``/``/``/``mkdir``, or :func:`zarr_store`, so that both work.
    """
    from tgpflow.io.outputs import check_replace

    target = as_path(target, storage_options)
    check_replace(target, kind, overwrite=overwrite)
    if is_local(target):
        commit = _local_commit
    else:
        commit = _directory_commit if directory else _file_commit
    with commit(target, kind, overwrite, marker) as tmp:
        yield tmp


@contextlib.contextmanager
def _local_commit(target: Path, kind: str, overwrite: bool, marker: bool) -> Iterator[Path]:
    from tgpflow.io.outputs import check_replace, write_marker

    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = _temporary(target)
    try:
        yield tmp
        if not tmp.exists():
            raise RuntimeError(f"nothing was written to {tmp} for {target}")
        if marker:
            write_marker(tmp, kind)
        check_replace(target, kind, overwrite=overwrite)  # again: something may have appeared meanwhile
        if tmp.is_dir():
            _swap_directory(tmp, target)  # afterwards tmp (if it exists) holds the old one: removed below
        else:
            if target.is_dir():
                raise IsADirectoryError(f"{target} is a directory; refusing to replace it with a file")
            os.replace(tmp, target)
    finally:
        if tmp.exists():
            _remove(tmp)


def _swap_directory(new: Path, target: Path) -> None:
    """Put the directory ``new`` at ``target``; an existing ``target`` ends up at ``new`` or is deleted."""
    if target.exists():
        with contextlib.suppress(NotImplementedError):
            exchange(new, target)
            return
        old = _temporary(target, "old")
        os.rename(target, old)
        try:
            os.rename(new, target)
        except BaseException:
            os.rename(old, target)
            raise
        _remove(old)
        return
    os.rename(new, target)


# -- filesystems without atomic rename ------------------------------------------------------------------

@contextlib.contextmanager
def _file_commit(target: UPath, kind: str, overwrite: bool, marker: bool) -> Iterator[UPath]:
    """A file on a filesystem without rename: a hidden sibling, then one single-object copy onto the target."""
    from tgpflow.io.outputs import check_replace

    tmp = _temporary(target)
    try:
        yield tmp
        if not tmp.is_file():
            raise RuntimeError(f"nothing was written to {tmp} for {target}" if not tmp.exists() else
                               f"a directory was written to {tmp} for the file {target}")
        check_replace(target, kind, overwrite=overwrite)  # again: something may have appeared meanwhile
        if target.is_dir():
            raise IsADirectoryError(f"{target} is a directory; refusing to replace it with a file")
        target.fs.copy(tmp.path, target.path)  # one object, server-side where it can be: the commit point
    finally:
        _remove(tmp)


@contextlib.contextmanager
def _directory_commit(target: UPath, kind: str, overwrite: bool, marker: bool) -> Iterator[UPath]:
    """A directory on a filesystem without rename: a new hidden version, then the pointer, in one object."""
    from tgpflow.io.outputs import MARKER, check_replace, write_marker

    version = f".v-{uuid.uuid4().hex[:12]}"
    tmp = target / version
    existed = target.exists()
    committed = False
    try:
        tmp.mkdir(parents=True, exist_ok=True)  # a pseudo-directory where the filesystem keeps them
        yield tmp
        # the writes may have gone through another instance of the filesystem (Zarr's asynchronous one), whose
        # listings this one has not seen: list afresh (an object store's listing cache would miss them)
        target.fs.invalidate_cache(tmp.path)
        target.fs.invalidate_cache(target.path)
        if not tmp.is_dir() or not any(tmp.iterdir()):
            raise RuntimeError(f"nothing was written to {tmp} for {target}")
        if marker:
            write_marker(tmp, kind)
        check_replace(target, kind, overwrite=overwrite)  # again: something may have appeared meanwhile
        if target.is_file():
            raise NotADirectoryError(f"{target} is a file; refusing to replace it with a directory")
        replaced = _pointer_version(target)
        stale = [p for p in target.iterdir() if not VERSION.match(p.name) and p.name != MARKER]  # a plain upload
        pointer = json.dumps({"kind": kind, "tgpflow": __version__, "current": version})
        target.fs.pipe_file((target / MARKER).path, pointer.encode())  # one object: the commit point
        committed = True
    finally:
        if not committed:
            _remove(tmp)
            if not existed and only_leftovers(target):  # the pseudo-directory this write made
                _remove(target)
    for old in [*([target / replaced] if replaced else []), *stale]:  # only what this write replaced
        _remove(old)


# -- small files, deletion, cleaning up ------------------------------------------------------------------

def atomic_write_text(path: AnyPath, text: str) -> None:
    """Replace the small text file ``path`` atomically: a pointer, a manifest, a version's run info. Locally a
    temporary, fsync, ``os.replace``; elsewhere one single-object write. No kind check: the callers own these
    files."""
    path = as_path(path)
    if not is_local(path):
        path.fs.pipe_file(path.path, text.encode())  # one object
        return
    tmp = _temporary(path)
    try:
        with open(tmp, "w") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            _remove(tmp)


def discard(path: AnyPath) -> None:
    """Delete ``path`` so that a kill midway never leaves a half-deleted output: locally it is first renamed
    to a temporary name (one atomic step); elsewhere its pointer (or Zarr root) goes first, in one object,
    leaving only what counts as absent."""
    from tgpflow.io.outputs import MARKER

    path = as_path(path)
    if not is_local(path):
        if path.is_dir():
            for head in (MARKER, "zarr.json"):
                with contextlib.suppress(FileNotFoundError):
                    path.fs.rm_file((path / head).path)
        _remove(path)
        return
    aside = _temporary(path, "old")
    os.rename(path, aside)
    _remove(aside)


def remove_temporaries(directory: AnyPath, targets: Iterable[str] | None = None, *,
                       dry_run: bool = False) -> list[str]:
    """Delete what killed writers left in ``directory`` (:data:`TEMPORARY` names; off the local filesystem
    also unreferenced versions inside its entries, and entries holding nothing else; only those of
    ``targets`` when given); returns their paths. Call it only where no other writer runs (under a lock)."""
    directory = as_path(directory)
    if not directory.is_dir():
        return []
    wanted = None if targets is None else set(targets)
    local = is_local(directory)
    removed = []
    for path in sorted(directory.iterdir(), key=lambda p: p.name):
        m = TEMPORARY.match(path.name)
        if m is not None and (wanted is None or m["target"] in wanted) and not (local and path.is_symlink()):
            leftovers = [path]
        elif m is None and not local and (wanted is None or path.name in wanted):
            leftovers = _unreferenced_versions(path)  # local writes never leave versions
        else:
            continue
        for leftover in leftovers:
            if not dry_run:
                _remove(leftover)
            removed.append(str(leftover))
    return removed


def _unreferenced_versions(path: UPath) -> list[UPath]:
    """The versions inside a directory target that its pointer does not name (all of it when abandoned)."""
    if only_leftovers(path):
        return [path]
    current = _pointer_version(path)
    if current is None:
        return []
    return [p for p in path.iterdir() if VERSION.match(p.name) and p.name != current]
