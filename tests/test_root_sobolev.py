"""Root-Sobolev densities (docs/mathematics.md, "Root-Sobolev density", [Kozdoba et al.]): sampler, fixed point, scores,
Hyvärinen loss, anomalies."""

import numpy as np
import pytest
import scipy.integrate as si
import scipy.special as sp

import tgpflow
from tgpflow import RootSobolevDensity
from tgpflow.features.sdo import draw_sdo_features
from tgpflow.stats.rsr import rsr_chunk_stats
from tests.oracles import fd_divergence, phi_raw


@pytest.mark.slow  # T = 100 000 (usual: ≤ 128): a Monte-Carlo tolerance 4 s.e., no T×T statistics (0.05 s)
@pytest.mark.parametrize("d,m,a", [(2, 2, 0.5), (3, 2, 2.0)])
def test_radial_sampler_matches_the_sdo_kernel_by_radial_integration(d, m, a):
    T = 100_000
    f = draw_sdo_features(T, d, m_s=m, a=a, random_state=0)
    z = f.Z / f.gamma / (2 * np.pi)
    for dist in (0.1, 0.4, 0.8):
        delta = np.zeros(d)
        delta[0] = dist
        c = np.cos(2 * np.pi * z @ delta)
        mc, se = c.mean(), c.std() / np.sqrt(T)
        w = lambda r: r ** (d - 1) / (1 + a * (2 * np.pi) ** (2 * m) * r ** (2 * m))  # noqa: E731
        avg = lambda t: sp.gamma(d / 2) * (2 / t) ** (d / 2 - 1) * sp.jv(d / 2 - 1, t)  # spherical mean of cos
        exact = si.quad(lambda r: w(r) * avg(2 * np.pi * r * dist), 0, np.inf, limit=500)[0] / si.quad(w, 0, np.inf)[0]
        assert abs(mc - exact) < 4 * se + 1e-4


@pytest.fixture(scope="module")
def fitted():
    rng = np.random.default_rng(0)
    X = np.concatenate([rng.normal(-2, 0.5, (1500, 2)), rng.normal(2, 1, (1500, 2))])
    return X, RootSobolevDensity(n_features=300, smoothness=1.0, tol=1e-12, max_iter=400).fit(X)


def _f(est, X):
    phi, _ = phi_raw(X, est.features_.Z, est.features_.c, est.features_.gamma)  # raw cos(2π zᵀx + b)
    return phi @ est.coef_, phi


def test_fixed_point_is_stationary_with_unit_norm_and_the_alpha_step_agrees(fitted):
    X, est = fitted
    w = est.coef_
    assert est.fit_info_["converged"] and abs(np.linalg.norm(w) - 1) < 1e-5  # [Kozdoba et al.] Lemma 5
    f, phi = _f(est, X)
    loss = lambda v: -np.mean(np.log((phi @ v) ** 2)) + v @ v  # noqa: E731
    h = 1e-6
    grad = np.array([(loss(w + h * e) - loss(w - h * e)) / (2 * h) for e in np.eye(len(w))])
    assert np.linalg.norm(grad) < 1e-4 * np.sqrt(len(w))
    # one α-form step (α ← α − 2η[α − (1/N)(Kα)^{−1}], w = Φᵀα) equals one w-form step
    rng = np.random.default_rng(1)
    alpha = np.abs(rng.normal(size=len(X))) / len(X)
    wa = phi.T @ alpha
    eta = 0.25
    alpha_new = alpha - 2 * eta * (alpha - (1 / len(X)) / (phi @ wa))
    st = rsr_chunk_stats(X, est.features_, wa)
    np.testing.assert_allclose(phi.T @ alpha_new, (1 - 2 * eta) * wa + 2 * eta * st.g / st.n, rtol=1e-9, atol=1e-12)


