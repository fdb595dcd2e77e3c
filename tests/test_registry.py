"""One registry of model kinds and methods (issue 16): a GP-tilted method added from this file alone is
fitted, saved and loaded by GPTiltedDensity, listed by ``tgpflow fit --model`` and accepted by pipeline specs;
``load``, the specs, the CLI and the stores all read ``tgpflow.models.registry``."""

import json

import numpy as np
import pytest
from click.testing import CliRunner

import tgpflow
from tests.conftest import write_parquet
from tgpflow.cli import main
from tgpflow.models.registry import cli_models, kind_names, model_classes, pipeline_estimators, stats_classes
from tgpflow.models.tgp_fitted import TGPFitted
from tgpflow.models.tgp_method import Hyper, Solution, TGPMethod
from tgpflow.models.tgp_methods import get_method, method_names, register_method, unregister_method
from tgpflow.pipeline.spec import PipelineSpec
from tgpflow.solve.tgp import fd_system


class HalfFD(TGPMethod):
    """A test-only method: half the FD tilt, θ = ½ A⁻¹b, by a plain dense solve (the default TGPStats pass)."""

    name = "half_fd"

    def solve(self, stats, hyper: Hyper) -> Solution:
        A, b = fd_system(stats, hyper.features, hyper.base, hyper.lam)
        theta = 0.5 * np.linalg.solve(A, b)
        return Solution(TGPFitted(hyper.features, hyper.base, theta=theta, block_bytes=hyper.block_bytes),
                        {"method": "numpy.linalg.solve"}, theta=theta)


@pytest.fixture
def half_fd():
    method = register_method(HalfFD())
    yield method
    unregister_method(method.name)


def _fit(method, X):
    return tgpflow.GPTiltedDensity(method=method, n_features=32, lam=0.5, bandwidth=1.0, random_state=0).fit(X)


def test_a_method_registered_from_a_test_fits_saves_and_loads(half_fd, rng, tmp_path):
    X = rng.normal(size=(1500, 2))
    est = _fit("half_fd", X)
    ref = _fit("fd", X)  # the same pilot, draw and statistics; FD's own solve
    assert isinstance(est.stats_, type(ref.stats_))
    np.testing.assert_allclose(est.theta_, 0.5 * ref.theta_, rtol=1e-8, atol=1e-12)
    assert est.solver_info_ == {"method": "numpy.linalg.solve"}
    path = est.save(tmp_path / "half.zarr")
    back = tgpflow.load(path)
    assert back.method == "half_fd" and type(back) is tgpflow.GPTiltedDensity
    np.testing.assert_array_equal(back.log_density(X[:50]), est.log_density(X[:50]))
    np.testing.assert_array_equal(back.grad_log_density(X[:50]), est.grad_log_density(X[:50]))
    back.partial_fit(X[:300])  # its statistics were stored: new rows are added and re-solved
    assert back.n_samples_seen_ == 1800


def test_the_registry_lists_it_for_the_cli_and_pipeline_specs(half_fd, rng, tmp_path):
    assert "half_fd" in method_names() and get_method("half_fd") is half_fd
    assert cli_models()["half_fd"] == ("GPTiltedDensity", {"method": "half_fd"})
    src = str(write_parquet(tmp_path / "x.parquet", rng.normal(size=(800, 2)), names=["a", "b"]))
    out = str(tmp_path / "m.zarr")
    r = CliRunner().invoke(main, ["--json", "fit", src, "--model", "half_fd", "--out", out, "--n-features", "16",
                                  "--lam", "0.5",
                                  "--bandwidth", "1.0", "--progress", "none"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["method"] == "half_fd" and tgpflow.load(out).method == "half_fd"
    spec = {"name": "t", "source": {"path": src}, "outputs": {"store": "s", "models": "m"},
            "models": [{"name": "h", "estimator": "GPTiltedDensity", "params": {"method": "half_fd", "lam": 0.5}}]}
    assert PipelineSpec.model_validate(spec).models[0].params["method"] == "half_fd"


def test_unknown_methods_and_kinds_are_refused_with_the_known_ones():
    with pytest.raises(ValueError, match=r"method must be one of \(.*'fd'.*'kde_rff'.*\); got 'nope'"):
        tgpflow.GPTiltedDensity(method="nope").fit(np.zeros((10, 2)))
    assert "half_fd" not in method_names()  # the fixture unregistered it
    with pytest.raises(ValueError, match="estimator must be one of"):
        PipelineSpec.model_validate({"name": "t", "source": {"path": "x"}, "outputs": {"store": "s", "models": "m"},
                                     "models": [{"name": "h", "estimator": "ExactKDE"}]})


def test_every_reader_uses_the_same_kinds():
    assert set(model_classes()) == set(kind_names()) == {"GPTiltedDensity", "NystromKEF", "ScoreEstimator",
                                                         "RootSobolevDensity"}
    assert all(getattr(tgpflow, name) is cls for name, cls in model_classes().items())
    assert set(method_names()) >= {"fd", "ncfd", "fvpd", "map", "kde_rff"}
    assert {"nkef", "score", "rsr", "kde_sdo", *method_names()} == set(cli_models())
    assert set(pipeline_estimators()) <= set(kind_names())
    assert {"TGPStats", "NCFDStats", "KEFStats", "DiagStats", "LiteStats"} <= set(stats_classes())
    from tgpflow.io.outputs import artifact_output

    # io knows a model file by the estimator parameters in its metadata, not by reading this registry (a layer
    # above it); tests/test_load.py checks that the file of every kind above reads as a model
    assert [artifact_output(meta) for meta in ({"params": {"method": "fd"}, "fingerprint": "f"}, {"fingerprint": "f"},
                                               {"type": "rff", "seed": 0, "fingerprint": "f"})] == \
        ["model", "statistics", "statistics"]


@pytest.mark.parametrize("model, option, users", [
    ("fd", ["--noise-levels", "4"], "--model ncfd."),
    ("fvpd", ["--sigma-max", "paper"], "--model ncfd."),
    ("kde_rff", ["--lam", "0.1"], "--model fd, fvpd, map, ncfd, nkef, score."),
    ("nkef", ["--n-features", "64"], "--model fd, fvpd, kde_rff, map, ncfd, rsr, kde_sdo."),
    ("nkef", ["--kernel", "diagonal"], "--model score."),
    ("rsr", ["--bounds", "u:0:"], "--model fd, fvpd, kde_rff, map, ncfd."),
    ("score", ["--criterion", "loglik"], "--model fd, fvpd, map, ncfd."),
])
def test_fit_refuses_an_option_the_model_would_ignore(tmp_path, model, option, users):
    """Options given for another model were silently ignored; now one sentence naming the option and the
    models it applies to, exit 2, before any work (the source need not exist) and nothing written."""
    out = tmp_path / "m.zarr"
    r = CliRunner().invoke(main, ["--json", "fit", str(tmp_path / "none.parquet"), "--model", model, "--out",
                                  str(out), *option])
    assert r.exit_code == 2, r.output
    assert f"{option[0]} does nothing with --model {model}; it applies to {users}" in r.output
    assert not out.exists()
