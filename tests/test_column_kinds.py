"""Column kinds read off the pilot (tgpflow.io.column_kinds): lattices, binary flags, point masses, edges."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import tgpflow
from tgpflow.io.column_kinds import column_kinds, lattice_step


def test_the_kinds_of_a_real_looking_table():
    rng = np.random.default_rng(0)
    n = 50_000
    meter = np.round(rng.lognormal(0, 1, n), 3) * (rng.random(n) > 0.7)  # 70 % exact zeros, 3 decimals
    X = np.c_[rng.integers(0, 24, n), rng.integers(0, 2, n), meter, rng.normal(size=n),
              np.maximum(rng.normal(size=n), -1.0), 2 + 0.5 * rng.integers(0, 7, n)]
    kinds = column_kinds(X, ["hour", "flag", "meter", "z", "clipped", "half"])
    assert kinds["hour"]["kind"] == "lattice" and kinds["hour"]["lattice"]["step"] == 1.0
    assert kinds["hour"]["lattice"]["origin"] == 0.0 and kinds["hour"]["distinct"] == 24
    assert kinds["hour"]["lattice"]["step_over_spread"] == pytest.approx(1 / X[:, 0].std())
    assert kinds["flag"] == {"distinct": 2, "kind": "binary"}
    assert kinds["meter"]["kind"] == "lattice" and kinds["meter"]["lattice"]["step"] == 0.001
    share = float((meter == 0).mean())
    assert kinds["meter"]["point_masses"] == [{"value": 0.0, "share": share}]
    assert kinds["meter"]["edges"] == {"lower": {"value": 0.0, "share": share}}
    assert kinds["z"] == {"distinct": n, "kind": "continuous"}
    clipped = float((X[:, 4] == -1.0).mean())
    assert kinds["clipped"]["kind"] == "continuous" and kinds["clipped"]["edges"] == {
        "lower": {"value": -1.0, "share": clipped}}
    assert kinds["half"]["lattice"]["step"] == 0.5 and kinds["half"]["lattice"]["origin"] == 2.0
    assert set(kinds["half"]["edges"]) == {"lower", "upper"}


@pytest.mark.parametrize("values, step", [([0.0, 0.3, 0.5], 0.1), ([1.0, 4.0, 10.0], 3.0), ([-2.5, 0.0, 7.5], 2.5),
                                          ([0.1, 0.2, 0.3, 0.7], 0.1)])
def test_the_lattice_step_is_the_gcd_of_the_gaps(values, step):
    assert lattice_step(np.asarray(values)) == pytest.approx(step, rel=1e-9)


def test_continuous_values_with_a_few_ties_are_no_lattice():
    x = np.random.default_rng(1).normal(size=5000)
    x[:10] = x[10:20]
    assert lattice_step(np.unique(x)) is None
    assert column_kinds(x[:, None], ["x"])["x"]["kind"] == "continuous"


@pytest.mark.filterwarnings("ignore::tgpflow.errors.DiagnosticWarning")  # a smooth fit of integer codes: unhealthy
def test_a_fit_reports_the_kinds_and_its_model_file_keeps_them(tmp_path):
    rng = np.random.default_rng(2)
    frame = pd.DataFrame({"hour": rng.integers(0, 24, 4000).astype(float), "load": rng.gamma(3, 2, 4000)})
    est = tgpflow.GPTiltedDensity(method="fd", n_features=32, lam=1.0, bandwidth=1.0).fit(frame)
    assert est.pilot_["column_kinds"]["hour"]["kind"] == "lattice"
    assert est.pilot_["column_kinds"]["load"]["kind"] == "continuous"
    est.save(tmp_path / "m.zarr")
    assert tgpflow.load(tmp_path / "m.zarr").pilot_["column_kinds"] == est.pilot_["column_kinds"]


def test_values_recorded_to_three_decimals_stay_a_lattice_once_standardized():
    """A meter read to 0.001, zero on most rows and lognormal otherwise, standardized: the step is 0.001/sd, not a
    decimal, and the lattice holds every value to 10⁻⁴ of a cell (rounding that step to a decimal had lost it)."""
    rng = np.random.default_rng(3)
    raw = np.round(np.where(rng.random(60_000) < 0.6, 0.0, rng.lognormal(2.8, 0.5, 60_000)), 3)
    z = (raw - raw.mean()) / raw.std()
    kinds = column_kinds(z[:, None], ["meter"])
    assert kinds["meter"]["kind"] == "lattice"
    assert kinds["meter"]["lattice"]["step"] * raw.std() == pytest.approx(0.001, rel=1e-9)
    assert lattice_step(np.unique(np.round(raw, 3))) == 0.001  # the raw column's step is still the decimal


def test_a_small_pilot_finds_no_spike_in_a_single_row():
    """On 100 rows every value carries 1 % of them: a point mass or an edge needs MIN_COUNT rows as well."""
    x = np.random.default_rng(4).normal(size=(100, 1))
    assert column_kinds(x, ["x"])["x"] == {"distinct": 100, "kind": "continuous"}
    x[:6] = x.min() - 1.0  # six rows at a new minimum: an edge
    assert column_kinds(x, ["x"])["x"]["edges"] == {"lower": {"value": float(x.min()), "share": 0.06}}
