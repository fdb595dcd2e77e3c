"""Sources: anything with rows becomes a list of validated float64 chunks on a Dask graph.

A :class:`Source` is a set of lazy per-chunk tasks: reader → ``validate_block`` → (float64 rows, rows
dropped, the positions of the rows kept). Nothing is read when a source is made, except Parquet footers and
Zarr metadata; chunk sizes are known from metadata where the format has them.

:func:`as_source` asks the backends of :mod:`tgpflow.io.backends` in turn which one opens ``data`` — a Zarr
store (:mod:`~tgpflow.io.backends.zarr`), a CSV file, directory or glob (:mod:`~tgpflow.io.backends.csv`), a
Parquet file, directory or glob (:mod:`~tgpflow.io.backends.parquet`), or an array or DataFrame in hand
(:mod:`~tgpflow.io.backends.arrays`) — and hands it the keywords it reads; a keyword that another format's
backend reads is refused, naming it. :func:`concat_sources` puts sources one after another (a pipeline's
partitions as one source).
"""

from __future__ import annotations

import dataclasses
import math
import operator
from pathlib import Path
from typing import Any

import dask
import dask.array as da
import numpy as np

from tgpflow.errors import COLUMNS_HINT, EmptySourceError, SourceError
from tgpflow.io.validate import OnBadRows, check_exact_ints, check_numeric, check_on_bad_rows, validate_block

__all__ = ["Source", "as_source", "concat_sources", "make_source", "select_indices", "select_frame"]


@dataclasses.dataclass(frozen=True, eq=False)
class Source:
    """Validated row chunks of a dataset (lazy).

    Attributes
    ----------
    description : what the source is, for messages ("data/*.parquet", "numpy array").
    columns : the column names (``"0"``, ``"1"``, … for arrays without names).
    named : whether the names are real (DataFrame/Parquet/Zarr attribute) names.
    labels : per chunk, where it comes from ("f.parquet row group 3", "chunk 2 (rows 20–29)").
    sizes : per chunk, its row count before validation (NaN where unknown).
    on_bad_rows : "raise" or "drop".
    """

    description: str
    columns: tuple[str, ...]
    named: bool
    labels: tuple[str, ...]
    sizes: tuple[float, ...]
    on_bad_rows: OnBadRows
    _validated: tuple[Any, ...]  # Delayed[(ndarray, int, kept positions | None)] per chunk

    @property
    def n_chunks(self) -> int:
        return len(self._validated)

    @property
    def n_columns(self) -> int:
        return len(self.columns)

    @property
    def n_rows(self) -> int | None:
        """Rows before validation, from metadata; None where a size is unknown."""
        if not self.sizes or any(math.isnan(s) for s in self.sizes):
            return None
        return int(sum(self.sizes))

    def blocks(self) -> list[Any]:
        """Delayed float64 (n, d) arrays, one per chunk, validated."""
        return [dask.delayed(operator.getitem, pure=True)(v, 0) for v in self._validated]

    def chunks(self) -> list[Any]:
        """Delayed validated chunks ``(rows, dropped, kept)``: the float64 (n, d) rows, the bad rows dropped, and the
        positions of the rows kept among the chunk's rows (None when all were kept)."""
        return list(self._validated)

    def dropped_counts(self) -> list[Any]:
        """Delayed row counts dropped per chunk (all 0 under on_bad_rows="raise")."""
        return [dask.delayed(operator.getitem, pure=True)(v, 1) for v in self._validated]

    def row_counts(self) -> list[Any]:
        """Delayed ``(kept, dropped)`` row counts per chunk (after the chunk's filters; dropped: bad rows)."""
        return [dask.delayed(_row_counts, pure=True)(v) for v in self._validated]

    def row_keys(self) -> list[Any]:
        """Delayed int64 keys of the validated rows, one array per chunk, stable across runs.

        The key is the row's global position in the source when every chunk size is known
        from metadata (Parquet footers, Zarr and dask array chunks) — so appending chunks
        leaves the keys of earlier rows unchanged — and ``chunk index · 2⁴⁰ + position in the
        chunk`` otherwise (e.g. a dask DataFrame with unknown partition lengths). Dropped rows
        keep their positions: the keys of the other rows do not move.
        """
        known = self.n_rows is not None
        offsets = np.concatenate([[0], np.cumsum(self.sizes)[:-1]]) if known else None
        keys = dask.delayed(_row_keys, pure=True)
        return [keys(v, int(offsets[i]) if known else i << 40) for i, v in enumerate(self._validated)]

    def map_rows(self, fn: Any, description: str | None = None) -> Source:
        """The same chunks with ``fn`` applied to each validated (n, d) block (e.g. a fixed
        centring/scaling); bad-row counts and row keys are unchanged."""
        apply = dask.delayed(_apply_rows, pure=True)
        return dataclasses.replace(self, description=description or self.description,
                                   _validated=tuple(apply(v, fn) for v in self._validated))

    def map_validated(self, fn: Any, description: str | None = None) -> Source:
        """The same chunks with ``fn((rows, dropped, kept), label) -> (rows, dropped, kept)`` applied to each
        validated chunk: a row filter or transform that keeps the bad-row counts and the row keys
        (``kept`` holds the positions of the rows that remain, None when all do)."""
        apply = dask.delayed(fn, pure=True)
        return dataclasses.replace(self, description=description or self.description,
                                   _validated=tuple(apply(v, label) for v, label in zip(self._validated, self.labels,
                                                                                        strict=True)))

    def to_dask_array(self) -> da.Array:
        """The validated rows as one dask array (row chunks; NaN sizes when rows may be dropped)."""
        d = self.n_columns
        parts = []
        for block, size in zip(self.blocks(), self.sizes, strict=True):
            rows = size if self.on_bad_rows == "raise" else math.nan
            parts.append(da.from_delayed(block, shape=(rows, d), dtype=np.float64, meta=np.empty((0, d))))
        return da.concatenate(parts, axis=0) if len(parts) > 1 else parts[0]


