"""Did a new partition drift from the rows the model was fitted on? (docs/drift.md, "The tests").

A partition's :class:`~tgpflow.pipeline.drift_sums.DriftSums` is compared with the reference — the sums of every
partition of the version current before the run — by three tests, each with a p-value:

* **columns**: per column, the two-sample Kolmogorov–Smirnov distance between the partition's and the reference's
  binned marginals, with its asymptotic p-value (Stephens' small-sample correction); the family's p-value is the
  smallest times the number of columns (Bonferroni). Each column also gets its change (the difference of the means,
  in the column's units) and its shift (that change in the reference's standard deviations; None for a column the
  reference holds constant);
* **sliced**: the same over the :data:`~tgpflow.pipeline.drift_sums.DIRECTIONS` random projections (the joint
  distribution, which marginals miss: a change of correlation), Bonferroni over the directions;
* **loglik**: the partition's *gap* — its mean normalised log-likelihood under the version current before the run,
  less that version's mean on its own pilot rows (rows it was fitted on) — against the gaps of the last ``window``
  unflagged partitions, each taken under the version current when it arrived (:func:`gap_z`). Each gap is relative
  to its own version's level, so versions that differ (another λ, more rows) do not move it; what remains under
  an unchanged stream is the versions' in-sample optimism, which the earlier gaps carry too, and noise. One-sided:
  a partition the model explains worse than it explained the partitions before it.

The partition is flagged when the smallest p-value times the number of tests is below ``alpha`` (Bonferroni again).
Binned KS distances are at most the exact ones, so each test's false-alarm rate is at most its nominal level on
independent partitions of one distribution, and the verdict's is at most ``alpha``; the tests' measured rates are in
docs/drift.md.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np
from scipy import stats

from tgpflow.pipeline.drift_sums import DriftSums, LoglikSums

__all__ = ["binned_ks", "drift_verdict", "LoglikGap", "gap_history", "gap_z", "z_threshold", "drift_summary",
           "drift_lines"]

#: Earlier gaps from which their spread (day-to-day variation included) replaces the gap's own standard error.
MIN_EMPIRICAL_GAPS = 5


def binned_ks(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per row of the count arrays ``a`` and ``b`` (k, bins): the two-sample KS distance of the binned samples and
    its asymptotic p-value (NaN and 1 where either sample is empty)."""
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    n, m = a.sum(axis=1), b.sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        dist = np.abs(np.cumsum(a, axis=1) / n[:, None] - np.cumsum(b, axis=1) / m[:, None]).max(axis=1)
        ne = n * m / (n + m)
        root = np.sqrt(ne)
        p = stats.kstwobign.sf((root + 0.12 + 0.11 / root) * dist)
    empty = (n == 0) | (m == 0)
    return np.where(empty, np.nan, dist), np.where(empty, 1.0, p)


@dataclasses.dataclass(frozen=True)
class LoglikGap:
    """A partition's mean normalised log-likelihood under a version, less that version's mean on its pilot rows, and
    the standard error of that difference."""

    gap: float
    se: float

    @classmethod
    def of(cls, part: LoglikSums, pilot: LoglikSums | None) -> LoglikGap | None:
        if pilot is None or part.n < 2 or pilot.n < 2:
            return None
        return cls(part.mean - pilot.mean, math.sqrt(part.var / part.n + pilot.var / pilot.n))


def gap_history(partitions: dict[str, Any], model: str, window: int, generation: str) -> list[LoglikGap]:
    """The gaps under ``model`` of the last ``window`` partitions of ``partitions`` (manifest records; by the run
    that tested them) that were not flagged, scored by versions of the same ``generation`` (columns, estimator and
    statistics parameters: a rebuild that changes them starts the history again), oldest first."""
    found = []
    for key, rec in partitions.items():
        drift = rec.get("drift") or {}
        entry = (drift.get("loglik") or {}).get(model) or {}
        gap, se = entry.get("gap"), entry.get("gap_se")
        if (gap is not None and se is not None and math.isfinite(gap) and math.isfinite(se)
                and entry.get("generation") == generation and not (drift.get("verdict") or {}).get("drifted", False)):
            found.append((drift.get("run", rec["run"]), key, LoglikGap(float(entry["gap"]), float(entry["gap_se"]))))
    return [g for _, _, g in sorted(found, key=lambda f: f[:2])[-window:]] if window > 0 else []


def gap_z(gap: LoglikGap | None, history: list[LoglikGap]) -> tuple[float, float] | None:
    """z of a partition's gap against the earlier gaps, and its one-sided p-value (None without both).

    With k earlier gaps, z = (gap − their mean) / sqrt(σ² (1 + 1/k)). From :data:`MIN_EMPIRICAL_GAPS` on, σ² is
    their sample variance (day-to-day variation and the versions' changing optimism included) and the p-value
    Student's t with k − 1 degrees of freedom; before, the gaps' own squared standard errors (the rows' noise
    alone) and the normal. σ² is never below the partition's own squared standard error."""
    if gap is None or not history:
        return None
    k = len(history)
    gaps = np.array([h.gap for h in history])
    if k >= MIN_EMPIRICAL_GAPS:
        sigma2, df = max(gap.se**2, float(gaps.var(ddof=1))), k - 1
    else:
        sigma2, df = max(gap.se**2, float(np.mean([h.se**2 for h in history]))), None
    if sigma2 <= 0:
        return None
    z = (gap.gap - float(gaps.mean())) / math.sqrt(sigma2 * (1 + 1 / k))
    return z, float(stats.t.cdf(z, df) if df is not None else stats.norm.cdf(z))


