"""``tgpflow run SPEC``: one scheduled refit — incremental, windowed or full — and its scoring job.

A run (under the store's lock):

1. lists the source's partitions (Parquet files, Zarr stores, or the dates of Zarr stores with a date
   dimension, keyed relative to the source's root: :mod:`tgpflow.pipeline.discover`) and fingerprints them
   (a store written with absolute keys is migrated first, once); those with zero rows are committed empty and
   those not ready to read are left for a later run (:mod:`tgpflow.pipeline.arrivals`);
2. on the store's first run (or ``refit: full``) freezes the preprocessing (centre/scale from
   a pilot sample) and each model's feature draw / basis, and stores them: every later
   partition's statistics use the same ones, so they stay mergeable. The estimators read raw rows and
   apply the preprocessing themselves, with their bounds in the data's units, and every version they
   write carries it (:mod:`tgpflow.features.scaling`): loaded anywhere, it takes and gives the data's units;
3. accumulates the statistics of the partitions it has not seen (new or changed) — one Dask
   graph for all of them, one pass over each — and writes them to the store, counting the rows each model
   drops (bad values, rows beyond its bounds); a partition that loses more than
   ``source.max_dropped_fraction`` of its rows fails the run before anything is committed. In the same graph,
   on the same chunks, each partition's drift sums (:mod:`tgpflow.pipeline.drift_step`): each new partition's
   verdict — did it drift from the rows of the version current before the run, in which columns — and that
   version's held-out log-likelihood on it (docs/drift.md);
4. updates each model's running total: ``total + new − (changed, disappeared, left the window)``;
   the old partitions are never re-read;
5. solves each model from its total and writes a new, unpublished, model version, its run info holding its
   health (:mod:`tgpflow.pipeline.health`) and the run's drift verdicts. A model without
   additive statistics (a RootSobolevDensity with ``method: rsr``: every pass sums φ/f at the
   current w) is instead refitted on the rows of every partition the run keeps — old and new,
   one pass per iteration, with the draw frozen in step 2 — so its version is exactly
   ``fit(those rows, features=draw)``; the store keeps no statistics for it, and its partitions,
   version, anomaly threshold and run info are recorded like any other model's;
6. swaps the store's manifest: the commit point, and the journal of the steps that follow
   (:mod:`tgpflow.pipeline.journal`) — publish each version (its run info, then ``CURRENT``),
   score the new partitions with the version current before the run (``scores.version: previous``) or the
   new one (the columns ``tgpflow score`` writes: each row's position and kept columns, the normalised log
   density of the raw rows, its negative as the anomaly score, and the anomaly flag by the estimators' own
   rule, :func:`~tgpflow.models.anomaly.anomaly_threshold` at ``threshold_quantile`` of the raw training
   rows' log density (on the fit's bounded sample of them, :func:`~tgpflow.models.anomaly.threshold_rows`); one
   Parquet file per partition, each written atomically; a partition flagged more than 5× the quantile is warned
   about) and write the reports.

Before it looks for new partitions a run removes what a killed run left uncommitted and
finishes the steps the last committed run left undone, each output once (a run killed while
scoring is completed by the next one, even with no new partition). A rerun with nothing new and
nothing owed changes nothing and says so.

``dry_run=True`` (``tgpflow run --dry-run``) takes no lock and writes nothing: it lists the partitions,
compares them with the committed manifest and returns the plan — the partitions it would read (``new``,
``changed``: read again and their old statistics subtracted) and drop (``removed``: gone, or out of the
window), how each model would be refitted, and which partitions would be scored. It does not list what a
killed run left behind (``tgpflow gc SPEC --dry-run`` does).
"""

from __future__ import annotations

import datetime
import logging
from typing import Any

import dask
import numpy as np

from tgpflow.core.engine import Progress, compute, tree_reduce
from tgpflow.core.logs import phase
from tgpflow.errors import TgpflowError
from tgpflow.features.scaling import Scaling
from tgpflow.io.atomic import absolute, as_path
from tgpflow.io.storage import storage_config
from tgpflow.models.anomaly import model_log_normalizer, threshold_rows
from tgpflow.pipeline.arrivals import Arrivals, arrivals
from tgpflow.pipeline.discover import Partitions, discover, migrate_keys
from tgpflow.pipeline.drift import drift_lines, drift_summary
from tgpflow.pipeline.drift_step import DriftPass
from tgpflow.pipeline.drift_sums import DriftSums
from tgpflow.pipeline.frozen_draw import Frozen, freeze
from tgpflow.pipeline.health import held_fit_warnings, pilot_loglik, say_version_warnings, version_health
from tgpflow.pipeline.journal import collect, finish, steps_after_commit
from tgpflow.pipeline.partitions import partition_source, union_source
from tgpflow.pipeline.run_plan import RunPlan, plan_run
from tgpflow.pipeline.source_check import check_source
from tgpflow.pipeline.spec import PipelineSpec
from tgpflow.pipeline.store import MANIFEST_SCHEMA, StatsStore
from tgpflow.pipeline.versions import ModelVersions

