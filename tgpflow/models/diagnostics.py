"""Fit diagnostics: does a fitted density put mass where there are no data? (docs/architecture.md, "A model says when it
is wrong").

Score matching never sees the space without data, so a tilt can grow there unchecked; the fit
then looks fine on its own objective and is wrong where users look (samples, tails, anomaly
scores). Every fit of a density with a Gaussian base therefore records, from one importance-
sampling estimate of its normaliser (:mod:`tgpflow.solve.normalizer`):

* ``log_normalizer`` and its standard error — the model's normalised ``log p = log q̃ − log Z``;
* ``ess_fraction`` — the effective sample size of the base proposals as a share of the draws.
  Below :data:`MIN_ESS_FRACTION` the base rarely goes where the model's mass is: its normaliser,
  its importance-resampled samples and its sliced metrics rest on a handful of draws;
* ``mass_outside`` — the model's normalised mass outside the training rows' support box
  (per-column [0.1 %, 99.9 %] quantiles, :mod:`tgpflow.stats.support`), beside
  ``data_outside`` (the share of the box's own rows outside it). More than
  ``max(OUTSIDE_FACTOR × data_outside, OUTSIDE_FLOOR)`` is mass where there are no data;
* ``theta_norm`` ‖θ‖ (the tilt's size), and for MAP the convergence and ESS of its fixed draws.

The thresholds are the ones that separated good from broken fits when they were measured (on
the demo mixture at 200k rows and a 2M-row, 7-column dataset of [Paisley et al.]'s Table II): broken
fits had ESS 0.016–0.63 % of the proposals and 23–62 % of their mass outside the box, good ones
ESS ≥ 14 % and mass outside within a few times the data's own rate. A crossing warns with the fix
(:class:`DiagnosticWarning`) and is listed in the diagnostics under ``"warnings"``.
"""

from __future__ import annotations

import warnings
from typing import Any

from tgpflow.errors import DiagnosticWarning
from tgpflow.solve.normalizer import NormalizerEstimate
from tgpflow.stats.support import OUTSIDE_FACTOR, OUTSIDE_FLOOR, SupportBox, mass_outside_limit

__all__ = ["DiagnosticWarning", "MIN_ESS_FRACTION", "OUTSIDE_FACTOR", "OUTSIDE_FLOOR", "fit_diagnostics", "remedies",
           "mass_outside_limit"]

#: Smallest healthy ESS of the base proposals, as a share of the draws.
MIN_ESS_FRACTION = 0.01


def fit_diagnostics(normalizer: NormalizerEstimate, box: SupportBox | None, *, what: str, fix: str,
                    extra: dict[str, Any] | None = None, warn: bool = True) -> dict[str, Any]:
    """The diagnostics of a fit (module docstring), warning once per failed check with ``fix``.

    ``what`` names the model in the messages; ``extra`` adds model-specific entries (‖θ‖, MAP
    convergence) — an ``extra["warnings"]`` list is merged.
    """
    diag: dict[str, Any] = {
        "log_normalizer": normalizer.log_z, "log_normalizer_se": normalizer.std_error,
        "ess": normalizer.ess, "ess_fraction": normalizer.ess_fraction, "n_draws": normalizer.n_draws,
        "mass_outside": normalizer.mass_outside,
        "data_outside": None if box is None else box.rate_outside,
        "mean": normalizer.mean.tolist(), "std": normalizer.std.tolist(),
    }
    extra = dict(extra or {})
    problems = list(extra.pop("warnings", []))
    diag.update(extra)
    if normalizer.ess_fraction < MIN_ESS_FRACTION:
        problems.append(f"{what}: only {normalizer.ess:.0f} effective proposal draws of {normalizer.n_draws} "
                        f"({100 * normalizer.ess_fraction:.3g}% < {100 * MIN_ESS_FRACTION:g}%): its mass sits where "
                        f"the base rarely goes, so its normaliser and resampled draws are unreliable; {fix}")
    if box is not None and normalizer.mass_outside is not None:
        limit = mass_outside_limit(box.rate_outside)
        diag["mass_outside_limit"] = limit
        if normalizer.mass_outside > limit:
            problems.append(f"{what}: {100 * normalizer.mass_outside:.3g}% of its mass lies outside the box that "
                            f"holds the training rows' [0.1%, 99.9%] quantiles (the data: "
                            f"{100 * box.rate_outside:.2g}%; limit {100 * limit:.3g}%): it puts mass where there "
                            f"are no data; {fix}")
    diag["warnings"] = problems
    if warn:
        for message in problems:
            warnings.warn(message, DiagnosticWarning, stacklevel=3)
    return diag


#: Columns whose spreads (the support box's widths) differ by more than this factor are worth standardizing.
MIXED_SCALES = 10.0


def remedies(*, lam: Any, lam_fitted: float, box: SupportBox | None, scaled: bool,
             suggested_bounds: dict[str, list[float | None]] | None, lam_grid_param: str = "lam_grid",
             base_outside: float | None = None) -> str:
    """What to change when a fit puts mass where there are no data, each as the Python parameter and the
    ``tgpflow fit`` flag that set it: the bounds the pilot suggests, ``scale=True`` when the columns' spreads
    differ by more than :data:`MIXED_SCALES` times and the model is not standardized, then λ, unless the base
    alone (λ = ∞, held out in the selection) puts more than the limit outside too (``base_outside``, its share):
    then no λ helps, and bounds on the columns whose tails leak are the fix left."""
    fixes = []
    if suggested_bounds:
        python = ", ".join(f"{c!r}: ({lo!r}, {hi!r})" for c, (lo, hi) in suggested_bounds.items())
        cli = ",".join(f"{c}:{'' if lo is None else f'{lo:g}'}:{'' if hi is None else f'{hi:g}'}"
                       for c, (lo, hi) in suggested_bounds.items())
        fixes.append(f"declare the bounds the pilot shows: bounds={{{python}}} (tgpflow fit --bounds {cli}), or let "
                     f"the fit read them off: bounds='auto' (--bounds auto)")
    if box is not None and not scaled:
        widths = box.upper - box.lower
        if widths.size > 1 and widths.min() > 0 and widths.max() > MIXED_SCALES * widths.min():
            fixes.append(f"standardize the columns (their spreads differ {widths.max() / widths.min():.3g}-fold): "
                         f"scale=True (tgpflow fit --scale)")
    if base_outside is not None:
        own = "" if suggested_bounds else (": declare bounds for the columns its tails leak past, "
                                           "bounds={'col': (lo, hi)} (tgpflow fit --bounds col:lo:hi)")
        fixes.append(f"no lam helps: the base alone (lam = inf) puts {100 * base_outside:.3g}% of its mass outside "
                     f"the box too{own}")
    elif lam == "auto":
        fixes.append(f"extend {lam_grid_param} to larger values (-p {lam_grid_param}=...)")
    else:
        fixes.append(f"raise lam (now {lam_fitted:g}; --lam) or select it on held-out rows: lam='auto' (--lam auto)")
    return "; or ".join(fixes)
