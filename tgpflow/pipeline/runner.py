"""``tgpflow run SPEC``: one scheduled refit — incremental, windowed or full — and its scoring job.

A run (under the store's lock):

1. lists the source's partitions (Parquet files) and fingerprints them;
2. on the store's first run (or ``refit: full``) freezes the preprocessing (centre/scale from
   a pilot sample) and each model's feature draw / basis, and stores them: every later
   partition's statistics use the same ones, so they stay mergeable;
3. accumulates the statistics of the partitions it has not seen (new or changed) — one Dask
   graph for all of them, one pass over each — and writes them to the store;
4. updates each model's running total: ``total + new − (changed, disappeared, left the window)``;
   the old partitions are never re-read;
5. solves each model from its total, writes a new model version and, after the store's
   manifest swap (the commit point), swaps the ``CURRENT`` pointer;
6. scores the new partitions (per-row log density of the raw rows and an anomaly flag below
   the ``threshold_quantile`` of the training log density), one Parquet file per partition,
   each written atomically, so a rerun resumes.

A rerun with no new or changed partitions changes nothing and says so (and repairs a
``CURRENT`` pointer that a crash left behind the manifest). Fault points for tests are named
by the environment variable ``TGPFLOW_FAULT`` (``after_parts``, ``before_manifest``).
"""

from __future__ import annotations

import datetime
import logging
import os
from pathlib import Path
from typing import Any

import dask
import numpy as np

from tgpflow.errors import TgpflowError
from tgpflow.features.bounds import ColumnBounds
from tgpflow.features.nystrom import NystromBasis
from tgpflow.features.rff import RandomFourierFeatures
from tgpflow.io.parquet import list_parquet_files
from tgpflow.io.pilot import pilot_sample
from tgpflow.io.sources import Source, as_source
from tgpflow.logs import phase
from tgpflow.pipeline.spec import PipelineSpec
from tgpflow.pipeline.store import MANIFEST_SCHEMA, StatsStore, partition_fingerprint
from tgpflow.pipeline.versions import ModelVersions
from tgpflow.stats.reduce import compute, tree_reduce
from tgpflow.stats.projections import ProjectionGrid
from tgpflow.stats.support import SupportBox

__all__ = ["run_pipeline", "RunResult"]

logger = logging.getLogger("tgpflow")


def _fault(point: str) -> None:
    if os.environ.get("TGPFLOW_FAULT") == point:  # test hook: die here as a killed job would
        os._exit(137)


class RunResult(dict):
    """What a run did (a dict: changed, added, removed, rows, versions, scored, …)."""


def _estimator(model_spec: Any) -> Any:
    import tgpflow

    est = getattr(tgpflow, model_spec.estimator)()
    est.set_params(**model_spec.params)
    return est


