"""Held-out selection from validation statistics (no extra pass) against direct refits.

On the Gaussian base (``base="empirical"``): its curve is the grid alone. The mixture base's extra λ = ∞ row is
tested in test_mixture_base.py."""

import dask.array as da
import numpy as np
import pytest

from tgpflow import GPTiltedDensity, RandomFourierFeatures
from tgpflow.stats.split import SPLIT_SALT
from tgpflow.stats.split import validation_mask
from tests.oracles import fd_objective

# These tests check the selection's algebra on 600 rows with grids that include under-regularised λ,
# where the fit diagnostics rightly warn (the diagnostics are tested in test_normalizer.py).
pytestmark = pytest.mark.filterwarnings("ignore::tgpflow.models.diagnostics.DiagnosticWarning")

LAMS = [1e-3, 1e-2, 0.1, 1.0, 10.0]
GAMMAS = [0.25, 0.5, 1.0]


@pytest.fixture
def data(gaussian_mix):
    f = RandomFourierFeatures.draw(30, bandwidth=GAMMAS[0], n_dims=2, shift=gaussian_mix.mean(0), random_state=7)
    held = validation_mask(np.arange(gaussian_mix.shape[0]), 0.3, SPLIT_SALT)
    return gaussian_mix, f, held


@pytest.mark.parametrize("method", ["fd", "ncfd"])
def test_selection_from_statistics_equals_refit_and_direct_heldout_loss(data, method):
    X, f, held = data
    kw = dict(method=method, n_features=30, noise_levels=3, sigma_max=0.6, validation_fraction=0.3,
              criterion="hyvarinen", base="empirical")
    est = GPTiltedDensity(lam="auto", lam_grid=LAMS, bandwidth=GAMMAS, **kw).fit(X, features=f)
    curve = est.selection_["curve"]
    assert len(curve) == len(GAMMAS) * len(LAMS)
    direct = []
    for g in GAMMAS:
        for lam in LAMS:
            ref = GPTiltedDensity(lam=lam, **kw).fit(X[~held], features=f.with_bandwidth(g))
            direct.append(float(np.mean(ref.hyvarinen_terms(X[held]))))  # row by row, closed-form divergence
    np.testing.assert_allclose([c["loss"] for c in curve], direct, rtol=1e-7, atol=1e-9)
    best = int(np.argmin(direct))
    assert (est.selection_["chosen"]["bandwidth"], est.selection_["chosen"]["lam"]) == (curve[best]["bandwidth"],
                                                                                      curve[best]["lam"])
    assert est.bandwidth_ == curve[best]["bandwidth"] and est.lam_ == curve[best]["lam"]
    assert est.n_samples_seen_ == X.shape[0]  # the final solve uses every row
    assert est.selection_["n_validation"] == int(held.sum())


def test_fvpd_score_is_the_posterior_expected_heldout_loss(data):
    X, f, held = data
    etas = [2.0, 20.0]
    est = GPTiltedDensity(method="fvpd", n_features=30, lam="auto", lam_grid=[0.01, 1.0], eta=etas,
                          validation_fraction=0.3, criterion="hyvarinen", base="empirical").fit(X, features=f)
    mean, P = X[~held].mean(0), np.linalg.inv(np.cov(X[~held].T, bias=True))
    rng = np.random.default_rng(0)
    for row in est.selection_["curve"]:
        ref = GPTiltedDensity(method="fvpd", n_features=30, lam=row["lam"], eta=row["eta"]).fit(X[~held], features=f)
        cov = np.linalg.inv(ref.posterior_precision_)
        draws = rng.multivariate_normal(ref.posterior_mean_, cov, size=400)
        losses = [fd_objective(t, X[held], f.Z, f.c, f.gamma, mean, P, 0.0) / held.sum() for t in draws]
        se = np.std(losses) / np.sqrt(len(losses))
        assert abs(np.mean(losses) - row["loss"]) < 4 * se + 1e-9


