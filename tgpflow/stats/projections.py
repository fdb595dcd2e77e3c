"""Held-out rows as histograms of random 1-D projections: the data side of a sliced KS distance, as a sum.

[Paisley et al.] §IV compares a model with data through the marginal CDFs along random directions
(sliced Kolmogorov–Smirnov). To *select* hyperparameters by that distance on held-out rows without
a second pass, the held-out rows' projected CDFs are accumulated in the pass as counts on a
fixed grid — a sum over rows like every other statistic (``+``, ``−``, ``scaled``), merged in
the same tree. :class:`ProjectionGrid` fixes K directions (uniform on the sphere, seeded) and,
per direction, G equal bins over the pilot sample's projected range widened by a margin on each
side (rows beyond it fall in the end bins). The binned KS differs from the exact one by at most
one bin's mass. float64 counts (so that forgetting can weight them).

A model fitted in a transformed space (declared bounds: log/logit columns,
:class:`~tgpflow.features.bounds.ColumnBounds`) is compared with the data in the data's units: the
grid's ``units`` maps every row (held-out rows and model draws alike) back before projecting. The
distance that selects a model is then the one its users see (on MAGIC with bounds, a λ that looked
good in the log/logit space had a data-space KS three times larger).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from functools import cached_property
from typing import Any, ClassVar

import numpy as np

from tgpflow.features.bounds import ColumnBounds
from tgpflow.features.digest import array_hash
from tgpflow.stats.stored import StoredStats

__all__ = ["ProjectionGrid", "ProjectionCounts", "projection_counts", "ks_by_direction"]


@dataclasses.dataclass(frozen=True, eq=False)
class ProjectionGrid:
    """K directions (K, d) and per direction G bins ``[lower + i·step, lower + (i+1)·step)``; with
    ``units``, rows are mapped to the data's units (``units.inverse``) before they are projected."""

    directions: np.ndarray
    lower: np.ndarray
    step: np.ndarray
    n_bins: int
    units: ColumnBounds | None = None

    @classmethod
    def from_rows(cls, rows: np.ndarray, *, n_directions: int = 64, n_bins: int = 1024, margin: float = 0.25,
                  random_state: Any = 0, units: ColumnBounds | None = None) -> ProjectionGrid:
        """Directions from ``random_state``; each range is the rows' projected range ± ``margin`` of it
        (``rows`` in the fitting space, projected in the data's units when ``units`` is given)."""
        rows = np.asarray(rows, dtype=np.float64)
        if units is not None:
            rows = units.inverse(rows)
        g = np.random.default_rng(random_state).standard_normal((int(n_directions), rows.shape[1]))
        V = g / np.linalg.norm(g, axis=1, keepdims=True)
        p = rows @ V.T
        lo, hi = p.min(axis=0), p.max(axis=0)
        width = np.maximum(hi - lo, 1e-12 * np.maximum(np.abs(hi), 1.0))
        lo, hi = lo - margin * width, hi + margin * width
        return cls(V, lo, (hi - lo) / int(n_bins), int(n_bins), units)

    @property
    def n_directions(self) -> int:
        return int(self.directions.shape[0])

    @cached_property
    def fingerprint(self) -> str:
        arrays = (self.directions, self.lower, self.step)
        if self.units is None:
            return array_hash(b"tgpflow.ProjectionGrid.v1", [self.n_bins], arrays).hexdigest()
        return array_hash(b"tgpflow.ProjectionGrid.v2", [self.n_bins],
                          arrays + tuple(self.units.to_arrays().values())).hexdigest()  # cores too, if any

    def bins(self, x: np.ndarray) -> np.ndarray:
        """Flat bin indices (n, K) into a (K·G) histogram: bin of row i along direction k, plus k·G."""
        if self.units is not None:
            x = self.units.inverse(x)
        with np.errstate(invalid="ignore", over="ignore"):
            idx = np.floor((x @ self.directions.T - self.lower) / self.step)
        # a draw far out in the fitting space can map to ±inf in the data's units (e^t overflows), and
        # to inf − inf = NaN along a direction mixing a lower- and an upper-bounded column: the end bin
        idx = np.nan_to_num(idx, nan=self.n_bins - 1, posinf=self.n_bins - 1, neginf=0)
        np.clip(idx, 0, self.n_bins - 1, out=idx)
        return idx.astype(np.int64) + np.arange(self.n_directions, dtype=np.int64) * self.n_bins

    def histogram(self, x: np.ndarray, weights: np.ndarray | None = None) -> np.ndarray:
        """(K, G) counts (or weight sums) of the rows of ``x``."""
        b = self.bins(x)
        w = None if weights is None else np.repeat(weights, self.n_directions)
        return np.bincount(b.ravel(), weights=w, minlength=self.n_directions * self.n_bins).reshape(
            self.n_directions, self.n_bins).astype(np.float64)

    def to_arrays(self) -> dict[str, np.ndarray]:
        return {"directions": self.directions, "lower": self.lower, "step": self.step,
                "n_bins": np.array(self.n_bins)}

    @classmethod
    def from_arrays(cls, arrays: dict[str, np.ndarray], units: ColumnBounds | None = None) -> ProjectionGrid:
        """The grid of :meth:`to_arrays`; ``units`` (the estimator's ``bounds_``) is not stored with it: a grid
        restored without the units it was drawn with has another fingerprint, so its counts are refused."""
        return cls(np.asarray(arrays["directions"], dtype=np.float64), np.asarray(arrays["lower"], dtype=np.float64),
                   np.asarray(arrays["step"], dtype=np.float64), int(arrays["n_bins"]), units)


