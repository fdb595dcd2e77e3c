"""Hard edges read off a pilot (tgpflow.features.edges.suggest_bounds, bounds="auto"; docs/gp_tilted.md,
"Hard edges").

The rule's bounds are checked against quantiles computed here from the rows, and a fit that uses them against the
closed-form density of the table it was fitted to, on held-out rows."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from scipy import stats as sstats

import tgpflow
from tgpflow.features.edges import suggest_bounds

pytestmark = pytest.mark.filterwarnings("ignore::tgpflow.errors.DiagnosticWarning")


def _gap(col: np.ndarray, side: str) -> float:
    """The distance from the column's extreme value to its 1 % (99 %) quantile."""
    return float(np.quantile(col, 0.01) - col.min()) if side == "lower" else float(col.max() - np.quantile(col, 0.99))


def test_edges_where_the_rows_pile_up_are_bounded_one_gap_beyond_and_tails_that_thin_out_are_not():
    rng = np.random.default_rng(0)
    n = 20_000
    uniform = rng.uniform(3.0, 7.0, n)  # hard edges on both sides, neither at 0 nor 1
    shifted = rng.exponential(1.0, n) - 5.0  # piled at its minimum (below 0), a thinning tail above
    gaussian = rng.normal(2.0, 1.0, n)  # no edge
    zeros = rng.lognormal(0.0, 0.8, n)
    zeros[:100] = 0.0  # non-negative with 0.5 % exact zeros (no atom): bounded just below 0
    positive = rng.lognormal(0.0, 0.8, n)  # every value > 0, a Gaussian would spill: bounded one gap below 0
    atom = rng.uniform(3.0, 7.0, n)
    atom[:400] = 3.0  # 2 % of the rows on the minimum: a point mass, not an edge to bound
    share = rng.beta(2.0, 0.7, n)
    share[:10] = 1.0  # a share in [0, 1] piled at 1 with rows on it
    rows = np.c_[uniform, shifted, gaussian, zeros, positive, atom, share]
    names = ["uniform", "shifted", "gaussian", "zeros", "positive", "atom", "share"]
    found = suggest_bounds(rows, names, None)
    expected = {
        "uniform": [uniform.min() - _gap(uniform, "lower"), uniform.max() + _gap(uniform, "upper")],
        "shifted": [shifted.min() - _gap(shifted, "lower"), None],
        "zeros": [-_gap(zeros, "lower"), None],
        "positive": [-_gap(positive, "lower"), None],
        "atom": [None, atom.max() + _gap(atom, "upper")],
        "share": [None, 1.0 + _gap(share, "upper")],
    }
    assert set(found) == set(expected)  # not the Gaussian column
    for name, pair in expected.items():
        for got, want in zip(found[name], pair, strict=True):
            assert (got is None) == (want is None), (name, found[name], pair)
            if want is not None:
                assert got == pytest.approx(want, rel=1e-12, abs=1e-12), (name, found[name], pair)
    # every bound lies strictly beyond the rows: a bounded fit reads them all; where 0 or 1 is the edge, beyond it
    # too, so that a later row there (a min-max scaled column's ends, which a pilot may miss) is read as well
    for j, name in enumerate(names):
        lo, hi = found.get(name, [None, None])
        assert lo is None or rows[:, j].min() > lo
        assert hi is None or rows[:, j].max() < hi
    assert found["zeros"][0] < 0 and found["positive"][0] < 0 and found["share"][1] > 1
    # a gap of 1 % of the width: "just beyond" the uniform's edges
    assert 0.0 < _gap(uniform, "lower") < 0.1 and 0.0 < _gap(uniform, "upper") < 0.1


def _edged(n: int, seed: int) -> np.ndarray:
    """A column piled against both ends of [−2, 3] (a stretched Beta(0.7, 0.7)) and a Gaussian that follows it."""
    rng = np.random.default_rng(seed)
    u = rng.beta(0.7, 0.7, n)
    return np.c_[-2.0 + 5.0 * u, rng.normal(size=n) + u]


