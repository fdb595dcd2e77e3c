"""Samplers and Stein diagnostics (docs/mathematics.md, "SVGD, graphical SVGD and the kernel Stein discrepancy" and
"Metrics", [Sutherland et al.] §5.2 and [Wang et al.]) against closed forms, Monte-Carlo error and finite-difference /
brute-force oracles."""

import numpy as np
import pytest
import scipy.linalg as sl

from tgpflow.features.local_kernels import closed_neighbourhoods
from tgpflow.metrics import ksd, mmd
from tgpflow.sample import Target, kernel_hmc, langevin, mala, svgd, svgd_direction, trajectory_acceptance
from tgpflow.sample.svgd import grid_graph

MU = np.array([1.0, -2.0])
SIGMA = np.array([[2.0, 0.9], [0.9, 1.0]])
P = np.linalg.inv(SIGMA)
GAUSS = Target(lambda x: -(x - MU) @ P, lambda x: -0.5 * np.einsum("nd,de,ne->n", x - MU, P, x - MU))


def _moments_within_mc_error(draws, mean, cov, z=4.5):
    """Independent rows: mean within z SE; each covariance entry within z SE (Gaussian 4th moments)."""
    n = len(draws)
    se_mean = np.sqrt(np.diag(cov) / n)
    assert np.all(np.abs(draws.mean(0) - mean) < z * se_mean), (draws.mean(0), mean)
    se_cov = np.sqrt((np.outer(np.diag(cov), np.diag(cov)) + cov**2) / n)
    assert np.all(np.abs(np.cov(draws, rowvar=False) - cov) < z * se_cov), (np.cov(draws, rowvar=False), cov)


def test_mala_reproduces_a_gaussian_and_adapts_to_the_target_acceptance():
    x0 = np.random.default_rng(1).normal(size=(4000, 2)) * 3
    res = mala(GAUSS, x0, 60, step_size=1.0, n_warmup=300, random_state=2)
    _moments_within_mc_error(res.last, MU, SIGMA)  # one draw per chain: independent rows
    assert abs(res.acceptance_rate - 0.574) < 0.05 and res.step_size > 0
    assert res.samples.shape == (60, 4000, 2)


def test_mala_acceptance_falls_with_step_and_ksd_falls_with_steps():
    x0 = np.random.default_rng(3).normal(5.0, 3.0, size=(400, 2))
    rates = [mala(GAUSS, x0, 30, step_size=e, n_warmup=0, adapt=False, random_state=0).acceptance_rate
             for e in (0.05, 0.5, 2.0)]
    assert rates[0] > rates[1] > rates[2]
    early = mala(GAUSS, x0, 3, step_size=0.3, n_warmup=0, adapt=False, random_state=0).last
    late = mala(GAUSS, x0, 300, step_size=0.3, n_warmup=0, adapt=False, random_state=0).last
    exact = np.random.default_rng(4).multivariate_normal(MU, SIGMA, size=400)
    k_early, k_late, k_exact = (ksd(v, GAUSS) for v in (early, late, exact))
    assert k_early > 10 * k_late and k_late < 2.5 * k_exact


def test_ula_stationary_covariance_is_the_discrete_lyapunov_solution():
    eps = 0.3  # large enough that ULA's bias is many Monte-Carlo errors wide
    A = np.eye(2) - eps * P
    cov_ula = sl.solve_discrete_lyapunov(A, 2 * eps * np.eye(2))
    x0 = np.random.default_rng(5).multivariate_normal(MU, SIGMA, size=20000)
    res = langevin(GAUSS, x0, 80, step_size=eps, n_warmup=0, adapt=False, random_state=6)
    _moments_within_mc_error(res.last, MU, cov_ula)
    assert np.max(np.abs(cov_ula - SIGMA)) > 6 * np.sqrt(2 * SIGMA.max() ** 2 / 20000)  # the bias is visible
    assert res.method == "ula" and 0 < res.acceptance_rate < 1  # hypothetical MALA acceptance