def _draw_arrays(est: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    if hasattr(est, "features_"):
        arrays = dict(est.features_.to_arrays())
        if hasattr(est, "noise_levels_"):
            arrays["noise_levels"] = np.asarray(est.noise_levels_)
        if getattr(est, "heldout_grid_", None) is not None:  # a held-out selection's projection grid
            arrays.update({f"heldout.{k}": v for k, v in est.heldout_grid_.to_arrays().items()})
        return arrays, {"type": "rff", "seed": est.features_.seed, "fingerprint": est.features_.fingerprint}
    return dict(est.basis_.to_arrays()), {"type": "nystrom", "kernel": est.basis_.kernel_name,
                                          "fingerprint": est.basis_.fingerprint}


def _restore_draw(est: Any, arrays: dict[str, Any], meta: dict[str, Any], columns: list[str]) -> None:
    if meta["type"] == "rff":
        est.features_ = RandomFourierFeatures.from_arrays(arrays, seed=meta.get("seed"))
        if "noise_levels" in arrays:
            est.noise_levels_ = np.asarray(arrays["noise_levels"], dtype=np.float64)
        grid = {k.split(".", 1)[1]: v for k, v in arrays.items() if k.startswith("heldout.")}
        if grid:
            est.heldout_grid_ = ProjectionGrid.from_arrays(grid)
        if hasattr(est, "bounds"):
            est.bounds_ = ColumnBounds.from_param(est.bounds, columns)
    else:
        est.basis_ = NystromBasis.from_arrays(arrays, meta["kernel"])
    est.n_features_in_ = len(columns)
    est.feature_names_in_ = np.asarray(columns, dtype=object)


def _preprocessor(pre: dict[str, Any] | None) -> Any:
    if not pre:
        return None
    center, scale = np.asarray(pre["center"]), np.asarray(pre["scale"])
    return lambda x: (x - center) / scale


def _partition_source(spec: PipelineSpec, path: str, columns: list[str] | None, pre: dict[str, Any] | None) -> Source:
    src = as_source(path, columns=columns, on_bad_rows=spec.source.on_bad_rows,
                    filters=[tuple(f) for f in spec.source.filters] if spec.source.filters else None)
    fn = _preprocessor(pre)
    return src.map_rows(fn) if fn is not None else src


def _union_source(spec: PipelineSpec, files: list[str], columns: list[str] | None, pre: dict[str, Any] | None) -> Source:
    """All partitions as one source (for the pilot that freezes preprocessing and draws)."""
    import dataclasses

    parts = [_partition_source(spec, f, columns, pre) for f in files]
    first = parts[0]
    return dataclasses.replace(first, description=spec.source.path,
                               labels=tuple(lb for p in parts for lb in p.labels),
                               sizes=tuple(s for p in parts for s in p.sizes),
                               _validated=tuple(v for p in parts for v in p._validated))


def _freeze_preprocess(spec: PipelineSpec, src: Source, seed: int) -> dict[str, Any] | None:
    if not (spec.preprocess.center or spec.preprocess.scale):
        return None
    rows = pilot_sample(src, rows=100_000, random_state=seed).rows
    d = rows.shape[1]
    center = rows.mean(axis=0) if spec.preprocess.center else np.zeros(d)
    scale = rows.std(axis=0) if spec.preprocess.scale else np.ones(d)
    if np.any(scale <= 0):
        raise TgpflowError(f"{spec.source.path}: a column is constant in the pilot sample; it cannot be scaled")
    return {"center": center.tolist(), "scale": scale.tolist()}


def run_pipeline(spec: PipelineSpec, *, date: str | None = None) -> RunResult:
    """Run one refit of ``spec`` (see the module docstring); returns what it did."""
    store = StatsStore(spec.outputs.store)
    with store.lock(spec.lock_timeout):
        return _run(spec, store, date or datetime.date.today().isoformat())


def _run(spec: PipelineSpec, store: StatsStore, date: str) -> RunResult:
    fs, files = list_parquet_files(spec.source.path)
    if not files:
        raise TgpflowError(f"{spec.source.path}: no Parquet partitions match")
    mode = getattr(spec.source, "fingerprint", "metadata")
    policy = spec.refit.policy
    if policy == "window":
        files = files[-spec.refit.partitions:]
    fps = {f: partition_fingerprint(fs, f, mode) for f in files}
    manifest = store.read_manifest()
    params = {m.name: {"estimator": m.estimator, "params": m.params} for m in spec.models}
    rebuild = manifest is None or policy == "full"
    if manifest is not None and not rebuild:
        old = {k: {"estimator": v["estimator"], "params": v["params"]} for k, v in manifest["models"].items()}
        if old != params:
            raise TgpflowError(f"{store.root}: the spec's models differ from those the store was built with "
                               f"({sorted(old)} vs {sorted(params)} or their params); run once with "
                               f"--set refit.policy=full to rebuild the store")
        if manifest["preprocess_spec"] != spec.preprocess.model_dump():
            raise TgpflowError(f"{store.root}: preprocessing changed since the store was built; rebuild with "
                               f"--set refit.policy=full")
    run = 1 if manifest is None else manifest["run"] + 1
    seed = int(next((m.params.get("random_state", 0) for m in spec.models), 0) or 0)

    # -- what changed --------------------------------------------------------------------
    old_parts = {} if rebuild else manifest["partitions"]
    added = [f for f in files if f not in old_parts or old_parts[f]["fingerprint"] != fps[f]]
    removed = [f for f in old_parts if f not in fps or old_parts[f]["fingerprint"] != fps[f]]
    if manifest is not None and not rebuild and not added and not removed:
        repaired = _repair_pointers(spec, manifest)
        logger.info("%s: no new or changed partitions; nothing to do", spec.name)
        return RunResult(changed=False, added=[], removed=[], run=manifest["run"], repaired=repaired,
                         message="no new or changed partitions; nothing to do")

    # -- frozen preprocessing and draws --------------------------------------------------
    columns = spec.source.columns
    if rebuild:
        probe = as_source(files[0], columns=columns)
        columns = list(probe.columns)
        union = _union_source(spec, files, columns, None)
        pre = _freeze_preprocess(spec, union, seed)
        union = _union_source(spec, files, columns, pre)
        models: dict[str, Any] = {}
        for m in spec.models:
            est = _estimator(m)
            est._prepare(union)
            arrays, meta = _draw_arrays(est)
            models[m.name] = {"estimator": m.estimator, "params": m.params, "columns": columns,
                              "draw": store.save_draw(f"{m.name}-{run:06d}", arrays, meta)}
    else:
        columns, pre = manifest["columns"], manifest["preprocess"]
        models = {k: dict(v) for k, v in manifest["models"].items()}
    ests = {}
    for m in spec.models:
        est = _estimator(m)
        _restore_draw(est, *store.load_draw(models[m.name]["draw"]), columns)
        ests[m.name] = est

    # -- one graph: the statistics of every new partition, for every model ---------------
    with phase("partitions", added=len(added), removed=len(removed), models=len(ests)) as facts:
        roots, dropped = [], []
        for f in added:
            src = _partition_source(spec, f, columns, pre)
            for est in ests.values():
                fn, args, with_keys = est._pass_spec()  # with keys: the hashed split of a held-out selection
                task = dask.delayed(fn, pure=True)
                shared = [dask.delayed(a, pure=True) for a in args]
                model_src = est._bounded(src) if hasattr(est, "_bounded") else src  # bounded columns transformed
                keyed = zip(model_src.blocks(), model_src.row_keys(), strict=True)
                parts = ([task(b, k, *shared) for b, k in keyed] if with_keys
                         else [task(b, *shared) for b in model_src.blocks()])
                roots.append(tree_reduce(parts, 8))
            dropped.append(dask.delayed(sum, pure=True)(src.dropped_counts()))
        results = compute(*roots, *dropped) if added else ()
        facts.update(rows_dropped=int(sum(results[len(roots):])))
    new_parts = {f: {"fingerprint": fps[f], "stats": {}, "run": run} for f in added}
    k = 0
    for f in added:
        for name in ests:
            stats = results[k]
            k += 1
            new_parts[f]["stats"][name] = store.save(stats, f"parts/{fps[f]}/{name}.zarr")
            new_parts[f]["rows"] = int(stats.n)
    _fault("after_parts")

    # -- totals: old + new − removed ----------------------------------------------------
    partitions = {f: old_parts[f] for f in old_parts if f not in removed}
    partitions.update(new_parts)
    versions = {}
    # one bounded pilot read per run, for every model: the rows the anomaly thresholds are learned
    # on, and (preprocessed) the support box the fit diagnostics compare the model's mass with
    pilot_rows = pilot_sample(_union_source(spec, files, columns, None), rows=20_000, random_state=seed).rows
    threshold_rows = pilot_rows if spec.outputs.scores else None
    prep = _preprocessor(pre)
    box = SupportBox.from_rows(prep(pilot_rows) if prep is not None else pilot_rows) if len(pilot_rows) > 1 else None
    for m in spec.models:
        name, est = m.name, ests[m.name]
        if rebuild:
            total = sum(store.load(partitions[f]["stats"][name]) for f in sorted(partitions))
        else:
            total = store.load(models[name]["total"])
            decay = spec.refit.factor if policy == "forgetting" else 1.0
            if decay != 1.0:  # every earlier partition's weight falls by the factor each run
                total = total.scaled(decay)
            for f in added:
                total = total + store.load(new_parts[f]["stats"][name])
            for f in removed:  # at the weight it has now
                total = total - store.load(old_parts[f]["stats"][name]).scaled(decay ** (run - old_parts[f]["run"]))
        models[name]["total"] = store.save(total, f"totals/{name}-{run:06d}.zarr")
        if box is not None and hasattr(est, "features_"):
            est.support_ = box
        est.fit_from_stats(total)
        threshold = _threshold(spec, est, threshold_rows, columns, pre)
        run_info = {"run": run, "date": date, "rows": float(total.n), "partitions": sorted(partitions),
                    "preprocess": pre, "columns": columns, "anomaly_threshold": threshold, "policy": policy,
                    "threshold_quantile": spec.outputs.scores.threshold_quantile if spec.outputs.scores else None}
        vers = ModelVersions(Path(spec.outputs.models) / name)
        models[name]["version"] = versions[name] = vers.write(est, run_info)
    _fault("before_manifest")
    new_manifest = {"schema": MANIFEST_SCHEMA, "name": spec.name, "run": run, "date": date, "columns": columns,
                    "preprocess": pre, "preprocess_spec": spec.preprocess.model_dump(), "policy": policy,
                    "models": models, "partitions": partitions,
                    "updated": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")}
    store.write_manifest(new_manifest)
    for name, version in versions.items():
        ModelVersions(Path(spec.outputs.models) / name).set_current(version)
    store.collect_garbage(new_manifest)
    scored = _score(spec, new_manifest, fs) if spec.outputs.scores else []
    reports = _reports(spec, ests, versions, files, columns, pre) if spec.outputs.report else []
    rows = {name: ModelVersions(Path(spec.outputs.models) / name).info()["rows"] for name in versions}
    logger.info("%s: run %d added %d and removed %d partition(s); models %s", spec.name, run, len(added),
                len(removed), versions)
    return RunResult(changed=True, added=added, removed=removed, run=run, versions=versions, rows=rows, scored=scored,
                     reports=reports)


def _reports(spec: PipelineSpec, ests: dict[str, Any], versions: dict[str, str], files: list[str], columns: list[str],
             pre: dict[str, Any] | None) -> list[str]:
    """``tgpflow report`` of each GP-tilted model on the current (preprocessed) partitions, per version."""
    from tgpflow.pipeline.report import write_report

    written = []
    for name, est in ests.items():
        if type(est).__name__ != "GPTiltedDensity":
            logger.info("report: %s is a %s; reports cover GP-tilted densities", name, type(est).__name__)
            continue
        out = Path(spec.outputs.report) / name / versions[name]
        write_report(est, _union_source(spec, files, columns, pre), out)
        written.append(str(out))
    return written


def _repair_pointers(spec: PipelineSpec, manifest: dict[str, Any]) -> list[str]:
    repaired = []
    for name, model in manifest["models"].items():
        vers = ModelVersions(Path(spec.outputs.models) / name)
        if vers.current() != model.get("version") and model.get("version") in vers.list():
            vers.set_current(model["version"])
            repaired.append(name)
    return repaired


def _raw_log_density(est: Any, x: np.ndarray, pre: dict[str, Any] | None) -> np.ndarray:
    """Log density of raw rows: the model's on the preprocessed rows minus Σ log scale (Jacobian)."""
    if not pre:
        return est.log_density(x)
    scale = np.asarray(pre["scale"])
    return est.log_density((x - np.asarray(pre["center"])) / scale) - float(np.log(scale).sum())


def _threshold(spec: PipelineSpec, est: Any, rows: np.ndarray | None, columns: list[str],
               pre: dict[str, Any] | None) -> float | None:
    if rows is None or not hasattr(est, "log_density"):
        return None
    import pandas as pd

    values = _raw_log_density(est, pd.DataFrame(rows, columns=columns), pre)
    return float(np.quantile(values[np.isfinite(values)], spec.outputs.scores.threshold_quantile))


def _score(spec: PipelineSpec, manifest: dict[str, Any], fs: Any) -> list[str]:
    """Per partition: raw-row log density and anomaly flag, one Parquet file each, atomic, resumable."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from tgpflow.io.atomic import atomic_path

    cfg = spec.outputs.scores
    name = cfg.model or spec.models[0].name
    vers = ModelVersions(Path(spec.outputs.models) / name)
    version = manifest["models"][name]["version"]
    est = vers.load(version)
    info = vers.info(version)
    if not hasattr(est, "log_density"):
        raise TgpflowError(f"model {name!r} has no log density to score with")
    out_dir = Path(cfg.path)
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for f, part in sorted(manifest["partitions"].items()):
        target = out_dir / f"{Path(f).stem}.parquet"
        if target.exists():
            md = pq.read_schema(target).metadata or {}
            if md.get(b"tgpflow.partition") == part["fingerprint"].encode():
                continue  # scored before (resume): the same partition content
        # chunk by chunk on the scheduler: the model's log density of the preprocessed rows,
        # minus Σ log scale, is the density of the raw rows; only the scores come back
        src = _partition_source(spec, f, manifest["columns"], manifest["preprocess"])
        density = dask.delayed(est._evaluator_at(None).log_density, pure=True)
        logp = np.concatenate(compute(*[density(b) for b in src.blocks()]))
        if manifest["preprocess"]:
            logp = logp - float(np.log(np.asarray(manifest["preprocess"]["scale"])).sum())
        table = pa.table({"log_density": logp, "anomaly": logp < info["anomaly_threshold"]})
        table = table.replace_schema_metadata({"tgpflow.output": "scores", "tgpflow.partition": part["fingerprint"],
                                               "tgpflow.model_version": version, "tgpflow.source": f})
        with atomic_path(target, "scores") as tmp:
            pq.write_table(table, tmp)
        written.append(str(target))
    return written
