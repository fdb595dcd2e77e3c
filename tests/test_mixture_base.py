"""The mixture base under the tilt (docs/gp_tilted.md, "A mixture base"): its derivatives against finite
differences, the pass's new sums against per-row brute force, FD on a mixture base against a direct minimisation
of the score-matching objective, λ = ∞ as the mixture itself, and a model file that keeps its mixture."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.optimize
import scipy.special
from scipy.stats import multivariate_normal

import tgpflow
from tgpflow import GPTiltedDensity
from tgpflow.core.gaussian_base import base_from_moments, mixture_base
from tgpflow.core.moments import Moments
from tgpflow.errors import FeaturesMismatchError
from tgpflow.features.mixture_base import MIXTURE_FLOOR, GaussianMixtureBase, fit_mixture_base
from tgpflow.features.rff import RandomFourierFeatures
from tgpflow.solve.tgp import solve_fd
from tgpflow.stats.split import SPLIT_SALT, validation_mask
from tgpflow.stats.tgp import TGPStats, tgp_chunk_stats


def _mixture(d: int = 2, K: int = 3, seed: int = 0) -> GaussianMixtureBase:
    rng = np.random.default_rng(seed)
    means = rng.normal(0, 2, (K, d))
    A = rng.normal(0, 0.6, (K, d, d))
    covs = A @ np.swapaxes(A, 1, 2) + 0.3 * np.eye(d)
    w = rng.uniform(0.5, 1.5, K)
    return GaussianMixtureBase(w / w.sum(), means, covs)


def test_mixture_log_pdf_over_many_blocks_and_far_rows_is_scipys():
    """Many components over several row blocks, with rows so far out that every component's density underflows:
    the row's logsumexp against SciPy's of each component's own log density."""
    mix = _mixture(d=5, K=40, seed=3)
    rng = np.random.default_rng(4)
    far = rng.normal(size=(500, 5))
    x = np.concatenate([rng.normal(0, 2, (2500, 5)), 300 * far / np.linalg.norm(far, axis=1, keepdims=True)])
    assert x.shape[0] > 2 * (1 << 18) // (40 * 6)  # more than two of log_pdf's blocks
    per_component = np.stack([np.log(w) + multivariate_normal(m, c).logpdf(x)
                              for w, m, c in zip(mix.weights, mix.means, mix.covariances, strict=True)], axis=1)
    ref = scipy.special.logsumexp(per_component, axis=1)
    assert np.all(ref[2500:] < -700)  # exp underflows there: only the shifted sum can see these rows
    np.testing.assert_allclose(mix.log_pdf(x), ref, rtol=1e-12, atol=1e-10)
    np.testing.assert_allclose(mix.derivatives(x)[0], ref, rtol=1e-12, atol=1e-10)