__all__ = ["run_pipeline", "RunResult"]

logger = logging.getLogger("tgpflow")

#: The fan-in of a partition's reduction tree, for a model without ``split_every`` (KDE-SDO).
DEFAULT_SPLIT_EVERY = 8


class RunResult(dict):
    """What a run did (a dict: changed, added, removed, rows, versions, scored, …)."""


def run_pipeline(spec: PipelineSpec, *, date: str | None = None, progress: Progress | None = None,
                 dry_run: bool = False) -> RunResult:
    """Run one refit of ``spec`` (see the module docstring); returns what it did — or, with ``dry_run``,
    what it would do, writing nothing. ``progress`` is called with the futures of each distributed compute
    of the run (:data:`tgpflow.core.engine.Progress`)."""
    with storage_config(spec.storage_options):  # the filesystems of the spec's URLs
        store = StatsStore(spec.outputs.store)
        if dry_run:
            return _dry_run(spec, store)
        with store.lock(spec.lock_timeout):
            parts = discover(spec.source.path, spec.source.partition_by, spec.source.array)
            manifest, migrated = migrate_keys(store.read_manifest(), parts, spec.source.fingerprint)
            if migrated:  # once: the same commit, its partitions keyed relative to the source's root
                store.write_manifest(manifest)
                logger.info("%s: the store's partition keys are now relative to %s", spec.name, parts.root)
            collect(spec, store, manifest)  # what a killed run left uncommitted
            owed = finish(spec, manifest, progress=progress)  # what the last committed run left undone
            arrived = arrivals(spec, store, parts, manifest)  # empty ones, and those not ready to read
            result = _run(spec, store, manifest, parts, date or datetime.date.today().isoformat(), owed,
                          progress, arrived)
            result["held_back"] = arrived.held
            result["warnings"] = arrived.warnings() + result.get("warnings", [])
            return result


def _dry_run(spec: PipelineSpec, store: StatsStore) -> RunResult:
    """The plan of a run, from the committed manifest, without a lock and without writing anything."""
    parts = discover(spec.source.path, spec.source.partition_by, spec.source.array)
    manifest, migrated = migrate_keys(store.read_manifest(), parts, spec.source.fingerprint)
    arrived = arrivals(spec, store, parts, manifest, record=False)
    plan = plan_run(spec, store, manifest, parts, arrived.held)
    committed = (manifest or {}).get("partitions", {})  # the data's changes since the last commit
    new = [f for f in plan.files if f not in committed]
    changed = [f for f in plan.files if f in committed and committed[f]["fingerprint"] != plan.fps[f]]
    kept = [f for f in plan.old_parts if f not in plan.removed] + plan.added
    refit = {}
    for m in spec.models:
        if plan.nothing_new:
            how = "none: nothing new or changed"
        elif m.refits_from_rows():
            how = f"from rows: refitted on the rows of {len(kept)} partition(s) (no additive statistics)"
        elif plan.rebuild:
            how = f"full: statistics of {len(plan.added)} partition(s), new preprocessing and draw"
        else:
            how = (f"incremental ({spec.refit.policy}): the stored total + {len(plan.added)} partition(s) "
                   f"− {len(plan.removed)}")
        refit[m.name] = {"estimator": m.estimator, "refit": how}
    scores = spec.outputs.scores
    scored = sorted(f for f in plan.added if f not in arrived.empty)  # an empty partition has no scores file
    score = ({"path": scores.path, "model": scores.model or spec.models[0].name, "partitions": scored}
             if scores is not None and scored else None)
    gone = [f for f in committed if f not in plan.fps]  # disappeared, or out of the window
    checked = check_source(spec)  # the spec's columns and bounds against the newest partition's metadata
    return RunResult(dry_run=True, changed=not plan.nothing_new, run=plan.run, root=parts.root, format=parts.format,
                     source=checked, held_back=arrived.held, empty=sorted(arrived.empty),
                     partitions={"new": new, "changed": changed, "removed": gone,
                                 "unchanged": len(plan.files) - len(new) - len(changed)},
                     rebuild=plan.rebuild, refit=refit, score=score, migrate_keys=migrated)


