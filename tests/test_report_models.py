"""``tgpflow report MODEL SOURCE`` for every model kind (docs/cli/report.md): the metrics each kind has, figures
people can read (in the data's units, with the rows visible), the anomaly threshold's share checked against the
quantile it was learned at, the verdict in the summary and in the exit code with ``--fail-on-warning``."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest
from click.testing import CliRunner

from tgpflow.cli import main
from tgpflow.errors import DiagnosticWarning
from tests.conftest import write_parquet

FITS = {  # small fits of each kind; the GP-tilted one standardized (it passes), the kernel one not (it does not)
    "fd": ["--model", "fd", "--n-features", "64", "--lam", "0.1", "--scale"],
    "nkef": ["--model", "nkef", "--n-basis", "25", "-p", "base=gaussian", "--lam", "0.001"],
    "score": ["--model", "score", "--n-basis", "25"],
    "rsr": ["--model", "rsr", "-p", "n_features=300"],
}


@pytest.fixture(scope="module")
def table(tmp_path_factory):
    """3 000 rows of three columns of mixed scales (one skewed and positive), and the same model kinds fitted."""
    tmp = tmp_path_factory.mktemp("report")
    rng = np.random.default_rng(7)
    X = np.column_stack([rng.normal(size=3000), rng.gamma(2.0, 10.0, size=3000), rng.normal(size=3000)])
    write_parquet(tmp / "t.parquet", X, ["a", "b", "c"])
    for name, args in FITS.items():
        with warnings.catch_warnings():  # the unscaled kernel fit warns of its mass outside the rows, as it should
            warnings.simplefilter("ignore", DiagnosticWarning)
            r = CliRunner().invoke(main, ["fit", str(tmp / "t.parquet"), "--out", str(tmp / f"{name}.zarr"), *args,
                                          "--progress", "none", "-q"])
        assert r.exit_code == 0, r.output
    return tmp


def _report(tmp, name, *extra):
    out = tmp / f"rep_{name}"
    r = CliRunner().invoke(main, ["report", str(tmp / f"{name}.zarr"), str(tmp / "t.parquet"), "--out", str(out),
                                  "--model-samples", "20000", "--directions", "100", "--overwrite", *extra])
    return r, out


def _readable_png(path) -> bool:
    """A PNG that is not blank: some of its pixels differ from the background."""
    import matplotlib.image as mpimg

    image = mpimg.imread(path)
    return image.ndim == 3 and float(image[..., :3].std()) > 0.02


@pytest.mark.parametrize("name", list(FITS))
def test_every_model_kind_reports_its_metrics_and_figures(table, name):
    r, out = _report(table, name, "--json")
    assert r.exit_code == 0, r.output
    printed = json.loads(r.stdout)
    metrics = json.loads((out / "metrics.json").read_text())
    assert printed["figures"] == metrics["figures"] and printed["verdict"] == metrics["verdict"]
    assert np.isfinite(metrics["hyvarinen_loss"]) and metrics["ksd2"] >= 0
    samplable = name in ("fd", "nkef")  # a Gaussian base to resample from
    expected = {"score_field.png"} | ({"marginals.png", "pairs.png", "projected_cdfs.png"} if samplable else set())
    expected |= {"anomaly_scores.png"} if name != "score" else set()
    assert set(metrics["figures"]) == expected
    assert all(_readable_png(out / f) for f in metrics["figures"])
    assert ("sample_check" in metrics) == samplable and ("sliced" in metrics) == samplable
    if name == "score":
        assert metrics["verdict"]["sample_check"] is None and "loglik" not in metrics


def test_the_threshold_flags_about_its_quantile_of_the_rows_it_was_learned_on(table):
    """The fit learns the threshold at threshold_quantile (0.01) of its training rows; the report draws it on the
    normalised scale of the histogram, so the share above it on those same rows is that quantile within
    binomial noise (a threshold left on the unnormalised scale would flag some other share)."""
    _, out = _report(table, "fd")
    anomaly = json.loads((out / "metrics.json").read_text())["anomaly_scores"]
    n = anomaly["rows"]
    assert anomaly["normalized"] and n == 3000
    assert abs(anomaly["flagged"] - 0.01) < 4 * np.sqrt(0.01 * 0.99 / n)


def test_the_verdict_is_in_the_summary_and_fails_the_exit_code_only_when_asked(table):
    good, _ = _report(table, "fd", "--fail-on-warning")
    assert good.exit_code == 0 and "verdict: the sample check passed" in good.stdout, good.output
    bad, out = _report(table, "nkef")  # unscaled columns of spreads 10× apart: mass below b's edge at 0
    assert bad.exit_code == 0 and "verdict: not passed:" in bad.stdout
    reasons = json.loads((out / "metrics.json").read_text())["verdict"]["reasons"]
    assert any(reason.startswith("sample check failed") for reason in reasons)
    failing, out = _report(table, "nkef", "--fail-on-warning")
    assert failing.exit_code == 1 and "failing (--fail-on-warning)" in failing.stderr
    assert (out / "metrics.json").is_file()  # written before failing


def test_ksd_grows_when_the_rows_move_away_from_the_model(table, tmp_path):
    """The report's KSD² of the model against its own training rows, and against the same rows shifted by one
    standard deviation of a: the Stein discrepancy of rows the model does not describe is larger."""
    import pandas as pd

    frame = pd.read_parquet(table / "t.parquet")
    frame["a"] += 1.0
    frame.to_parquet(tmp_path / "shifted.parquet")
    own = json.loads(_report(table, "score", "--json")[0].stdout)["ksd2"]
    r = CliRunner().invoke(main, ["report", str(table / "score.zarr"), str(tmp_path / "shifted.parquet"), "--out",
                                  str(tmp_path / "rep"), "--json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["ksd2"] > 3 * own  # 4.4× here
