"""The discrete columns' code frequencies matched to the data's sums (tgpflow.features.code_calibration). Each
claim is checked against something independent: the reweighting against a brute-force minimisation of the
Kullback–Leibler divergence under the same constraints, the tables against adaptive quadrature of the transform,
and a fitted model's cell probabilities against their sum over the lattice and the data's frequencies."""

from __future__ import annotations

import functools
import warnings

import numpy as np
import pytest
from scipy import integrate, optimize

import tgpflow
from tgpflow.features.code_calibration import (MAX_RESIDUAL, MIN_ESS_RATIO, calibrate_cells, calibrate_codes,
                                               calibrate_worst_first, code_tables, worst_first)
from tgpflow.features.lattice import NOISE_WIDTH, LatticeCells
from tgpflow.features.scaling import Scaling
from tgpflow.models.lattice_fitted import with_lattice
from tgpflow.models.tgp_space import from_data_rows

pytestmark = pytest.mark.filterwarnings("ignore::tgpflow.errors.DiagnosticWarning")


def _tables(n_codes: int, spread: float = 1.0) -> tuple[np.ndarray, np.ndarray]:
    """f₁, f₂ of an identity transform: code k's noise uniform over (k − ½, k + ½)."""
    k = np.arange(n_codes, dtype=float) * spread
    return k, k * k + spread * spread / 12


def test_the_reweighting_is_the_least_change_that_matches_the_sums_by_brute_force():
    rng = np.random.default_rng(0)
    n = 50_000
    codes = np.c_[rng.random(n) < 0.2, rng.choice(5, n, p=[0.1, 0.2, 0.4, 0.2, 0.1])].astype(np.int64)
    weights = rng.gamma(4.0, size=n)
    weights /= weights.sum()  # importance weights of the draws
    f1, f2 = np.full((2, 5), np.nan), np.full((2, 5), np.nan)
    f1[0, :2], f2[0, :2] = _tables(2)
    f1[1], f2[1] = _tables(5, 0.7)
    # the data: a 5 % flag, the code's law skewed upwards
    truth = [np.array([0.95, 0.05]), np.array([0.05, 0.1, 0.3, 0.3, 0.25])]
    mean = np.array([truth[j] @ f1[j, :truth[j].size] for j in range(2)])
    square = np.array([truth[j] @ f2[j, :truth[j].size] for j in range(2)])
    result = calibrate_codes(codes, weights, f1, f2, mean, square)
    assert result.matched and result.residual < 1e-8
    w = weights * np.exp(result.weights[0, codes[:, 0]] + result.weights[1, codes[:, 1]] - result.log_z)
    assert w.sum() == pytest.approx(1.0, abs=1e-12)  # Z is the draws' average of e^η
    assert w[codes[:, 0] == 1].sum() == pytest.approx(0.05, abs=1e-8)  # a flag's frequency exactly
    assert w @ f1[1, codes[:, 1]] == pytest.approx(mean[1], abs=1e-8)  # a code's mean and mean square
    assert w @ f2[1, codes[:, 1]] == pytest.approx(square[1], abs=1e-8)
    # brute force: the joint law r over the 2 × 5 cells nearest (in KL) the draws' own, under the same sums
    q = np.array([[weights[(codes[:, 0] == a) & (codes[:, 1] == b)].sum() for b in range(5)] for a in range(2)]).ravel()
    a_, b_ = np.divmod(np.arange(10), 5)
    constraints = [{"type": "eq", "fun": lambda r: r.sum() - 1.0},
                   {"type": "eq", "fun": lambda r: r @ f1[0, a_] - mean[0]},
                   {"type": "eq", "fun": lambda r: r @ f1[1, b_] - mean[1]},
                   {"type": "eq", "fun": lambda r: r @ f2[1, b_] - square[1]}]
    brute = optimize.minimize(lambda r: np.sum(r * np.log(np.maximum(r, 1e-300) / q)), q, method="SLSQP",
                              constraints=constraints, bounds=[(1e-12, 1.0)] * 10,
                              options={"ftol": 1e-14, "maxiter": 500})
    ours = np.array([w[(codes[:, 0] == a) & (codes[:, 1] == b)].sum() for a, b in zip(a_, b_, strict=True)])
    np.testing.assert_allclose(ours, brute.x, atol=2e-5)
    assert result.ess_ratio == pytest.approx((1 / np.sum(w * w)) * np.sum(weights ** 2), rel=1e-9)


