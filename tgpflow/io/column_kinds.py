"""What kind of values each column holds, read off the pilot sample: lattices, binary flags, point masses, edges.

A density fitted to real tables meets values that are not continuous: integer codes (hour, weekday, season),
binary flags, meters that read exactly 0 most of the time, values recorded to 3 decimals, counts that stop at
a hard minimum. Each makes a smooth density put its mass where there are no data, or collapse onto the
points. The fit reports what the pilot shows, per column (``pilot_["column_kinds"]``, the fit JSON,
``tgpflow info``), so that a user sees why a fit is unhealthy and which remedy applies:

* ``binary``: exactly two distinct values;
* ``lattice``: every value is ``origin + k·step`` for integers k (integer codes, and values recorded to a
  fixed number of decimals: step 0.001); ``values`` counts the distinct ones and ``step_over_spread`` compares
  the step with the column's standard deviation (near 1: codes, where a smooth density is a poor model;
  near 0: fine rounding, which a smooth density absorbs);
* ``continuous``: neither;
* ``point_masses``: the values that each carry at least :data:`MIN_MASS` of the rows and :data:`MIN_COUNT` rows (a
  spike at 0), largest share first, at most :data:`MAX_LISTED`; listed for continuous columns and lattices of more
  than 1/MIN_MASS values (on a coarser lattice every value may carry that much);
* ``edges``: the minimum or maximum when at least :data:`MIN_MASS` of the rows, and :data:`MIN_COUNT` rows, sit
  exactly on it (a hard edge, one- or two-sided).

The step is the greatest common divisor of the gaps between distinct values, found by Euclid's algorithm
with a tolerance relative to the column's scale (float64 values written to a fixed decimal are not exact
multiples of the step), and accepted only when every distinct value lies within that tolerance of the
lattice and the lattice has at most :data:`MAX_CELLS` cells over the range.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

__all__ = ["column_kinds", "lattice_step", "as_decimal", "decimals", "cell_widths", "dequantize", "MIN_MASS",
           "MIN_COUNT", "MAX_CELLS", "MAX_LISTED"]

#: A value (or an edge) that carries at least this share of the rows is a point mass (an edge).
MIN_MASS = 0.01
#: A lattice has at most this many cells between the column's minimum and maximum.
MAX_CELLS = 1_000_000
#: ... and at least this many rows (on a pilot of 100 rows every value carries 1 %).
MIN_COUNT = 5
#: At most this many point masses are listed per column.
MAX_LISTED = 10
#: Tolerance of the lattice test, relative to the step.
_TOL = 1e-6


def _fgcd(a: float, b: float, floor: float) -> float:
    """The greatest common divisor of two positive floats up to rounding (Euclid with the symmetric remainder, a
    remainder within :data:`_TOL` of the divisor counting as 0); 0 once it falls to ``floor``."""
    while b > floor:
        r = abs(a - b * round(a / b))
        if r <= _TOL * b:
            return b
        a, b = b, r
    return 0.0


def lattice_step(values: np.ndarray) -> float | None:
    """The step of the lattice ``origin + k·step`` the distinct sorted ``values`` lie on, or None (fewer than two
    values, or no lattice with at most :data:`MAX_CELLS` cells over their range)."""
    if values.size < 2:
        return None
    span = float(values[-1] - values[0])
    floor = span / MAX_CELLS
    gaps = np.unique(np.diff(values))
    step = float(gaps[0])
    for gap in gaps[1:]:
        step = _fgcd(float(gap), step, floor)
        if step == 0.0:
            return None
    if step <= floor:
        return None
    decimal = as_decimal(step, 1e-6)  # a step written to a number of decimals, as it was meant (0.001, not 0.000999…)
    candidates = [step] if decimal is None else [decimal, step]
    # the decimal only where it is the lattice: a standardized step (0.001/sd) is no decimal, and rounding it to
    # one moves the 10⁵th cell by a tenth of a step
    for candidate in candidates:
        k = (values - values[0]) / candidate
        if np.all(np.abs(k - np.round(k)) <= 1e-6):  # as exact as float64 values written to decimals are
            return candidate
    return None


def as_decimal(value: float, rel: float) -> float | None:
    """``value`` rounded to the fewest decimals that move it by at most ``rel`` of itself (1.0000000000000002 →
    1.0), or None when no number of decimals (up to 15) does."""
    for digits in range(16):
        if 0 < round(value, digits) and abs(round(value, digits) - value) <= rel * value:
            return round(value, digits)
    return None


def decimals(value: float) -> int:
    """The fewest decimals (0–15) that ``value`` has exactly (``round(value, d) == value``), else 16."""
    return next((d for d in range(16) if round(float(value), d) == value), 16)


def cell_widths(rows: np.ndarray, kinds: dict[str, dict[str, Any]]) -> dict[int, float]:
    """Column position → the width of its values' cells, for the lattice and binary columns of :func:`column_kinds`
    of ``rows`` (a lattice's step; a binary column's gap between its two values)."""
    return {j: (k["lattice"]["step"] if k["kind"] == "lattice" else float(np.ptp(rows[:, j])))
            for j, k in enumerate(kinds.values()) if k["kind"] in ("lattice", "binary")}


def dequantize(rows: np.ndarray, cells: dict[int, float], rng: np.random.Generator) -> np.ndarray:
    """A copy of ``rows`` with each column of ``cells`` moved by uniform noise over its cell, [−w/2, w/2)."""
    out = np.array(rows, dtype=np.float64, copy=True)
    for j, width in cells.items():
        out[:, j] += rng.uniform(-width / 2, width / 2, out.shape[0])
    return out


def column_kinds(rows: np.ndarray, columns: Sequence[str]) -> dict[str, dict[str, Any]]:
    """Each column's kind, lattice, point masses and edges in the pilot ``rows`` (n, d) (module docstring)."""
    rows = np.asarray(rows, dtype=np.float64)
    n = rows.shape[0]
    out: dict[str, dict[str, Any]] = {}
    for j, name in enumerate(columns):
        values, counts = np.unique(rows[:, j], return_counts=True)
        info: dict[str, Any] = {"distinct": int(values.size)}
        if values.size == 2:
            info["kind"] = "binary"
        else:
            step = lattice_step(values) if values.size < n else None  # all distinct: no lattice to speak of
            if step is not None:
                sd = float(rows[:, j].std())
                info["kind"] = "lattice"
                info["lattice"] = {"origin": float(values[0]), "step": step,
                                   "step_over_spread": step / sd if sd > 0 else None}
            else:
                info["kind"] = "continuous"
        share = counts / max(n, 1)
        heavy = np.flatnonzero((share >= MIN_MASS) & (counts >= MIN_COUNT))
        if (info["kind"] == "continuous" or values.size > 1 / MIN_MASS) and heavy.size:  # a spike among many values
            order = heavy[np.argsort(-share[heavy], kind="stable")][:MAX_LISTED]
            info["point_masses"] = [{"value": float(values[i]), "share": float(share[i])} for i in order]
        edges = {}
        if values.size > 2 and share[0] >= MIN_MASS and counts[0] >= MIN_COUNT:
            edges["lower"] = {"value": float(values[0]), "share": float(share[0])}
        if values.size > 2 and share[-1] >= MIN_MASS and counts[-1] >= MIN_COUNT:
            edges["upper"] = {"value": float(values[-1]), "share": float(share[-1])}
        if edges:
            info["edges"] = edges
        out[str(name)] = info
    return out
