"""What a committed run still owes, how a rerun finishes it, and what a killed run left to collect.

A run commits by swapping the store's manifest (:mod:`tgpflow.pipeline.store`). The manifest it
commits is also the run's journal of the steps after that point:

* **publish** — for each model, the version (``models.<name>.version``) and its run info
  (``models.<name>.info``): :meth:`ModelVersions.publish` writes the info, then ``CURRENT``;
* **scores** — ``steps.scores``: the directory (the spec's, with the run's ``{date}``), the model
  and version that score, and the partitions the run added; one Parquet file per partition, named
  by :func:`score_name`;
* **reports** — ``steps.reports``: the directory and the GP-tilted models' versions.

Nothing records that a step is done: a step is done when its output is on disk — a published
version, a score file whose ``tgpflow.partition`` is the partition's fingerprint (or, the first run
after a store's keys became relative, its fingerprint before: ``fingerprints_before``), a report
directory. :func:`finish` runs at the start of every run (before it looks for new partitions)
and after its commit, does what is missing and rewrites nothing that is there: a run killed
anywhere is completed by the next run, and each output is written once.

:func:`collect` removes what a killed run left uncommitted: statistics the manifest does not
reference, unpublished model versions, and writers' temporaries (the next run calls it, and
``tgpflow gc`` through :func:`collect_pipeline`). It deletes tgpflow's own files only.
"""

from __future__ import annotations

import logging
from pathlib import PurePosixPath
from typing import Any

import numpy as np

from tgpflow.core.engine import Progress, compute
from tgpflow.errors import TgpflowError
from tgpflow.io.atomic import AnyPath, as_path, atomic_path, remove_temporaries
from tgpflow.io.outputs import output_kind
from tgpflow.models.anomaly import model_log_normalizer, score_table
from tgpflow.pipeline.discover import split_key
from tgpflow.pipeline.partitions import partition_context, partition_source, union_source
from tgpflow.pipeline.spec import PipelineSpec
from tgpflow.pipeline.store import StatsStore
from tgpflow.pipeline.versions import ModelVersions

__all__ = ["steps_after_commit", "finish", "collect", "collect_pipeline", "score_name"]

logger = logging.getLogger("tgpflow")

#: A scored partition whose anomaly rate is above this many times the threshold's quantile is warned about (the
#: rate of rows like the training rows is about the quantile; a binomial count over the partition rarely triples it).
ANOMALY_RATE_FACTOR = 5.0


def _versions(spec: PipelineSpec, name: str) -> ModelVersions:
    return ModelVersions(as_path(spec.outputs.models) / name)


def score_name(partition: str, coordinate: str | None = None) -> str:
    """The score file of partition key ``partition``: ``p001.parquet`` for ``p001.parquet`` or ``p001.zarr`` (a
    key in the root itself: the name it always had), ``day=1__part-0.parquet`` for ``day=1/part-0.parquet``
    (a nested key: its directories joined by ``__``, so that ``day=*/part-0.parquet`` gets one file per
    day). A legacy absolute key, or one outside the root, keeps its stem, as before keys were relative.
    A date of a store with a date dimension (``coordinate``: ``source.partition_by``) gets one file per date:
    ``data#date=2026-11-01.parquet`` for ``data.zarr#date=2026-11-01`` (a ``/`` in the date as ``_``)."""
    split = split_key(partition, coordinate) if coordinate is not None else None
    if split is not None:
        stem = score_name(split[0]).removesuffix(".parquet")
        return f"{stem}#{coordinate}={split[1].replace('/', '_')}.parquet"
    path = PurePosixPath(partition)
    if partition.startswith("/") or "://" in partition or len(path.parts) == 1:
        return f"{path.stem}.parquet"
    return "__".join((*path.parent.parts, f"{path.stem}.parquet"))


def _score_target(directory: AnyPath, partition: str, coordinate: str | None) -> Any:
    return as_path(directory) / score_name(partition, coordinate)