def test_sums_the_draws_cannot_reach_leave_the_model_as_fitted():
    rng = np.random.default_rng(1)
    codes = (rng.random((5000, 1)) < 0.3).astype(np.int64)
    codes[:, 0] = 0  # the model never draws code 1; the data hold 30 % there
    f1, f2 = np.array([[0.0, 1.0]]), np.array([[1 / 12, 1 + 1 / 12]])
    result = calibrate_codes(codes, np.full(5000, 1 / 5000), f1, f2, np.array([0.3]), np.array([0.4]))
    assert not result.matched and result.residual > MAX_RESIDUAL
    # and a column whose draws sit at one code carries no table: its weights stay 0
    np.testing.assert_array_equal(result.weights, 0.0)


def test_a_reweighting_that_holds_only_on_the_draws_it_was_solved_on_is_not_applied():
    """The draws it is solved on visit code 3 three times in 100 000; matching a mean and spread pulled towards
    code 2 gives code 3 the largest weight of the quadratic η. Independent draws of the same q that visit code 3
    more often (1 % of them) then put most of their mass on those few: the check's effective share (recomputed
    here by Kish's formula) is below :data:`MIN_ESS_RATIO` though the solve's own is not, and the calibration is
    not applied."""
    rng = np.random.default_rng(3)
    n = 100_000
    solved = rng.choice(3, n, p=[0.5, 0.3, 0.2])[:, None]
    solved[:3] = 3
    fresh = rng.choice(4, n, p=[0.495, 0.297, 0.198, 0.01])[:, None]
    weights = np.full(n, 1.0 / n)
    f1, f2 = _tables(4)
    data = np.array([0.05, 0.15, 0.8, 0.0])
    result = calibrate_codes(solved, weights, f1[None], f2[None], np.array([data @ f1]), np.array([data @ f2]),
                             check=(fresh, weights))
    assert result.residual < 1e-8 and result.ess_ratio >= MIN_ESS_RATIO
    eta = result.weights[0]
    assert eta[3] == eta.max()
    after = np.exp(eta[fresh[:, 0]])
    kish = after.sum() ** 2 / np.sum(after ** 2) / n
    assert result.check_ess_ratio == pytest.approx(kish, rel=1e-9) and kish < MIN_ESS_RATIO
    assert not result.matched
    # without the check it would have been applied
    assert calibrate_codes(solved, weights, f1[None], f2[None], np.array([data @ f1]), np.array([data @ f2])).matched


def test_codes_the_draws_never_visit_keep_weights_within_the_visited_codes_range():
    """η is solved where the draws are: at a code none of them visits (code 3 here, in range but with no draw)
    the quadratic would extrapolate upwards; it is held at the visited codes' largest, and the sums, which do not
    see it, are matched all the same."""
    rng = np.random.default_rng(4)
    n = 100_000
    codes = rng.choice(3, n, p=[0.5, 0.3, 0.2])[:, None]
    weights = np.full(n, 1.0 / n)
    f1, f2 = _tables(4)
    data = np.array([0.05, 0.15, 0.8, 0.0])
    result = calibrate_codes(codes, weights, f1[None], f2[None], np.array([data @ f1]), np.array([data @ f2]))
    eta = result.weights[0]
    assert result.matched and result.residual < 1e-8
    theta = np.polyfit(f1[:3], eta[:3], 2)  # the quadratic through the visited codes, extrapolated
    assert np.polyval(theta, f1[3]) > eta[2] + 1.0
    assert eta[3] == eta[2] == eta[:3].max()


