"""The readers behind :func:`tgpflow.io.sources.as_source`, one module per kind of input.

Each backend module has ``can_open(data, format, storage_options) -> bool``, ``open_source(data, *, columns,
on_bad_rows, **its keywords) -> Source`` and ``KEYWORDS``, the keywords of ``as_source`` it accepts (each file
backend passes ``storage_options`` to the filesystem of a URL: docs/data.md, "Object storage"). They are
asked in the order of :data:`BACKENDS`: Zarr (a path ending in ``.zarr`` or holding a Zarr marker), CSV (a path
ending in ``.csv`` or ``.tsv``, compressed or not), Parquet (any other path), arrays and DataFrames in hand
(docs/data.md).
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

from tgpflow.io.backends import arrays, csv, parquet, zarr

__all__ = ["BACKENDS", "backend_for"]

#: The backends, in the order they are asked.
BACKENDS: tuple[ModuleType, ...] = (zarr, csv, parquet, arrays)


def backend_for(data: Any, format: str | None, storage_options: dict[str, Any] | None = None) -> ModuleType:
    """The first backend of :data:`BACKENDS` that opens ``data``."""
    for backend in BACKENDS:
        if backend.can_open(data, format, storage_options):
            return backend
    raise TypeError(f"cannot read rows from {type(data).__name__}")
