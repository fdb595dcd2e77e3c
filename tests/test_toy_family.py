"""A new model family added in one file plus its registry line (tests/toy_family.py): fitted, saved, loaded,
refitted from merged statistics, used in a pipeline and on the command line, each checked against the closed form
computed here with NumPy and SciPy (issue 41)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import scipy.stats
import yaml
from click.testing import CliRunner

import tgpflow
from tests.conftest import write_parquet
from tests.toy_family import TOY_KIND, ColumnGaussianDensity
from tgpflow.cli import main
from tgpflow.models.registry import register_kind, unregister_kind
from tgpflow.pipeline.runner import run_pipeline
from tgpflow.pipeline.spec import load_spec


@pytest.fixture
def toy():
    register_kind(TOY_KIND)
    yield TOY_KIND
    unregister_kind(TOY_KIND.name)


def _rows(seed: int, n: int = 1200) -> np.ndarray:
    return np.random.default_rng(seed).normal(size=(n, 3)) * [1.0, 3.0, 0.2] + [5.0, -2.0, 0.0]


def _closed_form(X: np.ndarray, lam: float) -> tuple[np.ndarray, np.ndarray]:
    mean = X.mean(axis=0)
    return mean, (((X - mean) ** 2).sum(axis=0) + lam) / (X.shape[0] + lam)


def test_the_toy_fits_saves_loads_and_merges_like_a_family(toy, tmp_path):
    X, Y = _rows(0), _rows(1, 500)
    est = ColumnGaussianDensity(lam=2.0).fit(X)
    mean, var = _closed_form(X, 2.0)
    np.testing.assert_allclose(est.mean_, mean, rtol=1e-12)
    np.testing.assert_allclose(est.var_, var, rtol=1e-12)
    logpdf = scipy.stats.norm(mean, np.sqrt(var)).logpdf(Y).sum(axis=1)
    np.testing.assert_allclose(est.log_density(Y), logpdf, rtol=1e-12)
    loaded = tgpflow.load(est.save(tmp_path / "toy.zarr"), verify=True)
    assert type(loaded) is ColumnGaussianDensity and loaded.anomaly_threshold_ == est.anomaly_threshold_
    np.testing.assert_array_equal(loaded.log_density(Y), est.log_density(Y))
    loaded.partial_fit(Y)  # the stored statistics plus the new rows' = a fit on all of them
    np.testing.assert_allclose(loaded.var_, _closed_form(np.vstack([X, Y]), 2.0)[1], rtol=1e-10)
    draws = est.sample(20_000, random_state=3)
    assert np.all(np.abs(draws.mean(axis=0) - mean) < 5 * np.sqrt(var / 20_000))


def test_the_toy_runs_in_a_pipeline_and_on_the_command_line(toy, tmp_path):
    (tmp_path / "data").mkdir()
    parts = {f"p{s}": _rows(s) for s in (0, 1)}
    for name, X in parts.items():
        write_parquet(tmp_path / "data" / f"{name}.parquet", X, ["a", "b", "c"], row_group_size=500)
    spec = {"name": "toy", "source": {"path": str(tmp_path / "data" / "*.parquet")},
            "models": [{"name": "cols", "estimator": "ColumnGaussianDensity", "params": {"lam": 0.5}}],
            "outputs": {"store": str(tmp_path / "store.zarr"), "models": str(tmp_path / "models")},
            "refit": {"policy": "incremental"}}
    (tmp_path / "spec.yaml").write_text(yaml.safe_dump(spec))
    run_pipeline(load_spec(tmp_path / "spec.yaml"))
    parts["p2"] = _rows(2)
    write_parquet(tmp_path / "data" / "p2.parquet", parts["p2"], ["a", "b", "c"], row_group_size=500)
    result = run_pipeline(load_spec(tmp_path / "spec.yaml"))  # the new partition's statistics added to the store's
    assert [p.rpartition("/")[2] for p in result["added"]] == ["p2.parquet"], result
    model = tgpflow.load(tmp_path / "models" / "cols")
    mean, var = _closed_form(np.vstack(list(parts.values())), 0.5)
    np.testing.assert_allclose(model.mean_, mean, rtol=1e-10)
    np.testing.assert_allclose(model.var_, var, rtol=1e-10)

    runner = CliRunner()
    out = tmp_path / "cli.zarr"
    r = runner.invoke(main, ["--json", "fit", str(tmp_path / "data" / "*.parquet"), "--model", "column_gaussian",
                             "-p", "lam=0.5",
                             "--out", str(out), "--progress", "none"])
    assert r.exit_code == 0, r.output
    printed = json.loads(r.stdout.strip().splitlines()[-1])
    np.testing.assert_allclose(printed["mean"], mean, rtol=1e-10)
    r = runner.invoke(main, ["--json", "fit", str(tmp_path / "data" / "*.parquet"), "--model", "column_gaussian",
                             "-p", "n_features=8", "--out", str(tmp_path / "x.zarr"), "--progress", "none"])
    assert r.exit_code == 2 and "n_features" in r.output  # its table says what it takes
    r = runner.invoke(main, ["--json", "info", str(out)])
    assert r.exit_code == 0, r.output
    info = json.loads(r.stdout)
    assert info["columns"] == ["a", "b", "c"] and info["method"] == "column_gaussian" and info["rows"] == 3600


def test_the_hooks_a_family_implements_are_declared_abstract():
    from tgpflow.models.estimator_base import StatsEstimator
    from tgpflow.models.streaming import StreamingMixin

    abstract = StreamingMixin.__abstractmethods__ | StatsEstimator.__abstractmethods__
    assert {n for n in abstract if n.startswith("_")} == {
        "_draw_from_pilot", "_pass_spec", "_frozen_draw", "_restore_draw", "_from_artifact", "_solve_stats",
        "_lam_grid", "_selector"}
    assert {n for n in abstract if not n.startswith("_")} == {"accumulate", "fit_from_stats"}
    # a family that leaves one out cannot be made (the check can fail)
    broken = type("Broken", (ColumnGaussianDensity,), {"_pass_spec": StreamingMixin._pass_spec})
    with pytest.raises(TypeError, match="_pass_spec"):
        broken()
