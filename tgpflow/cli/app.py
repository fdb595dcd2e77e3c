"""The ``tgpflow`` command group and what its commands share: logging, one-line errors, the common options.

Exit codes: 0 success, 2 usage error (click, or an --out that may not be replaced), 1 runtime
failure (bad data, unreadable model, numerical failure) with a one-line message on stderr; the
Python traceback only with ``tgpflow --debug``.
"""

from __future__ import annotations

import contextlib
import logging
import sys
from collections.abc import Iterator
from typing import Any

import click

from tgpflow.cluster import DEFAULT_CONNECT_TIMEOUT
from tgpflow.errors import TgpflowError


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
def runtime_errors() -> Iterator[None]:
    from tgpflow.errors import OutputExistsError, SchedulerAddressError, cause

    try:
        yield
    except click.ClickException:
        raise
    except (OutputExistsError, SchedulerAddressError) as exc:  # a refused --out, no such scheduler: usage, exit 2
        raise Refused(str(exc)) from exc
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


def load_model(path: str) -> Any:
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


progress_option = click.option("--progress", "progress_mode", default="auto", show_default=True,
                             type=click.Choice(["auto", "bar", "log", "none"]))


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


def split_columns(columns: str | None) -> list[str] | None:
    return [c.strip() for c in columns.split(",") if c.strip()] if columns else None
