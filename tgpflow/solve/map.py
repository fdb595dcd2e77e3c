"""MAP estimate of the GP-tilted density (docs/mathematics.md, "MAP, baselines and sampling", [Paisley et al.] Algorithm
1), float64.

Maximises ``F(θ) = θᵀψ − N log E_{N(μ,Σ)} e^{θᵀφ} − (λ/2)‖θ‖²`` from the pass's ``ψ, N``
only. The expectation is a fixed weighted point set ``(ζ_j, a_j)`` —
``E f ≈ Σ_j e^{a_j} f(ζ_j)`` — sampled once and reused (the paper's speed-up): S₂ seeded base
draws with ``a_j = −log S₂`` ([Paisley et al.] Algorithm 1's sampler, :func:`base_draws`), S₂ draws of the defensive
proposal q with ``a_j = log N(ζ_j | μ, Σ) − log q(ζ_j) − log S₂`` (:func:`proposal_point_set`, what
the estimator uses: it also reaches where a runaway tilt puts mass), or a quadrature rule (tests). For a fixed point set
F is concave and smooth, so Alg 1's plain ascent step (whose raw factor N makes it unstable for large N,
docs/mathematics.md, "Where the papers differ", item A9) is replaced by Newton steps ``θ ← θ + t (N Ĉov_w φ + λI)⁻¹ ∇F``
with backtracking on F; ``Ĉov_w`` is the weighted covariance of φ under ``w ∝ e^{a_j + θᵀφ(ζ_j)}``. Convergence is
reported, not assumed.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import scipy.linalg
from scipy.special import logsumexp

from tgpflow.core.gaussian_base import Base
from tgpflow.core.memory import DEFAULT_BLOCK_BYTES
from tgpflow.features.rff import RandomFourierFeatures
from tgpflow.solve.normalizer import base_proposal_blocks
from tgpflow.stats.tgp import block_rows_for

__all__ = ["PointSet", "base_draws", "proposal_point_set", "map_objective", "map_gradient", "solve_map"]


@dataclasses.dataclass(frozen=True)
class PointSet:
    """Points ζ (n, d) and log-weights a (n,) of an expectation rule under the base."""

    points: np.ndarray
    log_weights: np.ndarray


def base_draws(base: Base, n_draws: int, random_state: int | np.random.Generator | None) -> PointSet:
    """S₂ draws ζ of the base (N(μ, Σ), or a mixture) from an explicit seed, each of weight 1/S₂."""
    points = base.draws(int(n_draws), np.random.default_rng(random_state))
    return PointSet(points, np.full(int(n_draws), -np.log(n_draws)))


def proposal_point_set(base: Base, n_draws: int, random_state: int | np.random.Generator | None) -> PointSet:
    """S₂ draws ζ of the defensive proposal q around the base (:mod:`tgpflow.core.proposal`), each of weight
    base(ζ) / (S₂ q(ζ)): an importance rule for the same base expectation that also reaches where a
    runaway tilt puts its mass, so the fit's log E e^{θᵀφ} sees that mass and pays for it."""
    draws = list(base_proposal_blocks(base, int(n_draws), random_state))
    points = np.concatenate([p for p, _, _ in draws])
    log_q = np.concatenate([lq for _, lq, _ in draws])
    log_base = -np.concatenate([nl for _, _, nl in draws]) - base.log_norm  # the normalised base (Gaussian or mixture)
    return PointSet(points, log_base - log_q - np.log(n_draws))


class _Phi:
    """φ(ζ) of the point set in row blocks; cached when it fits ``cache_bytes``."""

    def __init__(self, features: RandomFourierFeatures, points: np.ndarray, block_bytes: int, cache_bytes: int):
        self.features, self.points = features, points
        self.rows = block_rows_for(features.n_features, features.n_dims, block_bytes)
        nbytes = 8 * points.shape[0] * features.n_features
        self.cache = [self._compute(s) for s in range(0, points.shape[0], self.rows)] if nbytes <= cache_bytes else None

    def _compute(self, start: int) -> np.ndarray:
        return self.features.cos_features(self.points[start:start + self.rows]).T  # φ (rows, S), Fortran-ordered

    def blocks(self):
        for k, start in enumerate(range(0, self.points.shape[0], self.rows)):
            yield start, (self.cache[k] if self.cache is not None else self._compute(start))


