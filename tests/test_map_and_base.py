"""MAP (docs/mathematics.md, "MAP, baselines and sampling") against quadrature; base-measure learning
(docs/mathematics.md, "Fisher divergence and base-measure learning", eqs 12–16)."""

import numpy as np
import pytest
from scipy.special import logsumexp

from tests.oracles import fd_objective, gauss_hermite, phi_raw
from tgpflow import GPTiltedDensity, RandomFourierFeatures
from tgpflow.core.gaussian_base import Base, base_from_moments
from tgpflow.solve.base_learning import fd_loss, learn_base, solve_lyapunov, update_cov, update_mean
from tgpflow.solve.map import PointSet, base_draws, map_gradient, map_objective, proposal_point_set, solve_map
from tgpflow.stats.tgp import tgp_chunk_stats


@pytest.fixture
def problem(gaussian_mix):
    X = gaussian_mix[::10]  # 60 rows
    f = RandomFourierFeatures.draw(8, bandwidth=0.9, n_dims=2, shift=X.mean(0), random_state=5)
    stats = tgp_chunk_stats(X, f)
    base = base_from_moments(stats.moments)
    nodes, weights = gauss_hermite(base.mean, base.cov, 40)
    return X, f, stats, base, PointSet(nodes, np.log(weights))


def _oracle_map_objective(theta, X, f, nodes, weights, lam):
    """θᵀψ − N log E_{N(μ,Σ)} e^{θᵀφ} − (λ/2)‖θ‖², ψ and E by raw cos and quadrature."""
    phi_x, _ = phi_raw(X, f.Z, f.c, f.gamma)
    phi_z, _ = phi_raw(nodes, f.Z, f.c, f.gamma)
    return theta @ phi_x.sum(0) - X.shape[0] * logsumexp(phi_z @ theta, b=weights) - 0.5 * lam * theta @ theta


