"""Drift of each new partition (tgpflow.pipeline.drift, drift_sums, drift_step): the binned tests against scipy, their
false-alarm rate and power measured by simulation, and the run's records checked against sums recomputed from the
rows."""

import math

import numpy as np
import pytest
from scipy import stats

from tgpflow.pipeline.drift import LoglikGap, binned_ks, drift_verdict, gap_history, gap_z
from tgpflow.pipeline.drift_sums import (BINS, CUTS, DIRECTIONS, DriftFrame, DriftSums, LoglikModel, LoglikSums,
                                         chunk_sums, floored)

COLUMNS = list("abcde")
MIX = np.array([[1.0, 0.5, 0, 0, 0], [0, 1, 0, 0, 0], [0, 0, 1, 0, 0], [0, 0, 0, 1, 0], [0, 0, 0, 0, 1]])


def _day(rng, n=2000, shift=0.0, column=2):
    """Five columns, a and b correlated; ``shift`` standard deviations added to one column."""
    X = rng.normal(size=(n, 5)) @ MIX
    X[:, column] += shift * math.sqrt((MIX[:, column] ** 2).sum())
    return X


def _exact_model():
    """The stream's own normalised log density: a Gaussian with covariance MIXᵀMIX (the z test's null is then
    exactly the stream)."""
    cov = MIX.T @ MIX
    dist = stats.multivariate_normal(np.zeros(5), cov)
    return LoglikModel("m", "v1", dist.logpdf, 0.0, -math.inf)


def test_binned_ks_equals_scipys_two_sample_ks_on_a_lattice():
    """With fewer distinct values than bins every value is a cut: the binned distance is the exact one."""
    rng = np.random.default_rng(0)
    a, b = rng.integers(0, 20, 3000).astype(float), rng.integers(0, 21, 5000).astype(float)
    frame = DriftFrame.from_rows(np.c_[b, b], ["x", "y"], 0)
    ca, cb = chunk_sums(np.c_[a, a], frame, ()), chunk_sums(np.c_[b, b], frame, ())
    dist, p = binned_ks(ca.column_counts, cb.column_counts)
    exact = stats.ks_2samp(a, b, method="asymp")
    assert dist[0] == pytest.approx(exact.statistic, abs=1e-12)
    assert p[0] == pytest.approx(exact.pvalue, rel=0.3)  # Stephens' correction against scipy's own asymptotics


def test_binned_ks_is_at_most_the_exact_distance_on_continuous_rows():
    rng = np.random.default_rng(1)
    a, b = rng.normal(size=4000), rng.normal(0.1, 1.1, size=6000)
    frame = DriftFrame.from_rows(np.c_[b], ["x"], 0)
    dist, _ = binned_ks(chunk_sums(np.c_[a], frame, ()).column_counts, chunk_sums(np.c_[b], frame, ()).column_counts)
    exact = stats.ks_2samp(a, b).statistic
    assert dist[0] <= exact + 1e-12 and dist[0] >= 0.9 * exact  # 64 quantile bins lose little


def test_chunk_sums_add_up_and_count_every_row_once():
    rng = np.random.default_rng(2)
    X = _day(rng, 3000)
    frame = DriftFrame.from_rows(X[:1000], COLUMNS, 3)
    model = _exact_model()
    whole = chunk_sums(X, frame, (model,))
    halves = chunk_sums(X[:1700], frame, (model,)) + chunk_sums(X[1700:], frame, (model,))
    np.testing.assert_array_equal(whole.column_counts, halves.column_counts)
    np.testing.assert_array_equal(whole.projection_counts, halves.projection_counts)
    assert whole.column_counts.shape == (5, CUTS + 1) and whole.projection_counts.shape == (DIRECTIONS, CUTS + 1)
    assert CUTS == BINS + 1  # the pilot's smallest value, BINS − 1 quantiles, the float after its largest
    assert (whole.column_counts.sum(axis=1) == 3000).all() and (whole.projection_counts.sum(axis=1) == 3000).all()
    values = stats.multivariate_normal(np.zeros(5), MIX.T @ MIX).logpdf(X)
    assert halves.loglik["m"].mean == pytest.approx(values.mean(), rel=1e-12)
    assert halves.loglik["m"].var == pytest.approx(values.var(ddof=1), rel=1e-9)
    # each column's bins against numpy's own binning of the rows at the frame's cuts
    for j in range(5):
        cuts = frame.column_cuts[j][np.isfinite(frame.column_cuts[j])]
        own = np.histogram(X[:, j], np.r_[-np.inf, cuts, np.inf])[0]
        np.testing.assert_array_equal(whole.column_counts[j, :own.size], own)
    back = DriftSums.from_arrays(*whole.to_arrays())
    np.testing.assert_array_equal(back.column_counts, whole.column_counts)
    assert LoglikSums.from_dict(whole.loglik["m"].to_dict()).var == pytest.approx(whole.loglik["m"].var, rel=1e-12)