def _run(spec: PipelineSpec, store: StatsStore, manifest: dict[str, Any] | None, parts: Partitions, date: str,
         owed: dict[str, list[str]], progress: Progress | None = None, arrived: Arrivals | None = None) -> RunResult:
    """Steps 2–6 of the module docstring, one function each: freeze, accumulate the new partitions, solve each
    model's version, commit (and what follows the commit)."""
    arrived = arrived or Arrivals(frozenset(), {})
    plan = plan_run(spec, store, manifest, parts, arrived.held)
    # a partition with no rows is committed with 0 rows and nothing else: no statistics, no scores
    committed = (manifest or {}).get("partitions", {})
    empty = frozenset(f for f in plan.files if f in arrived.empty or (f in committed and committed[f].get("empty")
                                                                      and committed[f]["fingerprint"] == plan.fps[f]))
    # rows are read from the partitions with rows that are ready (a committed one being rewritten is not)
    read = [f for f in plan.added if f not in empty]
    with_rows = [f for f in plan.files if f not in empty and f not in arrived.held]
    if (manifest is not None and plan.nothing_new) or not plan.files:
        message = ("no new or changed partitions; " + _owed_message(owed) if plan.files
                   else "no partition is ready to read yet (held_back says why)")
        logger.info("%s: %s", spec.name, message)
        return RunResult(changed=False, added=[], removed=[], run=manifest["run"] if manifest else 0,
                         repaired=owed["published"], scored=owed["scored"], anomaly_rates=owed["anomaly_rates"],
                         reports=owed["reports"],
                         warnings=owed["warnings"], message=message)
    if not with_rows:
        raise TgpflowError(f"{spec.source.path}: every partition ({len(plan.files)}) has zero rows; nothing to fit yet")
    seed = int(next((m.params.get("random_state", 0) for m in spec.models), 0) or 0)
    _check_scoring_model(spec)
    frozen = freeze(spec, store, manifest, plan.rebuild, with_rows, parts.format, plan.run, seed, progress)
    drift = DriftPass.start(spec, store, manifest, frozen.columns, frozen.pilot_rows, plan.run, seed)
    new_parts, dropped, sums = _accumulate_partitions(spec, store, frozen, parts, plan, read, empty, progress, drift)
    partitions = {f: plan.old_parts[f] for f in plan.old_parts if f not in plan.removed}
    partitions.update(new_parts)
    drift_entry = drift.record(spec, store, plan, committed, sums, new_parts, partitions)
    new = [f for f in read if f not in committed or committed[f]["fingerprint"] != plan.fps[f]]
    heldout = drift.heldout(sums, new)
    versions = {m.name: _solve_version(spec, store, frozen, m, plan, partitions, new_parts, read, empty, with_rows,
                                       parts.format, date, heldout.get(m.name), new) for m in spec.models}
    return _commit(spec, store, frozen, plan, parts, partitions, versions, dropped, empty, owed, read, date,
                   {k: v.get("version") for k, v in (manifest or {}).get("models", {}).items()}, progress,
                   drift_entry, new)


