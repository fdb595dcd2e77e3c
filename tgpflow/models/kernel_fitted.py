"""The fitted kernel models as a value: ``s = Σ_a K(·, Y_a)c_a + ∇log q0`` on a Nyström basis (docs/mathematics.md,
"Nyström kernel exponential family" and "Score estimators on a Nyström basis").

:class:`KernelFitted` holds the basis, the coefficients and the base q0 (None: flat), and evaluates

* ``model="curl_free"`` (NKEF, the curl-free score estimators): ``log p = f + log q0`` with
  ``f = Σ_a −2ψ'(u_a) r_aᵀc_a`` and the score ``∇f + ∇log q0`` (docs/mathematics.md, "Nyström kernel exponential
  family");
* ``model="lite"``: ``f = Σ_a α_a k(Y_a, ·)`` (docs/mathematics.md, "Nyström kernel exponential family", lite);
* ``model="diagonal"`` (Stein, SSGE): the score ``Σ_a k(·, Y_a)c_a + ∇log q0`` only — it is not a
  gradient field, so there is no log density (docs/mathematics.md, "Score estimators on a Nyström basis").

A full-sample fit (``ScoreEstimator(regularizer="nu" | "landweber").fit(X, basis=X)``: the basis is every row)
adds ``a ξ̂`` to f, with ξ̂ the rows' term of :mod:`tgpflow.features.kernel_xi` (``xi_coef`` = a, ``xi_weights`` =
∇log q0 at the rows): [Zhou et al.]'s full-sample estimator ``s = aζ̂ + Σ_a K(·, X_a)c_a + ∇log q0``
(docs/mathematics.md, "Score estimators on a Nyström basis", "Full-sample iterations").

The divergence is closed-form (docs/mathematics.md, "Nyström kernel exponential family": third derivatives; "Metrics").
With a Gaussian base a density model samples by importance resampling from q0 (weights e^f, docs/mathematics.md, "MAP,
baselines and sampling").
"""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar

import numpy as np

from tgpflow.core.backend import DeviceTarget
from tgpflow.core.gaussian_base import Base
from tgpflow.features.kernel_xi import xi_parts
from tgpflow.features.nystrom import NystromBasis
from tgpflow.models.blocked_score import BlockedScore
from tgpflow.models.fitted import Fitted, prefixed
from tgpflow.models.kernel_forms import KERNEL_FORMS
from tgpflow.models.kernel_on_device import kernel_log_density_on_device, kernel_score_on_device
from tgpflow.models.tgp_fitted import base_arrays, base_from_arrays

__all__ = ["KernelFitted", "KERNEL_MODELS"]

#: The kernel models: curl-free (NKEF, curl-free estimators), diagonal (Stein, SSGE), lite
#: (:mod:`tgpflow.models.kernel_forms`).
KERNEL_MODELS = tuple(KERNEL_FORMS)
#: The model name a file stores for a curl-free model with the full-sample term: a reader that does not know the term
#: refuses it (an unknown model) instead of evaluating the model without it.
FULL_SAMPLE_MODEL = "curl_free_full_sample"


