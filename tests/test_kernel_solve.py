"""The kernel solves of issue 18 (docs/mathematics.md, "Score estimators on a Nyström basis"): no hidden ridge, and
Landweber / ν-method scaled by ‖T‖ alone.

Oracles: eigendecompositions (``numpy.linalg.eigh``), pseudo-inverses, the ν-method's Jacobi polynomials
and its three-term recursion written out here from docs/mathematics.md, "Score estimators on a Nyström basis" (not the
library's coefficients).
"""

from __future__ import annotations

import logging

import numpy as np
import pytest

import tgpflow
from tgpflow import NystromKEF, ScoreEstimator
from tgpflow.io.artifact import read_artifact, write_artifact
from tgpflow.solve.kef import landweber, nu_method, operator_norm, tikhonov_direct
from tests.oracles import nu_method_filter


def _psd(n, rng, rank=None, decay=None):
    """A random symmetric PSD n × n matrix (of ``rank``; eigenvalues decaying as decay^k if given)."""
    Q, _ = np.linalg.qr(rng.normal(size=(n, n)))
    eig = rng.uniform(0.1, 1.0, n) if decay is None else decay ** np.arange(n)
    if rank is not None:
        eig[rank:] = 0.0
    return (Q * eig) @ Q.T


# -- ‖T‖ by Lanczos ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("case", ["wishart", "clustered_top", "low_rank", "tiny", "zero"])
def test_lanczos_norm_is_the_largest_eigenvalue(case, rng):
    if case == "wishart":
        B = rng.normal(size=(80, 60))
        T = B.T @ B / 80
    elif case == "clustered_top":  # the two largest eigenvalues 0.1% apart: slow convergence of the vector
        Q, _ = np.linalg.qr(rng.normal(size=(50, 50)))
        T = (Q * np.r_[2.0, 1.998, rng.uniform(0, 1.5, 48)]) @ Q.T
    elif case == "low_rank":
        T = 7.0 * _psd(40, rng, rank=5)
    elif case == "tiny":  # read whole
        T = _psd(3, rng)
    else:
        T = np.zeros((30, 30))
    top = max(np.linalg.eigvalsh(T).max(), 0.0)
    est, matvecs = operator_norm(T)
    assert est == pytest.approx(top, rel=1e-9, abs=1e-14)  # Lanczos to 1e-10, also where power iteration is slow
    assert est <= top * (1 + 1e-12) + 1e-14 and 1 <= matvecs <= 100  # from below (PSD), within the budget
    assert operator_norm(T) == (est, matvecs)  # a seeded start: deterministic
    # the same through a mat-vec function
    assert operator_norm(lambda v: T @ v, size=T.shape[0])[0] == pytest.approx(est, rel=1e-12, abs=1e-14)


def test_lanczos_needs_fewer_products_than_power_iteration_on_a_clustered_top(rng):
    from tgpflow.solve import kef

    Q, _ = np.linalg.qr(rng.normal(size=(300, 300)))
    T = (Q * np.r_[2.0, 1.998, 1.996, rng.uniform(0, 1.9, 297)]) @ Q.T
    est, used = operator_norm(T)
    power, steps = kef._power_norm(T.__matmul__, np.random.default_rng(0).standard_normal(300), 100)
    top = np.linalg.eigvalsh(T).max()
    assert abs(est - top) < 1e-9 * top and used < 100
    assert abs(power - top) > 10 * abs(est - top) and steps == 100


# -- the iterations against their filters ----------------------------------------------------------------------
def _apply(T, z, g_of_sigma):
    sig, U = np.linalg.eigh(T)
    return -(U * g_of_sigma(np.clip(sig, 0.0, None))) @ (U.T @ z)


@pytest.mark.parametrize("steps", [1, 2, 37])
def test_landweber_after_t_steps_is_the_truncated_neumann_series(steps, rng):
    T = 3.0 * _psd(30, rng, rank=22)  # σ = 0 included: g(0) = tη
    z = rng.normal(size=(30, 2))
    eta = 1 / (1.05 * np.linalg.eigvalsh(T).max())

    def g(sig):  # Σ_{k<t} η(1 − ησ)^k, summed term by term
        return sum(eta * (1 - eta * sig) ** k for k in range(steps))

    np.testing.assert_allclose(landweber(T, z, steps, eta), _apply(T, z, g), rtol=1e-10, atol=1e-12)


