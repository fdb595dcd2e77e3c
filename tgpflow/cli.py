"""The ``tgpflow`` command line (click); also ``dask tgpflow`` through dask's CLI entry point.

Exit codes: 0 success, 2 usage error (click, or an --out that may not be replaced), 1 runtime
failure (bad data, unreadable model, numerical failure) with a one-line message on stderr; the
Python traceback only with ``tgpflow --debug``.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import sys
import time
from collections.abc import Iterator, Sequence
from typing import Any

import click
import numpy as np

from tgpflow.cluster import DEFAULT_CONNECT_TIMEOUT, progress_display
from tgpflow.errors import TgpflowError

logger = logging.getLogger("tgpflow")

#: Draws each MCMC chain keeps at least (split-R̂ halves every chain).
MIN_DRAWS_PER_CHAIN = 50

_RUNTIME_ERRORS = (TgpflowError, ValueError, OSError, FloatingPointError, MemoryError, NotImplementedError, ImportError,
                   RuntimeError)


def _setup_logging(level: str) -> None:
    handler: logging.Handler
    try:
        if not sys.stderr.isatty():
            raise ImportError
        from rich.logging import RichHandler

        handler = RichHandler(show_path=False)
    except ImportError:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger("tgpflow")
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    # a model's diagnostic warnings (mass without data, tiny ESS) reach cron logs as log lines
    logging.captureWarnings(True)
    py_warnings = logging.getLogger("py.warnings")
    py_warnings.handlers[:] = [handler]
    py_warnings.propagate = False


@contextlib.contextmanager
def _runtime_errors() -> Iterator[None]:
    from tgpflow.errors import OutputExistsError, SchedulerAddressError, cause

    try:
        yield
    except click.ClickException:
        raise
    except (OutputExistsError, SchedulerAddressError) as exc:  # a refused --out, no such scheduler: usage, exit 2
        raise _Refused(str(exc)) from exc
    except _RUNTIME_ERRORS as exc:
        if _debug():
            raise
        raise click.ClickException(str(exc)) from exc
    except Exception as exc:  # a defect of tgpflow: still one line, the traceback with --debug
        if _debug():
            raise
        raise click.ClickException(f"internal error ({cause(exc)}); rerun with --debug for the "
                                   f"traceback, and report it") from exc


def _debug() -> bool:
    """Whether ``tgpflow --debug`` asked for tracebacks instead of one-line errors."""
    ctx = click.get_current_context(silent=True)
    return bool(ctx and ctx.find_root().params.get("debug"))


def _load(path: str) -> Any:
    import tgpflow

    return tgpflow.load(path)


@click.group(name="tgpflow", context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="tgpflow")
@click.option("--log-level", default="INFO", show_default=True,
              type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR"], case_sensitive=False))
@click.option("--debug", is_flag=True, help="On an error, raise it with its Python traceback instead of one line.")
def main(log_level: str, debug: bool) -> None:
    """tgpflow: fit densities and score functions to big tabular data on Dask."""
    _setup_logging(log_level)


def _set_connect_timeout(ctx: click.Context, _param: click.Parameter, value: float) -> float:
    from tgpflow.cluster import connect_timeout

    token = connect_timeout.set(value)
    ctx.call_on_close(lambda: connect_timeout.reset(token))
    return value


_scheduler_timeout = click.option(
    "--scheduler-timeout", default=DEFAULT_CONNECT_TIMEOUT, show_default=True, type=click.FloatRange(min=0, min_open=True),
    metavar="SECONDS", expose_value=False, callback=_set_connect_timeout, envvar="TGPFLOW_SCHEDULER_TIMEOUT",
    help="How long to wait for the Dask scheduler (--scheduler, or a pipeline's cluster) before giving up.")
_scheduler_address = click.option("--scheduler", default=None, metavar="ADDR",
                                  help="Dask scheduler address, scheduler file, or cluster file of type: scheduler (with TLS "
                                       "security: cluster/scheduler-tls.yaml); default: this machine (see --local).")


def _scheduler(fn: Any) -> Any:
    """--scheduler ADDR and --scheduler-timeout SECONDS."""
    return _scheduler_address(_scheduler_timeout(fn))


_progress_opt = click.option("--progress", "progress_mode", default="auto", show_default=True,
                             type=click.Choice(["auto", "bar", "log", "none"]))


class _Refused(click.ClickException):
    """A request refused before any work (an --out that may not be replaced, a --scheduler that names
    nothing): exit 2, like a usage error."""

    exit_code = 2


def _check_out(out: str, kind: str, overwrite: bool) -> None:
    """Refuse an --out that may not be replaced, before any work (tgpflow.io.outputs; exit 2)."""
    from tgpflow.io.outputs import check_replace

    with _runtime_errors():
        check_replace(out, kind, overwrite=overwrite)


_overwrite = click.option("--overwrite", is_flag=True, help="Replace --out if it already holds a tgpflow output of "
                          "this kind (atomically). Nothing else is ever replaced.")
_columns = click.option("--columns", default=None, help="Comma-separated column names.")
_bad_rows = click.option("--on-bad-rows", default="raise", show_default=True, type=click.Choice(["raise", "drop"]))


def _split(columns: str | None) -> list[str] | None:
    return [c.strip() for c in columns.split(",") if c.strip()] if columns else None


class _ModelChoice(click.Choice):
    """The ``--model`` values of :func:`tgpflow.models.registry.cli_models`, read when the option is used
    (a method registered after this module was imported is accepted and listed)."""

    def __init__(self) -> None:
        super().__init__(())

    @property
    def choices(self) -> tuple[str, ...]:  # type: ignore[override]
        from tgpflow.models.registry import cli_models

        return tuple(cli_models())

    @choices.setter
    def choices(self, value: Any) -> None:  # click.Choice.__init__ assigns it
        pass


#: ``tgpflow fit``'s named model options: estimator parameters that also have a flag of their own (``--lam``, …).
#: Each is made from the parameter tables (tgpflow.models.params), like ``-p NAME=VALUE``, which takes any
#: parameter; a name here that no table has fails when the command is built.
FIT_OPTIONS = ("n_features", "lam", "bandwidth", "noise_levels", "sigma_max", "base", "n_basis", "smoothness", "kernel",
               "regularizer", "device", "precision", "validation_fraction", "criterion", "bounds", "discrete",
               "random_state", "on_bad_rows", "scale")
#: Flags that are not the parameter's name with dashes.
_FLAGS = {"random_state": "--seed"}


def _flag(name: str) -> str:
    return _FLAGS.get(name, "--" + name.replace("_", "-"))


class _FitCommand(click.Command):
    """``tgpflow fit``, whose model options (:data:`FIT_OPTIONS`, ``-p``) and their help are made from the
    estimators' parameter tables when the command is first used: ``tgpflow --help`` reads no table."""

    _tables_read = False

    def get_params(self, ctx: click.Context) -> list[click.Parameter]:
        if not self._tables_read:
            self.params.extend(_model_options())
            self._tables_read = True
        return super().get_params(ctx)

    def format_epilog(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        _write_parameters(formatter)
        super().format_epilog(ctx, formatter)


def _tables() -> dict[str, Any]:
    """Model kind → its parameter table, for the kinds ``tgpflow fit --model`` fits."""
    from tgpflow.models.registry import cli_models, model_kinds

    fitted = {kind for kind, _ in cli_models().values()}
    return {name: kind.table_class() for name, kind in model_kinds().items() if name in fitted}


def _users(kind: str, name: str) -> list[str]:
    """The ``--model`` values of ``kind`` that use parameter ``name``."""
    from tgpflow.models.registry import cli_models, param_applies

    return [m for m, (k, preset) in cli_models().items() if k == kind and param_applies(k, preset.get("method"), name)]


def _model_options() -> list[click.Option]:
    tables = _tables()
    options = []
    for name in FIT_OPTIONS:
        owners = {kind: t for kind, t in tables.items() if name in t.model_fields}
        if not owners:
            raise RuntimeError(f"tgpflow fit {_flag(name)}: no model's parameter table has {name!r}")
        metavars = {t.metavar(name) for t in owners.values()}
        groups: dict[tuple[str, str], list[str]] = {}
        for kind, table in owners.items():
            groups.setdefault((table.allowed(name), repr(table.defaults()[name])), []).extend(_users(kind, name))
        where = " ".join(f"--model {', '.join(users)}: {allowed} (default {default})."
                         for (allowed, default), users in groups.items() if users)
        help_text = next(iter(owners.values())).help_of(name)
        if all(t.type_of(name) is bool for t in owners.values()):  # a switch: --scale is scale=True
            options.append(click.Option([_flag(name), name], is_flag=True, flag_value="true", default=None,
                                        help=f"{help_text} {where}"))
            continue
        options.append(click.Option([_flag(name), name], default=None, metavar=metavars.pop() if len(metavars) == 1
                                    else "VALUE", help=f"{help_text} {where}"))
    options.append(click.Option(["-p", "--param", "param_pairs"], multiple=True, metavar="NAME=VALUE",
                                help="Any parameter of --model's estimator (listed below; repeatable): a list as a "
                                     "comma list, None as none."))
    return options


def _write_parameters(formatter: click.HelpFormatter) -> None:
    """Every model's parameters, with their help, what they accept and their default (from the tables)."""
    from tgpflow.models.registry import cli_models

    with formatter.section("Model parameters (-p NAME=VALUE)"):
        for kind, table in _tables().items():
            models = [m for m, (k, _) in cli_models().items() if k == kind]
            rows = []
            for name in table.model_fields:
                users = _users(kind, name)
                only = f"; --model {', '.join(users)}" if users != models else ""
                rows.append((name, f"{table.help_of(name)} [{table.allowed(name)}; default "
                                   f"{table.defaults()[name]!r}{only}]"))
            formatter.write_text(f"{kind} (--model {', '.join(models)}):")
            with formatter.indentation():
                formatter.write_dl(rows)


def _model_params(ctx: click.Context, model: str, options: dict[str, Any], pairs: Sequence[str]) -> dict[str, Any]:
    """The estimator parameters given on the command line (named options and ``-p``), parsed with the types of
    ``--model``'s parameter table. A usage error (exit 2), before any work, for one that ``--model`` does not
    use, a malformed value, or values that break a rule of the table."""
    from tgpflow.models.registry import cli_models, model_kinds, models_using, param_applies

    kind, preset = cli_models()[model]
    table = model_kinds()[kind].table_class()
    given: dict[str, tuple[str, str]] = {name: (_flag(name), text) for name, text in options.items()
                                         if text is not None}
    for pair in pairs:
        name, sep, text = (part.strip() for part in pair.partition("="))
        if not sep or not name:
            raise click.BadParameter(f"expected NAME=VALUE; got {pair!r}", ctx=ctx, param_hint="-p")
        if name in given:
            raise click.UsageError(f"{name} is given twice ({given[name][0]} and -p {name}).", ctx=ctx)
        given[name] = (f"-p {name}", text)
    values = {}
    for name, (how, text) in given.items():
        if name in preset:
            raise click.UsageError(f"{how}: --model {model} sets {name}; choose the model with --model.", ctx=ctx)
        if not param_applies(kind, preset.get("method"), name):
            users = models_using(name)
            if not users:
                raise click.UsageError(f"{how}: no model has a parameter {name!r}; --model {model} takes "
                                       f"{', '.join(table.model_fields)}.", ctx=ctx)
            raise click.UsageError(f"{how} does nothing with --model {model}; it applies to --model "
                                   f"{', '.join(users)}.", ctx=ctx)
        try:
            values[name] = table.parse_text(name, text)
        except ValueError as exc:
            raise click.BadParameter(str(exc), ctx=ctx, param_hint=how) from None
    try:
        table.check({**preset, **values})
    except ValueError as exc:
        raise click.UsageError(str(exc), ctx=ctx) from None
    return {**preset, **values}


@main.command(cls=_FitCommand)
@click.argument("source")
@click.option("--model", "method", type=_ModelChoice(), default="fvpd", show_default=True,
              help="A GP-tilted density method, nkef (Nyström kernel exponential family), score (kernel score "
                   "estimator), rsr (root-Sobolev density) or kde_sdo (its KDE baseline).")
@click.option("--out", required=True, type=click.Path(dir_okay=True, file_okay=False), help="Model path (.zarr) or fsspec URL (file://, s3://, …).")
@_overwrite
@_columns
@_scheduler
@click.option("--local", default="auto", show_default=True, type=click.Choice(["auto", "cluster", "threads", "gpu"]),
              help="Without --scheduler: threads (auto; measured fastest on one machine), an embedded LocalCluster, "
                   "or gpu: dask-cuda's LocalCUDACluster, one worker per GPU (needs the gpu extra).")
@_progress_opt
@click.pass_context
def fit(ctx: click.Context, source: str, method: str, out: str, columns: str | None, scheduler: str | None, local: str,
        progress_mode: str, overwrite: bool, param_pairs: tuple[str, ...], **options: str | None) -> None:
    """Fit a model to SOURCE and write it to --out: a GP-tilted density (FD, NCFD, FVPD, MAP, the KDE-RFF
    baseline), a Nyström kernel exponential family (nkef), a kernel score estimator (score) or a root-Sobolev
    density (rsr, kde_sdo). Its parameters are the estimator's: the options below or -p NAME=VALUE; one that
    --model does not use is refused."""
    from tgpflow.cluster import dask_client
    from tgpflow.io.sources import as_source
    from tgpflow.models.registry import cli_models, model_kinds

    kind = cli_models()[method][0]
    params = _model_params(ctx, method, options, param_pairs)
    _check_out(out, "model", overwrite)  # after the options (usage errors first), before any work
    with _runtime_errors():
        est = model_kinds()[kind].estimator_class()(**params)
        src = as_source(source, columns=_split(columns), on_bad_rows=est.on_bad_rows)
        t0 = time.perf_counter()
        with dask_client(scheduler, work=_fit_work(kind, est, src), local=local, dashboard=True) as client, \
                progress_display(progress_mode, client) as progress:
            est.fit(src, progress=progress)
        est.save(out, overwrite=overwrite)
    seconds = round(time.perf_counter() - t0, 2)
    if kind == "RootSobolevDensity":
        click.echo(json.dumps({"model": out, "method": method, "rows": est.n_samples_seen_, "smoothness": est.smoothness_,
                               "fit": {k: v for k, v in est.fit_info_.items() if k != "history"},
                               "anomaly_threshold": est.anomaly_threshold_, "seconds": seconds}, default=str))
        return
    click.echo(json.dumps({
        "model": out, "method": method, "rows": est.n_samples_seen_, "rows_dropped": est.n_rows_dropped_,
        "columns": src.columns, "n_features": getattr(est, "n_features", None), "bandwidth": est.bandwidth_,
        "lam": _json_number(est.lam_), "n_rows_dropped": getattr(est, "last_rows_dropped_", 0),
        "selected": {k: _json_number(v)
                     for k, v in (getattr(est, "selection_", {}).get("chosen") or {}).items()} or None,
        "solver": {k: v for k, v in est.solver_info_.items() if k != "history"},
        "diagnostics": _diagnostics_summary(est),
        "bounds": None if getattr(est, "bounds_", None) is None else est.bounds_.to_dict(),  # as the fit resolved
        "suggested_bounds": getattr(est, "pilot_", {}).get("suggested_bounds") or None,
        "column_kinds": getattr(est, "pilot_", {}).get("column_kinds"),
        "discrete": _discrete_columns(est),
        "base_mixture": getattr(est, "pilot_", {}).get("mixture"),
        "seconds": seconds}, default=str))


def _discrete_columns(est: Any) -> dict[str, Any] | None:
    """The columns a GP-tilted model treats as discrete, {column: {"origin", "step"}} in the data's units."""
    cells = getattr(est, "discrete_", None)
    if cells is None:
        return None
    info = cells.to_dict()
    out: dict[str, Any] = {c: {"origin": v["origin"], "step": v["step"]} for c, v in info["columns"].items()}
    for atom in info.get("atoms", []):  # an edge value carrying a share of the rows, beside a continuous part
        out.setdefault(atom["column"], {})[f"atom_{atom['side']}"] = {"value": atom["value"], "block": atom["width"]}
    return out


def _json_number(value: Any) -> Any:
    """A number as strict JSON has it: λ = ∞ (the base alone) as "inf", NaN (no λ) as null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None if math.isnan(value) else ("inf" if value > 0 else "-inf")
    return value


def _fit_work(kind: str, est: Any, src: Any) -> float | None:
    """The flops of a fit's pass, roughly (whether an embedded cluster pays off); None when unknown."""
    if src.n_rows is None or kind == "RootSobolevDensity":
        return None
    if kind == "GPTiltedDensity":
        return float(src.n_rows) * est.n_features**2
    return float(src.n_rows) * (est.n_basis * src.n_columns) ** 2 * src.n_columns


def _diagnostics_summary(est: Any) -> dict[str, Any] | None:
    """The figures that say whether a fitted density is wrong (ESS, mass outside the data's box, warnings)."""
    d = getattr(est, "fit_diagnostics_", None)
    if not d:
        return None
    keys = ("log_normalizer", "log_normalizer_se", "ess_fraction", "mass_outside", "data_outside",
            "mass_outside_limit", "theta_norm", "map_converged", "map_ess_fraction", "warnings")
    return {k: d[k] for k in keys if k in d}


@main.command()
@click.argument("model")
@click.argument("source")
@click.option("--out", required=True, help="Output Parquet dataset (a directory; a path or an fsspec URL), written "
              "atomically. Off the local filesystem the data is the version its pointer names: printed as \"data\".")
@_overwrite
@_columns
@click.option("--keep-columns", default=None, metavar="A,B",
              help="Columns of SOURCE (Parquet; any type, e.g. an id and a timestamp) written beside each row's "
                   "scores, to join them back.")
@click.option("--no-filters", is_flag=True, help="MODEL is a pipeline's model directory: score every row of SOURCE, "
                                                 "not only those its spec's source.filters keep (the default, as "
                                                 "the pipeline scored them).")
@_scheduler
@_bad_rows
@_progress_opt
def score(model: str, source: str, out: str, overwrite: bool, columns: str | None, keep_columns: str | None,
          no_filters: bool, scheduler: str | None, on_bad_rows: str, progress_mode: str) -> None:
    """Stream SOURCE through MODEL and write, per row, its position in SOURCE (row), the --keep-columns, the log
    density (normalised: the model's log density minus its log normaliser, as scikit-learn's score_samples, so
    that scores of different models and versions compare; unnormalised for a model without one), the anomaly
    score (−log density: larger is more anomalous) and, when the model learned a threshold at fit time, the
    anomaly flag, as Parquet. Rows dropped by --on-bad-rows drop have no line."""
    import dask

    from tgpflow.cluster import dask_client
    from tgpflow.core.engine import compute
    from tgpflow.io.atomic import atomic_path, is_local, resolve
    from tgpflow.io.row_context import row_context
    from tgpflow.io.sources import as_source
    from tgpflow.models.anomaly import model_log_normalizer, score_table

    _check_out(out, "scores", overwrite)
    with _runtime_errors():
        est = _load(model)
        if not hasattr(est, "log_density"):
            raise click.ClickException(f"{model}: a {type(est).__name__} estimates a score, not a density; "
                                       f"it has no log density to write")
        names = getattr(est, "feature_names_in_", None)
        cols = _split(columns) or ([str(c) for c in names] if names is not None else None)
        filters = None if no_filters else _pipeline_filters(model, source)
        src = as_source(source, columns=cols, on_bad_rows=on_bad_rows, filters=filters)
        if src.n_columns != est.n_features_in_:
            raise click.ClickException(f"{source}: X has {src.n_columns} features, but {model} (a "
                                       f"{type(est).__name__}) is expecting {est.n_features_in_} features as input; "
                                       f"name its columns with --columns")
        contexts = row_context(source, src, _split(keep_columns), filters=filters)
        work = float(src.n_rows or 0) * getattr(est, "n_features", 0) ** 2 if src.n_rows is not None else None
        with dask_client(scheduler, work=work) as client, progress_display(progress_mode, client) as progress, \
                atomic_path(out, "scores", overwrite=overwrite, marker=True, directory=True) as tmp:
            # one Parquet file per chunk, written by the task that scores it (its length is known only once
            # read when bad rows may be dropped); pyarrow directly (no dask.dataframe import: 0.25 s here)
            tmp.mkdir(parents=True, exist_ok=True)
            options = None if is_local(tmp) else dict(tmp.storage_options)
            table = dask.delayed(score_table, pure=True)
            write = dask.delayed(_write_scores, pure=True)
            args = (est.fitted().log_density, getattr(est, "anomaly_threshold_", None), model_log_normalizer(est))
            tables = [table(v, c, *args) for v, c in zip(src.chunks(), contexts, strict=True)]
            # every chunk scored before any is written: a bad chunk's error ends the compute while other tasks
            # still run, and a write landing after the atomic output's cleanup left a file behind (4 in 150)
            scored = dask.delayed(sum, pure=True)([dask.delayed(_rows_of, pure=True)(t) for t in tables])
            parts = [write(t, f"{tmp}/{_part_name(i, src.n_chunks)}", options, scored) for i, t in enumerate(tables)]
            _, dropped = compute(parts, dask.delayed(sum, pure=True)(src.dropped_counts()), progress=progress)
        info = {"scores": out, "model": model, "source": source, "rows_dropped": int(dropped),
                "normalized": model_log_normalizer(est) is not None, "filters": filters}
        data = resolve(out)
        if not is_local(data):  # off the local filesystem the dataset is the version its pointer names
            info["data"] = str(data)
        click.echo(json.dumps(info))


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


def _write_scores(table: Any, path: str, storage_options: dict[str, Any] | None, after: Any = None) -> int:
    """Write one chunk's scores table (:func:`~tgpflow.models.anomaly.score_table`) to ``path``; returns its rows.
    ``after``: a task this write waits for (every chunk scored)."""
    import fsspec
    import pyarrow.parquet as pq

    with fsspec.open(path, "wb", **(storage_options or {})) as fh:
        pq.write_table(table, fh)
    return int(table.num_rows)


@main.command()
@click.argument("model")
@click.option("-n", "n_samples", required=True, type=click.IntRange(min=1))
@click.option("--out", required=True, help="Output Parquet file (a path or an fsspec URL), written atomically.")
@_overwrite
@click.option("--method", default="resample", show_default=True,
              type=click.Choice(["resample", "langevin", "mala", "svgd"]),
              help="resample: importance resampling from the model's base (its ESS is reported); langevin/mala: "
                   "--chains chains on the model's score, started at the model's base, with R-hat and ESS across "
                   "chains; svgd: N particles moved by SVGD.")
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
@_columns
@click.option("--seed", default=0, show_default=True, type=int)
@_scheduler
def sample(model: str, n_samples: int, out: str, overwrite: bool, method: str, steps: int, chains: int, warmup: int,
           step_size: float, init_source: str | None, columns: str | None, seed: int, scheduler: str | None) -> None:
    """Draw N rows from MODEL into a Parquet file, by resampling or on the model's score."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from tgpflow.io.atomic import atomic_path

    _check_out(out, "samples", overwrite)
    with _runtime_errors():
        est = _load(model)
        info: dict[str, Any] = {"samples": out, "rows": n_samples, "method": method}
        if method == "resample":
            if not hasattr(est, "sample"):
                raise click.ClickException(f"{model}: a {type(est).__name__} has no resampler; use "
                                           f"--method langevin, mala or svgd (they use its score)")
            rows = est.sample(n_samples, random_state=seed)
            info.update(getattr(est, "last_sample_info_", {}))
        else:
            rows, extra = _score_sampler(est, model, n_samples, method, steps, chains, warmup, step_size, init_source,
                                         _split(columns), seed, scheduler)
            info.update(extra)
        names = getattr(est, "feature_names_in_", None)
        names = [str(c) for c in names] if names is not None else [f"x{j}" for j in range(rows.shape[1])]
        table = pa.table({n: rows[:, j] for j, n in enumerate(names)})
        with atomic_path(out, "samples", overwrite=overwrite) as tmp, tmp.open("wb") as fh:
            pq.write_table(table.replace_schema_metadata({"tgpflow.output": "samples"}), fh)
        click.echo(json.dumps(info))


def _start_points(est: Any, model: str, n: int, init_source: str | None, columns: list[str] | None,
                  rng: np.random.Generator) -> np.ndarray:
    """N start points: the model's base (--init base), rows of --init SOURCE, else the model's base, its
    resampler or its Nyström basis (jittered)."""
    if init_source == "base" or (init_source is None and hasattr(est, "base_draws")):
        if not hasattr(est, "base_draws"):
            raise click.ClickException(f"{model}: a {type(est).__name__} has no Gaussian base; pass --init SOURCE")
        return est.base_draws(n, random_state=int(rng.integers(2**31)))
    if init_source is not None:
        from tgpflow.io.degenerate import check_pilot_rows
        from tgpflow.io.pilot import pilot_sample
        from tgpflow.io.sources import as_source

        names = getattr(est, "feature_names_in_", None)
        cols = columns or ([str(c) for c in names] if names is not None else None)
        pilot = pilot_sample(as_source(init_source, columns=cols, on_bad_rows="drop"), rows=max(n, 10_000),
                             random_state=int(rng.integers(2**31)))
        check_pilot_rows(pilot, init_source, 1, "the start points")
        return pilot.rows[rng.choice(len(pilot.rows), n, replace=len(pilot.rows) < n)]
    if hasattr(est, "sample"):
        return est.sample(n, random_state=int(rng.integers(2**31)))
    basis = getattr(est, "basis_", None)
    if basis is not None:
        Y = np.asarray(basis.Y)
        return Y[rng.choice(len(Y), n)] + np.sqrt(basis.bandwidth / 2) * 0.1 * rng.standard_normal((n, Y.shape[1]))
    raise click.ClickException(f"{model}: a {type(est).__name__} has no resampler to start chains from; "
                               f"pass --init SOURCE (e.g. the training data)")


def _score_sampler(est: Any, model: str, n: int, method: str, steps: int, chains: int, warmup: int,
                   step_size: float, init_source: str | None, columns: list[str] | None, seed: int,
                   scheduler: str | None) -> tuple[np.ndarray, dict[str, Any]]:
    from tgpflow.sample import mcmc_sample, svgd

    rng = np.random.default_rng(seed)
    if method == "mala" and not hasattr(est, "log_density"):
        raise click.ClickException(f"{model}: a {type(est).__name__} has no log density for MALA's "
                                   f"Metropolis step; use --method langevin or svgd")
    if method != "svgd":
        n_chains = max(2, min(chains, n // MIN_DRAWS_PER_CHAIN))  # R̂ needs draws in every chain, not only chains
        per_chain = -(-n // n_chains)
        x0 = _start_points(est, model, n_chains, init_source, columns, rng)
        mc = mcmc_sample(est, n, method="mala" if method == "mala" else "ula", n_chains=n_chains,
                         thin=max(1, steps // per_chain), n_warmup=warmup, step_size=step_size, init=x0,
                         random_state=rng)
        summary = {key: v for key, v in mc.summary().items() if key != "method"}
        summary["init"] = init_source or ("base" if hasattr(est, "base_draws") else "model")
        return mc.draws, summary
    x0 = _start_points(est, model, n, init_source, columns, rng)
    if scheduler:
        from tgpflow.cluster import dask_client

        with dask_client(scheduler) as client:
            res = svgd(est, x0, steps, step_size=step_size, client=client, random_state=rng)
    else:
        res = svgd(est, x0, steps, step_size=step_size, random_state=rng)
    return res.particles, {"iterations": res.n_iter, "direction_rms": res.direction_norm}


@main.command()
@click.argument("model")
@click.argument("source")
@click.option("--out", required=True, help="Report directory (metrics.json and PNG figures), written atomically.")
@_overwrite
@_columns
@click.option("--directions", default=500, show_default=True, type=click.IntRange(min=1),
              help="Random 1-D projections of the sliced KS/WD.")
@click.option("--model-samples", default=250_000, show_default=True, type=click.IntRange(min=100),
              help="Weighted proposal draws for the model's marginal CDFs.")
@click.option("--seed", default=0, show_default=True, type=int)
@_bad_rows
@_scheduler
def report(model: str, source: str, out: str, overwrite: bool, columns: str | None, directions: int, model_samples: int,
           seed: int, on_bad_rows: str, scheduler: str | None) -> None:
    """Metrics (sliced KS/WD, Hyvärinen loss) and figures of MODEL against SOURCE, into --out."""
    from tgpflow.cluster import dask_client
    from tgpflow.pipeline.report import write_report

    _check_out(out, "report", overwrite)
    with _runtime_errors():
        est = _load(model)
        if type(est).__name__ != "GPTiltedDensity":
            raise click.ClickException(f"{model}: reports are implemented for GP-tilted densities in this release, "
                                       f"not for a {type(est).__name__}")
        with dask_client(scheduler, work=None):
            metrics = write_report(est, source, out, n_directions=directions, n_model_samples=model_samples,
                                   random_state=seed, columns=_split(columns), on_bad_rows=on_bad_rows,
                                   overwrite=overwrite)
        click.echo(json.dumps({"report": out, **metrics["sliced"], "hyvarinen_loss": metrics["hyvarinen_loss"],
                               "figures": metrics["figures"]}))


@main.command()
@click.argument("spec_path", metavar="SPEC")
@click.option("--date", default=None, help="Run date substituted for {date} in the spec (default: today).")
@click.option("--set", "overrides", multiple=True, metavar="KEY=VALUE",
              help="Override a spec field before validation, e.g. --set refit.policy=full (repeatable).")
@click.option("--dry-run", is_flag=True, help="Print what the run would read (new, changed, removed partitions), "
                                              "refit and score; write nothing, take no lock, start no cluster.")
@_progress_opt
@_scheduler_timeout
def run(spec_path: str, date: str | None, overrides: tuple[str, ...], dry_run: bool, progress_mode: str) -> None:
    """Run a pipeline spec once: refit from new partitions (incremental/window/full), version, score."""
    from tgpflow.cluster import spec_client
    from tgpflow.pipeline.runner import run_pipeline
    from tgpflow.pipeline.spec import load_spec

    with _runtime_errors():
        spec = load_spec(spec_path, date=date, overrides=list(overrides))
        if dry_run:
            click.echo(json.dumps(dict(run_pipeline(spec, date=date, dry_run=True), spec=spec_path), indent=1))
            return
        t0 = time.perf_counter()
        with spec_client(spec.cluster) as client, progress_display(progress_mode, client) as progress:
            result = run_pipeline(spec, date=date, progress=progress)
        click.echo(json.dumps(dict(result, spec=spec_path, seconds=round(time.perf_counter() - t0, 2)), default=str))


@main.command()
@click.argument("spec_path", metavar="SPEC")
@click.option("--date", default=None)
@click.option("--set", "overrides", multiple=True, metavar="KEY=VALUE")
def validate(spec_path: str, date: str | None, overrides: tuple[str, ...]) -> None:
    """Check a pipeline spec, its cluster file or scheduler address (without reaching any cluster), and its columns
    and bounds against the newest partition's metadata (a Parquet footer or Zarr array metadata; no rows read)."""
    from tgpflow.cluster import describe_spec_cluster
    from tgpflow.pipeline.source_check import check_source
    from tgpflow.pipeline.spec import load_spec

    with _runtime_errors():
        spec = load_spec(spec_path, date=date, overrides=list(overrides))
        cluster = describe_spec_cluster(spec.cluster)
        source = check_source(spec)
    for line in source.get("warnings", []):
        click.echo(f"warning: {line}", err=True)
    click.echo(json.dumps({"spec": spec_path, "valid": True, "name": spec.name,
                           "models": [m.name for m in spec.models], "refit": spec.refit.policy, "cluster": cluster,
                           "source": source}))


@main.command()
@click.argument("spec_path", metavar="SPEC")
@click.option("--dry-run", is_flag=True, help="List what would be removed; remove nothing.")
@click.option("--date", default=None, help="Run date substituted for {date} in the spec (default: today).")
@click.option("--set", "overrides", multiple=True, metavar="KEY=VALUE")
def gc(spec_path: str, dry_run: bool, date: str | None, overrides: tuple[str, ...]) -> None:
    """Remove what killed runs of a pipeline left: unpublished model versions, statistics the store's
    manifest does not reference, writers' temporaries. Nothing else is ever removed."""
    from tgpflow.pipeline.journal import collect_pipeline
    from tgpflow.pipeline.spec import load_spec

    with _runtime_errors():
        spec = load_spec(spec_path, date=date, overrides=list(overrides))
        removed = collect_pipeline(spec, dry_run=dry_run)
    click.echo(json.dumps({"spec": spec_path, "dry_run": dry_run, "removed": removed}))


@main.command()
def schema() -> None:
    """Print the JSON schema of pipeline specs."""
    from tgpflow.pipeline.spec import PipelineSpec

    click.echo(json.dumps(PipelineSpec.model_json_schema(), indent=2))


@main.group()
def stats() -> None:
    """Inspect or combine statistics (a store, or single statistics artifacts)."""


@stats.command("info")
@click.argument("path")
def stats_info(path: str) -> None:
    """Describe a statistics store (its manifest, verified entries) or one statistics artifact."""
    from tgpflow.pipeline.store import StatsStore, load_stats

    with _runtime_errors():
        store = StatsStore(path)
        manifest = store.read_manifest()
        if manifest is None:
            st = load_stats(path)
            click.echo(json.dumps({"kind": type(st).__name__, "rows": st.n, "fingerprint": st.fingerprint}))
            return
        # a model without additive statistics (RSR) has no total: it is refitted on the partitions' rows
        totals = {m: {"rows": store.load(v["total"]).n if v.get("total") else None, "version": v.get("version")}
                  for m, v in manifest["models"].items()}
        for part in manifest["partitions"].values():  # verifies every entry's checksums
            for rel in part["stats"].values():
                store.load(rel)
        click.echo(json.dumps({"store": path, "name": manifest["name"], "run": manifest["run"],
                               "policy": manifest["policy"], "partitions": len(manifest["partitions"]),
                               "models": totals, "updated": manifest["updated"]}, indent=2, default=float))


@stats.command("merge")
@click.argument("paths", nargs=-1, required=True)
@click.option("--out", required=True, help="The merged statistics artifact (.zarr or .npz), written atomically.")
def stats_merge(paths: tuple[str, ...], out: str) -> None:
    """Add statistics artifacts of the same feature draw into one (refuses a mismatch)."""
    from tgpflow.pipeline.store import load_stats

    with _runtime_errors():
        total = sum(load_stats(p) for p in paths)
        total.save(out)
    click.echo(json.dumps({"merged": list(paths), "out": out, "rows": total.n}, default=float))


@main.command()
@click.argument("model")
def info(model: str) -> None:
    """Describe a saved model (verifies its checksums); for a pipeline's model directory, its versions."""
    from tgpflow.io.artifact import read_artifact
    from tgpflow.pipeline.versions import ModelVersions, is_versions_dir

    if is_versions_dir(model):
        with _runtime_errors():
            vers = ModelVersions(model)
            current = vers.load() if vers.current() else None
            click.echo(json.dumps({"model": model, "current": vers.current(),
                                   "preprocessing": None if current is None else _preprocessing(current, {}),
                                   "versions": {v: vers.info(v) for v in vers.list()}}, indent=2, default=float))
        return
    with _runtime_errors():
        kind, arrays, meta = read_artifact(model)
        est = _load(model)
        draw = getattr(est, "features_", None) or est.basis_
        click.echo(json.dumps({
            "kind": kind, "method": getattr(est, "method", getattr(est, "_kind", None)), "rows": est.n_samples_seen_,
            "d": est.n_features_in_, "n_features": getattr(draw, "n_features", None),
            "n_basis": getattr(draw, "n_basis", None), "bandwidth": getattr(est, "bandwidth_", None),
            "smoothness": getattr(est, "smoothness_", None),
            "fingerprint": draw.fingerprint, "columns": meta.get("feature_names_in"),
            "params": meta.get("params"), "solver": meta.get("solver_info"), "pilot": meta.get("pilot"),
            "selection": (meta.get("selection") or {}).get("chosen"), "diagnostics": _diagnostics_summary(est),
            "bounds": (meta.get("bounds") or {}).get("bounds"), "discrete": _discrete_columns(est),
            "preprocessing": _preprocessing(est, meta),
            "created": meta.get("created"), "tgpflow_version": meta.get("tgpflow_version"),
            "arrays": {k: list(v.shape) for k, v in arrays.items()}}, indent=2, default=str))


def _preprocessing(est: Any, meta: dict[str, Any]) -> dict[str, Any]:
    """How a model reads rows: standardized inside it (its scaling, in the data's units), or as given — which is
    all a model file written before models carried their standardization can say."""
    scaling = getattr(est, "scaling_", None)
    if scaling is not None:
        return {"standardized": True, **scaling.to_dict(),
                "note": "rows in and out are in the data's units; the model standardizes them itself"}
    old = "scaling" not in meta and meta.get("params") is not None and "scale" not in meta["params"]
    return {"standardized": False,
            "note": ("written before model files carried a standardization: it takes rows as it was fitted on them "
                     "(a pipeline's version written then took preprocessed rows)") if old
            else "fitted to the rows as given"}


if __name__ == "__main__":  # pragma: no cover
    main()
