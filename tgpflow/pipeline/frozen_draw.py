"""What a store freezes on its first run (or ``refit: full``): the preprocessing, and each model's plan (its features,
basis or root-Sobolev draw: the estimator's ``plan()``, :class:`~tgpflow.models.fit_plan.FitPlan`), whose draw is
saved as arrays and put back on a fresh estimator at every later run (``with_plan``), so that every partition's
statistics are summed with the same draw and stay mergeable (:mod:`tgpflow.pipeline.runner`, step 2).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from tgpflow.core.engine import Progress
from tgpflow.errors import TgpflowError
from tgpflow.features.scaling import Scaling
from tgpflow.io.pilot import pilot_sample
from tgpflow.io.sources import Source
from tgpflow.models.fit_plan import FitPlan
from tgpflow.pipeline.partitions import partition_source, union_source
from tgpflow.pipeline.spec import PipelineSpec
from tgpflow.pipeline.store import StatsStore

__all__ = ["Frozen", "freeze", "new_estimator", "freeze_preprocess"]

#: Rows of the pilot sample the preprocessing is read off.
PREPROCESS_PILOT_ROWS = 100_000


@dataclasses.dataclass(frozen=True)
class Frozen:
    """What a run fits with: the data's columns, the preprocessing (its dict; None: none), the manifest's record of
    each model (its estimator, params, columns and the store's path of its draw) and each model's estimator with the
    store's plan on it (:meth:`~tgpflow.models.streaming.StreamingMixin.with_plan`)."""

    columns: list[str]
    preprocess: dict[str, Any] | None
    models: dict[str, dict[str, Any]]
    estimators: dict[str, Any]

    def summed(self, spec: PipelineSpec) -> dict[str, Any]:
        """The estimators of the models solved from statistics (the others are refitted on rows)."""
        return {m.name: self.estimators[m.name] for m in spec.models if not m.refits_from_rows()}


def freeze(spec: PipelineSpec, store: StatsStore, manifest: dict[str, Any] | None, rebuild: bool,
           with_rows: list[str], fmt: str | None, run: int, seed: int, progress: Progress | None) -> Frozen:
    """A run's step 2: on a rebuild (the store's first run, or ``refit: full``) the preprocessing read off a pilot
    sample of the partitions ``with_rows`` and each model's plan (:meth:`prepare`; its draw saved in the store),
    else those the manifest recorded; each model's estimator takes its plan. The estimators read raw rows: each
    applies the store's standardization (and its bounds, in the data's units) itself, and carries them into its
    model versions."""
    columns = spec.source.columns
    if rebuild:
        columns = list(partition_source(spec, with_rows[0], columns, fmt).columns)
        union = union_source(spec, with_rows, columns, fmt)
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
                       *store.load_draw(models[m.name]["draw"]))
        estimators[m.name] = new_estimator(m).with_plan(plan)
    return Frozen(list(columns), pre, models, estimators)


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
