"""``tgpflow fit``'s model options, made from the estimators' parameter tables (:mod:`tgpflow.models.params`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import click

from tgpflow.errors import closest_hint


class ModelChoice(click.Choice):
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


class FitCommand(click.Command):
    """``tgpflow fit``, whose model options (:data:`FIT_OPTIONS`, ``-p``) and their help are made from the
    estimators' parameter tables when the command is first used: ``tgpflow --help`` reads no table."""

    _tables_read = False

    def get_params(self, ctx: click.Context) -> list[click.Parameter]:
        if not self._tables_read:
            self.params.extend(model_options())
            self._tables_read = True
        return super().get_params(ctx)

    def format_epilog(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        with formatter.section("Examples"):
            formatter.write_text("\b\n" + "\n".join(EXAMPLES))


#: ``tgpflow fit --help``'s examples.
EXAMPLES = (
    "tgpflow fit data/ --out model.zarr                  # FVPD, every setting chosen from the data",
    "tgpflow fit data.parquet --columns a,b,c --scale --out model.zarr",
    "tgpflow fit data.zarr --model nkef --n-basis 500 -p lam=1e-3 --out kef.zarr",
    "tgpflow params MODEL       # each parameter of --model MODEL: what it does, accepts, defaults to",
)


def _tables() -> dict[str, Any]:
    """Model kind → its parameter table, for the kinds ``tgpflow fit --model`` fits."""
    from tgpflow.models.registry import cli_models, model_kinds

    fitted = {kind for kind, _ in cli_models().values()}
    return {name: kind.table_class() for name, kind in model_kinds().items() if name in fitted}


def _users(kind: str, name: str) -> list[str]:
    """The ``--model`` values of ``kind`` that use parameter ``name``."""
    from tgpflow.models.registry import cli_models, param_applies

    return [m for m, (k, preset) in cli_models().items() if k == kind and param_applies(k, preset.get("method"), name)]


def model_options() -> list[click.Option]:
    tables = _tables()
    options = []
    for name in FIT_OPTIONS:
        owners = {kind: t for kind, t in tables.items() if name in t.model_fields}
        if not owners:
            raise RuntimeError(f"tgpflow fit {_flag(name)}: no model's parameter table has {name!r}")
        metavars = {t.metavar(name) for t in owners.values()}
        help_text = next(iter(owners.values())).help_of(name)
        if all(t.type_of(name) is bool for t in owners.values()):  # a switch: --scale is scale=True
            options.append(click.Option([_flag(name), name], is_flag=True, flag_value="true", default=None,
                                        help=help_text))
            continue
        options.append(click.Option([_flag(name), name], default=None, metavar=metavars.pop() if len(metavars) == 1
                                    else "VALUE", help=help_text))
    options.append(click.Option(["-p", "--param", "param_pairs"], multiple=True, metavar="NAME=VALUE",
                                help="Any parameter of --model's estimator (tgpflow params MODEL lists them; "
                                     "repeatable): a list as a comma list, None as none."))
    return options


def write_parameters(formatter: click.HelpFormatter, model: str | None = None) -> None:
    """Every model's parameters (``model``'s family only, when given), with their help, what they accept and their
    default (from the tables)."""
    from tgpflow.models.registry import cli_models

    wanted, preset = (None, {}) if model is None else cli_models()[model]
    with formatter.section("Model parameters (tgpflow fit -p NAME=VALUE, or the flag of the same name)"):
        for kind, table in _tables().items():
            if wanted is not None and kind != wanted:
                continue
            models = [m for m, (k, _) in cli_models().items() if k == kind]
            rows = []
            for name in table.model_fields:
                users = _users(kind, name)
                if name in preset:  # --model MODEL sets it
                    rows.append((name, f"{preset[name]!r}: set by --model {model}"))
                    continue
                if model is not None and model not in users:
                    continue  # not used by this model
                only = f"; --model {', '.join(users)}" if users != models else ""
                rows.append((name, f"{table.help_of(name)} [{table.allowed(name)}; default "
                                   f"{table.defaults()[name]!r}{only}]"))
            formatter.write_text(f"{kind} (--model {', '.join(models)}):")
            with formatter.indentation():
                formatter.write_dl(rows)


def model_params(ctx: click.Context, model: str, options: dict[str, Any], pairs: Sequence[str]) -> dict[str, Any]:
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
                raise click.UsageError(f"{how}: no model has a parameter {name!r}"
                                       f"{closest_hint(name, table.model_fields)}; --model {model} takes "
                                       f"{', '.join(table.model_fields)}.", ctx=ctx)
            raise click.UsageError(f"{how} does nothing with --model {model}; it applies to --model "
                                   f"{', '.join(users)}.", ctx=ctx)
        try:
            values[name] = table.parse_text(name, text)
        except ValueError as exc:
            raise click.BadParameter(str(exc), ctx=ctx, param_hint=how) from None
    try:
        table.check({**preset, **values}).fit_rules()
    except ValueError as exc:
        raise click.UsageError(str(exc), ctx=ctx) from None
    return {**preset, **values}