def test_ula_without_log_density_and_mala_needs_one():
    score_only = Target(GAUSS.grad_log_density)
    res = langevin(score_only, np.zeros((10, 2)), 5, step_size=0.1)
    assert res.acceptance_rate is None and res.step_size == 0.1
    with pytest.raises(ValueError, match="log density"):
        mala(score_only, np.zeros((10, 2)), 5)


def test_kernel_hmc_with_a_learned_score_samples_the_target():
    logp = GAUSS.log_density  # the sampler never sees the score
    x0 = np.random.default_rng(7).normal(size=(300, 2))
    res = kernel_hmc(logp, x0, 40, n_warmup=200, n_history=400, n_leapfrog=10, step_size=0.25, random_state=8)
    _moments_within_mc_error(res.last, MU, SIGMA)
    assert res.acceptance_rate > 0.6 and res.trajectory_acceptance > 0.5
    # the paper's diagnostic: a badly tuned surrogate gives trajectories that are mostly rejected
    from tgpflow import NystromKEF

    bad = NystromKEF(n_basis=50, bandwidth=1e-3, lam=1e-3).fit(res.flat()[:200])
    good = trajectory_acceptance(logp, res.surrogate.grad_log_density, res.samples[-1][:50], random_state=0)
    worse = trajectory_acceptance(logp, bad.grad_log_density, res.samples[-1][:50], random_state=0)
    assert good.mean() > 0.5 > 2 * worse.mean()


def test_kernel_hmc_takes_a_gp_tilted_surrogate():
    from tgpflow import GPTiltedDensity

    x0 = np.random.default_rng(9).normal(size=(200, 2))
    res = kernel_hmc(GAUSS.log_density, x0, 30, surrogate=GPTiltedDensity(method="fd", n_features=100, lam=1.0),
                     n_warmup=150, n_leapfrog=8, step_size=0.25, random_state=10)
    _moments_within_mc_error(res.samples[-1], MU, SIGMA)
    assert res.acceptance_rate > 0.5


# -- SVGD -----------------------------------------------------------------------------------------
def _quartic():
    A = np.array([[1.5, 0.4, 0.0, 0.0], [0.4, 1.2, -0.3, 0.0], [0.0, -0.3, 1.0, 0.2], [0.0, 0.0, 0.2, 0.8]])
    logp = lambda x: -0.5 * np.einsum("nd,de,ne->n", x, A, x) - 0.1 * np.sum(x**4, 1)  # noqa: E731
    score = lambda x: -x @ A - 0.4 * x**3  # noqa: E731
    return A, logp, score


@pytest.mark.parametrize("graph", [None, [[1], [0, 2], [1, 3], [2]]])
def test_svgd_direction_equals_the_finite_difference_kl_descent_rate(graph):
    """−d/dε KL(T_ε q ‖ p) at ε = 0 for T_ε(x) = x + ε k_i(x, x_l) e_i equals φ*_i(x_l) ([Wang et al.] Thm 1).

    With q the particles' empirical law, that rate is d/dε (1/n) Σ_j [log p(T_ε x_j) + log|det ∇T_ε(x_j)|]:
    computed here from the black-box log p, the kernel written from its definition, and a
    finite-difference Jacobian — no score and no kernel derivative."""
    _, logp, score = _quartic()
    rng = np.random.default_rng(0)
    X = rng.normal(size=(6, 4))
    d = 4
    closed = closed_neighbourhoods(graph, d).toarray().astype(bool)
    h = np.array([0.7, 1.1, 0.9, 1.3]) if graph is not None else np.full(d, 1.7)
    phi, _ = svgd_direction(X, score(X), graph=graph, bandwidth=h if graph is not None else 1.7)

    def kern(x, xl, i):
        c = closed[:, i]
        return np.exp(-np.sum((x[..., c] - xl[c]) ** 2, -1) / h[i])

    def rate(i, l, e=1e-4, delta=1e-5):
        def F(eps):
            T = lambda x: x + eps * kern(x, X[l], i)[..., None] * np.eye(d)[i]  # noqa: E731
            total = np.sum(logp(T(X)))
            for x in X:
                J = np.column_stack([(T(x + delta * u) - T(x - delta * u)) / (2 * delta) for u in np.eye(d)])
                total += np.linalg.slogdet(J)[1]
            return total / len(X)
        return (F(e) - F(-e)) / (2 * e)

    oracle = np.array([[rate(i, l) for i in range(d)] for l in range(len(X))])
    np.testing.assert_allclose(phi, oracle, rtol=1e-6, atol=2e-7)  # nested-FD round-off ~5e-8


