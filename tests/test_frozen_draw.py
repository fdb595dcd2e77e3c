"""A prepared estimator's plan (``StreamingMixin.plan``, :class:`~tgpflow.models.fit_plan.FitPlan`), saved, loaded
and put on a fresh estimator (``with_plan``), as a pipeline's store freezes it: the fresh estimator sums every chunk
exactly as the prepared one does, for every family, with what the GP-tilted pass also needs (bounds read off the
pilot, discrete columns, a mixture base, a held-out grid, NCFD's noise levels, a standardization)."""

from __future__ import annotations

import dataclasses

import dask
import dask.array as da
import numpy as np
import pandas as pd
import pytest

import tgpflow
from tgpflow.features.scaling import Scaling
from tgpflow.io.sources import as_source
from tgpflow.models.fit_plan import FitPlan
from tgpflow.models.gp_tilted import GPTiltedDensity
from tgpflow.models.kernel_score import ScoreEstimator
from tgpflow.models.nystrom_kef import NystromKEF
from tgpflow.models.root_sobolev import RootSobolevDensity
from tgpflow.stats.split import StatsBundle


def _table(n: int = 3000) -> np.ndarray:
    rng = np.random.default_rng(7)
    hour = rng.integers(0, 24, n).astype(np.float64)  # an integer code: a discrete column
    meter = rng.lognormal(0.0, 0.8, n)  # positive and piled towards 0: a bound read off the pilot
    return np.column_stack([hour, meter, rng.normal(size=n) + 0.1 * hour])


ESTIMATORS = {
    "fd, selecting, mixture base": lambda: GPTiltedDensity(n_features=32, pilot_rows=1500, normalizer_draws=2000),
    "ncfd, scaled": lambda: GPTiltedDensity(method="ncfd", n_features=32, lam=1.0, bandwidth=1.0, scale=True),
    "score": lambda: ScoreEstimator(n_basis=40, bandwidth=1.0, lam=1e-3),
    "nkef": lambda: NystromKEF(n_basis=40, bandwidth=1.0, lam=1e-3),
    "kde_sdo": lambda: RootSobolevDensity(method="kde_sdo", n_features=64),
}


def _sums(est, X: np.ndarray) -> dict[str, np.ndarray]:
    chunks = dask.compute(*est.chunk_tasks(as_source(da.from_array(X, chunks=(1000, X.shape[1])))), scheduler="sync")
    return {f"{i}.{k}": np.asarray(v) for i, c in enumerate(chunks) for k, v in c.to_arrays().items()}


@pytest.mark.parametrize("name", sorted(ESTIMATORS))
def test_a_restored_plan_sums_every_chunk_as_the_prepared_estimator(name, tmp_path):
    X = _table()
    prepared = ESTIMATORS[name]().prepare(X)
    plan = prepared.plan()
    assert plan.estimator == type(prepared).__name__ and plan.columns is None and plan.n_columns == X.shape[1]
    back = FitPlan.load(plan.save(tmp_path / "plan.npz"))  # as a store, or another job, reads it back
    assert back.fingerprint == plan.fingerprint != ""
    restored = ESTIMATORS[name]().with_plan(back)
    assert restored.n_features_in_ == X.shape[1] and not hasattr(restored, "feature_names_in_")
    if hasattr(prepared, "support_"):  # the box a solve's diagnostics measure mass outside of came with it
        assert restored.support_.to_dict() == prepared.support_.to_dict()
    expected, got = _sums(prepared, X), _sums(restored, X)
    assert sorted(got) == sorted(expected) and len(got) > 0
    for key, value in expected.items():
        np.testing.assert_array_equal(got[key], value, err_msg=key)
    if name.startswith("fd"):  # what the GP-tilted pass needs beside the features came back too
        assert prepared.discrete_ is not None and restored.discrete_.to_dict() == prepared.discrete_.to_dict()
        assert restored.bounds_.to_record() == prepared.bounds_.to_record()
        assert restored.base_mixture_ is not None and restored.heldout_grid_ is not None


def test_a_plan_keeps_the_columns_names_and_its_statistics_add_to_the_prepared_ones(tmp_path):
    # continuous columns: a discrete column's dequantization noise is keyed by each row's place in its source
    frame = pd.DataFrame(_table()[:, 1:], columns=["meter", "load"])
    prepared = ESTIMATORS["ncfd, scaled"]().prepare(frame)
    plan = FitPlan.load(prepared.plan().save(tmp_path / "plan.zarr"))
    assert plan.columns == ("meter", "load") and isinstance(plan.scaling, Scaling)
    elsewhere = ESTIMATORS["ncfd, scaled"]().with_plan(plan)
    assert list(elsewhere.feature_names_in_) == ["meter", "load"]
    # two jobs, each its half of the rows: their sum is the statistics of all rows with the prepared draw
    total = prepared.accumulate(frame.iloc[:1500]) + elsewhere.accumulate(frame.iloc[1500:])
    whole = ESTIMATORS["ncfd, scaled"]().with_plan(plan).accumulate(frame)
    for key, value in whole.to_arrays().items():
        np.testing.assert_allclose(total.to_arrays()[key], value, rtol=1e-12, atol=1e-12, err_msg=key)