@dataclasses.dataclass(frozen=True, eq=False)
class ProjectionCounts(StoredStats):
    """Per-direction bin counts of a set of rows on a :class:`ProjectionGrid`, which they carry (a value: +, −,
    ``scaled``, save/load — :class:`~tgpflow.core.summable.AdditiveStats`). The grid is saved as its arrays and,
    with ``units``, their bounds (``draw.units.lower``, ``draw.units.upper``) and column names."""

    MISMATCH: ClassVar[str] = "cannot combine projection counts of different projection grids"

    draw: ProjectionGrid | None
    counts: np.ndarray
    n: int | float
    fingerprint: str = dataclasses.field(default="", kw_only=True)

    @classmethod
    def _draw_arrays(cls, draw: ProjectionGrid) -> dict[str, np.ndarray]:
        units = {} if draw.units is None else {f"units.{k}": v for k, v in draw.units.to_arrays().items()}
        return {**draw.to_arrays(), **units}

    @classmethod
    def _draw_meta(cls, draw: ProjectionGrid) -> dict[str, Any]:
        return {} if draw.units is None else {"units_columns": list(draw.units.columns)}

    @classmethod
    def _draw_from_arrays(cls, arrays: dict[str, np.ndarray], meta: Mapping[str, Any]) -> ProjectionGrid:
        units = None
        if "units.lower" in arrays:
            units = ColumnBounds.from_arrays({k[len("units."):]: v for k, v in arrays.items() if k.startswith("units.")},
                                             meta["units_columns"])
        return ProjectionGrid.from_arrays(arrays, units)

    def to_arrays(self) -> dict[str, np.ndarray]:
        # ``n`` has been stored as float64 from the start (the other counts as int64 unless weighted); kept, so that
        # stores written before and after hold the same bytes.
        return {**super().to_arrays(), "n": np.array(float(self.n))}


def projection_counts(rows: np.ndarray, grid: ProjectionGrid) -> ProjectionCounts:
    """The counts of one chunk of rows."""
    if rows.shape[0] == 0:
        return ProjectionCounts(grid, np.zeros((grid.n_directions, grid.n_bins)), 0)
    return ProjectionCounts(grid, grid.histogram(rows), int(rows.shape[0]))


def ks_by_direction(data: ProjectionCounts, model: np.ndarray) -> np.ndarray:
    """KS distance per direction between the data's counts and model histograms.

    ``model`` is (K, G) or (k, K, G) weight sums (normalised here); returns (K,) or (k, K):
    ``max_bins |F_data − F_model|`` of the CDFs at the bins' right edges.
    """
    if data.n <= 0:
        raise ValueError("no held-out rows to compare with")
    f_data = np.cumsum(data.counts, axis=-1) / data.n
    f_model = np.cumsum(model, axis=-1)
    f_model = f_model / f_model[..., -1:]
    return np.abs(f_model - f_data).max(axis=-1)