def test_split_is_the_same_for_any_chunking_and_survives_dropped_rows(data):
    gaussian_mix, f, _ = data  # the features are given: the pilot (not the split) depends on the chunking
    kw = dict(method="fd", n_features=30, lam="auto", lam_grid=LAMS, validation_fraction=0.25, base="empirical")
    a = GPTiltedDensity(**kw).fit(da.from_array(gaussian_mix, chunks=(100, 2)), features=f)
    b = GPTiltedDensity(**kw).fit(da.from_array(gaussian_mix, chunks=(37, 2)), features=f)
    np.testing.assert_allclose([c["loss"] for c in a.selection_["curve"]], [c["loss"] for c in b.selection_["curve"]],
                               rtol=1e-9)
    assert a.selection_["split_key"] == "global row position"
    # a NaN row is dropped; every other row keeps its key, so the split of the rest is unchanged
    X = gaussian_mix.copy()
    X[5] = np.nan
    c = GPTiltedDensity(**kw, on_bad_rows="drop").fit(da.from_array(X, chunks=(100, 2)), features=f)
    held = validation_mask(np.arange(X.shape[0]), 0.25, SPLIT_SALT)
    held[5] = False
    assert c.selection_["n_validation"] == int(held.sum())


def test_partial_fit_keeps_the_selected_values(gaussian_mix):
    est = GPTiltedDensity(method="fd", n_features=20, lam="auto", lam_grid=LAMS, bandwidth=[0.3, 0.6],
                          base="empirical")
    est.fit(gaussian_mix[:400])
    chosen = dict(est.selection_["chosen"])
    est.partial_fit(gaussian_mix[400:])
    assert est.n_samples_seen_ == 600 and est.bandwidth_ == chosen["bandwidth"]
    # λ stays the selected one unless the all-rows fit fails the check its candidates passed (here the 200
    # new rows are a second component): then it is raised along the grid, and the raise is recorded
    if est.lam_ != chosen["lam"]:
        assert est.lam_ > chosen["lam"] and est.selection_["raised"][-1]["lam"] == est.lam_
    full = GPTiltedDensity(method="fd", n_features=20, lam=est.lam_).fit(gaussian_mix, features=est.features_)
    np.testing.assert_allclose(est.theta_, full.theta_, rtol=1e-9)


def test_selected_model_round_trips(tmp_path, gaussian_mix):
    import tgpflow

    est = GPTiltedDensity(method="fvpd", n_features=20, lam="auto", lam_grid=LAMS, eta=[1.0, 4.0]).fit(gaussian_mix)
    back = tgpflow.load(est.save(tmp_path / "sel.zarr"))
    assert back.selection_["chosen"] == est.selection_["chosen"]
    np.testing.assert_allclose(back.log_density(gaussian_mix[:9]), est.log_density(gaussian_mix[:9]), rtol=1e-12)


def test_sliced_ks_noise_is_the_standard_error_of_a_median_of_independent_ks_distances():
    from scipy.stats import ks_2samp

    from tgpflow.solve.select import KS_MEDIAN_SE

    rng = np.random.default_rng(3)
    n, m, k = 400, 900, 9
    medians = [np.median([ks_2samp(rng.normal(size=n), rng.normal(size=m)).statistic for _ in range(k)])
               for _ in range(800)]
    # the asymptotic 0.318·√((1/n + 1/m)/k) against the Monte-Carlo s.d. (its s.e. with 800 medians: 2.5 %;
    # k = 9 and the KS's discreteness at these sizes: a few % more)
    assert np.std(medians) == pytest.approx(KS_MEDIAN_SE * np.sqrt((1 / n + 1 / m) / k), rel=0.12)


def test_sliced_criterion_ties_within_the_noise_go_to_the_loglik():
    from tgpflow.solve.select import choose

    def row(ll, ks, noise=0.01, outside=0.0):
        return {**_row(ll, ks, 0.3, outside), "sliced_ks_noise": noise}

    # rows 1 and 2 are within the best KS's noise (0.020 + 0.010): the higher log-likelihood (row 2) wins;
    # row 3 has the best log-likelihood but a KS outside the noise; row 4 is unhealthy
    rows = [row(-3.5, 0.020), row(-3.45, 0.025), row(-3.40, 0.029), row(-3.30, 0.031), row(-3.0, 0.021, outside=0.2)]
    assert choose(rows, "sliced") == 2
    # a KS difference larger than the noise is a real one: the lowest KS wins whatever its log-likelihood
    rows = [row(-3.5, 0.020, noise=0.002), row(-3.40, 0.029, noise=0.002)]
    assert choose(rows, "sliced") == 0
    # "loglik" ignores the KS
    rows = [row(-3.5, 0.020), row(-3.30, 0.050)]
    assert choose(rows, "loglik") == 1


def _row(ll: float, ks: float, ess: float, outside: float) -> dict[str, float]:
    return {"loglik": ll, "sliced_ks": ks, "ess_fraction": ess, "mass_outside": outside, "mass_outside_limit": 0.03}