def test_map_gradient_matches_finite_differences_of_the_quadrature_objective(problem):
    X, f, stats, base, quad = problem
    lam = 0.5
    rng = np.random.default_rng(1)
    theta = 0.5 * rng.standard_normal(8)
    oracle = lambda t: _oracle_map_objective(t, X, f, quad.points, np.exp(quad.log_weights), lam)  # noqa: E731
    assert map_objective(theta, stats.psi, stats.n, f, quad, lam) == pytest.approx(oracle(theta), rel=1e-10)
    h = 1e-5
    fd = np.array([(oracle(theta + h * e) - oracle(theta - h * e)) / (2 * h) for e in np.eye(8)])
    np.testing.assert_allclose(map_gradient(theta, stats.psi, stats.n, f, quad, lam), fd, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("rule", [base_draws, proposal_point_set], ids=["base", "proposal"])
def test_map_iteration_converges_to_the_quadrature_map_within_monte_carlo_error(problem, rule):
    X, f, stats, base, quad = problem
    lam = 0.5
    theta_q, _, info = solve_map(stats.psi, stats.n, f, quad, lam)
    assert info["converged"] and info["iterations"] < 30
    assert np.linalg.norm(map_gradient(theta_q, stats.psi, stats.n, f, quad, lam)) < 1e-6 * np.linalg.norm(stats.psi)
    runs = [solve_map(stats.psi, stats.n, f, rule(base, 200_000, seed), lam)[0] for seed in (1, 2, 3)]
    spread = np.mean([np.linalg.norm(runs[i] - runs[j]) for i, j in ((0, 1), (0, 2), (1, 2))]) / np.sqrt(2)
    for th in runs:  # the MC error of one run is ≈ spread; its distance to the quadrature MAP must be of that size
        assert np.linalg.norm(th - theta_q) < 4 * spread
    assert spread < 0.05 * np.linalg.norm(theta_q)


def test_proposal_point_set_is_an_unbiased_rule_for_the_base_expectation():
    """Σ_j e^{a_j} f(ζ_j) over the defensive point set estimates E_{N(μ,Σ)} f: against the closed form
    E cos(wᵀx + b) = e^{−½wᵀΣw} cos(wᵀμ + b), within 4 Monte-Carlo standard errors, for a few w."""
    rng = np.random.default_rng(3)
    mean, A = rng.standard_normal(3), rng.standard_normal((3, 3))
    cov = A @ A.T + np.eye(3)
    base = Base(mean, cov, np.linalg.inv(cov))
    pts = proposal_point_set(base, 200_000, 11)
    weights = np.exp(pts.log_weights)
    assert weights.sum() == pytest.approx(1.0, abs=4 * np.sqrt(pts.points.shape[0]) * weights.std())
    for k in range(4):
        w, b = 0.5 * rng.standard_normal(3), rng.uniform(0, 2 * np.pi)
        values = weights * np.cos(pts.points @ w + b)
        exact = np.exp(-0.5 * w @ cov @ w) * np.cos(w @ mean + b)
        se = np.sqrt(values.size) * values.std()
        assert abs(values.sum() - exact) < 4 * se, k


def test_map_step_is_stable_for_large_n(gaussian_mix):
    """Newton (docs/mathematics.md, "Where the papers differ", item A9): no blow-up when ψ and N are huge (a billion
    rows' worth)."""
    f = RandomFourierFeatures.draw(30, bandwidth=0.6, n_dims=2, shift=gaussian_mix.mean(0), random_state=5)
    st = tgp_chunk_stats(gaussian_mix, f)
    scale = 1e9 / st.n
    base = base_from_moments(st.moments)
    theta, _, info = solve_map(st.psi * scale, int(st.n * scale), f, base_draws(base, 20_000, 0), 0.1)
    assert info["converged"] and np.all(np.isfinite(theta))


def test_map_estimator_end_to_end(gaussian_mix, tmp_path):
    # a fixed λ: on these rows (two Gaussian components) the default selection may rightly keep the mixture base
    # alone (λ = ∞, θ = 0), and then no MAP problem is solved
    est = GPTiltedDensity(method="map", n_features=40, lam=1.0, map_draws=20_000, random_state=0).fit(gaussian_mix)
    assert est.solver_info_["converged"] and np.abs(est.theta_).max() > 0
    back = __import__("tgpflow").load(est.save(tmp_path / "m.zarr"))
    np.testing.assert_array_equal(back.log_density(gaussian_mix[:5]), est.log_density(gaussian_mix[:5]))


def test_fd_loss_is_the_black_box_objective_for_any_base(problem):
    X, f, stats, base, _ = problem
    rng = np.random.default_rng(2)
    theta = rng.standard_normal(8)
    mean = base.mean + rng.normal(0, 0.3, 2)
    A = rng.standard_normal((2, 2))
    P = A @ A.T + np.eye(2)
    other = Base(mean, np.linalg.inv(P), P)
    expected = fd_objective(theta, X, f.Z, f.c, f.gamma, mean, P, 0.2)
    assert fd_loss(stats, f, other, theta, 0.2) == pytest.approx(expected, rel=1e-10)


def test_lyapunov_solution_satisfies_its_equation():
    rng = np.random.default_rng(3)
    A = rng.standard_normal((5, 5))
    Sbar = A @ A.T + np.eye(5)
    Q = rng.standard_normal((5, 5))
    Q = Q + Q.T
    P = solve_lyapunov(Sbar, Q)
    np.testing.assert_allclose(Sbar @ P + P @ Sbar, Q, atol=1e-12 * np.abs(Q).max() * 10)


def test_base_updates_are_exact_block_minimisers_and_never_increase_the_objective(problem):
    X, f, stats, base, _ = problem
    lam = 0.1
    theta, learnt, info = learn_base(stats, f, base, lam, max_iter=15)
    history = np.asarray(info["history"])
    assert np.all(np.diff(history) <= 1e-10 * np.abs(history).max())
    assert history[-1] < history[0]
    # μ update: the gradient of L in μ vanishes; Σ update: the gradient in P (symmetric) vanishes
    new = update_mean(stats, f, base, theta)
    h = 1e-6
    g_mu = [(fd_loss(stats, f, Base(new.mean + h * e, new.cov, new.precision), theta, lam)
             - fd_loss(stats, f, Base(new.mean - h * e, new.cov, new.precision), theta, lam)) / (2 * h) for e in np.eye(2)]
    assert np.max(np.abs(g_mu)) < 1e-5 * stats.n
    new = update_cov(stats, f, new, theta)
    for E in (np.array([[1.0, 0], [0, 0]]), np.array([[0, 1.0], [1.0, 0]]), np.array([[0, 0], [0, 1.0]])):
        plus = Base(new.mean, new.cov, new.precision + h * E)
        minus = Base(new.mean, new.cov, new.precision - h * E)
        g = (fd_loss(stats, f, plus, theta, lam) - fd_loss(stats, f, minus, theta, lam)) / (2 * h)
        assert abs(g) < 1e-5 * stats.n


def test_base_learn_estimator_uses_the_learnt_base(gaussian_mix):
    # one λ and γ for both (a selection may choose differently for the two bases), the λ fd_loss is taken at
    est = GPTiltedDensity(method="fd", n_features=30, base="learn", lam=0.1, bandwidth=0.9).fit(gaussian_mix)
    emp = GPTiltedDensity(method="fd", n_features=30, lam=0.1, bandwidth=0.9).fit(gaussian_mix)
    assert not np.allclose(est.mean_, emp.mean_)
    assert est.objective_ <= fd_loss(emp.stats_, emp.features_, emp.fitted().base, emp.theta_, 0.1) + 1e-9
    with pytest.raises(ValueError, match="base='learn'"):
        GPTiltedDensity(method="ncfd", base="learn").fit(gaussian_mix)


def test_map_selection_solves_the_lams_below_its_path_choice_again_on_all_draws(monkeypatch):
    """The λ path runs on MAP_SELECTION_DRAWS draws; λ from a decade above its choice down REFINE_DECADES
    decades are solved again on all map_draws. The path alone is an estimator whose map_draws equal the path's."""
    import tgpflow.models.tgp_methods.map as map_method

    rng = np.random.default_rng(11)  # N ≫ the path's draws, so that small λ overfit the draws
    X = np.concatenate([rng.multivariate_normal([0, 0], [[1, 0.6], [0.6, 1]], 20_000),
                        rng.multivariate_normal([2.5, -1], [[0.3, 0], [0, 0.5]], 10_000)])
    monkeypatch.setattr(map_method, "MAP_SELECTION_DRAWS", 1000)
    kw = dict(method="map", n_features=32, bandwidth=0.5, random_state=3, base="empirical")  # every row a MAP solve
    path = GPTiltedDensity(map_draws=1000, **kw).fit(X).selection_
    both = GPTiltedDensity(map_draws=8000, **kw).fit(X).selection_
    lam_path = path["chosen"]["lam"]
    refined = {r["lam"] for r in both["curve"] if r["map_draws"] == 8000}
    grid = [r["lam"] for r in path["curve"]]
    assert refined == {lam for lam in grid if lam_path / 100 * (1 - 1e-12) <= lam <= 10 * lam_path * (1 + 1e-12)}
    assert len(refined) >= 2
    for p, b in zip(path["curve"], both["curve"], strict=True):
        if b["lam"] not in refined:  # the path's own rows are kept as they were
            assert b == p
        else:  # a different point set gives a different θ, so different held-out scores
            assert b["loglik"] != p["loglik"]
    assert both["chosen"]["lam"] in refined or both["chosen"]["lam"] > 10 * lam_path
