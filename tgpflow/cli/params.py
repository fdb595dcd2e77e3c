"""``tgpflow params``: each model's parameters, what they accept and their defaults (what ``tgpflow fit -p`` takes)."""

from __future__ import annotations

import click

from tgpflow.cli.app import main
from tgpflow.cli.fit_options import ModelChoice, write_parameters


@main.command()
@click.argument("model", type=ModelChoice(), required=False, metavar="[MODEL]")
def params(model: str | None) -> None:
    """The parameters of MODEL (a --model value of tgpflow fit; every model's without it): for each, what it
    does, what it accepts and its default. Give one to tgpflow fit as -p NAME=VALUE or its flag, e.g. --lam."""
    formatter = click.HelpFormatter()
    write_parameters(formatter, model)
    click.echo(formatter.getvalue(), nl=False)
