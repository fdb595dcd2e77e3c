"""A run's drift step (docs/drift.md, "What a run keeps"): the drift sums of every partition the run reads, summed
in the same Dask graph as its statistics (one more task per chunk, on the chunk already read), then each new partition's
verdict against the rows of the version current before the run, and the reference the next run compares with.

The store keeps (:mod:`tgpflow.pipeline.store`): the frame, frozen on the first run and kept while the columns
stay; each partition's sums; and the reference, a running total updated like a model's (``+ new − removed``; the
sum of every kept partition on a rebuild). A partition's manifest record holds the path of its sums, its
log-likelihood under each density model's previous version (the held-out figures of that version), and its
verdict (None for the partitions of a store's first run, which have no earlier rows to differ from).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
from typing import Any

import dask
import numpy as np

from tgpflow.core.engine import tree_reduce
from tgpflow.io.atomic import as_path
from tgpflow.io.sources import Source
from tgpflow.models.anomaly import model_log_normalizer
from tgpflow.pipeline.drift import LoglikGap, drift_verdict, gap_history
from tgpflow.pipeline.drift_sums import LOGLIK_ROWS, DriftFrame, DriftSums, LoglikModel, LoglikSums, chunk_sums
from tgpflow.pipeline.run_plan import RunPlan
from tgpflow.pipeline.spec import PipelineSpec, statistics_params
from tgpflow.pipeline.store import StatsStore
from tgpflow.pipeline.versions import ModelVersions

__all__ = ["DriftPass", "generation"]

FRAME_KIND, SUMS_KIND = "DriftFrame", "DriftSums"


@dataclasses.dataclass
class DriftPass:
    """What a run's drift step works with: the frame (and its path in the store), the previous versions whose
    log-likelihoods are summed, the reference (the previous version's rows; None on a store's first run), the
    model the z statistic is read from (None: no density model with a normalised previous version), and each
    model's generation (:func:`generation`)."""

    frame: DriftFrame
    frame_rel: str
    models: tuple[LoglikModel, ...]
    reference: DriftSums | None
    test_model: str | None
    generations: dict[str, str]

    @classmethod
    def start(cls, spec: PipelineSpec, store: StatsStore, manifest: dict[str, Any] | None, columns: list[str],
              pilot_rows: np.ndarray, run: int, seed: int) -> DriftPass:
        kept = (manifest or {}).get("drift") or {}
        frame = None
        if kept.get("frame"):
            frame = DriftFrame.from_arrays(*store.load_arrays(kept["frame"], FRAME_KIND))
            frame = frame if frame.columns == tuple(columns) else None  # a rebuild changed the columns
        same = frame is not None
        if frame is None:
            frame = DriftFrame.from_rows(pilot_rows, columns, seed)
            kept = {"frame": store.save_arrays(f"drift/frame-{run:06d}.zarr", FRAME_KIND, *frame.to_arrays())}
        reference = (DriftSums.from_arrays(*store.load_arrays(kept["reference"], SUMS_KIND))
                     if same and kept.get("reference") else None)
        models = _previous_models(spec, manifest, columns) if same else ()
        scoring = (spec.outputs.scores.model or spec.models[0].name) if spec.outputs.scores else None
        names = [m.model for m in models]
        # the spec's model, else the scoring model, else the first model with a normalised previous version
        wanted = [w for w in (spec.drift.model, scoring) if w in names]
        test_model = wanted[0] if wanted else (names[0] if names else None)
        return cls(frame, kept["frame"], models, reference, test_model,
                   {m.name: generation(columns, m.estimator, m.params) for m in spec.models})

    def task(self, src: Source, split_every: int) -> Any:
        """The delayed drift sums of one partition (its raw validated chunks: the chunks its statistics read; the
        log-likelihoods of about :data:`~tgpflow.pipeline.drift_sums.LOGLIK_ROWS` of its rows)."""
        chunk = dask.delayed(chunk_sums, pure=True)
        frame, models = dask.delayed(self.frame, pure=True), dask.delayed(self.models, pure=True)
        stride = math.ceil(src.n_rows / LOGLIK_ROWS) if src.n_rows else 1
        return tree_reduce([chunk(block, frame, models, stride) for block in src.blocks()], split_every)

    def record(self, spec: PipelineSpec, store: StatsStore, plan: RunPlan, committed: dict[str, Any],
               sums: dict[str, DriftSums], new_parts: dict[str, Any], partitions: dict[str, Any]) -> dict[str, Any]:
        """Save each read partition's sums and put its drift record (sums, log-likelihoods, verdict) in
        ``new_parts``; save the reference the next run compares with. Returns the manifest's ``drift`` entry."""
        models = {m.model: m for m in self.models}
        history = (gap_history(committed, self.test_model, spec.drift.window, self.generations[self.test_model])
                   if self.test_model is not None else [])
        for f, part in sums.items():
            old = committed.get(f)
            if old is not None and old["fingerprint"] == plan.fps[f]:  # re-read by a rebuild: tested before, or
                # read before runs tested partitions (its gap now would be in-sample: it has none)
                kept_drift = old.get("drift") or {}
                record = {"run": kept_drift.get("run", old["run"]), "loglik": kept_drift.get("loglik") or {},
                          "verdict": kept_drift.get("verdict")}
            elif part.rows == 0:  # every row filtered out: nothing to compare
                record = {"run": plan.run, "loglik": {}, "verdict": None}
            else:
                gaps = {k: LoglikGap.of(v, models[k].pilot) for k, v in part.loglik.items()}
                verdict = None
                if self.reference is not None and self.reference.rows > 0:
                    verdict = drift_verdict(part, self.reference, list(self.frame.columns), spec.drift.alpha,
                                            model=self.test_model, gap=gaps.get(self.test_model), history=history)
                record = {"run": plan.run,
                          "loglik": {k: {**v.to_dict(), "version": models[k].version,
                                         "generation": models[k].generation,
                                         "gap": None if gaps[k] is None else gaps[k].gap,
                                         "gap_se": None if gaps[k] is None else gaps[k].se}
                                     for k, v in part.loglik.items()},
                          "verdict": verdict}
            rel = store.save_arrays(f"drift/parts/{plan.fps[f]}.zarr", SUMS_KIND, *part.to_arrays())
            new_parts[f]["drift"] = {"sums": rel, **record}
        reference = self._next_reference(store, plan, sums, partitions)
        entry = {"frame": self.frame_rel}
        if reference is not None:
            entry["reference"] = store.save_arrays(f"drift/reference-{plan.run:06d}.zarr", SUMS_KIND,
                                                   *reference.to_arrays())
        return entry

    def _next_reference(self, store: StatsStore, plan: RunPlan, sums: dict[str, DriftSums],
                        partitions: dict[str, Any]) -> DriftSums | None:
        """The drift sums of the partitions the run keeps: the previous reference + the new − the removed, or (a
        rebuild, or a store without a reference yet) the sum over every kept partition with sums."""
        def stored(f: str) -> DriftSums | None:
            rel = (plan.old_parts.get(f, {}).get("drift") or {}).get("sums")
            return DriftSums.from_arrays(*store.load_arrays(rel, SUMS_KIND)) if rel else None

        parts: list[DriftSums | None]
        if plan.rebuild or self.reference is None:
            parts = [sums[f] if f in sums else stored(f) for f in sorted(partitions)]
        else:
            total = self.reference
            for f in plan.removed:
                gone = stored(f)
                total = total - gone if gone is not None else total
            parts = [total, *(sums[f] for f in sorted(sums))]
        kept = [p for p in parts if p is not None]
        if not kept:
            return None
        total = kept[0]
        for p in kept[1:]:
            total = total + p
        return DriftSums(total.rows, total.column_counts, total.projection_counts, total.column_sum,
                         total.column_sumsq)

    def heldout(self, sums: dict[str, DriftSums], new: list[str]) -> dict[str, dict[str, Any]]:
        """Per model with a previous version: that version's mean normalised log-likelihood (and its standard
        error) over the new partitions ``new`` — rows it had not seen."""
        out = {}
        for m in self.models:
            total = LoglikSums(0, 0.0, 0.0, 0)
            for f in new:
                if f in sums and m.model in sums[f].loglik:
                    total = total + sums[f].loglik[m.model]
            if total.n:
                se = math.sqrt(total.var / total.n) if total.n > 1 else None
                out[m.model] = {"mean": total.mean, "se": se, "rows": total.n, "outside": total.outside,
                                "anomaly_rate": total.anomaly_rate, "version": m.version}
        return out