def test_score_and_exact_hyvarinen_terms_match_finite_differences(fitted):
    X, est = fitted
    x = X[:12]
    h = 1e-6
    fd = np.column_stack([(est.log_density(x + h * e) - est.log_density(x - h * e)) / (2 * h) for e in np.eye(2)])
    np.testing.assert_allclose(est.grad_log_density(x), fd, rtol=1e-5, atol=1e-6)
    s = est.grad_log_density(x)
    expected = 0.5 * np.sum(s**2, 1) + fd_divergence(est.grad_log_density, x)
    np.testing.assert_allclose(est.hyvarinen_terms(x), expected, rtol=1e-4, atol=1e-4)
    from tgpflow.metrics import hyvarinen_loss

    assert hyvarinen_loss(est, X[:500]) == pytest.approx(np.mean(est.hyvarinen_terms(X[:500])), rel=1e-12)


def test_iteration_statistics_are_chunking_invariant(fitted):
    X, est = fitted
    whole = rsr_chunk_stats(X, est.features_, est.coef_)
    parts = rsr_chunk_stats(X[:1000], est.features_, est.coef_, block_bytes=50_000) + \
        rsr_chunk_stats(X[1000:], est.features_, est.coef_)
    np.testing.assert_allclose(parts.g, whole.g, rtol=1e-10)
    assert parts.n == whole.n and parts.sum_log_f2 == pytest.approx(whole.sum_log_f2, rel=1e-12)


def test_fused_iteration_kernel_equals_the_blocked_numpy_path_and_direct_sums():
    rng = np.random.default_rng(3)
    d, T = 5, 257  # odd T: the tile and vector loops have remainders
    feats = draw_sdo_features(T, d, m_s=3, a=0.7, random_state=1)
    X = rng.normal(size=(301, d)) * 2
    w = rng.normal(size=T)
    fused = rsr_chunk_stats(X, feats, w)
    numpy_path = rsr_chunk_stats(X, feats, w, fused=False)
    phi, _ = phi_raw(X, feats.Z, feats.c, feats.gamma)
    f = phi @ w
    lap = phi @ (-w * np.sum((feats.Z / feats.gamma) ** 2, axis=1))
    for st in (fused, numpy_path):  # both against the sums written out with NumPy's cos
        np.testing.assert_allclose(st.g, phi.T @ (1 / f), rtol=1e-9, atol=1e-9)
        assert st.sum_log_f2 == pytest.approx(np.sum(np.log(f**2)), rel=1e-11)
        assert st.sum_hyvarinen == pytest.approx(np.sum(2 * lap / f), rel=1e-9)
        assert st.n_nonpositive == np.count_nonzero(f <= 0) and st.n == len(X)
    far = X[:20] * 1e6  # angles beyond the kernel's exact reduction: the NumPy path is taken instead
    np.testing.assert_allclose(rsr_chunk_stats(far, feats, w).g, rsr_chunk_stats(far, feats, w, fused=False).g,
                               rtol=1e-12)


def test_kernel_cosine_is_float64_accurate_over_its_range():
    from tgpflow.features.sincos import MAX_ANGLE
    from tgpflow.stats.rsr_kernel import cos_shifted

    rng = np.random.default_rng(0)
    for scale in (1.0, 100.0, MAX_ANGLE):
        x = rng.uniform(-scale, scale, 200_000)
        x[:4] = [0.0, np.pi / 2, -np.pi, 3 * np.pi / 2]  # reduction boundaries
        assert np.max(np.abs(cos_shifted(x) - np.cos(x))) < 1e-15


def test_anomaly_threshold_kde_sdo_and_round_trip(fitted, tmp_path):
    X, est = fitted
    assert 0.0 <= np.mean(est.is_anomaly(X)) < 0.03  # ~1% of the training rows (pilot = all rows here)
    assert est.is_anomaly(np.array([[12.0, 12.0]]))[0]
    back = tgpflow.load(est.save(tmp_path / "rsr.zarr"))
    np.testing.assert_allclose(back.log_density(X[:5]), est.log_density(X[:5]), rtol=1e-12)
    assert back.anomaly_threshold_ == est.anomaly_threshold_
    kde = RootSobolevDensity(method="kde_sdo", n_features=300).fit(X)
    f, phi = _f(kde, X[:5])
    np.testing.assert_allclose(np.exp(kde.log_density(X[:5])), f, rtol=1e-9)  # p ∝ φᵀΣφ(x_i)/N