def test_a_spread_out_of_reach_falls_back_to_the_mean_alone():
    """A column at code 0 on 99.7 % of the rows but for a few far ones (codes 2 and 3), which q draws at code 1
    12 % of the time: the data's spread, carried by the far rows, is met by a quadratic η that rises towards
    code 3, which the draws it is solved on visit twice and independent ones 2 % of the time, so the check keeps
    under :data:`MIN_ESS_RATIO`. The mean alone is then matched, by an η linear in the code that falls away from
    code 0, and holds on both sets of draws."""
    rng = np.random.default_rng(0)
    n = 100_000
    solved = rng.choice(3, n, p=[0.88, 0.119, 0.001]).astype(float)[:, None]
    solved[:2] = 3.0
    fresh = rng.choice(4, n, p=[0.87, 0.1, 0.01, 0.02]).astype(float)[:, None]
    weights = np.full(n, 1.0 / n)
    cells = LatticeCells(np.array([0]), ("c",), np.array([0.0]), np.array([1.0]), np.array([3.0]), seed=0)
    counts = np.array([[9_970.0, 10.0, 2.0, 18.0]])
    calibrated, result = calibrate_cells(cells, None, lambda rows: rows, np.array([0.0]),  # the identity: f₁ = k
                                         lambda: (solved, weights), counts, (cells.code_indices(fresh), weights))
    first = result.first
    assert first.spread and first.ess_ratio >= MIN_ESS_RATIO > first.check_ess_ratio
    assert result.matched and not result.spread and calibrated.calibrated
    eta = result.weights[0]
    np.testing.assert_allclose(np.diff(eta), np.diff(eta)[0], rtol=1e-9)  # linear in the code, falling
    assert np.diff(eta)[0] < 0
    w = weights * np.exp(calibrated.code_log_weights(calibrated.codes(solved)))
    assert w @ solved[:, 0] == pytest.approx(counts[0] @ np.arange(4) / counts.sum(), abs=1e-9)
    after = np.exp(calibrated.code_log_weights(calibrated.codes(fresh)))
    assert after.sum() ** 2 / np.sum(after ** 2) / n == pytest.approx(result.check_ess_ratio, rel=1e-9)


def test_columns_out_of_reach_together_are_matched_worst_first_as_far_as_the_draws_allow():
    """Eight independent flags that q draws half the time, the data far less often: matching a flag of share p
    keeps ``r(p) = ½ / (p² + (1 − p)²)`` of the draws' effective size (Kish, on q's 50/50 draws), and independent
    columns' shares multiply, so matching all of them keeps 5.4 % (below :data:`MIN_ESS_RATIO`). The worst columns
    are those of the smallest p (the largest KL(q ‖ data) = ½·log(¼ / (p(1 − p)))); their products by closed form:
    0.52, 0.28, 0.15, 0.089 — three are within reach of :data:`MIN_ESS_RATIO`, a fourth is not."""
    rng = np.random.default_rng(7)
    n, share = 200_000, np.array([0.2, 0.05, 0.45, 0.02, 0.3, 0.08, 0.4, 0.03])
    codes = (rng.random((n, share.size)) < 0.5).astype(np.int64)
    weights = np.full(n, 1.0 / n)
    f1 = np.tile([0.0, 1.0], (share.size, 1))  # a flag's table: the mean is its share
    f2 = f1.copy()
    counts = np.c_[1 - share, share] * 10_000
    every = calibrate_codes(codes, weights, f1, f2, share, share)
    ratio = 0.5 / (share ** 2 + (1 - share) ** 2)
    assert not every.matched and every.ess_ratio == pytest.approx(np.prod(ratio), rel=0.2)
    order = worst_first(codes, weights, counts, np.ones(share.size))
    np.testing.assert_array_equal(order[:4], np.argsort(share)[:4])
    result = calibrate_worst_first(codes, weights, f1, f2, share, share, order, every, spread=False)
    worst = np.sort(np.argsort(share)[:3])
    assert np.prod(ratio[worst]) >= MIN_ESS_RATIO > np.prod(ratio[np.argsort(share)[:4]])
    assert result.matched and result.n_matched == 3 and result.first is every
    np.testing.assert_array_equal(np.flatnonzero(result.columns), worst)
    np.testing.assert_array_equal(result.weights[~result.columns], 0.0)
    assert result.ess_ratio == pytest.approx(np.prod(ratio[worst]), rel=0.05)
    # the matched flags carry the data's shares exactly; the others keep q's (a half, up to the draws' noise and the
    # pull of independent columns, none)
    w = weights * np.exp(result.weights[np.arange(share.size)[None], codes].sum(axis=1) - result.log_z)
    got = w @ codes
    np.testing.assert_allclose(got[worst], share[worst], atol=1e-8)
    rest = np.setdiff1d(np.arange(share.size), worst)
    np.testing.assert_allclose(got[rest], 0.5, atol=4 * 0.5 / np.sqrt(n * result.ess_ratio))
    assert result.to_dict()["columns_matched"] == 3 and result.to_dict()["first_attempt"]["ess_ratio"] < MIN_ESS_RATIO