def _edged_log_density(x: np.ndarray) -> np.ndarray:
    u = (x[:, 0] + 2.0) / 5.0
    return sstats.beta(0.7, 0.7).logpdf(u) - np.log(5.0) + sstats.norm.logpdf(x[:, 1] - u)


def test_bounds_auto_at_hard_edges_brings_the_held_out_log_likelihood_to_the_true_densitys():
    X, held = _edged(10_000, 0), _edged(10_000, 1)
    truth = float(np.mean(_edged_log_density(held)))
    # S = 300: half the cost of the default 1 000, and the same picture (below)
    auto = tgpflow.GPTiltedDensity(random_state=0, bounds="auto", n_features=300).fit(X)
    free = tgpflow.GPTiltedDensity(random_state=0, bounds=None, n_features=300).fit(X)
    lo, hi = auto.bounds_.to_dict()["0"]
    assert lo == pytest.approx(X[:, 0].min() - _gap(X[:, 0], "lower"))
    assert hi == pytest.approx(X[:, 0].max() + _gap(X[:, 0], "upper"))
    assert "1" not in auto.bounds_.to_dict()
    ll_auto, ll_free = (float(np.mean(m.log_density(held, normalized=True))) for m in (auto, free))
    # measured: the bounded fit −2.991 nats/row, the free one −3.030, the true density −2.980 (at S = 1 000: −2.988
    # and −3.023)
    assert abs(ll_auto - truth) < 0.02, (ll_auto, truth)
    assert ll_auto > ll_free + 0.02, (ll_auto, ll_free)
    assert auto.fit_diagnostics_["mass_outside"] < free.fit_diagnostics_["mass_outside"]
    samples = auto.sample(5000, random_state=2)
    assert lo < samples[:, 0].min() and samples[:, 0].max() < hi
    # the samples' edge columns follow the truth's law (a two-sample KS against held-out rows)
    assert sstats.ks_2samp(samples[:, 0], held[:, 0]).pvalue > 1e-3


@pytest.mark.parametrize("n", [300, 3000, 20_000])
def test_tails_that_thin_out_raise_no_bound_at_any_sample_size(n):
    """No false alarm on 20 draws of four unbounded laws (Gaussian, Student t₄, a cubed Gaussian, logistic): the
    band floor (:data:`~tgpflow.features.edges.EDGE_MIN_ROWS`) keeps a few extreme rows from passing for a pile
    (without it, one tail of 20 at n = 300 did)."""
    for seed in range(20):
        rng = np.random.default_rng(seed)
        rows = np.c_[rng.normal(size=n), rng.standard_t(4, size=n), rng.normal(size=n) ** 3, rng.logistic(size=n)]
        assert suggest_bounds(rows, ["a", "b", "c", "d"], None) == {}, (n, seed)


def _beta_table(n: int, seed: int) -> np.ndarray:
    """A share in [0, 1] skewed towards 0 (Beta(0.6, 4)) beside a column that follows it."""
    rng = np.random.default_rng(seed)
    z = rng.standard_normal(n)
    share = rng.beta(0.6, 4.0, n)
    return np.c_[share, 0.5 * z + 2.0 * share + 0.3 * rng.standard_normal(n)]


def _kurtosis(v: np.ndarray) -> float:
    return float(np.mean((v - v.mean()) ** 4) / v.var() ** 2)


