"""Data a model cannot be fitted to, said in the data's terms: no rows left, too few rows, a
constant column, collinear columns.

The checks run on the pilot sample (or on exact moments) before any feature draw or solve, so
that the error names the columns and the fix rather than the linear algebra that would fail
later ("the kernel covariance Σ_z is not positive definite"). Every error is a
:class:`~tgpflow.errors.SourceError` whose fix names the Python argument and the CLI flag.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from tgpflow.errors import SourceError
from tgpflow.io.pilot import PilotSample

__all__ = ["check_rows_left", "check_pilot_rows", "check_covariance", "COLLINEAR_TOL"]

#: A column whose 1 − R² on the columns before it is at most this is called collinear with them.
COLLINEAR_TOL = 1e-10


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


def _others(columns: Sequence[str], leave_out: Sequence[str]) -> str:
    """The fix: the columns to keep, as the Python argument and the CLI flag."""
    keep = [c for c in columns if c not in leave_out]
    if not keep:
        return "a density needs at least one column that varies"
    return (f"leave {'it' if len(leave_out) == 1 else 'them'} out with columns={keep!r} "
            f"(CLI: --columns {','.join(keep)})")


def check_covariance(n: int, mean: np.ndarray, cov: np.ndarray, columns: Sequence[str], where: str,
                     model: str = "the GP-tilted density") -> None:
    """Refuse data whose covariance over ``n`` rows is singular, saying why: fewer rows than d + 1, a
    constant column, or collinear columns (named, with the ``columns=``/``--columns`` that drops them)."""
    columns = [str(c) for c in columns]
    d = len(columns)
    if n <= d:
        raise SourceError(
            f"{where}: {n} row(s) in {d} column(s) are too few (n_samples = {n}) for {model}, which estimates a "
            f"{d}×{d} covariance and needs at least {d + 1} rows (more rows than columns); supply more rows, or "
            f"select fewer columns with columns=[...] (CLI: --columns)")
    std = np.sqrt(np.maximum(np.diag(cov), 0.0))
    # a constant column: its spread is rounding of its mean (exactly 0 when the values are all equal)
    flat = np.flatnonzero(std <= 8 * np.finfo(np.float64).eps * np.abs(mean))
    if flat.size:
        names = [columns[j] for j in flat]
        what = (f"column {names[0]!r} is" if len(names) == 1 else f"columns {names} are")
        values = ", ".join(f"{columns[j]!r} = {mean[j]:.6g}" for j in flat)
        raise SourceError(f"{where}: {what} constant over the {n} rows read ({values}), so {model} is "
                          f"degenerate in {'it' if len(names) == 1 else 'them'}; {_others(columns, names)}")
    corr = cov / np.outer(std, std)
    try:
        # the Cholesky pivots of the correlation matrix: L_kk² = 1 − R² of column k on the columns before it
        residual = np.diag(np.linalg.cholesky(corr)) ** 2
        first = int(np.argmax(residual <= COLLINEAR_TOL)) if (residual <= COLLINEAR_TOL).any() else None
    except np.linalg.LinAlgError:
        first = d - 1
    if first is None:
        return
    _, vectors = np.linalg.eigh(corr[:first + 1, :first + 1])
    weights = np.abs(vectors[:, 0])  # the (nearly) constant combination
    names = [columns[j] for j in np.flatnonzero(weights > 1e-6 * weights.max())]
    raise SourceError(f"{where}: columns {names} are collinear over the {n} rows read (a linear combination of "
                      f"them is constant), so their covariance is singular; {_others(columns, names[-1:])}")