@pytest.mark.parametrize("scale", [False, True])
def test_the_tables_are_the_fitting_spaces_means_over_each_cell_by_quadrature(scale):
    cells = LatticeCells(np.array([1]), ("code",), np.array([2.0]), np.array([0.5]), np.array([4.0]), seed=0)
    bounds = cells.bounds_with(None, ["x", "code"])  # the log tails in the extreme cells' outer halves
    scaling = Scaling(np.array([0.0, 3.1]), np.array([1.0, 0.6])) if scale else None
    to_fitting = functools.partial(from_data_rows, bounds=bounds, scaling=scaling)
    f1, f2 = code_tables(cells.origin, cells.step, cells.n_steps, cells.positions, NOISE_WIDTH, to_fitting,
                         np.array([0.3, 3.0]))
    assert f1.shape == (1, 5)

    def z(x: float) -> float:
        return float(to_fitting(np.array([[0.3, x]]))[0, 1])

    for k in range(5):
        lo, hi = 2.0 + (k - 0.5) * 0.5, 2.0 + (k + 0.5) * 0.5
        edge = [2.0] if k == 0 else [4.0] if k == 4 else None
        m1 = integrate.quad(z, lo, hi, points=edge, limit=200)[0] / 0.5
        m2 = integrate.quad(lambda x: z(x) ** 2, lo, hi, points=edge, limit=200)[0] / 0.5
        # inner cells: z affine, the midpoints' mean exact and their mean square off by (slope/64)²/12 ≤ 2e-5
        # here; the extreme cells' log singularity: within 1e-3 of a unit
        inner = 0 < k < 4
        assert f1[0, k] == pytest.approx(m1, abs=1e-9 if inner else 1e-3)
        assert f2[0, k] == pytest.approx(m2, abs=2e-5 if inner else 4e-3)


def _flag_and_code(n: int, seed: int) -> np.ndarray:
    """A 4 % flag and a 7-value code that depends on it: every column discrete."""
    rng = np.random.default_rng(seed)
    flag = (rng.random(n) < 0.04).astype(float)
    code = np.where(flag > 0, rng.choice(7, n, p=[0.05, 0.05, 0.1, 0.1, 0.2, 0.2, 0.3]),
                    rng.choice(7, n, p=[0.3, 0.2, 0.15, 0.12, 0.1, 0.08, 0.05])).astype(float)
    return np.c_[flag, code]