def test_a_bound_the_pilot_found_goes_on_linearly_past_its_largest_value_and_the_samples_keep_the_datas_spread(
        tmp_path):
    """bounds="auto" bounds the share at 0; its log ends at the pilot's largest value (tgpflow.features.edges.
    with_linear_tails). Against a Monte-Carlo sample of the table's own law, the samples' spread and kurtosis are
    the law's, where the same bound declared (the plain log, whose tail past the rows is an exponential in the
    data's units) draws values far beyond the largest row and a kurtosis in the hundreds; held out, both fits
    score the same (the fitting space is the same over the rows' range). A model file keeps the tail, and
    load(verify=True) re-solves to the same solution."""
    X, truth = _beta_table(400, 0), _beta_table(400_000, 100)
    auto = tgpflow.GPTiltedDensity(method="fd", random_state=0).fit(X)
    assert auto.bounds_.linear_from[0] == X[:, 0].max() and np.isnan(auto.bounds_.linear_from[1])
    declared = tgpflow.GPTiltedDensity(method="fd", random_state=0, bounds=auto.bounds_.to_pairs()).fit(X)
    assert declared.bounds_.linear_from is None
    ours, plain = auto.sample(100_000, random_state=2)[:, 0], declared.sample(100_000, random_state=2)[:, 0]
    assert ours.std() / truth[:, 0].std() == pytest.approx(1.0, abs=0.1)  # measured 0.996; the plain log's 1.126
    assert _kurtosis(ours) < 3 * _kurtosis(truth[:, 0])  # 11.2 against the law's 5.5
    assert _kurtosis(plain) > 100 and plain.max() > 5 * X[:, 0].max()  # 2000, and a draw at 18.6
    held = truth[:20_000]
    mean_log = [est.log_density(held, normalized=True).mean() for est in (auto, declared)]
    assert mean_log[0] == pytest.approx(mean_log[1], abs=0.01)  # measured 0.0824 and 0.0823 nats/row
    path = auto.save(tmp_path / "share.zarr")
    back = tgpflow.load(path, verify=True)
    np.testing.assert_array_equal(back.bounds_.linear_from, auto.bounds_.linear_from)
    np.testing.assert_array_equal(back.log_density(held[:500], normalized=True),
                                  auto.log_density(held[:500], normalized=True))


def _three_edges(n: int, seed: int) -> tuple[np.ndarray, list[str]]:
    """Three non-negative columns that each raise a bound at 0 (a Gaussian of their mean and spread puts more than
    1 % below it) and a column that follows the first: a share piled at 0 (Beta(0.6, 4)), two narrow clusters far
    from 0 (nothing to bound: the rule fires on the spread alone) and a Gaussian."""
    rng = np.random.default_rng(seed)
    share = rng.beta(0.6, 4.0, n)
    clusters = np.where(rng.random(n) < 0.5, rng.normal(0.6, 0.1, n), rng.normal(3.0, 0.1, n))
    return np.c_[share, clusters, 2.0 * share + 0.3 * rng.standard_normal(n)], ["share", "clusters", "follower"]


def test_bounds_auto_keeps_the_edge_the_open_model_leaks_past_and_leaves_a_bound_that_buys_nothing_open():
    """edges_worth_keeping: the share's open one-column mixture puts 3 % of its mass below the smallest row (a
    Gaussian of its mean and spread: 18 %), so its bound stays; the clusters' open mixture puts 0.02 % below theirs
    and the log scores no better held out, so theirs is dropped. The same rows fitted: ``bounds_`` holds the kept
    bound only, ``pilot_["edges"]`` and the fit's summary report both tests."""
    from tgpflow.features.edges import EDGE_GAIN_SE, EDGE_LEAK, EDGE_TEST_MIN_ROWS, edges_worth_keeping
    from tgpflow.models.fit_summaries import tgp_summary

    X, names = _three_edges(5000, 0)
    found = suggest_bounds(X, names, None)
    assert set(found) == {"share", "clusters"}
    kept, tests = edges_worth_keeping(X, names, found, seed=0)
    assert set(kept) == {"share"} and kept["share"] == found["share"]
    assert tests["share"]["kept"] and tests["share"]["leak"] > EDGE_LEAK
    clusters = tests["clusters"]
    assert not clusters["kept"] and clusters["leak"] < 0.1 * EDGE_LEAK
    assert clusters["gain"] < EDGE_GAIN_SE * clusters["gain_se"]
    # a pilot too small to tell keeps every bound the rule found
    assert edges_worth_keeping(X[:EDGE_TEST_MIN_ROWS - 1], names, found, seed=0) == (found, {})

    est = tgpflow.GPTiltedDensity(method="fd", random_state=0, n_features=64).fit(pd.DataFrame(X, columns=names))
    assert set(est.bounds_.to_dict()) == {"share"}
    assert {c: t["kept"] for c, t in est.pilot_["edges"].items()} == {"share": True, "clusters": False}
    summary = tgp_summary(est)
    assert summary["bounds"] == est.bounds_.to_dict() and "clusters" in summary["suggested_bounds"]


