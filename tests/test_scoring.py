"""Evaluation of fitted GP-tilted models (issue 20): the fused kernels and blocked FVPD solve against plain NumPy
formulas written from docs/mathematics.md, "Features and the pilot pass", "Fisher divergence and base-measure learning",
"Noise-conditional Fisher divergence", "The Fisher variational predictive distribution" and "MAP, baselines and
sampling", independent of the block size and of the thread count."""

import dask
import dask.array as da
import numpy as np
import pytest

from tgpflow import GPTiltedDensity, RandomFourierFeatures
from tgpflow.core.gaussian_base import Base
from tgpflow.models.tgp_fitted import TGPFitted

S, D = 96, 3


@pytest.fixture
def parts(rng):
    feats = RandomFourierFeatures.draw(S, bandwidth=0.7, n_dims=D, shift=np.array([0.3, -0.2, 1.0]), random_state=3)
    A = rng.normal(size=(D, D))
    cov = A @ A.T + np.eye(D)
    base = Base(rng.normal(size=D), cov, np.linalg.inv(cov))
    G = rng.normal(size=(S, S))
    M = G @ G.T / S + np.eye(S)
    return feats, base, M, rng.normal(size=(500, D)) * 1.5


def oracle(feats, base, x, theta=None, M=None, v=None, kde=None):
    """log q, its score and ½‖s‖² + div s by the plain formulas of docs/mathematics.md, "Conventions", "Fisher
    divergence and base-measure learning", "The Fisher variational predictive distribution" and "MAP, baselines and
    sampling" (derivatives of φ, φ')."""
    Z, c, g = feats.Z, feats.c, feats.gamma
    ang = x @ Z.T / g + c  # the raw angle: no shift, no phase reduction
    phi = np.sqrt(2 / S) * np.cos(ang)
    dphi = -np.sqrt(2 / S) * np.sin(ang)
    P, r = base.precision, x - base.mean
    sq = (Z ** 2).sum(axis=1)
    if kde is not None:
        f = phi @ kde
        grad = (dphi * kde) @ Z / g
        lap = -(phi * kde) @ sq / g ** 2
        score = grad / f[:, None]
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.log(f), score, 0.5 * (score ** 2).sum(1) + lap / f - (score ** 2).sum(1)
    quad = 0.5 * np.einsum("nd,de,ne->n", r, P, r)
    if theta is not None:
        T, w = phi @ theta, np.tile(theta, (x.shape[0], 1))
        div_extra = 0.0
    else:
        Minv = np.linalg.inv(M)
        T = 0.5 * np.einsum("ns,st,nt->n", phi, Minv, phi) - phi @ v
        w = phi @ Minv - v
        div_extra = np.einsum("ns,st,nt->n", dphi, Minv * (Z @ Z.T), dphi) / g ** 2
    score = (dphi * w) @ Z / g - r @ P
    div = -np.einsum("ns,ns,s->n", phi, w, sq) / g ** 2 - np.trace(P) + div_extra
    return T - quad, score, 0.5 * (score ** 2).sum(1) + div


def close(a, b, rel=1e-10):
    np.testing.assert_allclose(a, b, rtol=0, atol=rel * np.abs(b).max())


@pytest.mark.parametrize("tilt", ["theta", "fvpd", "kde"])
@pytest.mark.parametrize("block_bytes", [2 ** 14, 64 * 2 ** 20])
def test_evaluation_matches_plain_formulas(parts, rng, tilt, block_bytes):
    feats, base, M, x = parts
    if tilt == "theta":
        kw = {"theta": rng.normal(size=S)}
    elif tilt == "fvpd":
        kw = {"M_chol": np.linalg.cholesky(M), "v": rng.normal(size=S) * 0.3}
    else:
        kw = {"kde_weights": np.abs(rng.normal(size=S)) * np.cos(feats.c) + 3.0}  # any weights; rows with f ≤ 0 skipped
    fitted = TGPFitted(feats, base, block_bytes=block_bytes, **kw)
    oracle_kw = {"theta": kw.get("theta"), "kde": kw.get("kde_weights")}
    if tilt == "fvpd":
        oracle_kw.update(M=M, v=kw["v"])
    logp, score, hyv = oracle(feats, base, x, **oracle_kw)
    ok = np.isfinite(logp)
    assert ok.sum() > 100
    close(fitted.log_density(x)[ok], logp[ok])
    close(fitted.grad_log_density(x)[ok], score[ok])
    close(fitted.hyvarinen_terms(x)[ok], hyv[ok])
    s, diag = fitted.score_hessian_diag(x)
    close(s[ok], score[ok])