def z_threshold(level: float, history: list[LoglikGap]) -> float:
    """The z below which :func:`gap_z`'s p-value is under ``level``, for that many earlier gaps."""
    k = len(history)
    return float(stats.t.ppf(level, k - 1) if k >= MIN_EMPIRICAL_GAPS else stats.norm.ppf(level))


def drift_verdict(part: DriftSums, reference: DriftSums, columns: list[str], alpha: float, *,
                  model: str | None = None, gap: LoglikGap | None = None,
                  history: list[LoglikGap] | None = None) -> dict[str, Any]:
    """The tests of the module docstring for one partition: its verdict (``drifted``), the overall p-value, each
    test's, the sliced KS (median and largest over the directions), z, and the columns: those flagged, ordered by
    their KS distance, and every column's KS distance and shift."""
    col_ks, col_p = binned_ks(part.column_counts, reference.column_counts)
    proj_ks, proj_p = binned_ks(part.projection_counts, reference.projection_counts)
    mean, _ = part.column_moments()
    ref_mean, ref_sd = reference.column_moments()
    change = mean - ref_mean
    shift = np.where(ref_sd > 0, change / np.where(ref_sd > 0, ref_sd, 1.0), np.nan)
    tests: dict[str, float] = {"columns": min(1.0, len(columns) * float(np.min(col_p))),
                               "sliced": min(1.0, proj_p.size * float(np.min(proj_p)))}
    loglik = part.loglik.get(model) if model is not None else None
    scored = gap_z(gap, history or [])
    z = None
    if scored is not None:
        z, tests["loglik"] = scored
    k = len(tests)
    p_value = min(1.0, k * min(tests.values()))
    threshold = z_threshold(alpha / k, history or []) if z is not None else None
    flagged = [j for j in np.argsort(-np.nan_to_num(col_ks, nan=-1.0), kind="stable")
               if k * len(columns) * col_p[j] < alpha]
    return {
        "drifted": bool(p_value < alpha), "p_value": p_value, "alpha": alpha,
        "tests": tests, "z": z, "z_threshold": threshold, "loglik_model": model if z is not None else None,
        "loglik": None if loglik is None or not loglik.n else _number(loglik.mean),
        "anomaly_rate": None if loglik is None else loglik.anomaly_rate,
        "loglik_gap": None if gap is None else gap.gap,
        "loglik_gap_reference": float(np.mean([h.gap for h in history])) if history else None,
        "sliced_ks": float(np.nanmedian(proj_ks)) if np.isfinite(proj_ks).any() else None,
        "sliced_ks_max": float(np.nanmax(proj_ks)) if np.isfinite(proj_ks).any() else None,
        "columns": [columns[j] for j in flagged],
        "moved_most": columns[int(np.nanargmax(col_ks))] if np.nanmax(col_ks, initial=0.0) > 0 else None,
        "column_shift": {c: {"ks": _number(col_ks[j]), "shift": _number(shift[j]), "change": _number(change[j])}
                         for j, c in enumerate(columns)},
        "rows": part.rows, "reference_rows": reference.rows,
    }


def drift_summary(verdict: dict[str, Any]) -> dict[str, Any]:
    """What a run's result says of a partition's verdict: the figures, and the shift of the flagged columns only
    (the version's run info keeps every column's)."""
    out = {k: verdict.get(k) for k in ("drifted", "p_value", "tests", "z", "z_threshold", "sliced_ks", "columns",
                                       "moved_most", "rows", "anomaly_rate", "alpha")}
    out["column_shift"] = {c: verdict["column_shift"][c] for c in verdict["columns"]}
    return out


def drift_lines(verdicts: dict[str, dict[str, Any]]) -> list[str]:
    """One line for each flagged partition, for people."""
    lines = []
    for key, v in verdicts.items():
        if not v["drifted"]:
            continue
        level = v["alpha"] / len(v["tests"])  # each test's share of alpha (Bonferroni)
        fired = [name for name, p in v["tests"].items() if p < level]
        said = {"columns": "marginals", "sliced": "joint distribution (projections)",
                "loglik": f"log-likelihood (z {v['z']:.2f})" if v["z"] is not None else "log-likelihood"}
        moved = ", ".join(_column(c, v["column_shift"][c]) for c in v["columns"][:3])
        p = f"p = {v['p_value']:.2g}" if v["p_value"] > 0 else "p < 1e-300"
        lines.append(f"partition {key} drifted ({p}; {', '.join(said[f] for f in fired)})"
                     f"{': ' + moved if moved else ''}; compare with `tgpflow info` of the models directory; a "
                     f"smaller drift.alpha flags less")
    return lines


def _column(name: str, figures: dict[str, Any]) -> str:
    shift = figures["shift"]
    size = f"shift {shift:+.2f} sd" if shift is not None else f"change {figures['change']:+.4g} (was constant)"
    return f"{name} (KS {figures['ks']:.3f}, {size})"


def _number(x: float) -> float | None:
    return float(x) if np.isfinite(x) else None