def _stream(seed, days, shift_day=None, shift=0.3, n=2000, window=14, alpha=0.01):
    """Verdicts of a simulated stream as a run computes them: the reference grows by each day; each day's gap is its
    mean log-likelihood under the exact model less the model's mean on that day's pilot of the stream (a run draws
    its own; 4000 rows here, 20 000 in a run: the gap's standard error counts them), against the last ``window``
    unflagged days' gaps."""
    rng = np.random.default_rng(seed)
    first = _day(rng, n)
    frame = DriftFrame.from_rows(first, COLUMNS, seed)
    model = _exact_model()
    reference = chunk_sums(first, frame, ())
    records, verdicts = {}, []
    for t in range(1, days):
        pilot = chunk_sums(_day(rng, 4000), frame, (model,)).loglik["m"]
        part = chunk_sums(_day(rng, n, shift if shift_day is not None and t >= shift_day else 0.0), frame, (model,))
        gap = LoglikGap.of(part.loglik["m"], pilot)
        v = drift_verdict(part, reference, COLUMNS, alpha, model="m", gap=gap,
                          history=gap_history(records, "m", window, "g"))
        entry = {"gap": gap.gap, "gap_se": gap.se, "generation": "g"}
        records[f"d{t:03d}"] = {"run": t, "drift": {"loglik": {"m": entry}, "verdict": v}}
        verdicts.append(v)
        reference = reference + DriftSums(part.rows, part.column_counts, part.projection_counts, part.column_sum,
                                          part.column_sumsq)
    return verdicts


def test_stationary_streams_flag_at_most_alpha_of_their_partitions():
    """30 streams of 21 days (600 tested partitions) of one distribution: the verdict's false-alarm rate is at
    most alpha, and z is standard normal (its one-sided rate at alpha, its spread)."""
    verdicts = [v for seed in range(30) for v in _stream(seed, 21)]
    assert len(verdicts) == 600
    flagged = sum(v["drifted"] for v in verdicts)
    assert flagged <= 0.01 * len(verdicts), flagged
    z = np.array([v["z"] for v in verdicts if v["z"] is not None])
    # z on every day but the first of each stream, which has no earlier gap (nor a day whose earlier days were all
    # flagged: a flagged day's gap stays out of the history)
    assert 570 - flagged <= z.size <= 570
    assert abs(z.mean()) < 0.15 and 0.85 < z.std() < 1.15, (z.mean(), z.std())
    assert (z < stats.norm.ppf(0.01)).mean() <= 0.02


def test_a_shift_of_a_third_of_a_standard_deviation_in_one_column_is_flagged_and_named():
    """40 seeded streams (100 in benchmarks/drift_detection.py), 20 stationary days, then column c shifted by 0.3 sd:
    day 21 is flagged and c is the column named first, in at least 95 % of them."""
    flagged = named = 0
    for seed in range(40):
        day21 = _stream(1000 + seed, 21, shift_day=20)[-1]
        flagged += day21["drifted"]
        named += day21["columns"][:1] == ["c"] and day21["moved_most"] == "c"
    assert flagged >= 38 and named >= 38, (flagged, named)


def test_a_change_of_correlation_alone_is_caught_by_the_sliced_test():
    """Same marginals, other joint law: the columns' test sees nothing, the projections do."""
    rng = np.random.default_rng(5)
    X = rng.normal(size=(20_000, 2))
    frame = DriftFrame.from_rows(X, ["x", "y"], 0)
    reference = chunk_sums(X, frame, ())
    z = rng.normal(size=(3000, 2))
    rotated = np.c_[z[:, 0], 0.8 * z[:, 0] + 0.6 * z[:, 1]]  # unit variances, correlation 0.8
    v = drift_verdict(chunk_sums(rotated, frame, ()), reference, ["x", "y"], 0.01)
    assert v["drifted"] and v["tests"]["columns"] > 0.01 and v["tests"]["sliced"] < 1e-6


