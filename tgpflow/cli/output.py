"""What the commands print (docs/cli.md, "Output"): a short summary for people by default, ``--json`` for scripts,
``-q`` for nothing but errors; warnings one line each on stderr, without source paths.

The global options (``--json``, ``-q``, ``--log-level``, ``--debug``) are the group's, and are accepted after the
subcommand too: :class:`Group` moves them in front of it before click parses the line.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import warnings
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import click

#: The group's options and whether each takes a value; accepted anywhere on the line (before a ``--``).
GLOBAL_OPTIONS = {"--json": False, "-q": False, "--quiet": False, "--debug": False, "--log-level": True,
                  "--storage-option": True}


class Group(click.Group):
    """A click group whose global options may also follow the subcommand (``tgpflow fit … --json``)."""

    def main(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return super().main(*args, **kwargs)
        except BrokenPipeError:  # the reader went away (tgpflow info … | head): no error of ours to report
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
            raise SystemExit(1) from None

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        from tgpflow.io.storage import url_protocols

        ctx.meta["tgpflow.url_protocols"] = url_protocols(args)  # what --storage-option applies to
        return super().parse_args(ctx, hoist_global_options(args))


def hoist_global_options(args: Sequence[str]) -> list[str]:
    """``args`` with every global option (and the value of one that takes a value) moved to the front, in order;
    nothing after a ``--`` is moved."""
    front: list[str] = []
    rest: list[str] = []
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == "--":
            rest.extend(args[i:])
            break
        name = arg.split("=", 1)[0]
        if name in GLOBAL_OPTIONS:
            takes_value = GLOBAL_OPTIONS[name] and "=" not in arg
            front.extend(args[i:i + 2] if takes_value else [arg])
            i += 2 if takes_value else 1
            continue
        rest.append(arg)
        i += 1
    return front + rest


def _root_params() -> dict[str, Any]:
    ctx = click.get_current_context(silent=True)
    return ctx.find_root().params if ctx is not None else {}


def as_json() -> bool:
    """Whether ``--json`` asked for the scripts' output."""
    return bool(_root_params().get("as_json"))


def quiet() -> bool:
    """Whether ``-q`` asked for nothing but errors."""
    return bool(_root_params().get("quiet"))


def emit(record: dict[str, Any], lines: Callable[[dict[str, Any]], Iterable[str]], *, indent: int | None = None,
         default: Callable[[Any], Any] = str) -> None:
    """Print a command's result: ``record`` as one JSON document with ``--json``, else the human ``lines(record)``
    (nothing with ``-q``)."""
    if as_json():
        click.echo(json.dumps(record, indent=indent, default=default))
    elif not quiet():
        for line in lines(record):
            click.echo(line)


def note(text: str) -> None:
    """A one-line remark on stderr (not part of the result; hidden by ``-q``)."""
    if not quiet():
        click.echo(text, err=True)


class _Lines(logging.Formatter):
    """Warnings and errors as ``warning: …`` / ``error: …``; progress and debug lines with their time."""

    _timed = logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        if record.levelno >= logging.WARNING:
            return f"{record.levelname.lower()}: {record.getMessage()}"
        return self._timed.format(record)


def setup_logging(level: str, *, silent: bool) -> None:
    """The ``tgpflow`` logger at ``level`` (ERROR with ``-q``) on stderr, and Python warnings (a fit's diagnostics:
    mass without data, a tiny ESS) as one line each through it."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_Lines())
    root = logging.getLogger("tgpflow")
    root.handlers[:] = [handler]
    root.setLevel("ERROR" if silent else level.upper())
    warnings.showwarning = _show_warning


def _show_warning(message: Warning | str, category: type[Warning], filename: str, lineno: int,
                  file: Any = None, line: str | None = None) -> None:
    """A warning as one log line without its source path; a library's own category (not tgpflow's) is named."""
    text = str(message).strip()
    if not category.__module__.startswith("tgpflow"):
        text = f"{category.__name__}: {text}"
    logging.getLogger("tgpflow").warning(" ".join(text.split()))