@pytest.mark.filterwarnings("ignore::tgpflow.errors.DiagnosticWarning")
@pytest.mark.parametrize("make", [
    lambda: GPTiltedDensity(n_features=32, pilot_rows=1500, normalizer_draws=2000),
    lambda: ScoreEstimator(n_basis=30, lam="auto", bandwidth=[0.5, 1.0]),
], ids=["fd selecting", "score selecting"])
def test_prepare_then_accumulate_with_the_plan_then_solve_is_the_fit(make):
    """A selection pending (λ = "auto", a bandwidth grid): statistics summed for a plan are split into training and
    held-out rows as a first fit's are, so that solving them selects as the fit did."""
    X = _table()
    fitted = make().fit(X)
    stats = make().with_plan(make().prepare(X).plan()).accumulate(X)
    assert isinstance(stats, StatsBundle)
    solved = make().with_plan(make().prepare(X).plan()).fit_from_stats(stats)
    assert solved.selection_["chosen"] == fitted.selection_["chosen"]
    rows = _table(200)
    np.testing.assert_allclose(solved.grad_log_density(rows), fitted.grad_log_density(rows), rtol=1e-10, atol=1e-12)
    # chunk_tasks split by the same rule: over the same rows (keyed by their place in the source) the same sums
    source = as_source(da.from_array(X, chunks=(1000, X.shape[1])))
    planned = make().with_plan(make().prepare(X).plan())
    by_tasks = sum(dask.compute(*planned.chunk_tasks(source), scheduler="sync"))
    by_accumulate = make().with_plan(make().prepare(X).plan()).accumulate(source)
    assert sorted(by_tasks) == sorted(by_accumulate)
    for key in by_tasks:
        for name, value in by_accumulate[key].to_arrays().items():
            np.testing.assert_allclose(by_tasks[key].to_arrays()[name], value, rtol=1e-12, atol=1e-12)
    # a re-prepared fitted estimator starts afresh: its statistics are split again
    assert isinstance(fitted.prepare(X).accumulate(X), StatsBundle) and not hasattr(fitted, "selection_")


@pytest.mark.filterwarnings("ignore::tgpflow.errors.DiagnosticWarning")
def test_a_plan_is_refused_by_another_estimator_and_before_a_draw(tmp_path):
    plan = ESTIMATORS["score"]().prepare(_table()).plan()
    with pytest.raises(ValueError, match="made by a ScoreEstimator, not a NystromKEF"):
        NystromKEF().with_plan(plan)
    with pytest.raises(ValueError, match=r"other values of \['n_basis'\]"):  # its statistics would not add up
        ScoreEstimator(n_basis=41, bandwidth=1.0, lam=1e-3).with_plan(plan)
    ScoreEstimator(**plan.params).with_plan(plan)  # the plan's own parameters are accepted
    loaded = tgpflow.load(GPTiltedDensity(n_features=16, normalizer_draws=2000).fit(_table()).save(tmp_path / "m"))
    with pytest.raises(ValueError, match="no held-out grid"):  # a file keeps no grid: its plan could not select
        loaded.plan()
    with pytest.raises(ValueError, match="call prepare"):
        GPTiltedDensity().plan()
    with pytest.raises(TypeError, match="FitPlan"):
        GPTiltedDensity().with_plan(({}, {}))


def test_a_restored_plan_without_its_standardization_sums_other_rows():
    """The check above can fail: restoring the scaled NCFD draw without its scaling changes the sums."""
    X = _table()
    prepared = ESTIMATORS["ncfd, scaled"]().prepare(X)
    assert isinstance(prepared.scaling_, Scaling)
    restored = ESTIMATORS["ncfd, scaled"]().with_plan(dataclasses.replace(prepared.plan(), scaling=None))
    expected, got = _sums(prepared, X), _sums(restored, X)
    assert any(not np.array_equal(got[k], expected[k]) for k in expected)


#: The private state a fitted estimator keeps: its Fitted value, and the θ its diagnostics measured (GP-tilted).
#: A pilot sample lives for the call that reads it (tgpflow.io.pilot.LazyPilot), never on the estimator.
FIT_STATE = {"_fitted", "_diag_theta"}


@pytest.mark.filterwarnings("ignore::tgpflow.errors.DiagnosticWarning")  # the fits' quality is not the point here
@pytest.mark.parametrize("name", sorted(ESTIMATORS))
def test_no_call_leaves_scratch_state_on_the_estimator(name):
    X = _table()
    private = lambda est: {k for k in vars(est) if k.startswith("_")}  # noqa: E731
    assert private(ESTIMATORS[name]().prepare(X)) == set()
    est = ESTIMATORS[name]().fit(X)
    assert private(est) <= FIT_STATE and "_fitted" in private(est)
    est.partial_fit(X[:500])  # adds the new rows' statistics
    assert private(est) <= FIT_STATE and est.n_samples_seen_ == X.shape[0] + 500
