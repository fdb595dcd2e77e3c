"""One anomaly threshold (issue 16): the estimators, ``tgpflow score`` and a pipeline's scores learn it and
flag rows by the same definition (tgpflow.models.anomaly)."""

import dask.array as da
import numpy as np
import pandas as pd
import pytest
import yaml

import tgpflow
from tests.conftest import write_parquet
from tgpflow.errors import DiagnosticWarning
from tgpflow.models.anomaly import anomaly_threshold, is_anomalous, threshold_rows
from tgpflow.pipeline.runner import run_pipeline
from tgpflow.pipeline.spec import load_spec
from tgpflow.pipeline.versions import ModelVersions


def test_the_threshold_flags_the_quantile_and_non_finite_densities_first():
    logp = np.array([-1.0, -2.0, -3.0, -4.0, -np.inf, np.nan, -5.0, -6.0, -7.0, -8.0])
    t = anomaly_threshold(logp, 0.3)
    # scores −log p: 1…8 and two non-finite rows counted as +inf; the 0.7 quantile ("higher") is 8
    assert t == 8.0
    assert is_anomalous(logp, t).tolist() == [False] * 4 + [True, True] + [False] * 4
    # as many rows of zero (or undefined) density as the quantile: all flagged, and the model is said wrong
    with pytest.warns(DiagnosticWarning, match=r"20\.00% of the 10 rows .* zero or undefined density"):
        t = anomaly_threshold(logp, 0.2)
    assert t == 8.0 and is_anomalous(logp, t).tolist() == [False] * 4 + [True, True] + [False] * 4
    with pytest.warns(DiagnosticWarning, match="100.00%"):
        t = anomaly_threshold(np.full(3, -np.inf), 0.5)
    assert t == -np.inf and is_anomalous(np.array([-np.inf, 0.0, 5.0]), t).all()
    assert anomaly_threshold(-np.arange(1000.0), 0.05) == 950.0
    assert is_anomalous(-np.arange(1000.0), 950.0).sum() == 49  # strictly above: about 5 % of the rows
    with pytest.raises(ValueError, match="no rows"):
        anomaly_threshold(np.empty(0), 0.1)


def test_an_estimator_learns_it_on_its_training_rows(rng):
    X = rng.normal(size=(2000, 2))
    est = tgpflow.GPTiltedDensity(method="fd", n_features=32, lam=0.5, bandwidth=1.0, threshold_quantile=0.05,
                                  pilot_rows=5000).fit(X)  # the pilot holds every row
    assert est.anomaly_threshold_ == anomaly_threshold(est.log_density(X), 0.05)
    np.testing.assert_array_equal(est.is_anomaly(X), is_anomalous(est.log_density(X), est.anomaly_threshold_))


def test_a_large_pilot_learns_the_threshold_on_a_seeded_sample_that_flags_the_quantile_of_all_its_rows(rng):
    """Beyond max(10 000, 100/q) pilot rows the fit scores a seeded sample of them (a discrete column's row is a
    256-point cell integral): the threshold is that sample's quantile, the same on every fit, and it flags the
    quantile of all the pilot rows to within the sampling error of about 100 rows beyond it."""
    X = rng.normal(size=(40_000, 2))
    assert threshold_rows(X, 0.01).shape == (10_000, 2) and threshold_rows(X, 0.001).shape == (40_000, 2)
    assert threshold_rows(X[:9_000], 0.01).shape == (9_000, 2)  # a smaller pilot: all its rows
    sample = threshold_rows(X, 0.02)
    np.testing.assert_array_equal(sample, threshold_rows(X, 0.02))  # a fixed seed
    assert len({tuple(r) for r in sample}) == 10_000 and np.isin(sample[:, 0], X[:, 0]).all()  # distinct rows of X
    est = tgpflow.GPTiltedDensity(method="fd", n_features=32, lam=0.5, bandwidth=1.0, threshold_quantile=0.02,
                                  pilot_rows=50_000).fit(X)  # the pilot holds every row
    assert est.anomaly_threshold_ == anomaly_threshold(est.log_density(sample), 0.02)
    flagged = est.is_anomaly(X).mean()
    assert abs(flagged - 0.02) < 4 * np.sqrt(0.02 * 0.98 / 10_000)  # the sample's binomial error, 4 standard errors


