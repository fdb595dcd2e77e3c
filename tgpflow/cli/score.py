"""``tgpflow score``: stream a source through a model and write each row's log density and anomaly score."""

from __future__ import annotations

from typing import Any

import click

from tgpflow.cli.app import (bad_rows_option, check_model_path, check_out, check_source, columns_option, load_model,
                             main, overwrite_option, progress_option, runtime_errors, scheduler_options, split_columns)
from tgpflow.cli.human import score_lines
from tgpflow.cli.output import emit
from tgpflow.cluster import progress_display


@main.command(short_help="Each row's log density and anomaly score.")
@click.argument("model")
@click.argument("source")
@click.option("--out", required=True, help="Output Parquet dataset (a directory; a path or an fsspec URL), written "
              "atomically. Off the local filesystem the data is the version its pointer names: printed as \"data\".")
@overwrite_option
@columns_option
@click.option("--keep-columns", default=None, metavar="A,B",
              help="Columns of SOURCE (Parquet; any type, e.g. an id and a timestamp) written beside each row's "
                   "scores, to join them back.")
@click.option("--no-filters", is_flag=True, help="MODEL is a pipeline's model directory: score every row of SOURCE, "
                                                 "not only those its spec's source.filters keep (the default, as "
                                                 "the pipeline scored them).")
@scheduler_options
@bad_rows_option
@progress_option
def score(model: str, source: str, out: str, overwrite: bool, columns: str | None, keep_columns: str | None,
          no_filters: bool, scheduler: str | None, on_bad_rows: str, progress_mode: str) -> None:
    """Stream SOURCE through MODEL and write, per row, its position in SOURCE (row), the --keep-columns, the log
    density (normalised: the model's log density minus its log normaliser, so that scores of different models and
    versions compare — in Python est.log_density(X, normalized=True); unnormalised for a model without one), the
    anomaly score (−log density: larger is more anomalous) and, when the model learned a threshold at fit time,
    the anomaly flag (anomaly score above the threshold printed with --json), as Parquet. Rows dropped by
    --on-bad-rows drop have no line."""
    import dask

    from tgpflow.cluster import dask_client
    from tgpflow.core.engine import compute
    from tgpflow.errors import SourceError
    from tgpflow.io.atomic import atomic_path, is_local, resolve
    from tgpflow.io.row_context import row_context
    from tgpflow.io.sources import as_source
    from tgpflow.models.anomaly import model_log_normalizer, score_table, score_threshold

    check_out(out, "scores", overwrite)
    check_model_path(model)
    check_source(source)
    with runtime_errors():
        est = load_model(model)
        if not hasattr(est, "log_density"):
            raise click.ClickException(f"{model}: a {type(est).__name__} estimates a score, not a density; "
                                       f"it has no log density to write")
        names = getattr(est, "feature_names_in_", None)
        cols = split_columns(columns) or ([str(c) for c in names] if names is not None else None)
        filters = None if no_filters else _pipeline_filters(model, source)
        try:
            src = as_source(source, columns=cols, on_bad_rows=on_bad_rows, filters=filters)
        except SourceError as exc:  # the model's own columns, missing: say so, and how to map others onto them
            if columns or names is None or "missing column" not in str(exc):
                raise
            raise SourceError(f"{exc}; {model} was fitted on {[str(c) for c in names]}: rename the source's columns, "
                              f"or give --columns the source's columns in the model's order") from exc
        if src.n_columns != est.n_features_in_:
            raise click.ClickException(f"{source}: X has {src.n_columns} features, but {model} (a "
                                       f"{type(est).__name__}) is expecting {est.n_features_in_} features as input; "
                                       f"give --columns the model's columns, in its order")
        contexts = row_context(source, src, split_columns(keep_columns), filters=filters)
        work = float(src.n_rows or 0) * getattr(est, "n_features", 0) ** 2 if src.n_rows is not None else None
        with dask_client(scheduler, work=work) as client, progress_display(progress_mode, client) as progress, \
                atomic_path(out, "scores", overwrite=overwrite, marker=True, directory=True) as tmp:
            # one Parquet file per chunk, written by the task that scores it (its length is known only once
            # read when bad rows may be dropped); pyarrow directly (no dask.dataframe import: 0.25 s here)
            tmp.mkdir(parents=True, exist_ok=True)
            # the filesystem's options as made (those fsspec's configuration gave it, e.g. --storage-option, too):
            # the workers open the files themselves
            options = None if is_local(tmp) else dict(tmp.fs.storage_options)
            table = dask.delayed(score_table, pure=True)
            write = dask.delayed(_write_scores, pure=True)
            args = (est.fitted().log_density, getattr(est, "anomaly_threshold_", None), model_log_normalizer(est))
            tables = [table(v, c, *args) for v, c in zip(src.chunks(), contexts, strict=True)]
            # every chunk scored before any is written: a bad chunk's error ends the compute while other tasks
            # still run, and a write landing after the atomic output's cleanup left a file behind (4 in 150)
            scored = dask.delayed(sum, pure=True)([dask.delayed(_rows_of, pure=True)(t) for t in tables])
            parts = [write(t, f"{tmp}/{_part_name(i, src.n_chunks)}", options, scored) for i, t in enumerate(tables)]
            written, dropped = compute(parts, dask.delayed(sum, pure=True)(src.dropped_counts()), progress=progress)
        info = {"scores": out, "model": model, "source": source, "rows": sum(r for r, _ in written),
                "flagged": None if args[1] is None else sum(f for _, f in written),
                "rows_dropped": int(dropped), "normalized": model_log_normalizer(est) is not None,
                "threshold": score_threshold(est), "filters": filters}
        data = resolve(out)
        if not is_local(data):  # off the local filesystem the dataset is the version its pointer names
            info["data"] = str(data)
        emit(info, score_lines)