def _nu_filter_by_recursion(sig, t, nu, rho):
    """g with w_t = −g(σ) z for one eigenvalue σ (z = 1): docs/mathematics.md, "Score estimators on a Nyström basis"'s
    recursion, written out here."""
    w_prev = np.zeros_like(sig)
    w = -(4 * nu + 2) / (4 * nu + 1) * np.ones_like(sig) / rho  # w_1 = −ω_1 z/ρ, ω_1 = (4ν + 2)/(4ν + 1)
    for k in range(2, t + 1):
        u = (k - 1) * (2 * k - 3) * (2 * k + 2 * nu - 1) / ((k + 2 * nu - 1) * (2 * k + 4 * nu - 1) * (2 * k + 2 * nu - 3))
        om = 4 * (2 * k + 2 * nu - 1) * (k + nu - 1) / ((k + 2 * nu - 1) * (2 * k + 4 * nu - 1))
        w, w_prev = w + u * (w - w_prev) - om * (1 + sig * w) / rho, w
    return -w


@pytest.mark.parametrize("nu", [0.5, 1.0, 2.0])
@pytest.mark.parametrize("steps", [1, 2, 7, 20])
def test_nu_method_after_t_steps_is_its_polynomial(nu, steps, rng):
    T = 2.0 * _psd(25, rng, rank=20)
    z = rng.normal(size=(25, 3))
    rho = 1.05 * np.linalg.eigvalsh(T).max()
    got = nu_method(T, z, steps, rho, nu)
    np.testing.assert_allclose(got, _apply(T, z, lambda s: _nu_filter_by_recursion(s, steps, nu, rho)),
                               rtol=1e-9, atol=1e-11)
    # and the Jacobi form of its residual polynomial (Engl, Hanke & Neubauer §6.3), on T/ρ
    np.testing.assert_allclose(got, _apply(T, z, lambda s: nu_method_filter(s / rho, steps, nu) / rho),
                               rtol=1e-8, atol=1e-10)


# -- the direct Tikhonov solve ----------------------------------------------------------------------------------
def _consistent_system(rng, size=24, rank=15, n=200):
    """G of rank ``rank``, C = F M Fᵀ and h = F v: null(G) ⊆ null(C), h ⟂ null(G) (as the kernel statistics)."""
    F = rng.normal(size=(size, rank))
    M = _psd(rank, rng) * n
    return F @ M @ F.T, F @ rng.normal(size=(rank, 2)), F @ F.T, n


def test_tikhonov_without_ridge_takes_the_pseudo_inverse_limit_on_a_rank_deficient_gram(rng, caplog):
    C, h, G, n = _consistent_system(rng)
    lam = 1e-3
    with caplog.at_level(logging.INFO, logger="tgpflow"):
        c, info = tikhonov_direct(C, h, G, n, lam)
    assert info["method"] == "eigh" and "singular" in info["fallback"] and info["rank"] == 15
    assert "pseudo-inverse limit" in caplog.text
    A = C / n + lam * G
    np.testing.assert_allclose(c, -np.linalg.pinv(A, rcond=1e-12, hermitian=True) @ h / n, rtol=1e-8,
                               atol=1e-10 * np.abs(c).max())
    # a ridge makes it definite: Cholesky, and the biased solution (C/N + λG + εI)⁻¹
    c_ridge, info = tikhonov_direct(C, h, G, n, lam, 1e-2)
    assert info["method"] == "cholesky" and info["ridge"] == 1e-2
    ref = -np.linalg.solve(A + 1e-2 * np.eye(24), h / n)
    np.testing.assert_allclose(c_ridge, ref, rtol=1e-7, atol=1e-9 * np.abs(ref).max())
    assert np.linalg.norm(c_ridge - c) > 1e-4 * np.linalg.norm(c)


def test_tikhonov_without_ridge_on_a_definite_system_is_plain_cholesky(rng):
    C, h, G = _psd(20, rng) * 50, rng.normal(size=(20, 1)), _psd(20, rng)
    c, info = tikhonov_direct(C, h, G, 50, 1e-2)
    assert info["method"] == "cholesky" and info["ridge"] == 0.0 and 0 < info["rcond"] <= 1
    np.testing.assert_allclose(c, -np.linalg.solve(C / 50 + 1e-2 * G, h / 50), rtol=1e-10)


