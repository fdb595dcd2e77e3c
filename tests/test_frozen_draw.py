"""The draw a pipeline's store freezes (``StreamingMixin.frozen_draw``) and restores on a fresh estimator
(``restore_frozen_draw``): the restored estimator sums every chunk exactly as the prepared one does, for every
family, with what the GP-tilted pass also needs (bounds read off the pilot, discrete columns, a mixture base, a
held-out grid, NCFD's noise levels, a standardization)."""

from __future__ import annotations

import dask
import dask.array as da
import numpy as np
import pytest

from tgpflow.features.scaling import Scaling
from tgpflow.io.sources import as_source
from tgpflow.models.gp_tilted import GPTiltedDensity
from tgpflow.models.kernel_score import ScoreEstimator
from tgpflow.models.nystrom_kef import NystromKEF
from tgpflow.models.root_sobolev import RootSobolevDensity


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
def test_a_restored_draw_sums_every_chunk_as_the_prepared_estimator(name):
    X = _table()
    prepared = ESTIMATORS[name]().prepare(X)
    arrays, meta = prepared.frozen_draw()
    stored = {k: np.array(v, copy=True) for k, v in arrays.items()}  # as a store reads them back
    columns = [f"x{j}" for j in range(X.shape[1])]
    restored = ESTIMATORS[name]().restore_frozen_draw(stored, meta, columns, getattr(prepared, "scaling_", None))
    assert list(restored.feature_names_in_) == columns and restored.n_features_in_ == X.shape[1]
    expected, got = _sums(prepared, X), _sums(restored, X)
    assert sorted(got) == sorted(expected) and len(got) > 0
    for key, value in expected.items():
        np.testing.assert_array_equal(got[key], value, err_msg=key)
    if name.startswith("fd"):  # what the GP-tilted pass needs beside the features came back too
        assert prepared.discrete_ is not None and restored.discrete_.to_dict() == prepared.discrete_.to_dict()
        assert restored.bounds_.to_record() == prepared.bounds_.to_record()
        assert restored.base_mixture_ is not None and restored.heldout_grid_ is not None


def test_a_restored_draw_without_its_standardization_sums_other_rows():
    """The check above can fail: restoring the scaled NCFD draw without its scaling changes the sums."""
    X = _table()
    prepared = ESTIMATORS["ncfd, scaled"]().prepare(X)
    assert isinstance(prepared.scaling_, Scaling)
    restored = ESTIMATORS["ncfd, scaled"]().restore_frozen_draw(*prepared.frozen_draw(), ["a", "b", "c"], None)
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
