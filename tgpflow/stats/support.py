"""The data's support box: per-column [0.1 %, 99.9 %] quantiles of a training sample.

A density fitted by score matching never sees the space where there are no data, so it can
put mass there (issue: "a model says when it is wrong"). The box is the reference region for
that check: the model's normalised mass outside it (from the normaliser's importance weights,
:mod:`tgpflow.solve.normalizer`) is compared with the share of data rows outside it, which for
held-out rows is about ``1 − 0.998^d`` for independent columns and less for correlated ones.
The box is computed from the pilot sample (≤ 100k rows: the 0.1 % quantile rests on ≥ 100 rows),
stored with the model, and travels to the sample check (:mod:`tgpflow.metrics.sample_check`).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

__all__ = ["SupportBox", "BOX_QUANTILE", "OUTSIDE_FACTOR", "OUTSIDE_FLOOR", "EDGE_TOLERANCE", "mass_outside_limit"]

#: Lower tail quantile of the box in each column (the upper one is 1 − this).
BOX_QUANTILE = 0.001
#: A model may put up to this many times the data's share outside the box ...
OUTSIDE_FACTOR = 5.0
#: ... or this much, whichever is larger (a smooth density spills a little over any box). Broken fits
#: had 23–62 % outside, good ones a few times the data's own share (tgpflow.models.diagnostics).
OUTSIDE_FLOOR = 0.03


#: A value beyond an edge of the box by at most this share of the edge's magnitude (or of the box's width) is inside:
#: a lattice's values are rebuilt as ``origin + k·step`` (:meth:`tgpflow.features.lattice.LatticeCells.snap`), which
#: can differ from the table's own by a rounding error, and a box built from rows that went through the fitting
#: space and back put cardio's top code (36 % of the held-out rows) one ulp outside.
EDGE_TOLERANCE = 1e-9


def mass_outside_limit(data_outside: float) -> float:
    """The largest acceptable model mass outside the support box, given the data's own share there."""
    return max(OUTSIDE_FACTOR * data_outside, OUTSIDE_FLOOR)


@dataclasses.dataclass(frozen=True)
class SupportBox:
    """Per-column bounds and the share of the reference rows that fall outside them."""

    lower: np.ndarray
    upper: np.ndarray
    rate_outside: float
    n_rows: int

    @classmethod
    def from_rows(cls, rows: np.ndarray, quantile: float = BOX_QUANTILE) -> SupportBox:
        """The [q, 1 − q] box of ``rows`` (n, d) and the share of those rows outside it."""
        rows = np.asarray(rows, dtype=np.float64)
        if rows.ndim != 2 or rows.shape[0] < 2:
            raise ValueError(f"the support box needs at least 2 rows; got shape {rows.shape}")
        lower, upper = np.quantile(rows, [quantile, 1.0 - quantile], axis=0)
        box = cls(lower, upper, 0.0, int(rows.shape[0]))
        return dataclasses.replace(box, rate_outside=float(box.outside(rows).mean()))

    def outside(self, x: np.ndarray) -> np.ndarray:
        """True for the rows of ``x`` outside the box in at least one column (by more than
        :data:`EDGE_TOLERANCE`)."""
        slack = EDGE_TOLERANCE * np.maximum(np.maximum(np.abs(self.lower), np.abs(self.upper)), self.upper - self.lower)
        return np.any((x < self.lower - slack) | (x > self.upper + slack), axis=1)

    def to_dict(self) -> dict[str, Any]:
        return {"lower": self.lower.tolist(), "upper": self.upper.tolist(), "rate_outside": self.rate_outside,
                "n_rows": self.n_rows}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> SupportBox:
        return cls(np.asarray(d["lower"], dtype=np.float64), np.asarray(d["upper"], dtype=np.float64),
                   float(d["rate_outside"]), int(d["n_rows"]))