def test_smoothness_selection_reports_the_curve(fitted):
    X, _ = fitted
    est = RootSobolevDensity(n_features=200, smoothness=[0.5, 2.0, 8.0], a_rule="min").fit(X)
    curve = est.selection_["curve"]
    assert [c["a"] for c in curve] == [0.5, 2.0, 8.0]
    finite = [c for c in curve if c["converged"]]
    assert est.smoothness_ == min(finite, key=lambda c: c["heldout_hyvarinen"])["a"]


def test_radial_sampler_is_finite_and_beta_prime_in_high_dimension():
    """d = 75, m_s = 38: Gamma(1/76) underflows to 0 in plain float64 draws; the log-space draw keeps
    every frequency finite and 1/(1 + v), v = ‖2πz‖^{2m_s}, follows Beta(1 − d/2m_s, d/2m_s) (tested on
    this side because v/(1 + v) rounds to 1 for most draws)."""
    import scipy.stats as ss

    d, m, T = 75, 38, 200_000
    f = draw_sdo_features(T, d, m_s=m, random_state=0)
    assert np.all(np.isfinite(f.Z))
    w = sp.expit(-2 * m * np.log(np.linalg.norm(f.Z, axis=1)))
    k = d / (2 * m)
    assert ss.kstest(w, ss.beta(1 - k, k).cdf).statistic < 1.63 / np.sqrt(T)  # 1% critical value
    assert np.count_nonzero(np.random.default_rng(0).standard_gamma(1 - k, T) == 0) > 0  # the failure it guards


def test_whitening_gives_identity_pilot_covariance_drops_collinear_and_constant_columns():
    from tgpflow.features.whiten import whitening

    rng = np.random.default_rng(4)
    A = rng.normal(size=(800, 4)) @ rng.normal(size=(4, 4))
    X = np.column_stack([A, A[:, 0] - 3 * A[:, 2], np.full(800, 7.0)])  # col 4 collinear, col 5 constant
    wh = whitening(X)
    assert wh.rank == 4 and 5 not in wh.columns
    u = wh.transform(X)
    np.testing.assert_allclose(u.mean(axis=0), 0, atol=1e-12)
    np.testing.assert_allclose(u.T @ u / len(X), np.eye(4), atol=1e-10)
    # Mahalanobis distances on the rows' span agree with the pseudo-inverse of the covariance
    dx = X[:20] - X[20:40]
    maha = np.einsum("ij,jk,ik->i", dx, np.linalg.pinv(np.cov(X.T, bias=True), rcond=1e-10), dx)
    np.testing.assert_allclose(np.sum((wh.transform(X[:20]) - wh.transform(X[20:40])) ** 2, axis=1), maha, rtol=1e-8)


