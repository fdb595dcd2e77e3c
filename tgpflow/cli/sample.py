"""``tgpflow sample``: draw rows from a model, by importance resampling or on its score (MCMC, SVGD)."""

from __future__ import annotations

import posixpath
from typing import Any

import click
import numpy as np

from tgpflow.cli.app import (check_model_path, check_out, check_source, columns_option, load_model, main,
                             overwrite_option, runtime_errors, scheduler_options, split_columns)
from tgpflow.cli.human import sample_lines
from tgpflow.cli.output import emit

#: Draws each MCMC chain keeps at least (split-R̂ halves every chain).
MIN_DRAWS_PER_CHAIN = 50


@main.command()
@click.argument("model")
@click.option("-n", "n_samples", required=True, type=click.IntRange(min=1))
@click.option("--out", required=True, help="Output Parquet file (a path or an fsspec URL), written atomically.")
@overwrite_option
@click.option("--method", default="resample", show_default=True,
              type=click.Choice(["resample", "langevin", "mala", "svgd"]),
              help="resample: importance resampling from the model's base (its ESS is reported); langevin/mala: "
                   "--chains chains on the model's score function ∇ log p, started at the model's base, with R-hat "
                   "and ESS across chains; svgd: N particles moved by SVGD.")
@click.option("--steps", default=500, show_default=True, type=click.IntRange(min=1),
              help="Steps per chain after warm-up (langevin/mala; the N draws are spread evenly over them) or "
                   "SVGD iterations.")
@click.option("--chains", default=64, show_default=True, type=click.IntRange(min=2),
              help="langevin/mala: parallel chains (at most N/50: every chain keeps at least 50 draws).")
@click.option("--warmup", default=500, show_default=True, type=click.IntRange(min=0),
              help="Warm-up steps with step-size adaptation (langevin/mala).")
@click.option("--step-size", default=0.1, show_default=True, type=click.FloatRange(min=0, min_open=True))
@click.option("--init", "init_source", default=None, metavar="SOURCE|base",
              help="Start points: 'base' (the model's Gaussian base, the default where it has one: over-dispersed, "
                   "so R-hat can see chains that disagree), or rows drawn from SOURCE (e.g. the training data; "
                   "rows with missing or non-finite values are skipped); otherwise the model's resampler or its "
                   "Nyström basis points.")
@columns_option
@click.option("--seed", default=0, show_default=True, type=int)
@scheduler_options
def sample(model: str, n_samples: int, out: str, overwrite: bool, method: str, steps: int, chains: int, warmup: int,
           step_size: float, init_source: str | None, columns: str | None, seed: int, scheduler: str | None) -> None:
    """Draw N rows from MODEL into a Parquet file, by resampling or on the model's score function ∇ log p."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from tgpflow.io.atomic import atomic_path

    _check_parquet_name(out)
    check_out(out, "samples", overwrite)
    check_model_path(model)
    if init_source not in (None, "base"):
        check_source(init_source)
    with runtime_errors():
        est = load_model(model)
        info: dict[str, Any] = {"samples": out, "model": model, "rows": n_samples, "method": method}
        if method == "resample":
            if not hasattr(est, "sample"):
                samplers = "langevin, mala or svgd" if hasattr(est, "log_density") else "langevin or svgd"
                raise click.ClickException(f"{model}: a {type(est).__name__} has no resampler; use "
                                           f"--method {samplers} (they use its score function)")
            rows = est.sample(n_samples, random_state=seed)
            info.update(getattr(est, "last_sample_info_", {}))
        else:
            rows, extra = _score_sampler(est, model, n_samples, method, steps, chains, warmup, step_size, init_source,
                                         split_columns(columns), seed, scheduler)
            info.update(extra)
        names = getattr(est, "feature_names_in_", None)
        names = [str(c) for c in names] if names is not None else [f"x{j}" for j in range(rows.shape[1])]
        table = pa.table({n: rows[:, j] for j, n in enumerate(names)})
        with atomic_path(out, "samples", overwrite=overwrite) as tmp, tmp.open("wb") as fh:
            pq.write_table(table.replace_schema_metadata({"tgpflow.output": "samples"}), fh)
        emit(info, sample_lines)


#: Suffixes of other formats than the Parquet file ``sample`` writes: such a name would hide the format it holds.
_OTHER_FORMATS = (".csv", ".tsv", ".txt", ".json", ".jsonl", ".npy", ".npz", ".xlsx", ".feather", ".arrow")


def _check_parquet_name(out: str) -> None:
    """Refuse (exit 2) an --out named for another format: the samples are written as Parquet whatever the name."""
    stem, suffix = posixpath.splitext(out.rstrip("/"))
    if suffix.lower() in _OTHER_FORMATS:
        raise click.BadParameter(f"{out}: tgpflow sample writes a Parquet file, not {suffix[1:].upper()}; name it "
                                 f"{stem}.parquet (pandas reads it with read_parquet, and to_csv writes CSV)",
                                 param_hint="--out")


def _score_sampler(est: Any, model: str, n: int, method: str, steps: int, chains: int, warmup: int,
                   step_size: float, init_source: str | None, columns: list[str] | None, seed: int,
                   scheduler: str | None) -> tuple[np.ndarray, dict[str, Any]]:
    from tgpflow.sample import mcmc_sample, svgd
    from tgpflow.sample.chain_starts import has_gaussian_base

    rng = np.random.default_rng(seed)
    if method == "mala" and not hasattr(est, "log_density"):
        raise click.ClickException(f"{model}: a {type(est).__name__} has no log density for MALA's "
                                   f"Metropolis step; use --method langevin or svgd")
    if method != "svgd":
        n_chains = max(2, min(chains, n // MIN_DRAWS_PER_CHAIN))  # R̂ needs draws in every chain, not only chains
        per_chain = -(-n // n_chains)
        x0 = _starts(est, model, n_chains, init_source, columns, rng)
        mc = mcmc_sample(est, n, method="mala" if method == "mala" else "ula", n_chains=n_chains,
                         thin=max(1, steps // per_chain), n_warmup=warmup, step_size=step_size, init=x0,
                         random_state=rng)
        summary = {key: v for key, v in mc.summary().items() if key != "method"}
        summary["init"] = init_source or ("base" if has_gaussian_base(est) else "model")
        return mc.draws, summary
    x0 = _starts(est, model, n, init_source, columns, rng)
    if scheduler:
        from tgpflow.cluster import dask_client

        with dask_client(scheduler) as client:
            res = svgd(est, x0, steps, step_size=step_size, client=client, random_state=rng)
    else:
        res = svgd(est, x0, steps, step_size=step_size, random_state=rng)
    return res.particles, {"iterations": res.n_iter, "direction_rms": res.direction_norm}


def _starts(est: Any, model: str, n: int, init_source: str | None, columns: list[str] | None,
            rng: np.random.Generator) -> np.ndarray:
    """:func:`~tgpflow.sample.chain_starts.start_points`, its refusal naming the model file (a source's own errors
    name the source)."""
    from tgpflow.errors import TgpflowError
    from tgpflow.sample.chain_starts import start_points

    try:
        return start_points(est, n, init=init_source, columns=columns, random_state=rng)
    except ValueError as exc:
        if isinstance(exc, TgpflowError):
            raise
        raise click.ClickException(f"{model}: {exc}") from exc
