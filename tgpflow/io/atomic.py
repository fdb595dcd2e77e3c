"""Atomic writes: an artifact appears whole or not at all, and a good one is never lost.

Everything is written to a temporary sibling (same directory, so the final rename stays
on one filesystem) and renamed into place only after it is complete. A file is replaced
with ``os.replace`` (atomic on POSIX). An existing directory (Zarr store, Parquet dataset)
is exchanged with the new one in one step where the OS can (Linux ``renameat2`` with
``RENAME_EXCHANGE``: :func:`exchange`), and the old one, now at the temporary's name, is
deleted; elsewhere the old one is first renamed aside and deleted only after the new one is
in place (a kill between those two renames leaves it at a ``.old-*`` name). A failed or
killed writer leaves at most a hidden ``.tmp-*`` / ``.old-*`` sibling (:data:`TEMPORARY`;
Parquet and Zarr readers skip hidden names), never a half-written target.
:func:`remove_temporaries` deletes those a killed writer left, and :func:`discard` deletes an
output so that a kill midway leaves a temporary, never a half-deleted output.

Only a tgpflow output of the same kind is ever replaced (:func:`tgpflow.io.outputs.check_replace`):
the rule is checked when the context is entered, before any work, and again just before the swap.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import functools
import os
import re
import shutil
import uuid
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

__all__ = ["atomic_path", "atomic_write_text", "discard", "exchange", "remove_temporaries", "TEMPORARY"]

#: The names of the temporaries of this module (and of tgpflow before it used them everywhere):
#: ``.<target name>.tmp-<hex>`` (being written) and ``.<target name>.old-<hex>`` (being deleted).
TEMPORARY = re.compile(r"^\.(?P<target>.+)\.(?:tmp|old)-[0-9a-f]+$")

_AT_FDCWD = -100
_RENAME_EXCHANGE = 2
_UNSUPPORTED = {errno.ENOSYS, errno.EINVAL, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EXDEV}


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


def _temporary(target: Path, what: str = "tmp") -> Path:
    return target.with_name(f".{target.name}.{what}-{uuid.uuid4().hex[:12]}")


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()


@contextlib.contextmanager
def atomic_path(target: str | os.PathLike[str], kind: str, *, overwrite: bool = True,
                marker: bool = False) -> Iterator[Path]:
    """Yield a temporary path to write; on success it replaces ``target`` atomically.

    ``target`` may exist only as a tgpflow ``kind`` output, and then only with ``overwrite``
    (:class:`~tgpflow.errors.OutputExistsError` otherwise, before anything is written). With
    ``marker`` the written directory gets the marker that names its kind. On an exception the
    temporary is removed and ``target`` is left exactly as it was.
    """
    from tgpflow.io.outputs import check_replace, write_marker

    target = Path(target)
    check_replace(target, kind, overwrite=overwrite)
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


def atomic_write_text(path: str | os.PathLike[str], text: str) -> None:
    """Replace the small text file ``path`` atomically (a temporary, fsync, ``os.replace``): a pointer,
    a manifest, a version's run info. No kind check: the callers own these files."""
    path = Path(path)
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


def discard(path: str | os.PathLike[str]) -> None:
    """Delete ``path``: first renamed to a temporary name (one atomic step), then removed."""
    path = Path(path)
    aside = _temporary(path, "old")
    os.rename(path, aside)
    _remove(aside)


def remove_temporaries(directory: str | os.PathLike[str], targets: Iterable[str] | None = None, *,
                       dry_run: bool = False) -> list[str]:
    """Delete what killed writers left in ``directory`` (:data:`TEMPORARY` names; only those of
    ``targets`` when given); returns their paths. Call it only where no other writer runs (under a lock)."""
    directory = Path(directory)
    if not directory.is_dir():
        return []
    wanted = None if targets is None else set(targets)
    removed = []
    for path in sorted(directory.iterdir()):
        m = TEMPORARY.match(path.name)
        if m is None or (wanted is not None and m["target"] not in wanted) or path.is_symlink():
            continue
        if not dry_run:
            _remove(path)
        removed.append(str(path))
    return removed
