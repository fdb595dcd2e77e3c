"""What a store freezes on its first run (or ``refit: full``): the preprocessing, and each model's plan (its features,
basis or root-Sobolev draw: the estimator's ``plan()``, :class:`~tgpflow.models.fit_plan.FitPlan`), whose draw is
saved as arrays and put back on a fresh estimator at every later run (``with_plan``), so that every partition's
statistics are summed with the same draw and stay mergeable (:mod:`tgpflow.pipeline.runner`, step 2).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from tgpflow.core.engine import Progress
from tgpflow.errors import TgpflowError
from tgpflow.features.scaling import Scaling
from tgpflow.io.pilot import pilot_sample
from tgpflow.io.sources import Source
from tgpflow.models.fit_plan import FitPlan
from tgpflow.pipeline.partitions import partition_source, union_source
from tgpflow.pipeline.spec import PipelineSpec
from tgpflow.pipeline.store import StatsStore
from tgpflow.stats.support import SupportBox

__all__ = ["Frozen", "freeze", "new_estimator", "freeze_preprocess"]

#: Rows of the pilot sample the preprocessing is read off.
PREPROCESS_PILOT_ROWS = 100_000
#: Rows of a run's pilot sample: the rows its anomaly thresholds are learned on, and the box of its diagnostics.
RUN_PILOT_ROWS = 20_000


@dataclasses.dataclass
class Frozen:
    """What a run fits with: the data's columns, the preprocessing (its dict; None: none), the manifest's record of
    each model (its estimator, params, columns and the store's path of its draw), each model's estimator with the
    store's plan on it (:meth:`~tgpflow.models.streaming.StreamingMixin.with_plan`), and the run's pilot rows (raw:
    the rows its anomaly thresholds are learned on; their box is the plans' support)."""

    columns: list[str]
    preprocess: dict[str, Any] | None
    models: dict[str, dict[str, Any]]
    estimators: dict[str, Any]
    pilot_rows: np.ndarray

    def summed(self, spec: PipelineSpec) -> dict[str, Any]:
        """The estimators of the models solved from statistics (the others are refitted on rows)."""
        return {m.name: self.estimators[m.name] for m in spec.models if not m.refits_from_rows()}


def freeze(spec: PipelineSpec, store: StatsStore, manifest: dict[str, Any] | None, rebuild: bool,
           with_rows: list[str], fmt: str | None, run: int, seed: int, progress: Progress | None) -> Frozen:
    """A run's step 2: the run's pilot sample of the partitions ``with_rows``; on a rebuild (the store's first run,
    or ``refit: full``) the preprocessing read off a pilot sample of them and each model's plan (``prepare``; its
    draw saved in the store), else those the manifest recorded; each model's estimator takes its plan, with the
    pilot's box. The estimators read raw rows: each applies the store's standardization (and its bounds, in the
    data's units) itself, and carries them into its model versions. The run plan has already refused a spec whose
    models' statistics parameters changed since the draw, so the plans carry no parameters to check."""
    columns = spec.source.columns
    if rebuild:
        columns = list(partition_source(spec, with_rows[0], columns, fmt).columns)
    union = union_source(spec, with_rows, columns if rebuild else manifest["columns"], fmt)
    # one bounded pilot read per run, for every model: the rows the anomaly thresholds are learned on, and the box
    # (in the data's units) the fit diagnostics compare the model's mass with
    pilot_rows = pilot_sample(union, rows=RUN_PILOT_ROWS, random_state=seed, progress=progress).rows
    support = SupportBox.from_rows(pilot_rows) if len(pilot_rows) > 1 else None
    if rebuild:
        pre = freeze_preprocess(spec, union, seed, progress)
        models: dict[str, Any] = {}
        for m in spec.models:
            plan = new_estimator(m).prepare(union, scaling=Scaling.from_dict(pre), progress=progress).plan()
            models[m.name] = {"estimator": m.estimator, "params": m.params, "columns": columns,
                              "draw": store.save_draw(f"{m.name}-{run:06d}", dict(plan.draw_arrays),
                                                      dict(plan.draw_meta))}
    else:
        columns, pre = manifest["columns"], manifest["preprocess"]
        models = {k: dict(v) for k, v in manifest["models"].items()}
        for m in spec.models:  # the spec's (solve-only ones may differ from the stored ones)
            models[m.name]["params"] = m.params
    estimators = {}
    for m in spec.models:
        plan = FitPlan(m.estimator, tuple(columns), len(columns), Scaling.from_dict(pre),
                       *store.load_draw(models[m.name]["draw"]), support=support)
        estimators[m.name] = new_estimator(m).with_plan(plan)
    return Frozen(list(columns), pre, models, estimators, pilot_rows)


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
    rows = pilot_sample(src, rows=PREPROCESS_PILOT_ROWS, random_state=seed, progress=progress).rows
    try:
        scaling = Scaling.from_rows(rows, src.columns, center=spec.preprocess.center, scale=spec.preprocess.scale,
                                    where=spec.source.path)
    except ValueError as exc:
        raise TgpflowError(str(exc)) from None
    return scaling.to_dict()
