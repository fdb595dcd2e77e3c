"""The Parquet backend: a file, directory or glob on any fsspec filesystem, one chunk per row group, with
optional row filters (then the chunk sizes are unknown: the footers count unfiltered rows)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import dask

from tgpflow.errors import EmptySourceError
from tgpflow.io.sources import Source, make_source
from tgpflow.io.validate import OnBadRows

__all__ = ["can_open", "open_source", "KEYWORDS"]

#: The keywords of :func:`~tgpflow.io.sources.as_source` this backend reads.
KEYWORDS = frozenset({"storage_options", "filters"})


def can_open(data: Any, format: str | None, storage_options: dict[str, Any] | None = None) -> bool:
    """Any path that is not Zarr (the Zarr backend is asked first), or ``format="parquet"``."""
    return isinstance(data, (str, Path)) and format in (None, "parquet")


def open_source(path: Any, *, columns: Any, on_bad_rows: OnBadRows, storage_options: dict[str, Any] | None = None,
                filters: list[tuple[str, str, Any]] | None = None) -> Source:
    """The rows of the Parquet dataset at ``path``, one chunk per row group."""
    return _parquet_source(str(path), columns, on_bad_rows, storage_options, filters)


def _parquet_source(path: str, columns: Any, on_bad_rows: OnBadRows, storage_options: dict[str, Any] | None,
                    filters: list[tuple[str, str, Any]] | None = None) -> Source:
    from tgpflow.io.parquet import ParquetLayout, filter_expression, read_filtered_row_group, read_row_group

    layout = ParquetLayout(path, list(columns) if columns is not None else None, storage_options)
    if filters:
        flt = tuple((str(c), str(op), v) for c, op, v in filters)
        filter_expression(flt, path)  # a bad operator or value is refused now, not at the first read
        read = dask.delayed(read_filtered_row_group, pure=True)
        raws = [read(layout.fs, f, i, layout.columns, flt) for f, i, _ in layout.row_groups]
        sizes = [math.nan] * len(raws)
    else:
        read = dask.delayed(read_row_group, pure=True)
        raws = [read(layout.fs, f, i, layout.columns) for f, i, _ in layout.row_groups]
        sizes = [float(s) for s in layout.sizes()]
    if not raws:
        raise EmptySourceError(f"{path}: the source has zero rows")
    return make_source(path, layout.columns, True, raws, layout.labels(), sizes, on_bad_rows)