def generation(columns: list[str], estimator: str, params: dict[str, Any]) -> str:
    """What a version's log-likelihoods are comparable within: the columns, the estimator and the parameters its
    statistics depend on (a hash; a rebuild that changes any starts the z statistic's history again)."""
    key = {"columns": list(columns), "estimator": estimator, "params": statistics_params(estimator, params)}
    return hashlib.sha256(json.dumps(key, sort_keys=True, default=str).encode()).hexdigest()[:16]


def _previous_models(spec: PipelineSpec, manifest: dict[str, Any] | None, columns: list[str]
                     ) -> tuple[LoglikModel, ...]:
    """The published versions current before the run of the spec's density models with a normaliser (the
    log-likelihood of another version is comparable only when normalised), on the run's columns."""
    out = []
    for m in spec.models:
        version = ((manifest or {}).get("models", {}).get(m.name) or {}).get("version")
        vers = ModelVersions(as_path(spec.outputs.models) / m.name)
        if version is None or version not in vers.list():
            continue
        info = vers.info(version)
        if list(info.get("columns") or []) != list(columns) or ("log_normalizer" in info and
                                                                info["log_normalizer"] is None):
            continue  # other columns; no normaliser (a root-Sobolev fit, a score estimator): not comparable
        est = vers.load(version)
        log_z = model_log_normalizer(est)
        if log_z is None or not hasattr(est, "log_density"):
            continue
        floor = info.get("loglik_floor")
        threshold = info.get("anomaly_threshold") if info.get("threshold_of") == "anomaly_score" else None
        pilot = info.get("pilot_loglik_sums")
        built = (manifest or {}).get("models", {}).get(m.name) or {}  # what the version's statistics were built with
        out.append(LoglikModel(m.name, version, est.fitted().log_density, log_z,
                               -math.inf if floor is None else float(floor),
                               None if threshold is None else float(threshold),
                               None if pilot is None else LoglikSums.from_dict(pilot),
                               generation(columns, built.get("estimator", m.estimator), built.get("params", m.params))))
    return tuple(out)
