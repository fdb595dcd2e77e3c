"""Random features of the SDO kernel of root-Sobolev densities (MATH.md §8, seed 004; errata D1, D4).

``k^a(x, y) = ∫ cos(2π⟨y − x, z⟩) w^a(z) dz``, ``w^a(z) = 1/(1 + a(2π)^{2m_s}‖z‖^{2m_s})``, m_s > d/2.
Frequencies come from the EXACT radial sampler (the paper's finite radial grid truncates the
heavy tail, D4): ``z = rθ``, θ uniform on the sphere, ``r = (v/a)^{1/2m_s}/(2π)``,
``v = G1/G2`` Beta-prime with ``G1 ~ Gamma(d/2m_s)``, ``G2 ~ Gamma(1 − d/2m_s)``, drawn in logs:
``log G(α) = log G(α + 1) + log(U)/α`` (U uniform), because a Gamma draw of small shape underflows
to 0 in float64 (at d = 75, m_s = 38 the shape 1 − d/2m_s = 1/76 gives G2 = 0, hence an infinite
frequency: measured 13 zeros in 200 000 draws).
Features ``φ_t(x) = √(2/T) cos(2π z_tᵀx + b_t)`` — with the 2π inside the cosine (D1) — so
that ``φ(x)ᵀφ(y) → k^a(x, y)/W``.

A draw is a :class:`~tgpflow.features.rff.RandomFourierFeatures` with ``Z = 2π z(1)``,
``c = b`` and width ``γ = a^{1/2m_s}``: since ``z(a) = a^{−1/2m_s} z(1)``, an a-sweep reuses one
draw through ``with_bandwidth`` (the scaling law), and the compiled float64 sincos, the
shifted phase and the fingerprint all carry over. float64.
"""

from __future__ import annotations

import math

import numpy as np

from tgpflow.features.rff import RandomFourierFeatures

__all__ = ["draw_sdo_features", "sdo_width", "default_order", "log_gamma_draws"]


def default_order(d: int) -> int:
    """The smallest integer derivative order m_s > d/2."""
    return d // 2 + 1


def sdo_width(a: float, m_s: int) -> float:
    """γ = a^{1/2m_s}: the RFF width that turns the a = 1 frequencies into those of smoothness a."""
    if not (math.isfinite(a) and a > 0):
        raise ValueError(f"smoothness a must be a positive number; got {a!r}")
    return float(a) ** (1.0 / (2 * m_s))


def log_gamma_draws(shape: float, size: int, rng: np.random.Generator) -> np.ndarray:
    """log G for G ~ Gamma(shape, 1), finite for any shape > 0: ``G(α) = G(α + 1)·U^{1/α}`` in logs."""
    return np.log(rng.standard_gamma(shape + 1.0, size)) + np.log1p(-rng.random(size)) / shape


def draw_sdo_features(n_features: int, n_dims: int, *, m_s: int, a: float = 1.0, shift: np.ndarray | None = None,
                      random_state: int | np.random.Generator | None = None) -> RandomFourierFeatures:
    """T frequencies from the exact SDO radial sampler and phases b ~ U[0, 2π) (module docstring)."""
    d, T = int(n_dims), int(n_features)
    if not m_s > d / 2:
        raise ValueError(f"the SDO kernel needs a derivative order m_s > d/2 = {d / 2}; got m_s={m_s}")
    rng = np.random.default_rng(random_state)
    theta = rng.standard_normal((T, d))
    theta /= np.linalg.norm(theta, axis=1, keepdims=True)
    k = d / (2 * m_s)
    log_v = log_gamma_draws(k, T, rng) - log_gamma_draws(1.0 - k, T, rng)
    r = np.exp(log_v / (2 * m_s)) / (2 * np.pi)  # a = 1; other a by the width
    b = rng.uniform(0.0, 2.0 * np.pi, T)
    seed = int(random_state) if isinstance(random_state, (int, np.integer)) else None
    return RandomFourierFeatures(Z=2 * np.pi * r[:, None] * theta, c=b, gamma=sdo_width(a, m_s), shift=shift, seed=seed)
