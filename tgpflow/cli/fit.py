"""``tgpflow fit``: fit a model to a source and write its model file."""

from __future__ import annotations

import time

import click

from tgpflow.cli.app import (check_out, check_source, columns_option, main, overwrite_option, progress_option,
                             runtime_errors, scheduler_options, split_columns)
from tgpflow.cli.fit_options import FitCommand, ModelChoice, model_params
from tgpflow.cli.human import fit_lines
from tgpflow.cli.output import emit
from tgpflow.cluster import progress_display


@main.command(cls=FitCommand)
@click.argument("source")
@click.option("--model", "method", type=ModelChoice(), default="fvpd", show_default=True,
              help="A GP-tilted density method, nkef (Nyström kernel exponential family), score (kernel score "
                   "estimator), rsr (root-Sobolev density) or kde_sdo (its KDE baseline).")
@click.option("--out", required=True, type=click.Path(dir_okay=True, file_okay=False),
              help="Model path (.zarr) or fsspec URL (file://, s3://, …).")
@overwrite_option
@columns_option
@scheduler_options
@click.option("--local", default="auto", show_default=True, type=click.Choice(["auto", "cluster", "threads", "gpu"]),
              help="Without --scheduler: threads (auto; measured fastest on one machine), an embedded LocalCluster, "
                   "or gpu: dask-cuda's LocalCUDACluster, one worker per GPU (needs the gpu extra).")
@progress_option
@click.pass_context
def fit(ctx: click.Context, source: str, method: str, out: str, columns: str | None, scheduler: str | None, local: str,
        progress_mode: str, overwrite: bool, param_pairs: tuple[str, ...], **options: str | None) -> None:
    """Fit a model to SOURCE (a Parquet or CSV file, directory or glob, or a Zarr store) and write it to --out: a
    GP-tilted density (FD, NCFD, FVPD, MAP, the KDE-RFF baseline), a Nyström kernel exponential family (nkef), a
    kernel score estimator (score) or a root-Sobolev density (rsr, kde_sdo). Its parameters are the estimator's:
    the options below or -p NAME=VALUE; one that --model does not use is refused."""
    from tgpflow.cluster import dask_client
    from tgpflow.io.sources import as_source
    from tgpflow.models.registry import cli_models, model_kinds

    kind = model_kinds()[cli_models()[method][0]]
    params = model_params(ctx, method, options, param_pairs)
    check_out(out, "model", overwrite)  # after the options (usage errors first), before any work
    check_source(source)
    with runtime_errors():
        est = kind.estimator_class()(**params)
        src = as_source(source, columns=split_columns(columns), on_bad_rows=est.on_bad_rows)
        t0 = time.perf_counter()
        work = kind.pass_work(est, src.n_rows, src.n_columns)  # whether an embedded cluster pays off
        with dask_client(scheduler, work=work, local=local, dashboard=True) as client, \
                progress_display(progress_mode, client) as progress:
            est.fit(src, progress=progress)
        est.save(out, overwrite=overwrite)
    seconds = round(time.perf_counter() - t0, 2)
    emit({"model": out, "method": method, "columns": src.columns, **kind.summarize(est), "seconds": seconds},
         fit_lines)
