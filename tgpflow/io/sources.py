"""Sources: anything with rows becomes a list of validated float64 chunks on a Dask graph.

``as_source`` accepts a Parquet file, directory or glob (one chunk per row group), a Zarr
array (its row chunks; a 2-D array, or a group's 2-D array named by ``array=``, or a group of
1-D arrays read as columns — its dimension coordinate, xarray's index of the rows, left out unless named; with
``rows=(start, stop)``, only those rows of it: one partition of a store with a date dimension,
:func:`zarr_row_runs`; CF missing values and packing decoded as xarray decodes them,
:mod:`tgpflow.io.cf_packing`), a dask array (its row chunks; one column block), a dask or pandas
DataFrame (its partitions), or a NumPy array (row chunks of ≤ 64 MiB, at least 16 of them once
they hold 16 384 rows each). A
:class:`Source` is a set of lazy per-chunk tasks: reader → ``validate_block`` →
(float64 rows, rows dropped). Nothing is read when a source is made, except Parquet footers
and Zarr metadata; chunk sizes are known from metadata where the format has them.
"""

from __future__ import annotations

import dataclasses
import math
import operator
import sys
from pathlib import Path
from typing import Any

import dask
import dask.array as da
import numpy as np

from tgpflow.core.logs import logger
from tgpflow.errors import EmptySourceError, SourceError, cause
from tgpflow.io.cf_packing import cf_encoding, is_dimension_coordinate
from tgpflow.io.cf_time import decode_cf_time
from tgpflow.io.validate import OnBadRows, check_exact_ints, check_numeric, check_on_bad_rows, validate_block

__all__ = ["Source", "as_source", "select_frame", "is_zarr_store", "zarr_row_runs", "zarr_data_arrays",
           "coordinate_label", "ZARR_MARKERS", "NUMPY_CHUNK_BYTES"]

#: The files that make a directory a Zarr store: ``zarr.json`` (Zarr v3), ``.zgroup`` / ``.zarray`` (Zarr v2).
ZARR_MARKERS = ("zarr.json", ".zgroup", ".zarray")

#: Chunk size when an in-memory NumPy array is split into tasks.
NUMPY_CHUNK_BYTES = 64 * 2**20
#: An in-memory array of more rows than this is split into at least 16 tasks (so that a
#: 300k-row array does not run as one task on one core). The rule depends only on the
#: array's shape, never on the machine, so the statistics stay bit-identical everywhere.
NUMPY_MIN_CHUNK_ROWS = 16_384


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


def _make(description: str, columns: tuple[str, ...], named: bool, raws: list[Any], labels: list[str],
          sizes: list[float], on_bad_rows: OnBadRows) -> Source:
    if not raws:
        raise SourceError(f"{description}: the source has no rows (no chunks)")
    known = [s for s in sizes if not math.isnan(s)]
    if len(known) == len(sizes) and sum(known) == 0:
        raise EmptySourceError(f"{description}: the source has zero rows")
    validate = dask.delayed(validate_block, pure=True, nout=3)
    validated = tuple(validate(raw, label, columns, on_bad_rows) for raw, label in zip(raws, labels, strict=True))
    return Source(description, columns, named, tuple(labels), tuple(float(s) for s in sizes), on_bad_rows, validated)


def _select_indices(columns: Any, names: list[str], where: str) -> list[int]:
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
                              f"duplicates, or select other columns with columns=[...] (CLI: --columns)")
    return out


def select_frame(frame: Any, columns: Any, where: str) -> Any:
    """The selected columns (names or indices; all when None) of an in-memory pandas DataFrame, each
    checked to be numeric and exactly convertible to float64 (the errors name the column)."""
    idx = _select_indices(columns, [str(c) for c in frame.columns], where)
    frame = frame.iloc[:, idx]
    check_numeric(frame.dtypes.items(), where)
    check_exact_ints(frame.items(), where)
    return frame


