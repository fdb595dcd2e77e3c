"""What ``tgpflow validate`` and ``tgpflow run --dry-run`` check in the data itself, from metadata only.

A spec that names a column the data do not have, or declares a bound that the data cross, passed validation and
failed (or, under ``on_bad_rows: drop``, quietly dropped most rows) at the first run. :func:`check_source` lists
the partitions, opens the newest one as a run would (a Parquet footer, or a Zarr store's array metadata: no
rows are read; an empty or not yet readable newest partition is passed over for the one before), and refuses,
naming the partition and the column (with the closest name it has):

* a column of ``source.columns``, of a filter, of ``outputs.scores.keep_columns`` or of a model's ``bounds``
  that the partition does not have;
* a declared bound that the footer's min/max statistics reach or cross, when the run would fail on it
  (``on_bad_rows: raise`` and no filter: every row is read, and such a row is an error). With a filter (it may
  remove those rows) or ``on_bad_rows: drop`` (they are dropped and counted, up to ``max_dropped_fraction``) it
  is a warning instead.

A source that matches no partition yet is reported as not checked, not refused: a new deployment validates its
spec before its first partition lands.
"""

from __future__ import annotations

import difflib
from typing import Any

from tgpflow.errors import EmptySourceError, SourceError, TgpflowError
from tgpflow.pipeline.arrivals import is_unreadable
from tgpflow.pipeline.discover import discover
from tgpflow.pipeline.partitions import partition_source
from tgpflow.pipeline.spec import PipelineSpec

__all__ = ["check_source"]


def _missing(where: str, what: str, name: str, names: list[str]) -> SourceError:
    close = difflib.get_close_matches(name, names, n=1)
    hint = f"; did you mean {close[0]!r}?" if close else "."
    return SourceError(f"{where}: {what} names column {name!r}, which it does not have{hint} It has {names}")


def check_source(spec: PipelineSpec) -> dict[str, Any]:
    """Check ``spec`` against its newest partition's metadata (module docstring); returns what was checked and
    the warnings, or raises a :class:`~tgpflow.errors.SourceError`."""
    from tgpflow.io.storage import storage_config

    with storage_config(spec.storage_options):
        return _check_source(spec)


def _check_source(spec: PipelineSpec) -> dict[str, Any]:
    try:
        parts = discover(spec.source.path, spec.source.partition_by, spec.source.array)
    except TgpflowError as exc:
        return {"checked": None, "note": f"not checked: {exc} (source.path; a run fails until a partition matches)"}
    for key in reversed(parts.keys):  # the newest partition a run could read (an empty or half-written one waits)
        try:
            src = partition_source(spec, key, spec.source.columns, parts.format, parts.ranges.get(key))
            break
        except EmptySourceError:
            continue
        except SourceError as exc:  # a missing column is refused here; unreadable bytes are the next run's
            if not is_unreadable(exc):
                raise
    else:
        return {"checked": None, "note": "not checked: every partition is empty or not readable yet"}
    where = parts.path(key)
    columns = list(src.columns)
    names, stats = _footer(parts.fs, where) if parts.format == "parquet" else (columns, {})
    if parts.format == "csv":  # every column of the header, not only the selected ones
        from tgpflow.io.backends.csv import header_names

        names = header_names(where)
    for name in dict.fromkeys(c for c, _, _ in spec.source.filters or []):
        if name not in names:
            raise _missing(where, "source.filters", name, names)
    keep = (spec.outputs.scores.keep_columns or []) if spec.outputs.scores else []
    if keep and parts.format == "zarr":
        raise SourceError(f"{where}: outputs.scores.keep_columns ({keep}) are read from Parquet and CSV partitions "
                          f"only; this source's are Zarr stores")
    for name in keep:
        if name not in names:
            raise _missing(where, "outputs.scores.keep_columns", name, names)
    warnings = []
    for model in spec.models:
        bounds = model.params.get("bounds")
        if not isinstance(bounds, dict):
            continue
        for name, (lo, hi) in bounds.items():
            if name not in columns:
                raise _missing(where, f"model {model.name!r}'s bounds", str(name), columns)
            low, high = stats.get(name, (None, None))
            crossed = [f"its minimum {low:g} is at or below the lower bound {lo:g}" if lo is not None and
                       low is not None and low <= lo else "",
                       f"its maximum {high:g} is at or above the upper bound {hi:g}" if hi is not None and
                       high is not None and high >= hi else ""]
            crossed = [c for c in crossed if c]
            if not crossed:
                continue
            message = (f"{where}: column {name!r} crosses model {model.name!r}'s bounds ({'; '.join(crossed)}, by "
                       f"the Parquet footer's statistics)")
            if spec.source.on_bad_rows == "raise" and not spec.source.filters:
                raise SourceError(f"{message}: the run would fail on those rows. Declare the bound beyond the data, "
                                  f"or set source.on_bad_rows: drop to drop and count them")
            warnings.append(f"{message}: those rows will be dropped and counted (source.max_dropped_fraction)"
                            if spec.source.on_bad_rows == "drop" else
                            f"{message}: unless source.filters remove those rows, the run will fail on them")
    return {"checked": key, "format": parts.format, "columns": columns, "warnings": warnings}


def _footer(fs: Any, path: str) -> tuple[list[str], dict[str, tuple[float | None, float | None]]]:
    """A Parquet file's column names and each numeric column's min and max over its row groups' statistics (None
    where a row group has none)."""
    import pyarrow.parquet as pq

    with fs.open(path, "rb") as fh:
        meta = pq.ParquetFile(fh).metadata
    names = list(meta.schema.to_arrow_schema().names)
    out: dict[str, tuple[float | None, float | None]] = {}
    for j in range(meta.num_columns):
        name = meta.schema.column(j).name
        lows, highs = [], []
        for i in range(meta.num_row_groups):
            st = meta.row_group(i).column(j).statistics
            if st is None or not st.has_min_max or not isinstance(st.min, (int, float)):
                lows = highs = None
                break
            lows.append(float(st.min))
            highs.append(float(st.max))
        out[name] = (min(lows), max(highs)) if lows else (None, None)
    return names, out
