"""Model files: loading reads the stored solution and solves nothing; verify=True re-solves; checksums guard it.

Every method is fitted, saved and loaded with every solver of the library (and NumPy's/SciPy's dense
factorisations) replaced by a function that fails: the loaded model must give bitwise the fitted
estimator's log density, score and Hyvärinen terms. Files of the layout before (written here by
removing what layout 2 added) still load to the models they hold.
"""

from __future__ import annotations

import contextlib
import importlib
import inspect
import json
import pkgutil
import sys
from pathlib import Path

import numpy as np
import pytest
import zarr

import tgpflow
from tgpflow import GPTiltedDensity, NystromKEF, RootSobolevDensity, ScoreEstimator
from tgpflow.errors import ModelFileError
from tgpflow.io.artifact import read_artifact, write_artifact
from tgpflow.models import BoundedFitted, KernelFitted, RSRFitted, TGPFitted, fitted_from_arrays

# a few hundred rows: the fits' and samples' quality checks may warn (not what these tests check)
pytestmark = pytest.mark.filterwarnings("ignore::tgpflow.errors.DiagnosticWarning")

COMMON = dict(n_features=16, lam=0.5, bandwidth=0.8, normalizer_draws=2000)

MODELS = {
    "fd": lambda: GPTiltedDensity(method="fd", **COMMON),
    "ncfd": lambda: GPTiltedDensity(method="ncfd", noise_levels=3, **COMMON),
    "fvpd": lambda: GPTiltedDensity(method="fvpd", **COMMON),
    "map": lambda: GPTiltedDensity(method="map", map_draws=3000, **COMMON),
    "kde_rff": lambda: GPTiltedDensity(method="kde_rff", n_features=16, bandwidth=0.8),
    "fd_learn": lambda: GPTiltedDensity(method="fd", base="learn", **COMMON),
    "fvpd_learn": lambda: GPTiltedDensity(method="fvpd", base="learn", **COMMON),
    "fd_bounded": lambda: GPTiltedDensity(method="fd", bounds=[[-6.0, None], [None, 4.0]], **COMMON),
    "fvpd_selected": lambda: GPTiltedDensity(method="fvpd", n_features=16, lam="auto", lam_grid=[0.1, 1.0, 10.0],
                                             eta=[1.0, 4.0], bandwidth=0.8, normalizer_draws=2000),
    "nkef": lambda: NystromKEF(n_basis=10, base="gaussian", lam=1e-2),
    "nkef_flat": lambda: NystromKEF(n_basis=10, lam=1e-2),
    "nkef_lite": lambda: NystromKEF(n_basis=10, lite=True, base="gaussian", lam=1e-2),
    "nkef_subsampled": lambda: NystromKEF(n_basis=10, n_components=1, lam=1e-2),
    "nkef_nu": lambda: NystromKEF(n_basis=10, regularizer="nu", lam=1e-2),
    "stein": lambda: ScoreEstimator.preset("stein", n_basis=10, lam=1e-2),
    "ssge": lambda: ScoreEstimator.preset("ssge", n_basis=10, lam=1e-2),
    "landweber": lambda: ScoreEstimator.preset("landweber", n_basis=10, lam=1e-2, base="gaussian"),
    "kernel_selected": lambda: NystromKEF(n_basis=10, lam="auto", bandwidth=[0.5, 1.0]),
    "rsr": lambda: RootSobolevDensity(n_features=40, max_iter=20),
    "kde_sdo": lambda: RootSobolevDensity(method="kde_sdo", n_features=40),
}


def _solver_functions() -> list[tuple[object, str]]:
    """Every tgpflow.solve function wherever a tgpflow module holds it, and the dense factorisations."""
    import tgpflow.solve

    for info in pkgutil.iter_modules(tgpflow.solve.__path__):
        importlib.import_module(f"tgpflow.solve.{info.name}")
    targets = []
    for name, module in list(sys.modules.items()):
        if name.startswith("tgpflow") and module is not None:
            targets += [(module, attr) for attr, value in vars(module).items()
                        if inspect.isfunction(value) and value.__module__.startswith("tgpflow.solve")]
    import numpy.linalg
    import scipy.linalg

    from tgpflow.models import rsr_iteration

    targets += [(scipy.linalg, n) for n in ("cholesky", "cho_factor", "cho_solve", "solve", "solve_triangular", "eigh",
                                            "inv", "pinv", "lstsq", "svd")]
    targets += [(numpy.linalg, n) for n in ("cholesky", "solve", "eigh", "inv", "pinv", "lstsq", "svd", "eig")]
    targets += [(GPTiltedDensity, "_solve_stats"), (GPTiltedDensity, "_set_solution"), (ScoreEstimator, "_solve"),
                (ScoreEstimator, "_solve_stats"), (rsr_iteration, "batch_fit"), (RootSobolevDensity, "fit_from_stats")]
    return targets


