"""Bounds a pilot sample shows, and where their log goes on linearly (docs/gp_tilted.md, "Hard edges").

:func:`suggest_bounds` reads the edges of ``bounds="auto"`` off the pilot's rows; :func:`with_linear_tails` ends
the log of each one-sided bound the pilot found (an edge's, an atom's block) at the pilot's extreme value on the
open side (:class:`~tgpflow.features.bounds.ColumnBounds`' ``linear_from``). Under ``log(x − a)`` alone, the
fitting space's tail past the rows becomes its exponential in the data's units: on ADBench's glass, a column of
min-max scaled values in [0, 1] drew samples up to 17.6 (sample kurtosis 2961 against 51 in the training rows),
and the sample check failed the column's spread at 3.3× the held-out rows'. Declared bounds keep the plain log.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Sequence

import numpy as np

from tgpflow.features.bounds import ColumnBounds

__all__ = ["suggest_bounds", "with_linear_tails", "EDGE_SHARE", "EDGE_BAND", "EDGE_FLAT", "EDGE_MIN_ROWS"]

#: A hard edge (:func:`suggest_bounds`): at least this share of the pilot's rows lie within :data:`EDGE_BAND` of the
#: column's range from its extreme value ...
EDGE_SHARE = 0.01
EDGE_BAND = 0.02
#: ... and that band holds at least this fraction of the next band's rows: the density does not fall towards the
#: edge (a tail thins out before its last value; MAGIC's fAlpha, an angle in [0°, 90°], holds 9.3 % of its rows in
#: the band above 0° and 8.3 % in the next, and 1.07 % below 90° against 0.95 %).
EDGE_FLAT = 0.8
#: ... and the band holds at least this many rows: on a few hundred Gaussian rows a band of 3 rows beat the next
#: one in 1 of 20 tails.
EDGE_MIN_ROWS = 30


def suggest_bounds(rows: np.ndarray, columns: Sequence[str], bounds: ColumnBounds | None,
                   min_mass: float = 0.01) -> dict[str, list[float | None]]:
    """Bounds that a pilot sample shows (docs/gp_tilted.md, "Hard edges"), per side of each open column:

    * **at 0 (and 1)**: every value ≥ 0 (≤ 1) while a Gaussian with the column's mean and spread puts more than
      ``min_mass`` below 0 (above 1): the edges that non-negative quantities and shares have;
    * **at a hard edge**: the column's rows pile up against its extreme value (:data:`EDGE_SHARE`,
      :data:`EDGE_BAND`, :data:`EDGE_FLAT`, :data:`EDGE_MIN_ROWS`), as an angle does at 0° and 90°.

    A bound lies one *gap* beyond the edge (0 or 1 by the first rule, the extreme value by the second), the gap
    being the distance from the extreme value to the 1 % quantile: the rows at the edge then sit where the log
    transform is as smooth as over the last 1 % of the rows, and a later row at 0 or 1 itself (a min-max scaled
    column holds both ends, which a pilot may miss) is not beyond the bound. A side with ≥ 1 % of the rows on its
    extreme value is left alone: that is a point mass (an atom, :mod:`tgpflow.features.lattice`).
    """
    from scipy.stats import norm

    out: dict[str, list[float | None]] = {}
    rows = np.asarray(rows, dtype=np.float64)
    mean, sd = rows.mean(axis=0), rows.std(axis=0)
    lo_q, hi_q = np.quantile(rows, [0.01, 0.99], axis=0)
    for j, name in enumerate(columns):
        if bounds is not None and (np.isfinite(bounds.lower[j]) or np.isfinite(bounds.upper[j])):
            continue
        if sd[j] <= 0:
            continue
        col = rows[:, j]
        low, high = float(col.min()), float(col.max())
        gap_lo, gap_hi = float(lo_q[j]) - low, high - float(hi_q[j])
        non_negative, share = low >= 0, low >= 0 and high <= 1
        lower = upper = None
        if gap_lo > 0 and non_negative and norm.cdf(-mean[j] / sd[j]) > min_mass:
            lower = -gap_lo  # the edge is 0 itself, where a later row may lie
        elif gap_lo > 0 and _piled(col - low, high - low):
            lower = low - gap_lo
        if gap_hi > 0 and share and norm.sf((1.0 - mean[j]) / sd[j]) > min_mass:
            upper = 1.0 + gap_hi
        elif gap_hi > 0 and _piled(high - col, high - low):
            upper = high + gap_hi
        if lower is not None or upper is not None:
            out[str(name)] = [lower, upper]
    return out


def _piled(distance: np.ndarray, width: float) -> bool:
    """Whether rows at ``distance`` (≥ 0) from an extreme value pile up against it: a hard edge
    (:func:`suggest_bounds`)."""
    band = EDGE_BAND * width
    first = float(np.mean(distance <= band))
    second = float(np.mean((distance > band) & (distance <= 2 * band)))
    return first >= EDGE_SHARE and first * distance.size >= EDGE_MIN_ROWS and first >= EDGE_FLAT * second


def with_linear_tails(bounds: ColumnBounds | None, rows: np.ndarray,
                      declared: Collection[str]) -> ColumnBounds | None:
    """``bounds`` with a linear tail from the largest value of ``rows`` (the pilot's, in the data's units) on in
    each column bounded below only, and from the smallest in each bounded above only: the columns whose bound the
    pilot found (not ``declared``), without a core. The log shapes the rows' own range as before: within it the
    fitting space is unchanged."""
    if bounds is None:
        return None
    names = set(str(c) for c in declared)
    lo, hi = np.isfinite(bounds.lower), np.isfinite(bounds.upper)
    eligible = (lo ^ hi) & ~bounds.cored & np.array([c not in names for c in bounds.columns])
    if not eligible.any():
        return bounds
    rows = np.asarray(rows, dtype=np.float64)
    start = np.where(lo, rows.max(axis=0), rows.min(axis=0))
    linear = np.full(bounds.lower.size, np.nan) if bounds.linear_from is None else bounds.linear_from.copy()
    linear[eligible] = start[eligible]
    return dataclasses.replace(bounds, linear_from=linear)
