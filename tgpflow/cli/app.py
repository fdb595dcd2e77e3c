"""The ``tgpflow`` command group and what its commands share: logging, one-line errors, the common options.

Exit codes (docs/cli.md, "Exit codes"): 0 success; 2 a usage error, before any work — click's, an --out that may not
be replaced, a SOURCE, MODEL or SPEC that names nothing, a MODEL that is another kind of output, a --scheduler that
names nothing; 1 a runtime failure (bad data, an unreadable model, a numerical failure, ``tgpflow run
--fail-on-*``) with a one-line message on stderr; the Python traceback only with ``tgpflow --debug``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import click

from tgpflow.cli.output import META, Group, options, setup_logging
from tgpflow.cluster import DEFAULT_CONNECT_TIMEOUT
from tgpflow.errors import TgpflowError


_RUNTIME_ERRORS = (TgpflowError, ValueError, OSError, FloatingPointError, MemoryError, NotImplementedError, ImportError,
                   RuntimeError)


@contextlib.contextmanager
def runtime_errors() -> Iterator[None]:
    from tgpflow.errors import OutputExistsError, SchedulerAddressError, cause

    try:
        yield
    except click.ClickException:
        raise
    except (OutputExistsError, SchedulerAddressError) as exc:  # a refused --out, no such scheduler: usage, exit 2
        raise Refused(str(exc)) from exc
    except BrokenPipeError:  # the reader went away (tgpflow info … | head): click ends quietly
        raise
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
    return bool(options().get("debug"))


def load_model(path: str) -> Any:
    """``tgpflow.load(path)`` (the commands check the path first: :func:`check_model_path`)."""
    import tgpflow

    with runtime_errors():
        return tgpflow.load(path)


def check_model_path(path: str) -> None:
    """Refuse (exit 2, before any work) a MODEL argument that names nothing, or names another tgpflow output — a
    scores dataset, samples, a report, a pipeline's statistics store, a folder of model directories — saying what
    it is and what to pass instead. (A statistics artifact is left to the reader, which names its kind: its header
    cannot be told from a model file's whose metadata was damaged.)"""
    problem = model_path_problem(path)
    if problem is not None:
        raise Refused(problem)


def model_path_problem(path: str) -> str | None:
    """Why ``path`` is not a model file or a pipeline's model directory, when it plainly is not; None otherwise
    (a damaged model file is left for the reader to describe)."""
    from tgpflow.io.atomic import as_path
    from tgpflow.io.outputs import output_kind
    from tgpflow.pipeline.versions import is_versions_dir

    try:
        where = as_path(path)
        if not where.exists():
            return f"{path}: no such file or directory (MODEL is a model file written by tgpflow fit, or a " \
                   f"pipeline's model directory)"
        if is_versions_dir(where):
            return None
        kind = output_kind(where)
        if kind == "model":
            return None
        if kind is None and where.is_dir() and (where / "manifest.json").is_file():
            kind = "store"
        children = sorted(p.name for p in where.iterdir() if is_versions_dir(p)) if where.is_dir() else []
    except OSError:
        return None
    what = {"scores": "a scores dataset (written by tgpflow score or a pipeline's scoring)",
            "samples": "samples (written by tgpflow sample)", "report": "a report (written by tgpflow report)",
            "store": "a pipeline's statistics store (outputs.store; tgpflow stats info describes it)"}
    if children:
        return (f"{path} is a pipeline's models folder (outputs.models), not a model: pass one of its model "
                f"directories, e.g. {path.rstrip('/')}/{children[0]} ({', '.join(children)})")
    if kind in what:
        return (f"{path} is {what[kind]}, not a model: pass a model file written by tgpflow fit, or a pipeline's "
                f"model directory (outputs.models/<model name>)")
    return None


@click.group(name="tgpflow", cls=Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="tgpflow")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON, for scripts (default: a short "
              "summary for people).")
@click.option("-q", "--quiet", is_flag=True, help="Print nothing but errors.")
@click.option("--log-level", default="WARNING", show_default=True,
              type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR"], case_sensitive=False),
              help="INFO adds a line per step of a fit (pilot, pass, selection, solve) with its time; ERROR hides "
                   "warnings.")
@click.option("--debug", is_flag=True, help="On an error, raise it with its Python traceback instead of one line.")
@click.option("--storage-option", "storage_options", multiple=True, metavar="KEY=VALUE",
              help="An option of the filesystem of the URLs on the command line (s3://…, gs://…), e.g. "
                   "endpoint_url=http://localhost:9000 or anon=true (repeatable; a dotted key nests: "
                   "client_kwargs.region_name=eu-west-1). A pipeline's spec has its own: storage_options.")
@click.pass_context
def main(ctx: click.Context, as_json: bool, quiet: bool, log_level: str, debug: bool,
         storage_options: tuple[str, ...]) -> None:
    """tgpflow: fit densities and score functions to big tabular data on Dask.

    The options above may also follow the command (tgpflow fit data.parquet --out m.zarr --json)."""
    ctx.meta.setdefault(META, {}).update(as_json=as_json, quiet=quiet, debug=debug)
    ctx.call_on_close(setup_logging(log_level, silent=quiet))
    if storage_options:
        from tgpflow.io.storage import parse_options, storage_config

        try:
            options = parse_options(storage_options)
        except ValueError as exc:
            raise click.BadParameter(str(exc), ctx=ctx, param_hint="--storage-option") from None
        protocols = ctx.meta.get(META, {}).get("url_protocols") or set()
        if not protocols:
            raise click.UsageError("--storage-option applies to the filesystem of a URL on the command line "
                                   "(s3://bucket/…); none is given (a pipeline spec takes storage_options)", ctx=ctx)
        ctx.with_resource(storage_config({protocol: options for protocol in protocols}))


def _set_connect_timeout(ctx: click.Context, _param: click.Parameter, value: float) -> float:
    from tgpflow.cluster import connect_timeout

    token = connect_timeout.set(value)
    ctx.call_on_close(lambda: connect_timeout.reset(token))
    return value


scheduler_timeout_option = click.option(
    "--scheduler-timeout", default=DEFAULT_CONNECT_TIMEOUT, show_default=True,
    type=click.FloatRange(min=0, min_open=True),
    metavar="SECONDS", expose_value=False, callback=_set_connect_timeout, envvar="TGPFLOW_SCHEDULER_TIMEOUT",
    help="How long to wait for the Dask scheduler (--scheduler, or a pipeline's cluster) before giving up.")
_scheduler_address = click.option(
    "--scheduler", default=None, metavar="ADDR",
    help="Dask scheduler address, scheduler file, or cluster file of type: scheduler (with TLS "
         "security: cluster/scheduler-tls.yaml); default: this machine (see --local).")


def scheduler_options(fn: Any) -> Any:
    """--scheduler ADDR and --scheduler-timeout SECONDS."""
    return _scheduler_address(scheduler_timeout_option(fn))


def _progress_mode(_ctx: click.Context, _param: click.Parameter, value: str) -> str:
    return "none" if value == "auto" and options().get("quiet") else value


progress_option = click.option("--progress", "progress_mode", default="auto", show_default=True,
                               type=click.Choice(["auto", "bar", "log", "none"]), callback=_progress_mode,
                               help="auto: a bar on a terminal, else a log line every 10 s (at --log-level INFO); "
                                    "none with -q.")


class Refused(click.ClickException):
    """A request refused before any work (an --out that may not be replaced, a --scheduler that names
    nothing): exit 2, like a usage error."""

    exit_code = 2


def check_out(out: str, kind: str, overwrite: bool) -> None:
    """Refuse an --out that may not be replaced, before any work (tgpflow.io.outputs; exit 2)."""
    from tgpflow.io.outputs import check_replace

    with runtime_errors():
        check_replace(out, kind, overwrite=overwrite)


overwrite_option = click.option("--overwrite", is_flag=True, help="Replace --out if it already holds a tgpflow output "
                                "of this kind (atomically). Nothing else is ever replaced.")
columns_option = click.option("--columns", default=None, help="Comma-separated column names.")
bad_rows_option = click.option("--on-bad-rows", default="raise", show_default=True,
                               type=click.Choice(["raise", "drop"]))


def check_source(source: str) -> None:
    """Refuse (exit 2, before any work) a local SOURCE that names nothing: no such file, or a glob matching none."""
    import glob
    import os

    if "://" in source or source.startswith("memory:"):
        return  # a URL: its filesystem says what it lacks when read
    if glob.has_magic(source) and not os.path.exists(source):
        if not glob.glob(source):
            raise Refused(f"{source}: no file matches this pattern")
    elif not os.path.exists(source):
        raise Refused(f"{source}: no such file or directory")


def split_columns(columns: str | None) -> list[str] | None:
    return [c.strip() for c in columns.split(",") if c.strip()] if columns else None
