"""Matrix-free kernel solves (issue 18, defect 3; docs/mathematics.md, "Nyström kernel exponential family" and "Score
estimators on a Nyström basis"): the curl-free Gram as an operator, CG with a relative-residual stop, Landweber /
ν-method by mat-vecs (Cholesky-whitened on Nyström statistics, on the n × n kernel matrix for the full sample).

Oracles: the Gram built pair by pair from the textbook formula (``tests.oracles.gauss_cf``), ``numpy.linalg``
solves and eigendecompositions, the filters written out here (Landweber's sum, the ν-method's Jacobi
polynomials) and ζ̂ from docs/mathematics.md, "Nyström kernel exponential family"'s formula.
"""

from __future__ import annotations

import numpy as np
import pytest

from tgpflow import ScoreEstimator
from tgpflow.features.kernels import RadialKernel
from tgpflow.models.full_kef import FullKEF
from tgpflow.solve.kef import kef_h, spectral_solve
from tgpflow.solve.full_sample import KRYLOV_MIN_STEPS, landweber_weight
from tgpflow.solve.matfree import CurlFreeGram, conjugate_gradient
from tests.oracles import gauss_cf, gauss_k, nu_method_filter


def _dense_gram(X, s):
    n, d = X.shape
    return np.block([[gauss_cf(X[a], X[b], s) for b in range(n)] for a in range(n)]).reshape(n * d, n * d)


def _zeta(x, X, s):
    """ζ̂(x) = ∇ξ̂(x) for a flat base (docs/mathematics.md, "Nyström kernel exponential family" full KEF): (1/n)Σ_a
    (4/σ²)k r(d + 2 − (2/σ)‖r‖²), r = x − X_a."""
    out = np.zeros_like(x)
    d = X.shape[1]
    for i, xi in enumerate(x):
        for xa in X:
            r = xi - xa
            out[i] += 4 / s**2 * gauss_k(xi, xa, s) * r * (d + 2 - 2 / s * r @ r)
    return out / X.shape[0]


def _landweber_g(sig, eta, t):
    """Σ_{k<t} η(1 − ησ)^k, term by term."""
    return sum(eta * (1 - eta * sig) ** k for k in range(t))