def is_zarr_store(path: str, storage_options: dict[str, Any] | None = None, fs: Any = None) -> bool:
    """Whether ``path`` (a local path or fsspec URL; a path on ``fs`` when given) is a Zarr store: a directory
    holding one of :data:`ZARR_MARKERS` (a v3 or v2 group or array)."""
    if fs is None:
        import fsspec

        fs, path = fsspec.core.url_to_fs(str(path), **(storage_options or {}))
    path = str(path).rstrip("/") or "/"
    return bool(fs.isdir(path)) and any(fs.isfile(f"{path}/{m}") for m in ZARR_MARKERS)


def as_source(data: Any, *, columns: list[str] | None = None, on_bad_rows: str = "raise",
              storage_options: dict[str, Any] | None = None, filters: list[tuple[str, str, Any]] | None = None,
              array: str | None = None, format: str | None = None, rows: tuple[int, int] | None = None,
              coordinate: str | None = None) -> Source:
    """Turn ``data`` into a :class:`Source` (see the module docstring for what is accepted).

    ``filters`` (Parquet only): rows where every ``(column, op, value)`` holds are kept, per row
    group; the chunk sizes then become unknown (NaN) since the footers count unfiltered rows.
    ``array`` (Zarr groups only): the 2-D array of the group to read.
    ``coordinate`` (Zarr groups only): a 1-D array that labels the rows (e.g. ``date``), never a column.
    ``rows`` (Zarr only): read rows ``start`` to ``stop − 1`` only — the rows of one value of ``coordinate``,
    named ``path#coordinate=value`` in messages (chunk labels give the store's row numbers).
    ``format`` (paths only): ``"zarr"`` or ``"parquet"`` when the caller knows it (a pipeline's partitions);
    by default a path ending in ``.zarr``, or a directory holding a Zarr marker (:func:`is_zarr_store`, on
    any fsspec filesystem), is Zarr and anything else Parquet.
    """
    on_bad_rows = check_on_bad_rows(on_bad_rows)
    if format not in (None, "zarr", "parquet"):
        raise SourceError(f"format must be 'zarr', 'parquet' or None; got {format!r}")
    if isinstance(data, Source):
        return data
    if isinstance(data, (str, Path)):
        path = str(data)
        if format is None:
            zarr_path = path.rstrip("/").endswith(".zarr") or (
                not any(c in path for c in "*?[") and is_zarr_store(path, storage_options))
            format = "zarr" if zarr_path else "parquet"
        if format == "zarr":
            if filters:
                raise SourceError(f"{path}: row filters apply to Parquet sources only")
            return _zarr_source(path, columns, on_bad_rows, array, rows, coordinate)
        if array is not None or rows is not None or coordinate is not None:
            raise SourceError(f"{path}: array=, rows= and coordinate= name arrays and rows of a Zarr group; this is "
                              f"not a Zarr store")
        return _parquet_source(path, columns, on_bad_rows, storage_options, filters)
    if filters:
        raise SourceError("row filters apply to Parquet sources only")
    if isinstance(data, da.Array):
        return _dask_array_source(data, "dask array", columns, on_bad_rows)
    if _is_dask_dataframe(data):
        return _dask_dataframe_source(data, columns, on_bad_rows)
    if hasattr(data, "dtypes") and hasattr(data, "to_numpy") and hasattr(data, "columns"):  # pandas
        frame = select_frame(data, columns, "pandas DataFrame")
        arr = frame.to_numpy(dtype=np.float64, na_value=np.nan)
        return _numpy_source(arr, "pandas DataFrame", [str(c) for c in frame.columns], on_bad_rows)
    if hasattr(data, "__array__") or isinstance(data, (list, tuple)):
        arr = np.asarray(data)
        if arr.ndim != 2:
            raise SourceError(f"expected a 2-D array of rows, got shape {arr.shape}; reshape 1-D data with x.reshape(-1, 1)")
        idx = _select_indices(columns, [str(i) for i in range(arr.shape[1])], "array")
        return _numpy_source(arr[:, idx] if columns is not None else arr, "numpy array", None, on_bad_rows)
    raise TypeError(f"cannot read rows from {type(data).__name__}; pass a NumPy/dask array, a DataFrame, "
                    f"a Parquet path or glob, or a Zarr array path")