@pytest.mark.parametrize("criterion, key", [("loglik", "loglik"), ("sliced", "sliced_ks")])
def test_choose_keeps_the_support_constraint_and_relaxes_it_only_when_no_row_meets_it(criterion, key):
    from tgpflow.solve.select import choose

    sign = 1 if criterion == "loglik" else -1  # higher log-likelihood, lower KS is better
    # a healthy row beats a better-scoring row with mass outside, and one with an untrustworthy normaliser
    rows = [_row(-3.0, 0.01, 0.30, 0.10), _row(-3.1, 0.02, 0.30, 0.01), _row(-2.0, 0.005, 0.001, 0.0),
            _row(-3.2, 0.03, 0.30, 0.02)]
    assert choose(rows, criterion) == 1
    # no row meets the box limit (hard bounds): the criterion decides among the trustworthy rows,
    # not the least mass outside (row 3)
    rows = [_row(-3.0, 0.01, 0.30, 0.30), _row(-3.5, 0.09, 0.30, 0.20), _row(-2.0, 0.005, 0.001, 0.30),
            _row(-3.2, 0.05, 0.30, 0.25)]
    best = choose(rows, criterion)
    trusted = [i for i, r in enumerate(rows) if r["ess_fraction"] >= 0.01]
    assert best == max(trusted, key=lambda i: sign * rows[i][key]) == 0
    # no trustworthy normaliser anywhere: the largest ESS
    rows = [_row(-3.0, 0.01, 0.002, 0.0), _row(-3.5, 0.09, 0.008, 0.0), _row(-2.0, 0.005, 0.001, 0.0)]
    assert choose(rows, criterion) == 1


def test_default_grid_is_extended_upwards_while_its_largest_lam_wins(monkeypatch):
    # Gaussian rows: the base is the truth, so the held-out log-likelihood keeps rising with λ (θ → 0) and the
    # best candidate is always the largest λ offered. The extension must equal a fit given the extended grid
    # from the start (same rows, same choice), and a grid the user gives is never extended.
    import tgpflow.models.tgp_selection as tgp_selection
    from tgpflow.solve.select import GRID_EXTENSION_DECADES

    X = np.random.default_rng(3).normal(size=(1500, 2))
    short = (1e-3, 1e-2)
    monkeypatch.setattr(tgp_selection, "DEFAULT_LOGLIK_LAM_GRID", short)
    kw = dict(method="fd", n_features=30, bandwidth=0.5, criterion="loglik", random_state=0, base="empirical")
    est = GPTiltedDensity(**kw).fit(X)
    extended = [*short, *(short[-1] * 10 ** (k / 3) for k in range(1, 3 * GRID_EXTENSION_DECADES + 1))]
    tried = [r["lam"] for r in est.selection_["curve"]]
    np.testing.assert_allclose(tried, extended, rtol=1e-12)
    assert est.lam_ == pytest.approx(extended[-1])  # the truth is θ = 0: the largest λ, after every extension
    given = GPTiltedDensity(**kw, lam_grid=extended).fit(X)
    assert given.lam_ == est.lam_
    np.testing.assert_allclose([r["loglik"] for r in given.selection_["curve"]],
                               [r["loglik"] for r in est.selection_["curve"]], rtol=1e-9)
    kept = GPTiltedDensity(**kw, lam_grid=list(short)).fit(X)
    assert [r["lam"] for r in kept.selection_["curve"]] == list(short) and kept.lam_ == short[-1]


def test_grid_extension_stops_once_the_best_lam_is_inside(gaussian_mix, monkeypatch):
    # 600 rows of a mixture, S = 100, γ = 0.3: the held-out log-likelihood has an interior optimum (λ ≈ 1–2 on
    # the default grid). From a grid that stops a decade below it, the extension climbs and stops within a
    # decade of its choice, which is the choice of a fit given all the λ it tried from the start.
    import tgpflow.models.tgp_selection as tgp_selection
    from tgpflow.solve.select import GRID_EXTENSION_DECADES

    kw = dict(method="fd", n_features=100, bandwidth=0.3, criterion="loglik", random_state=0, base="empirical")
    monkeypatch.setattr(tgp_selection, "DEFAULT_LOGLIK_LAM_GRID", (0.01, 0.1))
    est = GPTiltedDensity(**kw).fit(gaussian_mix)
    tried = [r["lam"] for r in est.selection_["curve"]]
    assert 2 < len(tried) < 2 + 3 * GRID_EXTENSION_DECADES and 1.0 < tried[-1] / est.lam_ <= 10.0 * (1 + 1e-9)
    given = GPTiltedDensity(**kw, lam_grid=tried).fit(gaussian_mix)
    assert given.lam_ == est.lam_