def _two_blobs(n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    a = rng.normal([0.0, 0.0], [1.0, 0.3], (n // 2, 2))
    b = rng.normal([3.0, 2.0], [0.5, 1.0], (n - n // 2, 2))
    return rng.permutation(np.concatenate([a, b]))


def test_mixture_log_pdf_is_scipys_and_derivatives_match_finite_differences():
    mix = _mixture(d=3)
    x = np.random.default_rng(1).normal(0, 2, (40, 3))
    ref = np.log(sum(w * multivariate_normal(m, c).pdf(x)
                     for w, m, c in zip(mix.weights, mix.means, mix.covariances, strict=True)))
    np.testing.assert_allclose(mix.log_pdf(x), ref, rtol=1e-12, atol=1e-12)
    _, score, lap, diag = mix.derivatives(x, hess_diag=True)
    h = 1e-4
    for j in range(3):
        e = np.zeros(3)
        e[j] = h
        up, mid, down = mix.log_pdf(x + e), mix.log_pdf(x), mix.log_pdf(x - e)
        np.testing.assert_allclose(score[:, j], (up - down) / (2 * h), rtol=1e-6, atol=1e-7)
        np.testing.assert_allclose(diag[:, j], (up - 2 * mid + down) / h**2, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(lap, diag.sum(axis=1), rtol=1e-12, atol=1e-12)
    # the moments of the mixture against a Monte-Carlo estimate from its own draws
    draws, _ = mix.draw(400_000, np.random.default_rng(2))
    np.testing.assert_allclose(mix.mean, draws.mean(axis=0), atol=0.02)
    np.testing.assert_allclose(mix.cov, np.cov(draws, rowvar=False), atol=0.05)


def test_one_component_mixture_is_the_gaussian_base():
    x = np.random.default_rng(3).normal(0, 1, (500, 3)) @ np.array([[1.0, 0.3, 0.0], [0.0, 1.0, 0.5], [0, 0, 2]])
    gauss = base_from_moments(Moments.from_rows(x))
    one = mixture_base(GaussianMixtureBase(np.ones(1), gauss.mean[None], gauss.cov[None]))
    pts = np.random.default_rng(4).normal(0, 2, (50, 3))
    np.testing.assert_allclose(one.neg_log(pts), gauss.neg_log(pts), rtol=1e-10, atol=1e-10)
    g_score, g_div, g_diag = gauss.neg_score(pts, div=True, hess_diag=True)
    m_score, m_div, m_diag = one.neg_score(pts, div=True, hess_diag=True)
    np.testing.assert_allclose(m_score, g_score, rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(m_div, g_div, rtol=1e-10)
    np.testing.assert_allclose(m_diag, np.broadcast_to(g_diag, (50, 3)), rtol=1e-10)


def test_pass_sums_under_a_mixture_match_per_row_brute_force():
    mix = _mixture(d=2)
    x = mix.draw(700, np.random.default_rng(5))[0]
    feats = RandomFourierFeatures.draw(40, bandwidth=0.8, n_dims=2, shift=x.mean(axis=0), random_state=6)
    stats = tgp_chunk_stats(x, feats, mixture=mix)
    _, dphi = feats.transform(x)  # φ'(x) per row, (n, S)
    log_m, score, lap, _ = mix.derivatives(x)
    np.testing.assert_allclose(stats.V, dphi.T @ score, rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(stats.base_sums, [log_m.sum(), 0.5 * (score**2).sum() + lap.sum()], rtol=1e-12)
    # additive over parts, and a part under another mixture is refused
    parts = tgp_chunk_stats(x[:300], feats, mixture=mix) + tgp_chunk_stats(x[300:], feats, mixture=mix)
    np.testing.assert_allclose(parts.V, stats.V, rtol=1e-10, atol=1e-10)
    with pytest.raises(FeaturesMismatchError, match="mixture"):
        _ = stats + tgp_chunk_stats(x, feats, mixture=_mixture(d=2, seed=9))
    with pytest.raises(FeaturesMismatchError, match="Gaussian base"):
        _ = stats + tgp_chunk_stats(x, feats)


def test_save_load_keeps_the_mixture(tmp_path):
    mix = _mixture(d=2)
    x = mix.draw(300, np.random.default_rng(7))[0]
    feats = RandomFourierFeatures.draw(20, bandwidth=1.0, n_dims=2, shift=x.mean(axis=0), random_state=8)
    stats = tgp_chunk_stats(x, feats, mixture=mix)
    back = TGPStats.load(stats.save(tmp_path / "s.npz"))
    assert back.mixture.fingerprint == mix.fingerprint
    np.testing.assert_array_equal(back.V, stats.V)


def test_fd_under_a_mixture_base_is_the_minimiser_of_the_score_matching_objective():
    """θ from the statistics against a direct minimisation of Σ_i ½‖s(x_i)‖² + div s(x_i) + λ/2‖θ‖², the base's
    score and Laplacian taken by finite differences of its log density (independent of the pass)."""
    mix = _mixture(d=2, seed=11)
    x = mix.draw(400, np.random.default_rng(12))[0]
    S, lam = 25, 0.5
    feats = RandomFourierFeatures.draw(S, bandwidth=0.9, n_dims=2, shift=x.mean(axis=0), random_state=13)
    theta, _, _ = solve_fd(tgp_chunk_stats(x, feats, mixture=mix), feats, mixture_base(mix), lam)

    h = 1e-4
    eye = np.eye(2) * h
    s0 = np.stack([(mix.log_pdf(x + eye[j]) - mix.log_pdf(x - eye[j])) / (2 * h) for j in range(2)], axis=1)
    lap0 = sum((mix.log_pdf(x + eye[j]) - 2 * mix.log_pdf(x) + mix.log_pdf(x - eye[j])) / h**2 for j in range(2))
    phi, dphi = feats.transform(x)
    Z, g = feats.Z, feats.gamma
    sq = (Z * Z).sum(axis=1)

    def objective(t: np.ndarray) -> tuple[float, np.ndarray]:
        J = (dphi * t) @ Z / g  # ∇ of the tilt per row
        s = s0 + J
        div = lap0 - (phi * t) @ sq / g**2
        value = 0.5 * (s * s).sum() + div.sum() + 0.5 * lam * t @ t
        grad = ((s @ Z.T) * dphi).sum(axis=0) / g - phi.T @ np.ones(len(x)) * sq / g**2 + lam * t
        return float(value), grad

    res = scipy.optimize.minimize(objective, np.zeros(S), jac=True, method="L-BFGS-B",
                                  options={"maxiter": 5000, "ftol": 1e-15, "gtol": 1e-10})
    np.testing.assert_allclose(theta, res.x, rtol=1e-4, atol=1e-5 * np.abs(res.x).max())


def test_fit_mixture_base_chooses_two_components_for_two_blobs_and_adds_the_rows_own_gaussian_as_its_floor():
    """Two fitted components and the floor (MIXTURE_FLOOR): the rows' mean and covariance (NumPy's, here) with that
    weight, so that a row far from both blobs has at least the log density of that Gaussian plus log 0.001 (SciPy's
    multivariate normal), where the two blobs alone give it hundreds of nats less."""
    x = _two_blobs(6000, 14)
    mix, curve = fit_mixture_base(x, random_state=0)
    assert mix.n_components == 3
    scores = {row["components"]: row["heldout_loglik"] for row in curve}
    assert scores[2] > scores[1] + 0.3
    assert mix.weights[-1] == pytest.approx(MIXTURE_FLOOR)
    np.testing.assert_allclose(mix.means[-1], x.mean(axis=0), atol=1e-12)
    np.testing.assert_allclose(mix.covariances[-1], np.cov(x, rowvar=False, bias=True), rtol=1e-5)
    far = x.mean(axis=0) + 12.0 * np.sqrt(np.diag(np.cov(x, rowvar=False)))[None]
    floor = multivariate_normal(x.mean(axis=0), np.cov(x, rowvar=False, bias=True)).logpdf(far) + np.log(MIXTURE_FLOOR)
    blobs = GaussianMixtureBase(mix.weights[:2] / mix.weights[:2].sum(), mix.means[:2], mix.covariances[:2])
    assert mix.log_pdf(far)[0] >= floor - 1e-6 and mix.log_pdf(far)[0] > blobs.log_pdf(far)[0] + 100


@pytest.mark.parametrize("n, starts", [(2_000, 10), (9_000, 2), (13_000, 1)])
def test_a_small_table_keeps_the_best_of_several_em_starts_at_its_k(n, starts, monkeypatch):
    """The chosen K is fitted from as many seeds as MIXTURE_START_ROWS rows of EM allow (at most MIXTURE_STARTS) and
    the start with the best validation log-likelihood is carried on to all rows (its warm start)."""
    from sklearn.mixture import GaussianMixture

    import tgpflow.features.mixture_base as mb

    fits: list[tuple[int, bool, float]] = []
    real_fit, real_score = GaussianMixture.fit, GaussianMixture.score_samples
    scored: dict[int, float] = {}

    def fit(self, x, y=None):
        out = real_fit(self, x)
        fits.append((self.n_components, bool(self.warm_start), id(self)))
        return out

    def score_samples(self, x):
        values = real_score(self, x)
        scored[id(self)] = float(values.mean())
        return values

    monkeypatch.setattr(GaussianMixture, "fit", fit)
    monkeypatch.setattr(GaussianMixture, "score_samples", score_samples)
    mix, _ = fit_mixture_base(_two_blobs(n, 16), random_state=0)
    k = mix.n_components - 1  # the fitted components, the floor beside them
    at_k = [f for f in fits if f[0] == k and not f[1]]
    assert len(at_k) == starts
    final = [f for f in fits if f[1]]
    assert len(final) == 1 and final[0][0] == k
    assert scored[final[0][2]] == max(scored[f[2]] for f in at_k)  # the carried start is the best one
    assert mb.mixture_starts(n * 4 // 5) == starts


@pytest.mark.parametrize("method", ["fd", "fvpd"])
def test_selection_scores_the_mixture_itself_and_never_does_worse_on_held_out_rows(method):
    """λ = ∞ (θ = 0) is a candidate under a mixture base; its held-out log-likelihood is the mixture's mean log
    density on the validation rows (recomputed here from the hashed split), and with criterion='loglik' the
    chosen λ scores at least that."""
    x = _two_blobs(8000, 15)
    est = GPTiltedDensity(method=method, base="mixture", n_features=150, criterion="loglik", random_state=0).fit(x)
    curve = est.selection_["curve"]
    inf_rows = [r for r in curve if np.isinf(r["lam"])]
    assert len(inf_rows) == 1
    val = x[validation_mask(np.arange(len(x)), est.validation_fraction, SPLIT_SALT)]
    direct = float(est.base_mixture_.log_pdf(val).mean())
    assert inf_rows[0]["loglik"] == pytest.approx(direct, abs=3 * inf_rows[0]["log_z_se"] + 1e-9)
    chosen = [r for r in curve if r["lam"] == est.lam_ and r["bandwidth"] == est.bandwidth_]
    assert chosen and chosen[0]["loglik"] >= inf_rows[0]["loglik"]


@pytest.mark.parametrize("method", ["fd", "ncfd", "fvpd"])
def test_lambda_infinity_model_is_the_mixture(tmp_path, method):
    """At λ = ∞ the model is its mixture base: the normalised log density equals log m(x), and the model file
    keeps the mixture (a load scores the same)."""
    x = _two_blobs(3000, 16)
    est = GPTiltedDensity(method=method, base="mixture", n_features=80, random_state=0).fit(x)
    est._resolve_at(np.inf)
    est._diagnose(warn=False)
    pts = _two_blobs(200, 17)
    np.testing.assert_allclose(est.log_density(pts, normalized=True), est.base_mixture_.log_pdf(pts),
                               atol=3 * est.normalizer_.std_error + 1e-12)
    est.save(tmp_path / "m.zarr")
    back = tgpflow.load(tmp_path / "m.zarr", verify=True)
    assert back.base_mixture_.fingerprint == est.base_mixture_.fingerprint
    np.testing.assert_array_equal(back.log_density(pts), est.log_density(pts))


@pytest.mark.parametrize("method", ["fd", "fvpd"])
def test_fitted_score_under_a_mixture_base_matches_finite_differences(method):
    x = _two_blobs(3000, 18)
    est = GPTiltedDensity(method=method, base="mixture", n_features=60, lam=1.0, random_state=0).fit(x)
    pts = _two_blobs(30, 19)
    h = 1e-5
    score = est.grad_log_density(pts)
    for j in range(2):
        e = np.zeros(2)
        e[j] = h
        fd = (est.log_density(pts + e) - est.log_density(pts - e)) / (2 * h)
        np.testing.assert_allclose(score[:, j], fd, rtol=1e-5, atol=1e-6)
    # the Hyvärinen terms' divergence against finite differences of the score
    div = sum((est.grad_log_density(pts + np.eye(2)[j] * h)[:, j] - est.grad_log_density(pts - np.eye(2)[j] * h)[:, j])
              / (2 * h) for j in range(2))
    np.testing.assert_allclose(est.hyvarinen_terms(pts), 0.5 * (score**2).sum(axis=1) + div, rtol=1e-4, atol=1e-4)


@pytest.mark.filterwarnings("ignore::tgpflow.errors.DiagnosticWarning")  # λ = 1 on two blobs spills (not checked here)
def test_the_default_base_is_the_mixture_when_lambda_is_selected_and_the_gaussian_otherwise():
    """base="auto": a mixture, with λ = ∞ among the candidates, when λ is selected; the Gaussian N(μ, Σ) of the
    data's moments when λ is given (the same θ as base="empirical") and for KDE-RFF, which takes no mixture."""
    x = _two_blobs(2000, 21)
    selected = GPTiltedDensity(n_features=40, random_state=0).fit(x)
    assert selected.base == "auto" and selected.base_mixture_ is not None
    assert any(np.isinf(r["lam"]) for r in selected.selection_["curve"])
    given = GPTiltedDensity(n_features=40, lam=1.0, bandwidth=1.0, random_state=0).fit(x)
    empirical = GPTiltedDensity(n_features=40, lam=1.0, bandwidth=1.0, random_state=0, base="empirical").fit(x)
    assert getattr(given, "base_mixture_", None) is None
    np.testing.assert_array_equal(given.theta_, empirical.theta_)
    kde = GPTiltedDensity(method="kde_rff", n_features=40, bandwidth=1.0, random_state=0).fit(x)
    assert getattr(kde, "base_mixture_", None) is None


def test_base_mixture_is_refused_where_it_is_not_defined():
    with pytest.raises(ValueError, match="base='mixture' is defined for method"):
        GPTiltedDensity(method="kde_rff", base="mixture").fit(_two_blobs(500, 20))


def test_ncfd_under_a_one_component_mixture_is_the_gaussian_closed_form():
    """A mixture of one component is its own moment-matched Gaussian: NCFD's noisy sums vanish (the control
    variate is exact) and the system is the closed form's (docs/mathematics.md, "Noise-conditional Fisher divergence"'s
    Table I)."""
    from tgpflow.solve.ncfd import ncfd_system
    from tgpflow.stats.ncfd import ncfd_chunk_stats

    x = np.random.default_rng(21).normal(0, 1, (5000, 2)) @ np.array([[1.0, 0.4], [0.0, 0.7]])
    gauss = base_from_moments(Moments.from_rows(x))
    one = GaussianMixtureBase(np.ones(1), gauss.mean[None], gauss.cov[None])
    feats = RandomFourierFeatures.draw(30, bandwidth=0.8, n_dims=2, shift=x.mean(axis=0), random_state=22)
    sigmas = np.array([0.0, 0.2, 0.4])
    closed = ncfd_system(ncfd_chunk_stats(x, feats, sigmas), feats, gauss, 1.0)
    noisy = ncfd_system(ncfd_chunk_stats(x, feats, sigmas, mixture=one), feats, mixture_base(one), 1.0)
    np.testing.assert_array_equal(closed[0], noisy[0])  # the quadratic part does not involve the base
    np.testing.assert_allclose(noisy[1], closed[1], rtol=1e-9, atol=1e-9 * np.abs(closed[1]).max())


def test_ncfd_noisy_sums_are_unbiased_under_a_two_component_mixture():
    """The per-level sum V_h of one noise draw per row, over 24 reorderings of the same rows (each its own seed),
    against a brute-force expectation over 200 noise draws per row: within 5 standard errors in every entry."""
    from tgpflow.features.noise import level_bandwidth
    from tgpflow.stats.ncfd import _gaussian_score, ncfd_chunk_stats

    mix = _mixture(d=2, K=2, seed=26)
    x = mix.draw(1500, np.random.default_rng(27))[0]
    feats = RandomFourierFeatures.draw(12, bandwidth=0.9, n_dims=2, shift=x.mean(axis=0), random_state=28)
    sigma = 0.5
    rng = np.random.default_rng(29)
    reps = np.array([ncfd_chunk_stats(x[rng.permutation(len(x))], feats, np.array([0.0, sigma]), mixture=mix).V[1]
                     for _ in range(24)])
    level = feats.with_bandwidth(level_bandwidth(feats.gamma, sigma))
    noisy_mix = mix.at_level(sigma)
    draws = []
    for _ in range(200):
        y = x + sigma * rng.standard_normal(x.shape)
        _, dphi = level.transform(y)
        draws.append(dphi.T @ (noisy_mix.derivatives(y)[1] - _gaussian_score(mix, sigma, y)))
    ref = np.mean(draws, axis=0)
    single_var = reps.var(axis=0, ddof=1)
    se = np.sqrt(single_var / len(reps) + np.var(draws, axis=0, ddof=1) / len(draws))
    z = (reps.mean(axis=0) - ref) / se
    assert np.abs(z).max() < 5, np.abs(z).max()
    assert np.abs(ref).max() > 5 * se.max()  # the sums are not all noise


def test_ncfd_noise_is_keyed_by_the_chunk_values_not_their_last_bits():
    """The NCFD noise seed survives a few ulps in every value (the CPU's vector code moves the last bits of the
    fitting-space rows: keyed on their bytes, the goldens' NCFD fit drew other noise on an AVX-512 machine), −0 is
    0, and rows that differ in one value by 10⁻⁵ of the largest, or in their order, draw other noise. The sums
    V_h of rows a few ulps apart agree to rounding."""
    from tgpflow.stats.ncfd import ncfd_chunk_stats, noise_seed

    rng = np.random.default_rng(31)
    for scale in (1e-3, 1.0, 1e6):
        x = rng.normal(size=(500, 4)) * scale
        x[7, 2] = 0.0
        seed = noise_seed(x)
        y = x.copy()
        for _ in range(3):  # each value moved up or down by up to three ulps
            y = np.where(rng.random(x.shape) < 0.5, np.nextafter(y, np.inf), np.nextafter(y, -np.inf))
        y[7, 2] = -0.0
        assert noise_seed(y) == seed
        z = x.copy()
        z[100, 1] += 1e-5 * np.abs(x).max()
        assert noise_seed(z) != seed
        assert noise_seed(x[::-1]) != seed
    mix = _mixture(d=2, K=2, seed=26)
    x = mix.draw(800, np.random.default_rng(32))[0]
    y = np.nextafter(x, np.where(rng.random(x.shape) < 0.5, np.inf, -np.inf))
    feats = RandomFourierFeatures.draw(12, bandwidth=0.9, n_dims=2, shift=x.mean(axis=0), random_state=33)
    sigmas = np.array([0.0, 0.3, 0.6])
    vx, vy = (ncfd_chunk_stats(r, feats, sigmas, mixture=mix).V for r in (x, y))
    np.testing.assert_allclose(vy, vx, rtol=0, atol=1e-10 * np.abs(vx).max())
    other = ncfd_chunk_stats(x[::-1], feats, sigmas, mixture=mix).V  # other noise: the check above can fail
    assert np.abs(other[1:] - vx[1:]).max() > 1e-3 * np.abs(vx).max()


def test_ncfd_on_a_mixture_base_fits_and_scores_the_mixture_limit():
    x = _two_blobs(6000, 23)
    est = GPTiltedDensity(method="ncfd", base="mixture", n_features=100, random_state=0).fit(x)
    assert any(np.isinf(r["lam"]) for r in est.selection_["curve"])
    held = _two_blobs(3000, 24)
    assert np.mean(est.log_density(held, normalized=True)) >= np.mean(est.base_mixture_.log_pdf(held)) - 0.02
    pts, h = _two_blobs(20, 25), 1e-5
    for sigma in (0.0, 0.3):
        score = est.grad_log_density(pts, sigma=sigma)
        fd = (est.log_density(pts + [h, 0], sigma=sigma) - est.log_density(pts - [h, 0], sigma=sigma)) / (2 * h)
        np.testing.assert_allclose(score[:, 0], fd, rtol=1e-5, atol=1e-6)


def test_a_pipeline_with_a_mixture_base_keeps_its_mixture_across_runs(tmp_path):
    """The mixture is part of the frozen draw: a second run adds a partition's statistics to the first run's (they
    were summed under the same mixture), and the published model is that mixture tilted, loaded anywhere."""
    import pandas as pd
    import yaml

    from tgpflow.pipeline.runner import run_pipeline
    from tgpflow.pipeline.spec import load_spec

    (tmp_path / "data").mkdir()
    for k in range(2):
        pd.DataFrame(_two_blobs(1500, 30 + k), columns=["a", "b"]).to_parquet(tmp_path / "data" / f"d{k}.parquet")
    spec = {"name": "blobs", "source": {"path": str(tmp_path / "data" / "*.parquet"), "columns": ["a", "b"]},
            "models": [{"name": "density", "estimator": "GPTiltedDensity",
                        "params": {"method": "fd", "base": "mixture", "n_features": 64, "bandwidth": 0.8}}],
            "outputs": {"store": str(tmp_path / "store.zarr"), "models": str(tmp_path / "models")}}
    (tmp_path / "spec.yaml").write_text(yaml.safe_dump(spec))
    run_pipeline(load_spec(tmp_path / "spec.yaml"))
    first = tgpflow.load(tmp_path / "models" / "density")
    pd.DataFrame(_two_blobs(1500, 40), columns=["a", "b"]).to_parquet(tmp_path / "data" / "d2.parquet")
    run_pipeline(load_spec(tmp_path / "spec.yaml"))
    second = tgpflow.load(tmp_path / "models" / "density")
    assert second.n_samples_seen_ == 4500 and first.n_samples_seen_ == 3000
    assert second.base_mixture_.fingerprint == first.base_mixture_.fingerprint
    held = pd.DataFrame(_two_blobs(2000, 50), columns=["a", "b"])
    tilted = np.mean(second.log_density(held, normalized=True))
    assert tilted >= np.mean(second.base_mixture_.log_pdf(held.to_numpy())) - 0.02


def test_the_component_count_is_the_fewest_within_one_standard_error_of_the_best():
    from tgpflow.features.mixture_base import _one_standard_error

    rng = np.random.default_rng(0)
    two = rng.normal(-5.0, 1.0, 60)
    # four components: better on average by 0.1 nats/row, with a paired spread of 1 (standard error 0.13): noise
    four = two + rng.normal(0.0, 1.0, 60)
    four += 0.1 - (four - two).mean()
    assert (four - two).mean() == pytest.approx(0.1) and (four - two).std(ddof=1) / np.sqrt(60) > 0.1
    assert _one_standard_error({1: two - 2.0, 2: two, 4: four}, best=4) == 2
    # a clear gain (1 nat/row, standard error 0.13) keeps the larger count; a worse one is never chosen
    clear = four + 0.9
    assert _one_standard_error({1: two - 2.0, 2: two, 4: clear}, best=4) == 4
    assert _one_standard_error({1: two - 2.0, 2: two, 4: two - 1.0}, best=2) == 2


def _one_after_another(rows: np.ndarray, random_state: int) -> tuple[list[int], list[float]]:
    """The component search written as the loop it stands for: scikit-learn's fits one after another, each count's
    seed the next draw of the generator, stopping after two counts that do not improve on the best."""
    from sklearn.mixture import GaussianMixture

    import tgpflow.features.mixture_base as mb

    rng = np.random.default_rng(random_state)
    z = (rows - rows.mean(axis=0)) / rows.std(axis=0)
    order = rng.permutation(len(z))
    n_val = len(z) // 5
    train, val = z[order[n_val:]], z[order[:n_val]]
    counts, scores, best, worse = [], [], -np.inf, 0
    for k in mb.MIXTURE_COMPONENTS:
        if k > 1 and train.shape[0] < mb.MIXTURE_ROWS_PER_DIM * (z.shape[1] + 1) * k:
            break
        gm = GaussianMixture(k, covariance_type="full", reg_covar=mb.MIXTURE_REG, max_iter=200,
                             random_state=int(rng.integers(2**31))).fit(train)
        score = float((gm.score_samples(val) - np.log(rows.std(axis=0)).sum()).mean())
        counts.append(k)
        scores.append(score)
        best, worse = (score, 0) if score > best else (best, worse + 1)
        if worse == 2:
            break
    return counts, scores


@pytest.mark.parametrize("threads", [1, 3, 8])
def test_the_component_search_in_waves_reads_the_counts_one_fit_after_another_would(threads):
    """The counts are fitted as tasks, as many at once as the scheduler runs: whatever the width, the curve is the
    sequential loop's (same counts, same seeds, the counts of a wave past the stop dropped) and so is the mixture."""
    import dask
    from threadpoolctl import threadpool_limits

    rows = _two_blobs(3000, 21)  # two components: the search stops after 4 and 8 do not improve on 2
    with threadpool_limits(limits=1, user_api="blas"):
        counts, scores = _one_after_another(rows, 4)
    assert counts == [1, 2, 4, 8]
    with dask.config.set(num_workers=threads, scheduler="threads"):
        mix, curve = fit_mixture_base(rows, random_state=4)
    assert [c["components"] for c in curve] == counts
    np.testing.assert_allclose([c["heldout_loglik"] for c in curve], scores, rtol=1e-12)
    with dask.config.set(num_workers=1, scheduler="threads"):
        one, _ = fit_mixture_base(rows, random_state=4)
    for field in ("weights", "means", "covariances"):
        np.testing.assert_array_equal(getattr(mix, field), getattr(one, field))


def test_parallel_tasks_counts_the_local_threads_or_the_clusters():
    import dask

    from tgpflow.core.engine import parallel_tasks

    with dask.config.set(num_workers=3):
        assert parallel_tasks() == 3
    distributed = pytest.importorskip("distributed")
    with distributed.LocalCluster(n_workers=2, threads_per_worker=2, processes=False,
                                  dashboard_address=None) as cluster, distributed.Client(cluster):
        assert parallel_tasks() == 4
