"""The iterations' step (issue 44 item 4): by default ρ = 1.05‖T‖, so λ counts steps on any data; ``step=1.0`` is
the papers' code (kscore), ρ = 1 in the kernel's units, checked step for step against a dense NumPy transcription of
that iteration; a step above 1/‖T‖ is refused (docs/mathematics.md, "What λ means for the iterations")."""

import re

import numpy as np
import pytest

from tgpflow import NystromKEF, ScoreEstimator
from tgpflow.models.full_kef import FullKEF


def _banana(n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    x1 = rng.normal(0, 1.5, n)
    return np.column_stack([x1, rng.normal(0, 1, n) + 0.5 * (x1**2 - 2.25)])


def _kcf(A: np.ndarray, B: np.ndarray, s: float) -> np.ndarray:
    """∂_{a_i}∂_{b_j} exp(−‖a − b‖²/σ) = (2/σ)[δ_ij − (2/σ) r_i r_j] k, as an (na·d, nb·d) matrix."""
    r = A[:, None, :] - B[None, :, :]
    k = np.exp(-np.sum(r * r, axis=2) / s)
    d = A.shape[1]
    blocks = (2 / s) * k[:, :, None, None] * (np.eye(d) - (2 / s) * r[:, :, :, None] * r[:, :, None, :])
    return blocks.transpose(0, 2, 1, 3).reshape(A.shape[0] * d, B.shape[0] * d)


def _zeta(x: np.ndarray, X: np.ndarray, s: float) -> np.ndarray:
    """ζ̂(x) = (1/M) Σ_m (4/σ²) k(x, x_m)(d + 2 − (2/σ)‖x − x_m‖²)(x − x_m)."""
    r = x[:, None, :] - X[None, :, :]
    u = np.sum(r * r, axis=2)
    k = np.exp(-u / s)
    return (4 / s**2) * np.einsum("ab,abi->ai", k * (x.shape[1] + 2 - (2 / s) * u), r) / X.shape[0]


def _kscore_nu(X: np.ndarray, s: float, t: int, rho: float, x: np.ndarray, nu: float = 1.0) -> np.ndarray:
    """kscore's full-sample ν-method (NuEstimator: s = aζ̂ + Σ_m K(·, x_m)c_m, a_1 = −ω_1/ρ, c_1 = 0) at ρ, on the
    dense Gram, evaluated at x."""
    n = X.shape[0]
    K, h = _kcf(X, X, s), _zeta(X, X, s).ravel()
    a_prev, a = 0.0, -(4 * nu + 2) / (4 * nu + 1) / rho
    c_prev, c = np.zeros_like(h), np.zeros_like(h)
    for k in range(2, t + 1):
        u = ((k - 1) * (2 * k - 3) * (2 * k + 2 * nu - 1)
             / ((k + 2 * nu - 1) * (2 * k + 4 * nu - 1) * (2 * k + 2 * nu - 3)))
        om = 4 * (2 * k + 2 * nu - 1) * (k + nu - 1) / ((k + 2 * nu - 1) * (2 * k + 4 * nu - 1))
        step = (a * h + K @ c) / (n * rho)
        a, a_prev = a + u * (a - a_prev) - om / rho, a
        c, c_prev = c + u * (c - c_prev) - om * step, c
    return a * _zeta(x, X, s) + (_kcf(x, X, s) @ c).reshape(x.shape)


def test_step_one_is_kscores_iteration_step_for_step_and_the_default_rho_is_105_times_the_norm():
    X, x = _banana(150, 0), _banana(40, 1)
    s = 4.0  # ‖K/M‖ < 1 at this bandwidth: kscore's ρ = 1 converges
    norm = float(np.linalg.eigvalsh(_kcf(X, X, s) / X.shape[0])[-1])
    assert norm < 1.0
    fit = ScoreEstimator.preset("nu_method", lam=1 / 20**2, bandwidth=s, step=1.0).fit(X, basis=X)
    assert fit.solver_info_["path"].startswith("full-sample") and fit.solver_info_["rho"] == 1.0
    ref = _kscore_nu(X, s, 20, 1.0, x)
    np.testing.assert_allclose(fit.grad_log_density(x), ref, rtol=1e-9, atol=1e-9 * np.abs(ref).max())
    default = ScoreEstimator.preset("nu_method", lam=1 / 20**2, bandwidth=s).fit(X, basis=X)
    info = default.solver_info_
    assert info["iterations"] == 20 and info["rho"] == pytest.approx(1.05 * norm, rel=1e-8)
    ref = _kscore_nu(X, s, 20, info["rho"], x)
    np.testing.assert_allclose(default.grad_log_density(x), ref, rtol=1e-9, atol=1e-9 * np.abs(ref).max())


def test_a_given_step_reaches_the_nystrom_solve_and_full_kef():
    X = _banana(300, 2)
    est = ScoreEstimator(regularizer="nu", lam=1 / 15**2, n_basis=40, bandwidth=4.0, step=0.5).fit(X)
    assert est.solver_info_["step"] == 0.5 and est.solver_info_["rho"] == 2.0 and "norm_safety" not in est.solver_info_
    kef = NystromKEF(regularizer="landweber", lam=1 / 50, n_basis=40, bandwidth=4.0, step=0.5).fit(X)
    assert kef.solver_info_["step"] == 0.5 and kef.solver_info_["iterations"] == 50
    full = FullKEF(regularizer="nu", lam=1 / 15**2, bandwidth=4.0, step=1.0).fit(X[:100])
    assert full.solver_info_["rho"] == 1.0


def test_a_step_above_one_over_the_norm_is_refused_and_step_needs_an_iteration():
    X = _banana(150, 3)
    s = 0.05  # a narrow kernel: ‖K/M‖ above 1, where kscore's ρ = 1 is below ‖T‖ (the ν-method needs ρ ≥ ‖T‖)
    assert np.linalg.eigvalsh(_kcf(X, X, s) / X.shape[0])[-1] > 1.2
    with pytest.raises(ValueError, match=r"step=1 is above 1/‖T‖ = .*use a step of at most 1/‖T‖"):
        ScoreEstimator.preset("nu_method", lam=1e-2, bandwidth=s, step=1.0).fit(X, basis=X)
    with pytest.raises(ValueError, match=r"step=1 is above 1/‖T‖"):
        ScoreEstimator(regularizer="landweber", lam=1e-2, n_basis=40, bandwidth=s, step=1.0).fit(X)
    with pytest.raises(ValueError, match="step is the step of the Landweber and ν-method iterations"):
        ScoreEstimator(regularizer="tikhonov", step=0.5).fit(X)
    with pytest.raises(ValueError, match="step is the step"):
        FullKEF(step=0.5).fit(X)


def _landweber(X: np.ndarray, s: float, t: int, eta: float, x: np.ndarray) -> np.ndarray:
    """t full-sample Landweber steps of step η (docs/mathematics.md: ŝ_t = −tηζ̂ + Σ_m K(·, x_m)c_m with c_1 = 0,
    c_{k+1} = (I − ηK/M)c_k + kη²h/M), on the dense Gram, evaluated at x."""
    n = X.shape[0]
    K, h = _kcf(X, X, s), _zeta(X, X, s).ravel()
    c = np.zeros_like(h)
    for k in range(1, t):
        c = c - eta * (K @ c) / n + k * eta**2 * h / n
    return -t * eta * _zeta(x, X, s) + (_kcf(x, X, s) @ c).reshape(x.shape)


def test_a_given_step_runs_landwebers_lanczos_projection_to_the_recursions_answer():
    X, x = _banana(120, 4), _banana(30, 5)
    fit = ScoreEstimator.preset("landweber", lam=1 / 200, bandwidth=4.0, step=1.0).fit(X, basis=X)
    assert fit.solver_info_["iterations"] == 200 and fit.solver_info_.get("krylov") is True  # t > 64: projected
    ref = _landweber(X, 4.0, 200, 1.0, x)
    np.testing.assert_allclose(fit.grad_log_density(x), ref, rtol=1e-8, atol=1e-8 * np.abs(ref).max())


def test_the_largest_step_allowed_is_one_over_the_norm_and_the_refusal_suggests_one_it_accepts():
    X = _banana(300, 6)
    est = ScoreEstimator(regularizer="nu", lam=1 / 10**2, n_basis=40, bandwidth=0.3)
    norm = est.fit(X).solver_info_["norm_estimate"]
    assert est.set_params(step=1.0 / norm).fit(X).solver_info_["rho"] == pytest.approx(norm)  # the bound: accepted
    with pytest.raises(ValueError, match="use a step of at most 1/‖T‖") as err:
        est.set_params(step=1.01 / norm).fit(X)
    suggested = float(re.search(r"e\.g\. step=([0-9.e+-]+)", str(err.value)).group(1))
    assert est.set_params(step=suggested).fit(X).solver_info_["step"] == suggested
