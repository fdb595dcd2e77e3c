"""A model's own standardization (tgpflow.features.scaling, tgpflow.models.scaled_fitted): ``scale=True`` on every
estimator, rows in and out in the data's units, checked against finite differences, quadrature and an independent
importance-sampling normaliser; bounds declared in the data's units."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from scipy.special import logsumexp

import tgpflow
from tgpflow.features.scaling import Scaling


def _mixed(n: int, seed: int = 0) -> pd.DataFrame:
    """Columns of scales about 1000, 20 and 0.09 (the README's mixed-scale case)."""
    rng = np.random.default_rng(seed)
    return pd.DataFrame({"latency": rng.lognormal(6.5, 0.4, n), "temp": rng.normal(20, 3, n),
                         "rate": rng.gamma(4, 0.02, n)})


def _fd_grad(f, X: np.ndarray, h: np.ndarray) -> np.ndarray:
    out = np.empty(X.shape)
    for j in range(X.shape[1]):
        e = np.zeros(X.shape[1])
        e[j] = h[j]
        out[:, j] = (f(X + e) - f(X - e)) / (2 * h[j])
    return out


ESTIMATORS = {
    "fd": lambda: tgpflow.GPTiltedDensity(method="fd", n_features=64, lam=1.0, bandwidth=1.0, scale=True),
    "fvpd": lambda: tgpflow.GPTiltedDensity(method="fvpd", n_features=48, lam=1.0, bandwidth=1.0, scale=True),
    "nkef": lambda: tgpflow.NystromKEF(n_basis=20, base="gaussian", scale=True),
    "rsr": lambda: tgpflow.RootSobolevDensity(n_features=200, max_iter=30, scale=True),
}


@pytest.mark.filterwarnings("ignore::tgpflow.errors.DiagnosticWarning")  # small fits: their health is not the point
@pytest.mark.parametrize("name", sorted(ESTIMATORS))
def test_a_scaled_model_takes_and_gives_the_datas_units(name):
    """Score = finite differences of the log density, Hyvärinen terms = ½‖s‖² + the finite-difference divergence of
    the score, all in the data's units, whatever the family (closed-form Jacobian diagonal, or central differences)."""
    X = _mixed(3000)
    est = ESTIMATORS[name]().fit(X)
    scaling = est.scaling_
    np.testing.assert_allclose(scaling.center, X.mean(axis=0).to_numpy(), rtol=0.05)  # the pilot: up to 3000 rows
    np.testing.assert_allclose(scaling.scale, X.std(axis=0).to_numpy(), rtol=0.05)
    x = X.iloc[:40].to_numpy()
    h = 1e-5 * scaling.scale  # central differences: O(h²) in standardized units (RSR has high frequencies)
    fitted = est.fitted()
    if fitted.has_log_density:
        s = scaling.scale  # compared in standardized units, where every column's score is about 1
        np.testing.assert_allclose(fitted.grad_log_density(x) * s, _fd_grad(fitted.log_density, x, h) * s, rtol=1e-5,
                                   atol=1e-6)
    score = fitted.grad_log_density(x)
    div = np.zeros(x.shape[0])
    for j in range(x.shape[1]):
        e = np.zeros(x.shape[1])
        e[j] = h[j]
        div += (fitted.grad_log_density(x + e)[:, j] - fitted.grad_log_density(x - e)[:, j]) / (2 * h[j])
    expected = 0.5 * (score**2).sum(axis=1) + div
    np.testing.assert_allclose(fitted.hyvarinen_terms(x), expected, rtol=1e-5, atol=1e-6 * np.abs(expected).max())
    np.testing.assert_allclose(est.hyvarinen_terms(X.iloc[:40]), fitted.hyvarinen_terms(x), rtol=1e-12)


def test_the_normalised_density_in_the_datas_units_matches_an_independent_normaliser():
    """log_density(normalized=True) subtracts the model's log Z; an independent estimate of log Z from a proposal in
    the data's units (a Student-t around the data, another seed) agrees within three standard errors, so the mean
    held-out normalised log density is the held-out log-likelihood in the data's units (the Jacobian included)."""
    X = _mixed(12000)
    train, held = X.iloc[:10000], X.iloc[10000:]
    est = tgpflow.GPTiltedDensity(method="fd", n_features=128, lam=10.0, bandwidth=1.0, scale=True,
                                  random_state=0).fit(train)
    rng = np.random.default_rng(7)
    mu, sd = train.mean().to_numpy(), train.std().to_numpy()
    from scipy.stats import t as student

    n = 400_000
    z = student.rvs(df=5, size=(n, 3), random_state=rng)
    draws = mu + 2.0 * sd * z
    log_q = student.logpdf(z, df=5).sum(axis=1) - np.log(2.0 * sd).sum()
    log_w = est.fitted().log_density(draws) - log_q
    log_z = logsumexp(log_w) - np.log(n)
    w = np.exp(log_w - log_w.max())
    se = float(np.sqrt(np.var(w) / n) / np.mean(w))  # delta method: s.e. of log of the mean weight
    diff = est.normalizer_.log_z - log_z
    assert abs(diff) <= 3 * np.hypot(se, est.normalizer_.std_error), (diff, se, est.normalizer_.std_error)
    heldout = np.mean(est.log_density(held, normalized=True))
    assert heldout == pytest.approx(np.mean(est.log_density(held)) - est.normalizer_.log_z, abs=1e-12)
    assert abs(heldout - (np.mean(est.log_density(held)) - log_z)) <= 3 * np.hypot(se, est.normalizer_.std_error)


def _two_modes(n: int, seed: int) -> pd.DataFrame:
    """A two-component mixture with columns of scales about 1000, 20 and 0.09."""
    rng = np.random.default_rng(seed)
    k = rng.integers(0, 2, n)
    return pd.DataFrame({"latency": np.where(k, 800, 1300) + 150 * rng.normal(size=n),
                         "temp": np.where(k, 18, 24) + 2 * rng.normal(size=n),
                         "rate": 0.09 + 0.02 * rng.normal(size=n)})


@pytest.mark.parametrize("seed", [0, 1])
def test_scale_true_fits_mixed_scales_better(seed):
    """Columns of scales 1000, 20 and 0.09: standardized inside the model, the default FD fit is healthy, keeps less
    mass outside the data and is better on held-out rows (measured 0.14–0.16 nats/row at both seeds); its samples
    are in the data's units."""
    X = _two_modes(20000, seed)
    train, held = X.iloc[:16000], X.iloc[16000:]
    # on the Gaussian base: a full-covariance mixture base already follows each column's scale (both fits then
    # score −6.71 nats/row on these held-out rows)
    raw = tgpflow.GPTiltedDensity(method="fd", n_features=200, random_state=0, base="empirical").fit(train)
    scaled = tgpflow.GPTiltedDensity(method="fd", n_features=200, scale=True, random_state=0,
                                     base="empirical").fit(train)
    assert scaled.fit_diagnostics_["warnings"] == []
    assert scaled.fit_diagnostics_["mass_outside"] < raw.fit_diagnostics_["mass_outside"]
    assert np.mean(scaled.log_density(held, normalized=True)) > np.mean(raw.log_density(held, normalized=True)) + 0.05
    samples = scaled.sample(20000, random_state=1)
    np.testing.assert_allclose(samples.mean(axis=0), train.mean().to_numpy(), rtol=0.02)
    np.testing.assert_allclose(samples.std(axis=0), train.std().to_numpy(), rtol=0.05)


def test_a_warning_names_the_flags_that_fix_it():
    from tgpflow.models.diagnostics import remedies
    from tgpflow.stats.support import SupportBox

    box = SupportBox(np.array([100.0, 10.0, 0.0]), np.array([2100.0, 30.0, 0.2]), 0.005, 1000)
    text = remedies(lam="auto", lam_fitted=0.1, box=box, scaled=False, suggested_bounds={"rate": [0.0, None]})
    assert text == ("declare the bounds the pilot shows: bounds={'rate': (0.0, None)} (tgpflow fit --bounds rate:0:), "
                    "or let the fit read them off: bounds='auto' (--bounds auto); or "
                    "standardize the columns (their spreads differ 1e+04-fold): scale=True (tgpflow fit --scale); or "
                    "extend lam_grid to larger values (-p lam_grid=...)")
    assert remedies(lam=0.5, lam_fitted=0.5, box=box, scaled=True, suggested_bounds=None) == (
        "raise lam (now 0.5; --lam) or select it on held-out rows: lam='auto' (--lam auto)")


def test_when_the_base_alone_puts_mass_outside_the_warning_does_not_send_the_user_to_lam():
    """λ = ∞ (the base alone) is on every selection grid: where it leaks past the box too, a larger λ cannot help
    and the warning says so, with the bounds as the fix (uniform columns fitted open: the mixture's Gaussian tails
    leak past the hard edges at 0 and 1; measured: 9.3 % outside at λ = ∞ against a limit of 3 %)."""
    rng = np.random.default_rng(0)
    X = rng.random((2000, 3))
    with pytest.warns(tgpflow.errors.DiagnosticWarning) as caught:
        est = tgpflow.GPTiltedDensity(n_features=100, bounds=None).fit(X)
    alone = [r for r in est.selection_["curve"] if np.isinf(r["lam"])]
    assert alone and all(r["mass_outside"] > r["mass_outside_limit"] for r in alone)
    messages = [str(w.message) for w in caught if "mass" in str(w.message)]
    assert messages and all("no lam helps: the base alone (lam = inf) puts" in m for m in messages)
    assert not any("extend lam_grid" in m for m in messages)
    assert all("bounds={'0': (" in m for m in messages)  # the bounds the pilot shows
    bounded = tgpflow.GPTiltedDensity(n_features=100, bounds="auto").fit(X)  # the fix it names works
    assert bounded.fit_diagnostics_["warnings"] == []


def test_bounds_are_in_the_datas_units_with_a_scaling():
    """A column bounded at 0 whose standardized values are mostly negative: the bound is declared in the data's
    units (every row is inside), the density is 0 at and below it, and it integrates to 1 over (0, ∞) by quadrature
    (both Jacobians: the log transform's and the standardization's)."""
    rng = np.random.default_rng(3)
    x = pd.DataFrame({"latency_ms": rng.lognormal(3.0, 0.6, 8000)})
    est = tgpflow.GPTiltedDensity(method="fd", n_features=64, lam=1.0, scale=True, bounds={"latency_ms": (0, None)},
                                  random_state=0).fit(x)
    assert est.n_rows_dropped_ == 0 and (est.scaling_.forward(x.to_numpy()) < 0).mean() > 0.5
    assert est.fitted().log_density(np.array([[0.0], [-1.0]])).tolist() == [-np.inf, -np.inf]
    # ∫ p(x) dx over (0, ∞) on a log grid: ∫ p(e^u) e^u du
    u = np.linspace(np.log(x.latency_ms.min()) - 4, np.log(x.latency_ms.max()) + 4, 20001)
    logp = est.fitted().log_density(np.exp(u)[:, None]) - est.normalizer_.log_z
    mass = np.trapezoid(np.exp(logp + u), u)
    assert mass == pytest.approx(1.0, abs=4 * est.normalizer_.std_error + 1e-3)
    assert est.bounds_.to_dict() == {"latency_ms": [0.0, None]}  # reported in the data's units
    assert est.fitted().draw is est.features_  # the wrappers' draw is the inner model's (it raised before)
    # next to the bound the transform is taken in the data's units: no cancellation against the standardized bound
    near = np.array([[1e-14], [1e-12], [1e-9]])
    logp = est.fitted().log_density(near)
    assert np.isfinite(logp).all()
    inner = est.fitted().inner  # the model of z = (log x − c')/s', c' = log s: log p = log q(z) − log x
    z = np.log(near) - np.log(est.scaling_.scale)
    np.testing.assert_allclose(logp, inner.inner.log_density(z) - np.log(near[:, 0]), rtol=1e-13)


@pytest.mark.filterwarnings("ignore::tgpflow.errors.DiagnosticWarning")
@pytest.mark.parametrize("name", sorted(ESTIMATORS))
def test_a_scaled_model_file_keeps_its_scaling(tmp_path, name):
    X = _mixed(2000)
    est = ESTIMATORS[name]().fit(X)
    est.save(tmp_path / "m.zarr")
    back = tgpflow.load(tmp_path / "m.zarr")
    assert back.scaling_.equals(est.scaling_)
    x = X.iloc[:50]
    method = "log_density" if hasattr(est, "log_density") else "grad_log_density"
    np.testing.assert_array_equal(getattr(back, method)(x), getattr(est, method)(x))


@pytest.mark.filterwarnings("ignore::tgpflow.errors.DiagnosticWarning")
def test_given_scaling_is_used_and_statistics_alone_refuse_scale_true():
    X = _mixed(3000)
    given = Scaling(np.zeros(3), np.array([100.0, 1.0, 0.1]))
    est = tgpflow.GPTiltedDensity(method="fd", n_features=32, lam=1.0, bandwidth=1.0).fit(X, scaling=given)
    assert est.scaling_ is given
    stats = est.stats_
    with pytest.raises(ValueError, match="do not carry the standardization"):
        tgpflow.GPTiltedDensity(method="fd", n_features=32, lam=1.0, bandwidth=1.0, scale=True).fit_from_stats(stats)
    with pytest.raises(ValueError, match=r"column\(s\) \['flat'\] are constant"):
        tgpflow.GPTiltedDensity(scale=True).fit(pd.DataFrame({"a": np.arange(10.0), "flat": np.ones(10)}))


def test_the_cli_fits_with_scale_and_bounds_in_the_datas_units(tmp_path):
    """`tgpflow fit --scale --bounds col:0:` (bounds in the data's units); the model file keeps the scaling and
    `tgpflow info` says so."""
    import json

    from click.testing import CliRunner

    from tgpflow.cli import main

    from conftest import write_parquet

    X = _mixed(6000, seed=4)
    write_parquet(tmp_path / "d.parquet", X.to_numpy(), list(X.columns))
    r = CliRunner().invoke(main, ["--json", "fit", str(tmp_path / "d.parquet"), "--model", "fd", "--scale", "--bounds",
                                  "latency:0:,rate:0:", "--n-features", "64", "--lam", "1", "--bandwidth", "1",
                                  "--out", str(tmp_path / "m.zarr"), "--progress", "none"])
    assert r.exit_code == 0, r.output
    est = tgpflow.load(tmp_path / "m.zarr")
    assert est.scale and est.bounds_.to_dict() == {"latency": [0.0, None], "rate": [0.0, None]}
    np.testing.assert_allclose(est.scaling_.scale, X.std(ddof=0).to_numpy(), rtol=1e-12)  # all 6000 rows: the pilot
    info = json.loads(CliRunner().invoke(main, ["--json", "info", str(tmp_path / "m.zarr")]).stdout)
    assert info["preprocessing"]["standardized"] and info["bounds"] == {"latency": [0.0, None], "rate": [0.0, None]}
    assert (est.sample(2000, random_state=0) > [0, -np.inf, 0]).all()


@pytest.mark.filterwarnings("ignore::tgpflow.errors.DiagnosticWarning")  # an unscaled fit of mixed scales
def test_a_model_file_written_before_scalings_loads_and_info_says_it_has_none(tmp_path):
    import json

    from click.testing import CliRunner

    from tgpflow.cli import main
    from tgpflow.io.artifact import read_artifact, write_artifact

    est = tgpflow.GPTiltedDensity(method="fd", n_features=32, lam=1.0, bandwidth=1.0).fit(_mixed(2000))
    kind, arrays, meta = read_artifact(est.save(tmp_path / "m.npz"))
    del meta["scaling"], meta["params"]["scale"]  # what a file written before this release holds
    old = write_artifact(tmp_path / "old.npz", kind, arrays, meta)
    back = tgpflow.load(old)
    assert back.scaling_ is None and back.scale is False
    np.testing.assert_array_equal(back.log_density(_mixed(50)), est.log_density(_mixed(50)))
    info = json.loads(CliRunner().invoke(main, ["--json", "info", str(old)]).stdout)
    assert not info["preprocessing"]["standardized"]
    assert info["preprocessing"]["note"].startswith("written before model files carried a standardization")


def test_mala_moves_every_column_of_a_scaled_model():
    """Columns of spreads 2e4 and 1: one step size in the data's units leaves the wide column where the chains
    started; preconditioned by the model's scaling, the draws' spreads and means match the data's."""
    from tgpflow.sample.mcmc import mcmc_sample

    rng = np.random.default_rng(5)
    X = pd.DataFrame({"bytes": rng.normal(5e4, 2e4, 4000), "load": rng.normal(0.5, 1.0, 4000)})
    est = tgpflow.GPTiltedDensity(method="fd", n_features=64, lam=1.0, bandwidth=1.0, scale=True).fit(X)
    result = mcmc_sample(est, 4000, n_chains=16, thin=5, n_warmup=300, random_state=0)
    np.testing.assert_allclose(result.draws.std(axis=0), X.std().to_numpy(), rtol=0.15)
    np.testing.assert_allclose((result.draws.mean(axis=0) - X.mean().to_numpy()) / X.std().to_numpy(), 0, atol=0.15)
    assert result.rhat.max() < 1.05
    from tgpflow.sample.svgd import svgd

    particles = svgd(est, est.base_draws(300, random_state=1), 300, random_state=0).particles
    np.testing.assert_allclose(particles.std(axis=0), X.std().to_numpy(), rtol=0.2)


def test_one_scale_for_every_column_divides_the_hyvarinen_terms_by_its_square():
    """With one scale s for every column, ½‖s(x)‖² + div s(x) is the standardized model's over s²: checked against
    the score's finite-difference divergence."""
    from tgpflow.models.scaled_fitted import ScaledFitted

    X = np.random.default_rng(0).normal(size=(2000, 2)) * 3
    inner = tgpflow.NystromKEF(n_basis=20, base="gaussian").fit(X / 3).fitted()
    fitted = ScaledFitted(inner, Scaling(np.zeros(2), np.array([3.0, 3.0])))
    x, h = X[:20], 1e-5
    div = sum((fitted.grad_log_density(x + h * e)[:, j] - fitted.grad_log_density(x - h * e)[:, j]) / (2 * h)
              for j, e in enumerate(np.eye(2)))
    expected = 0.5 * (fitted.grad_log_density(x) ** 2).sum(axis=1) + div
    np.testing.assert_allclose(fitted.hyvarinen_terms(x), expected, rtol=1e-6, atol=1e-8)
