"""Each scored row's context: its position in the source (``row``) and the columns a user keeps beside its scores.

A scores file must join back to the rows it scores (an id, a timestamp) and say which row of the source each
score belongs to, even after row filters and dropped bad rows. :func:`row_context` gives, per chunk of a source
and in the same order as :func:`~tgpflow.io.sources.as_source` reads them, a pyarrow table of the rows the
chunk's filters keep (before bad rows are dropped): ``row``, the row's position in the source counted over every
row of every file (filters and drops leave the positions of the other rows unchanged), then the ``keep``
columns as stored (any type). The scoring step takes the rows the validation kept (its ``kept`` positions) from
it. Parquet and CSV sources keep any columns (a CSV block's parsed again:
:func:`tgpflow.io.backends.csv.context_frames`); other sources give ``row`` only. ``row`` comes from the chunks'
sizes where the metadata gives them, else (CSV blocks, dask DataFrame partitions) from each chunk's rows counted as
it is read, summed over the chunks before it.
"""

from __future__ import annotations

import operator
from typing import Any

import dask
import numpy as np

from tgpflow.errors import SourceError

__all__ = ["row_context", "context_rows", "ROW", "RESERVED"]

#: The name of the position column of scores files.
ROW = "row"
#: The columns of a scores file besides the kept ones (``row`` and :func:`tgpflow.models.anomaly.score_columns`'):
#: a kept column may not take one of these names.
RESERVED = (ROW, "log_density", "anomaly_score", "anomaly")


def row_context(path: Any, source: Any, keep: list[str] | None = None, *, filters: list[Any] | None = None,
                format: str | None = None, storage_options: dict[str, Any] | None = None) -> list[Any]:
    """Delayed pyarrow tables, one per chunk of ``source`` (what :func:`~tgpflow.io.sources.as_source` made of
    ``path`` with these ``filters``): ``row`` and the ``keep`` columns of the rows the filters keep."""
    keep = list(keep or [])
    taken = [c for c in keep if c in RESERVED]
    if taken:
        raise SourceError(f"{path}: a kept column cannot be named {taken[0]!r}: a scores file has a column of that "
                          f"name (row, log_density, anomaly_score, anomaly)")
    if len(set(keep)) != len(keep):
        raise SourceError(f"{path}: columns to keep are named twice: {keep}")
    from tgpflow.io.backends import backend_for, csv, parquet

    backend = backend_for(path, format, storage_options) if isinstance(path, str) else None  # as as_source's
    if backend is parquet:
        from tgpflow.io.parquet import ParquetLayout

        layout = ParquetLayout(path, keep or None, storage_options, numeric=False)
        offsets = np.concatenate([[0], np.cumsum(layout.sizes())[:-1]]).astype(np.int64)
        flt = tuple((str(c), str(op), v) for c, op, v in filters) if filters else ()
        read = dask.delayed(_read_context, pure=True)
        tables = [read(layout.fs, f, i, tuple(keep), flt, int(o))
                  for (f, i, _), o in zip(layout.row_groups, offsets, strict=True)]
        if len(tables) != source.n_chunks:  # the same footers: only a file changed between the two reads
            raise SourceError(f"{path}: its row groups changed while it was being read; score it again")
        return tables
    if keep and backend is not csv:
        raise SourceError(f"{path}: columns to keep beside the scores ({keep}) are read from Parquet and CSV "
                          f"sources only")
    table = dask.delayed(_positions_table, pure=True)
    if source.n_rows is None:  # each chunk's rows before validation (kept + dropped), counted as it is read
        add, start, tables = dask.delayed(operator.add, pure=True), 0, []
        for size in (dask.delayed(sum, pure=True)(counts) for counts in source.row_counts()):
            tables.append(table(start, size))
            start = add(start, size)
    else:
        tables = [table(int(start), int(size)) for start, size in
                  zip(np.concatenate([[0], np.cumsum(source.sizes)[:-1]]), source.sizes, strict=True)]
    if not keep:
        return tables
    frames = csv.context_frames(path, keep, storage_options)
    if len(frames) != len(tables):  # the same files: only one changed between the two listings
        raise SourceError(f"{path}: its files changed while it was being read; score it again")
    beside = dask.delayed(_beside, pure=True)
    return [beside(t, f) for t, f in zip(tables, frames, strict=True)]


def context_rows(table: Any, kept: np.ndarray | None) -> Any:
    """The rows of a chunk's context that its validation kept (``kept``: positions among the filtered rows, None
    for all)."""
    return table if kept is None else table.take(np.asarray(kept, dtype=np.int64))


def _positions_table(start: int, size: int) -> Any:
    import pyarrow as pa

    return pa.table({ROW: np.arange(start, start + size, dtype=np.int64)})


def _beside(positions: Any, frame: Any) -> Any:
    """A CSV block's ``row`` positions with its kept columns (as pandas read them) beside them."""
    import pyarrow as pa

    kept = pa.Table.from_pandas(frame, preserve_index=False)
    return pa.table({ROW: positions.column(ROW), **{name: kept.column(name) for name in kept.column_names}})


def _read_context(fs: Any, path: str, index: int, keep: tuple[str, ...], filters: tuple[Any, ...], offset: int) -> Any:
    """One row group's ``row`` (offset + position) and ``keep`` columns, filtered as the source's rows are."""
    import pyarrow as pa

    from tgpflow.io.parquet import filter_expression, read_row_group

    wanted = tuple(dict.fromkeys(keep + tuple(c for c, _, _ in filters)))
    table = read_row_group(fs, path, index, wanted) if wanted else None
    n = table.num_rows if table is not None else _rows_in(fs, path, index)
    positions = pa.array(np.arange(offset, offset + n, dtype=np.int64))
    table = pa.table({ROW: positions}) if table is None else table.append_column(ROW, positions)
    if filters:
        table = table.filter(filter_expression(filters, f"{path} row group {index}"))
    return table.select([ROW, *keep])


def _rows_in(fs: Any, path: str, index: int) -> int:
    import pyarrow.parquet as pq

    with fs.open(path, "rb") as fh:
        return int(pq.ParquetFile(fh).metadata.row_group(index).num_rows)
