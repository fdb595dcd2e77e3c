"""NCFD (docs/mathematics.md, "Noise-conditional Fisher divergence"): one-pass statistics and solve against quadrature
of eq 27."""

import array_api_strict as xps
import numpy as np
import pytest

from tgpflow import GPTiltedDensity, NCFDStats, RandomFourierFeatures
from tgpflow.features.noise import noise_levels, paper_sigma_max
from tgpflow.stats.ncfd import ncfd_chunk_stats
from tgpflow.solve.ncfd import ncfd_system
from tests.oracles import ncfd_objective, quadratic_minimiser


@pytest.fixture
def small(gaussian_mix):
    X = gaussian_mix[::15]  # 40 rows
    f = RandomFourierFeatures.draw(10, bandwidth=0.7, n_dims=2, shift=X.mean(0), random_state=3)
    return X, f


def test_noise_schedule_is_the_papers():
    np.testing.assert_allclose(noise_levels(1.0, 4), [0.0, 0.25, 0.5, 0.75])
    cov = np.diag([4.0, 9.0, 12.0])
    assert paper_sigma_max(cov) == pytest.approx(5.0 / 3.0)  # √tr Σ / d, as printed (A5)


def test_ncfd_objective_and_theta_match_quadrature_of_eq27(small):
    X, f = small
    lam, sigmas = 0.3, noise_levels(0.9, 3)
    est = GPTiltedDensity(method="ncfd", n_features=10, lam=lam, noise_levels=3, sigma_max=0.9).fit(X, features=f)
    mean, cov = X.mean(0), np.cov(X.T, bias=True)
    obj = lambda t: ncfd_objective(t, X, f.Z, f.c, f.gamma, mean, cov, lam, sigmas, n_nodes=24)  # noqa: E731
    theta, H, g, f0 = quadratic_minimiser(obj, 10)
    # the accumulated quadratic and linear terms (1/H)(λH I + ZZᵀ⊙Ā), −b/H equal the quadrature's
    A, b = ncfd_system(est.stats_, f, est.fitted().base, lam)
    np.testing.assert_allclose(A / 3, H, rtol=1e-8, atol=1e-10 * np.abs(H).max())
    np.testing.assert_allclose(-b / 3, g, rtol=1e-8, atol=1e-10 * np.abs(g).max())
    np.testing.assert_allclose(est.theta_, theta, rtol=1e-7, atol=1e-9 * np.abs(theta).max())
    rng = np.random.default_rng(0)
    t = rng.standard_normal(10)
    assert est.objective_ == pytest.approx(obj(est.theta_) - f0, rel=1e-8)
    assert obj(est.theta_) < obj(est.theta_ + 1e-3 * t)


def test_one_level_is_fd_exactly(gaussian_mix):
    f = RandomFourierFeatures.draw(40, bandwidth=0.5, n_dims=2, shift=gaussian_mix.mean(0), random_state=1)
    nc = GPTiltedDensity(method="ncfd", n_features=40, noise_levels=1, sigma_max=0.8).fit(gaussian_mix, features=f)
    fd = GPTiltedDensity(method="fd", n_features=40).fit(gaussian_mix, features=f)
    np.testing.assert_allclose(nc.theta_, fd.theta_, rtol=1e-11, atol=1e-12 * np.abs(fd.theta_).max())
    np.testing.assert_allclose(nc.stats_.fd.gram, fd.stats_.gram, rtol=1e-13)


def test_stats_add_over_chunks_and_match_the_array_api_path(gaussian_mix):
    f = RandomFourierFeatures.draw(16, bandwidth=0.5, n_dims=2, shift=gaussian_mix.mean(0), random_state=2)
    sig = noise_levels(0.7, 4)
    whole = ncfd_chunk_stats(gaussian_mix, f, sig)
    parts = ncfd_chunk_stats(gaussian_mix[:250], f, sig, block_bytes=8 * 60 * 40) + ncfd_chunk_stats(gaussian_mix[250:], f, sig)
    strict = ncfd_chunk_stats(xps.asarray(gaussian_mix), f, sig)
    for other in (parts, strict):
        for name in ("abar", "gram0", "u", "U", "psi"):
            np.testing.assert_allclose(getattr(other, name), getattr(whole, name), rtol=1e-10, atol=1e-10)
    removed = whole - ncfd_chunk_stats(gaussian_mix[250:], f, sig)
    np.testing.assert_allclose(removed.abar, ncfd_chunk_stats(gaussian_mix[:250], f, sig).abar, atol=1e-9)
    with pytest.raises(ValueError, match="noise levels"):
        whole + ncfd_chunk_stats(gaussian_mix, f, noise_levels(0.5, 4))


def test_stats_round_trip(tmp_path, gaussian_mix):
    f = RandomFourierFeatures.draw(8, bandwidth=0.5, n_dims=2, random_state=2)
    st = ncfd_chunk_stats(gaussian_mix, f, noise_levels(0.7, 3))
    back = NCFDStats.load(st.save(tmp_path / "s.zarr"))
    np.testing.assert_array_equal(back.abar, st.abar)
    np.testing.assert_array_equal(back.sigmas, st.sigmas)


