"""Do the model's samples match held-out data? A check against the data, not the model's own claims.

:func:`sample_check` draws samples from a fitted model (or takes given ones, e.g. MCMC draws) and
compares them with a uniform sample of held-out rows (≤ ``max_rows`` rows of any source):

* sliced KS and Wasserstein distances (seed 003 §IV) between the samples and one half of the
  held-out rows, beside the same distances between the two halves — the distance two draws of
  the data itself are apart, at the same sizes;
* per column, the samples' mean error in held-out standard deviations and their spread ratio;
* the samples' share outside the training rows' support box (:mod:`tgpflow.stats.support`)
  beside the held-out rows' share;
* the effective sample size of the draw (importance resampling), as a share of the proposals.

The default thresholds are the ones that separated good from broken fits (demo mixture at 200k
rows, and a 2M-row dataset of seed 003's Table II): ESS ≥ 1 % of the proposals; mass outside the
box ≤ max(5 × the held-out share, 3 %); |mean error| ≤ 0.1 sd; spread ratio in [0.9, 1.1]; and,
when ``max_ks`` is given, a sliced KS median at most that.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from tgpflow.io.pilot import pilot_sample
from tgpflow.io.sources import as_source
from tgpflow.metrics.sliced import sliced_distances
from tgpflow.models.diagnostics import MIN_ESS_FRACTION, mass_outside_limit
from tgpflow.stats.support import SupportBox

__all__ = ["SampleCheck", "sample_check", "MAX_MEAN_ERROR", "SPREAD_RANGE"]

#: Largest acceptable |mean error| of the samples per column, in held-out standard deviations.
MAX_MEAN_ERROR = 0.1
#: Acceptable range of the samples' standard deviation over the held-out one, per column.
SPREAD_RANGE = (0.9, 1.1)


@dataclasses.dataclass(frozen=True)
class SampleCheck:
    """The figures of a sample check and which criteria they pass (see the module docstring)."""

    n_samples: int
    n_heldout: int
    ks_median: float
    wd_median: float
    ks_data: float
    wd_data: float
    mean_error: np.ndarray
    spread_ratio: np.ndarray
    mass_outside: float | None
    heldout_outside: float | None
    ess_fraction: float | None
    checks: dict[str, bool]

    @property
    def passed(self) -> bool:
        return all(self.checks.values())

    def to_dict(self) -> dict[str, Any]:
        out = {k: (v.tolist() if isinstance(v, np.ndarray) else v) for k, v in dataclasses.asdict(self).items()}
        out["passed"] = self.passed
        return out

    def lines(self) -> list[str]:
        """A short human-readable account, one line per figure."""
        ok = {True: "ok", False: "FAIL"}
        out = [f"sliced KS {100 * self.ks_median:.2f}e-2 (two halves of the data: {100 * self.ks_data:.2f}e-2), "
               f"WD {self.wd_median:.3g} (data: {self.wd_data:.3g})"
               + (f" [{ok[self.checks['ks']]}]" if "ks" in self.checks else ""),
               f"mean error max {np.abs(self.mean_error).max():.3f} sd [{ok[self.checks['mean']]}], "
               f"spread ratio {self.spread_ratio.min():.3f}–{self.spread_ratio.max():.3f} [{ok[self.checks['spread']]}]"]
        if self.mass_outside is not None:
            out.append(f"outside the training box: samples {100 * self.mass_outside:.2f}%, held-out rows "
                       f"{100 * self.heldout_outside:.2f}% [{ok[self.checks['outside']]}]")
        if self.ess_fraction is not None:
            out.append(f"resampling ESS {100 * self.ess_fraction:.3g}% of the proposals [{ok[self.checks['ess']]}]")
        return out


def sample_check(model: Any, X: Any, *, samples: np.ndarray | None = None, ess_fraction: float | None = None,
                 n_samples: int | None = None, max_rows: int = 100_000, box: SupportBox | None = None,
                 max_ks: float | None = None, n_directions: int = 200, random_state: int = 0,
                 columns: list[str] | None = None, on_bad_rows: str = "raise") -> SampleCheck:
    """Compare samples of ``model`` with held-out rows ``X`` (any source; see the module docstring).

    ``samples`` (n, d) replaces the model's own importance-resampled draw (then pass its
    ``ess_fraction`` if it has one). ``box`` defaults to the model's ``support_`` (the training
    rows' box recorded at fit). ``n_samples`` defaults to the size of one half of the held-out rows.
    """
    names = getattr(model, "feature_names_in_", None)
    if columns is None and names is not None and not isinstance(X, np.ndarray):
        columns = [str(c) for c in names]
    rng = np.random.default_rng(random_state)
    rows = pilot_sample(as_source(X, columns=columns, on_bad_rows=on_bad_rows), rows=int(max_rows),
                        random_state=int(rng.integers(2**31))).rows
    if rows.shape[0] < 20:
        raise ValueError(f"the sample check needs at least 20 held-out rows; got {rows.shape[0]}")
    order = rng.permutation(rows.shape[0])
    half_a, half_b = rows[order[: rows.shape[0] // 2]], rows[order[rows.shape[0] // 2:]]
    if samples is None:
        n = int(n_samples or half_b.shape[0])
        samples = model.sample(n, random_state=int(rng.integers(2**31)))
        info = getattr(model, "last_sample_info_", None)
        ess_fraction = None if info is None else float(info["ess_fraction"])
    samples = np.asarray(samples, dtype=np.float64)
    if samples.ndim != 2 or samples.shape[1] != rows.shape[1]:
        raise ValueError(f"samples must be (n, {rows.shape[1]}); got {samples.shape}")
    seed = int(rng.integers(2**31))
    model_dist = sliced_distances(half_a, points=samples, n_directions=n_directions, random_state=seed).summary()
    data_dist = sliced_distances(half_a, points=half_b, n_directions=n_directions, random_state=seed).summary()
    sd = rows.std(axis=0)
    sd = np.where(sd > 0, sd, 1.0)
    mean_error = (samples.mean(axis=0) - rows.mean(axis=0)) / sd
    spread = samples.std(axis=0) / sd
    checks = {"mean": bool(np.all(np.abs(mean_error) <= MAX_MEAN_ERROR)),
              "spread": bool(np.all((spread >= SPREAD_RANGE[0]) & (spread <= SPREAD_RANGE[1])))}
    box = box if box is not None else getattr(model, "support_", None)
    mass_outside = heldout_outside = None
    if box is not None:
        mass_outside, heldout_outside = float(box.outside(samples).mean()), float(box.outside(rows).mean())
        checks["outside"] = mass_outside <= mass_outside_limit(heldout_outside)
    if ess_fraction is not None:
        checks["ess"] = ess_fraction >= MIN_ESS_FRACTION
    if max_ks is not None:
        checks["ks"] = model_dist["ks_median"] <= max_ks
    return SampleCheck(int(samples.shape[0]), int(rows.shape[0]), model_dist["ks_median"], model_dist["wd_median"],
                       data_dist["ks_median"], data_dist["wd_median"], mean_error, spread, mass_outside,
                       heldout_outside, ess_fraction, checks)