def test_cos_sin_sums_threads_blocks_and_libm_fallback(parts, rng, monkeypatch):
    feats, _, _, x = parts
    x = np.concatenate([x, rng.normal(size=(9000, D))])  # > one task of rows: several threads share the rows
    C, B = rng.normal(size=(S, 2)), rng.normal(size=(S, 3))
    ang = (x - feats.shift) @ feats.frequencies.T + feats.phase
    ref_c, ref_s = np.cos(ang) @ C, np.sin(ang) @ B
    for threads in (1, 2, 3):
        c, s = feats.cos_sin_sums(x, C, B, threads=threads)
        close(c, ref_c, 1e-12)
        close(s, ref_s, 1e-12)
    far = x[:50] * 1e6  # angles beyond the kernel's exact range: the NumPy libm path, in blocks
    ang = (far - feats.shift) @ feats.frequencies.T + feats.phase
    c, s = feats.cos_sin_sums(far, C, B, block_rows=7)
    close(c, np.cos(ang) @ C, 1e-9)
    phi_t = feats.cos_features(x[:300])
    ang = (x[:300] - feats.shift) @ feats.frequencies.T + feats.phase
    np.testing.assert_allclose(phi_t, np.sqrt(2 / S) * np.cos(ang).T, rtol=0, atol=1e-14)
    # on several threads (feature ranges of a given buffer, split however small): the same values, bit for bit
    monkeypatch.setattr("tgpflow.features.rff.FEATURE_SPLIT_VALUES", 0)
    one = feats.cos_features(x, threads=1)
    assert np.array_equal(feats.cos_features(x, threads=3), one)
    buf = np.empty(S * x.shape[0] + 5)[:S * x.shape[0]].reshape(S, -1)
    assert feats.cos_features(x, out=buf, threads=2) is buf and np.array_equal(buf, one)
    ang = (x - feats.shift) @ feats.frequencies.T + feats.phase
    np.testing.assert_allclose(one, np.sqrt(2 / S) * np.cos(ang).T, rtol=0, atol=1e-14)


@pytest.mark.parametrize("method", ["fd", "fvpd"])
def test_dask_rows_score_like_numpy_rows(gaussian_mix, method):
    est = GPTiltedDensity(method=method, n_features=64, lam=1.0, bandwidth=0.5, normalizer_draws=1000).fit(gaussian_mix)
    X = gaussian_mix[:2000]
    with dask.config.set(scheduler="threads", num_workers=2):
        lazy = est.log_density(da.from_array(X, chunks=(300, X.shape[1]))).compute()
        grad = est.grad_log_density(da.from_array(X, chunks=(300, X.shape[1]))).compute()
    close(lazy, est.log_density(X), 1e-12)
    close(grad, est.grad_log_density(X), 1e-12)




def test_fvpd_gemm_and_triangular_solves_agree(gaussian_mix, monkeypatch):
    """FVPD's φᵀM⁻¹φ = ‖L⁻¹φ‖² by each way of :meth:`TGPFitted._inv_chol_norms` (the triangular product with the
    cached L⁻¹, its row panels by GEMM), and M⁻¹φ (score, Hyvärinen terms) by GEMM
    with the cached M⁻¹ (main thread, single-threaded BLAS) and by Cholesky solves (a worker thread of Dask's
    own compute with a multi-threaded BLAS, :func:`gemm_is_safe`)."""
    import tgpflow.models.tgp_fitted as tf

    est = GPTiltedDensity(method="fvpd", n_features=64, lam=0.3, bandwidth=0.5, normalizer_draws=1000).fit(gaussian_mix)
    X, fitted = gaussian_mix[:1500], est.fitted()
    by_way = {}
    for way in ("dtrmm", "panels"):
        monkeypatch.setattr(tf.TGPFitted, "_inv_chol_way", staticmethod(lambda way=way: way))
        by_way[way] = fitted.log_density(X)
    close(by_way["panels"], by_way["dtrmm"], 1e-12)
    monkeypatch.undo()
    got = {}
    for gemm in (True, False):
        monkeypatch.setattr(tf, "gemm_is_safe", lambda gemm=gemm: gemm)
        got[gemm] = fitted.log_density(X), fitted.grad_log_density(X), fitted.hyvarinen_terms(X)
    for by_gemm, by_solves in zip(got[True], got[False]):
        close(by_gemm, by_solves, 1e-12)
