"""What ``tgpflow fit`` and ``tgpflow info`` print of a model: its discrete columns, its health, strict JSON numbers."""

from __future__ import annotations

import math
from typing import Any


def discrete_columns(est: Any) -> dict[str, Any] | None:
    """The columns a GP-tilted model treats as discrete, {column: {"origin", "step"}} in the data's units."""
    cells = getattr(est, "discrete_", None)
    if cells is None:
        return None
    info = cells.to_dict()
    out: dict[str, Any] = {c: {"origin": v["origin"], "step": v["step"]} for c, v in info["columns"].items()}
    for atom in info.get("atoms", []):  # an edge value carrying a share of the rows, beside a continuous part
        out.setdefault(atom["column"], {})[f"atom_{atom['side']}"] = {"value": atom["value"], "block": atom["width"]}
    return out


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
