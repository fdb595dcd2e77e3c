"""What a fitted model says about itself after a fit, and what its pass costs: the values ``tgpflow fit`` and
``tgpflow info`` print, per model kind (:class:`~tgpflow.models.registry.ModelKind`'s ``summary`` and ``work``).

Each family has its own summary function, so a summary holds only what applies to the kind; the shared parts
(health, strict JSON numbers, discrete columns) are functions here too.
"""

from __future__ import annotations

import math
from typing import Any

__all__ = ["json_number", "diagnostics_summary", "discrete_columns", "tgp_summary", "kernel_summary",
           "rsr_summary", "tgp_work", "kernel_work"]


def json_number(value: Any) -> Any:
    """A number as strict JSON has it: λ = ∞ (the base alone) as "inf", NaN (no λ) as null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None if math.isnan(value) else ("inf" if value > 0 else "-inf")
    return value


def diagnostics_summary(est: Any) -> dict[str, Any] | None:
    """The figures that say whether a fitted density is wrong (ESS, mass outside the data's box, warnings)."""
    d = getattr(est, "fit_diagnostics_", None)
    if not d:
        return None
    keys = ("log_normalizer", "log_normalizer_se", "ess_fraction", "mass_outside", "data_outside",
            "mass_outside_limit", "theta_norm", "map_converged", "map_ess_fraction", "code_calibration", "warnings")
    return {k: d[k] for k in keys if k in d}


def discrete_columns(est: Any) -> dict[str, Any] | None:
    """The columns a GP-tilted model treats as discrete, {column: {"origin", "step"}} in the data's units, and
    its atoms."""
    cells = getattr(est, "discrete_", None)
    if cells is None:
        return None
    info = cells.to_dict()
    out: dict[str, Any] = {c: {"origin": v["origin"], "step": v["step"]} for c, v in info["columns"].items()}
    for atom in info.get("atoms", []):  # an edge value carrying a share of the rows, beside a continuous part
        out.setdefault(atom["column"], {})[f"atom_{atom['side']}"] = {"value": atom["value"], "block": atom["width"]}
    return out


def _solved(est: Any) -> dict[str, Any]:
    """What every estimator of one pass and a solve reports: rows, drops, bandwidth, λ, the selection's choice,
    the solver, the health."""
    chosen = (getattr(est, "selection_", None) or {}).get("chosen") or {}
    return {"rows": est.n_samples_seen_, "rows_dropped": est.n_rows_dropped_, "bandwidth": est.bandwidth_,
            "lam": json_number(est.lam_),
            "selected": {k: json_number(v) for k, v in chosen.items()} or None,
            "solver": {k: v for k, v in est.solver_info_.items() if k != "history"},
            "diagnostics": diagnostics_summary(est)}


def tgp_summary(est: Any) -> dict[str, Any]:
    """A GP-tilted density: beside :func:`_solved`, its features, the bounds as resolved (and those only
    suggested, and the tests of the edges ``bounds="auto"`` found), the pilot's column kinds, the discrete columns
    and the mixture base."""
    pilot = est.pilot_
    return {**_solved(est), "n_features": est.n_features,
            "bounds": None if est.bounds_ is None else est.bounds_.to_dict(),
            "suggested_bounds": pilot.get("suggested_bounds") or None, "edges": pilot.get("edges") or None,
            "column_kinds": pilot.get("column_kinds"),
            "discrete": discrete_columns(est), "base_mixture": pilot.get("mixture")}


def kernel_summary(est: Any) -> dict[str, Any]:
    """A kernel exponential family or score estimator: :func:`_solved`."""
    return _solved(est)


def rsr_summary(est: Any) -> dict[str, Any]:
    """A root-Sobolev density: rows, the smoothness chosen, the fit's figures, the anomaly threshold."""
    return {"rows": est.n_samples_seen_, "smoothness": est.smoothness_,
            "fit": {k: v for k, v in est.fit_info_.items() if k != "history"},
            "anomaly_threshold": est.anomaly_threshold_}


def tgp_work(est: Any, n_rows: int, n_columns: int) -> float:
    """The flops of a GP-tilted pass, roughly: a Gram of the features per row."""
    return float(n_rows) * est.n_features**2


def kernel_work(est: Any, n_rows: int, n_columns: int) -> float:
    """The flops of a kernel family's pass, roughly: its (basis × columns) Gram per row and column."""
    return float(n_rows) * (est.n_basis * n_columns) ** 2 * n_columns