def test_a_fits_calibrated_cells_sum_to_one_and_carry_the_datas_flag_frequency(tmp_path):
    X = _flag_and_code(12_000, seed=0)
    est = tgpflow.GPTiltedDensity(n_features=64, random_state=0).fit(X)
    cells = est.discrete_
    assert cells.calibrated and est.fit_diagnostics_["code_calibration"]["matched"]
    grid = np.array([[a, b] for a in (0.0, 1.0) for b in range(7)])
    probs = np.exp(est.log_density(grid, normalized=True))  # × the cells' volume, 1: each cell's probability
    uncalibrated = np.exp(with_lattice(est._continuous_fitted(None), cells.uncalibrated()).log_density(grid)
                          - est.normalizer_.log_z)
    # the tails lend an extreme cell's probability beyond the range: counted back in, the cells sum to one up to
    # the normaliser's error and the cell rule's at extreme cells (every flag cell is one; measured 1.038 both ways)
    beyond = np.exp(cells.tail_log_shares(cells.codes(grid)))
    se = est.fit_diagnostics_["log_normalizer_se"]
    assert (probs / beyond).sum() == pytest.approx(1.0, abs=4 * se + 0.05)
    assert (probs / beyond).sum() == pytest.approx((uncalibrated / beyond).sum(), abs=0.005)
    # the flag's frequency: the data's up to the sums' own noise (the dequantization noise averaged over n rows:
    # its spread within the flag's cells is about 0.53 of a step, the cells' means 1.25 steps apart)
    flag = X[:, 0].mean()
    noise = 0.53 / 1.25 / np.sqrt(X.shape[0])
    got = (probs / beyond)[7:].sum() / (probs / beyond).sum()
    assert abs(got - flag) <= 4 * noise + 0.01 * flag
    # and not worse than the fit's own frequency (which a mixture base spreads across the two cells)
    assert abs(got - flag) <= abs((uncalibrated / beyond)[7:].sum() / (uncalibrated / beyond).sum() - flag) + 1e-3
    # the diagnostics are the published model's: the normaliser's draws carry the calibration, so their flag share
    # is the cells' (up to the draws' noise), not the uncalibrated fit's; that fit's health is kept beside them
    diag, tolerance = est.fit_diagnostics_, 4 * np.sqrt(got * (1 - got) / est.fit_diagnostics_["ess"])
    before = (uncalibrated / beyond)[7:].sum() / (uncalibrated / beyond).sum()
    assert abs(est.normalizer_.mean[0] - got) <= tolerance < abs(est.normalizer_.mean[0] - before)
    assert set(diag["code_calibration"]["before"]) == {"ess_fraction", "mass_outside"}
    assert est.log_normalizer().log_z == est.normalizer_.log_z
    # the samples follow the calibrated cells (up to the resampling's own noise)
    sample = est.sample(40_000, random_state=3)
    n_eff = min(est.last_sample_ess_, 40_000)
    assert abs(sample[:, 0].mean() - got) <= 4 * np.sqrt(got * (1 - got) / n_eff)
    # a saved model keeps the calibration: the same densities, and the JSON carries the weights
    path = tmp_path / "m.zarr"
    est.save(path)
    back = tgpflow.load(path)
    assert back.discrete_.calibrated
    np.testing.assert_allclose(back.log_density(grid), est.log_density(grid), rtol=0, atol=1e-12)
    again = LatticeCells.from_dict(cells.to_dict())
    np.testing.assert_array_equal(again.code_log_weights(cells.codes(grid)), cells.code_log_weights(cells.codes(grid)))
    # the statistics carry the cells without it (they are sums of rows, not a model)
    assert not est.stats_.cells.calibrated


def test_the_pass_counts_each_codes_rows_and_the_counts_add_as_statistics():
    """The statistics carry the rows per code of each discrete column, counted from the fitting-space rows of the
    pass: the data's own code counts (counted here on the raw rows), and a sum of parts' is the parts' sum."""
    X = _flag_and_code(6_000, seed=2)
    est = tgpflow.GPTiltedDensity(n_features=32, lam=1.0, bandwidth=1.0, random_state=0).fit(X)
    counts = est.stats_.code_counts
    assert counts.shape == (2, 7)
    np.testing.assert_array_equal(counts[0, :2], np.bincount(X[:, 0].astype(int), minlength=2))
    np.testing.assert_array_equal(counts[0, 2:], 0.0)
    np.testing.assert_array_equal(counts[1], np.bincount(X[:, 1].astype(int), minlength=7))
    a = est.accumulate(X[:2_500])
    b = est.accumulate(X[2_500:])
    np.testing.assert_array_equal((a + b).code_counts, counts)
    np.testing.assert_array_equal(((a + b) - b).code_counts, a.code_counts)


def test_a_rare_flag_is_matched_to_its_count_not_to_the_dequantizing_noise():
    """A flag on 0.2 % of the rows: the dequantizing noise moves the sums' flag share by about 0.4/√n (0.6 % at
    5 000 rows), three times the flag itself, so a calibration to the moments can miss it several-fold or find it
    out of reach; calibrated to the pass's counts, the samples hold the data's share up to their own noise."""
    rng = np.random.default_rng(5)
    n = 5_000
    flag = np.zeros(n)
    flag[rng.choice(n, 10, replace=False)] = 1.0  # 0.2 %
    X = np.c_[flag, rng.normal(size=n) + 2.0 * flag]
    est = tgpflow.GPTiltedDensity(n_features=32, random_state=0).fit(X)
    assert est.fit_diagnostics_["code_calibration"]["matched"]
    np.testing.assert_array_equal(est.stats_.code_counts, [[n - 10, 10]])
    sample = est.sample(200_000, random_state=1)
    n_eff = min(est.last_sample_ess_, 200_000)
    share = sample[:, 0].mean()
    assert abs(share - 0.002) <= 4 * np.sqrt(0.002 * 0.998 / n_eff), share