def _accumulate_partitions(spec: PipelineSpec, store: StatsStore, frozen: Frozen, parts: Partitions, plan: RunPlan,
                           read: list[str], empty: frozenset[str], progress: Progress | None, drift: DriftPass
                           ) -> tuple[dict[str, Any], dict[str, dict[str, int]], dict[str, DriftSums]]:
    """Step 3: the statistics of every new partition for every summed model, in one Dask graph (one pass over
    each partition), written to the store; with the rows each model kept and dropped of each (a partition that
    loses too many fails the run here, before anything is committed), and each partition's drift sums
    (:mod:`tgpflow.pipeline.drift_step`: on the same chunks). Returns the manifest records of the added
    partitions, the rows dropped ({partition: {model: n}}) and the drift sums ({partition: sums})."""
    summed, ests, columns, fmt = frozen.summed(spec), frozen.estimators, frozen.columns, parts.format
    with phase("partitions", added=len(plan.added), removed=len(plan.removed), empty=len(set(plan.added) & empty),
               models=len(summed)) as facts:
        roots, counts, drifts = [], [], []
        for f in read:
            src = partition_source(spec, f, columns, fmt, parts.ranges.get(f))
            for est in summed.values():
                roots.append(tree_reduce(est.chunk_tasks(src), int(getattr(est, "split_every", DEFAULT_SPLIT_EVERY))))
            for est in ests.values():  # (kept, dropped) of each model: bad rows, and rows beyond its bounds
                counts.append(dask.delayed(_total_counts, pure=True)(est.fitting_source(src).row_counts()))
            drifts.append(drift.task(src, DEFAULT_SPLIT_EVERY))
        results = compute(*roots, *counts, *drifts, progress=progress) if read else ()
        n_stats, n_counts = len(roots), len(counts)
        dropped, kept = _check_dropped(spec, read, list(ests), results[n_stats:n_stats + n_counts], columns, fmt,
                                       parts, ests)
        dropped.update({f: {name: 0 for name in ests} for f in plan.added if f in empty})
        facts.update(rows_dropped=sum(n for per_model in dropped.values() for n in per_model.values()))
    new_parts = {f: {"fingerprint": plan.fps[f], "stats": {}, "run": plan.run, "rows_dropped": dropped[f],
                     "rows": kept.get(f, 0), **({"empty": True} if f in empty else {})} for f in plan.added}
    stats = iter(results[:n_stats])
    for f in read:
        for name in summed:
            part = next(stats)
            new_parts[f]["stats"][name] = store.save(part, f"parts/{plan.fps[f]}/{name}.zarr")
            new_parts[f]["rows"] = int(part.n)
    return new_parts, dropped, dict(zip(read, results[n_stats + n_counts:], strict=True))


def _running_total(spec: PipelineSpec, store: StatsStore, name: str, frozen: Frozen, plan: RunPlan,
                   partitions: dict[str, Any], new_parts: dict[str, Any], read: list[str],
                   empty: frozenset[str]) -> Any:
    """Step 4: a summed model's total: every kept partition's statistics on a rebuild, else the stored total
    (decayed under ``refit: forgetting``) + the new partitions − those removed, at the weight they have now."""
    if plan.rebuild:
        return sum(store.load(partitions[f]["stats"][name]) for f in sorted(partitions) if f not in empty)
    total = store.load(frozen.models[name]["total"])
    decay = spec.refit.factor if spec.refit.policy == "forgetting" else 1.0
    if decay != 1.0:  # every earlier partition's weight falls by the factor each run
        total = total.scaled(decay)
    for f in read:
        total = total + store.load(new_parts[f]["stats"][name])
    for f in plan.removed:  # at the weight it has now (an empty partition has none)
        if name in plan.old_parts[f]["stats"]:
            weight = decay ** (plan.run - plan.old_parts[f]["run"])
            total = total - store.load(plan.old_parts[f]["stats"][name]).scaled(weight)
    return total


