"""Closed-form solves of the GP-tilted density after the pass (docs/mathematics.md, "Fisher divergence and base-measure
learning" and "The Fisher variational predictive distribution"), float64.

All inputs are the one-pass :class:`~tgpflow.stats.tgp.TGPStats`, the feature draw and the base
N(μ, Σ) (:mod:`tgpflow.core.gaussian_base`; by default the exact full-data moments of the pass), so
nothing needs μ, Σ before the pass. ψ' is formed from ``U − u(μ − x₀)ᵀ`` (docs/mathematics.md, "Features and the pilot
pass").
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from tgpflow.core.gaussian_base import Base
from tgpflow.features.rff import RandomFourierFeatures
from tgpflow.solve.linalg import SPDFactor, spd_factor, spd_solve
from tgpflow.stats.tgp import TGPStats

__all__ = ["psi_prime", "base_log_sum", "base_hyvarinen_sum", "fd_system", "solve_fd", "FVPDSolution", "solve_fvpd",
           "feature_moments_under_base", "fvpd_predictive"]


def psi_prime(stats: TGPStats, features: RandomFourierFeatures, base: Base) -> np.ndarray:
    """ψ' = rowsum((U − u(μ − x₀)ᵀ) ⊙ Z P) = Σ_i φ'(x_i) ⊙ Z P (x_i − μ)  (docs/mathematics.md, "Fisher divergence and
    base-measure learning"); under a mixture base, ψ' = −Σ_i φ'(x_i) ⊙ Z s₀(x_i) = −rowsum(V ⊙ Z) with the pass's V = Σ
    φ' s₀ᵀ (docs/gp_tilted.md, "A mixture base"): the same sum, since a Gaussian's s₀ is −P(x − μ)."""
    stats.check_mixture(base.mixture)
    if base.mixture is not None:
        return -np.einsum("sd,sd->s", stats.V, features.Z)
    centred = stats.U - np.outer(stats.u, base.mean - features.shift)
    return np.einsum("sd,sd->s", centred, features.Z @ base.precision)


def scatter(stats: TGPStats, mean: np.ndarray) -> np.ndarray:
    """Σ_i (x_i − μ)(x_i − μ)ᵀ from the moments."""
    m = stats.moments
    dm = m.mean - mean
    return m.m2 + m.n * np.outer(dm, dm)


def base_log_sum(stats: TGPStats, base: Base) -> float:
    """Σ_i of the unnormalised log base at the rows (:class:`~tgpflow.core.gaussian_base.Base`): −½ Σ (x−μ)ᵀP(x−μ)
    from the moments, or a mixture's Σ log m(x) (the pass's ``base_sums``) + N · ½ log|2πΣ|."""
    stats.check_mixture(base.mixture)
    if base.mixture is not None:
        return float(stats.base_sums[0]) + stats.n * base.log_norm
    return -0.5 * float(np.sum(base.precision * scatter(stats, base.mean)))


def base_hyvarinen_sum(stats: TGPStats, base: Base) -> float:
    """Σ_i ½‖s₀(x_i)‖² + Δ log base(x_i): the base's own score-matching terms (½ Σ (x−μ)ᵀP²(x−μ) − N tr P for a
    Gaussian; the pass's ``base_sums`` for a mixture)."""
    stats.check_mixture(base.mixture)
    if base.mixture is not None:
        return float(stats.base_sums[1])
    P = base.precision
    return 0.5 * float(np.sum((P @ P) * scatter(stats, base.mean))) - stats.n * float(np.trace(P))


def fd_system(stats: TGPStats, features: RandomFourierFeatures, base: Base, lam: float) -> tuple[np.ndarray, np.ndarray]:
    """A = λγ² I + (ZZᵀ) ⊙ Φ',  b = γ ψ' + ‖Z‖² ⊙ ψ  (docs/mathematics.md, "Fisher divergence and base-measure
    learning")."""
    stats.check_features(features)
    Z, g = features.Z, features.gamma
    A = (Z @ Z.T) * stats.gram
    A[np.diag_indices_from(A)] += lam * g * g
    b = g * psi_prime(stats, features, base) + np.einsum("sd,sd->s", Z, Z) * stats.psi
    return A, b


def solve_fd(stats: TGPStats, features: RandomFourierFeatures, base: Base, lam: float) -> tuple[np.ndarray, float, dict[str, object]]:
    """θ_FD = A⁻¹ b; returns θ, the training objective L(θ) − L(0) = (½θᵀAθ − θᵀb)/γ², and solver info."""
    A, b = fd_system(stats, features, base, lam)
    theta, info = spd_solve(A, b, what="FD")
    objective = float((0.5 * theta @ (A @ theta) - theta @ b) / features.gamma**2)
    return theta, objective, info