def _income(n: int, seed: int) -> np.ndarray:
    """A lognormal amount (tens of thousands) beside an independent standard Gaussian column."""
    rng = np.random.default_rng(seed)
    return np.c_[rng.lognormal(10.5, 0.6, n), rng.standard_normal(n)]


def _income_log_density(frame: pd.DataFrame) -> np.ndarray:
    """The true density of :func:`_income`'s rows, in closed form."""
    income = frame["income"].to_numpy()
    return (sstats.norm.logpdf(np.log(income), 10.5, 0.6) - np.log(income)
            + sstats.norm.logpdf(frame["score"].to_numpy()))


def test_edge_skewness_is_the_columns_skewness_away_from_the_bound_before_and_after_its_log():
    """Against closed forms: a lognormal's skewness is (e^σ² + 2)·√(e^σ² − 1), and its log is Gaussian (skewness 0,
    up to the gap's shift); mirrored below a bound above, a long tail away from it is positive too."""
    from tgpflow.features.edges import EDGE_SYMMETRIC, edge_skewness

    rng = np.random.default_rng(1)
    sigma = 0.4
    x = rng.lognormal(0.0, sigma, 200_000)
    closed = (np.exp(sigma**2) + 2.0) * np.sqrt(np.exp(sigma**2) - 1.0)  # 1.32
    before, after = edge_skewness(x, 0.0, None)
    assert before == pytest.approx(closed, rel=0.05)
    assert abs(after) < 0.02  # a Gaussian's sample skewness: se √(6/n) = 0.005
    mirrored = edge_skewness(10.0 - x, None, 10.0)
    assert mirrored == pytest.approx((before, after), abs=1e-9)
    # an exponential (skewness 2) is not made symmetric: its log overshoots into a left tail (−0.72)
    before, after = edge_skewness(rng.exponential(1.0, 200_000), -0.01, None)
    assert before == pytest.approx(2.0, rel=0.05) and after < -EDGE_SYMMETRIC