def _solve_version(spec: PipelineSpec, store: StatsStore, frozen: Frozen, m: Any, plan: RunPlan,
                   partitions: dict[str, Any], new_parts: dict[str, Any], read: list[str], empty: frozenset[str],
                   with_rows: list[str], fmt: str | None, date: str, heldout: dict[str, Any] | None = None,
                   new: list[str] | None = None) -> str:
    """Step 5 for model ``m``: solved from its running total (stored), or refitted on the rows of every kept
    partition with the frozen draw (a model without additive statistics); its anomaly threshold learned on the
    run's pilot rows; written as a new, unpublished version, its run info in the manifest's record, with its
    health (:mod:`tgpflow.pipeline.health`; ``heldout``: the previous version's log-likelihood on the run's new
    partitions) and the drift verdicts of the run's ``new`` partitions (those it had not read before). Returns the
    version."""
    name, est, columns, pre = m.name, frozen.estimators[m.name], frozen.columns, frozen.preprocess
    record = frozen.models[name]
    listed: list[str] = []  # the fit's health warnings: said after the commit, naming the version
    with held_fit_warnings(listed):
        if m.refits_from_rows():  # no statistics: the rows of every partition kept, with the frozen draw
            with phase("refit-rows", model=name, partitions=len(partitions)):
                est.fit(union_source(spec, sorted(f for f in partitions if f in with_rows), columns, fmt),
                        features=est.draw_, scaling=Scaling.from_dict(pre))
            rows = est.n_samples_seen_
        else:
            total = _running_total(spec, store, name, frozen, plan, partitions, new_parts, read, empty)
            record["total"] = store.save(total, f"totals/{name}-{plan.run:06d}.zarr")
            est.fit_from_stats(total)  # its diagnostics measure the mass outside the plan's box: the run's pilot rows
            rows = total.n
        listed.extend(version_health(est, None, None)["warnings"])
    threshold = None
    if spec.outputs.scores is not None and hasattr(est, "calibrate_threshold"):  # the version flags what the
        # pipeline flags (tgpflow score MODELDIR): on −log p of the run's pilot rows, raw (the model carries its
        # standardization)
        import pandas as pd

        quantile = spec.outputs.scores.threshold_quantile
        est.calibrate_threshold(pd.DataFrame(threshold_rows(np.asarray(frozen.pilot_rows), quantile), columns=columns),
                                quantile)
        threshold = est.anomaly_threshold_
    pilot, floor = pilot_loglik(est, frozen.pilot_rows)
    record["info"] = {"health": version_health(est, None if pilot is None else pilot.mean, heldout),
                      "loglik_floor": floor, "pilot_loglik_sums": None if pilot is None else pilot.to_dict(),
                      "store": absolute(store.root),  # where `tgpflow report MODELDIR` finds the drift sums
                      "drift": {f: new_parts[f]["drift"]["verdict"] for f in new or []
                                if (new_parts[f].get("drift") or {}).get("verdict") is not None},
                      "run": plan.run, "date": date, "rows": float(rows), "partitions": sorted(partitions),
                      "preprocess": pre, "columns": columns, "anomaly_threshold": threshold,
                      # the rows the model describes: `tgpflow score MODELDIR` applies the same filters
                      "filters": [list(f) for f in spec.source.filters] if spec.source.filters else None,
                      "threshold_of": "anomaly_score", "policy": spec.refit.policy,
                      "threshold_quantile": spec.outputs.scores.threshold_quantile if spec.outputs.scores else None,
                      # score files hold log p − log Z (model_log_normalizer): comparable across versions
                      "log_normalizer": model_log_normalizer(est),
                      "log_normalizer_se": None if getattr(est, "normalizer_", None) is None
                      else float(est.normalizer_.std_error)}  # published after the commit (the journal)
    record["version"] = ModelVersions(as_path(spec.outputs.models) / name).write(est)
    return record["version"]