def test_statistics_summed_before_the_counts_calibrate_to_their_moments():
    """Statistics read from a file written before the pass counted codes have no counts: the fit calibrates to the
    moments, as it did then, and still matches them."""
    import dataclasses

    X = _flag_and_code(6_000, seed=3)
    est = tgpflow.GPTiltedDensity(n_features=32, lam=1.0, bandwidth=1.0, random_state=0).fit(X)
    old = dataclasses.replace(est.stats_, code_counts=None)
    again = tgpflow.GPTiltedDensity(n_features=32, lam=1.0, bandwidth=1.0, random_state=0).fit_from_stats(old)
    assert again.fit_diagnostics_["code_calibration"]["matched"]
    assert again.discrete_.calibrated
    # the two targets differ by the dequantizing noise only: the weights are close, not equal
    diff = np.abs(again.discrete_.code_weights - est.discrete_.code_weights).max()
    assert 0 < diff < 0.2


@pytest.mark.parametrize("far", [False, True])
def test_a_fit_the_calibration_brings_inside_the_box_does_not_warn_of_its_candidates(far):
    """Three columns each 0 on all but 2 rows of 3 000: the box holds only 0 there, and the selection's candidates,
    uncalibrated, fail its check (the chosen one puts 12 % of its mass outside: a mixture base spills past code 0's
    cell). The calibration brings the published model inside the limit, so the candidates' complaint is kept in
    ``selection_`` (and logged), not warned. With flags (0/1) each share is matched; with far codes (1–4) the
    spreads, carried by those 2 rows, need a weight the normaliser's draws refuse (their effective size would fall
    below a tenth), and the means alone are matched. Checked independently: the normaliser's ESS is the
    uncalibrated one times the calibration's Kish ratio on the same draws, and the samples agree with the
    diagnostics' mass outside and with the data's means."""
    rng = np.random.default_rng(0)
    n = 3_000
    x, codes = rng.normal(size=(n, 2)), np.zeros((n, 3))
    for j in range(3):
        rows = rng.choice(n, 2, replace=False)
        codes[rows, j] = rng.integers(1, 5, 2) if far else 1.0
    X = np.c_[x, codes]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        est = tgpflow.GPTiltedDensity(random_state=0).fit(X)
    diag, calibration = est.fit_diagnostics_, est.fit_diagnostics_["code_calibration"]
    assert "no (γ, λ) on the grid" in est.selection_["unhealthy_choice"]
    assert calibration["before"]["mass_outside"] > diag["mass_outside_limit"] >= diag["mass_outside"]
    assert not [w for w in caught if issubclass(w.category, tgpflow.errors.DiagnosticWarning)]
    assert calibration["spread"] is not far
    if far:
        assert calibration["first_attempt"]["check_ess_ratio"] < MIN_ESS_RATIO
    assert diag["ess_fraction"] == pytest.approx(calibration["before"]["ess_fraction"] * calibration["check_ess_ratio"],
                                                 rel=2e-4)  # the ratio is rounded to 4 decimals
    sample = est.sample(40_000, random_state=1)
    n_eff = min(est.last_sample_ess_, 40_000)
    outside = est.support_.outside(sample).mean()
    assert abs(outside - diag["mass_outside"]) <= 4 * np.sqrt(diag["mass_outside"] / n_eff) + 0.002
    spread = np.sqrt(np.mean(codes ** 2, axis=0) / n_eff)  # a mean's noise over n_eff draws, at the data's law
    assert np.all(np.abs(sample[:, 2:].mean(axis=0) - codes.mean(axis=0)) <= 4 * spread + codes.mean(axis=0))