def steps_after_commit(spec: PipelineSpec, ests: dict[str, Any], versions: dict[str, str],
                       added: list[str], previous: dict[str, str | None] | None = None) -> dict[str, Any]:
    """The journal's ``steps`` for a run that wrote ``versions`` of ``ests`` and added ``added``. The new partitions
    are scored with the version that was current before the run (``previous``; ``scores.version: previous``, the
    default: a detector should not learn an anomaly before it flags it), or with the new one (``current``, and on
    a first run, when there is no previous version: ``scored_with`` says which)."""
    steps: dict[str, Any] = {"scores": None, "reports": None}
    cfg = spec.outputs.scores
    if cfg is not None and added:
        name = cfg.model or spec.models[0].name
        before = (previous or {}).get(name)
        version, which = ((before, "previous") if cfg.version == "previous" and before is not None
                          else (versions[name], "current" if cfg.version == "current"
                                else "current: there is no previous version"))
        steps["scores"] = {"path": cfg.path, "model": name, "version": version, "scored_with": which,
                           "partitions": sorted(added)}
    if spec.outputs.report:
        reported = {}
        for name, est in ests.items():
            if type(est).__name__ == "GPTiltedDensity":
                reported[name] = versions[name]
            else:
                logger.info("report: %s is a %s; reports cover GP-tilted densities", name, type(est).__name__)
        steps["reports"] = {"path": spec.outputs.report, "models": reported} if reported else None
    return steps


def finish(spec: PipelineSpec, manifest: dict[str, Any] | None, *,
           progress: Progress | None = None) -> dict[str, list[Any]]:
    """Do what the run that committed ``manifest`` left undone: publish, score, report (module docstring);
    the scoring computes report to ``progress`` (:data:`tgpflow.core.engine.Progress`). ``warnings``: one line
    for each scored partition whose anomaly rate is more than :data:`ANOMALY_RATE_FACTOR` times the threshold's
    quantile (logged too); ``anomaly_rates``: per partition scored, its rows and the share flagged."""
    done: dict[str, list[Any]] = {"published": [], "scored": [], "reports": [], "warnings": [], "anomaly_rates": []}
    if manifest is None:
        return done
    for name, model in manifest["models"].items():
        vers = _versions(spec, name)
        version = model.get("version")
        if version is None or (vers.current() == version and version in vers.list()):
            continue
        if "info" in model:
            vers.publish(version, model["info"])
        elif version in vers.on_disk():  # a manifest written before the journal: its run info is on disk
            vers.publish(version, vers.info(version))
        done["published"].append(name)
    steps = manifest.get("steps") or {}
    if steps.get("scores"):
        done["scored"], done["warnings"], done["anomaly_rates"] = _score(spec, manifest, steps["scores"], progress)
    if steps.get("reports"):
        done["reports"] = _report(spec, manifest, steps["reports"])
    return done


def _score(spec: PipelineSpec, manifest: dict[str, Any], step: dict[str, Any],
           progress: Progress | None = None) -> tuple[list[str], list[str], list[dict[str, Any]]]:
    """Per partition: raw-row log density, anomaly score (−log p) and anomaly flag, one Parquet file each, atomic,
    written once; returns the files, the warnings, and each partition's rows and anomaly rate."""
    import dask
    import pyarrow as pa
    import pyarrow.parquet as pq

    parts = manifest["partitions"]
    directory = as_path(step["path"])
    coord = spec.source.partition_by
    remove_temporaries(directory, [_score_target(directory, f, coord).name for f in step["partitions"]])
    before = step.get("fingerprints_before") or {}  # a store migrated to relative keys (discover.migrate_keys)
    todo = [f for f in step["partitions"]
            if not _scored(_score_target(directory, f, coord), parts[f]["fingerprint"], before.get(f))]
    if not todo:
        return [], [], []
    vers = _versions(spec, step["model"])
    est, info = vers.load(step["version"]), vers.info(step["version"])
    if not hasattr(est, "log_density"):
        raise TgpflowError(f"model {step['model']!r} has no log density to score with")
    # the columns of the version that scores (a previous version may predate a rebuild that changed them)
    names = getattr(est, "feature_names_in_", None)
    columns = [str(c) for c in names] if names is not None else info.get("columns") or manifest["columns"]
    directory.mkdir(parents=True, exist_ok=True)
    written: list[str] = []
    warned: list[str] = []
    rates: list[dict[str, Any]] = []
    for f in todo:
        # chunk by chunk on the scheduler: the version's log density of the raw rows (it carries the store's
        # standardization and its bounds in the data's units); only the scores come back
        src = partition_source(spec, f, columns, manifest.get("format"))
        contexts = partition_context(spec, f, src, spec.outputs.scores.keep_columns if spec.outputs.scores else None,
                                     manifest.get("format"))
        chunk = dask.delayed(score_table, pure=True)
        args = (est.fitted().log_density, _threshold(info), model_log_normalizer(est))
        table = pa.concat_tables(compute(*[chunk(v, c, *args) for v, c in zip(src.chunks(), contexts, strict=True)],
                                         progress=progress))  # `tgpflow score`'s columns
        quantile = info.get("threshold_quantile")
        flagged = np.asarray(table.column("anomaly")) if "anomaly" in table.column_names else None
        rates.append({"partition": f, "rows": table.num_rows,
                      "anomaly_rate": float(flagged.mean()) if flagged is not None and flagged.size else None})
        if flagged is not None and quantile and flagged.size and flagged.mean() > ANOMALY_RATE_FACTOR * quantile:
            warned.append(f"{f}: {flagged.mean():.2%} of its {flagged.size} rows are flagged anomalous by "
                          f"{step['model']} {step['version']}, more than {ANOMALY_RATE_FACTOR:g}x its "
                          f"threshold_quantile {quantile:g}: the partition differs from the rows the model was fitted on, or the model "
                          f"fits them badly (tgpflow info {_versions(spec, step['model']).root})")
            logger.warning("%s", warned[-1])
        table = table.replace_schema_metadata({"tgpflow.output": "scores", "tgpflow.partition": parts[f]["fingerprint"],
                                               "tgpflow.normalized": str(model_log_normalizer(est) is not None).lower(),
                                               "tgpflow.model_version": step["version"], "tgpflow.source": f})
        target = _score_target(directory, f, coord)
        with atomic_path(target, "scores") as tmp, tmp.open("wb") as fh:
            pq.write_table(table, fh)
        written.append(str(target))
    return written, warned, rates