@contextlib.contextmanager
def no_solve(monkeypatch):
    """Any solve or dense factorisation inside the block fails the test."""
    def refuse(*args, **kwargs):
        raise AssertionError("a solve ran while loading a model")

    with monkeypatch.context() as m:
        for owner, attr in _solver_functions():
            m.setattr(owner, attr, refuse)
        yield


def _outputs(est, X, sigma=None):
    """What a model says about rows: log density (where it has one), score, Hyvärinen terms (where defined)."""
    f = est.fitted(sigma)
    out = {"grad": f.grad_log_density(X), "grad_est": est.grad_log_density(X)}
    if f.has_log_density:
        out["logp"] = f.log_density(X)
    if not (isinstance(f, RSRFitted) and f.method == "kde_sdo"):
        out["hyv"] = f.hyvarinen_terms(X)
    return out


def _assert_same(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    for k in a:
        np.testing.assert_array_equal(a[k], b[k], err_msg=k)


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(3)
    a = rng.multivariate_normal([0.0, 0.0], [[1.0, 0.6], [0.6, 1.0]], size=300)
    b = rng.multivariate_normal([2.5, -1.0], [[0.3, 0.0], [0.0, 0.5]], size=150)
    return np.concatenate([a, b])


@pytest.fixture(scope="module")
def fitted_models(data):
    import warnings

    with warnings.catch_warnings():  # a module-scoped fixture runs outside the tests' warning filters
        warnings.simplefilter("ignore", tgpflow.errors.DiagnosticWarning)
        return {name: make().fit(data) for name, make in MODELS.items()}


@pytest.mark.parametrize("name", sorted(MODELS))
def test_load_reads_the_solution_bitwise_and_solves_nothing(name, fitted_models, data, tmp_path, monkeypatch):
    est = fitted_models[name]
    rows = data[::7] + 0.03
    path = est.save(tmp_path / f"{name}.zarr")
    with no_solve(monkeypatch):
        back = tgpflow.load(path)
        assert type(back) is type(est) and back.get_params() == est.get_params()
        if not (isinstance(est, RootSobolevDensity) and est.method == "rsr"):  # control: the guard catches a solve
            with pytest.raises(AssertionError, match="a solve ran"):
                tgpflow.load(path, verify=True)
    _assert_same(_outputs(back, rows), _outputs(est, rows))
    assert back.n_samples_seen_ == est.n_samples_seen_ and back.n_features_in_ == est.n_features_in_
    for attr in ("theta_", "coef_", "mean_", "covariance_", "precision_", "posterior_mean_", "posterior_precision_",
                 "predictive_m_", "predictive_chol_", "predictive_v_", "noise_levels_"):
        if hasattr(est, attr):
            np.testing.assert_array_equal(getattr(back, attr), getattr(est, attr), err_msg=attr)
    for attr in ("lam_", "eta_", "objective_", "bandwidth_", "anomaly_threshold_", "selection_", "smoothness_"):
        if hasattr(est, attr) and not (attr == "lam_" and np.isnan(est.lam_)):
            assert getattr(back, attr) == getattr(est, attr), attr
    if isinstance(est, GPTiltedDensity):
        np.testing.assert_array_equal(back.sample(40, random_state=2), est.sample(40, random_state=2))
        if est.method == "ncfd":
            _assert_same(_outputs(back, rows, sigma=0.3), _outputs(est, rows, sigma=0.3))
        if est.normalizer_ is not None:
            assert back.normalizer_.log_z == est.normalizer_.log_z


def test_a_family_loads_its_own_files_and_refuses_another_kind(fitted_models, data, tmp_path):
    for name, est in fitted_models.items():
        path = est.save(tmp_path / f"{name}.npz")
        back = type(est).load(path)
        assert type(back) is type(est)
        _assert_same(_outputs(back, data[:9]), _outputs(est, data[:9]))
    gp = next(p for p in tmp_path.glob("*.npz") if type(tgpflow.load(p)) is GPTiltedDensity)
    with pytest.raises(ModelFileError, match=r"holds a 'GPTiltedDensity', expected one of \['NystromKEF'\]"):
        NystromKEF.load(gp)


def test_every_kind_of_model_file_reads_as_a_model_and_its_statistics_do_not(fitted_models, tmp_path):
    """The output kind (what ``--overwrite`` may replace) comes from the file's metadata, not from the models'
    registry: every registered kind's file is a "model", and its statistics are "statistics"."""
    from tgpflow.io.outputs import output_kind
    from tgpflow.models.registry import kind_names

    saved = set()
    for name, est in fitted_models.items():
        assert output_kind(est.save(tmp_path / f"{name}.zarr")) == "model", name
        saved.add(type(est).__name__)
        if hasattr(getattr(est, "stats_", None), "save"):
            assert output_kind(est.stats_.save(tmp_path / f"{name}-stats.npz")) == "statistics", name
    assert saved == set(kind_names())


def test_info_reads_a_model_without_solving(fitted_models, tmp_path, monkeypatch):
    from click.testing import CliRunner

    from tgpflow.cli import main

    path = fitted_models["fvpd_learn"].save(tmp_path / "m.zarr")
    with no_solve(monkeypatch):
        r = CliRunner().invoke(main, ["--json", "info", str(path)])
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["method"] == "fvpd"


@pytest.mark.parametrize("name", ["fd", "ncfd", "fvpd_learn", "map", "kde_rff", "fd_bounded", "fvpd_selected", "nkef",
                                  "nkef_lite", "nkef_subsampled", "stein", "ssge", "landweber", "kde_sdo"])
def test_verify_re_solves_and_accepts_an_intact_file(name, fitted_models, data, tmp_path):
    est = fitted_models[name]
    back = tgpflow.load(est.save(tmp_path / "m.zarr"), verify=True)
    _assert_same(_outputs(back, data[:9]), _outputs(est, data[:9]))


def _rewrite(path: Path, out: Path, array: str, change) -> Path:
    """``path`` rewritten with one solution array changed and every checksum recomputed: a consistent file that
    its checksums cannot catch (a writer's bug, or a deliberate edit)."""
    kind, arrays, meta = read_artifact(path)
    arrays[array] = change(np.array(arrays[array]))
    return write_artifact(out, kind, arrays, meta)


@pytest.mark.parametrize("name, array", [("fd", "fitted.theta_"), ("fvpd", "fitted.predictive_v_"),
                                         ("fvpd_learn", "fitted.mean_"), ("ncfd", "fitted.noise_levels_"),
                                         ("kde_rff", "fitted.kde_weights_"), ("nkef", "fitted.coef_"),
                                         ("nkef", "fitted.base.precision"), ("kde_sdo", "fitted.coef_")])
def test_verify_catches_a_consistently_rewritten_solution(name, array, fitted_models, data, tmp_path):
    est = fitted_models[name]
    path = est.save(tmp_path / "m.zarr")

    def nudge(a):
        a.flat[0] += 1e-3 * max(1.0, float(np.abs(a).max()))
        return a

    edited = _rewrite(path, tmp_path / "edited.zarr", array, nudge)
    assert tgpflow.load(edited).n_samples_seen_ == est.n_samples_seen_  # the checksums pass: loading trusts it
    what = "could not solve the stored statistics" if name == "ncfd" else f"the stored {array[7:]} does not match the solve"
    with pytest.raises(ModelFileError, match=what):
        tgpflow.load(edited, verify=True)


@pytest.mark.parametrize("name, array", [("fvpd", "fitted.predictive_chol_"), ("nkef", "fitted.coef_"),
                                         ("rsr", "fitted.coef_"), ("kde_rff", "fitted.kde_weights_")])
def test_a_tampered_solution_array_is_refused_by_its_checksum(name, array, fitted_models, tmp_path):
    path = fitted_models[name].save(tmp_path / "m.zarr")
    g = zarr.open_group(str(path), mode="r+")
    g[array][(0,) * g[array].ndim] = 123.0
    with pytest.raises(ModelFileError, match=f"checksum mismatch in array '{array}'"):
        tgpflow.load(path)


def test_a_model_saved_without_statistics_loads_evaluates_and_says_what_it_cannot_do(fitted_models, data, tmp_path):
    est = fitted_models["fvpd"]
    with_stats, without = est.save(tmp_path / "a.zarr"), est.save(tmp_path / "b.zarr", stats=False)
    _, arrays, _ = read_artifact(without)
    assert not any(k.startswith("stats.") for k in arrays)
    assert sum(a.nbytes for a in arrays.values()) < sum(a.nbytes for a in read_artifact(with_stats)[1].values())
    back = tgpflow.load(without)
    assert back.stats_ is None
    _assert_same(_outputs(back, data[:9]), _outputs(est, data[:9]))
    with pytest.raises(ModelFileError, match=r"saved with save\(\.\.\., stats=False\)"):
        tgpflow.load(without, verify=True)
    with pytest.raises(ValueError, match=r"saved with save\(\.\.\., stats=False\)"):
        back.partial_fit(data[:50])
    kef = tgpflow.load(fitted_models["nkef"].save(tmp_path / "k.zarr", stats=False))
    with pytest.raises(ValueError, match=r"saved with save\(\.\.\., stats=False\)"):
        kef.partial_fit(data[:50])
    with pytest.raises(ModelFileError, match="no statistics to re-solve"):
        tgpflow.load(fitted_models["rsr"].save(tmp_path / "r.zarr"), verify=True)


def test_partial_fit_after_load_equals_partial_fit_of_the_fitted_model(fitted_models, data, tmp_path):
    new = data[:100] + 0.1
    for name in ("fd", "nkef"):
        est = MODELS[name]().fit(data)
        back = tgpflow.load(est.save(tmp_path / f"{name}.zarr"))
        np.testing.assert_array_equal(back.partial_fit(new).grad_log_density(data[:9]),
                                      est.partial_fit(new).grad_log_density(data[:9]))


# -- files written before layout 2 -----------------------------------------------------------------

#: What layout 2 added to a model file. Layout 1 (tgpflow f8fcc33) stored the solution under the same
#: names; compared with the files that tgpflow wrote for these models, a layout-2 file only adds the
#: Fitted meta and the layout tag, the kernel and RSR files' version and statistics stamps (and the
#: kernel files' λ), KDE-RFF's ψ/N and a kernel model's factorised Gaussian base.
LAYOUT2_META = {"GPTiltedDensity": ("fitted", "layout")}
LAYOUT2_META_OTHERS = ("fitted", "layout", "lam", "stats_kind", "tgpflow_version", "created")
LAYOUT2_ARRAYS = ("fitted.kde_weights_", "fitted.base.cov", "fitted.base.mean", "fitted.base.precision")
LEGACY_NAMES = ["fd", "ncfd", "fvpd", "map", "kde_rff", "fd_learn", "fd_bounded", "nkef", "nkef_lite", "stein", "rsr"]


def _as_layout1(path: Path, out: Path) -> Path:
    """``path`` (layout 2) written as layout 1 wrote it: without what layout 2 added."""
    kind, arrays, meta = read_artifact(path)
    for key in LAYOUT2_META.get(kind, LAYOUT2_META_OTHERS):
        meta.pop(key, None)
    return write_artifact(out, kind, {k: v for k, v in arrays.items() if k not in LAYOUT2_ARRAYS}, meta)


@pytest.mark.parametrize("name", LEGACY_NAMES)
def test_files_of_the_previous_layout_load_to_the_models_they_held(name, fitted_models, data, tmp_path, monkeypatch):
    est = fitted_models[name]
    saved = est.save(tmp_path / "m.npz")
    path = _as_layout1(saved, tmp_path / "layout1.npz")
    assert "layout" not in read_artifact(path)[2]
    rows = data[::30] + 0.05
    # layout 1 stored the Gaussian base of a kernel model only as moments: it is factorised (d × d) on load
    gaussian_base = "fitted.base.precision" in read_artifact(saved)[1]
    context = contextlib.nullcontext() if gaussian_base else no_solve(monkeypatch)
    with context:
        back = tgpflow.load(path)
    expected = _outputs(est, rows)
    got = _outputs(back, rows)
    assert got.keys() == expected.keys()
    for key in expected:
        np.testing.assert_allclose(got[key], expected[key], rtol=1e-12, atol=1e-14, err_msg=key)
    verified = tgpflow.load(path, verify=True) if name != "rsr" else back
    np.testing.assert_allclose(verified.grad_log_density(rows), expected["grad"], rtol=1e-12)


def test_a_legacy_file_is_verified_against_its_own_statistics(fitted_models, tmp_path):
    path = _as_layout1(fitted_models["fd"].save(tmp_path / "m.npz"), tmp_path / "layout1.npz")
    edited = _rewrite(path, tmp_path / "fd.npz", "fitted.theta_", lambda a: a + 1e-3)
    tgpflow.load(edited)
    with pytest.raises(ModelFileError, match="the stored theta_ does not match the solve"):
        tgpflow.load(edited, verify=True)


def test_a_map_file_from_before_map_points_loads_and_verifies_as_base_draws(data, tmp_path):
    # such files solved MAP on plain base draws ([Paisley et al.] Algorithm 1); the default is now the proposal's point
    # set
    est = GPTiltedDensity(method="map", map_draws=3000, map_points="base", **COMMON).fit(data)
    proposal = GPTiltedDensity(method="map", map_draws=3000, **COMMON).fit(data)
    assert not np.allclose(proposal.theta_, est.theta_, rtol=1e-3)  # the two rules give other fits
    kind, arrays, meta = read_artifact(est.save(tmp_path / "m.npz"))
    del meta["params"]["map_points"]
    back = tgpflow.load(write_artifact(tmp_path / "old.npz", kind, arrays, meta), verify=True)
    assert back.get_params()["map_points"] == "base"
    np.testing.assert_array_equal(back.theta_, est.theta_)


# -- the Fitted values ----------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["fd", "ncfd", "fvpd", "kde_rff", "fd_bounded", "nkef", "nkef_lite", "stein", "rsr",
                                  "kde_sdo"])