def _log_w(phi: _Phi, theta: np.ndarray, log_weights: np.ndarray) -> np.ndarray:
    out = np.empty(log_weights.shape[0])
    for start, block in phi.blocks():
        out[start:start + block.shape[0]] = log_weights[start:start + block.shape[0]] + block @ theta
    return out


def map_objective(theta: np.ndarray, psi: np.ndarray, n: int, features: RandomFourierFeatures, points: PointSet,
                  lam: float) -> float:
    """F(θ) = θᵀψ − N log Σ_j e^{a_j + θᵀφ(ζ_j)} − (λ/2)‖θ‖²."""
    phi = _Phi(features, points.points, DEFAULT_BLOCK_BYTES, 0)
    return float(theta @ psi - n * logsumexp(_log_w(phi, theta, points.log_weights)) - 0.5 * lam * theta @ theta)


def _weighted_moments(phi: _Phi, w: np.ndarray, second: bool) -> tuple[np.ndarray, np.ndarray | None]:
    """E_w φ and (optionally) Ĉov_w φ over the point set."""
    S = phi.features.n_features
    mean_phi = np.zeros(S)
    acc = np.zeros((S, S)) if second else None
    for start, block in phi.blocks():
        wb = w[start:start + block.shape[0]]
        mean_phi += wb @ block
        if acc is not None:
            acc += (block * wb[:, None]).T @ block
    return mean_phi, None if acc is None else acc - np.outer(mean_phi, mean_phi)


def map_gradient(theta: np.ndarray, psi: np.ndarray, n: int, features: RandomFourierFeatures, points: PointSet,
                 lam: float) -> np.ndarray:
    """∇F(θ) = ψ − N E_w φ − λθ, w ∝ e^{a_j + θᵀφ(ζ_j)} (docs/mathematics.md, "MAP, baselines and sampling")."""
    phi = _Phi(features, points.points, DEFAULT_BLOCK_BYTES, 0)
    lw = _log_w(phi, theta, points.log_weights)
    mean_phi, _ = _weighted_moments(phi, np.exp(lw - logsumexp(lw)), second=False)
    return psi - n * mean_phi - lam * theta


def solve_map(psi: np.ndarray, n: int, features: RandomFourierFeatures, points: PointSet, lam: float, *,
              max_iter: int = 100, tol: float = 1e-10, block_bytes: int = DEFAULT_BLOCK_BYTES,
              cache_bytes: int = 2**30, theta0: np.ndarray | None = None) -> tuple[np.ndarray, float, dict[str, object]]:
    """Damped Newton ascent of F; returns θ, F(θ) and info (iterations, converged, ‖∇F‖, ESS).

    Stops when the Newton decrement ``½ ∇Fᵀ H⁻¹ ∇F`` falls below ``tol · max(1, |F|)``.
    Each iteration costs O(S₂ S (S + d)); the data are never touched.
    """
    S = features.n_features
    phi = _Phi(features, points.points, block_bytes, cache_bytes)
    theta = np.zeros(S) if theta0 is None else np.array(theta0, dtype=np.float64)

    def evaluate(th: np.ndarray) -> tuple[float, np.ndarray]:
        lw = _log_w(phi, th, points.log_weights)
        return float(th @ psi - n * logsumexp(lw) - 0.5 * lam * th @ th), lw

    value, lw = evaluate(theta)
    info: dict[str, object] = {"method": "newton", "converged": False, "n_draws": int(points.points.shape[0])}
    for it in range(1, int(max_iter) + 1):
        w = np.exp(lw - logsumexp(lw))
        mean_phi, cov = _weighted_moments(phi, w, second=True)
        grad = psi - n * mean_phi - lam * theta
        hess = n * cov
        hess[np.diag_indices_from(hess)] += lam
        step = scipy.linalg.solve(hess, grad, assume_a="pos")
        decrement = 0.5 * float(grad @ step)
        info.update(iterations=it, grad_norm=float(np.linalg.norm(grad)), decrement=decrement,
                    ess=float(1.0 / np.sum(w * w)))
        if decrement <= tol * max(1.0, abs(value)):
            info["converged"] = True
            break
        t = 1.0
        while True:  # backtracking (Armijo) on the concave F
            cand = theta + t * step
            cand_value, cand_lw = evaluate(cand)
            if cand_value >= value + 0.25 * t * float(grad @ step) or t < 1e-10:
                break
            t *= 0.5
        if cand_value < value:  # no ascent possible at machine precision: stationary
            info["converged"] = True
            break
        theta, value, lw = cand, cand_value, cand_lw
    return theta, value, info