def test_a_duplicated_basis_point_changes_the_field_only_with_a_ridge(gaussian_mix):
    """span{K(·, Y_a)} is the same with Y_0 twice: without a ridge the fitted score is the same field (G is
    exactly singular, so the solve takes the pseudo-inverse limit); a ridge ε‖β‖² splits the duplicated
    point's weight and changes it."""
    X, Y = gaussian_mix[::3], gaussian_mix[1::60]
    Y2 = np.vstack([Y, Y[:1]])
    x = gaussian_mix[2::25]
    fields = {}
    for ridge in (0.0, 1e-3):
        for name, basis in (("once", Y), ("twice", Y2)):
            est = NystromKEF(bandwidth=1.5, lam=1e-3, ridge=ridge).fit(X, basis=basis)
            fields[ridge, name] = est.grad_log_density(x)
            if ridge == 0.0 and name == "twice":
                assert est.solver_info_["method"] == "eigh" and est.solver_info_["rank"] == 2 * len(Y)
    ref = fields[0.0, "once"]
    np.testing.assert_allclose(fields[0.0, "twice"], ref, rtol=1e-7, atol=1e-7 * np.abs(ref).max())
    assert np.abs(fields[1e-3, "twice"] - fields[1e-3, "once"]).max() > 1e-4 * np.abs(ref).max()


def test_a_file_that_stored_eps_loads_it_as_the_ridge(gaussian_mix, tmp_path):
    est = NystromKEF(n_basis=8, bandwidth=1.0, lam=1e-2, ridge=1e-5).fit(gaussian_mix)
    kind, arrays, meta = read_artifact(est.save(tmp_path / "new.npz"))
    params = meta["params"]
    params["eps"] = params.pop("ridge")
    del params["rank_tol"]
    old = write_artifact(tmp_path / "old.npz", kind, arrays, meta)
    back = tgpflow.load(old, verify=True)  # re-solving with ridge = the stored ε reproduces the solution
    assert back.get_params()["ridge"] == 1e-5 and "eps" not in back.get_params()
    np.testing.assert_array_equal(back.grad_log_density(gaussian_mix[:5]), est.grad_log_density(gaussian_mix[:5]))


# -- λ of the iterations is selected like every other λ -------------------------------------------------------
def test_landweber_default_grid_stops_at_ten_thousand_steps(gaussian_mix):
    est = ScoreEstimator.preset("landweber", lam="auto", bandwidth=1.0).fit(gaussian_mix, basis=gaussian_mix[::60])
    lams = sorted({c["lam"] for c in est.selection_["curve"]})
    assert lams[0] == pytest.approx(1e-4) and lams[-1] == pytest.approx(1.0) and len(lams) == 9
    nu = ScoreEstimator.preset("nu_method", lam="auto", bandwidth=1.0).fit(gaussian_mix, basis=gaussian_mix[::60])
    assert min(c["lam"] for c in nu.selection_["curve"]) == pytest.approx(1e-6)


# -- FullKEF: direct where it fits, CG beyond ---------------------------------------------------------------
def test_full_kef_switches_to_cg_when_the_direct_solve_does_not_fit(gaussian_mix, monkeypatch, caplog):
    from types import SimpleNamespace

    import psutil

    from tgpflow.models.full_kef import FullKEF

    X = gaussian_mix[::8]  # 75 rows, nd = 150: the direct solve needs 16·150² = 360 000 bytes
    direct = FullKEF(bandwidth=1.0, lam=1e-2).fit(X)
    assert direct.solver_info_["solver"] == "direct"
    monkeypatch.setattr(psutil, "virtual_memory", lambda: SimpleNamespace(available=300_000))
    with caplog.at_level(logging.INFO, logger="tgpflow"):
        auto = FullKEF(bandwidth=1.0, lam=1e-2).fit(X)
    assert auto.solver_info_["solver"] == "cg" and auto.solver_info_["cg_exit"] == 0
    assert "conjugate gradients" in caplog.text and "0.00 GiB" in auto.solver_info_["reason"]
    np.testing.assert_allclose(auto.beta_, direct.beta_, rtol=1e-6, atol=1e-8 * np.abs(direct.beta_).max())
    with pytest.raises(MemoryError, match="solver='cg'"):
        FullKEF(bandwidth=1.0, lam=1e-2, solver="direct").fit(X)
    assert ScoreEstimator.preset("kef").solver == "auto" and ScoreEstimator.preset("kef_cg").solver == "cg"