def _row_counts(validated: tuple[np.ndarray, int, np.ndarray | None]) -> tuple[int, int]:
    return int(validated[0].shape[0]), int(validated[1])


def _apply_rows(validated: tuple[np.ndarray, int, np.ndarray | None], fn: Any) -> tuple[np.ndarray, int, Any]:
    rows, dropped, kept = validated
    return np.ascontiguousarray(fn(rows), dtype=np.float64), dropped, kept


def _row_keys(validated: tuple[np.ndarray, int, np.ndarray | None], base: int) -> np.ndarray:
    rows, _, kept = validated
    local = np.arange(rows.shape[0], dtype=np.int64) if kept is None else kept.astype(np.int64)
    return base + local


def make_source(description: str, columns: tuple[str, ...], named: bool, raws: list[Any], labels: list[str],
                sizes: list[float], on_bad_rows: OnBadRows) -> Source:
    """A :class:`Source` of a backend's delayed raw chunks ``raws`` (each validated by ``validate_block``), with
    their ``labels`` and row ``sizes`` (NaN where unknown); refuses a source without chunks or with zero rows."""
    if not raws:
        raise SourceError(f"{description}: the source has no rows (no chunks)")
    known = [s for s in sizes if not math.isnan(s)]
    if len(known) == len(sizes) and sum(known) == 0:
        raise EmptySourceError(f"{description}: the source has zero rows")
    validate = dask.delayed(validate_block, pure=True, nout=3)
    validated = tuple(validate(raw, label, columns, on_bad_rows) for raw, label in zip(raws, labels, strict=True))
    return Source(description, columns, named, tuple(labels), tuple(float(s) for s in sizes), on_bad_rows, validated)


def select_indices(columns: Any, names: list[str], where: str) -> list[int]:
    """Positions of the selected columns (names or indices; all when None), refusing an ambiguous name."""
    if columns is None:
        out = list(range(len(names)))
    else:
        out = []
        for c in columns:
            if isinstance(c, (int, np.integer)):
                if not 0 <= int(c) < len(names):
                    raise SourceError(f"{where}: column index {c} is out of range (it has {len(names)} columns)")
                out.append(int(c))
            elif c in names:
                out.append(names.index(c))
            else:
                raise SourceError(f"{where}: missing column {c!r}; it has {names}")
    for i in out:
        if names.count(names[i]) > 1:
            raise SourceError(f"{where}: column {names[i]!r} appears {names.count(names[i])} times; rename the "
                              f"duplicates, or select other columns with {COLUMNS_HINT}")
    return out


