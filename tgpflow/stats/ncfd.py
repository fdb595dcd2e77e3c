"""Sufficient statistics of the noise-conditional GP-tilted density (docs/mathematics.md, "Noise-conditional Fisher
divergence", [Paisley et al.] Algorithm 3).

One pass accumulates, as sums over rows, for H noise levels σ_h (same Z, c; width γ_h):

* ``abar = Ā = Σ_h Σ_i [W⁺_h ⊙ φ'_hφ'_hᵀ + W⁻_h ⊙ φ_hφ_hᵀ](x_i)`` — ONE S×S accumulator:
  the weights W±_h are data-free, so each chunk applies them to its two S×S products of
  level h before adding (at σ_1 = 0, W⁻_1 = 0 and that product is skipped: 2H − 1 products
  per row);
* per level ``u_h = Σφ'_h``, ``U_h = Σφ'_h (x − x₀)ᵀ``, ``ψ_h = Σφ_h``;
* with ``prefixes``, ``abar_prefix[p]``: Ā summed over the first H'_p levels only, for each H'_p of
  :func:`~tgpflow.features.noise.ladder_prefixes` (a copy of the accumulator after those levels): the lower parts
  of the ladder that a selection scores as smaller σ_max (:meth:`NCFDStats.truncated`), at P·S² more memory;
* ``gram0 = Σ φ'φ'ᵀ`` at σ = 0 (the level-1 product, kept rather than only weighted), so that
  one NCFD pass also holds the complete FD/FVPD statistics (:attr:`NCFDStats.fd`) — used by
  held-out scoring at the data level and by the baselines, at S² extra memory and no extra
  product;
* under a mixture base m (docs/gp_tilted.md, "NCFD"), per level ``V_h = Σ_i φ'_h(y_i) (s_h(y_i) − g_h(y_i))ᵀ``
  with ``y_i = x_i + ξ_ih``, one draw ``ξ_ih ~ N(0, σ_h² I)`` per row and level, s_h the score of m convolved
  with that noise (every Σ_k + σ_h² I) and g_h that of the Gaussian with m's mean and covariance, convolved
  likewise: an unbiased estimate of the part of the objective's expectations over the noise that the Gaussian's
  closed form (from ``U_h``, ``u_h``) does not give. Subtracting g_h on the same draws is a control variate: the
  estimate is exact for a mixture of one component, and its noise is that of the mixture's departure from its
  Gaussian only. The noise is seeded by a digest of the chunk's values and the level (:func:`noise_seed`), so a
  chunk's statistics do not depend on where or when it is computed. At σ = 0 there is no noise, and
  :attr:`NCFDStats.fd` adds the Gaussian's part back (its ``V`` is the FD sum); ``base_sums`` are the FD ones.

The weights are recomputed per chunk and level (O(S²d + H S²), docs/mathematics.md, "Noise-conditional Fisher
divergence") instead of being stored (2H·S² floats). Loop order is level-outer inside a chunk, so each level's weights
are formed once per chunk. Precision: float64 throughout.
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
from typing import Any, ClassVar

import numpy as np

from tgpflow.core.backend import device_of, namespace, on_a_device, to_numpy
from tgpflow.core.memory import DEFAULT_BLOCK_BYTES, F32, F64, MemoryCost, declare, plan_blocks, task_budget
from tgpflow.core.moments import Moments
from tgpflow.core.summable import AdditiveStats
from tgpflow.features.bounds import ColumnBounds
from tgpflow.features.lattice import LatticeCells
from tgpflow.features.mixture_base import GaussianMixtureBase
from tgpflow.features.noise import ladder_prefixes, level_bandwidth
from tgpflow.features.rff import RandomFourierFeatures
from tgpflow.stats.tgp import RFFStats, TGPStats, level_products, mixture_terms
from tgpflow.stats.tgp_cupy import DEVICE_BLOCK_BYTES

__all__ = ["NCFDStats", "ncfd_chunk_stats", "ncfd_weights", "ncfd_memory", "noise_seed"]


def ncfd_weights(features: RandomFourierFeatures, sigma: float) -> tuple[np.ndarray, np.ndarray | None]:
    """W⁺_h, W⁻_h of docs/mathematics.md, "Noise-conditional Fisher divergence" for one level (W⁻ is None at σ = 0,
    where it vanishes).

    ``r = σ²/γ_σ²``, ``Δ±(s,s') = exp(−½ r ‖z_s ± z_s'‖²)``, ``W± = (Δ⁻ ± Δ⁺)/(2γ_σ²)``.
    """
    g2 = features.gamma**2 + sigma * sigma
    if sigma == 0.0:
        S = features.n_features
        return np.full((S, S), 1.0 / g2), None
    r = sigma * sigma / g2
    Z = features.Z
    # In place, three S×S arrays at most (the same floating-point operations as the formula).
    rK = Z @ Z.T
    q = np.diag(rK).copy()
    base = q[:, None] + q[None, :]
    base *= -0.5 * r
    rK *= r
    d_minus = np.add(base, rK)
    np.exp(d_minus, out=d_minus)
    d_plus = np.subtract(base, rK, out=rK)
    del base
    np.exp(d_plus, out=d_plus)
    w_plus = np.add(d_minus, d_plus)
    w_plus /= 2 * g2
    w_minus = np.subtract(d_minus, d_plus, out=d_minus)
    del d_plus
    w_minus /= 2 * g2
    return w_plus, w_minus


def ncfd_memory(features: RandomFourierFeatures, n_levels: int, precision: str = "float64",
                mixture: Any = None, prefixes: bool = False) -> MemoryCost:
    """The bytes of one :func:`ncfd_chunk_stats` task (NumPy chunks; see :mod:`tgpflow.core.memory`).

    Fixed: the accumulators ``abar`` and ``gram0`` (2 S²) and, at a level σ > 0, the larger of
    the product phase (``sin sinᵀ``, ``cos cosᵀ`` and the product buffer: 3 S²) and the weight
    phase (both products held while :func:`ncfd_weights` builds W± in three S² arrays: 5 S²);
    the per-level sums ``u, U, psi`` (H·S·(d + 2)) and the S×d work arrays of a level. Per block
    row and per chunk row: as for FD (:func:`tgpflow.stats.tgp.tgp_memory`). A ``mixture`` base adds the per-level
    sums ``V`` (H·S·d), its evaluation's blocks (about 32 MB) and, per chunk row, the host copy, the noisy rows
    and two scores (4·d). ``prefixes`` adds the lower parts' accumulators (P·S²).
    """
    S, d, H = features.n_features, features.n_dims, int(n_levels)
    mixed = precision == "mixed"
    prod = F32 if mixed else F64
    level = max(F64 * 2 * S * S + prod * S * S, F64 * 5 * S * S) if H > 1 else F64 * S * S + prod * S * S
    fixed = F64 * (2 + (len(ladder_prefixes(H)) if prefixes else 0)) * S * S + level + F64 * (
        H * S * (d + 2) + 6 * S * d + 10 * S + 2 * d * d)
    per_row = F64 * (3 * S + 2 * d) + (F32 * S if mixed else 0)
    chunk_row = F64 * d
    if mixture is not None:
        fixed += F64 * (H * S * d + 4 * (1 << 22))
        chunk_row += F64 * 4 * d
    return MemoryCost(f"NCFD statistics (S={S}, H={H}, d={d}, {precision})", fixed, per_row, chunk_row,
                      "use fewer features (n_features) or fewer noise levels (noise_levels)",
                      F64 * (2 * S * S + H * S * (d + 2) + d * d + d))


def _same_levels(a: np.ndarray, b: np.ndarray) -> bool:
    return a.shape == b.shape and bool(np.array_equal(a, b))


@dataclasses.dataclass(frozen=True, eq=False)
class NCFDStats(RFFStats):
    """The one-pass statistics of NCFD for one feature draw, which they carry, and one noise schedule (a value:
    +, −, ``scaled``, save/load — :class:`~tgpflow.core.summable.AdditiveStats`; the draw and the levels
    ``sigmas`` are carried, not summed)."""

    CARRIED: ClassVar[tuple[str, ...]] = (*AdditiveStats.CARRIED, "sigmas", "mixture", "cells", "bounds")

    draw: RandomFourierFeatures | None
    sigmas: np.ndarray
    moments: Moments
    abar: np.ndarray
    gram0: np.ndarray
    u: np.ndarray    # (H, S)
    U: np.ndarray    # (H, S, d)
    psi: np.ndarray  # (H, S)
    V: np.ndarray | None = None  # (H, S, d): under a mixture base
    base_sums: np.ndarray | None = None
    abar_prefix: np.ndarray | None = None  # (P, S, S): Ā over the ladder's lower parts (module docstring)
    mixture: GaussianMixtureBase | None = None
    cells: LatticeCells | None = None
    bounds: ColumnBounds | None = None
    code_counts: np.ndarray | None = None  # (m, K): rows per code of each discrete column (code_calibration)
    fingerprint: str = dataclasses.field(default="", kw_only=True)

    @property
    def n(self) -> int:
        return self.moments.n

    @property
    def n_levels(self) -> int:
        return int(self.sigmas.shape[0])

    @property
    def fd(self) -> TGPStats:
        """The FD/FVPD statistics at σ = 0 contained in this pass (docs/mathematics.md, "Fisher divergence and
        base-measure learning")."""
        V = None
        if self.mixture is not None:  # the departure from the mixture's Gaussian, plus that Gaussian's own sum
            precision = np.linalg.inv(self.mixture.cov)
            shift = self.draw.shift if self.draw is not None else self.moments.mean
            V = self.V[0] - (self.U[0] - np.outer(self.u[0], self.mixture.mean - shift)) @ precision
        return TGPStats(self.draw, self.moments, self.gram0, self.u[0], self.U[0], self.psi[0],
                        V=V, base_sums=self.base_sums, mixture=self.mixture, cells=self.cells,
                        bounds=self.bounds, code_counts=self.code_counts, fingerprint=self.fingerprint)

    @property
    def prefixes(self) -> tuple[int, ...]:
        """The numbers of levels H' < H whose Ā these statistics hold (:meth:`truncated`), () without them."""
        return () if self.abar_prefix is None else ladder_prefixes(self.n_levels)

    def truncated(self, n_levels: int) -> NCFDStats:
        """The statistics of the ladder's first ``n_levels`` levels: those of the ladder for σ_max·H'/H with H' levels
        (every sum is per level but Ā, whose partial sums ``abar_prefix`` holds). H' = H is these statistics."""
        H = int(n_levels)
        if H == self.n_levels:
            return self
        if H not in self.prefixes:
            raise ValueError(f"these NCFD statistics hold the first {list(self.prefixes)} of their {self.n_levels} "
                             f"noise levels, not the first {H}: accumulate them with sigma_max='auto' and lam='auto'")
        return dataclasses.replace(self, sigmas=self.sigmas[:H], abar=self.abar_prefix[self.prefixes.index(H)],
                                   u=self.u[:H], U=self.U[:H], psi=self.psi[:H],
                                   V=None if self.V is None else self.V[:H], abar_prefix=None)

    @classmethod
    def zero(cls, features: RandomFourierFeatures, sigmas: np.ndarray, prefixes: bool = False) -> NCFDStats:
        S, d, H = features.n_features, features.n_dims, len(sigmas)
        return cls(features, np.asarray(sigmas, dtype=np.float64), Moments.zero(d),
                   np.zeros((S, S)), np.zeros((S, S)), np.zeros((H, S)), np.zeros((H, S, d)), np.zeros((H, S)),
                   abar_prefix=np.zeros((len(ladder_prefixes(H)), S, S)) if prefixes else None)

    def check_features(self, features: RandomFourierFeatures, sigmas: np.ndarray | None = None) -> None:
        """Raise unless these statistics were accumulated with ``features`` (and the noise levels ``sigmas``)."""
        super().check_features(features)
        if sigmas is not None and not _same_levels(np.asarray(sigmas, dtype=np.float64), self.sigmas):
            raise ValueError(f"the statistics were accumulated for noise levels {self.sigmas.tolist()}, "
                             f"not {np.asarray(sigmas).tolist()}")

    def _check_combinable(self, other: NCFDStats, sign: float) -> None:
        super()._check_combinable(other, sign)
        if not _same_levels(self.sigmas, other.sigmas):
            raise ValueError(f"cannot combine NCFD statistics of noise levels {self.sigmas.tolist()} "
                             f"and {other.sigmas.tolist()}")


def ncfd_chunk_stats(x: Any, features: RandomFourierFeatures, sigmas: np.ndarray,
                     block_bytes: int = DEFAULT_BLOCK_BYTES, precision: str = "float64",
                     mixture: GaussianMixtureBase | None = None, prefixes: bool = False) -> NCFDStats:
    """NCFD statistics of one chunk of rows (docs/mathematics.md, "Noise-conditional Fisher divergence"); any array-API
    namespace, host float64 out.

    ``precision`` and ``block_bytes`` (the cap on the per-row part of the task's memory) as for
    :func:`tgpflow.stats.tgp.tgp_chunk_stats`; the whole task is planned by :func:`ncfd_memory`. ``mixture``: the
    mixture base the per-level ``V_h`` are summed under (module docstring; float64; at σ = 0 evaluated on the host,
    at the noisy levels where the chunk is).
    ``prefixes``: keep Ā of the ladder's lower parts too (``abar_prefix``)."""
    sigmas = np.asarray(sigmas, dtype=np.float64)
    if sigmas.ndim != 1 or sigmas.size < 1 or sigmas[0] != 0.0 or np.any(np.diff(sigmas) <= 0):
        raise ValueError(f"noise levels must start at 0 and increase; got {sigmas.tolist()}")
    n, d = int(x.shape[0]), int(x.shape[1])
    if d != features.n_dims:
        raise ValueError(f"chunk has {d} columns but the features were drawn for d={features.n_dims}")
    S = features.n_features
    moments = Moments.from_rows(x)
    out = NCFDStats.zero(features, sigmas, prefixes)
    V, base_sums, host = None, None, None
    if mixture is not None:
        V = np.zeros((sigmas.size, S, d))
        host = to_numpy(x).astype(np.float64)
        score0, base_sums = mixture_terms(mixture, host)
        score0 = score0 - _gaussian_score(mixture, 0.0, host)  # the departure from the mixture's Gaussian
        seed = noise_seed(host)
    if n == 0:
        return dataclasses.replace(out, moments=moments, V=V, base_sums=base_sums, mixture=mixture)
    rows = plan_blocks(ncfd_memory(features, sigmas.size, precision, mixture, prefixes), block_bytes, chunk_rows=n,
                       budget=task_budget()[0]).rows
    scale2 = 2.0 / S  # φφᵀ = (2/S) cos cosᵀ, φ'φ'ᵀ = (2/S) sin sinᵀ
    scale = math.sqrt(scale2)
    abar, gram0 = out.abar, out.gram0
    u, U, psi = out.u, out.U, out.psi
    for h, sigma in enumerate(sigmas):
        level = features.with_bandwidth(level_bandwidth(features.gamma, float(sigma)))
        score = None if mixture is None or h > 0 else score0
        g_sin, g_cos, u_h, U_h, psi_h, V_h = level_products(x, level, rows, cos_gram=sigma > 0, precision=precision,
                                                            score=score)
        if V is not None:
            V[h] = -scale * (V_h if h == 0 else _noisy_sin_score(host, level, mixture, float(sigma), (seed, h), rows,
                                                                 x))
        w_plus, w_minus = ncfd_weights(features, float(sigma))
        g_sin *= scale2
        if h == 0:
            gram0 += g_sin
        abar += np.multiply(g_sin, w_plus, out=g_sin)  # in place: no S² temporary
        del w_plus
        if g_cos is not None:
            g_cos *= scale2
            abar += np.multiply(g_cos, w_minus, out=g_cos)
        del g_sin, g_cos, w_minus
        u[h] = -scale * u_h
        U[h] = -scale * U_h
        psi[h] = scale * psi_h
        if out.abar_prefix is not None and h + 1 in out.prefixes:  # Ā of the first h + 1 levels
            out.abar_prefix[out.prefixes.index(h + 1)] = abar
    return dataclasses.replace(out, moments=moments, V=V, base_sums=base_sums, mixture=mixture)


def noise_seed(x: np.ndarray) -> int:
    """The seed of a chunk's NCFD noise: a BLAKE2b digest of its rows rounded to 2⁻²⁰ of the power of two just
    above its largest |value| (−0 as 0).

    Why rounded: the rows reach the pass in the fitting space, after standardization, bounds and dequantization,
    whose last bits depend on the CPU's vector code (NumPy's exp, log and reductions). Keyed on the exact bytes, the
    goldens' NCFD fit drew other noise on an AVX-512 machine than where they were written, its rows a few ulps
    apart: every noisy level's ``V_h`` moved by up to 20 %. Rounded, a value changes the key only when its own
    rounding error crosses a grid point, about once in 10⁹ values."""
    top = float(np.max(np.abs(x), initial=0.0))
    quantum = math.ldexp(1.0, math.frexp(top)[1] - 20) if 0.0 < top < math.inf else 1.0
    grid = np.rint(np.asarray(x, dtype=np.float64) / quantum) + 0.0  # a power of two: the division is exact
    return int.from_bytes(hashlib.blake2b(np.ascontiguousarray(grid, dtype="<f8").tobytes(), digest_size=8).digest(),
                          "little")


def _noisy_sin_score(x: np.ndarray, level: RandomFourierFeatures, mixture: GaussianMixtureBase, sigma: float,
                     key: tuple[int, int], rows: int, chunk: Any = None) -> np.ndarray:
    """Σ_i sin_h(y_i) (s_h(y_i) − g_h(y_i))ᵀ (unscaled, S × d) at y_i = x_i + ξ_i, ξ_i ~ N(0, σ²I) seeded by
    ``key``, the chunk's :func:`noise_seed` and the level h (module docstring). The noise is drawn on the host (the
    same draws wherever the chunk is); with ``chunk`` on a device (docs/gpu.md) the noisy rows go there, and the
    scores, the sines and their product are formed there."""
    rng = np.random.default_rng(list(key))
    y = x + sigma * rng.standard_normal(x.shape)
    if on_a_device(chunk):
        return _noisy_sin_score_on(chunk, y, mixture, sigma, level, rows)
    score = mixture.at_level(sigma).derivatives(y)[1] - _gaussian_score(mixture, sigma, y)
    out = np.zeros((level.n_features, x.shape[1]))
    for start in range(0, y.shape[0], rows):
        sin, _ = level.sincos(y[start:start + rows] - level.shift)
        out += sin @ score[start:start + rows]
    return out


def _noisy_sin_score_on(chunk: Any, y: np.ndarray, mixture: GaussianMixtureBase, sigma: float,
                        level: RandomFourierFeatures, rows: int) -> np.ndarray:
    """:func:`_noisy_sin_score`'s sums on the device of ``chunk``: the noisy rows y moved there, the scores of the
    mixture and of its Gaussian evaluated there (:meth:`GaussianMixtureBase.score_on`), host float64 out."""
    xp, dev = namespace(chunk), device_of(chunk)
    yd = xp.asarray(y, device=dev)
    shift = xp.asarray(level.shift, device=dev)
    mean = xp.asarray(mixture.mean, device=dev)
    inv_cov = xp.asarray(np.linalg.inv(mixture.cov + sigma * sigma * np.eye(mixture.n_dims)), device=dev)
    at_level = mixture.at_level(sigma)
    out = xp.zeros((level.n_features, y.shape[1]), dtype=xp.float64, device=dev)
    n = y.shape[0]
    rows = max(rows, DEVICE_BLOCK_BYTES // (3 * 8 * level.n_features))  # the device's memory bounds its blocks
    for start in range(0, n, rows):
        yb = yd[start:min(start + rows, n), ...]
        score = at_level.score_on(yb) + (yb - mean) @ inv_cov  # s_h − g_h, g_h = −(Σ + σ²I)⁻¹(y − μ)
        sin, _ = level.sincos(yb - shift)
        out = out + sin @ score
    return to_numpy(out)


def _gaussian_score(mixture: GaussianMixtureBase, sigma: float, y: np.ndarray) -> np.ndarray:
    """The score −(Σ + σ²I)⁻¹(y − μ) of the Gaussian with the mixture's mean μ and covariance Σ, at level σ."""
    cov = mixture.cov + sigma * sigma * np.eye(mixture.n_dims)
    return -np.linalg.solve(cov, (y - mixture.mean).T).T


def _ncfd_cost(n_dims: int, features: RandomFourierFeatures, sigmas: np.ndarray,
               block_bytes: int = DEFAULT_BLOCK_BYTES, precision: str = "float64",
               mixture: GaussianMixtureBase | None = None, prefixes: bool = False) -> tuple[MemoryCost, int]:
    return ncfd_memory(features, np.asarray(sigmas).size, precision, mixture, prefixes), block_bytes


declare(ncfd_chunk_stats, _ncfd_cost)