@pytest.mark.parametrize("whiten", ["robust", "classical"])
def test_whitened_rsr_is_invariant_to_column_scale_and_shift_and_folds_a_whitening_into_z(whiten):
    rng = np.random.default_rng(5)
    X = rng.normal(size=(1500, 3)) @ np.array([[1.0, 0.8, 0.0], [0.0, 0.5, 0.3], [0.0, 0.0, 0.2]])
    s, c = np.array([1e3, 0.02, 5.0]), np.array([-4.0, 100.0, 0.5])
    kw = dict(n_features=128, smoothness=1.0, random_state=3, whiten=whiten)
    est = RootSobolevDensity(**kw).fit(X)
    est2 = RootSobolevDensity(**kw).fit(X * s + c)
    x = rng.normal(size=(50, 3))
    # equal up to float rounding (phases of angles ~10³ and ~20 iterations): 1e-6, vs O(1) without whitening
    np.testing.assert_allclose(est2.log_density(x * s + c), est.log_density(x), rtol=1e-6)
    np.testing.assert_allclose(est2.grad_log_density(x * s + c) * s, est.grad_log_density(x), rtol=1e-6, atol=1e-5)
    if whiten == "classical":  # Z = G W with W Σ Wᵀ = I: Z Σ Zᵀ = G Gᵀ for the unwhitened draw G (any such W)
        G = draw_sdo_features(128, 3, m_s=est.order_, random_state=3).Z
        Z = est.features_.Z
        np.testing.assert_allclose(Z @ np.cov(X.T, bias=True) @ Z.T, G @ G.T, rtol=1e-9, atol=1e-9)
    # without whitening the fit does depend on the column scales
    raw = RootSobolevDensity(**{**kw, "whiten": "none"})
    assert not np.allclose(raw.fit(X * s + c).log_density(x * s + c), raw.fit(X).log_density(x), rtol=1e-3)


def test_robust_whitening_is_the_bulk_moments_and_agrees_with_scikit_learn_mcd():
    """10% gross outliers: the robust W whitens the bulk — its location and covariance match the
    clean rows' true N(0, AᵀA) to sampling error, where the classical ones do not — and agree with
    scikit-learn's reweighted MinCovDet (FastMCD, random starts) at the same support fraction."""
    from sklearn.covariance import MinCovDet

    from tgpflow.features.whiten import whitening

    rng = np.random.default_rng(6)
    A = np.array([[1.0, 0.5, 0.0], [0.0, 1.0, 0.3], [0.0, 0.0, 1.0]])
    X = np.concatenate([rng.normal(size=(1800, 3)) @ A, rng.normal(size=(200, 3)) * 4 + 8])
    for trim, close in ((0.25, True), (0.0, False)):
        wh = whitening(X, trim=trim)
        cov = np.linalg.inv(wh.matrix.T @ wh.matrix)
        assert (np.allclose(wh.shift, 0, atol=0.1) and np.allclose(cov, A.T @ A, atol=0.12)) == close
    wh = whitening(X, trim=0.25)
    mcd = MinCovDet(support_fraction=0.75, random_state=0).fit(X)
    np.testing.assert_allclose(wh.shift, mcd.location_, atol=0.03)
    np.testing.assert_allclose(np.linalg.inv(wh.matrix.T @ wh.matrix), mcd.covariance_, atol=0.05)


def test_iteration_is_monotone_where_the_plain_fixed_point_step_raises_the_loss():
    """Heavy-tailed rows and a small RFF draw: the plain step w ← ½w + ½g/N from the KDE start raises
    L (2.26 → 3.43); the fit rejects such steps, so its losses never rise, rows with f ≤ 0 are never
    added, and the reported loss is L of the returned w (recomputed from the raw cosines)."""
    rng = np.random.default_rng(5)
    X = np.exp(rng.normal(size=(3000, 3)) * [1.0, 0.5, 1.5])
    est = RootSobolevDensity(n_features=128, random_state=5, max_iter=300, whiten="classical").fit(X)
    phi, _ = phi_raw(X, est.features_.Z, est.features_.c, est.features_.gamma)  # √(2/T) cos(·)
    loss = lambda v: -np.mean(np.log((phi @ v) ** 2)) + v @ v  # noqa: E731
    w0 = phi.sum(axis=0)
    w0 /= np.linalg.norm(w0)
    w1 = 0.5 * w0 + 0.5 * phi.T @ (1 / (phi @ w0)) / len(X)
    assert loss(w1) > loss(w0) + 0.5  # the unguarded step
    info = est.fit_info_
    assert info["converged"] and info["rejected_steps"] > 0
    assert np.all(np.diff(info["history"]) <= 1e-12) and info["history"][0] == pytest.approx(loss(w0), rel=1e-10)
    assert info["loss"] == pytest.approx(loss(est.coef_), rel=1e-10) and info["loss"] < loss(w0)
    assert info["nonpositive_rows"] <= np.count_nonzero(phi @ w0 <= 0)