def _commit(spec: PipelineSpec, store: StatsStore, frozen: Frozen, plan: RunPlan, parts: Partitions,
            partitions: dict[str, Any], versions: dict[str, str], dropped: dict[str, dict[str, int]],
            empty: frozenset[str], owed: dict[str, list[str]], read: list[str], date: str,
            previous: dict[str, Any], progress: Progress | None, drift_entry: dict[str, Any],
            new: list[str]) -> RunResult:
    """Step 6: swap the store's manifest (the commit point, with the journal of the steps that follow), collect
    what it replaced, finish those steps (publish, score, report), and say what the run did."""
    added = plan.added
    new_manifest = {"schema": MANIFEST_SCHEMA, "name": spec.name, "run": plan.run, "date": date,
                    "columns": frozen.columns,
                    "root": parts.root,  # what the keys were relative to at this run (for people: keys never use it)
                    "format": parts.format,  # the partitions' (the steps after the commit read them as found)
                    "preprocess": frozen.preprocess, "preprocess_spec": spec.preprocess.model_dump(),
                    "policy": spec.refit.policy,
                    "bounds_in": "data",  # the models' bounds are in the data's units (before: standardized)
                    "models": frozen.models, "partitions": partitions, "drift": drift_entry,
                    "steps": steps_after_commit(spec, frozen.estimators, versions, read, previous),
                    "updated": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")}
    store.write_manifest(new_manifest)  # the commit point
    collect(spec, store, new_manifest)  # the totals and draws it replaced
    done = finish(spec, new_manifest, progress=progress)
    rows = {name: ModelVersions(as_path(spec.outputs.models) / name).info()["rows"] for name in versions}
    rows_dropped = {name: sum(dropped[f][name] for f in added) for name in versions}
    if set(added) & empty:
        logger.info("%s: partition(s) with zero rows, committed without statistics or scores: %s", spec.name,
                    sorted(set(added) & empty))
    logger.info("%s: run %d added %d and removed %d partition(s); rows dropped %s; models %s", spec.name, plan.run,
                len(added), len(plan.removed), rows_dropped, versions)
    step = new_manifest["steps"]["scores"]
    health = {name: frozen.models[name]["info"]["health"] for name in versions}
    drifted = {f: drift_summary(partitions[f]["drift"]["verdict"]) for f in new
               if (partitions[f].get("drift") or {}).get("verdict") is not None}
    unhealthy, drift_said = _health_lines(health, versions), drift_lines(drifted)
    for line in drift_said:
        logger.warning("%s: %s", spec.name, line)
    say_version_warnings(spec.name, unhealthy)
    return RunResult(changed=True, added=added, removed=plan.removed, run=plan.run, versions=versions, rows=rows,
                     rows_dropped=rows_dropped, empty=sorted(set(added) & empty),
                     scored_with=None if step is None else {k: step[k] for k in ("model", "version", "scored_with")},
                     scored=owed["scored"] + done["scored"],
                     anomaly_rates=owed["anomaly_rates"] + done["anomaly_rates"],
                     health=health, drift=drifted,
                     reports=owed["reports"] + done["reports"],
                     warnings=owed["warnings"] + done["warnings"] + unhealthy + drift_said)


def _health_lines(health: dict[str, dict[str, Any]], versions: dict[str, str]) -> list[str]:
    """One line per warning of each new version's fit."""
    return [f"model {name} {versions[name]}: {w}" for name, h in health.items() for w in h["warnings"]]


def _owed_message(owed: dict[str, list[str]]) -> str:
    """What a run finished for the last one, in words ("nothing to do" when nothing)."""
    parts = [f"published {', '.join(owed['published'])}" if owed["published"] else "",
             f"scored {len(owed['scored'])} partition(s)" if owed["scored"] else "",
             f"wrote {len(owed['reports'])} report(s)" if owed["reports"] else ""]
    done = "; ".join(p for p in parts if p)
    return f"finished what the last run left undone: {done}" if done else "nothing to do"


def _check_scoring_model(spec: PipelineSpec) -> None:
    """Refuse, before any work, a scores model that has no log density (a ScoreEstimator)."""
    if spec.outputs.scores is None:
        return
    name = spec.outputs.scores.model or spec.models[0].name
    model = next(m for m in spec.models if m.name == name)
    if not hasattr(model.estimator_class(), "log_density"):
        raise TgpflowError(f"model {name!r} is a {model.estimator}: it has no log density to score with; name a density "
                           f"in outputs.scores.model")


def _total_counts(counts: list[tuple[int, int]]) -> tuple[int, int]:
    return sum(k for k, _ in counts), sum(d for _, d in counts)


def _check_dropped(spec: PipelineSpec, added: list[str], names: list[str], counts: tuple[Any, ...], columns: list[str],
                   fmt: str | None, parts: Partitions, ests: dict[str, Any]
                   ) -> tuple[dict[str, dict[str, int]], dict[str, int]]:
    """Rows each model dropped from each new partition ({partition: {model: n}}), and the rows each partition
    kept (for the model that kept most; a summed model's statistics count its own); a partition that lost more than
    ``source.max_dropped_fraction`` of its rows for any model fails the run before anything is committed, naming
    the partition, the model and the count, and the first bad chunk's columns (read again under
    ``on_bad_rows: raise``, which names them)."""
    out: dict[str, dict[str, int]] = {}
    rows: dict[str, int] = {}
    limit = spec.source.max_dropped_fraction
    for i, f in enumerate(added):
        out[f] = {}
        for j, name in enumerate(names):
            kept, dropped = counts[i * len(names) + j]
            out[f][name] = int(dropped)
            rows[f] = max(rows.get(f, 0), int(kept))
            total = kept + dropped
            if dropped and dropped > limit * total:
                first = _first_bad_chunk(spec, f, columns, fmt, parts, ests[name])
                raise TgpflowError(f"{f}: model {name!r} would drop {dropped} of its {total} rows "
                                   f"({dropped / total:.1%}, more than source.max_dropped_fraction = {limit:g}); "
                                   f"{first}fix the data or the model's bounds, or raise source.max_dropped_fraction")
    return out, rows


def _first_bad_chunk(spec: PipelineSpec, key: str, columns: list[str], fmt: str | None, parts: Partitions,
                     est: Any) -> str:
    """What the first chunk with bad rows of partition ``key`` says of them under ``on_bad_rows: raise``."""
    strict = spec.model_copy(update={"source": spec.source.model_copy(update={"on_bad_rows": "raise"})})
    src = est.fitting_source(partition_source(strict, key, columns, fmt, parts.ranges.get(key)))
    for block in src.blocks():
        try:
            dask.compute(block, scheduler="sync")
        except Exception as exc:  # noqa: BLE001 - the chunk's own error names its columns and counts
            said = str(exc).split("; clean the data")[0].split(". A log/logit transform")[0]  # not its advice
            return f"the first: {said}; "
    return ""
