"""Closed-form NCFD solve after the pass (docs/mathematics.md, "Noise-conditional Fisher divergence", [Paisley et al.]
Algorithm 3), float64.

``(λ H I + ZZᵀ ⊙ Ā) θ = b``,
``b = Σ_h [ (1/γ_h) δ_h ⊙ ψ'_h + (1/γ_h²) κ_h ⊙ δ_h ⊙ ψ_h ]`` with
``δ_h(s) = exp(−½ r_h ‖z_s‖²)``, ``r_h = σ_h²/γ_h²``, ``κ_h(s) = z_sᵀ P_h Σ z_s``,
``P_h = (Σ + σ_h² I)⁻¹`` and ``ψ'_h = rowsum((U_h − u_h(μ − x₀)ᵀ) ⊙ Z P_h)``.
H = 1 (σ = 0 only) is exactly FD ([Paisley et al.] Algorithm 2) scaled by 1/γ².
"""

from __future__ import annotations

import numpy as np

from tgpflow.core.gaussian_base import Base
from tgpflow.features.noise import level_bandwidth
from tgpflow.features.rff import RandomFourierFeatures
from tgpflow.solve.linalg import spd_solve
from tgpflow.stats.ncfd import NCFDStats

__all__ = ["ncfd_system", "solve_ncfd", "level_base"]


def level_base(base: Base, sigma: float) -> Base:
    """The base at noise level σ: N(μ, Σ + σ²I) (a mixture base: every component's Σ_k + σ²I)."""
    if sigma == 0.0:
        return base
    cov = base.cov + sigma * sigma * np.eye(base.cov.shape[0])
    precision = np.linalg.inv(cov)
    mixture = None if base.mixture is None else base.mixture.at_level(sigma)
    return Base(base.mean, cov, 0.5 * (precision + precision.T), mixture)


def ncfd_system(stats: NCFDStats, features: RandomFourierFeatures, base: Base, lam: float) -> tuple[np.ndarray, np.ndarray]:
    """A = λH I + ZZᵀ ⊙ Ā and b of Alg 3 (docs/mathematics.md, "Noise-conditional Fisher divergence"); under a mixture
    base, b is that of the Gaussian with the mixture's mean and covariance (``base.mean``, ``base.cov``) plus the pass's
    estimate of the rest."""
    stats.check_features(features)
    Z, H = features.Z, stats.n_levels
    A = (Z @ Z.T) * stats.abar
    A[np.diag_indices_from(A)] += lam * H
    q = np.einsum("sd,sd->s", Z, Z)
    b = np.zeros(features.n_features)
    offset = base.mean - features.shift
    stats.check_mixture(base.mixture)
    for h, sigma in enumerate(stats.sigmas):
        sigma = float(sigma)
        g_h = level_bandwidth(features.gamma, sigma)
        delta = np.exp(-0.5 * (sigma * sigma / (g_h * g_h)) * q)
        if base.mixture is not None:  # the departure from the mixture's Gaussian: −(1/γ_h) rowsum(V_h ⊙ Z)
            b -= np.einsum("sd,sd->s", stats.V[h], Z) / g_h  # (docs/gp_tilted.md, "NCFD")
        lb = level_base(base, sigma)
        ZP = Z @ lb.precision
        kappa = np.einsum("sd,sd->s", ZP @ base.cov, Z)  # z_sᵀ P_h Σ z_s
        psi_prime = np.einsum("sd,sd->s", stats.U[h] - np.outer(stats.u[h], offset), ZP)
        b += delta * psi_prime / g_h + kappa * delta * stats.psi[h] / (g_h * g_h)
    return A, b


def solve_ncfd(stats: NCFDStats, features: RandomFourierFeatures, base: Base, lam: float) -> tuple[np.ndarray, float, dict[str, object]]:
    """θ_NCFD; returns θ, the objective change (1/H)(½θᵀAθ − θᵀb) (eq 27 + prior, minus its value at θ = 0), info."""
    A, b = ncfd_system(stats, features, base, lam)
    theta, info = spd_solve(A, b, what="NCFD")
    objective = float((0.5 * theta @ (A @ theta) - theta @ b) / stats.n_levels)
    return theta, objective, info
