"""The fitted root-Sobolev density as a value: ``f = wᵀφ``, ``p ∝ f²`` on SDO random features
(docs/root_sobolev.md).

:class:`RSRFitted` holds the feature draw (whitening folded into the frequencies) and the
coefficients w, and evaluates ``log p = log f²``, the score ``2∇f/f`` and the exact Hyvärinen terms
``2Δf/f`` (no Hutchinson probes). ``method="kde_sdo"`` is the KDE-SDO baseline
``p ∝ f = φᵀΣφ(x_i)/N``: log f (−inf where f ≤ 0) and the score ∇f/f. How f makes the density is the
method object's (:mod:`tgpflow.models.sobolev_methods`). It has no Gaussian base, so
it is sampled by MCMC, not by importance resampling. Rows in blocks sized from a byte budget; float64.
"""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar

import numpy as np

from tgpflow.core.memory import DEFAULT_BLOCK_BYTES
from tgpflow.features.rff import RandomFourierFeatures
from tgpflow.models.fitted import Fitted, prefixed
from tgpflow.models.sobolev_methods import SobolevMethod, sobolev_method
from tgpflow.stats.tgp import block_rows_for

__all__ = ["RSRFitted"]


@dataclasses.dataclass(frozen=True, eq=False)
class RSRFitted(Fitted):
    """``log f(x)²`` (RSR) or ``log f(x)`` (KDE-SDO), f = wᵀφ(x), with its score (see the module docstring)."""

    kind: ClassVar[str] = "rsr"
    base: ClassVar[None] = None
    features: RandomFourierFeatures
    coef: np.ndarray  # w, (T,)
    method: str = "rsr"
    block_bytes: int = DEFAULT_BLOCK_BYTES

    def __post_init__(self) -> None:
        sobolev_method(self.method)  # a known method, or a ValueError naming them
        if np.shape(self.coef) != (self.features.n_features,):
            raise ValueError(f"w must have shape ({self.features.n_features},); got {np.shape(self.coef)}")

    @property
    def law(self) -> SobolevMethod:
        """How f makes the density (:func:`~tgpflow.models.sobolev_methods.sobolev_method` of ``method``)."""
        return sobolev_method(self.method)

    @property
    def draw(self) -> RandomFourierFeatures:
        return self.features

    def to_arrays(self) -> dict[str, np.ndarray]:
        out = {f"features.{k}": v for k, v in self.features.to_arrays().items()}
        out["coef"] = self.coef
        return out

    def to_meta(self) -> dict[str, Any]:
        return {"kind": self.kind, "method": self.method, "block_bytes": int(self.block_bytes),
                "feature_seed": self.features.seed}

    @classmethod
    def from_arrays(cls, arrays: dict[str, np.ndarray], meta: dict[str, Any]) -> RSRFitted:
        features = RandomFourierFeatures.from_arrays(prefixed(arrays, "features."), seed=meta.get("feature_seed"))
        return cls(features, np.asarray(arrays["coef"], dtype=np.float64), meta.get("method", "rsr"),
                   int(meta.get("block_bytes", DEFAULT_BLOCK_BYTES)))

    # -- evaluation ---------------------------------------------------------------------------
    def _f(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """f(x) and ∇f(x) = (1/γ) Zᵀ(w ⊙ φ'(x)) per row."""
        rows = block_rows_for(self.features.n_features, self.features.n_dims, int(self.block_bytes))
        f = np.empty(x.shape[0])
        grad = np.empty(x.shape)
        for s in range(0, x.shape[0], rows):
            phi, dphi = self.features.transform(x[s:s + rows])
            f[s:s + rows] = phi @ self.coef
            grad[s:s + rows] = (dphi * self.coef) @ self.features.Z / self.features.gamma
        return f, grad

    def log_density(self, x: np.ndarray) -> np.ndarray:
        """log f(x)² (unnormalised; −inf where f = 0), or log of the KDE-SDO estimate."""
        return self.law.log_density(self._f(x)[0])

    def grad_log_density(self, x: np.ndarray) -> np.ndarray:
        """2∇f/f; ∇f/f for KDE-SDO (p ∝ f^power: the power times ∇f/f)."""
        f, grad = self._f(x)
        with np.errstate(divide="ignore", invalid="ignore"):
            return float(self.law.power) * grad / f[:, None]

    def hyvarinen_terms(self, x: np.ndarray) -> np.ndarray:
        """½‖s‖² + div s = 2Δf/f per row, Δf = −(1/γ²) Σ_t w_t‖z_t‖²φ_t (exact for p = f²)."""
        if not self.law.exact_hyvarinen:
            raise AttributeError("the exact 2Δf/f form holds for the root-Sobolev model (p = f²), not KDE-SDO")
        lap_w = -self.coef * np.einsum("td,td->t", self.features.Z, self.features.Z) / self.features.gamma**2
        rows = block_rows_for(self.features.n_features, self.features.n_dims, int(self.block_bytes))
        out = np.empty(x.shape[0])
        for s in range(0, x.shape[0], rows):
            phi, _ = self.features.transform(x[s:s + rows])
            with np.errstate(divide="ignore", invalid="ignore"):
                out[s:s + rows] = 2.0 * (phi @ lap_w) / (phi @ self.coef)
        return out