def test_fitted_values_round_trip_through_their_arrays(name, fitted_models, data):
    fitted = fitted_models[name].fitted()
    expected = {"tgp": TGPFitted, "bounded": BoundedFitted, "kernel": KernelFitted, "rsr": RSRFitted}
    assert isinstance(fitted, expected[fitted.to_meta()["kind"]])
    arrays = {k: np.array(v, copy=True) for k, v in fitted.to_arrays().items()}
    assert all(isinstance(v, np.ndarray) and v.dtype.kind in "fiub" for v in arrays.values())
    back = fitted_from_arrays(arrays, json.loads(json.dumps(fitted.to_meta())))
    assert type(back) is type(fitted)
    rows = data[::11]
    for what in ("log_density", "grad_log_density", "hyvarinen_terms"):
        try:
            want = getattr(fitted, what)(rows)
        except AttributeError:  # a diagonal score has no log density; KDE-SDO no exact Hyvärinen form
            with pytest.raises(AttributeError):
                getattr(back, what)(rows)
            continue
        np.testing.assert_array_equal(getattr(back, what)(rows), want)


def test_fitted_values_refuse_inconsistent_arrays(fitted_models):
    arrays = fitted_models["fd"].fitted().to_arrays()
    with pytest.raises(ValueError, match="theta must have shape"):
        TGPFitted.from_arrays(dict(arrays, theta=np.zeros(3)), {})
    with pytest.raises(ValueError, match="one tilt"):
        TGPFitted.from_arrays(dict(arrays, kde_weights=np.zeros(16)), {})
    with pytest.raises(ValueError, match="unknown fitted-model kind"):
        fitted_from_arrays(arrays, {"kind": "nope"})


def test_a_kernel_density_samples_by_importance_resampling_like_quadrature_says(fitted_models):
    est = fitted_models["nkef"]
    draws, ess = est.fitted().sample(20_000, random_state=0, return_ess=True)
    # the model's mean and covariance by quadrature of its (unnormalised) density on a fine grid
    g = np.linspace(-6.0, 8.0, 400)
    gx, gy = np.meshgrid(g, g)
    pts = np.column_stack([gx.ravel(), gy.ravel()])
    logp = est.log_density(pts)
    w = np.exp(logp - logp.max())
    w /= w.sum()
    mean = w @ pts
    cov = (pts - mean).T @ ((pts - mean) * w[:, None])
    se = np.sqrt(np.diag(cov) / min(ess, draws.shape[0]))
    assert np.all(np.abs(draws.mean(0) - mean) < 5 * se)
    np.testing.assert_allclose(np.cov(draws.T), cov, rtol=0.1, atol=0.05)
    with pytest.raises(ValueError, match="diagonal-kernel score has no density"):
        fitted_models["stein"].fitted().sample(10)
    with pytest.raises(ValueError, match="nothing to propose from"):
        fitted_models["rsr"].fitted().sample(10)
