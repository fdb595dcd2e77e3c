"""Data a model cannot be fitted to, said in the data's terms: no rows left, or too few rows.

The checks run on the pilot sample (or on exact moments) before any feature draw or solve, so that
the error names the source and the fix. Every error is a :class:`~tgpflow.errors.SourceError`. A
constant column or collinear columns are refused by
:func:`tgpflow.core.gaussian_base.check_covariance`.
"""

from __future__ import annotations

from tgpflow.errors import SourceError
from tgpflow.io.pilot import PilotSample

__all__ = ["check_rows_left", "check_pilot_rows"]


def check_rows_left(n_rows: int, dropped: int, chunks_read: int, where: str, need: int, model: str) -> None:
    """Refuse fewer than ``need`` rows (of a pilot sample or a pass over ``chunks_read`` chunks, from which
    validation dropped ``dropped``): none left after dropping bad rows, or too few."""
    if n_rows == 0 and dropped:
        raise SourceError(
            f"{where}: no valid rows remain: all {dropped} rows of the {chunks_read} chunk(s) read have missing, "
            f"NaN, infinite or overflowing values and were dropped; clean the data")
    if n_rows < need:
        raise SourceError(f"{where}: {n_rows} row(s) are too few (n_samples = {n_rows}): {model} needs at least "
                          f"{need}; supply more rows")


def check_pilot_rows(pilot: PilotSample, where: str, need: int, model: str) -> None:
    """:func:`check_rows_left` for a pilot sample."""
    check_rows_left(pilot.rows.shape[0], pilot.rows_dropped, pilot.chunks_read, where, need, model)