def test_gap_z_reads_the_spread_of_earlier_gaps_once_there_are_enough():
    """Gaps whose day-to-day spread (0.2) dwarfs their standard errors (0.01): with fewer than five earlier gaps z is
    read against the standard errors, from five on against the spread, with Student's t."""
    rng = np.random.default_rng(3)
    history = [LoglikGap(float(g), 0.01) for g in rng.normal(0.0, 0.2, 10)]
    new = LoglikGap(-0.3, 0.01)
    few, _ = gap_z(new, history[:4])
    many, p = gap_z(new, history)
    gaps = np.array([h.gap for h in history])
    assert few == pytest.approx((-0.3 - gaps[:4].mean()) / math.sqrt(0.01**2 * (1 + 1 / 4)))
    assert many == pytest.approx((-0.3 - gaps.mean()) / math.sqrt(gaps.var(ddof=1) * (1 + 1 / 10)))
    assert p == pytest.approx(stats.t.cdf(many, 9)) and abs(many) < 3 < abs(few)
    assert gap_z(new, []) is None and gap_z(None, history) is None


def test_values_beyond_the_pilots_range_and_a_constant_column_that_moves_are_seen():
    """A column constant at 5 in the reference reads 7 in the partition; a flag {0, 1} takes the value 2: both are
    beyond the pilot's range, in bins of their own, so the column test sees them; a constant column's shift is
    undefined (None) and its change is given in its units."""
    rng = np.random.default_rng(6)
    X = np.c_[np.full(5000, 5.0), (rng.random(5000) < 0.3).astype(float), rng.normal(size=5000)]
    frame = DriftFrame.from_rows(X, ["const", "flag", "x"], 0)
    reference = chunk_sums(X, frame, ())
    Y = np.c_[np.full(2000, 7.0), np.where(rng.random(2000) < 0.3, 2.0, 0.0), rng.normal(size=2000)]
    v = drift_verdict(chunk_sums(Y, frame, ()), reference, ["const", "flag", "x"], 0.01)
    assert v["drifted"] and set(v["columns"]) == {"const", "flag"} and "x" not in v["columns"]
    assert v["column_shift"]["const"]["ks"] == 1.0 and v["column_shift"]["const"]["shift"] is None
    assert v["column_shift"]["const"]["change"] == pytest.approx(2.0)
    assert v["column_shift"]["flag"]["ks"] == pytest.approx(0.3, abs=0.03)  # the share of rows at 2


def test_rows_without_a_density_count_at_the_floor_and_empty_sums_stay_strict_json():
    values = np.array([-1.0, -50.0, -np.inf, np.nan, -2.0])
    kept, outside = floored(values, -10.0)
    np.testing.assert_array_equal(kept, [-1.0, -10.0, -10.0, -10.0, -2.0])
    assert outside == 2
    kept, outside = floored(values, -np.inf)  # a version written before floors: rows without a density left out
    np.testing.assert_array_equal(kept, [-1.0, -50.0, -2.0])
    empty = LoglikSums(0, 0.0, 0.0, 0).to_dict()
    assert empty["mean"] is None and empty["var"] is None and empty["anomaly_rate"] is None
    import json

    json.dumps(empty, allow_nan=False)


def test_a_rare_flag_gets_its_own_bin():
    """A flag that is 1 on 1 % of the pilot's rows (below one quantile bin) and on half of a partition's: the column
    test sees it and names it."""
    rng = np.random.default_rng(7)
    X = np.c_[(rng.random(20_000) < 0.01).astype(float), rng.normal(size=20_000)]
    frame = DriftFrame.from_rows(X, ["flag", "x"], 0)
    Y = np.c_[(rng.random(2000) < 0.5).astype(float), rng.normal(size=2000)]
    v = drift_verdict(chunk_sums(Y, frame, ()), chunk_sums(X, frame, ()), ["flag", "x"], 0.01)
    assert v["columns"] == ["flag"] and v["column_shift"]["flag"]["ks"] == pytest.approx(0.49, abs=0.03)


def test_the_log_likelihood_of_a_large_partition_is_read_on_every_kth_row_and_its_bins_on_all():
    rng = np.random.default_rng(8)
    X = _day(rng, 3001)
    frame = DriftFrame.from_rows(X, COLUMNS, 0)
    model = _exact_model()
    every, third = chunk_sums(X, frame, (model,)), chunk_sums(X, frame, (model,), stride=3)
    np.testing.assert_array_equal(every.column_counts, third.column_counts)  # the bins count every row
    assert third.loglik["m"].n == 1001 and third.loglik["m"].rows == 1001
    assert third.loglik["m"].mean == pytest.approx(model.log_density(X[::3]).mean(), rel=1e-12)