@dataclasses.dataclass(frozen=True, eq=False)
class KernelFitted(BlockedScore, Fitted):
    """Score, divergence and (curl-free, lite) log density of ``Σ_a K(·, Y_a)c_a + log q0``."""

    kind: ClassVar[str] = "kernel"
    basis: NystromBasis
    model: str  # "curl_free", "diagonal" or "lite"
    coef: np.ndarray  # (m, d); (m,) for lite
    base: Base | None
    block_rows: int = 2048
    #: a of the full-sample term aξ̂ (0: none) and ∇log q0 at the basis rows, which ξ̂ sums over (module docstring)
    xi_coef: float = 0.0
    xi_weights: np.ndarray | None = None
    #: Where ``log_density`` and ``grad_log_density`` run (docs/gpu.md): a device, or None for the host. Not stored:
    #: a model file loads anywhere, and the estimator that loads it sets its own.
    device: DeviceTarget | None = None

    def __post_init__(self) -> None:
        if self.model not in KERNEL_MODELS:
            raise ValueError(f"model must be one of {KERNEL_MODELS}; got {self.model!r}")
        m, d = self.basis.n_basis, self.basis.n_dims
        shape = (m,) if self.model == "lite" else (m, d)
        if np.shape(self.coef) != shape:
            raise ValueError(f"the {self.model} coefficients must have shape {shape}; got {np.shape(self.coef)}")
        if self.xi_coef != 0.0 and (self.model != "curl_free" or np.shape(self.xi_weights) != (m, d)):
            raise ValueError(f"a full-sample term needs a curl-free model and (m, d) = {(m, d)} weights; got "
                             f"{self.model!r} and {np.shape(self.xi_weights)}")
        if self.base is not None and self.base.mean.shape != (d,):
            raise ValueError(f"the base is in d = {self.base.mean.shape[0]}, the basis in d = {d}")

    @property
    def has_log_density(self) -> bool:
        return KERNEL_FORMS[self.model].has_density

    @property
    def draw(self) -> NystromBasis:
        return self.basis

    # -- storage ----------------------------------------------------------------------------
    def to_arrays(self) -> dict[str, np.ndarray]:
        out = {f"basis.{k}": v for k, v in self.basis.to_arrays().items()}
        out["coef"] = self.coef
        if self.xi_coef != 0.0:
            out["xi_weights"] = self.xi_weights
        if self.base is not None:
            out.update(base_arrays(self.base))
        return out

    def to_meta(self) -> dict[str, Any]:
        meta = {"kind": self.kind, "model": self.model, "radial": self.basis.kernel_name,
                "block_rows": int(self.block_rows)}
        if self.xi_coef != 0.0:
            meta.update(model=FULL_SAMPLE_MODEL, xi_coef=float(self.xi_coef))
        return meta

    @classmethod
    def from_arrays(cls, arrays: dict[str, np.ndarray], meta: dict[str, Any]) -> KernelFitted:
        basis = NystromBasis.from_arrays(prefixed(arrays, "basis."), meta["radial"])
        base = base_from_arrays(arrays) if "base.mean" in arrays else None
        full = meta["model"] == FULL_SAMPLE_MODEL
        xi = float(meta["xi_coef"]) if full else 0.0
        return cls(basis, "curl_free" if full else meta["model"], np.asarray(arrays["coef"], dtype=np.float64), base,
                   int(meta.get("block_rows", 2048)), xi_coef=xi,
                   xi_weights=np.asarray(arrays["xi_weights"], dtype=np.float64) if full else None)

    def _xi(self, xb: np.ndarray, laplacian: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
        """a ξ̂, a ∇ξ̂ and (``laplacian``) a Δξ̂ at the rows xb (module docstring)."""
        xi, grad, lap = xi_parts(self.basis.kernel, self.basis.Y, self.xi_weights, xb, laplacian)
        a = self.xi_coef
        return a * xi, a * grad, None if lap is None else a * lap

    # -- evaluation ---------------------------------------------------------------------------
    def _blocks(self, x: np.ndarray):
        for start in range(0, x.shape[0], self.block_rows):
            yield start, x[start:start + self.block_rows]

    def _base_terms(self, xb: np.ndarray) -> tuple[np.ndarray, np.ndarray, float]:
        """log q0, ∇log q0 and div ∇log q0 (0 for the flat base)."""
        if self.base is None:
            return np.zeros(xb.shape[0]), np.zeros_like(xb), 0.0
        r = xb - self.base.mean
        Pr = r @ self.base.precision
        return -0.5 * np.einsum("nd,nd->n", r, Pr), -Pr, -float(np.trace(self.base.precision))

    def log_density(self, x: np.ndarray) -> np.ndarray:
        """f(x) + log q0(x), f = Σ_a −2ψ'(u_a) r_aᵀc_a (curl-free; lite: Σ_a α_a k(Y_a, x); unnormalised)."""
        if self.model == "diagonal":
            raise AttributeError("a diagonal-kernel score is not a gradient field: it has no log density")
        if self._evaluates_on_device:
            return kernel_log_density_on_device(self, self.device, np.asarray(x, dtype=np.float64))
        out = np.empty(x.shape[0])
        for start, xb in self._blocks(x):
            if self.model == "lite":  # from the differences, as the statistics: no expanded ‖x‖² − 2xᵀy + ‖y‖²
                r = xb[:, None, :] - self.basis.Y[None, :, :]
                f = self.basis.kernel.profile(np.einsum("nmd,nmd->nm", r, r))[0] @ self.coef
            else:
                r, alpha, _, _ = self.basis.kernel.curl_free_parts(xb, self.basis.Y)
                f = np.einsum("nm,nmd,md->n", alpha, r, self.coef)
            if self.xi_coef != 0.0:
                f = f + self._xi(xb, False)[0]
            out[start:start + xb.shape[0]] = f + self._base_terms(xb)[0]
        return out

    @property
    def _evaluates_on_device(self) -> bool:
        """Whether rows are evaluated on :attr:`device` (a worker without it computes on its CPU)."""
        return self.device is not None and self.xi_coef == 0.0 and self.device.available()

    def grad_log_density(self, x: np.ndarray) -> np.ndarray:
        """The score ∇ log p(x), (n, d); on :attr:`device` when there is one
        (:mod:`tgpflow.models.kernel_on_device`)."""
        if self._evaluates_on_device:
            return kernel_score_on_device(self, self.device, np.asarray(x, dtype=np.float64))
        return super().grad_log_density(x)

    def _score_block(self, xb: np.ndarray, with_div: bool = True) -> tuple[np.ndarray, np.ndarray | None]:
        k = self.basis.kernel
        _, g, div_g = self._base_terms(xb)
        if self.model == "curl_free":
            r, alpha, kappa, omega = k.curl_free_parts(xb, self.basis.Y)
            rc = np.einsum("nmd,md->nm", r, self.coef)
            score = alpha @ self.coef + np.einsum("nm,nmd->nd", kappa * rc, r)
            div = np.einsum("nm,nm->n", omega, rc) if with_div else None
        elif self.model == "lite":
            r = xb[:, None, :] - self.basis.Y[None, :, :]
            u = np.einsum("nmd,nmd->nm", r, r)
            _, d1, d2, _ = k.profile(u)
            score = np.einsum("nm,nmd->nd", 2.0 * d1 * self.coef, r)
            div = (4.0 * d2 * u + 2.0 * xb.shape[1] * d1) @ self.coef if with_div else None
        else:
            r = xb[:, None, :] - self.basis.Y[None, :, :]
            kv, d1, _, _ = k.profile(np.einsum("nmd,nmd->nm", r, r))
            score = kv @ self.coef
            div = np.einsum("nm,nmd,md->n", 2.0 * d1, r, self.coef) if with_div else None
        if self.xi_coef != 0.0:
            _, xi_grad, xi_lap = self._xi(xb, with_div)
            score = score + xi_grad
            div = None if div is None else div + xi_lap
        return score + g, None if div is None else div + div_g

    def _gaussian_base(self) -> Base:
        if self.model == "diagonal":
            raise ValueError("a diagonal-kernel score has no density to sample by importance weights; sample it "
                             "by Langevin dynamics or SVGD (tgpflow.sample)")
        return super()._gaussian_base()