@pytest.mark.parametrize("sigma", [0.0, 0.3, 1.1])
def test_noise_conditional_score_matches_finite_differences(gaussian_mix, sigma):
    est = GPTiltedDensity(method="ncfd", n_features=50, noise_levels=5).fit(gaussian_mix)
    x = gaussian_mix[:7]
    g = est.grad_log_density(x, sigma=sigma)
    h = 1e-6
    fd = np.column_stack([(est.log_density(x + h * e, sigma=sigma) - est.log_density(x - h * e, sigma=sigma)) / (2 * h)
                          for e in np.eye(2)])
    np.testing.assert_allclose(g, fd, rtol=1e-6, atol=1e-6)
    if sigma > 0:  # the levels differ: σ is not ignored
        assert not np.allclose(est.log_density(x, sigma=sigma), est.log_density(x))


def test_sigma_is_refused_for_models_without_levels(gaussian_mix):
    est = GPTiltedDensity(method="fd", n_features=20).fit(gaussian_mix)
    with pytest.raises(ValueError, match="noise-conditional"):
        est.log_density(gaussian_mix[:3], sigma=0.5)


def test_the_ladders_lower_parts_are_the_statistics_of_the_smaller_ladders(gaussian_mix):
    # the first H' levels of the ladder for σ_max are the whole ladder for σ_max·H'/H: against separate passes
    f = RandomFourierFeatures.draw(16, bandwidth=0.5, n_dims=2, shift=gaussian_mix.mean(0), random_state=2)
    whole = ncfd_chunk_stats(gaussian_mix[:250], f, noise_levels(0.8, 10), prefixes=True) + ncfd_chunk_stats(
        gaussian_mix[250:], f, noise_levels(0.8, 10), prefixes=True)
    assert whole.prefixes == (1, 3, 5)
    for h in whole.prefixes:
        part, direct = whole.truncated(h), ncfd_chunk_stats(gaussian_mix, f, noise_levels(0.8 * h / 10, h))
        np.testing.assert_allclose(part.sigmas, direct.sigmas, rtol=1e-15)
        for name in ("abar", "u", "U", "psi", "gram0"):
            np.testing.assert_allclose(getattr(part, name), getattr(direct, name), rtol=1e-10, atol=1e-12)
    assert whole.truncated(10) is whole
    with pytest.raises(ValueError, match="first 4"):
        whole.truncated(4)
    plain = ncfd_chunk_stats(gaussian_mix, f, noise_levels(0.8, 10))
    assert plain.prefixes == () and (plain + plain).abar_prefix is None


def test_a_selection_searches_the_upper_noise_level_and_solves_the_ladder_it_chose(gaussian_mix):
    # on the Gaussian base, so that a fit at the chosen (ladder, λ) sums under the same base
    est = GPTiltedDensity(method="ncfd", n_features=40, bandwidth=0.6, random_state=0, criterion="loglik",
                          base="empirical").fit(gaussian_mix)
    curve = est.selection_["curve"]
    tilted = [r for r in curve if np.isfinite(r["lam"])]
    assert {r["noise_levels"] for r in tilted} == {1, 3, 5, 10}
    sigma_max = 0.25 * 0.6  # "auto": γ/4
    assert {round(r["sigma_max"] / sigma_max, 12) for r in tilted} == {0.1, 0.3, 0.5, 1.0}
    chosen = est.selection_["chosen"]
    # health first, then the held-out log-likelihood, over every (ladder, λ) (solve.select.choose)
    healthy = [r for r in curve if r["ess_fraction"] >= 0.01 and r["mass_outside"] <= r["mass_outside_limit"]]
    assert chosen["loglik"] == max(r["loglik"] for r in healthy)
    # the model is NCFD on the chosen ladder: a fit with that σ_max and H' levels and λ gives the same θ
    h = chosen["noise_levels"]
    assert est.selection_.get("raised") is None  # (no λ raised after the selection)
    ref = GPTiltedDensity(method="ncfd", n_features=40, bandwidth=0.6, random_state=0, lam=chosen["lam"],
                          noise_levels=h, sigma_max=chosen["sigma_max"]).fit(gaussian_mix, features=est.features_)
    assert est.solver_info_["noise_levels"] == h
    np.testing.assert_allclose(est.theta_, ref.theta_, rtol=1e-8, atol=1e-10 * np.abs(ref.theta_).max())
    # a σ_max the user gives is the ladder: no search
    fixed = GPTiltedDensity(method="ncfd", n_features=40, bandwidth=0.6, random_state=0, sigma_max=0.15).fit(
        gaussian_mix)
    assert all("noise_levels" not in r for r in fixed.selection_["curve"])
    assert fixed.solver_info_["noise_levels"] == 10
