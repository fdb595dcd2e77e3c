"""``tgpflow run``, ``validate``, ``gc`` and ``schema``: pipeline specs run once, checked, cleaned up, described."""

from __future__ import annotations

import json
import logging
import time

import click

from tgpflow.cli.app import main, progress_option, runtime_errors, scheduler_timeout_option
from tgpflow.cli.human import gc_lines, plan_lines, run_lines, validate_lines
from tgpflow.cli.output import emit
from tgpflow.cluster import progress_display


@main.command()
@click.argument("spec_path", metavar="SPEC", type=click.Path(exists=True, dir_okay=False))
@click.option("--date", default=None, help="Run date substituted for {date} in the spec (default: today).")
@click.option("--set", "overrides", multiple=True, metavar="KEY=VALUE",
              help="Override a spec field before validation, e.g. --set refit.policy=full (repeatable).")
@click.option("--dry-run", is_flag=True, help="Print what the run would read (new, changed, removed partitions), "
                                              "refit and score; write nothing, take no lock, start no cluster.")
@click.option("--fail-on-warning", is_flag=True,
              help="Exit with status 1 (after committing: nothing is lost) when any model's fit warned.")
@click.option("--fail-on-drift", is_flag=True,
              help="Exit with status 1 (after committing) when any new partition drifted (drift.alpha).")
@progress_option
@scheduler_timeout_option
def run(spec_path: str, date: str | None, overrides: tuple[str, ...], dry_run: bool, fail_on_warning: bool,
        fail_on_drift: bool, progress_mode: str) -> None:
    """Run a pipeline spec once: refit from new partitions (incremental/window/full), version, score; say whether
    each new partition drifted and whether each model is healthy (each warning logged on stderr, one line)."""
    from tgpflow.cluster import spec_client
    from tgpflow.pipeline.runner import run_pipeline
    from tgpflow.pipeline.spec import load_spec

    with runtime_errors():
        spec = load_spec(spec_path, date=date, overrides=list(overrides))
        if dry_run:
            emit(dict(run_pipeline(spec, date=date, dry_run=True), spec=spec_path), plan_lines, indent=1)
            return
        t0 = time.perf_counter()
        with spec_client(spec.cluster) as client, progress_display(progress_mode, client) as progress:
            result = run_pipeline(spec, date=date, progress=progress)
        emit(dict(result, spec=spec_path, seconds=round(time.perf_counter() - t0, 2)), run_lines)
    unhealthy = sorted(name for name, h in (result.get("health") or {}).items() if h["warnings"])
    drifted = sorted(key for key, v in (result.get("drift") or {}).items() if v["drifted"])
    if fail_on_warning and unhealthy:
        click.echo(f"failing (--fail-on-warning): the fits of {', '.join(unhealthy)} warned; the run is committed",
                   err=True)
    if fail_on_drift and drifted:
        click.echo(f"failing (--fail-on-drift): {len(drifted)} partition(s) drifted: {', '.join(drifted)}; the run "
                   f"is committed", err=True)
    if (fail_on_warning and unhealthy) or (fail_on_drift and drifted):
        raise SystemExit(1)


@main.command()
@click.argument("spec_path", metavar="SPEC", type=click.Path(exists=True, dir_okay=False))
@click.option("--date", default=None)
@click.option("--set", "overrides", multiple=True, metavar="KEY=VALUE")
def validate(spec_path: str, date: str | None, overrides: tuple[str, ...]) -> None:
    """Check a pipeline spec, its cluster file or scheduler address (without reaching any cluster), and its columns
    and bounds against the newest partition's metadata (a Parquet footer or Zarr array metadata; no rows read)."""
    from tgpflow.cluster import describe_spec_cluster
    from tgpflow.pipeline.source_check import check_source
    from tgpflow.pipeline.spec import load_spec

    with runtime_errors():
        spec = load_spec(spec_path, date=date, overrides=list(overrides))
        cluster = describe_spec_cluster(spec.cluster)
        source = check_source(spec)
    for line in source.get("warnings", []):
        logging.getLogger("tgpflow").warning(line)
    emit({"spec": spec_path, "valid": True, "name": spec.name, "models": [m.name for m in spec.models],
          "refit": spec.refit.policy, "cluster": cluster, "source": source}, validate_lines)


@main.command()
@click.argument("spec_path", metavar="SPEC", type=click.Path(exists=True, dir_okay=False))
@click.option("--dry-run", is_flag=True, help="List what would be removed; remove nothing.")
@click.option("--date", default=None, help="Run date substituted for {date} in the spec (default: today).")
@click.option("--set", "overrides", multiple=True, metavar="KEY=VALUE")
def gc(spec_path: str, dry_run: bool, date: str | None, overrides: tuple[str, ...]) -> None:
    """Remove what killed runs of a pipeline left: unpublished model versions, statistics the store's
    manifest does not reference, writers' temporaries. Nothing else is ever removed."""
    from tgpflow.pipeline.journal import collect_pipeline
    from tgpflow.pipeline.spec import load_spec

    with runtime_errors():
        spec = load_spec(spec_path, date=date, overrides=list(overrides))
        removed = collect_pipeline(spec, dry_run=dry_run)
    emit({"spec": spec_path, "dry_run": dry_run, "removed": removed}, gc_lines)


@main.command()
def schema() -> None:
    """Print the JSON schema of pipeline specs."""
    from tgpflow.pipeline.spec import PipelineSpec

    click.echo(json.dumps(PipelineSpec.model_json_schema(), indent=2))
