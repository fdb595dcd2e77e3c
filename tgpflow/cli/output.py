"""What the commands print (docs/cli.md, "Output"): a short summary for people by default, ``--json`` for scripts,
``-q`` for nothing but errors; warnings one line each on stderr, without source paths.

The global options (``--json``, ``-q``, ``--log-level``, ``--debug``) are the group's, and are accepted after the
subcommand too: :class:`Group` moves them in front of it before click parses the line.
"""

from __future__ import annotations

import json
import logging
import re
import sys
import warnings
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import click

#: The group's options and whether each takes a value; accepted anywhere on the line (before a ``--``).
GLOBAL_OPTIONS = {"--json": False, "-q": False, "--quiet": False, "--debug": False, "--log-level": True,
                  "--storage-option": True}
#: Where the group's callback leaves what the commands read: the flags, and the URL protocols on the line. In
#: ``ctx.meta``, shared by every context of one invocation, so that it is found under ``dask tgpflow`` too (where
#: the root context is dask's group, not ours).
META = "tgpflow.cli"
#: A URL's protocol at the start of a token (``s3://``, ``simplecache::s3://``).
_URL = re.compile(r"^([a-z][a-z0-9+.-]*(?:::[a-z][a-z0-9+.-]*)*)://")


class Group(click.Group):
    """A click group whose global options may also follow the subcommand (``tgpflow fit … --json``)."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        hoisted = hoist_global_options(args, self._value_options(ctx, args))
        ctx.meta.setdefault(META, {})["url_protocols"] = url_protocols(hoisted)  # what --storage-option applies to
        return super().parse_args(ctx, hoisted)

    def _value_options(self, ctx: click.Context, args: Sequence[str]) -> set[str]:
        """The options of the command the line names (and of its subcommand, for a group) that take a value: a
        token after one of them is that value, never a global option to move."""
        names: set[str] = set()
        group: click.Command | None = self
        words = [a for a in args if not a.startswith("-")]
        for word in words[:2]:
            command = group.get_command(ctx, word) if isinstance(group, click.Group) else None
            if command is None:
                break
            for param in command.get_params(ctx):
                if isinstance(param, click.Option) and not param.is_flag and not param.count:
                    names.update(param.opts)
            group = command
        return names


def hoist_global_options(args: Sequence[str], value_options: set[str] = frozenset()) -> list[str]:
    """``args`` with every global option (and its value, for one that takes one) moved to the front, in order.
    Nothing after a ``--`` is moved, nor the value of one of ``value_options`` (the command's own options that take
    a value), nor a global option missing its value (click then says so)."""
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
            if takes_value and i + 1 >= len(args):
                rest.append(arg)
                break
            front.extend(args[i:i + 2] if takes_value else [arg])
            i += 2 if takes_value else 1
            continue
        rest.append(arg)
        if name in value_options and "=" not in arg and i + 1 < len(args):
            rest.append(args[i + 1])  # its value, whatever it looks like
            i += 1
        i += 1
    return front + rest


def url_protocols(args: Sequence[str]) -> set[str]:
    """The protocols of the URLs among a command line's arguments (``s3`` of ``s3://b/k``), the local filesystem's
    left out: what ``--storage-option`` applies to. The values of ``--storage-option``, ``--scheduler`` and ``--set``
    are not paths, and are skipped."""
    found: set[str] = set()
    skip = False
    for arg in args:
        if skip:
            skip = False
            continue
        if arg in ("--storage-option", "--scheduler", "--set"):
            skip = True
            continue
        match = _URL.match(arg)
        if match:
            found.update(p for p in match.group(1).split("::") if p not in ("file", "local"))
    return found


def options() -> dict[str, Any]:
    """What the group's callback recorded for this invocation (the flags, the URL protocols)."""
    ctx = click.get_current_context(silent=True)
    return ctx.meta.get(META, {}) if ctx is not None else {}


def as_json() -> bool:
    """Whether ``--json`` asked for the scripts' output."""
    return bool(options().get("as_json"))


def quiet() -> bool:
    """Whether ``-q`` asked for nothing but errors (``--json`` still prints the record a script asked for)."""
    return bool(options().get("quiet"))


def emit(record: dict[str, Any], lines: Callable[[dict[str, Any]], Iterable[str]], *, indent: int | None = None,
         default: Callable[[Any], Any] = str) -> None:
    """Print a command's result: ``record`` as one JSON document with ``--json`` (with ``-q`` too: a script asked
    for it), else the human ``lines(record)`` (nothing with ``-q``)."""
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


def setup_logging(level: str, *, silent: bool) -> Callable[[], None]:
    """The ``tgpflow`` logger at ``level`` (ERROR with ``-q``) on stderr, and Python warnings (a fit's diagnostics:
    mass without data, a tiny ESS) as one line each through it; returns what puts Python's warning display back
    (called when the command ends: a notebook or a test that runs a command in-process keeps its own)."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_Lines())
    root = logging.getLogger("tgpflow")
    root.handlers[:] = [handler]
    root.setLevel("ERROR" if silent else level.upper())
    before = warnings.showwarning
    warnings.showwarning = _show_warning

    def restore() -> None:
        warnings.showwarning = before

    return restore


def _show_warning(message: Warning | str, category: type[Warning], filename: str, lineno: int,
                  file: Any = None, line: str | None = None) -> None:
    """A warning as one log line without its source path; a library's own category (not tgpflow's) is named."""
    text = str(message).strip()
    if not category.__module__.startswith("tgpflow"):
        text = f"{category.__name__}: {text}"
    logging.getLogger("tgpflow").warning(" ".join(text.split()))
