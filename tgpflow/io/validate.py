"""Per-chunk validation: every chunk is checked while it streams, never in a separate pass.

A chunk arrives from its reader as a NumPy array, a pandas DataFrame or a pyarrow Table and
leaves as a float64 (n, d) array plus the number of rows dropped. Missing (null) and
non-finite values either raise a :class:`~tgpflow.errors.SourceError` that names the chunk
(file and row group, or chunk index and rows), each offending column and the count of bad
rows — or, with ``on_bad_rows="drop"``, are dropped and counted.
"""

from __future__ import annotations

from typing import Any, Literal

import numpy as np

from tgpflow.errors import SourceError

__all__ = ["validate_block", "OnBadRows", "check_on_bad_rows"]

OnBadRows = Literal["raise", "drop"]


def check_on_bad_rows(value: str) -> OnBadRows:
    if value not in ("raise", "drop"):
        raise ValueError(f"on_bad_rows must be 'raise' or 'drop'; got {value!r}")
    return value  # type: ignore[return-value]


def _to_float64(raw: Any, label: str, columns: tuple[str, ...]) -> np.ndarray:
    if hasattr(raw, "column_names") and hasattr(raw, "num_rows"):  # pyarrow Table
        import pyarrow as pa

        cols = [raw.column(c).cast(pa.float64()).to_numpy(zero_copy_only=False) for c in raw.column_names]
        return np.column_stack(cols) if cols else np.empty((raw.num_rows, 0))
    if hasattr(raw, "dtypes") and hasattr(raw, "to_numpy"):  # pandas DataFrame
        for name, dtype in raw.dtypes.items():
            if dtype.kind not in "biuf":
                raise SourceError(f"{label}: column {name!r} has non-numeric dtype {dtype}; select numeric columns")
        return raw.to_numpy(dtype=np.float64, na_value=np.nan)
    a = np.asarray(raw)
    if a.dtype.kind not in "biuf":
        raise SourceError(f"{label}: non-numeric data of dtype {a.dtype}; pass numeric columns only")
    return a.astype(np.float64, copy=False)


def validate_block(raw: Any, label: str, columns: tuple[str, ...], on_bad_rows: OnBadRows
                   ) -> tuple[np.ndarray, int, np.ndarray | None]:
    """Convert one chunk to float64 (n, d) and apply the bad-row policy.

    Returns ``(rows, dropped, kept)``: ``kept`` is None when every row was kept, else the
    positions (in the chunk) of the rows kept — so that a row keeps its identity (e.g. for
    a train/validation split) whether or not rows before it were dropped.
    """
    a = _to_float64(raw, label, columns)
    if a.ndim != 2 or a.shape[1] != len(columns):
        raise SourceError(f"{label}: expected {len(columns)} columns {list(columns)}, got an array of shape {a.shape}")
    finite = np.isfinite(a)
    if finite.all():
        return np.ascontiguousarray(a), 0, None
    bad_rows = ~finite.all(axis=1)
    n_bad = int(bad_rows.sum())
    if on_bad_rows == "drop":
        return np.ascontiguousarray(a[~bad_rows]), n_bad, np.flatnonzero(~bad_rows)
    per_column = (~finite).sum(axis=0)
    detail = ", ".join(f"column {columns[j]!r}: {int(k)}" for j, k in enumerate(per_column) if k)
    raise SourceError(
        f"{label}: {n_bad} of {a.shape[0]} rows have missing, NaN or infinite values ({detail}); "
        f"clean the data, or pass on_bad_rows='drop' (CLI: --on-bad-rows drop) to drop and count them")
