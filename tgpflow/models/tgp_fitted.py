"""The fitted GP-tilted density as a value: evaluation on blocks of rows (docs/mathematics.md, "Fisher divergence and
base-measure learning", "Noise-conditional Fisher divergence", "The Fisher variational predictive distribution", "MAP,
baselines and sampling" and "Metrics"), float64.

A :class:`TGPFitted` holds only what evaluation needs (features, base, and θ, the FVPD
predictive terms, or ψ/N for KDE-RFF) — not the S×S statistics — so that it is cheap to
ship to Dask workers and to store. Rows are processed in blocks sized from the same byte
budget as the pass. Three kinds of tilt:

* ``theta`` (FD, NCFD at a level σ, MAP): ``T(x) = θᵀφ(x)``;
* ``M_chol, v`` (FVPD): ``T(x) = ½φᵀM⁻¹φ − φᵀv`` (docs/mathematics.md, "The Fisher variational predictive
  distribution");
* ``kde_weights = ψ/N`` (KDE-RFF baseline, docs/mathematics.md, "MAP, baselines and sampling"): ``log p(x) =
  log(φ(x)ᵀψ/N)`` with no base (−inf where the RFF estimate is ≤ 0).

``hyvarinen_terms`` gives ``½‖s(x)‖² + div s(x)`` per row with the closed-form divergence
(docs/mathematics.md, "Fisher divergence and base-measure learning", "The Fisher variational predictive distribution"
and "Metrics"), for the streamed score-matching loss. :class:`BoundedFitted` is such a model fitted to transformed
columns, evaluated in the data's units (:mod:`tgpflow.features.bounds`). Both are :class:`~tgpflow.models.fitted.Fitted`
values (``to_arrays``/``from_arrays``).
"""

from __future__ import annotations

import dataclasses
import math
import threading
from functools import cached_property
from typing import Any, ClassVar

import numpy as np
import scipy.linalg
from scipy.linalg.blas import dgemv, dtrmm
from scipy.linalg.lapack import dtrtri

from tgpflow.core.backend import DeviceTarget
from tgpflow.core.gaussian_base import Base
from tgpflow.core.memory import DEFAULT_BLOCK_BYTES
from tgpflow.features.bounds import ColumnBounds
from tgpflow.features.mixture_base import GaussianMixtureBase
from tgpflow.features.noise import level_bandwidth
from tgpflow.features.rff import RandomFourierFeatures
from tgpflow.models.blocked_score import BlockedScore
from tgpflow.models.fitted import Fitted, WrappedFitted, fitted_from_arrays, prefixed
from tgpflow.models.tgp_on_device import log_density_on_device
from tgpflow.solve.linalg import gemm_is_safe
from tgpflow.solve.ncfd import level_base
from tgpflow.stats.tgp import block_rows_for

__all__ = ["TGPFitted", "BoundedFitted", "base_arrays", "base_from_arrays"]

_TILTS = ("theta", "M_chol", "v", "kde_weights")
#: Row panels of L⁻¹ in FVPD's ‖L⁻¹φ‖² off the main thread (:meth:`TGPFitted._inv_chol_norms`): k panels do
#: (1 + 1/k)·S² flops a row.
INV_PANELS = 4


def base_arrays(base: Base) -> dict[str, np.ndarray]:
    """A base as arrays (``base.mean``, ``base.cov``, ``base.precision``, and a mixture's
    ``base.mixture.weights``, ``.means``, ``.covariances``)."""
    out = {"base.mean": base.mean, "base.cov": base.cov, "base.precision": base.precision}
    if base.mixture is not None:
        out.update({f"base.mixture.{k}": v for k, v in base.mixture.to_arrays().items()})
    return out