def test_a_threshold_calibrated_on_normal_rows_flags_their_share_of_new_ones(rng):
    X = rng.normal(size=(4000, 2))
    kef = tgpflow.NystromKEF(n_basis=40, base="gaussian").fit(X)  # its fit learns no threshold
    with pytest.raises(AttributeError, match="no anomaly threshold"):
        kef.is_anomaly(X[:5])
    with pytest.raises(ValueError, match="give quantile"):
        kef.calibrate_threshold(X)
    clean, new = X[:2000], rng.normal(size=(20000, 2))
    kef.calibrate_threshold(clean, 0.02)
    scores = -kef.log_density(clean)
    assert kef.anomaly_threshold_ == np.quantile(scores, 0.98, method="higher")  # independent of the library's rule
    assert 0.01 < kef.is_anomaly(new).mean() < 0.03  # rows of the same law: about 2 % flagged
    gp = tgpflow.GPTiltedDensity(method="fd", n_features=32, lam=0.5, bandwidth=1.0).fit(X)
    lazy = gp.calibrate_threshold(da.from_array(clean, chunks=(500, 2)), 0.1).anomaly_threshold_  # a lazy source
    assert lazy == gp.calibrate_threshold(clean, 0.1).anomaly_threshold_
    with pytest.raises(ValueError, match=r"in \(0, 1\)"):
        gp.calibrate_threshold(clean, 1.5)


def test_a_pipeline_learns_and_applies_the_same_threshold(tmp_path, rng):
    (tmp_path / "data").mkdir()
    X = rng.normal(size=(1200, 2)) * [1.0, 3.0]
    write_parquet(tmp_path / "data" / "p0.parquet", X, ["a", "b"])
    spec = {"name": "t", "source": {"path": str(tmp_path / "data" / "*.parquet")},
            "models": [{"name": "fd", "estimator": "GPTiltedDensity",
                        "params": {"method": "fd", "n_features": 32, "lam": 0.5, "bandwidth": 1.0}}],
            "outputs": {"store": str(tmp_path / "store"), "models": str(tmp_path / "models"),
                        "scores": {"path": str(tmp_path / "scores"), "threshold_quantile": 0.05}}}
    (tmp_path / "spec.yaml").write_text(yaml.safe_dump(spec))
    result = run_pipeline(load_spec(tmp_path / "spec.yaml"))
    info = ModelVersions(tmp_path / "models" / "fd").info()
    est = tgpflow.load(tmp_path / "models" / "fd")
    logp = est.log_density(pd.DataFrame(X, columns=["a", "b"]))  # no preprocessing: raw rows; the pilot is all rows
    assert info["anomaly_threshold"] == anomaly_threshold(logp, 0.05)
    scores = pd.read_parquet(result["scored"][0])  # normalised: log p − log Z, the threshold moved with it
    assert info["log_normalizer"] == est.normalizer_.log_z
    np.testing.assert_array_equal(scores["anomaly"], is_anomalous(scores["log_density"].to_numpy(),
                                                                  info["anomaly_threshold"] + info["log_normalizer"]))
    np.testing.assert_array_equal(scores["anomaly"], is_anomalous(logp, info["anomaly_threshold"]))
    assert 0.03 < scores["anomaly"].mean() <= 0.05


def test_a_run_info_from_before_threshold_of_keeps_its_rule(rng):
    """A version published before run infos said what their threshold is of (no ``threshold_of``) holds a
    log-density quantile t and flagged log p < t: its scores flag the same rows today, and a current info's
    threshold on −log p is taken as it is."""
    from tgpflow.models.anomaly import score_columns
    from tgpflow.pipeline.journal import _threshold

    logp = np.concatenate([rng.normal(size=500), [-np.inf, np.nan]])
    t = float(np.quantile(logp[:500], 0.05))
    legacy = score_columns(logp, _threshold({"anomaly_threshold": t}))
    np.testing.assert_array_equal(legacy["anomaly"], ~(logp >= t))  # log p < t, and (as today) NaN flagged
    assert legacy["anomaly"][:500].sum() == (logp[:500] < t).sum() > 0
    current = score_columns(logp, _threshold({"anomaly_threshold": -t, "threshold_of": "anomaly_score"}))
    np.testing.assert_array_equal(current["anomaly"], legacy["anomaly"])


def test_a_fit_with_zero_density_at_its_own_rows_flags_them_and_says_so(gaussian_mix):
    """KDE-RFF at S = 128 on 100 rows: its kernel sum is ≤ 0 at a few of its own rows (zero density). With a
    threshold at +inf none of them was flagged; now each is, and the fit warns."""
    X = gaussian_mix[:100]
    with pytest.warns(DiagnosticWarning, match="zero or undefined density"):
        est = tgpflow.GPTiltedDensity(method="kde_rff", n_features=128, bandwidth=0.5, threshold_quantile=0.01,
                                      pilot_rows=1000, random_state=0).fit(X)
    zero = ~np.isfinite(est.log_density(X))
    assert zero.mean() >= 0.01  # more rows of zero density than the quantile: the case in question
    assert np.isfinite(est.anomaly_threshold_)
    flags = est.is_anomaly(X)
    assert flags[zero].all() and flags.sum() == zero.sum()  # exactly they are above the largest finite score