# -- the Gram operator -------------------------------------------------------------------------------------------
@pytest.mark.parametrize("form", ["gemm", "blocked"])
@pytest.mark.parametrize("kept", [True, False])
def test_curl_free_gram_products_are_the_pairwise_gram(kept, form, rng):
    """Both forms of the structured product (one GEMM with [V | s | P | s∘X], or the blocked one) against the Gram
    built block by block, to 1e-12; rows far from the origin (the product centres them)."""
    X = rng.normal(size=(70, 3)) + 20.0
    s = 2.5
    G = _dense_gram(X, s)
    op = CurlFreeGram(RadialKernel("gaussian", s), X, budget_bytes=2**30 if kept else 0, block_bytes=32 * 8 * 70 * 4,
                      form=form)
    assert op.form == form
    assert op.kept is kept and op.bytes == (8 * 70 * 70 if kept else 0)  # Gaussian: α alone
    V = rng.normal(size=(70, 3))
    np.testing.assert_allclose(op.matvec(V), (G @ V.ravel()).reshape(70, 3), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(op.matvec(V.ravel()), G @ V.ravel(), rtol=1e-12, atol=1e-12)
    assert op.diagonal == pytest.approx(G[0, 0]) and np.allclose(np.diag(G), op.diagonal)
    assert op.matvecs == 2


@pytest.mark.parametrize("form", ["gemm", "blocked"])
def test_imq_gram_products_keep_both_profiles(form, rng):
    X = rng.normal(size=(40, 2))
    k = RadialKernel("imq", 1.5)
    op = CurlFreeGram(k, X, form=form)
    assert op.bytes == 16 * 40 * 40
    h = 1e-4  # K_cf(x, y)_ij = ∂_{x_i}∂_{y_j} k by central differences of the scalar kernel
    G = np.zeros((80, 80))
    for a in range(40):
        for b in range(40):
            for i in range(2):
                for j in range(2):
                    ei, ej = np.eye(2)[i] * h, np.eye(2)[j] * h
                    kk = lambda x, y: float(k(x[None], y[None])[0, 0])  # noqa: E731
                    G[2 * a + i, 2 * b + j] = (kk(X[a] + ei, X[b] + ej) - kk(X[a] + ei, X[b] - ej)
                                               - kk(X[a] - ei, X[b] + ej) + kk(X[a] - ei, X[b] - ej)) / (4 * h * h)
    V = rng.normal(size=(40, 2))
    np.testing.assert_allclose(op.matvec(V).ravel(), G @ V.ravel(), rtol=1e-5, atol=1e-6)


# -- conjugate gradients -----------------------------------------------------------------------------------------
def test_conjugate_gradient_stops_at_the_relative_residual_it_reports(rng):
    B = rng.normal(size=(120, 120))
    A = B @ B.T / 120 + 0.05 * np.eye(120)
    b = rng.normal(size=120)
    x, info = conjugate_gradient(A.__matmul__, b, rtol=1e-9, max_iter=1000)
    true = np.linalg.norm(b - A @ x) / np.linalg.norm(b)
    assert info["converged"] and info["residual"] <= 1e-9 and true <= 1e-8
    assert info["residual"] == pytest.approx(true, rel=1e-2, abs=1e-11)
    np.testing.assert_allclose(x, np.linalg.solve(A, b), rtol=1e-6, atol=1e-8)
    x3, info3 = conjugate_gradient(A.__matmul__, b, rtol=1e-12, max_iter=3)  # the budget ends it
    assert info3["iterations"] == 3 and not info3["converged"]
    assert info3["residual"] == pytest.approx(np.linalg.norm(b - A @ x3) / np.linalg.norm(b), rel=1e-6)


@pytest.mark.parametrize("kept", [True, False])
def test_kef_cg_reports_iterations_and_its_residual(kept, rng, monkeypatch):
    import tgpflow.solve.matfree as matfree

    if not kept:
        monkeypatch.setattr(matfree, "GRAM_BUDGET_BYTES", 0)
    X = rng.normal(size=(60, 2))
    s, lam = 1.0, 1e-2
    est = FullKEF(bandwidth=s, lam=lam, solver="cg", cg_tol=1e-9).fit(X)
    info = est.solver_info_
    assert info["gram"] == ("kept" if kept else "streamed") and info["converged"] and info["cg_exit"] == 0
    assert 1 <= info["iterations"] <= 120 and info["residual"] <= 1e-9
    A = _dense_gram(X, s) + 60 * lam * np.eye(120)  # (G + nλI)β = ζ̂(X)/λ (docs/mathematics.md, "Nyström kernel exponential family")
    b = _zeta(X, X, s).ravel() / lam
    assert np.linalg.norm(b - A @ est.beta_.ravel()) / np.linalg.norm(b) <= 1e-8
    np.testing.assert_allclose(est.beta_.ravel(), np.linalg.solve(A, b), rtol=1e-6, atol=1e-9 * np.abs(b).max())


# -- Landweber / ν-method on Nyström statistics: Cholesky-whitened mat-vecs ----------------------------------------
def _filter(reg, sig, step, lam, nu=1.0):
    if reg == "landweber":
        return _landweber_g(sig, step, int(np.floor(1 / lam)))
    return nu_method_filter(sig * step, int(np.floor(lam**-0.5)), nu) * step  # ρ = 1/step scales T to ‖·‖ ≤ 1


@pytest.mark.parametrize("reg,lam", [("landweber", 0.02), ("nu", 1e-3)])
@pytest.mark.parametrize("kernel", ["curl_free", "diagonal"])
def test_whitened_iterations_are_the_filter_on_the_projected_operator(reg, lam, kernel, gaussian_mix):
    X, Y = gaussian_mix[::3], gaussian_mix[1::40]  # 200 rows, 15 basis points far enough apart: G definite
    est = ScoreEstimator(kernel=kernel, regularizer=reg, lam=lam, bandwidth=0.5).fit(X, basis=Y)
    info = est.solver_info_
    assert info["method"] == "cholesky" and info["rcond"] > 1e-10
    stats, n = est.stats_, est.stats_.n
    if kernel == "curl_free":
        C, h = stats.C, kef_h(stats, est.basis_, None).reshape(-1)
        G = _dense_gram(Y, 0.5)
    else:
        C, h = stats.Ck, est.stats_.h_grad
        G = np.array([[gauss_k(a, b, 0.5) for b in Y] for a in Y])
    kap, V = np.linalg.eigh(G)  # the closed form of docs/mathematics.md, "Score estimators on a Nyström basis", nothing cut
    Rinv = V / np.sqrt(kap)
    sig, U = np.linalg.eigh(Rinv.T @ (C / n) @ Rinv)
    # power iteration: from below, within its budget (the top two eigenvalues here are close)
    assert sig.max() * (1 - 1e-3) <= info["norm_estimate"] <= sig.max() * (1 + 1e-12)
    g = _filter(reg, np.clip(sig, 0, None), info["step"], lam)
    z = Rinv.T @ (h / n)
    c = -Rinv @ ((U * g) @ (U.T @ z))
    np.testing.assert_allclose(est.coef_.reshape(c.shape), c, rtol=1e-8, atol=1e-10 * np.abs(c).max())
    # and the eigendecomposition path (method="eigh", as before) gives the same coefficients with the same step
    # (each estimates ‖T‖ in its own coordinates, from its own start: the estimates differ below the budget's
    # convergence, 5e-5 relative here)
    old, old_info = spectral_solve(C, h, G, n, lam, reg, method="eigh", step=info["step"])
    assert old_info["method"] == "eigh"
    np.testing.assert_allclose(est.coef_.reshape(c.shape), old, rtol=1e-8, atol=1e-10 * np.abs(c).max())


def test_a_singular_gram_falls_back_to_the_eigendecomposition(gaussian_mix):
    X = gaussian_mix[::3]
    Y = np.concatenate([gaussian_mix[1::40], gaussian_mix[1:2]])  # a duplicated basis point: G singular
    est = ScoreEstimator(kernel="curl_free", regularizer="nu", lam=1e-3, bandwidth=0.5).fit(X, basis=Y)
    info = est.solver_info_
    assert info["method"] == "eigh" and "not numerically definite" in info["fallback"]
    assert info["rank"] == 15 * 2  # the duplicate's two directions cut
    with pytest.raises(ValueError, match="method must be one of"):
        spectral_solve(np.eye(2), np.ones(2), np.eye(2), 1, 0.1, "nu", method="lanczos")


# -- the full-sample iterations: products with the n × n kernel matrix ------------------------------------------------
@pytest.mark.parametrize("reg,lam,n", [("landweber", 0.05, 50), ("landweber", 1 / 2000, 120), ("nu", 0.01, 50)])
def test_full_sample_iterations_are_the_filter_of_the_gram(reg, lam, n, rng):
    """t Landweber or ν-method steps against the filter g(σ) applied through G's eigendecomposition; t = 2 000
    Landweber steps run on the Lanczos projection (full_sample, KRYLOV_MIN_STEPS) in far fewer products."""
    X = rng.uniform(-3, 3, size=(n, 2))  # spread out: G well conditioned
    xt = rng.normal(size=(7, 2))
    s = 0.3
    est = FullKEF(bandwidth=s, lam=lam, regularizer=reg).fit(X)
    info = est.solver_info_
    G = _dense_gram(X, s)
    sig, U = np.linalg.eigh(G / n)
    assert sig.min() > 1e-6 * sig.max()  # well conditioned: the division below is exact enough
    assert info["norm_estimate"] == pytest.approx(sig.max(), rel=1e-6) and info["gram"] == "kept"
    step = info["step"]
    t = int(np.floor(1 / lam)) if reg == "landweber" else int(np.floor(lam**-0.5))
    steps = info["lanczos_steps"] if t > KRYLOV_MIN_STEPS else t - (reg == "nu")
    assert info["iterations"] == t and info["matvecs"] == info["norm_matvecs"] + steps
    if t > KRYLOV_MIN_STEPS:
        assert info["krylov"] and info["lanczos_steps"] < min(t - 1, 2 * n)  # converged before it is exact
    else:
        assert "krylov" not in info
    zeta = _zeta(X, X, s).ravel()
    g = _filter(reg, sig, step, lam)
    g0 = float(_filter(reg, np.zeros(1), step, lam)[0])
    # at the rows: s(X) = −g(G/n) ζ̂(X) (docs/mathematics.md, "Score estimators on a Nyström basis": S L̂ = (G/n) S)
    at_rows = -(U * g) @ (U.T @ zeta)
    np.testing.assert_allclose(est.grad_log_density(X).ravel(), at_rows, rtol=1e-8, atol=1e-10 * np.abs(at_rows).max())
    # off the rows: s(x) = −g(0) ζ̂(x) − K_xX q(G/n) ζ̂(X)/n, q(σ) = (g(σ) − g(0))/σ
    assert est.xi_coef_ == pytest.approx(-g0, rel=1e-12)
    q = (g - g0) / sig
    Kx = np.block([[gauss_cf(x, xa, s) for xa in X] for x in xt])
    off = -g0 * _zeta(xt, X, s).ravel() - Kx @ ((U * q) @ (U.T @ zeta)) / n
    np.testing.assert_allclose(est.grad_log_density(xt).ravel(), off, rtol=1e-7, atol=1e-9 * np.abs(off).max())
    # the log density's gradient is the score (a curl-free field, f = aξ̂ + Σβ∂k)
    h = 1e-6
    fd = np.column_stack([(est.log_density(xt + h * e) - est.log_density(xt - h * e)) / (2 * h) for e in np.eye(2)])
    np.testing.assert_allclose(est.grad_log_density(xt), fd, rtol=1e-5, atol=1e-5 * np.abs(fd).max())


def test_the_projected_landweber_weight_is_the_sum_it_replaces():
    """S(θ) = Σ_{j<t} j(1 − ηθ)^{t−1−j} by its series (tηθ < 1) and closed form (≥ 1), against the sum itself."""
    for t in (2, 65, 1000, 20000):
        x = np.array([0.0, 1e-9, 1e-6, 1e-4, 1 / (3 * t), 1 / t, 3 / t, 0.1, 0.9])
        j = np.arange(t, dtype=float)
        brute = np.array([np.sum(j * (1 - v) ** (t - 1 - j)) for v in x])
        np.testing.assert_allclose(landweber_weight(x / 0.5, t, 0.5), brute, rtol=1e-10)


def test_landweber_falls_back_to_the_recursion_when_lanczos_does_not_settle(rng, monkeypatch):
    import tgpflow.solve.full_sample as full_sample

    X = rng.uniform(-3, 3, size=(60, 2))
    ref = FullKEF(bandwidth=0.3, lam=1 / 300, regularizer="landweber").fit(X)
    assert ref.solver_info_["krylov"] is True
    monkeypatch.setattr(full_sample, "KRYLOV_MAX_STEPS", 16)
    monkeypatch.setattr(full_sample, "KRYLOV_RTOL", 0.0)
    est = FullKEF(bandwidth=0.3, lam=1 / 300, regularizer="landweber").fit(X)
    info = est.solver_info_
    assert "the recursion ran" in info["krylov"] and info["matvecs"] == info["norm_matvecs"] + 16 + 300
    np.testing.assert_allclose(est.beta_, ref.beta_, rtol=1e-9, atol=1e-11 * np.abs(ref.beta_).max())


@pytest.mark.parametrize("reg,lam", [("landweber", 0.05), ("nu", 0.01)])
def test_full_sample_equals_the_nystrom_estimator_with_every_row_at_the_rows(reg, lam, rng):
    """With basis = all rows and nothing cut from G, the Nyström estimator P_V g(P_V L̂ P_V) P_V ζ̂ and the
    full-sample g(L̂)ζ̂ agree at the rows (L̂ maps into V); off the rows they differ by g(0)(ζ̂ − P_V ζ̂)."""
    X = rng.uniform(-3, 3, size=(50, 2))
    full = FullKEF(bandwidth=0.3, lam=lam, regularizer=reg).fit(X)
    nys = ScoreEstimator(kernel="curl_free", regularizer=reg, lam=lam, bandwidth=0.3)
    stats = nys.accumulate(X, basis=X)  # the same step for both (each path estimates ‖T‖ in its own coordinates)
    G = _dense_gram(X, 0.3)
    c, info = spectral_solve(stats.C, kef_h(stats, nys.basis_, None).reshape(-1), G, 50, lam, reg,
                             step=full.solver_info_["step"])
    assert info["method"] == "cholesky"
    a, b = full.grad_log_density(X).ravel(), G @ c  # the Nyström field at the rows
    assert np.linalg.norm(a - b) <= 1e-8 * np.linalg.norm(b)
    xt = rng.uniform(-3, 3, size=(20, 2))
    Kx = np.block([[gauss_cf(x, xa, 0.3) for xa in X] for x in xt])
    assert np.linalg.norm(full.grad_log_density(xt).ravel() - Kx @ c) > 1e-3 * np.linalg.norm(Kx @ c)  # off them


def test_full_sample_refuses_the_cutoff(rng):
    with pytest.raises(ValueError, match="'tikhonov', 'landweber' or 'nu'"):
        FullKEF(bandwidth=1.0, regularizer="cutoff").fit(rng.normal(size=(10, 2)))
