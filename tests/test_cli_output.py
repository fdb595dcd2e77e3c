"""What the commands print (docs/cli.md, "Output"): a summary for people by default that says what ``--json`` says,
the JSON for scripts, nothing but errors with ``-q``, warnings one line each without source paths, global options
after the command, and the refusals that name what was passed and what to pass instead."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import click
import numpy as np
import pytest
from click.testing import CliRunner

from tgpflow.cli import main
from tgpflow.cli.human import health_line, number
from tgpflow.cli.output import hoist_global_options
from tests.conftest import write_parquet

REPO = Path(__file__).resolve().parents[1]
FIT = ["--model", "fd", "--n-features", "32", "--progress", "none"]


@pytest.fixture(scope="module")
def fitted(tmp_path_factory):
    """A small table, a model fitted to it with the default output, and what the command printed."""
    tmp = tmp_path_factory.mktemp("out")
    rng = np.random.default_rng(3)
    X = np.column_stack([rng.normal(size=3000), rng.gamma(2.0, size=3000) * 100])
    write_parquet(tmp / "t.parquet", X, ["height", "load"])
    r = CliRunner().invoke(main, ["fit", str(tmp / "t.parquet"), "--out", str(tmp / "m.zarr"), *FIT])
    assert r.exit_code == 0, r.output
    return tmp, r


def test_global_options_are_moved_in_front_of_the_command_and_nothing_after_a_double_dash():
    assert hoist_global_options(["fit", "x", "--json", "--log-level", "info", "-q", "--", "--json"]) == [
        "--json", "--log-level", "info", "-q", "fit", "x", "--", "--json"]
    assert hoist_global_options(["info", "m", "--log-level=error", "--debug"]) == [
        "--log-level=error", "--debug", "info", "m"]
    assert hoist_global_options(["fit", "--columns", "a,b"]) == ["fit", "--columns", "a,b"]
    # the value of one of the command's own options stays its value, whatever it looks like; a global option
    # missing its value stays where it is (click then says it needs one)
    assert hoist_global_options(["fit", "d", "--columns", "-q", "--out", "m"], {"--columns", "--out"}) == [
        "fit", "d", "--columns", "-q", "--out", "m"]
    assert hoist_global_options(["info", "m", "--log-level"]) == ["info", "m", "--log-level"]
    ctx = click.Context(main)
    assert {"--columns", "--out", "--lam"} <= main._value_options(ctx, ["fit", "d", "--json"])
    assert "--out" in main._value_options(ctx, ["stats", "merge", "a", "b"])


def test_the_fit_summary_says_what_the_json_says(fitted):
    tmp, r = fitted
    lines = r.stdout.splitlines()
    assert lines[0].startswith("fitted fd to 3,000 rows × 2 columns (height, load) in ") and lines[0].endswith(
        f"→ {tmp / 'm.zarr'}"), r.stdout
    assert not any(line.lstrip().startswith("{") for line in lines) and len(lines) <= 6, r.stdout
    assert "INFO" not in r.stderr  # the steps' log lines only with --log-level info
    info = json.loads(CliRunner().invoke(main, ["info", str(tmp / "m.zarr"), "--json"]).stdout)
    chosen = info["selection"]
    assert f"bandwidth {number(chosen['bandwidth'])}" in r.stdout and f"λ {number(chosen['lam'])}" in r.stdout
    health = next(line.strip() for line in lines if "healthy" in line)
    assert health == health_line(info["diagnostics"])
    if not info["diagnostics"]["warnings"]:
        ess = round(100 * info["diagnostics"]["ess_fraction"])
        assert health.startswith("healthy: effective sample") and f"{ess:.2g} %" in health


def test_json_before_or_after_the_command_is_the_same_record_and_quiet_prints_nothing(fitted):
    tmp, _ = fitted
    model = str(tmp / "m.zarr")
    before = CliRunner().invoke(main, ["--json", "info", model])
    after = CliRunner().invoke(main, ["info", model, "--json"])
    assert before.exit_code == after.exit_code == 0
    assert json.loads(before.stdout) == json.loads(after.stdout)
    assert json.loads(before.stdout)["columns"] == ["height", "load"]
    human = CliRunner().invoke(main, ["info", model])
    assert human.stdout.startswith(f"{model}: fd (GPTiltedDensity), fitted to 3,000 rows × 2 columns")
    quiet = CliRunner().invoke(main, ["score", model, str(tmp / "t.parquet"), "--out", str(tmp / "s"), "-q"])
    assert quiet.exit_code == 0 and quiet.stdout == "" and quiet.stderr == ""
    asked = CliRunner().invoke(main, ["-q", "--json", "info", model])  # a script asked for the record: it gets it
    assert json.loads(asked.stdout) == json.loads(before.stdout) and asked.stderr == ""
    # under a group that wraps ours (as `dask tgpflow` does), the flags still reach the command
    wrapper = click.Group("dask", commands={"tgpflow": main})
    wrapped = CliRunner().invoke(wrapper, ["tgpflow", "info", model, "--json"])
    assert wrapped.exit_code == 0 and json.loads(wrapped.stdout) == json.loads(before.stdout), wrapped.output
    assert (tmp / "s").is_dir()
    scored = CliRunner().invoke(main, ["score", model, str(tmp / "t.parquet"), "--out", str(tmp / "s2")])
    assert scored.stdout.startswith(f"scored 3,000 rows of {tmp / 't.parquet'} with {model}")


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    return subprocess.run([sys.executable, "-m", "tgpflow.cli", *args], capture_output=True, text=True, cwd=cwd,
                          env=env, timeout=240)


def test_warnings_are_one_line_each_without_paths_and_log_level_error_hides_them(fitted):
    """In a real process (pytest records warnings instead of showing them): chains too short to mix warn."""
    tmp, _ = fitted
    args = ["sample", "m.zarr", "-n", "200", "--method", "mala", "--steps", "20", "--warmup", "20"]
    shown = _cli(*args, "--out", "a.parquet", cwd=tmp)
    assert shown.returncode == 0, shown.stderr
    warned = shown.stderr.strip().splitlines()
    assert warned and all(line.startswith("warning: MCMC ") for line in warned), shown.stderr
    assert not re.search(r"\.py:\d+", shown.stderr) and "Warning:" not in shown.stderr
    assert shown.stdout.startswith("drew 200 rows from m.zarr by mala → a.parquet")
    hidden = _cli(*args, "--out", "b.parquet", "--log-level", "error", "--json", cwd=tmp)
    assert hidden.returncode == 0 and hidden.stderr == ""
    assert json.loads(hidden.stdout)["warnings"] == [line.removeprefix("warning: ") for line in warned]


def test_a_missing_source_or_model_is_a_usage_error_and_another_output_says_what_to_pass(fitted):
    tmp, _ = fitted
    runner = CliRunner()
    r = runner.invoke(main, ["fit", str(tmp / "nope.parquet"), "--out", str(tmp / "x.zarr")])
    assert r.exit_code == 2 and "nope.parquet: no such file or directory" in r.stderr
    r = runner.invoke(main, ["fit", str(tmp / "nope*.parquet"), "--out", str(tmp / "x.zarr")])
    assert r.exit_code == 2 and "no file matches this pattern" in r.stderr
    r = runner.invoke(main, ["info", str(tmp / "nothing.zarr")])
    assert r.exit_code == 2 and "no such file or directory" in r.stderr
    runner.invoke(main, ["score", str(tmp / "m.zarr"), str(tmp / "t.parquet"), "--out", str(tmp / "scores")])
    r = runner.invoke(main, ["sample", str(tmp / "scores"), "-n", "5", "--out", str(tmp / "x.parquet")])
    assert r.exit_code == 2 and "is a scores dataset" in r.stderr and "not a model" in r.stderr, r.stderr
    assert not (tmp / "x.parquet").exists()
    models = tmp / "models"
    (models / "density").mkdir(parents=True)
    (models / "density" / "CURRENT").write_text("v000001\n")
    r = runner.invoke(main, ["info", str(models)])
    assert r.exit_code == 2 and f"e.g. {models}/density" in r.stderr, r.stderr


def test_a_mistyped_parameter_says_did_you_mean(fitted):
    tmp, _ = fitted
    r = CliRunner().invoke(main, ["fit", str(tmp / "t.parquet"), "--out", str(tmp / "y.zarr"), "-p", "lamda=1"])
    assert r.exit_code == 2 and "did you mean 'lam'?" in r.stderr, r.stderr


def test_fit_help_is_short_and_params_lists_one_models_table():
    r = CliRunner().invoke(main, ["fit", "--help"])
    assert r.exit_code == 0 and len(r.stdout.splitlines()) <= 120 and "tgpflow params MODEL" in r.stdout
    assert r.stdout.count("--lam ") == 1  # each shared parameter once
    r = CliRunner().invoke(main, ["params", "nkef"])
    assert r.exit_code == 0 and "NystromKEF (--model nkef)" in r.stdout and "GPTiltedDensity" not in r.stdout
    assert re.search(r"n_basis .*default", " ".join(r.stdout.split()))


def test_the_health_line_names_the_first_warning_and_counts_the_rest():
    assert health_line({"warnings": ["a  b\n c", "d"], "ess_fraction": 0.5}) == \
        "not healthy: a b c (and 1 more: --json lists them)"
    assert health_line({"warnings": [], "ess_fraction": 0.25, "mass_outside": 0.01, "mass_outside_limit": 0.03}) == \
        "healthy: effective sample 25 % of the draws, mass outside the data's box 1 % (limit 3 %)"
    assert health_line(None) is None
    assert [number(v) for v in (12000.0, 0.48425118, None, float("inf"))] == ["12,000", "0.4843", "–", "inf"]