def test_bounds_auto_keeps_a_bound_whose_log_makes_a_skewed_column_symmetric_and_its_far_tail_follows_the_truth():
    """A lognormal amount: an open mixture leaks little below it (0.4 %) and the log scores no better in one column
    (+0.004 ± 0.005 nats/row), so the leak and gain tests leave it open; the skewness test keeps it (1.8 away from
    0, 0.24 after the log). It is the far tail that pays: on 2 000 rows fitted open (a mixture base, fixed γ and
    λ), the 20 largest of 20 000 held-out amounts get log densities 10 nats below the true density's on average
    (up to 24), where the fit with the bound is within 0.6 (1.7), and the bulk is no worse for it."""
    from tgpflow.features.edges import EDGE_GAIN_SE, EDGE_LEAK, EDGE_SKEW, EDGE_SYMMETRIC, edges_worth_keeping

    X = _income(3000, 0)
    names = ["income", "score"]
    found = suggest_bounds(X, names, None)
    assert set(found) == {"income"} and found["income"][1] is None
    kept, tests = edges_worth_keeping(X, names, found, seed=0)
    test = tests["income"]
    assert test["leak"] < EDGE_LEAK and test["gain"] < EDGE_GAIN_SE * test["gain_se"]  # the two tests see nothing
    assert test["skew"] > EDGE_SKEW and abs(test["skew_after"]) < EDGE_SYMMETRIC
    assert test["kept"] and kept == found

    X = pd.DataFrame(_income(2000, 0), columns=names)
    held = pd.DataFrame(_income(20_000, 1), columns=names)
    top = held.nlargest(20, "income")
    # the bound's effect, not selection's; a mixture base (an open mixture leaks less than one Gaussian: the leak
    # test sees nothing here either)
    fixed = dict(method="fd", random_state=0, scale=True, bandwidth=1.0, lam=1.0, base="mixture")
    bounded = tgpflow.GPTiltedDensity(**fixed).fit(X)
    opened = tgpflow.GPTiltedDensity(**fixed, bounds=None).fit(X)
    edge = bounded.pilot_["edges"]["income"]
    assert edge["kept"] and edge["leak"] < EDGE_LEAK and edge["gain"] < EDGE_GAIN_SE * edge["gain_se"]
    assert opened.bounds_ is None
    miss = {name: est.log_density(top, normalized=True) - _income_log_density(top)
            for name, est in (("bounded", bounded), ("open", opened))}
    assert abs(miss["bounded"].mean()) < 1.0 and np.abs(miss["bounded"]).max() < 3.0
    assert miss["open"].mean() < -5.0  # what the skewness test prevents
    # and the bulk is no worse for it: the held-out mean log density against the true density's
    bulk = {name: np.mean(est.log_density(held, normalized=True) - _income_log_density(held))
            for name, est in (("bounded", bounded), ("open", opened))}
    assert abs(bulk["bounded"]) < 0.02 and bulk["bounded"] > bulk["open"]


def test_the_skewness_test_does_not_keep_a_bound_the_held_out_values_put_clearly_against(monkeypatch):
    """The income column of the test above, whose bound the skewness test alone keeps, with the one-column gain
    replaced by one the held-out values put against the bound by more than two standard errors (glass, split 1:
    −0.126 ± 0.025 nats/row): the skewness test no longer keeps it; a gain within two standard errors below 0 (what
    the income column's own gain is, within noise) leaves it kept. Both sides of the line, then the line itself."""
    import tgpflow.features.edges as edges

    X = _income(3000, 0)
    names = ["income", "score"]
    found = suggest_bounds(X, names, None)
    for gain, kept in ((-0.126, False), (-0.04, True), (-2 * 0.025, True)):
        monkeypatch.setattr(edges, "edge_gain", lambda *a, g=gain: (g, 0.025))
        _, tests = edges.edges_worth_keeping(X, names, found, seed=0)
        test = tests["income"]
        assert test["skew"] > edges.EDGE_SKEW and abs(test["skew_after"]) < edges.EDGE_SYMMETRIC
        assert test["leak"] < edges.EDGE_LEAK and test["gain"] == gain
        assert test["kept"] is kept, (gain, test)


def test_a_pilot_of_a_hundred_rows_tests_its_bounds_and_a_smaller_one_keeps_them():
    """At and above :data:`EDGE_TEST_MIN_ROWS` rows (100) each bound the pilot shows is tested and its test
    recorded; below, every bound is kept untested. The same lognormal amount, 100 and 99 rows."""
    from tgpflow.features.edges import EDGE_TEST_MIN_ROWS, edges_worth_keeping

    assert EDGE_TEST_MIN_ROWS == 100
    names = ["income", "score"]
    for n, tested in ((100, True), (99, False)):
        X = _income(n, 3)
        found = suggest_bounds(X, names, None)
        assert "income" in found
        kept, tests = edges_worth_keeping(X, names, found, seed=0)
        assert ("income" in tests) is tested
        if not tested:
            assert kept == found
        else:
            assert kept == {k: v for k, v in found.items() if tests[k]["kept"]}
