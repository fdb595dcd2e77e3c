"""The in-memory and Dask backend: a NumPy array (row chunks of ≤ 64 MiB, at least 16 of them once they hold
16 384 rows each), a pandas DataFrame, a dask array (its row chunks; one column block) or a dask DataFrame (its
partitions)."""

from __future__ import annotations

import math
import sys
from pathlib import Path
from typing import Any

import dask.array as da
import numpy as np

from tgpflow.errors import SourceError
from tgpflow.io.sources import Source, make_source, select_frame, select_indices
from tgpflow.io.validate import OnBadRows, check_numeric

__all__ = ["can_open", "open_source", "KEYWORDS", "dask_array_source", "NUMPY_CHUNK_BYTES", "NUMPY_MIN_CHUNK_ROWS"]

#: Chunk size when an in-memory NumPy array is split into tasks.
NUMPY_CHUNK_BYTES = 64 * 2**20
#: An in-memory array of more rows than this is split into at least 16 tasks (so that a
#: 300k-row array does not run as one task on one core). The rule depends only on the
#: array's shape, never on the machine, so the statistics stay bit-identical everywhere.
NUMPY_MIN_CHUNK_ROWS = 16_384
#: The keywords of :func:`~tgpflow.io.sources.as_source` this backend reads (none: the data is in hand).
KEYWORDS: frozenset[str] = frozenset()


def can_open(data: Any, format: str | None, storage_options: dict[str, Any] | None = None) -> bool:
    """Anything but a path: arrays, DataFrames, lists of rows."""
    return not isinstance(data, (str, Path))


def open_source(data: Any, *, columns: Any, on_bad_rows: OnBadRows) -> Source:
    """The rows of an array or DataFrame (module docstring)."""
    if isinstance(data, da.Array):
        return dask_array_source(data, "dask array", columns, on_bad_rows)
    if _is_dask_dataframe(data):
        return _dask_dataframe_source(data, columns, on_bad_rows)
    if hasattr(data, "dtypes") and hasattr(data, "to_numpy") and hasattr(data, "columns"):  # pandas
        frame = select_frame(data, columns, "pandas DataFrame")
        arr = frame.to_numpy(dtype=np.float64, na_value=np.nan)
        return numpy_source(arr, "pandas DataFrame", [str(c) for c in frame.columns], on_bad_rows)
    if hasattr(data, "__array__") or isinstance(data, (list, tuple)):
        arr = np.asarray(data)
        if arr.ndim != 2:
            raise SourceError(f"expected a 2-D array of rows, got shape {arr.shape}; reshape 1-D data with "
                              f"x.reshape(-1, 1)")
        idx = select_indices(columns, [str(i) for i in range(arr.shape[1])], "array")
        return numpy_source(arr[:, idx] if columns is not None else arr, "numpy array", None, on_bad_rows)
    raise TypeError(f"cannot read rows from {type(data).__name__}; pass a NumPy/dask array, a DataFrame, "
                    f"a Parquet path or glob, or a Zarr array path")


def _is_dask_dataframe(data: Any) -> bool:
    """Whether ``data`` is a dask DataFrame, without importing dask.dataframe (1 s cold): one cannot exist unless
    it was imported."""
    dd = sys.modules.get("dask.dataframe")
    return dd is not None and isinstance(data, dd.DataFrame)


def numpy_source(arr: np.ndarray, description: str, names: list[str] | None, on_bad_rows: OnBadRows) -> Source:
    if arr.dtype.kind not in "biuf":
        raise SourceError(f"{description}: non-numeric dtype {arr.dtype}; pass numeric data")
    n, d = arr.shape
    rows = max(1, min(NUMPY_CHUNK_BYTES // max(1, 8 * d), max(-(-n // 16), NUMPY_MIN_CHUNK_ROWS)))
    x = da.from_array(arr, chunks=(rows, d)) if n > 0 else da.from_array(arr)
    return dask_array_source(x, description, None, on_bad_rows, names=names)


def dask_array_source(x: da.Array, description: str, columns: Any, on_bad_rows: OnBadRows,
                       names: list[str] | None = None, first_row: int = 0) -> Source:
    if x.ndim != 2:
        raise SourceError(f"{description}: expected a 2-D array of rows, got {x.ndim} dimensions")
    if len(x.chunks[1]) != 1:
        raise SourceError(f"{description}: data is chunked along columns ({len(x.chunks[1])} column blocks); "
                          f"call X.rechunk({{1: -1}}) so that each chunk holds whole rows")
    if x.dtype.kind not in "biuf":
        raise SourceError(f"{description}: non-numeric dtype {x.dtype}; pass numeric data")
    all_names = names or [str(i) for i in range(x.shape[1])]
    idx = select_indices(columns, all_names, description)
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
    return make_source(description, cols, names is not None, raws, labels, sizes, on_bad_rows)


def _dask_dataframe_source(df: Any, columns: Any, on_bad_rows: OnBadRows) -> Source:
    names = [str(c) for c in df.columns]
    idx = select_indices(columns, names, "dask DataFrame")
    selected = [df.columns[i] for i in idx]
    frame = df[selected]
    check_numeric(frame.dtypes.items(), "dask DataFrame")
    raws = list(frame.to_delayed())
    labels = [f"dask DataFrame partition {i}" for i in range(len(raws))]
    return make_source("dask DataFrame", tuple(names[i] for i in idx), True, raws, labels, [math.nan] * len(raws),
                       on_bad_rows)
