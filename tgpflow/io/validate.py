"""Per-chunk validation: every chunk is checked while it streams, never in a separate pass.

A chunk arrives from its reader as a NumPy array, a pandas DataFrame or a pyarrow Table and
leaves as a float64 (n, d) array plus the number of rows dropped. Missing (null) and
non-finite values either raise a :class:`~tgpflow.errors.SourceError` that names the chunk
(file and row group, or chunk index and rows), each offending column and the count of bad
rows — or, with ``on_bad_rows="drop"``, are dropped and counted.

Two more cases are checked on the way to float64, each naming the column:

* integers beyond ±2**53 (:data:`MAX_EXACT_INT`) raise whatever the policy: float64 holds
  them only rounded, and such a column is almost always an identifier or a nanosecond
  timestamp rather than a measurement. Cast it to float64 first when the rounding is
  acceptable (it is then taken as given).
* values beyond ±1e146 (:data:`MAX_MAGNITUDE`) overflow float64 in the moments (sums of
  squares and cross products), the whitening and the features; they count as bad rows: the
  error says that they overflow, and ``on_bad_rows="drop"`` drops them with the non-finite ones.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Literal

import numpy as np

from tgpflow.errors import COLUMNS_HINT, DROP_HINT, SourceError

__all__ = ["validate_block", "OnBadRows", "check_on_bad_rows", "check_numeric", "check_exact_ints",
           "MAX_EXACT_INT", "MAX_MAGNITUDE"]

OnBadRows = Literal["raise", "drop"]

#: Integers of larger magnitude are not all representable in float64 (a 53-bit significand).
MAX_EXACT_INT = 2**53
#: Largest magnitude accepted: squares and cross products of values up to 1e146, summed over 10**16 rows,
#: stay below float64's maximum (1.8e308).
MAX_MAGNITUDE = 1e146


def check_on_bad_rows(value: str) -> OnBadRows:
    if value not in ("raise", "drop"):
        raise ValueError(f"on_bad_rows must be 'raise' or 'drop'; got {value!r}")
    return value  # type: ignore[return-value]


def check_numeric(dtypes: Iterable[tuple[Any, Any]], label: str) -> None:
    """Refuse the first (name, dtype) that is not boolean, integer or floating, naming it."""
    for name, dtype in dtypes:
        if getattr(dtype, "kind", "O") not in "biuf":
            raise SourceError(f"{label}: column {str(name)!r} has non-numeric dtype {dtype}; select numeric columns "
                              f"with {COLUMNS_HINT}")


def _inexact_int_error(label: str, name: str, count: int) -> SourceError:
    return SourceError(
        f"{label}: column {name!r} holds {count} integer(s) beyond ±2**53, which lose precision as float64 "
        f"(an identifier or a nanosecond timestamp?); leave it out with {COLUMNS_HINT}, or cast "
        f"it to float64 first if the rounding is acceptable")


def check_exact_ints(columns: Iterable[tuple[str, Any]], label: str) -> None:
    """Refuse a 64-bit integer column (NumPy array or pandas Series) with values beyond ±2**53."""
    for name, values in columns:
        kind, size = values.dtype.kind, values.dtype.itemsize
        if kind not in "iu" or size < 8:  # narrower integers are exact in float64
            continue
        beyond = values > MAX_EXACT_INT
        if kind == "i":
            beyond = beyond | (values < -MAX_EXACT_INT)
        count = int(beyond.sum())
        if count:
            raise _inexact_int_error(label, str(name), count)


def _arrow_to_float64(table: Any, label: str) -> np.ndarray:
    import pyarrow as pa
    import pyarrow.compute as pc

    cols = []
    for name in table.column_names:
        col = table.column(name)
        try:  # a safe cast: integers beyond ±2**53 raise instead of rounding
            cols.append(col.cast(pa.float64()).to_numpy(zero_copy_only=False))
        except pa.ArrowInvalid as exc:
            if not pa.types.is_integer(col.type):
                raise
            count = pc.sum(pc.or_(pc.greater(col, MAX_EXACT_INT), pc.less(col, -MAX_EXACT_INT))).as_py()
            raise _inexact_int_error(label, name, int(count or 0)) from exc
    return np.column_stack(cols) if cols else np.empty((table.num_rows, 0))


def _to_float64(raw: Any, label: str, columns: tuple[str, ...]) -> np.ndarray:
    if hasattr(raw, "column_names") and hasattr(raw, "num_rows"):  # pyarrow Table
        return _arrow_to_float64(raw, label)
    if hasattr(raw, "dtypes") and hasattr(raw, "to_numpy"):  # pandas DataFrame
        check_numeric(raw.dtypes.items(), label)
        check_exact_ints(raw.items(), label)
        return raw.to_numpy(dtype=np.float64, na_value=np.nan)
    a = np.asarray(raw)
    if a.dtype.kind not in "biuf":
        raise SourceError(f"{label}: non-numeric data of dtype {a.dtype}; pass numeric columns only")
    if a.ndim == 2 and a.shape[1] == len(columns):
        check_exact_ints(zip(columns, a.T, strict=True), label)
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
    with np.errstate(invalid="ignore"):
        usable = np.abs(a) <= MAX_MAGNITUDE  # False for NaN, ±inf and values whose squares overflow
    if usable.all():
        return np.ascontiguousarray(a), 0, None
    kept = usable.all(axis=1)
    if on_bad_rows == "drop":
        return np.ascontiguousarray(a[kept]), int((~kept).sum()), np.flatnonzero(kept)
    finite = np.isfinite(a)
    if finite.all():
        raise _overflow_error(a, usable, label, columns)
    n_bad = int((~finite.all(axis=1)).sum())
    per_column = (~finite).sum(axis=0)
    detail = ", ".join(f"column {columns[j]!r}: {int(k)}" for j, k in enumerate(per_column) if k)
    raise SourceError(
        f"{label}: {n_bad} of {a.shape[0]} rows have missing, NaN or infinite values ({detail}); "
        f"clean the data, or pass {DROP_HINT} to drop and count them")


def _overflow_error(a: np.ndarray, usable: np.ndarray, label: str, columns: tuple[str, ...]) -> SourceError:
    """The error for finite values too large for float64 arithmetic, naming the first such column."""
    j = int(np.flatnonzero(~usable.all(axis=0))[0])
    count = int((~usable[:, j]).sum())
    peak = float(np.abs(a[:, j]).max())
    return SourceError(
        f"{label}: column {columns[j]!r} has {count} value(s) of magnitude up to {peak:.3g}, beyond "
        f"{MAX_MAGNITUDE:.0e}, whose squares overflow float64; rescale the column (e.g. divide it by "
        f"{10.0 ** np.floor(np.log10(peak)):.0e}), or pass {DROP_HINT} to drop "
        f"and count those rows")
