"""The Zarr backend: a 2-D array's row chunks, a group's 2-D array (``array=``), or a group of 1-D arrays read
as columns (the layout xarray writes; its dimension coordinate left out unless named), with ``rows=(start,
stop)`` one partition of a store with a date dimension (:func:`zarr_row_runs`); CF missing values and packing
decoded as xarray decodes them (:mod:`tgpflow.io.cf_packing`). Reads name the store, the array and the rows.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import dask.array as da
import numpy as np

from tgpflow.core.logs import logger
from tgpflow.errors import SourceError, cause
from tgpflow.io.backends.arrays import dask_array_source
from tgpflow.io.cf_packing import cf_encoding, is_dimension_coordinate
from tgpflow.io.cf_time import decode_cf_time
from tgpflow.io.sources import Source, select_indices
from tgpflow.io.validate import OnBadRows, check_exact_ints, check_numeric

__all__ = ["can_open", "open_source", "KEYWORDS", "ZARR_MARKERS", "is_zarr_store", "zarr_row_runs", "zarr_data_arrays",
           "coordinate_label"]

#: The files that make a directory a Zarr store: ``zarr.json`` (Zarr v3), ``.zgroup`` / ``.zarray`` (Zarr v2).
ZARR_MARKERS = ("zarr.json", ".zgroup", ".zarray")
#: The keywords of :func:`~tgpflow.io.sources.as_source` this backend reads.
KEYWORDS = frozenset({"storage_options", "array", "rows", "coordinate"})


def is_zarr_store(path: str, storage_options: dict[str, Any] | None = None, fs: Any = None) -> bool:
    """Whether ``path`` (a local path or fsspec URL; a path on ``fs`` when given) is a Zarr store: a directory
    holding one of :data:`ZARR_MARKERS` (a v3 or v2 group or array)."""
    if fs is None:
        import fsspec

        fs, path = fsspec.core.url_to_fs(str(path), **(storage_options or {}))
    path = str(path).rstrip("/") or "/"
    return bool(fs.isdir(path)) and any(fs.isfile(f"{path}/{m}") for m in ZARR_MARKERS)


def can_open(data: Any, format: str | None, storage_options: dict[str, Any] | None = None) -> bool:
    """A path with ``format="zarr"``; by default one ending in ``.zarr`` or a directory holding a Zarr marker."""
    if not isinstance(data, (str, Path)):
        return False
    if format is not None:
        return format == "zarr"
    path = str(data)
    return path.rstrip("/").endswith(".zarr") or (not any(c in path for c in "*?[") and
                                                 is_zarr_store(path, storage_options))


def open_source(path: Any, *, columns: Any, on_bad_rows: OnBadRows, storage_options: dict[str, Any] | None = None,
                array: str | None = None, rows: tuple[int, int] | None = None, coordinate: str | None = None) -> Source:
    """The rows of the Zarr store at ``path`` (see :func:`~tgpflow.io.sources.as_source` for the keywords)."""
    return _zarr_source(str(path), columns, on_bad_rows, array, rows, coordinate, storage_options)


def _open_zarr(path: str, array: str | None, storage_options: dict[str, Any] | None = None) -> Any:
    """The Zarr node at ``path``: the group's array ``array`` when named, else the group or array itself;
    ``storage_options`` for the filesystem of a URL."""
    import zarr

    try:
        url = "://" in str(path)  # Zarr refuses options for a local path
        node = zarr.open(store=path, mode="r", storage_options=(storage_options or None) if url else None)
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
                 rows: tuple[int, int] | None = None, coordinate: str | None = None,
                 storage_options: dict[str, Any] | None = None) -> Source:
    import zarr

    group = _open_zarr(path, None, storage_options) if coordinate is not None else None
    node = _open_zarr(path, array, storage_options)
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
    return dask_array_source(x, where, columns, on_bad_rows, names=names, first_row=first)


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
        chosen = [names[i] for i in select_indices(columns, names, path)]
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
    return dask_array_source(x, where or path, None, on_bad_rows, names=chosen, first_row=first)


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
    check_exact_ints(zip(names, block.T if block.ndim == 2 else [block], strict=True),
                     f"{where} rows {start}–{stop - 1}")
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
