"""The full FD objective and base-measure learning (docs/mathematics.md, "Fisher divergence and base-measure learning",
[Paisley et al.] eqs 12–16), float64.

``fd_loss`` is the complete Fisher-divergence objective of the tilted density as a function
of θ AND the base (μ, P), from the one-pass statistics alone:

``L = ½θᵀ(ZZᵀ⊙Φ')θ/γ² − θᵀ(γψ' + ‖Z‖²⊙ψ)/γ² + (λ/2)‖θ‖² + ½ tr(P² C) − N tr P``,
``C = Σ_i (x_i − μ)(x_i − μ)ᵀ = m2 + N(x̄ − μ)(x̄ − μ)ᵀ``.

With λ = 0 and divided by N it is the mean Hyvärinen score-matching loss
``J = mean_i[½‖s(x_i)‖² + div s(x_i)]`` of the model over the rows the statistics came
from — which is how held-out rows are scored without a new pass (``tgpflow.solve.select``).

``learn_base`` alternates θ ↔ μ ↔ Σ (coordinate descent): θ by the FD solve, μ by its exact
minimiser, P by the O(d³) eigen-solution of the Lyapunov equation ``Σ̄P + PΣ̄ = Q``. No update
increases L (each is an exact block minimiser of a convex block; a P that is not ≻ 0 is
rejected with a warning and the old Σ kept).
"""

from __future__ import annotations

import warnings

import numpy as np

from tgpflow.core.gaussian_base import Base
from tgpflow.errors import TgpflowWarning
from tgpflow.features.rff import RandomFourierFeatures
from tgpflow.solve.tgp import base_hyvarinen_sum, fd_system, scatter, solve_fd
from tgpflow.stats.tgp import TGPStats

__all__ = ["fd_loss", "update_mean", "update_cov", "solve_lyapunov", "learn_base"]


def fd_loss(stats: TGPStats, features: RandomFourierFeatures, base: Base, theta: np.ndarray, lam: float = 0.0) -> float:
    """The FD objective L(θ, μ, P) as a SUM over the rows of ``stats`` (see module docstring)."""
    A, b = fd_system(stats, features, base, lam)
    g2 = features.gamma**2
    return float((0.5 * theta @ (A @ theta) - theta @ b) / g2) + base_hyvarinen_sum(stats, base)


def update_mean(stats: TGPStats, features: RandomFourierFeatures, base: Base, theta: np.ndarray) -> Base:
    """μ ← x̄ − (1/γ) Σ Zᵀ(θ ⊙ u)/N — the exact minimiser of L in μ (eq 12)."""
    shift = base.cov @ (features.Z.T @ (theta * stats.u)) / (features.gamma * stats.n)
    return Base(stats.moments.mean - shift, base.cov, base.precision)


def solve_lyapunov(Sbar: np.ndarray, Q: np.ndarray) -> np.ndarray:
    """P with Σ̄P + PΣ̄ = Q for symmetric Σ̄ ≻ 0, by Σ̄'s eigenvectors in O(d³) (docs/mathematics.md, "Where the papers
    differ", item A4)."""
    lam, V = np.linalg.eigh(Sbar)
    P = V @ ((V.T @ Q @ V) / (lam[:, None] + lam[None, :])) @ V.T
    return 0.5 * (P + P.T)


def update_cov(stats: TGPStats, features: RandomFourierFeatures, base: Base, theta: np.ndarray) -> Base:
    """Σ ← P⁻¹ with Σ̄P + PΣ̄ = Q, Q = 2I + (ZᵀΥ + ΥᵀZ)/γ, Υ = diag(θ)(U − u(μ − x₀)ᵀ)/N (eqs 13–16)."""
    n, d = stats.n, base.mean.shape[0]
    Sbar = scatter(stats, base.mean) / n
    Ups = theta[:, None] * (stats.U - np.outer(stats.u, base.mean - features.shift)) / n
    ZU = features.Z.T @ Ups
    Q = 2.0 * np.eye(d) + (ZU + ZU.T) / features.gamma
    P = solve_lyapunov(Sbar, Q)
    try:
        chol = np.linalg.cholesky(P)
    except np.linalg.LinAlgError:
        warnings.warn("the base-covariance update gave a precision that is not positive definite; "
                      "kept the previous Σ", TgpflowWarning, stacklevel=2)
        return base
    inv_chol = np.linalg.inv(chol)
    cov = inv_chol.T @ inv_chol
    return Base(base.mean, 0.5 * (cov + cov.T), P)


def learn_base(stats: TGPStats, features: RandomFourierFeatures, base: Base, lam: float, *, max_iter: int = 20,
               tol: float = 1e-8) -> tuple[np.ndarray, Base, dict[str, object]]:
    """Coordinate descent θ → μ → Σ from the statistics alone (no new pass).

    Returns θ (solved for the final base), the base, and info with the objective after every
    update (``history``, a sum over rows) and whether the relative decrease per sweep fell
    below ``tol``.
    """
    history: list[float] = []
    converged = False
    theta, _, info = solve_fd(stats, features, base, lam)
    history.append(fd_loss(stats, features, base, theta, lam))
    for sweep in range(1, int(max_iter) + 1):
        start = history[-1]
        base = update_mean(stats, features, base, theta)
        history.append(fd_loss(stats, features, base, theta, lam))
        base = update_cov(stats, features, base, theta)
        history.append(fd_loss(stats, features, base, theta, lam))
        theta, _, info = solve_fd(stats, features, base, lam)
        history.append(fd_loss(stats, features, base, theta, lam))
        if start - history[-1] <= tol * max(1.0, abs(start)):
            converged = True
            break
    return theta, base, dict(info, base_sweeps=sweep, base_converged=converged, history=history)
