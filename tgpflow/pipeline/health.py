"""What a run says of each model version it writes (docs/drift.md, "Health"): the fit's own checks (the
normaliser's ESS, the mass outside the data's box, the warnings), the hyper-parameters its selection chose, its
mean log-likelihood on the run's pilot rows (rows it was fitted on), and the held-out log-likelihood of the version
it replaces on the run's new partitions (rows that version had not seen).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tgpflow.models.anomaly import model_log_normalizer
from tgpflow.models.fit_summaries import diagnostics_summary, json_number
from tgpflow.pipeline.drift_sums import LOGLIK_FLOOR_QUANTILE, LoglikSums, floored

__all__ = ["version_health", "pilot_loglik"]


def pilot_loglik(est: Any, rows: np.ndarray) -> tuple[LoglikSums | None, float | None]:
    """A version's normalised log-likelihood sums on ``rows`` (the run's pilot rows, in-sample), floored at their
    :data:`~tgpflow.pipeline.drift_sums.LOGLIK_FLOOR_QUANTILE` quantile as its drift sums are, and that floor; Nones
    for a model without a normaliser."""
    log_z = model_log_normalizer(est)
    if log_z is None or not hasattr(est, "log_density") or len(rows) == 0:
        return None, None
    values = np.asarray(est.fitted().log_density(np.asarray(rows, dtype=np.float64)), dtype=np.float64) - log_z
    finite = values[np.isfinite(values)]
    if not finite.size:
        return None, None
    floor = float(np.quantile(finite, LOGLIK_FLOOR_QUANTILE))
    kept, outside = floored(values, floor)
    return LoglikSums.of(kept, outside, 0, values.size), floor


def version_health(est: Any, pilot_mean: float | None, heldout: dict[str, Any] | None) -> dict[str, Any]:
    """The health of a fitted version (module docstring); ``warnings`` lists what its fit warned about."""
    diag = diagnostics_summary(est) or {}
    chosen = (getattr(est, "selection_", None) or {}).get("chosen") or {}
    smoothness = getattr(est, "smoothness_", None)
    return {"warnings": list(diag.get("warnings") or []),
            **{k: json_number(diag.get(k)) for k in ("ess_fraction", "mass_outside", "mass_outside_limit")},
            "selected": {k: json_number(v) for k, v in chosen.items()} or
            ({"smoothness": smoothness} if smoothness is not None else None),
            "pilot_loglik": pilot_mean, "heldout_loglik": heldout}
