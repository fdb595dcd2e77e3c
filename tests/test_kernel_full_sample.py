"""The full-sample path of ScoreEstimator (tgpflow.models.kernel_full_sample; docs/mathematics.md, "Score estimators on
a Nyström basis"): ``preset("nu_method" | "landweber").fit(X, basis=X)`` runs matrix-free and is FullKEF's
full-sample estimator.

Oracles: FullKEF with the same regularizer (its own fit, which the full-sample iterations' closed-form test in
test_kernel_matfree checks against G's eigendecomposition), central finite differences of the score for the
divergence (the Laplacian of the full-sample term, fourth derivatives of ψ), and the model file read back.
"""

from __future__ import annotations

import numpy as np
import pytest

import tgpflow
from tgpflow import ScoreEstimator
from tgpflow.models.full_kef import FullKEF
from tgpflow.models.kernel_fitted import FULL_SAMPLE_MODEL, KernelFitted
from tgpflow.models.kernel_full_sample import FULL_SAMPLE_PATH


@pytest.mark.parametrize("preset,reg,lam", [("nu_method", "nu", 1e-3), ("landweber", "landweber", 1 / 300)])
@pytest.mark.parametrize("base", ["flat", "gaussian"])
def test_basis_x_runs_the_matrix_free_full_sample_estimator(preset, reg, lam, base, rng):
    X = rng.normal(size=(120, 2))
    xt = rng.normal(size=(15, 2))
    est = ScoreEstimator.preset(preset, lam=lam, base=base).fit(X, basis=X)
    assert est.solver_info_["path"] == FULL_SAMPLE_PATH and est.stats_ is None
    assert est.solver_info_.get("krylov", False) is (reg == "landweber")  # 300 steps: the Lanczos projection
    ref = FullKEF(regularizer=reg, lam=lam, base=base, bandwidth=est.bandwidth_).fit(X)
    s, s_ref = est.grad_log_density(xt), ref.grad_log_density(xt)
    assert np.abs(s - s_ref).max() <= 1e-10 * np.abs(s_ref).max()
    at_rows, rows_ref = est.grad_log_density(X), ref.grad_log_density(X)
    assert np.abs(at_rows - rows_ref).max() <= 1e-10 * np.abs(rows_ref).max()
    f, f_ref = est.fitted().log_density(xt), ref.log_density(xt)
    assert np.abs(f - f_ref).max() <= 1e-10 * np.abs(f_ref).max()


@pytest.mark.parametrize("radial", ["gaussian", "imq"])
def test_the_full_sample_divergence_is_the_scores_by_finite_differences(radial, rng):
    X = rng.normal(size=(60, 3))
    xt = rng.normal(size=(6, 3))
    est = ScoreEstimator.preset("nu_method", lam=1e-2, base="gaussian", radial=radial).fit(X, basis=X)
    fitted = est.fitted()
    assert fitted.xi_coef != 0.0
    s = fitted.grad_log_density(xt)
    div = fitted.hyvarinen_terms(xt) - 0.5 * np.einsum("nd,nd->n", s, s)
    h = 1e-5
    fd = sum((fitted.grad_log_density(xt + h * e)[:, j] - fitted.grad_log_density(xt - h * e)[:, j]) / (2 * h)
             for j, e in enumerate(np.eye(3)))
    np.testing.assert_allclose(div, fd, rtol=1e-6, atol=1e-6 * np.abs(fd).max())


def test_a_full_sample_model_round_trips_and_says_what_it_keeps(rng, tmp_path):
    X = rng.normal(size=(80, 2))
    est = ScoreEstimator.preset("landweber", lam=1 / 100, base="gaussian").fit(X, basis=X)
    est.save(tmp_path / "m.zarr")
    back = tgpflow.load(tmp_path / "m.zarr")
    xt = rng.normal(size=(9, 2))
    np.testing.assert_array_equal(back.grad_log_density(xt), est.grad_log_density(xt))
    np.testing.assert_array_equal(back.fitted().log_density(xt), est.fitted().log_density(xt))
    with pytest.raises(ValueError, match="partial_fit has nothing to add"):
        est.partial_fit(X)
    # a reader without the full-sample term refuses the file instead of dropping the term
    meta = est.fitted().to_meta()
    assert meta["model"] == FULL_SAMPLE_MODEL
    with pytest.raises(ValueError, match="model must be one of"):
        KernelFitted(est.basis_, meta["model"], est.coef_, est.base_)


@pytest.mark.parametrize("change", ["other_basis", "auto", "scale", "components"])
def test_only_a_basis_of_every_row_takes_the_full_sample_path(change, rng):
    X = rng.normal(size=(150, 2))
    params = {"lam": "auto"} if change == "auto" else {"lam": 1e-2, "scale": change == "scale"}
    basis = X[:40] if change == "other_basis" else X
    if change == "components":  # dimension subsampling keeps its Nyström statistics
        est = tgpflow.NystromKEF(regularizer="nu", lam=1e-2, n_components=1).fit(X, basis=X)
    else:
        est = ScoreEstimator.preset("nu_method", **params).fit(X, basis=basis)
    assert "path" not in est.solver_info_ and est.stats_ is not None


def test_a_dataframe_routes_with_its_column_names(rng):
    pd = pytest.importorskip("pandas")
    X = pd.DataFrame(rng.normal(size=(100, 2)), columns=["a", "b"])
    est = ScoreEstimator.preset("nu_method", lam=1e-2).fit(X, basis=X)
    assert est.solver_info_["path"] == FULL_SAMPLE_PATH and list(est.feature_names_in_) == ["a", "b"]
    ref = ScoreEstimator.preset("nu_method", lam=1e-2).fit(X.to_numpy(), basis=X.to_numpy())
    np.testing.assert_array_equal(est.grad_log_density(X), ref.grad_log_density(X.to_numpy()))
