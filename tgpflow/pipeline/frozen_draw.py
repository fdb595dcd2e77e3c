"""What a store freezes on its first run (or ``refit: full``): the preprocessing, and each model's plan (its features,
basis or root-Sobolev draw: the estimator's ``plan()``, :class:`~tgpflow.models.fit_plan.FitPlan`), whose draw is
saved as arrays and put back on a fresh estimator at every later run (``with_plan``), so that every partition's
statistics are summed with the same draw and stay mergeable (:mod:`tgpflow.pipeline.runner`, step 2).
"""

from __future__ import annotations

from typing import Any

from tgpflow.core.engine import Progress
from tgpflow.errors import TgpflowError
from tgpflow.features.scaling import Scaling
from tgpflow.io.pilot import pilot_sample
from tgpflow.io.sources import Source
from tgpflow.pipeline.spec import PipelineSpec

__all__ = ["new_estimator", "freeze_preprocess"]


def new_estimator(model_spec: Any) -> Any:
    """A fresh estimator of a spec's model, with the spec's parameters."""
    est = model_spec.estimator_class()()
    est.set_params(**model_spec.params)
    return est


def freeze_preprocess(spec: PipelineSpec, src: Source, seed: int, progress: Progress | None) -> dict[str, Any] | None:
    """The spec's ``preprocess`` as a :class:`~tgpflow.features.scaling.Scaling` of the raw rows of a pilot sample
    (its dict; None without one): every model of the store is fitted in these units, and carries them."""
    if not (spec.preprocess.center or spec.preprocess.scale):
        return None
    rows = pilot_sample(src, rows=100_000, random_state=seed, progress=progress).rows
    try:
        scaling = Scaling.from_rows(rows, src.columns, center=spec.preprocess.center, scale=spec.preprocess.scale,
                                    where=spec.source.path)
    except ValueError as exc:
        raise TgpflowError(str(exc)) from None
    return scaling.to_dict()
