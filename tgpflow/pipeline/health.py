"""What a run says of each model version it writes (docs/drift.md, "Health"): the fit's own checks (the
normaliser's ESS, the mass outside the data's box, the warnings), the hyper-parameters its selection chose, its
mean log-likelihood on the run's pilot rows (rows it was fitted on), and the held-out log-likelihood of the version
it replaces on the run's new partitions (rows that version had not seen).
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterator
from typing import Any

import numpy as np

from tgpflow.errors import DiagnosticWarning
from tgpflow.models.anomaly import model_log_normalizer
from tgpflow.models.fit_summaries import diagnostics_summary, json_number
from tgpflow.pipeline.drift_sums import LOGLIK_FLOOR_QUANTILE, LoglikSums, floored

__all__ = ["version_health", "pilot_loglik", "held_fit_warnings", "say_version_warnings"]


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


@contextlib.contextmanager
def held_fit_warnings(listed: list[str]) -> Iterator[None]:
    """Hold the warnings of a version's fit until it ends: those that its health lists (``listed``, filled in by
    the caller before the block exits) are said once after the commit, naming the version
    (:func:`say_version_warnings`); any other is passed on as it was raised. Said at fit time too, a `tgpflow run`
    printed each of them twice."""
    caught: list[warnings.WarningMessage] = []
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            yield
    finally:  # a fit that failed lists nothing: all it warned of is passed on before its error
        said = {" ".join(line.split()) for line in listed}
        for w in caught:
            if " ".join(str(w.message).split()) not in said:
                warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)


def say_version_warnings(pipeline: str, lines: list[str]) -> None:
    """Each health warning of the run's new versions (``model NAME VERSION: …``) as a
    :class:`~tgpflow.errors.DiagnosticWarning`, after the commit: shown as the fit's own would be (a CLI prints one
    line each), turned into an error by a warnings filter that asks for it."""
    for line in lines:
        warnings.warn(f"{pipeline}: {line}", DiagnosticWarning, stacklevel=3)
