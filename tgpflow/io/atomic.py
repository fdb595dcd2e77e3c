"""Atomic writes: an artifact appears whole or not at all, and a good one is never lost.

Everything is written to a temporary sibling (same directory, so the final rename stays
on one filesystem) and renamed into place only after it is complete. A file is replaced
with ``os.replace`` (atomic on POSIX). A directory (Zarr store, Parquet dataset) cannot be
replaced atomically when the target exists, so the old one is first renamed aside and
deleted only after the new one is in place; if the swap fails, the old one is renamed
back. A failed or killed writer leaves at most a ``.tmp-*`` sibling, never a half-written
target.

Only a tgpflow output of the same kind is ever replaced (:func:`tgpflow.io.outputs.check_replace`):
the rule is checked when the context is entered, before any work, and again just before the swap.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path

__all__ = ["atomic_path"]


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
    tmp = target.with_name(f".{target.name}.tmp-{uuid.uuid4().hex[:12]}")
    try:
        yield tmp
        if not tmp.exists():
            raise RuntimeError(f"nothing was written to {tmp} for {target}")
        if marker:
            write_marker(tmp, kind)
        check_replace(target, kind, overwrite=overwrite)  # again: something may have appeared meanwhile
        if tmp.is_dir():
            old = None
            if target.exists():
                old = target.with_name(f".{target.name}.old-{uuid.uuid4().hex[:12]}")
                os.rename(target, old)
            try:
                os.rename(tmp, target)
            except BaseException:
                if old is not None:
                    os.rename(old, target)
                raise
            if old is not None:
                _remove(old)
        else:
            if target.is_dir():
                raise IsADirectoryError(f"{target} is a directory; refusing to replace it with a file")
            os.replace(tmp, target)
    finally:
        if tmp.exists():
            _remove(tmp)
