"""``tgpflow report``: metrics and figures of a model against held-out rows."""

from __future__ import annotations

from typing import Any

import click

from tgpflow.cli.app import (bad_rows_option, check_model_path, check_out, check_source, columns_option, load_model,
                             main, overwrite_option, runtime_errors, scheduler_options, split_columns)
from tgpflow.cli.human import number
from tgpflow.cli.output import emit, note


@main.command()
@click.argument("model")
@click.argument("source", required=False)
@click.option("--out", required=True, help="Report directory, written atomically: metrics.json and PNG figures "
              "(MODEL and SOURCE), or index.html, report.json and figures (a pipeline's model directory).")
@overwrite_option
@columns_option
@click.option("--directions", default=500, show_default=True, type=click.IntRange(min=1),
              help="Random 1-D projections of the sliced KS/WD.")
@click.option("--model-samples", default=250_000, show_default=True, type=click.IntRange(min=100),
              help="Weighted proposal draws for the model's marginal CDFs.")
@click.option("--seed", default=0, show_default=True, type=int)
@click.option("--store", default=None, help="With a pipeline's model directory: its statistics store, when it is not "
                                            "where the runs wrote it (the drift sums the marginals are drawn from).")
@click.option("--fail-on-warning", is_flag=True, help="Exit with status 1 (after writing the report) when the verdict "
              "is not passed: the fit warned, or its samples failed the sample check against SOURCE.")
@bad_rows_option
@scheduler_options
def report(model: str, source: str | None, out: str, overwrite: bool, columns: str | None, directions: int,
           model_samples: int, seed: int, store: str | None, fail_on_warning: bool, on_bad_rows: str,
           scheduler: str | None) -> None:
    """Metrics and figures of MODEL (any kind) against the rows of SOURCE, into --out: the Hyvärinen loss and the
    kernel Stein discrepancy of its score; for a model that can be sampled the sliced KS/WD, the sample check and
    each column's and pair's rows beside its samples; the score field; the anomaly scores with the threshold; and a
    verdict. MODEL a pipeline's model directory without SOURCE: a page of its versions (index.html: history,
    health, drift, marginals)."""
    from tgpflow.cluster import dask_client
    from tgpflow.models.registry import kind_of
    from tgpflow.pipeline.report import write_report
    from tgpflow.pipeline.versions import is_versions_dir

    check_out(out, "report", overwrite)
    check_model_path(model)
    if source is not None:
        check_source(source)
    if source is None:
        if not is_versions_dir(model):
            raise click.UsageError(f"{model} is not a pipeline's model directory (no CURRENT): give the rows to "
                                   f"compare the model with, tgpflow report MODEL SOURCE --out DIR")
        from tgpflow.pipeline.versions_report import write_versions_report

        with runtime_errors():
            summary = write_versions_report(model, out, store=store, n_samples=min(model_samples, 20_000),
                                            random_state=seed, overwrite=overwrite)
        emit(summary, lambda s: [f"wrote {out}/index.html: {len(s['history'])} version(s), current {s['current']}, "
                                 f"figures {', '.join(s['figures'])}; latest drifted partition: "
                                 f"{s['latest_drifted'] or 'none'}"], default=float)
        for text in summary["notes"]:
            note(f"note: {text}")
        return
    with runtime_errors():
        est = load_model(model)
        if not kind_of(est).reports:
            raise click.ClickException(f"{model}: reports are not implemented for a {type(est).__name__}")
        with dask_client(scheduler, work=None):
            metrics = write_report(est, source, out, n_directions=directions, n_model_samples=model_samples,
                                   random_state=seed, columns=split_columns(columns), on_bad_rows=on_bad_rows,
                                   overwrite=overwrite)
        emit({"report": out, **(metrics.get("sliced") or {}), "loglik": metrics.get("loglik"),
              "hyvarinen_loss": metrics["hyvarinen_loss"], "ksd2": metrics["ksd2"], "verdict": metrics["verdict"],
              "figures": metrics["figures"]}, _model_report_lines)
    if fail_on_warning and not metrics["verdict"]["passed"]:
        click.echo(f"failing (--fail-on-warning): {'; '.join(metrics['verdict']['reasons'])}; the report is written",
                   err=True)
        raise SystemExit(1)


def _model_report_lines(r: dict[str, Any]) -> list[str]:
    figures = ", ".join(r["figures"]) or "no figure (one column and no sampler)"
    lines = [f"wrote {r['report']}: metrics.json and {figures}"]
    if "ks_median" in r:
        lines.append(f"  sliced KS median {number(r['ks_median'], 3)}, sliced Wasserstein median "
                     f"{number(r['wd_median'], 3)} over {r['n_directions']} directions")
    fit = [f"log-likelihood {number(r['loglik'])} nats/row"] if r.get("loglik") is not None else []
    fit += [f"Hyvärinen loss {number(r['hyvarinen_loss'])}", f"KSD² {number(r['ksd2'], 3)}"]
    lines.append(f"  on the rows: {', '.join(fit)}")
    verdict = r["verdict"]
    if verdict["passed"]:
        checked = "the sample check passed" if verdict["sample_check"] else "no warning (a model without samples: " \
                                                                            "no sample check)"
        lines.append(f"  verdict: {checked}")
    else:
        lines.append(f"  verdict: not passed: {'; '.join(verdict['reasons'])}")
    return lines