def _pipeline_filters(model: str, source: str) -> list[tuple[str, str, Any]] | None:
    """The row filters of the pipeline run that wrote ``model`` (a model directory: its current version; or one
    version, ``<dir>/vNNNNNN.zarr``; None for another model file, or a version written before run infos recorded
    them); refused, naming the column and ``--no-filters``, when SOURCE lacks a column they filter on."""
    import re

    from tgpflow.io.parquet import ParquetLayout
    from tgpflow.pipeline.versions import ModelVersions, is_versions_dir

    path = model.rstrip("/")
    version = re.fullmatch(r"(.*)/(v\d{6})\.zarr", path)  # one version of a model directory: its own run info
    if version and is_versions_dir(version[1]) and version[2] in ModelVersions(version[1]).list():
        info = ModelVersions(version[1]).info(version[2])
    elif is_versions_dir(path):
        info = ModelVersions(path).info()
    else:
        return None
    filters = [tuple(f) for f in info.get("filters") or []]
    if filters:
        names = ParquetLayout(source, None, numeric=False).columns
        missing = [c for c, _, _ in filters if c not in names]
        if missing:
            raise click.ClickException(f"{source}: has no column {missing[0]!r}, which the pipeline that wrote "
                                       f"{model} filters its rows on (source.filters {[list(f) for f in filters]}); "
                                       f"to score every row of SOURCE, pass --no-filters")
    return filters or None


def _part_name(i: int, n: int) -> str:
    """The file of chunk ``i`` of ``n`` in a scores dataset: zero-padded, so that name order is row order."""
    return f"part.{i:0{max(len(str(n - 1)), 5)}d}.parquet"


def _rows_of(table: Any) -> int:
    return int(table.num_rows)


def _write_scores(table: Any, path: str, storage_options: dict[str, Any] | None,
                  after: Any = None) -> tuple[int, int]:
    """Write one chunk's scores table (:func:`~tgpflow.models.anomaly.score_table`) to ``path``; returns its rows and
    how many of them are flagged as anomalies (0 without a threshold). ``after``: a task this write waits for (every
    chunk scored)."""
    import fsspec
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    with fsspec.open(path, "wb", **(storage_options or {})) as fh:
        pq.write_table(table, fh)
    flagged = pc.sum(table["anomaly"]).as_py() if "anomaly" in table.column_names else 0
    return int(table.num_rows), int(flagged or 0)