def select_frame(frame: Any, columns: Any, where: str) -> Any:
    """The selected columns (names or indices; all when None) of an in-memory pandas DataFrame, each
    checked to be numeric and exactly convertible to float64 (the errors name the column)."""
    idx = select_indices(columns, [str(c) for c in frame.columns], where)
    frame = frame.iloc[:, idx]
    check_numeric(frame.dtypes.items(), where)
    check_exact_ints(frame.items(), where)
    return frame


def as_source(data: Any, *, columns: list[str] | None = None, on_bad_rows: str = "raise",
              storage_options: dict[str, Any] | None = None, filters: list[tuple[str, str, Any]] | None = None,
              array: str | None = None, format: str | None = None, rows: tuple[int, int] | None = None,
              coordinate: str | None = None) -> Source:
    """Turn ``data`` into a :class:`Source` through the backend that opens it (module docstring).

    ``filters`` (Parquet only): rows where every ``(column, op, value)`` holds are kept, per row
    group; the chunk sizes then become unknown (NaN) since the footers count unfiltered rows.
    ``array`` (Zarr groups only): the 2-D array of the group to read.
    ``coordinate`` (Zarr groups only): a 1-D array that labels the rows (e.g. ``date``), never a column.
    ``rows`` (Zarr only): read rows ``start`` to ``stop − 1`` only — the rows of one value of ``coordinate``,
    named ``path#coordinate=value`` in messages (chunk labels give the store's row numbers).
    ``format`` (paths only): ``"zarr"``, ``"csv"`` or ``"parquet"`` when the caller knows it (a pipeline's
    partitions); by default a path ending in ``.zarr``, or a directory holding a Zarr marker
    (:func:`~tgpflow.io.backends.zarr.is_zarr_store`, on any fsspec filesystem), is Zarr, one ending in ``.csv`` or
    ``.tsv`` (compressed or not) CSV, and anything else Parquet (docs/data.md).
    """
    from tgpflow.io.backends import backend_for  # the backends build on this module

    on_bad_rows = check_on_bad_rows(on_bad_rows)
    if format not in (None, "zarr", "csv", "parquet"):
        raise SourceError(f"format must be 'zarr', 'csv', 'parquet' or None; got {format!r}")
    if isinstance(data, Source):
        return data
    backend = backend_for(data, format, storage_options)
    given = {"storage_options": storage_options, "filters": filters or None, "array": array, "rows": rows,
             "coordinate": coordinate}
    given = {k: v for k, v in given.items() if v is not None}
    where = f"{data}: " if isinstance(data, (str, Path)) else ""
    if "filters" in given and "filters" not in backend.KEYWORDS:
        raise SourceError(f"{where}row filters apply to Parquet sources only")
    foreign = sorted(k for k in given if k not in backend.KEYWORDS and k != "storage_options")
    if foreign:
        raise SourceError(f"{where}array=, rows= and coordinate= name arrays and rows of a Zarr group; this is not a "
                          f"Zarr store (got {', '.join(k + '=' for k in foreign)})")
    return backend.open_source(data, columns=columns, on_bad_rows=on_bad_rows,
                               **{k: v for k, v in given.items() if k in backend.KEYWORDS})


def concat_sources(sources: list[Source], description: str | None = None) -> Source:
    """``sources`` one after another, as one source (their columns must agree): chunks, labels and sizes in order,
    so that a row's key is its position in the whole when every size is known (:meth:`Source.row_keys`)."""
    if not sources:
        raise SourceError("no sources to put together")
    first = sources[0]
    for other in sources[1:]:
        if other.columns != first.columns:
            raise SourceError(f"{other.description}: columns {list(other.columns)} differ from "
                              f"{first.description}'s {list(first.columns)}")
    return dataclasses.replace(first, description=description or first.description,
                               labels=tuple(lb for s in sources for lb in s.labels),
                               sizes=tuple(sz for s in sources for sz in s.sizes),
                               _validated=tuple(v for s in sources for v in s._validated))
