"""Evaluation of a fitted GP-tilted density on blocks of rows (MATH.md §2, §4), float64.

An :class:`TGPEvaluator` holds only what evaluation needs (features, base, θ or the FVPD
predictive terms) — not the S×S statistics — so that it is cheap to ship to Dask workers.
Rows are processed in blocks sized from the same byte budget as the pass.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import scipy.linalg

from tgpflow.features.rff import RandomFourierFeatures
from tgpflow.solve.tgp import Base
from tgpflow.stats.tgp import DEFAULT_BLOCK_BYTES, block_rows_for

__all__ = ["TGPEvaluator"]


@dataclasses.dataclass(frozen=True, eq=False)
class TGPEvaluator:
    """log q(x) and ∇ log q(x) of an FD (``theta``) or FVPD (``M_chol``, ``v``) model."""

    features: RandomFourierFeatures
    base: Base
    theta: np.ndarray | None = None
    M_chol: np.ndarray | None = None
    v: np.ndarray | None = None
    block_bytes: int = DEFAULT_BLOCK_BYTES

    def _blocks(self, x: np.ndarray):
        rows = block_rows_for(self.features.n_features, self.features.n_dims, self.block_bytes)
        for start in range(0, x.shape[0], rows):
            yield start, x[start:start + rows]

    def _tilt(self, phi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The x-dependent tilt term and its weight vector per row (for the gradient)."""
        if self.theta is not None:
            return phi @ self.theta, np.broadcast_to(self.theta, phi.shape)
        w = scipy.linalg.cho_solve((self.M_chol, True), phi.T, check_finite=False).T  # M⁻¹φ
        return 0.5 * np.einsum("ns,ns->n", phi, w) - phi @ self.v, w - self.v

    def log_density(self, x: np.ndarray) -> np.ndarray:
        """Unnormalised log density (FD: θᵀφ − ½ quad; FVPD: ½φᵀM⁻¹φ − φᵀM⁻¹m − ½ quad)."""
        out = np.empty(x.shape[0])
        for start, xb in self._blocks(x):
            phi, _ = self.features.transform(xb)
            tilt, _ = self._tilt(phi)
            r = xb - self.base.mean
            out[start:start + xb.shape[0]] = tilt - 0.5 * np.einsum("nd,de,ne->n", r, self.base.precision, r)
        return out

    def grad_log_density(self, x: np.ndarray) -> np.ndarray:
        """Score: (1/γ) Zᵀ(φ' ⊙ w) − P(x − μ), w = θ (FD) or M⁻¹φ − v (FVPD)."""
        out = np.empty(x.shape)
        for start, xb in self._blocks(x):
            phi, dphi = self.features.transform(xb)
            _, w = self._tilt(phi)
            out[start:start + xb.shape[0]] = ((dphi * w) @ self.features.Z) / self.features.gamma \
                - (xb - self.base.mean) @ self.base.precision
        return out