def _threshold(info: dict[str, Any]) -> float:
    """The version's threshold on the anomaly score −log p (:func:`~tgpflow.models.anomaly.is_anomalous`). A run
    info written before the threshold was the estimators' (no ``threshold_of``) holds a log-density quantile that
    flagged ``log p < t``, i.e. ``−log p > −t``."""
    threshold = info["anomaly_threshold"]
    return threshold if info.get("threshold_of") == "anomaly_score" else -threshold


def _scored(target: Any, fingerprint: str, before: str | None = None) -> bool:
    """Whether ``target`` holds the scores of the partition content ``fingerprint`` (or ``before``: its
    fingerprint under its key before the keys were relative — the same content)."""
    if not target.exists():
        return False
    import pyarrow.parquet as pq

    try:
        with target.open("rb") as fh:
            md = pq.read_schema(fh).metadata or {}
    except Exception:  # noqa: BLE001 - not a Parquet file: not our scores (atomic_path will refuse it)
        return False
    return md.get(b"tgpflow.partition") in {fingerprint.encode(), (before or fingerprint).encode()}


def _report(spec: PipelineSpec, manifest: dict[str, Any], step: dict[str, Any]) -> list[str]:
    """``tgpflow report`` of each listed GP-tilted version on the committed partitions; once per version."""
    from tgpflow.pipeline.report import write_report

    written, source = [], None
    for name, version in step["models"].items():
        out = as_path(step["path"]) / name / version
        remove_temporaries(out.parent, [version])
        if output_kind(out) == "report":
            continue
        if source is None:  # reads every partition's metadata: once, and only when a report is owed
            source = union_source(spec, sorted(manifest["partitions"]), manifest["columns"], manifest.get("format"))
        write_report(_versions(spec, name).load(version), source, out)
        written.append(str(out))
    return written


def collect(spec: PipelineSpec, store: StatsStore, manifest: dict[str, Any] | None, *,
            dry_run: bool = False) -> list[str]:
    """Remove what no committed manifest references (module docstring); returns the paths."""
    removed = store.collect_garbage(manifest, dry_run=dry_run)
    models = manifest["models"] if manifest is not None else {}
    for name in sorted({m.name for m in spec.models} | set(models)):
        removed += _versions(spec, name).remove_unpublished(models.get(name, {}).get("version"), dry_run=dry_run)
    step = ((manifest or {}).get("steps") or {}).get("scores")
    if step:
        directory = as_path(step["path"])
        names = [_score_target(directory, f, spec.source.partition_by).name for f in step["partitions"]]
        removed += remove_temporaries(directory, names, dry_run=dry_run)
    return removed


def collect_pipeline(spec: PipelineSpec, *, dry_run: bool = False) -> list[str]:
    """``tgpflow gc``: :func:`collect` under the store's lock; the store must exist (it is never created)."""
    from tgpflow.io.storage import storage_config

    with storage_config(spec.storage_options):
        store = StatsStore(spec.outputs.store)
        if not (store.root / "zarr.json").is_file():
            raise TgpflowError(f"{store.root}: no statistics store here (outputs.store of the spec); nothing to "
                               f"collect")
        with store.lock(spec.lock_timeout):
            return collect(spec, store, store.read_manifest(), dry_run=dry_run)
