"""Closed forms against independent oracles (docs/mathematics.md, "Fisher divergence and base-measure learning" and "The
Fisher variational predictive distribution")."""

import numpy as np
import pytest

from tests.oracles import fd_objective, phi_raw, quadratic_minimiser
from tgpflow import GPTiltedDensity, RandomFourierFeatures
from tgpflow.features.rff import paper_kernel_cov
from tgpflow.solve.tgp import feature_moments_under_base, fd_system


def _fit(X, method, S=24, lam=0.1, **kw):
    cov = np.cov(X.T, bias=True)
    f = RandomFourierFeatures.draw(S, bandwidth=0.6, kernel_cov=paper_kernel_cov(cov), shift=X.mean(0), random_state=4)
    return GPTiltedDensity(method=method, n_features=S, lam=lam, **kw).fit(X, features=f), f


def test_fd_theta_is_the_minimiser_of_the_black_box_objective(gaussian_mix):
    X = gaussian_mix[:200]
    est, f = _fit(X, "fd")
    mean, P = X.mean(0), np.linalg.inv(np.cov(X.T, bias=True))
    obj = lambda t: fd_objective(t, X, f.Z, f.c, f.gamma, mean, P, 0.1)  # noqa: E731
    theta, H, g, f0 = quadratic_minimiser(obj, f.n_features)
    assert np.linalg.norm(est.theta_ - theta) <= 1e-6 * np.linalg.norm(theta)
    # the reported training objective is L(θ) − L(0) of the same black box
    # (docs/mathematics.md, "Fisher divergence and base-measure learning")
    assert est.objective_ == pytest.approx(obj(est.theta_) - f0, rel=1e-8)


def test_fvpd_posterior_mean_is_fd_with_lam_times_eta(gaussian_mix):
    X = gaussian_mix
    fvpd, f = _fit(X, "fvpd", eta=3.0)
    fd = GPTiltedDensity(method="fd", n_features=24, lam=0.1 * 3.0).fit(X, features=f)
    np.testing.assert_allclose(fvpd.posterior_mean_, fd.theta_, rtol=1e-10)
    A, _ = fd_system(fvpd.stats_, f, _base(fvpd), 0.1 * 3.0)
    np.testing.assert_allclose(fvpd.posterior_precision_, A / (f.gamma**2 * 3.0), rtol=1e-12)


def _base(est):
    from tgpflow.core.gaussian_base import Base

    return Base(est.mean_, est.covariance_, est.precision_)


def test_feature_moments_match_gauss_hermite(gaussian_mix):
    """μ_φ = E φ(x), Σ_φ = Cov φ(x) under x ~ N(μ, Σ), d = 2, tensor Gauss–Hermite (80²)."""
    est, f = _fit(gaussian_mix, "fvpd")
    base = _base(est)
    mu_phi, cov_phi = feature_moments_under_base(f, base)
    t, w = np.polynomial.hermite_e.hermegauss(80)  # weight exp(−t²/2)
    w = w / w.sum()
    T1, T2 = np.meshgrid(t, t, indexing="ij")
    W = np.outer(w, w).ravel()
    L = np.linalg.cholesky(base.cov)
    pts = base.mean + np.column_stack([T1.ravel(), T2.ravel()]) @ L.T
    phi, _ = phi_raw(pts, f.Z, f.c, f.gamma)
    gh_mean = W @ phi
    gh_cov = (phi * W[:, None]).T @ phi - np.outer(gh_mean, gh_mean)
    np.testing.assert_allclose(mu_phi, gh_mean, atol=1e-12)
    np.testing.assert_allclose(cov_phi, gh_cov, atol=1e-12)


def test_feature_moments_match_monte_carlo(gaussian_mix, rng):
    est, f = _fit(gaussian_mix, "fvpd")
    mu_phi, cov_phi = feature_moments_under_base(f, _base(est))
    draws = rng.multivariate_normal(est.mean_, est.covariance_, size=200_000)
    phi, _ = phi_raw(draws, f.Z, f.c, f.gamma)
    se = phi.std(0) / np.sqrt(len(draws))
    assert np.all(np.abs(phi.mean(0) - mu_phi) < 5 * se + 1e-12)
    np.testing.assert_allclose(np.cov(phi.T, bias=True), cov_phi, atol=5 * (2 / 24) / np.sqrt(len(draws)) * 4)


def test_fvpd_log_density_is_the_predictive_formula(gaussian_mix):
    """½φᵀM⁻¹φ − φᵀM⁻¹m − ½(x−μ)ᵀP(x−μ) with M, m built here from the fitted pieces (docs/mathematics.md, "The Fisher
    variational predictive distribution")."""
    est, f = _fit(gaussian_mix, "fvpd")
    mu_phi, cov_phi = feature_moments_under_base(f, _base(est))
    m = mu_phi - est.posterior_precision_ @ est.posterior_mean_
    M = cov_phi + est.posterior_precision_
    x = gaussian_mix[:25]
    phi, _ = phi_raw(x, f.Z, f.c, f.gamma)
    Minv_phi = np.linalg.solve(M, phi.T).T
    r = x - est.mean_
    ref = 0.5 * np.sum(phi * Minv_phi, 1) - phi @ np.linalg.solve(M, m) - 0.5 * np.sum(r @ est.precision_ * r, 1)
    np.testing.assert_allclose(est.log_density(x), ref, rtol=1e-10, atol=1e-10)