def base_from_arrays(arrays: dict[str, np.ndarray]) -> Base:
    """The base stored by :func:`base_arrays`, as stored (the precision is read, not inverted)."""
    part = prefixed(arrays, "base.")
    mean, cov, precision = (np.asarray(part[k], dtype=np.float64) for k in ("mean", "cov", "precision"))
    d = mean.shape[0]
    if mean.shape != (d,) or cov.shape != (d, d) or precision.shape != (d, d):
        raise ValueError(f"the base has inconsistent shapes: mean {mean.shape}, cov {cov.shape}, "
                         f"precision {precision.shape}")
    mixture = prefixed(part, "mixture.")
    return Base(mean, cov, precision, GaussianMixtureBase.from_arrays(mixture) if mixture else None)


@dataclasses.dataclass(frozen=True, eq=False)
class TGPFitted(BlockedScore, Fitted):
    """log q(x), ∇ log q(x) and the Hyvärinen terms of one fitted tilt (see module docstring)."""

    kind: ClassVar[str] = "tgp"
    features: RandomFourierFeatures
    base: Base
    theta: np.ndarray | None = None
    M_chol: np.ndarray | None = None
    v: np.ndarray | None = None
    kde_weights: np.ndarray | None = None
    block_bytes: int = DEFAULT_BLOCK_BYTES
    #: Where ``log_density`` runs (docs/gpu.md): a device, or None for the host. Not stored: a model file loads
    #: anywhere, and the estimator that loads it sets its own.
    device: DeviceTarget | None = None

    def __post_init__(self) -> None:
        tilts = [n for n in ("theta", "M_chol", "kde_weights") if getattr(self, n) is not None]
        if len(tilts) != 1 or (self.M_chol is None) != (self.v is None):
            raise ValueError(f"a GP-tilted model has one tilt: theta, (M_chol, v) or kde_weights; got {tilts}")
        S = self.features.n_features
        shapes = {"theta": (S,), "M_chol": (S, S), "v": (S,), "kde_weights": (S,)}
        for name, shape in shapes.items():
            value = getattr(self, name)
            if value is not None and np.shape(value) != shape:
                raise ValueError(f"{name} must have shape {shape} for S = {S} features; got {np.shape(value)}")
        if self.base.mean.shape != (self.features.n_dims,):
            raise ValueError(f"the base is in d = {self.base.mean.shape[0]}, the features in d = {self.features.n_dims}")

    @property
    def draw(self) -> RandomFourierFeatures:
        return self.features

    # -- storage ----------------------------------------------------------------------------
    def to_arrays(self) -> dict[str, np.ndarray]:
        out = {f"features.{k}": v for k, v in self.features.to_arrays().items()}
        out.update(base_arrays(self.base))
        out.update({n: getattr(self, n) for n in _TILTS if getattr(self, n) is not None})
        return out

    def to_meta(self) -> dict[str, Any]:
        return {"kind": self.kind, "block_bytes": int(self.block_bytes), "feature_seed": self.features.seed}

    @classmethod
    def from_arrays(cls, arrays: dict[str, np.ndarray], meta: dict[str, Any]) -> TGPFitted:
        features = RandomFourierFeatures.from_arrays(prefixed(arrays, "features."), seed=meta.get("feature_seed"))
        tilts = {n: np.asarray(arrays[n], dtype=np.float64) for n in _TILTS if n in arrays}
        return cls(features, base_from_arrays(arrays), block_bytes=int(meta.get("block_bytes", DEFAULT_BLOCK_BYTES)),
                   **tilts)

    def at_level(self, sigma: float) -> TGPFitted:
        """The noise-conditional model at level σ ≥ 0 (NCFD, docs/mathematics.md, "Noise-conditional Fisher
        divergence"): width γ_σ = √(γ² + σ²), base N(μ, Σ + σ²I), the same θ."""
        if sigma == 0:
            return self
        if self.theta is None:
            raise ValueError("only a θ tilt (NCFD) is defined at a noise level σ > 0")
        feats = self.features.with_bandwidth(level_bandwidth(self.features.gamma, float(sigma)))
        return TGPFitted(feats, level_base(self.base, float(sigma)), theta=self.theta, block_bytes=self.block_bytes,
                         device=self.device)

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
        return self._minv * (self.features.Z @ self.features.Z.T)

    def _tilt(self, phi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The tilt T per row and its weight vector w (∇T = (1/γ)Zᵀ(φ' ⊙ w))."""
        if self.theta is not None:
            return phi @ self.theta, np.broadcast_to(self.theta, phi.shape)
        w = self._minv_times(phi.T).T  # M⁻¹φ
        return 0.5 * np.einsum("ns,ns->n", phi, w) - phi @ self.v, w - self.v

    def _minv_times(self, cols: np.ndarray) -> np.ndarray:
        """M⁻¹ ``cols`` for (S, n) columns (a new array): one GEMM with the cached M⁻¹ where :func:`gemm_is_safe`
        (2S² flops a row at the DGEMM rate, in NumPy's BLAS like the callers' other products, where a SciPy
        Cholesky solve between them ran at about half of it and alternated two OpenBLAS thread pools), else that
        solve (its two triangular solves do not oversubscribe the cores)."""
        if gemm_is_safe():
            return self._minv @ cols
        return scipy.linalg.cho_solve((self.M_chol, True), cols, check_finite=False)

    def log_density(self, x: np.ndarray) -> np.ndarray:
        """Unnormalised log density: T(x) − ½(x−μ)ᵀP(x−μ) (:meth:`log_tilt` minus the base's term), or log(φᵀψ/N)
        for KDE-RFF."""
        x = np.asarray(x, dtype=np.float64)
        if self.device is not None and self.device.available():  # a worker without it computes on its CPU
            return log_density_on_device(self, self.device, x)  # tgpflow.models.tgp_on_device
        if self.kde_weights is not None:
            f = self._fused_sums(x, [self._weights], [])[0][:, 0]
            with np.errstate(divide="ignore", invalid="ignore"):
                return np.where(f > 0, np.log(np.where(f > 0, f, 1.0)), -np.inf)
        return self.log_tilt(x) - self.base.neg_log(x)

    def log_tilt(self, x: np.ndarray) -> np.ndarray:
        """The tilt T(x) alone, on the host: :meth:`log_density` + the base's −log (a caller that has the base's
        term at these rows, as the normaliser's proposal draws do, adds it itself).

        θ: ``√(2/S) cos(A)ᵀw`` by the fused kernel (:meth:`RandomFourierFeatures.cos_sin_sums`), no (S, n) block
        formed. FVPD: ½φᵀM⁻¹φ − vᵀφ per block, φ into a reused buffer and φᵀM⁻¹φ = ‖L⁻¹φ‖² by
        :meth:`_inv_chol_norms`, in float64 and as a sum of squares (≥ 0).
        """
        x = np.asarray(x, dtype=np.float64)
        if self.kde_weights is not None:
            raise ValueError("KDE-RFF's estimate φᵀψ/N is not a tilt of a base")
        if self.M_chol is None:
            return self._fused_sums(x, [self._weights], [])[0][:, 0]
        out = np.empty(x.shape[0])
        S = self.features.n_features
        rows = min(x.shape[0], self._block_rows)
        way = self._inv_chol_way()
        buf = np.empty(S * rows)
        work = np.empty(-(-S // INV_PANELS) * rows) if way == "panels" else None
        for start, xb in self._blocks(x):
            nb = xb.shape[0]
            phi_t = self.features.cos_features(xb, out=buf[:S * nb].reshape(S, nb))  # φᵀ (S, nb)
            # vᵀφ in the BLAS of the product after it (see _inv_chol_norms): not NumPy's beside SciPy's
            lin = dgemv(1.0, phi_t.T, self.v) if way == "dtrmm" else self.v @ phi_t
            out[start:start + nb] = 0.5 * self._inv_chol_norms(phi_t, way, work) - lin
        return out

    @staticmethod
    def _inv_chol_way() -> str:
        """How :meth:`_inv_chol_norms` runs here: "panels" in a thread other than the main one where BLAS runs
        one thread (a task of :func:`tgpflow.core.engine.compute` or of a distributed worker), else "dtrmm"."""
        main = threading.current_thread() is threading.main_thread()
        return "panels" if not main and gemm_is_safe() else "dtrmm"

    def _inv_chol_norms(self, phi_t: np.ndarray, way: str, work: np.ndarray | None) -> np.ndarray:
        """‖L⁻¹φ‖² per column of ``phi_t`` (S, n), which "dtrmm" overwrites (M = LLᵀ, docs/mathematics.md, "The Fisher
        variational predictive distribution"), by ``way``:

        * "dtrmm": the triangular product with the cached L⁻¹ (BLAS ``dtrmm``, in place): S² flops a row, half a
          GEMM's with M⁻¹; measured at S = 1000, 2790 rows, 2 threads: 0.051 s against the GEMM's 0.079 s
          (and the triangular solve with L, the same flops, ran slower than that GEMM).
        * "panels": L⁻¹ cut into :data:`INV_PANELS` row panels, panel i times the rows of φ its lower triangle
          reaches, by NumPy's matmul into ``work``: 1.25 S² flops a row, with the GIL released. SciPy's
          ``dtrmm`` wrapper holds the GIL, so two Dask threads with one BLAS thread each took turns (0.6 of the
          one-thread rate, against 1.05–1.3 this way); on the main thread dtrmm is 15 % faster than the panels,
          and in Dask's own threads with a multi-threaded BLAS (:func:`gemm_is_safe` false) the turns it makes
          them take keep one product on the cores at a time, which is what those threads need (measured, 200k
          rows, 2 Dask threads: 4.5–5.2 s, the triangular solve with L 4.5–4.8 s; GEMMs would oversubscribe).

        SciPy's OpenBLAS is a second library beside NumPy's with its own thread pool, whose idle threads spin
        while the other works: the callers keep a block's products in one of them (1.5× per block, mixed).
        """
        if way == "panels":
            inv, (S, n) = self.chol_inv, phi_t.shape
            q = np.zeros(n)
            step = -(-S // INV_PANELS)
            for r0 in range(0, S, step):
                r1 = min(r0 + step, S)
                h = np.matmul(inv[r0:r1, :r1], phi_t[:r1], out=work[:(r1 - r0) * n].reshape(r1 - r0, n))
                q += np.einsum("sn,sn->n", h, h)
            return q
        # rows (L⁻¹φ)ᵀ = φᵀL⁻ᵀ in place of φᵀ (an (n, S) Fortran view of the buffer: no copy); L⁻ᵀ is the
        # C-ordered L⁻¹ read as a Fortran upper triangle
        half = dtrmm(1.0, self.chol_inv.T, phi_t.T, side=1, lower=0, overwrite_b=1)
        return np.einsum("ns,ns->n", half, half)

    @cached_property
    def chol_inv(self) -> np.ndarray:
        """FVPD's L⁻¹ (lower, C-ordered, zeros above the diagonal) of the predictive factor ``M_chol``: LAPACK
        ``dtrtri``, S³/3 flops once per model (what the variance term reads, here and on the device)."""
        inv, info = dtrtri(np.asarray(self.M_chol, dtype=np.float64), lower=1)
        if info != 0:
            raise np.linalg.LinAlgError(f"the FVPD predictive Cholesky factor is singular (dtrtri info {info})")
        return np.ascontiguousarray(np.tril(inv))

    @property
    def _weights(self) -> np.ndarray:
        return self.theta if self.theta is not None else self.kde_weights

    @property
    def _block_rows(self) -> int:
        return block_rows_for(self.features.n_features, self.features.n_dims, self.block_bytes)

    def _fused_sums(self, x: np.ndarray, cos_cols: list[np.ndarray], sin_cols: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
        """``φ(x)ᵀ[cos_cols]`` (n, kc) and ``φ'(x)ᵀ[sin_cols]`` (n, ks) — the columns are (S,) or (S, k) weights —
        by the fused kernel (no (S, n) block)."""
        S = self.features.n_features
        scale = math.sqrt(2.0 / S)
        C = np.column_stack(cos_cols) * scale if cos_cols else np.zeros((S, 0))
        B = np.column_stack(sin_cols) * -scale if sin_cols else np.zeros((S, 0))
        return self.features.cos_sin_sums(x, C, B, block_rows=self._block_rows)

    def _fused_score(self, x: np.ndarray, with_div: bool) -> tuple[np.ndarray, np.ndarray | None]:
        """(score, divergence or None) of a θ or KDE-RFF tilt on all rows of x, by the fused kernel
        (docs/mathematics.md, "Fisher divergence and base-measure learning" and "MAP, baselines and sampling")."""
        Z, g, w = self.features.Z, self.features.gamma, self._weights
        wZ = w[:, None] * Z / g
        if self.kde_weights is not None:
            c, grad_f = self._fused_sums(x, [w, -w * self._sq_norms / g**2], [wZ])
            f, lap_f = c[:, 0], c[:, 1]
            with np.errstate(divide="ignore", invalid="ignore"):
                score = grad_f / f[:, None]
                div = lap_f / f - np.einsum("nd,nd->n", score, score) if with_div else None
            return score, div
        c, score = self._fused_sums(x, [-w * self._sq_norms / g**2] if with_div else [], [wZ])
        Pr, trace, _ = self.base.neg_score(x, div=with_div)
        score -= Pr
        return score, (c[:, 0] - trace) if with_div else None

    def grad_log_density(self, x: np.ndarray) -> np.ndarray:
        """The score ∇ log q(x), (n, d) (θ and KDE-RFF tilts: the fused kernel on all rows at once; FVPD:
        :meth:`_fvpd_score`)."""
        x = np.asarray(x, dtype=np.float64)
        if self.M_chol is not None:
            return self._fvpd_score(x)
        return self._fused_score(x, with_div=False)[0]

    def _fvpd_score(self, x: np.ndarray) -> np.ndarray:
        """FVPD's score ``(1/γ) Zᵀ(φ' ⊙ (M⁻¹φ − v)) − P(x − μ)`` (docs/mathematics.md, "The Fisher variational
        predictive distribution"), per block from the (S, n) sin and cos blocks: M⁻¹φ by :meth:`_minv_times`; no (n, S)
        copy of φ or φ' is formed."""
        S, g = self.features.n_features, self.features.gamma
        scale = math.sqrt(2.0 / S)
        v = self.v[:, None]
        out = np.empty(x.shape)
        for start, xb in self._blocks(x):
            sin, cos = self.features.sincos(xb - self.features.shift)  # (S, nb) each
            w = self._minv_times(cos)
            w *= scale
            w -= v  # (M⁻¹φ − v)ᵀ, (S, nb)
            w *= sin  # φ' ⊙ w up to −scale
            out[start:start + xb.shape[0]] = (w.T @ self.features.Z) * (-scale / g) - self.base.neg_score(xb)[0]
        return out

    def hyvarinen_terms(self, x: np.ndarray) -> np.ndarray:
        """½‖s(x)‖² + div s(x) per row (docs/mathematics.md, "Metrics")."""
        if self.M_chol is not None:
            return super().hyvarinen_terms(x)
        score, div = self._fused_score(np.asarray(x, dtype=np.float64), with_div=True)
        return 0.5 * np.einsum("nd,nd->n", score, score) + div

    def _score_block(self, xb: np.ndarray, with_div: bool = True) -> tuple[np.ndarray, np.ndarray | None]:
        """(score, divergence of the score or None) for one block: ∇ log q (docs/mathematics.md, "Fisher divergence and
        base-measure learning" and "The Fisher variational predictive distribution"; KDE-RFF: ∇f/f)."""
        if self.M_chol is None:  # θ and KDE-RFF tilts
            return self._fused_score(xb, with_div)
        Z, g = self.features.Z, self.features.gamma  # FVPD
        phi, dphi = self.features.transform(xb)
        _, w = self._tilt(phi)
        Pr, trace, _ = self.base.neg_score(xb, div=with_div)
        score = (dphi * w) @ Z / g - Pr
        if not with_div:
            return score, None
        div = -np.einsum("ns,ns,s->n", phi, w, self._sq_norms) / g**2 - trace
        div += np.einsum("ns,ns->n", dphi @ self._minv_zz, dphi) / g**2  # w depends on x through M⁻¹φ
        return score, div

    @cached_property
    def _minv(self) -> np.ndarray:
        return scipy.linalg.cho_solve((self.M_chol, True), np.eye(self.M_chol.shape[0]))

    def score_hessian_diag(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The score and the diagonal of its Jacobian, ``∂s_j/∂x_j``, each (n, d) (docs/mathematics.md, "Fisher
        divergence and base-measure learning" and "The Fisher variational predictive distribution").

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
            Pr, _, pdiag = self.base.neg_score(xb, hess_diag=True)
            score[rows] = (dphi * w) @ Z / g - Pr
            diag[rows] = -((phi * w) @ Z2) / g**2 - pdiag
            if self.theta is None:
                for j in range(Z.shape[1]):
                    a = dphi * Z[:, j]
                    diag[rows, j] += np.einsum("ns,ns->n", a @ self._minv, a) / g**2
        return score, diag


@dataclasses.dataclass(frozen=True, eq=False)
class BoundedFitted(WrappedFitted):
    """A fitted model of transformed rows t(x), evaluated in the data's units (:mod:`tgpflow.features.bounds`).

    ``log p(x) = log q_T(t(x)) + Σ log t'(x)``; rows on or beyond a bound have log density −inf and a
    NaN score. ``inner`` is the model in the transformed space (its ``base`` lives there too); samples
    and proposal draws are drawn there and mapped back by t⁻¹.
    """

    kind: ClassVar[str] = "bounded"
    inner: Fitted  # a TGPFitted, or one standardized in the transformed space (ScaledFitted)
    bounds: ColumnBounds

    def _to_data(self, rows: np.ndarray) -> np.ndarray:
        return self.bounds.inverse(rows)

    def _own_arrays(self) -> dict[str, np.ndarray]:
        return {f"bounds.{k}": v for k, v in self.bounds.to_arrays().items()}

    def to_meta(self) -> dict[str, Any]:
        return {"kind": self.kind, "columns": list(self.bounds.columns), "inner": self.inner.to_meta()}

    @classmethod
    def from_arrays(cls, arrays: dict[str, np.ndarray], meta: dict[str, Any]) -> BoundedFitted:
        bounds = ColumnBounds.from_arrays(prefixed(arrays, "bounds."), meta["columns"])
        return cls(fitted_from_arrays(prefixed(arrays, "inner."), meta["inner"]), bounds)

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

    def score_hessian_diag(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The score and the diagonal of its Jacobian in the data's units, each (n, d) (NaN beyond a bound):
        ``∂s_j/∂x_j = t''_j s_T,j + t'_j² ∂_{t_j} s_T,j + ∂² log t'_j``."""
        inside, xi, t = self._split(x)
        score, diag = np.full(x.shape, np.nan), np.full(x.shape, np.nan)
        _, d1, d2, dlog, ddlog = self.bounds.derivatives(xi)
        s_t, h_t = self.inner.score_hessian_diag(t)
        score[inside] = d1 * s_t + dlog
        diag[inside] = d2 * s_t + d1 * d1 * h_t + ddlog
        return score, diag

    def hyvarinen_terms(self, x: np.ndarray) -> np.ndarray:
        """½‖s‖² + div s in the data's units, from the transformed model's score and Jacobian diagonal."""
        s, h = self.score_hessian_diag(x)
        return 0.5 * np.einsum("nd,nd->n", s, s) + h.sum(axis=1)