def test_svgd_and_graphical_svgd_reproduce_gaussian_moments():
    x0 = np.random.default_rng(11).normal(size=(300, 2))
    res = svgd(GAUSS, x0, 500, step_size=0.05)  # (measured: at 400 steps as near the fixed point as at 1500)
    _moments_within_mc_error(res.particles, MU, SIGMA)
    phi0, _ = svgd_direction(x0, GAUSS.score(x0))
    assert res.direction_norm < 0.1 * np.sqrt(np.mean(phi0**2))  # near a fixed point (AdaGrad keeps a jitter)
    # graphical SVGD on a 3 × 3 grid Gaussian MRF (precision A generated as in [Wang et al.] §4.1)
    rng = np.random.default_rng(12)
    nb = grid_graph(3, 3)
    A = np.zeros((9, 9))
    for i, js in enumerate(nb):
        for j in js:
            if j > i:
                A[i, j] = A[j, i] = rng.uniform(-0.1, 0.1)
    A[np.diag_indices(9)] = 0.1 + np.abs(A).sum(1)
    A *= 10  # unit-scale variances keep the test short
    b = rng.normal(size=9)
    cov, mean = np.linalg.inv(A), np.linalg.solve(A, b)
    mrf = Target(lambda x: b - x @ A)
    res = svgd(mrf, rng.normal(size=(200, 9)), 500, step_size=0.05, graph=nb)
    se = np.sqrt(np.diag(cov) / 200)
    assert np.all(np.abs(res.particles.mean(0) - mean) < 4.5 * se)
    var = res.particles.var(0)
    assert np.all(np.abs(var - np.diag(cov)) < 4.5 * np.diag(cov) * np.sqrt(2 / 200))


def test_svgd_direction_on_a_dask_cluster_equals_the_local_blocks():
    from distributed import Client, LocalCluster

    _, _, score = _quartic()
    X = np.random.default_rng(13).normal(size=(50, 4))
    graph = [[1], [0, 2], [1, 3], [2]]
    local, h = svgd_direction(X, score(X), graph=graph, block=7)
    with LocalCluster(n_workers=1, threads_per_worker=2, processes=False, dashboard_address=None) as cluster, \
            Client(cluster) as client:
        remote, h2 = svgd_direction(X, score(X), graph=graph, block=7, client=client)
    np.testing.assert_allclose(remote, local, rtol=1e-13)
    np.testing.assert_array_equal(h, h2)


# -- KSD and MMD ----------------------------------------------------------------------------------
def _brute_ksd(X, score, h, closed, u_stat):
    """Σ_i (1/n²) Σ_{j,l} [s_i s'_i k + s_i ∂_{x'_i}k + s'_i ∂_{x_i}k + ∂_{x_i}∂_{x'_i}k], derivatives by FD."""
    n, d = X.shape
    S = score(X)
    e = 1e-4
    total = 0.0
    for i in range(d):
        c = closed[:, i]
        k = lambda a, b: np.exp(-np.sum((a[c] - b[c]) ** 2) / h[i])  # noqa: E731
        ei = np.eye(d)[i] * e
        for j in range(n):
            for l in range(n):
                if u_stat and j == l:
                    continue
                x, y = X[j], X[l]
                dx = (k(x + ei, y) - k(x - ei, y)) / (2 * e)
                dy = (k(x, y + ei) - k(x, y - ei)) / (2 * e)
                dxy = (k(x + ei, y + ei) - k(x + ei, y - ei) - k(x - ei, y + ei) + k(x - ei, y - ei)) / (4 * e * e)
                total += S[j, i] * S[l, i] * k(x, y) + S[j, i] * dy + S[l, i] * dx + dxy
    return total / (n * (n - 1) if u_stat else n * n)


