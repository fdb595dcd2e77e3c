"""A fitted model of standardized rows, evaluated in the data's units (:mod:`tgpflow.features.scaling`).

``inner`` is any :class:`~tgpflow.models.fitted.Fitted` value fitted to ``z = (x − c)/s`` (its base, draw
and samples live there). In the data's units, column by column:

* ``log p(x) = log q(z) − Σ_j log s_j``;
* ``s_j(x) = s_q,j(z) / s_j``;
* ``∂s_j/∂x_j = (∂s_q,j/∂z_j)(z) / s_j²``, so ``div s(x) = Σ_j (∂s_q,j/∂z_j) / s_j²``: with one scale for every
  column that is ``div s_q / s²``; otherwise it needs the diagonal of the inner score's Jacobian, which the
  GP-tilted values give in closed form (``score_hessian_diag``) and the others by central differences of
  their closed-form score (step ``ε^{1/3}`` in the standardized units, error about 1e-10 relative there);
* samples, base draws and reference draws: ``x = c + s · z`` (the normaliser and the weights are the same in
  both units).

float64 throughout.
"""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar

import numpy as np

from tgpflow.features.scaling import Scaling
from tgpflow.models.fitted import Fitted, WrappedFitted, fitted_from_arrays, prefixed

__all__ = ["ScaledFitted", "in_data_units"]

#: Central-difference step of the Jacobian diagonal in standardized units, where no closed form exists.
_FD_STEP = float(np.finfo(np.float64).eps ** (1 / 3))


def in_data_units(fitted: Fitted, scaling: Scaling | None) -> Fitted:
    """``fitted`` evaluated in the data's units: itself without a scaling, else a :class:`ScaledFitted`."""
    return fitted if scaling is None else ScaledFitted(fitted, scaling)


@dataclasses.dataclass(frozen=True, eq=False)
class ScaledFitted(WrappedFitted):
    """See the module docstring."""

    kind: ClassVar[str] = "scaled"
    inner: Fitted
    scaling: Scaling

    def __post_init__(self) -> None:
        base = getattr(self.inner, "base", None)
        d = base.mean.shape[0] if base is not None else self.scaling.n_dims
        if d != self.scaling.n_dims:
            raise ValueError(f"the scaling is for d = {self.scaling.n_dims} columns, the model for d = {d}")

    def _to_data(self, rows: np.ndarray) -> np.ndarray:
        return self.scaling.inverse(rows)

    # -- storage ----------------------------------------------------------------------------
    def _own_arrays(self) -> dict[str, np.ndarray]:
        return {"scaling.center": self.scaling.center, "scaling.scale": self.scaling.scale}

    def to_meta(self) -> dict[str, Any]:
        return {"kind": self.kind, "inner": self.inner.to_meta()}

    @classmethod
    def from_arrays(cls, arrays: dict[str, np.ndarray], meta: dict[str, Any]) -> ScaledFitted:
        part = prefixed(arrays, "scaling.")
        return cls(fitted_from_arrays(prefixed(arrays, "inner."), meta["inner"]),
                   Scaling(part["center"], part["scale"]))

    # -- evaluation -------------------------------------------------------------------------
    def log_density(self, x: np.ndarray) -> np.ndarray:
        return self.inner.log_density(self.scaling.forward(x)) + self.scaling.log_jacobian

    def grad_log_density(self, x: np.ndarray) -> np.ndarray:
        return self.inner.grad_log_density(self.scaling.forward(x)) / self.scaling.scale

    def score_hessian_diag(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The score and the diagonal of its Jacobian in the data's units, each (n, d)."""
        z = self.scaling.forward(x)
        s = self.scaling.scale
        if hasattr(self.inner, "score_hessian_diag"):
            score, diag = self.inner.score_hessian_diag(z)
        else:  # central differences of the closed-form score, one column at a time
            score = self.inner.grad_log_density(z)
            diag = np.empty_like(z)
            for j in range(z.shape[1]):
                step = np.zeros(z.shape[1])
                step[j] = _FD_STEP
                up, down = self.inner.grad_log_density(z + step), self.inner.grad_log_density(z - step)
                diag[:, j] = (up[:, j] - down[:, j]) / (2 * _FD_STEP)
        return score / s, diag / (s * s)

    def hyvarinen_terms(self, x: np.ndarray) -> np.ndarray:
        s = self.scaling.scale
        if np.all(s == s[0]) and not hasattr(self.inner, "score_hessian_diag"):
            # one scale: ½‖s‖² and div s are both the standardized model's over s², and so is their sum
            return self.inner.hyvarinen_terms(self.scaling.forward(x)) / (s[0] * s[0])
        score, diag = self.score_hessian_diag(x)
        return 0.5 * np.einsum("nd,nd->n", score, score) + diag.sum(axis=1)