def feature_moments_under_base(features: RandomFourierFeatures, base: Base) -> tuple[np.ndarray, np.ndarray]:
    """μ_φ = E φ(x) and Σ_φ = Cov φ(x) for x ~ N(μ, Σ), exactly (docs/mathematics.md, "The Fisher variational predictive
    distribution", eqs 32–33); under a mixture base, the mixture of its components' first and second moments: μ_φ = Σ
    π_k μ_φ,k and Σ_φ = Σ π_k (Σ_φ,k + μ_φ,k μ_φ,kᵀ) − μ_φ μ_φᵀ."""
    if base.mixture is None:
        mu_phi, second = _feature_moments(features, base.mean, base.cov)
    else:
        mix = base.mixture
        mu_phi, second = np.zeros(features.n_features), np.zeros((features.n_features, features.n_features))
        for w, mean, cov in zip(mix.weights, mix.means, mix.covariances, strict=True):
            m_k, s_k = _feature_moments(features, mean, cov)
            mu_phi += w * m_k
            second += w * s_k
    cov_phi = second - np.outer(mu_phi, mu_phi)
    return mu_phi, 0.5 * (cov_phi + cov_phi.T)


def _feature_moments(features: RandomFourierFeatures, mean: np.ndarray,
                     cov: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(E φ, E φφᵀ) for x ~ N(mean, cov) (docs/mathematics.md, "The Fisher variational predictive distribution")."""
    Z, g = features.Z, features.gamma
    K = Z @ cov @ Z.T
    q = np.diag(K).copy()
    phi, dphi = features.transform(mean[None, :])
    phi, dphi = phi[0], dphi[0]
    mu_phi = np.exp(-q / (2 * g * g)) * phi
    qq = q[:, None] + q[None, :]
    d_minus = np.exp(-(qq - 2 * K) / (2 * g * g))
    d_plus = np.exp(-(qq + 2 * K) / (2 * g * g))
    second = 0.5 * (d_minus + d_plus) * np.outer(phi, phi) + 0.5 * (d_minus - d_plus) * np.outer(dphi, dphi)
    return mu_phi, second


@dataclasses.dataclass(frozen=True)
class FVPDSolution:
    """q(θ) = N(μ̂, Σ̂) and the predictive terms m, M (Cholesky factor) and v = M⁻¹m."""

    posterior_mean: np.ndarray
    posterior_precision: np.ndarray
    m: np.ndarray
    M_chol: np.ndarray
    v: np.ndarray
    info: dict[str, object]


def solve_fvpd(stats: TGPStats, features: RandomFourierFeatures, base: Base, lam: float, eta: float) -> FVPDSolution:
    """FVPD ([Paisley et al.] Algorithm 4, docs/mathematics.md, "The Fisher variational predictive distribution") with
    the sum convention of eq 29."""
    A_eta, b = fd_system(stats, features, base, lam * eta)  # μ̂ = θ_FD with λ → λη
    post_mean, info = spd_solve(A_eta, b, what="FVPD posterior")
    post_precision = A_eta / (features.gamma**2 * eta)  # Σ̂⁻¹ = λI + ZZᵀ⊙Φ'/(γ²η)
    mu_phi, cov_phi = feature_moments_under_base(features, base)
    m = mu_phi - post_precision @ post_mean
    factor = _predictive_factor(cov_phi + post_precision)
    v = factor.solve(m)
    info = dict(info, M_jitter=factor.jitter)
    return FVPDSolution(post_mean, post_precision, m, factor.chol, v, info)


def _predictive_factor(M: np.ndarray) -> SPDFactor:
    factor = spd_factor(M, what="FVPD predictive M")
    if factor is None:
        raise FloatingPointError("the FVPD predictive matrix M = Σ_φ + Σ̂⁻¹ is not positive definite; increase lam")
    return factor


def fvpd_predictive(A0: np.ndarray, b: np.ndarray, mu_phi: np.ndarray, cov_phi: np.ndarray, lam: float, eta: float,
                    g2: float) -> tuple[np.ndarray, np.ndarray]:
    """(Cholesky factor of M, v = M⁻¹m) of FVPD at (λ, η) from ``A0 = ZZᵀ⊙Φ'`` and ``b`` (docs/mathematics.md, "The
    Fisher variational predictive distribution").

    ``Σ̂⁻¹ = λI + A0/(γ²η)`` and, since ``(λγ²η I + A0) μ̂ = b``, ``Σ̂⁻¹μ̂ = b/(γ²η)``: so
    ``M = Σ_φ + λI + A0/(γ²η)`` and ``m = μ_φ − b/(γ²η)`` need no solve for μ̂ (a selection grid).
    """
    M = cov_phi + A0 / (g2 * eta)
    M[np.diag_indices_from(M)] += lam
    factor = _predictive_factor(M)
    return factor.chol, factor.solve(mu_phi - b / (g2 * eta))


def eta_default(features: RandomFourierFeatures) -> float:
    """η = 1/γ² ([Paisley et al.] §IV)."""
    return 1.0 / features.gamma**2


def lam_is_valid(lam: float) -> bool:
    return math.isfinite(lam) and lam > 0