def _is_dask_dataframe(data: Any) -> bool:
    """Whether ``data`` is a dask DataFrame, without importing dask.dataframe (1 s cold): one cannot exist unless
    it was imported."""
    dd = sys.modules.get("dask.dataframe")
    return dd is not None and isinstance(data, dd.DataFrame)


def _numpy_source(arr: np.ndarray, description: str, names: list[str] | None, on_bad_rows: OnBadRows) -> Source:
    if arr.dtype.kind not in "biuf":
        raise SourceError(f"{description}: non-numeric dtype {arr.dtype}; pass numeric data")
    n, d = arr.shape
    rows = max(1, min(NUMPY_CHUNK_BYTES // max(1, 8 * d), max(-(-n // 16), NUMPY_MIN_CHUNK_ROWS)))
    x = da.from_array(arr, chunks=(rows, d)) if n > 0 else da.from_array(arr)
    return _dask_array_source(x, description, None, on_bad_rows, names=names)


def _dask_array_source(x: da.Array, description: str, columns: Any, on_bad_rows: OnBadRows,
                       names: list[str] | None = None, first_row: int = 0) -> Source:
    if x.ndim != 2:
        raise SourceError(f"{description}: expected a 2-D array of rows, got {x.ndim} dimensions")
    if len(x.chunks[1]) != 1:
        raise SourceError(f"{description}: data is chunked along columns ({len(x.chunks[1])} column blocks); "
                          f"call X.rechunk({{1: -1}}) so that each chunk holds whole rows")
    if x.dtype.kind not in "biuf":
        raise SourceError(f"{description}: non-numeric dtype {x.dtype}; pass numeric data")
    all_names = names or [str(i) for i in range(x.shape[1])]
    idx = _select_indices(columns, all_names, description)
    if columns is not None:
        x = x[:, idx]
    cols = tuple(all_names[i] for i in idx)
    raws = list(x.to_delayed().ravel())
    sizes = [float(s) for s in x.chunks[0]]
    labels, start = [], float(first_row)
    for i, s in enumerate(sizes):
        if math.isnan(s) or math.isnan(start):
            labels.append(f"{description} chunk {i}")
            start = math.nan
        else:
            labels.append(f"{description} chunk {i} (rows {int(start)}–{int(start + s) - 1})")
            start += s
    return _make(description, cols, names is not None, raws, labels, sizes, on_bad_rows)


def _dask_dataframe_source(df: Any, columns: Any, on_bad_rows: OnBadRows) -> Source:
    names = [str(c) for c in df.columns]
    idx = _select_indices(columns, names, "dask DataFrame")
    selected = [df.columns[i] for i in idx]
    frame = df[selected]
    check_numeric(frame.dtypes.items(), "dask DataFrame")
    raws = list(frame.to_delayed())
    labels = [f"dask DataFrame partition {i}" for i in range(len(raws))]
    return _make("dask DataFrame", tuple(names[i] for i in idx), True, raws, labels, [math.nan] * len(raws), on_bad_rows)


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
    return _make(path, layout.columns, True, raws, layout.labels(), sizes, on_bad_rows)


def _open_zarr(path: str, array: str | None) -> Any:
    """The Zarr node at ``path``: the group's array ``array`` when named, else the group or array itself."""
    import zarr

    try:
        node = zarr.open(store=path, mode="r")
    except Exception as exc:
        raise SourceError(f"{path}: not a readable Zarr store ({cause(exc)})") from exc
    if array is not None:
        if not isinstance(node, zarr.Group):
            raise SourceError(f"{path}: is a Zarr array; array={array!r} names an array inside a Zarr group")
        members = sorted(name for name, _ in node.arrays())
        if array not in members:
            raise SourceError(f"{path}: the Zarr group has no array {array!r}; it has {members}")
        node = node[array]
    return node


class _NamedZarrReads:
    """A Zarr array whose failed reads name the store (or partition), the array and the rows with their chunk:
    read through ``da.from_zarr``, a corrupt chunk raises only its codec's words (e.g. "Zstd
    decompression error: invalid input data"), with no file, column or row in them. (A missing chunk is
    not an error in Zarr: it reads as the array's fill value, which Zarr v3 writes by leaving the chunk out.)"""

    def __init__(self, array: Any, where: str):
        self.array, self.where = array, where
        self.shape, self.dtype, self.ndim = array.shape, array.dtype, array.ndim

    def __getitem__(self, index: Any) -> Any:
        try:
            return self.array[index]
        except MemoryError:
            raise
        except Exception as exc:
            name = f" array {self.array.path!r}" if getattr(self.array, "path", "") else ""
            raise SourceError(f"{self.where}:{name}{self._rows(index)} cannot be read ({cause(exc)})") from exc

    def _rows(self, index: Any) -> str:
        """The rows of a read, with their chunks (``" rows 600–1199 (Zarr chunk 1)"``), or ``""``."""
        rows = index[0] if isinstance(index, tuple) and index else index
        if not isinstance(rows, slice):
            return ""
        start, stop, _ = rows.indices(self.shape[0])
        try:
            size = int(self.array.chunks[0])
        except Exception:  # a layout without regular chunks: the rows alone
            return f" rows {start}–{stop - 1}"
        first, last = start // size, max(start, stop - 1) // size
        chunks = f"chunk {first}" if first == last else f"chunks {first}–{last}"
        return f" rows {start}–{stop - 1} (Zarr {chunks})"


def _from_zarr(array: Any, chunks: Any, where: str) -> da.Array:
    """``da.from_zarr(array, chunks)`` with reads that name ``where`` when they fail. ``where`` is in the task
    keys: two date partitions of one store would otherwise share the keys of a chunk they both touch, and the
    graph that merges them would read it under one partition's name."""
    from dask.base import tokenize

    return da.from_array(_NamedZarrReads(array, where), chunks, name="from-zarr-" + tokenize(array, chunks, where))


def _zarr_source(path: str, columns: Any, on_bad_rows: OnBadRows, array: str | None = None,
                 rows: tuple[int, int] | None = None, coordinate: str | None = None) -> Source:
    import zarr

    group = _open_zarr(path, None) if coordinate is not None else None
    node = _open_zarr(path, array)
    where, first = path, 0
    if rows is not None:
        first, stop = int(rows[0]), int(rows[1])
        where = f"{path} rows {first}–{stop - 1}"
        if coordinate is not None:
            value = _coordinate_values(_coordinate(group, path, coordinate), path, coordinate, first, first + 1)[0]
            where = f"{path}#{coordinate}={coordinate_label(value)}"
    if not isinstance(node, zarr.Array):
        return _zarr_group_source(node, path, columns, on_bad_rows, rows, coordinate, where)
    if node.ndim != 2:
        raise SourceError(f"{path}: expected a 2-D Zarr array of rows, got shape {node.shape}")
    names = node.attrs.get("columns")
    names = [str(c) for c in names] if isinstance(names, list) and len(names) == node.shape[1] else None
    x = _read_zarr(node, (node.chunks[0], node.shape[1]), where, names or [str(j) for j in range(node.shape[1])],
                   f"{path}: the array {node.path!r}" if node.path else path)
    if rows is not None:
        x = x[first:stop]
    return _dask_array_source(x, where, columns, on_bad_rows, names=names, first_row=first)


def _zarr_group_source(group: Any, path: str, columns: Any, on_bad_rows: OnBadRows,
                       rows: tuple[int, int] | None = None, coordinate: str | None = None,
                       where: str | None = None) -> Source:
    """A Zarr group of 1-D arrays of one length, each a column (the layout ``xarray`` writes) but for the
    ``coordinate`` that labels the rows: the rows are the selected arrays side by side, chunked along rows as
    the first of them is stored (only ``rows`` of them, when given)."""
    arrays = dict(sorted((n, a) for n, a in group.arrays() if n != coordinate))
    if not arrays or any(a.ndim != 1 for a in arrays.values()):
        first = next((n for n, a in arrays.items() if a.ndim == 2), next(iter(arrays), "NAME"))
        raise SourceError(f"{path}: is a Zarr group, not an array; pass the array's path (e.g. "
                          f"{path.rstrip('/')}/{first}), or name it with array= (a pipeline spec: source.array); "
                          f"a group is read as a table only when it holds 1-D arrays, one per column")
    names = list(arrays)
    if columns is None:  # a dimension coordinate labels the rows (xarray's index): named in columns= only
        chosen = _data_names(arrays)
        if len(chosen) < len(names):
            logger.info("%s: read without its dimension coordinate %s, the rows' labels (name it in columns= to read "
                        "it as a column)", path, ", ".join(repr(n) for n in names if n not in chosen))
    else:
        chosen = [names[i] for i in _select_indices(columns, names, path)]
    check_numeric(((n, arrays[n].dtype) for n in chosen), path)
    lengths = {n: arrays[n].shape[0] for n in chosen}
    if len(set(lengths.values())) > 1:
        raise SourceError(f"{path}: the column arrays differ in length ({lengths}); each must hold one value per row")
    size = arrays[chosen[0]].chunks[0]
    mixed = len({arrays[n].dtype for n in chosen}) > 1  # stacked in their common dtype: int64 beside float64 converts
    x = da.stack([_read_zarr(arrays[n], (size,), where or path, [n], f"{path}: the array {n!r}", check_ints=mixed)
                  for n in chosen], axis=1).rechunk({1: -1})
    first = 0
    if rows is not None:
        first = int(rows[0])
        x = x[first:int(rows[1])]
    return _dask_array_source(x, where or path, None, on_bad_rows, names=chosen, first_row=first)


def _data_names(arrays: dict[str, Any]) -> list[str]:
    """The names of a group's arrays that hold data: all but its dimension coordinates (all, if that is none)."""
    return [n for n, a in arrays.items() if not is_dimension_coordinate(n, a)] or list(arrays)


def _read_zarr(array: Any, chunks: Any, where: str, names: list[str], what: str, check_ints: bool = False) -> da.Array:
    """``array`` read by :func:`_from_zarr`, decoded as xarray reads it when CF-encoded (missing-value markers,
    ``scale_factor``, ``add_offset``: :func:`~tgpflow.io.cf_packing.cf_encoding`; ``what`` names it in a refusal).
    Where the values will be converted to float64 before validation sees them — decoded, or (``check_ints``) a
    column stacked beside floating ones — 64-bit integers beyond ±2**53 are refused first, naming the column."""
    x = _from_zarr(array, chunks, where)
    encoding = cf_encoding(array, what)
    if array.dtype.kind in "iu" and array.dtype.itemsize == 8 and (check_ints or encoding is not None):
        x = x.map_blocks(_exact_ints, names=names, where=where, dtype=array.dtype)
    return x if encoding is None else x.map_blocks(encoding, dtype=np.float64)


def _exact_ints(block: np.ndarray, names: list[str], where: str, block_info: Any = None) -> np.ndarray:
    """``block`` unchanged, once :func:`~tgpflow.io.validate.check_exact_ints` passes it (named by its rows)."""
    start, stop = block_info[0]["array-location"][0]
    check_exact_ints(zip(names, block.T if block.ndim == 2 else [block], strict=True), f"{where} rows {start}–{stop - 1}")
    return block


def coordinate_label(value: Any) -> str:
    """A coordinate value as text, as partition keys write it: datetime64 in ISO 8601 at its unit
    (``2026-11-01`` for days), integers in decimal, strings as they are."""
    if isinstance(value, np.datetime64):
        return str(np.datetime_as_string(value))
    if isinstance(value, bytes):
        return value.decode()
    if isinstance(value, (np.integer, int)):
        return str(int(value))
    return str(value)


def _coordinate(group: Any, path: str, coordinate: str) -> Any:
    """The group's 1-D array ``coordinate`` (refused, in one sentence, where the group has none)."""
    import zarr

    members = sorted(name for name, _ in group.arrays()) if isinstance(group, zarr.Group) else []
    if coordinate not in members:
        raise SourceError(f"{path}: partition_by names the coordinate array {coordinate!r}, but the Zarr store has no "
                          f"such array (it has {members}); name the 1-D array that labels the rows")
    coord = group[coordinate]
    if coord.ndim != 1:
        raise SourceError(f"{path}: the coordinate array {coordinate!r} has shape {coord.shape}; it must be 1-D, "
                          f"one value per row")
    return coord


def _coordinate_values(coord: Any, path: str, coordinate: str, first: int = 0, stop: int | None = None) -> np.ndarray:
    """Rows ``first`` … ``stop`` of a coordinate array; CF-encoded time (what xarray writes for datetime64:
    counts with ``units: "days since …"``) decoded to datetime64 (:func:`~tgpflow.io.cf_time.decode_cf_time`)."""
    values = np.asarray(coord[first:stop])
    return decode_cf_time(values, coord.attrs, f"{path}: the coordinate array {coordinate!r}")


def zarr_data_arrays(path: str, array: str | None, coordinate: str) -> list[Any]:
    """The arrays of a Zarr group that hold its rows (``array``, or the group's arrays but ``coordinate`` and other
    dimension coordinates: the columns it is read with by default)."""
    import zarr

    node = _open_zarr(path, array)
    if isinstance(node, zarr.Array):
        return [node]
    arrays = dict(sorted((n, a) for n, a in node.arrays() if n != coordinate))
    return [arrays[n] for n in _data_names(arrays)]


def zarr_row_runs(path: str, coordinate: str, array: str | None = None) -> dict[str, tuple[int, int]]:
    """The rows of each value of a Zarr group's 1-D coordinate array (a date dimension): ``{label: (start,
    stop)}`` in row order (labels: :func:`coordinate_label`). Refuses a store without that array, one whose
    coordinate and rows differ in length, a value whose rows are not one contiguous run, and a coordinate that
    is not sorted (non-decreasing) — each naming the store and the value."""
    group = _open_zarr(path, None)
    coord = _coordinate(group, path, coordinate)
    n = min((a.shape[0] for a in zarr_data_arrays(path, array, coordinate)), default=0)
    if coord.shape[0] != n:
        raise SourceError(f"{path}: the coordinate array {coordinate!r} has {coord.shape[0]} values and the store "
                          f"{n} rows; it must hold one value per row")
    values = _coordinate_values(coord, path, coordinate)
    if values.dtype.kind not in "iuMUSOT":
        raise SourceError(f"{path}: the coordinate array {coordinate!r} has dtype {values.dtype}; partition_by needs "
                          f"strings, integers or datetime64")
    if values.dtype.kind == "M" and np.isnat(values).any():
        raise SourceError(f"{path}: the coordinate array {coordinate!r} has a missing value (NaT) at row "
                          f"{int(np.flatnonzero(np.isnat(values))[0])}")
    if values.dtype.kind in "OT":
        values = values.astype(str)
    starts = np.flatnonzero(np.concatenate([[True], values[1:] != values[:-1]])) if n else np.zeros(0, int)
    stops = np.append(starts[1:], n)
    runs: dict[str, tuple[int, int]] = {}
    for a, b in zip(starts.tolist(), stops.tolist(), strict=True):
        label = coordinate_label(values[a])
        if label in runs:
            r = runs[label]
            raise SourceError(f"{path}: the rows of {coordinate}={label} are not one contiguous run (rows "
                              f"{r[0]}–{r[1] - 1} and {a}–{b - 1}); write each {coordinate}'s rows together")
        runs[label] = (a, b)
    for before, a, b in zip(starts[:-1].tolist(), starts[1:].tolist(), stops[1:].tolist(), strict=True):
        if values[a] < values[before]:
            raise SourceError(f"{path}: the coordinate array {coordinate!r} is not sorted: "
                              f"{coordinate}={coordinate_label(values[a])} (rows {a}–{b - 1}) follows "
                              f"{coordinate_label(values[before])}; append the rows in {coordinate} order")
    return runs