@pytest.mark.parametrize("graph", [None, [[1], [0, 2], [1], []]])
@pytest.mark.parametrize("u_stat", [False, True])
def test_ksd_matches_its_definition_by_brute_force(graph, u_stat):
    _, _, score = _quartic()
    X = np.random.default_rng(14).normal(size=(12, 4))
    h = np.array([0.8, 1.2, 1.0, 0.6]) if graph is not None else np.full(4, 2.0)
    closed = closed_neighbourhoods(graph, 4).toarray().astype(bool)
    got = ksd(X, score, graph=graph, bandwidth=h if graph is not None else 2.0, u_statistic=u_stat, block=5)
    assert got == pytest.approx(_brute_ksd(X, score, h, closed, u_stat), rel=1e-6, abs=1e-9)


def test_mmd_matches_brute_force_and_separates_distributions():
    rng = np.random.default_rng(15)
    X, Y = rng.normal(size=(30, 3)), rng.normal(0.5, 1.0, size=(25, 3))
    h = 2.5
    k = lambda a, b: np.exp(-np.sum((a - b) ** 2) / h)  # noqa: E731
    kxx = np.array([[k(a, b) for b in X] for a in X])
    kyy = np.array([[k(a, b) for b in Y] for a in Y])
    kxy = np.array([[k(a, b) for b in Y] for a in X])
    v = kxx.mean() + kyy.mean() - 2 * kxy.mean()
    u = (kxx.sum() - 30) / (30 * 29) + (kyy.sum() - 25) / (25 * 24) - 2 * kxy.mean()
    assert mmd(X, Y, bandwidth=h, block=7) == pytest.approx(v, rel=1e-12)
    assert mmd(X, Y, bandwidth=h, unbiased=True, block=7) == pytest.approx(u, rel=1e-12)
    same = [mmd(rng.normal(size=(200, 3)), rng.normal(size=(200, 3)), unbiased=True) for _ in range(20)]
    shifted = mmd(rng.normal(size=(200, 3)), rng.normal(0.5, 1.0, size=(200, 3)), unbiased=True)
    assert abs(np.mean(same)) < 3 * np.std(same) / np.sqrt(20) + 1e-4 and shifted > 5 * np.std(same)


def test_start_points_come_from_the_base_from_source_rows_or_the_basis_and_say_what_is_missing(rng):
    from tgpflow import GPTiltedDensity, ScoreEstimator
    from tgpflow.sample import start_points

    X = rng.normal(size=(800, 2)) * np.array([1.0, 3.0]) + np.array([5.0, -2.0])
    tgp = GPTiltedDensity(n_features=16, lam=0.1, bandwidth=1.0, base="empirical").fit(X)
    draws = start_points(tgp, 4000, random_state=3)  # the default: the Gaussian base, over-dispersed
    np.testing.assert_array_equal(draws, start_points(tgp, 4000, random_state=3))
    np.testing.assert_allclose(draws.mean(0), X.mean(0), atol=0.2)
    np.testing.assert_allclose(draws.std(0), X.std(0), rtol=0.1)
    picked = start_points(tgp, 50, init=X[:100], random_state=0)  # rows of a source, as they are
    assert all((row == X[:100]).all(axis=1).any() for row in picked)
    score = ScoreEstimator(n_basis=20).fit(X)
    jittered = start_points(score, 30, random_state=0)  # no base, no resampler: basis points, jittered
    basis = np.asarray(score.basis_.Y)
    nearest = np.min(np.linalg.norm(jittered[:, None] - basis[None], axis=2), axis=1)
    assert np.all(nearest < np.sqrt(score.basis_.bandwidth / 2))
    with pytest.raises(ValueError, match="has no Gaussian base; pass --init SOURCE"):
        start_points(score, 5, init="base")
