"""Evaluation of a fitted GP-tilted density on blocks of rows (MATH.md §2–§5, §10), float64.

An :class:`TGPEvaluator` holds only what evaluation needs (features, base, and θ, the FVPD
predictive terms, or ψ/N for KDE-RFF) — not the S×S statistics — so that it is cheap to
ship to Dask workers. Rows are processed in blocks sized from the same byte budget as the
pass. Three kinds of tilt:

* ``theta`` (FD, NCFD at a level σ, MAP): ``T(x) = θᵀφ(x)``;
* ``M_chol, v`` (FVPD): ``T(x) = ½φᵀM⁻¹φ − φᵀv`` (MATH.md §4);
* ``kde_weights = ψ/N`` (KDE-RFF baseline, MATH.md §5): ``log p(x) = log(φ(x)ᵀψ/N)`` with no
  base (−inf where the RFF estimate is ≤ 0).

``hyvarinen_terms`` gives ``½‖s(x)‖² + div s(x)`` per row with the closed-form divergence
(MATH.md §2, §4, §10), for the streamed score-matching loss.
"""

from __future__ import annotations

import dataclasses
from functools import cached_property

import numpy as np
import scipy.linalg

from tgpflow.features.rff import RandomFourierFeatures
from tgpflow.models.blocked_score import BlockedScore
from tgpflow.solve.tgp import Base
from tgpflow.stats.tgp import DEFAULT_BLOCK_BYTES, block_rows_for

__all__ = ["TGPEvaluator"]


@dataclasses.dataclass(frozen=True, eq=False)
class TGPEvaluator(BlockedScore):
    """log q(x), ∇ log q(x) and the Hyvärinen terms of one fitted tilt (see module docstring)."""

    features: RandomFourierFeatures
    base: Base
    theta: np.ndarray | None = None
    M_chol: np.ndarray | None = None
    v: np.ndarray | None = None
    kde_weights: np.ndarray | None = None
    block_bytes: int = DEFAULT_BLOCK_BYTES

    def _blocks(self, x: np.ndarray):
        rows = block_rows_for(self.features.n_features, self.features.n_dims, self.block_bytes)
        for start in range(0, x.shape[0], rows):
            yield start, x[start:start + rows]

    @cached_property
    def _sq_norms(self) -> np.ndarray:
        return np.einsum("sd,sd->s", self.features.Z, self.features.Z)

    @cached_property
    def _minv_zz(self) -> np.ndarray:
        """M⁻¹ ⊙ ZZᵀ (FVPD divergence)."""
        minv = scipy.linalg.cho_solve((self.M_chol, True), np.eye(self.M_chol.shape[0]))
        return minv * (self.features.Z @ self.features.Z.T)

    def _tilt(self, phi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The tilt T per row and its weight vector w (∇T = (1/γ)Zᵀ(φ' ⊙ w))."""
        if self.theta is not None:
            return phi @ self.theta, np.broadcast_to(self.theta, phi.shape)
        w = scipy.linalg.cho_solve((self.M_chol, True), phi.T, check_finite=False).T  # M⁻¹φ
        return 0.5 * np.einsum("ns,ns->n", phi, w) - phi @ self.v, w - self.v

    def _quad(self, xb: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        r = xb - self.base.mean
        Pr = r @ self.base.precision
        return 0.5 * np.einsum("nd,nd->n", r, Pr), Pr

    def log_density(self, x: np.ndarray) -> np.ndarray:
        """Unnormalised log density: T(x) − ½(x−μ)ᵀP(x−μ), or log(φᵀψ/N) for KDE-RFF."""
        out = np.empty(x.shape[0])
        for start, xb in self._blocks(x):
            phi, _ = self.features.transform(xb)
            if self.kde_weights is not None:
                f = phi @ self.kde_weights
                with np.errstate(divide="ignore", invalid="ignore"):
                    out[start:start + xb.shape[0]] = np.where(f > 0, np.log(np.where(f > 0, f, 1.0)), -np.inf)
                continue
            tilt, _ = self._tilt(phi)
            out[start:start + xb.shape[0]] = tilt - self._quad(xb)[0]
        return out

    def _score_block(self, xb: np.ndarray, with_div: bool = True) -> tuple[np.ndarray, np.ndarray | None]:
        """(score, divergence of the score or None) for one block: ∇ log q (MATH.md §2, §4; KDE-RFF: ∇f/f)."""
        Z, g = self.features.Z, self.features.gamma
        phi, dphi = self.features.transform(xb)
        if self.kde_weights is not None:
            f = phi @ self.kde_weights
            grad_f = (dphi * self.kde_weights) @ Z / g
            lap_f = -(phi * self.kde_weights) @ self._sq_norms / g**2
            with np.errstate(divide="ignore", invalid="ignore"):
                score = grad_f / f[:, None]
                div = lap_f / f - np.einsum("nd,nd->n", score, score) if with_div else None
            return score, div
        _, w = self._tilt(phi)
        _, Pr = self._quad(xb)
        score = (dphi * w) @ Z / g - Pr
        if not with_div:
            return score, None
        div = -np.einsum("ns,ns,s->n", phi, w, self._sq_norms) / g**2 - np.trace(self.base.precision)
        if self.theta is None:  # FVPD: w depends on x through M⁻¹φ
            div += np.einsum("ns,ns->n", dphi @ self._minv_zz, dphi) / g**2
        return score, div
