"""``tgpflow fit`` builds its estimator from the parameter tables (issue 16): ``-p NAME=VALUE`` for any
parameter and the named options (``--lam``, …) give the estimator Python would build with the same values;
an option or key that ``--model`` does not use, a malformed value or a broken rule is a usage error (exit 2)
before any work; every named option is a table entry; ``--help`` lists the tables."""

from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner

import tgpflow
import tgpflow.cli.fit_options as fit_options
from tests.conftest import write_parquet
from tgpflow.cli import main
from tgpflow.models.registry import cli_models, model_kinds
from tgpflow.models.estimator_base import Estimator


class Built(Exception):
    """Raised by a patched ``fit``: the CLI built this estimator (and stops there)."""


@pytest.fixture
def built(monkeypatch):
    """The estimator ``tgpflow fit`` builds, caught at its ``fit`` (which then fails: exit 1, nothing written)."""
    seen = []

    def fit(self, *args, **kwargs):
        seen.append(self)
        raise ValueError("stopped by the test")

    for kind in model_kinds().values():
        monkeypatch.setattr(kind.estimator_class(), "fit", fit)
    return seen


def _fit(tmp_path, *argv):
    return CliRunner().invoke(main, ["fit", str(tmp_path / "x.parquet"), "--out", str(tmp_path / "m.zarr"),
                                     "--progress", "none", *argv])


@pytest.fixture
def source(tmp_path, rng):
    return write_parquet(tmp_path / "x.parquet", rng.normal(size=(600, 2)), names=["u", "v"])


# (--model, command-line parameters, the same parameters in Python)
CASES = [
    ("fd", ["-p", "lam_grid=0.1,1", "-p", "criterion=loglik", "--bandwidth", "0.3,0.6", "-p", "pilot=exact",
            "--seed", "4", "-p", "normalizer_draws=2000", "-p", "bounds=u:0:,v::9"],
     dict(method="fd", lam_grid=[0.1, 1.0], criterion="loglik", bandwidth=[0.3, 0.6], pilot="exact", random_state=4,
          normalizer_draws=2000, bounds={"u": [0.0, None], "v": [None, 9.0]})),
    ("ncfd", ["-p", "noise_levels=3", "--sigma-max", "paper", "--lam", "0.5", "-p", "random_state=none"],
     dict(method="ncfd", noise_levels=3, sigma_max="paper", lam=0.5, random_state=None)),
    ("map", ["-p", "map_draws=5000", "-p", "map_max_iter=7", "-p", "block_bytes=1000000"],
     dict(method="map", map_draws=5000, map_max_iter=7, block_bytes=1_000_000)),
    ("nkef", ["-p", "lite=true", "--n-basis", "7", "-p", "radial=imq", "--base", "gaussian"],
     dict(lite=True, n_basis=7, radial="imq", base="gaussian")),
    ("score", ["--kernel", "diagonal", "--regularizer", "cutoff", "-p", "lam=auto", "-p", "lam_grid=0.001,0.1",
               "-p", "split_every=3"],
     dict(kernel="diagonal", regularizer="cutoff", lam="auto", lam_grid=[0.001, 0.1], split_every=3)),
    ("kde_sdo", ["-p", "smoothness=0.5,2", "-p", "whiten=none", "--n-features", "64", "-p", "order=3"],
     dict(method="kde_sdo", smoothness=[0.5, 2.0], whiten="none", n_features=64, order=3)),
]


@pytest.mark.parametrize("model, argv, python", CASES, ids=[c[0] for c in CASES])
def test_the_cli_builds_the_estimator_python_builds_from_the_same_parameters(model, argv, python, source, tmp_path,
                                                                           built):
    r = _fit(tmp_path, "--model", model, *argv)
    assert r.exit_code == 1 and "stopped by the test" in r.output, r.output
    [est] = built
    kind = cli_models()[model][0]
    assert type(est).__name__ == kind
    assert est.get_params() == model_kinds()[kind].estimator_class()(**python).get_params()


def test_a_fitted_and_saved_cli_model_holds_the_same_parameters(source, tmp_path):
    r = _fit(tmp_path, "--model", "fvpd", "--n-features", "16", "-p", "eta=1,4", "--lam", "auto", "-p",
             "lam_grid=0.5,5", "--bandwidth", "1.0", "-p", "normalizer_draws=1000", "-p", "threshold_quantile=0.05")
    assert r.exit_code == 0, r.output
    python = tgpflow.GPTiltedDensity(method="fvpd", n_features=16, eta=[1.0, 4.0], lam="auto", lam_grid=[0.5, 5.0],
                                     bandwidth=1.0, normalizer_draws=1000, threshold_quantile=0.05)
    assert tgpflow.load(tmp_path / "m.zarr").get_params() == python.get_params()


def test_a_named_option_and_its_p_form_are_the_same(source, tmp_path, built):
    for argv in (["--lam", "0.25", "--seed", "3"], ["-p", "lam=0.25", "-p", "random_state=3"]):
        assert _fit(tmp_path, "--model", "fd", *argv).exit_code == 1
    assert built[0].get_params() == built[1].get_params() and built[0].lam == 0.25 and built[0].random_state == 3


