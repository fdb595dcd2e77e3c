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

from tgpflow.features.bounds import ColumnBounds
from tgpflow.features.rff import RandomFourierFeatures
from tgpflow.models.blocked_score import BlockedScore
from tgpflow.solve.tgp import Base
from tgpflow.stats.tgp import DEFAULT_BLOCK_BYTES, block_rows_for

__all__ = ["TGPEvaluator", "BoundedEvaluator"]


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

    def _tilt_value(self, phi: np.ndarray) -> np.ndarray:
        """T per row without its gradient weights: FVPD's φᵀM⁻¹φ as ‖L⁻¹φ‖² (one triangular solve, not two)."""
        if self.theta is not None:
            return phi @ self.theta
        half = scipy.linalg.solve_triangular(self.M_chol, phi.T, lower=True, check_finite=False)
        return 0.5 * np.einsum("sn,sn->n", half, half) - phi @ self.v

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
            out[start:start + xb.shape[0]] = self._tilt_value(phi) - self._quad(xb)[0]
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

    @cached_property
    def _minv(self) -> np.ndarray:
        return scipy.linalg.cho_solve((self.M_chol, True), np.eye(self.M_chol.shape[0]))

    def score_hessian_diag(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The score and the diagonal of its Jacobian, ``∂s_j/∂x_j``, each (n, d) (MATH.md §2, §4).

        ``∂s_j/∂x_j = −(1/γ²) Σ_s φ_s w_s z_sj² − P_jj`` (+ FVPD's ``(1/γ²) Σ_st φ'_s z_sj M⁻¹_st φ'_t z_tj``);
        KDE-RFF: ``∂_j²f/f − s_j²``. Its row sums are the divergence of :meth:`hyvarinen_terms`; the
        diagonal itself is what a change of variables per column needs (:mod:`tgpflow.features.bounds`).
        """
        Z, g = self.features.Z, self.features.gamma
        score = np.empty(x.shape)
        diag = np.empty(x.shape)
        Z2 = Z * Z
        for start, xb in self._blocks(x):
            phi, dphi = self.features.transform(xb)
            rows = slice(start, start + xb.shape[0])
            if self.kde_weights is not None:
                f = phi @ self.kde_weights
                with np.errstate(divide="ignore", invalid="ignore"):
                    score[rows] = ((dphi * self.kde_weights) @ Z / g) / f[:, None]
                    diag[rows] = (-(phi * self.kde_weights) @ Z2 / g**2) / f[:, None] - score[rows] ** 2
                continue
            _, w = self._tilt(phi)
            _, Pr = self._quad(xb)
            score[rows] = (dphi * w) @ Z / g - Pr
            diag[rows] = -((phi * w) @ Z2) / g**2 - np.diag(self.base.precision)
            if self.theta is None:
                for j in range(Z.shape[1]):
                    a = dphi * Z[:, j]
                    diag[rows, j] += np.einsum("ns,ns->n", a @ self._minv, a) / g**2
        return score, diag


@dataclasses.dataclass(frozen=True, eq=False)
class BoundedEvaluator:
    """A fitted model of transformed rows t(x), evaluated in the data's units (:mod:`tgpflow.features.bounds`).

    ``log p(x) = log q_T(t(x)) + Σ log t'(x)``; rows on or beyond a bound have log density −inf and a
    NaN score. ``inner`` is the model in the transformed space (its ``base`` lives there too).
    """

    inner: TGPEvaluator
    bounds: ColumnBounds

    def _split(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        inside = self.bounds.inside(x)
        xi = x[inside]
        return inside, xi, self.bounds.forward(xi)

    def log_density(self, x: np.ndarray) -> np.ndarray:
        inside, xi, t = self._split(x)
        out = np.full(x.shape[0], -np.inf)
        out[inside] = self.inner.log_density(t) + self.bounds.log_jacobian(xi)
        return out

    def grad_log_density(self, x: np.ndarray) -> np.ndarray:
        inside, xi, t = self._split(x)
        out = np.full(x.shape, np.nan)
        _, d1, _, dlog, _ = self.bounds.derivatives(xi)
        out[inside] = d1 * self.inner.grad_log_density(t) + dlog
        return out

    def hyvarinen_terms(self, x: np.ndarray) -> np.ndarray:
        """½‖s‖² + div s in the data's units, from the transformed model's score and Jacobian diagonal."""
        inside, xi, t = self._split(x)
        out = np.full(x.shape[0], np.nan)
        _, d1, d2, dlog, ddlog = self.bounds.derivatives(xi)
        s_t, h_t = self.inner.score_hessian_diag(t)
        s = d1 * s_t + dlog
        out[inside] = 0.5 * np.einsum("nd,nd->n", s, s) + (d2 * s_t + d1 * d1 * h_t + ddlog).sum(axis=1)
        return out
