"""The evaluations written once for every family (tgpflow.models.evaluation): the same methods, the same answers
as the family's Fitted value, the same refusals."""

from __future__ import annotations

import dask.array as da
import numpy as np
import pytest

from tgpflow.models.gp_tilted import GPTiltedDensity
from tgpflow.models.kernel_score import ScoreEstimator
from tgpflow.models.nystrom_kef import NystromKEF
from tgpflow.models.root_sobolev import RootSobolevDensity


def _rows(n: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).normal(size=(n, 2)) * [1.0, 0.5]


DENSITIES = {
    "fd": lambda: GPTiltedDensity(n_features=32, lam=1.0, bandwidth=1.0, normalizer_draws=4000),
    "ncfd": lambda: GPTiltedDensity(method="ncfd", n_features=32, lam=1.0, bandwidth=1.0, normalizer_draws=4000),
    "nkef": lambda: NystromKEF(n_basis=30, bandwidth=1.0, base="gaussian"),
    "rsr": lambda: RootSobolevDensity(n_features=128, max_iter=5),
}


@pytest.mark.filterwarnings("ignore::tgpflow.errors.DiagnosticWarning")
@pytest.mark.parametrize("name", sorted(DENSITIES))
def test_every_density_evaluates_through_its_fitted_value(name):
    X, Y = _rows(2000, 0), _rows(300, 1)
    est = DENSITIES[name]().fit(X)
    fitted = est.fitted()
    np.testing.assert_allclose(est.log_density(Y), fitted.log_density(Y), rtol=1e-12)
    np.testing.assert_allclose(est.score_samples(Y), fitted.log_density(Y), rtol=1e-12)
    assert est.score(Y) == pytest.approx(float(np.sum(fitted.log_density(Y))), rel=1e-12)
    np.testing.assert_allclose(est.grad_log_density(Y), fitted.grad_log_density(Y), rtol=1e-12)
    lazy = est.log_density(da.from_array(Y, chunks=(100, 2)))  # lazy input: a dask array of the same values
    assert isinstance(lazy, da.Array)
    np.testing.assert_allclose(lazy.compute(), fitted.log_density(Y), rtol=1e-12)
    if getattr(est, "normalizer_", None) is not None:
        np.testing.assert_allclose(est.log_density(Y, normalized=True),
                                   fitted.log_density(Y) - est.normalizer_.log_z, rtol=1e-12)
    else:
        with pytest.raises(ValueError, match="no normaliser"):
            est.log_density(Y, normalized=True)
    if name == "ncfd":  # a noise level: the model at σ, normalised by its own estimate
        at = est.fitted(0.3).log_density(Y)
        np.testing.assert_allclose(est.log_density(Y, sigma=0.3), at, rtol=1e-12)
        np.testing.assert_allclose(est.log_density(Y, sigma=0.3, normalized=True),
                                   at - est.log_normalizer(sigma=0.3).log_z, rtol=1e-12)
    else:
        with pytest.raises(ValueError, match="sigma"):
            est.log_density(Y, sigma=0.3)


def test_a_score_estimator_has_a_score_but_no_density():
    X = _rows(1500, 2)
    est = ScoreEstimator(kernel="diagonal", n_basis=20, bandwidth=1.0, lam=1e-3).fit(X)
    np.testing.assert_allclose(est.grad_log_density(X[:50]), est.fitted().grad_log_density(X[:50]), rtol=1e-12)
    assert not hasattr(est, "log_density")