REFUSED = [
    (["--model", "fd", "-p", "noise_levels=4"], "-p noise_levels does nothing with --model fd; it applies to --model "
                                                "ncfd."),
    (["--model", "kde_rff", "-p", "eta=2"], "-p eta does nothing with --model kde_rff; it applies to --model fvpd."),
    (["--model", "map", "-p", "lite=true"], "-p lite does nothing with --model map; it applies to --model nkef."),
    (["--model", "nkef", "-p", "map_draws=10"], "it applies to --model map."),
    (["--model", "rsr", "-p", "criterion=sliced"], "it applies to --model fd, fvpd, map, ncfd."),
    (["--model", "fd", "-p", "colour=blue"], "-p colour: no model has a parameter 'colour'"),
    (["--model", "fd", "-p", "method=ncfd"], "-p method: --model fd sets method"),
    (["--model", "fd", "-p", "lam"], "expected NAME=VALUE; got 'lam'"),
    (["--model", "fd", "--lam", "0.1", "-p", "lam=0.2"], "lam is given twice (--lam and -p lam)"),
    (["--model", "fd", "-p", "n_features=0"], "'0' is not a positive integer"),
    (["--model", "fd", "-p", "lam_grid=0.1,-1"], "'-1' is not a positive number"),
    (["--model", "score", "-p", "lam=inf"], "'inf' is not finite"),
    (["--model", "nkef", "-p", "lite=maybe"], "'maybe' is not True or False"),
    (["--model", "kde_rff", "--bandwidth", "0.3,0.6"], "kde_rff has no λ or η to select"),
    (["--model", "ncfd", "--base", "learn"], "base='learn' is defined for method 'fd' and 'fvpd'"),
    (["--model", "nkef", "-p", "lite=true", "--regularizer", "nu"], "use regularizer='tikhonov' (got 'nu')"),
    (["--model", "nkef", "-p", "step=0.5"], "step is the step of the Landweber and ν-method iterations"),
]


@pytest.mark.parametrize("argv, says", REFUSED, ids=[" ".join(c[0][1:]) for c in REFUSED])
def test_what_the_model_does_not_take_is_a_usage_error_before_any_work(argv, says, tmp_path, built):
    """The source need not exist: the options are refused first, and nothing is built or written."""
    r = _fit(tmp_path, *argv)
    assert r.exit_code == 2, r.output
    assert says in " ".join(r.output.split()), r.output
    assert not built and not (tmp_path / "m.zarr").exists()


#: The options of ``tgpflow fit`` that are not estimator parameters.
NOT_PARAMETERS = {"source", "method", "out", "overwrite", "columns", "scheduler", "scheduler_timeout", "local",
                  "progress_mode", "param_pairs"}


def test_every_fit_option_is_a_parameter_table_entry():
    """A model option written by hand beside the tables would fail here: each option that is not about the run
    itself names a parameter of a table, and its help is that parameter's."""
    import click

    fit = main.commands["fit"]
    with click.Context(fit) as ctx:
        options = [p for p in fit.get_params(ctx) if p.name not in NOT_PARAMETERS and p is not fit.get_help_option(ctx)]
    tables = [kind.table_class() for kind in model_kinds().values()]
    assert {p.name for p in options} == set(fit_options.FIT_OPTIONS)
    for option in options:
        owners = [t for t in tables if option.name in t.model_fields]
        assert owners, option.name
        assert option.help.startswith(owners[0].help_of(option.name))


def test_a_named_option_without_a_table_entry_fails_when_the_command_is_built(monkeypatch):
    monkeypatch.setattr(fit_options, "FIT_OPTIONS", (*fit_options.FIT_OPTIONS, "colour"))
    with pytest.raises(RuntimeError, match="tgpflow fit --colour: no model's parameter table has 'colour'"):
        fit_options.model_options()


def test_params_lists_every_parameter_with_its_help():
    """``tgpflow params`` (every model's table; ``fit --help`` points to it) lists each parameter with its help and
    what it accepts; ``tgpflow params MODEL`` shows a parameter its --model sets as set, and leaves out those it
    does not use."""
    r = CliRunner().invoke(main, ["params"])
    assert r.exit_code == 0
    text = "".join(r.output.split())
    for kind in model_kinds().values():
        table = kind.table_class()
        for name in table.model_fields:
            assert "".join(f"{name}{table.help_of(name)}[{table.allowed(name)}".split()) in text, name
    fvpd = " ".join(CliRunner().invoke(main, ["params", "fvpd"]).output.split())
    assert "method 'fvpd': set by --model fvpd" in fvpd and "noise_levels" not in fvpd  # NCFD's alone
    assert "tgpflow params MODEL" in CliRunner().invoke(main, ["fit", "--help"]).output


def test_the_p_values_are_the_tables_types(tmp_path):
    """``-p`` parses with the table's types: what parses is what the table accepts."""
    from tgpflow.models.params import GPTiltedParams, NystromKEFParams

    assert GPTiltedParams.parse_text("bandwidth", "0.5") == 0.5
    assert GPTiltedParams.parse_text("bandwidth", "0.5,1") == [0.5, 1.0]
    assert GPTiltedParams.parse_text("bandwidth", "scott") == "scott"
    assert GPTiltedParams.parse_text("lam_grid", "2") == [2.0]
    assert NystromKEFParams.parse_text("n_components", "None") is None
    assert NystromKEFParams.parse_text("lite", "false") is False
    for name, text in (("bandwidth", "0.5,1"), ("sigma_max", "0"), ("random_state", "7"), ("bounds", "a:0:1")):
        GPTiltedParams.check({name: GPTiltedParams.parse_text(name, text)})
    with pytest.raises(ValueError, match="'scott' is not 'median', a positive number or a non-empty list"):
        NystromKEFParams.parse_text("bandwidth", "scott")
    with pytest.raises(ValueError, match="'0' is not a positive number"):
        GPTiltedParams.parse_text("lam_grid", "0")


def test_the_parameters_of_every_model_are_the_estimators(tmp_path):
    """The tables the CLI reads are the ones the estimators check (the registry and the classes agree)."""
    for kind in model_kinds().values():
        cls = kind.estimator_class()
        assert issubclass(cls, Estimator) and cls.params_table is kind.table_class()
    assert np.all([json.dumps(kind.table_class().model_json_schema()) for kind in model_kinds().values()])
