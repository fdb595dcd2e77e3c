"""Held-out selection of λ (and η) from validation statistics — no extra pass (MATH.md §2–§4).

The held-out loss of a tilted density with parameter θ is the mean Hyvärinen score-matching
loss over the validation rows, ``J_val(θ) = fd_loss(val, θ; λ=0)/N_val``: a quadratic in θ
whose coefficients are the validation statistics (with the base of the training rows). Each
method's θ(λ) is ``(r(λ) I + A₀)⁻¹ b`` with A₀ = ZZᵀ⊙Φ' (FD, FVPD's μ̂) or ZZᵀ⊙Ā (NCFD) of the
training rows, so one eigendecomposition ``A₀ = VΛVᵀ`` (O(S³)) and ``B = VᵀA₀ᵛᵃˡV`` make
every grid point O(S²):

* FD:   r = λγ²,   NCFD: r = λH (θ scored at the data level, σ = 0);
* FVPD: r = λγ²η and the score is the posterior expectation
  ``E_{θ~q}[J_val(θ)] = J_val(μ̂) + (η/2N_val) Σ_j B_jj/(r + Λ_j)`` (from Σ̂ = γ²η(rI + A₀)⁻¹) —
  the expected held-out Fisher divergence of the tilted density under q(θ). (The Hyvärinen
  loss of the predictive density itself is not quadratic in the statistics; it can be
  computed by a streamed evaluation, ``tgpflow.metrics.hyvarinen_loss``.)
"""

from __future__ import annotations

import numpy as np

from tgpflow.features.rff import RandomFourierFeatures
from tgpflow.solve.base_learning import fd_loss
from tgpflow.solve.tgp import Base, fd_system
from tgpflow.stats.tgp import TGPStats

__all__ = ["DEFAULT_LAM_GRID", "heldout_loss", "GridScorer"]

#: λ grid of ``lam="auto"``: 19 values, 10⁻⁴ … 10², three per decade (contains the paper's 0.1).
DEFAULT_LAM_GRID = tuple(float(v) for v in np.logspace(-4, 2, 19))


def heldout_loss(val: TGPStats, features: RandomFourierFeatures, base: Base, theta: np.ndarray) -> float:
    """Mean Hyvärinen loss of the tilted density θ over the rows of ``val`` (from statistics)."""
    if val.n == 0:
        raise ValueError("the validation part has no rows; raise validation_fraction or add rows")
    return fd_loss(val, features, base, theta, 0.0) / val.n


class GridScorer:
    """Scores θ(r) = (rI + A₀)⁻¹ b on validation statistics in O(S²) per ridge value r."""

    def __init__(self, A0: np.ndarray, b: np.ndarray, val: TGPStats, features: RandomFourierFeatures, base: Base):
        if val.n == 0:
            raise ValueError("the validation part has no rows; raise validation_fraction or add rows")
        self.lam_eig, self.V = np.linalg.eigh(0.5 * (A0 + A0.T))
        self.beta = self.V.T @ b
        A_val, b_val = fd_system(val, features, base, 0.0)
        self.B = self.V.T @ A_val @ self.V
        self.c = self.V.T @ b_val
        g2, P = features.gamma**2, base.precision
        m = val.moments
        dm = m.mean - base.mean
        self.const = (0.5 * float(np.sum((P @ P) * (m.m2 + m.n * np.outer(dm, dm)))) - m.n * float(np.trace(P))) / m.n
        self.scale = 1.0 / (g2 * m.n)
        self.n_val = m.n

    def theta(self, r: float) -> np.ndarray:
        return self.V @ (self.beta / (self.lam_eig + r))

    def loss(self, r: float) -> float:
        """J_val(θ(r))."""
        t = self.beta / (self.lam_eig + r)
        return float((0.5 * t @ (self.B @ t) - t @ self.c) * self.scale + self.const)

    def expected_loss(self, r: float, eta: float) -> float:
        """E_{θ~N(θ(r), γ²η(rI+A₀)⁻¹)} J_val(θ) (FVPD, module docstring)."""
        return self.loss(r) + 0.5 * eta * float(np.sum(np.diag(self.B) / (self.lam_eig + r))) / self.n_val