@pytest.mark.parametrize("S, rank", [(1, 1), (2, 1), (60, 60), (300, 120)])
def test_the_ridge_path_of_the_tridiagonal_reduction_solves_each_shifted_system(S, rank):
    """RidgePath's θ(r) = Q(T + rI)⁻¹Qᵀb against a dense LU solve of (A₀ + rI)θ = b, for a full-rank and a
    rank-deficient PSD A₀ (the bandwidth search's FD systems at small λ), and against the eigendecomposition's."""
    from tgpflow.solve.select import RidgePath

    rng = np.random.default_rng(S)
    X = rng.standard_normal((S, rank))
    A0 = X @ X.T / rank
    b = rng.standard_normal(S)
    rs = [1e-6, 1e-3, 0.1, 10.0]
    got = RidgePath(A0, b).thetas(rs)
    assert got.shape == (len(rs), S)
    lam, V = np.linalg.eigh(A0)
    for theta, r in zip(got, rs):
        want = np.linalg.solve(A0 + r * np.eye(S), b)
        # backward stable: the error is at most ≈ cond(A₀ + rI) · ε relative
        cond = (lam.max() + r) / (max(lam.min(), 0.0) + r)
        tol = 50 * cond * np.finfo(float).eps * np.linalg.norm(want)
        assert np.linalg.norm(theta - want) <= tol
        assert np.allclose(theta, V @ ((V.T @ b) / (lam + r)), rtol=0, atol=tol)


def test_raised_lam_steps_to_the_next_tried_lam_only_when_the_all_rows_fit_fails_its_candidates_check():
    from tgpflow.models.tgp_selection import raised_lam
    from tgpflow.solve.select import MIN_SELECT_ESS_FRACTION

    # the chosen candidate passed on held-out rows (ESS 50 %, 1 % outside against a 3 % limit); the curve holds
    # the grid and an extension beyond it (30, 100), the grid itself stops at 10
    chosen = {"lam": 1.0, "ess_fraction": 0.5, "mass_outside": 0.01, "mass_outside_limit": 0.03}
    curve = [{"lam": v} for v in (0.1, 1.0, 10.0, 30.0, 100.0)]
    selection = {"chosen": chosen, "curve": curve}
    grid = [0.1, 1.0, 10.0]
    ok = MIN_SELECT_ESS_FRACTION * 2
    assert raised_lam(selection, grid, 1.0, ok, 0.02, 0.03) is None  # passes on all rows: λ stays
    assert raised_lam(selection, grid, 1.0, MIN_SELECT_ESS_FRACTION / 2, 0.02, 0.03) == (10.0, "ess")
    assert raised_lam(selection, grid, 1.0, ok, 0.05, 0.03) == (10.0, "outside")
    assert raised_lam(selection, grid, 10.0, ok, 0.05, 0.03) == (30.0, "outside")  # the extension's λ too
    assert raised_lam(selection, grid, 100.0, MIN_SELECT_ESS_FRACTION / 2, 0.05, 0.03) is None  # none larger
    # a candidate that did not pass the support check on held-out rows is not held to it on all rows
    failed = dict(selection, chosen=dict(chosen, mass_outside=0.2))
    assert raised_lam(failed, grid, 1.0, ok, 0.25, 0.03) is None
    assert raised_lam(failed, grid, 1.0, MIN_SELECT_ESS_FRACTION / 2, 0.25, 0.03) == (10.0, "ess")


def test_a_family_must_implement_the_statistics_estimators_hooks():
    """StatsEstimator's hooks are abstract: a family without its solve, λ grid or selector cannot be made."""
    from tgpflow import NystromKEF, ScoreEstimator
    from tgpflow.models.estimator_base import StatsEstimator

    assert StatsEstimator.__abstractmethods__ == {"_solve_stats", "_lam_grid", "_selector"}

    class NoSelector(StatsEstimator):
        def _solve_stats(self, stats, draw):
            return None

        def _lam_grid(self):
            return [1.0]

    with pytest.raises(TypeError, match="_selector"):
        NoSelector()
    for family in (GPTiltedDensity, ScoreEstimator, NystromKEF):
        assert not family.__abstractmethods__