def test_selection_warns_when_the_exact_hyvarinen_loss_has_infinite_variance(fitted, caplog):
    """J = mean 2Δf/f with Δf = −Σ w_t‖z_t‖²φ_t: its spread over feature draws needs E‖z‖⁴ < ∞,
    i.e. 2m_s > d + 4; below that, two draws give very different J at the same a."""
    X, _ = fitted
    with caplog.at_level("WARNING", logger="tgpflow"):
        RootSobolevDensity(n_features=64, smoothness=[1.0, 4.0], max_iter=30).fit(X[:600])
    assert any("infinite variance" in r.getMessage() for r in caplog.records)
    caplog.clear()
    with caplog.at_level("WARNING", logger="tgpflow"):
        RootSobolevDensity(n_features=64, smoothness=[1.0, 4.0], order=4, max_iter=30).fit(X[:600])
    assert not any("infinite variance" in r.getMessage() for r in caplog.records)
    # the spectral tail itself: P(‖z‖ > r) ~ r^{−(2m_s − d)}, so ‖z‖² has a heavy tail at m_s = 2, d = 2
    heavy = draw_sdo_features(20_000, 2, m_s=2, random_state=0).Z
    light = draw_sdo_features(20_000, 2, m_s=4, random_state=0).Z
    share = lambda Z: np.sort(np.sum(Z**2, 1))[-20:].sum() / np.sum(Z**2)  # noqa: E731  top 0.1% of ‖z‖²
    assert share(heavy) > 0.3 > 0.05 > share(light)


def test_robust_whitening_keeps_a_column_that_is_constant_on_the_bulk():
    """A column that is 0 on 85% of the rows: the MCD bulk has no spread in it (an exact fit, where
    plain concentration steps cycle between dropping and re-admitting it), but a deviation in it
    must stay visible (appended as a z-score over all rows), with the other columns still robust."""
    from tgpflow.features.whiten import whitening

    rng = np.random.default_rng(8)
    X = rng.normal(size=(2000, 3))
    X[:, 2] = np.where(rng.random(2000) < 0.15, rng.exponential(size=2000), 0.0)
    wh = whitening(X, trim=0.25)
    assert wh.rank == 3 and sorted(wh.columns) == [0, 1, 2]
    np.testing.assert_allclose(wh.matrix[2], [0, 0, 1 / X[:, 2].std()])  # the appended z-score
    probe = np.array([[0.0, 0.0, 0.0], [0.0, 0.0, 3.0]])
    u = wh.transform(probe)
    assert np.linalg.norm(u[1]) > np.linalg.norm(u[0]) + 3
    np.testing.assert_allclose(wh.matrix[:2, :2], np.eye(2), atol=0.06)  # the bulk's block: its N(0, I)


def test_the_method_objects_are_the_registrys_methods_and_their_laws_are_f_to_a_power():
    from tgpflow.models.registry import RSR_METHODS
    from tgpflow.models.sobolev_methods import sobolev_method

    assert tuple(sobolev_method(m).name for m in RSR_METHODS) == RSR_METHODS
    with pytest.raises(ValueError, match="rsr"):
        sobolev_method("kde")
    f = np.array([-2.0, -0.5, 0.0, 0.3, 4.0])
    with np.errstate(divide="ignore"):
        np.testing.assert_allclose(sobolev_method("rsr").log_density(f), 2.0 * np.log(np.abs(f)))
    kde = sobolev_method("kde_sdo").log_density(f)
    assert np.all(np.isneginf(kde[:3]))
    np.testing.assert_allclose(kde[3:], np.log(f[3:]))
    with pytest.raises(ValueError, match="no additive sufficient statistics"):
        RootSobolevDensity(method="rsr").accumulate(np.zeros((10, 2)))
