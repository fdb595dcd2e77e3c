"""The sums a run keeps of every partition it reads, to tell whether the data drifted (docs/drift.md,
"What a run keeps").

A store freezes a :class:`DriftFrame` on its first run, from the run's pilot rows: per column, the cut points of
:data:`BINS` quantile bins (a column on a lattice, an integer code or a flag, gets one bin per value, as its
quantiles collapse onto its values), with a bin below the pilot's smallest value and one above its largest, so
that values beyond the pilot's range are seen; and :data:`DIRECTIONS` random unit directions in the pilot's
standardized space, each with the same cuts of the pilot's projections. Every partition a run reads is then
summarised, in the same pass as its statistics, by :class:`DriftSums`: the rows per bin of each column and each
projection, each column's sum and sum of squares, and, per density model with a published version, the sums of that
version's normalised log-likelihood over the rows (:class:`LoglikSums`). All of them add up, so the reference a
partition is compared with (the rows of the version current before the run) is a running total, like the
statistics'.

Precision: counts are int64, sums float64 (the rows arrive as float64); each column is summed about the pilot's
mean, so a column far from zero (a timestamp) keeps its spread through many ``+ new − removed`` updates.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from tgpflow.models.anomaly import is_anomalous

__all__ = ["BINS", "CUTS", "DIRECTIONS", "LOGLIK_ROWS", "LOGLIK_FLOOR_QUANTILE", "DriftFrame", "DriftSums",
           "LoglikSums", "LoglikModel", "chunk_sums", "floored"]

#: Quantile bins per column and per projection.
BINS = 64
#: Random directions of the sliced comparison.
DIRECTIONS = 16
#: Rows of a partition whose log-likelihood is evaluated (every k-th row of each chunk, k from the partition's size;
#: all rows where its size is unknown). A model's log density can cost far more than the statistics' share of a
#: row (a discrete column's cell average: 49 s per 125 000 rows for an FD model with three lattice columns, against
#: 0.17 s for all the binning); 20 000 rows put the gap's standard error near 1 % of a row's spread.
LOGLIK_ROWS = 20_000
#: A version's normalised log-likelihood is floored at this quantile of its values on its run's pilot rows before it
#: is summed: a handful of rows in the far tail (−log p of 50 where the rest are near 5) would otherwise decide the
#: mean and its variance, and the z statistic would be a test of those few rows.
LOGLIK_FLOOR_QUANTILE = 0.001


#: Cut points per column or projection: the pilot's smallest value, its :data:`BINS` − 1 inner quantiles, and the
#: next float above its largest (padded with +inf where values repeat).
CUTS = BINS + 1


def _cuts(values: np.ndarray) -> np.ndarray:
    """The cut points of ``values`` (:data:`CUTS`), padded with +inf."""
    out = np.full(CUTS, np.inf)
    if values.size:
        distinct = np.unique(values)
        if distinct.size <= BINS:  # a lattice, a code, a flag: one bin per value, however rare
            cuts = np.r_[distinct, np.nextafter(distinct[-1], np.inf)]
        else:
            inner = np.quantile(values, np.arange(1, BINS) / BINS, method="higher")
            cuts = np.unique(np.r_[values.min(), inner, np.nextafter(values.max(), np.inf)])
        out[:cuts.size] = cuts
    return out


def _counts(values: np.ndarray, cuts: np.ndarray) -> np.ndarray:
    """Rows per bin (bin i holds ``cuts[i-1] <= x < cuts[i]``; bin 0 lies below the pilot's range), int64 of length
    ``CUTS + 1``."""
    return np.bincount(np.searchsorted(cuts, values, side="right"), minlength=CUTS + 1).astype(np.int64)


@dataclasses.dataclass(frozen=True, eq=False)
class DriftFrame:
    """What a store's partitions are binned by (module docstring): the columns, the pilot's centre and scale, the
    random directions (in standardized units), and the cut points of every column and projection."""

    columns: tuple[str, ...]
    center: np.ndarray
    scale: np.ndarray
    directions: np.ndarray  # (DIRECTIONS, d), unit rows
    column_cuts: np.ndarray  # (d, CUTS)
    projection_cuts: np.ndarray  # (DIRECTIONS, CUTS)

    @classmethod
    def from_rows(cls, rows: np.ndarray, columns: list[str], seed: int) -> DriftFrame:
        """The frame of a store whose pilot rows are ``rows`` (raw, float64); the directions drawn from ``seed``."""
        rows = np.asarray(rows, dtype=np.float64)
        center = rows.mean(axis=0)
        scale = rows.std(axis=0)
        scale = np.where(scale > 0, scale, 1.0)  # a constant column: any scale bins it into one value
        directions = np.random.default_rng([seed, 0xD1F7]).normal(size=(DIRECTIONS, rows.shape[1]))
        directions /= np.linalg.norm(directions, axis=1, keepdims=True)
        projected = ((rows - center) / scale) @ directions.T
        return cls(tuple(columns), center, scale, directions,
                   np.stack([_cuts(rows[:, j]) for j in range(rows.shape[1])]),
                   np.stack([_cuts(projected[:, k]) for k in range(DIRECTIONS)]))

    def project(self, rows: np.ndarray) -> np.ndarray:
        return ((rows - self.center) / self.scale) @ self.directions.T

    def to_arrays(self) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        return ({"center": self.center, "scale": self.scale, "directions": self.directions,
                 "column_cuts": self.column_cuts, "projection_cuts": self.projection_cuts},
                {"columns": list(self.columns), "bins": BINS})

    @classmethod
    def from_arrays(cls, arrays: dict[str, np.ndarray], meta: dict[str, Any]) -> DriftFrame:
        return cls(tuple(meta["columns"]), *(np.asarray(arrays[k], dtype=np.float64) for k in
                                             ("center", "scale", "directions", "column_cuts", "projection_cuts")))


@dataclasses.dataclass(frozen=True)
class LoglikSums:
    """A version's normalised log-likelihood over a partition's rows (:func:`floored`): the rows summed, their sum
    and sum of squares, the rows it gives no density (−inf: beyond its bounds), and the rows its anomaly threshold
    flags (what scoring the partition with it flags)."""

    n: int
    total: float
    total_sq: float
    outside: int
    flagged: int = 0
    rows: int = 0  # every row scored (those summed, and those left out under a −inf floor)

    @classmethod
    def of(cls, kept: np.ndarray, outside: int, flagged: int, rows: int) -> LoglikSums:
        """The sums of the values :func:`floored` kept."""
        return cls(int(kept.size), float(kept.sum()), float((kept * kept).sum()), int(outside), int(flagged), int(rows))

    def __add__(self, other: LoglikSums) -> LoglikSums:
        return LoglikSums(self.n + other.n, self.total + other.total, self.total_sq + other.total_sq,
                          self.outside + other.outside, self.flagged + other.flagged, self.rows + other.rows)

    @property
    def mean(self) -> float:
        return self.total / self.n if self.n else float("nan")

    @property
    def var(self) -> float:
        """The rows' variance (ddof 1)."""
        if self.n < 2:
            return float("nan")
        return max(self.total_sq - self.n * self.mean**2, 0.0) / (self.n - 1)

    @property
    def anomaly_rate(self) -> float | None:
        return self.flagged / self.rows if self.rows else None

    def to_dict(self) -> dict[str, Any]:
        """The sums (which add up) and, for people, the mean and variance (None where undefined: strict JSON)."""
        return {"n": self.n, "total": self.total, "total_sq": self.total_sq, "outside": self.outside,
                "flagged": self.flagged, "rows": self.rows, "mean": self.mean if self.n else None,
                "var": self.var if self.n > 1 else None, "anomaly_rate": self.anomaly_rate}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> LoglikSums:
        return cls(int(d["n"]), float(d["total"]), float(d["total_sq"]), int(d.get("outside", 0)),
                   int(d.get("flagged", 0)), int(d.get("rows", 0)))


@dataclasses.dataclass(frozen=True)
class LoglikModel:
    """A published version whose log-likelihood a partition's rows are summed under: its name and version, its
    unnormalised log density (a Fitted value's, data units), its log normaliser, its floor, its anomaly
    threshold on −log p̃ (None: it has none), its log-likelihood sums on its own run's pilot rows (in-sample;
    None for a version written before runs kept them), and its generation (what its gaps compare within)."""

    model: str
    version: str
    log_density: Any
    log_normalizer: float
    floor: float
    threshold: float | None = None
    pilot: LoglikSums | None = None
    generation: str | None = None


@dataclasses.dataclass(frozen=True, eq=False)
class DriftSums:
    """A partition's (or a sum of partitions') drift sums (module docstring)."""

    rows: int
    column_counts: np.ndarray  # (d, CUTS + 1) int64
    projection_counts: np.ndarray  # (DIRECTIONS, CUTS + 1) int64
    column_sum: np.ndarray  # (d,) float64: Σ (x − the frame's centre)
    column_sumsq: np.ndarray  # (d,) float64: Σ (x − the frame's centre)²
    loglik: dict[str, LoglikSums] = dataclasses.field(default_factory=dict)

    def __add__(self, other: DriftSums) -> DriftSums:
        loglik = {k: self.loglik[k] + other.loglik[k] for k in self.loglik.keys() & other.loglik.keys()}
        return DriftSums(self.rows + other.rows, self.column_counts + other.column_counts,
                         self.projection_counts + other.projection_counts, self.column_sum + other.column_sum,
                         self.column_sumsq + other.column_sumsq, loglik)

    def __sub__(self, other: DriftSums) -> DriftSums:
        """The rows of ``self`` without those of ``other`` (a partition that left the reference); the
        log-likelihood sums, which belong to one partition each, are not kept."""
        return DriftSums(self.rows - other.rows, self.column_counts - other.column_counts,
                         self.projection_counts - other.projection_counts, self.column_sum - other.column_sum,
                         self.column_sumsq - other.column_sumsq)

    def column_moments(self) -> tuple[np.ndarray, np.ndarray]:
        """Each column's mean (less the frame's centre) and standard deviation over the rows."""
        n = max(self.rows, 1)
        mean = self.column_sum / n
        return mean, np.sqrt(np.maximum(self.column_sumsq / n - mean**2, 0.0))

    def to_arrays(self) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        """The counts and sums as arrays (the log-likelihood sums go in the partition's manifest record)."""
        return ({"column_counts": self.column_counts, "projection_counts": self.projection_counts,
                 "column_sum": self.column_sum, "column_sumsq": self.column_sumsq}, {"rows": self.rows})

    @classmethod
    def from_arrays(cls, arrays: dict[str, np.ndarray], meta: dict[str, Any]) -> DriftSums:
        return cls(int(meta["rows"]), np.asarray(arrays["column_counts"], dtype=np.int64),
                   np.asarray(arrays["projection_counts"], dtype=np.int64),
                   np.asarray(arrays["column_sum"], dtype=np.float64),
                   np.asarray(arrays["column_sumsq"], dtype=np.float64))


def chunk_sums(rows: np.ndarray, frame: DriftFrame, models: tuple[LoglikModel, ...], stride: int = 1) -> DriftSums:
    """The drift sums of one chunk of validated raw rows (float64, the data's units); the log-likelihoods of every
    ``stride``-th row (:data:`LOGLIK_ROWS`)."""
    rows = np.asarray(rows, dtype=np.float64)
    d = len(frame.columns)
    if rows.shape[0] == 0:
        return DriftSums(0, np.zeros((d, CUTS + 1), np.int64), np.zeros((DIRECTIONS, CUTS + 1), np.int64),
                         np.zeros(d), np.zeros(d), {m.model: LoglikSums(0, 0.0, 0.0, 0) for m in models})
    projected = frame.project(rows)
    loglik = {}
    scored = rows[::max(int(stride), 1)]
    for m in models:
        raw = np.asarray(m.log_density(scored), dtype=np.float64)
        flagged = 0 if m.threshold is None else int(np.count_nonzero(is_anomalous(raw, m.threshold)))
        kept, outside = floored(raw - m.log_normalizer, m.floor)
        loglik[m.model] = LoglikSums.of(kept, outside, flagged, raw.size)
    centred = rows - frame.center
    return DriftSums(int(rows.shape[0]),
                     np.stack([_counts(rows[:, j], frame.column_cuts[j]) for j in range(d)]),
                     np.stack([_counts(projected[:, k], frame.projection_cuts[k]) for k in range(DIRECTIONS)]),
                     centred.sum(axis=0), (centred * centred).sum(axis=0), loglik)


def floored(values: np.ndarray, floor: float) -> tuple[np.ndarray, int]:
    """Normalised log-likelihoods as they are summed: each at least ``floor``; a row without a finite value (beyond
    the model's bounds: no density) counts at the floor, as the worst explained rows it is — unless the floor is
    −inf (a version written before floors), when it is left out. Returns the values and the rows without one."""
    finite = np.isfinite(values)
    outside = int(values.size - np.count_nonzero(finite))
    if np.isfinite(floor):
        return np.where(finite, np.maximum(values, floor), floor), outside
    return values[finite], outside
