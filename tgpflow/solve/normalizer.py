"""The log normaliser of a tilted Gaussian density by importance sampling (docs/mathematics.md, "MAP, baselines and
sampling").

Every GP-tilted density (and a kernel exponential family with a Gaussian base) has the form
``q̃(x) = e^{T(x)} N(x | μ, Σ) · (2π)^{d/2}|Σ|^{1/2}`` — an unnormalised log density
``log q̃(x) = T(x) − ½(x−μ)ᵀP(x−μ)``. Its normaliser is

``Z = ∫ q̃(x) dx = E_{ζ~q} [ q̃(ζ) / q(ζ) ]``,

estimated from M seeded draws of the proposal ``q`` — the base made defensive against mass far
from the data (:mod:`tgpflow.core.proposal`) — by ``Ẑ = (1/M) Σ_j w_j``,
``log w_j = log q̃(ζ_j) − log q(ζ_j)`` (the importance weights of the resampler, docs/mathematics.md, "MAP, baselines
and sampling"). With the effective sample size ``ESS = (Σw)²/Σw²`` the delta-method standard error of ``log Ẑ`` is
``√(1/ESS − 1/M)``. The same self-normalised weights give the model's mean, spread and the mass it
puts outside a box.

The draws are generated in fixed blocks of :data:`DRAW_BLOCK` rows, block ``b`` from child ``b``
of ``SeedSequence(seed)``: memory is bounded, and the estimate depends only on (seed, M), not on
how it is computed. Sums are float64 and kept relative to a running maximum log weight (a
streamed log-sum-exp), so no weight overflows. A draw whose log density is −inf (a KDE-RFF
estimate ≤ 0) has weight 0; NaN raises.

Several candidate densities can be scored on the same draws at once (common random numbers:
the differences between candidates are then far more precise than each estimate), which is
how the held-out log-likelihood selects λ (:mod:`tgpflow.solve.select`).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from tgpflow.core.choices import DEFAULT_NORMALIZER_DRAWS
from tgpflow.core.gaussian_base import Base
from tgpflow.core.proposal import DRAW_BLOCK, proposal_blocks

__all__ = ["NormalizerEstimate", "DEFAULT_NORMALIZER_DRAWS", "DRAW_BLOCK", "base_proposal_blocks",
           "estimate_log_normalizer", "WeightSums"]

@dataclasses.dataclass(frozen=True)
class NormalizerEstimate:
    """An importance-sampling estimate of log Z with its quality, and the model's moments.

    ``mass_outside`` is the normalised mass outside the support box that was passed (None
    without one); ``mean``/``std`` are the model's per-column mean and standard deviation.
    """

    log_z: float
    std_error: float
    ess: float
    n_draws: int
    mean: np.ndarray
    std: np.ndarray
    mass_outside: float | None = None

    @property
    def ess_fraction(self) -> float:
        """ESS as a share of the draws: 1 for a perfect proposal, ≈ 0 when a few draws carry all weight."""
        return self.ess / self.n_draws

    def to_dict(self) -> dict[str, Any]:
        return {"log_z": self.log_z, "std_error": self.std_error, "ess": self.ess, "n_draws": self.n_draws,
                "ess_fraction": self.ess_fraction, "mean": self.mean.tolist(), "std": self.std.tolist(),
                "mass_outside": self.mass_outside}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> NormalizerEstimate:
        return cls(float(d["log_z"]), float(d["std_error"]), float(d["ess"]), int(d["n_draws"]),
                   np.asarray(d["mean"], dtype=np.float64), np.asarray(d["std"], dtype=np.float64),
                   None if d.get("mass_outside") is None else float(d["mass_outside"]))


def base_proposal_blocks(base: Base, n_draws: int, random_state: Any,
                         block_rows: int = DRAW_BLOCK) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """Blocks of (ζ, log q(ζ), −log base(ζ)) for ``n_draws`` draws ζ of the defensive proposal around the base
    (N(μ, Σ) or a mixture, :func:`tgpflow.core.proposal.proposal_blocks`); block b from child seed b. The third is
    :meth:`~tgpflow.core.gaussian_base.Base.neg_log`, taken around a mixture from the log m that log q was built
    from (one evaluation of the mixture, not two)."""
    for points, log_q, log_m in proposal_blocks(base.mean, base.cov, n_draws, random_state, block_rows, base.mixture):
        yield points, log_q, base.neg_log(points, log_m)


class WeightSums:
    """Streamed sums of importance weights for k candidates: Σw, Σw², Σw·x, Σw·x², Σw·1[outside],
    and (with ``n_hist``) weight sums per histogram bin (the model side of a sliced KS distance).

    All sums are held relative to a running maximum log weight per candidate (float64).
    """

    def __init__(self, k: int, d: int, n_hist: int = 0):
        self.max = np.full(k, -np.inf)
        self.s1 = np.zeros(k)
        self.s2 = np.zeros(k)
        self.sx = np.zeros((k, d))
        self.sxx = np.zeros((k, d))
        self.s_out = np.zeros(k)
        self._hist = np.zeros((n_hist, k)) if n_hist else None  # (bins, candidates): a bin's k sums side by side
        self.n = 0

    @property
    def hist(self) -> np.ndarray | None:
        """(k, n_hist) weight sums per histogram bin, relative to :attr:`max`."""
        return None if self._hist is None else self._hist.T

    def add(self, log_w: np.ndarray, points: np.ndarray, outside: np.ndarray | None = None,
            bins: np.ndarray | None = None) -> None:
        """Add a block: ``log_w`` (rows, k) log weights of the candidates at ``points`` (rows, d);
        ``bins`` (rows, K) flat histogram indices of the points (e.g. ``ProjectionGrid.bins``)."""
        if np.isnan(log_w).any() or np.isposinf(log_w).any():
            raise FloatingPointError("the model's log density is NaN or +inf at some proposal draws")
        self.n += log_w.shape[0]
        block_max = log_w.max(axis=0)
        new_max = np.maximum(self.max, block_max)
        finite = np.isfinite(new_max)
        if not finite.any():
            return
        shift = np.where(finite & np.isfinite(self.max), np.exp(np.where(finite, self.max - new_max, 0.0)), 0.0)
        if not np.all(shift == 1.0):  # (most blocks: no new maximum, and × 1 is exact)
            for name in ("s1", "s_out"):
                setattr(self, name, getattr(self, name) * shift)
            self.s2 *= shift * shift
            self.sx *= shift[:, None]
            self.sxx *= shift[:, None]
            if self._hist is not None:
                self._hist *= shift
        self.max = new_max
        w = np.exp(log_w - np.where(finite, new_max, 0.0))  # −inf log weights → 0
        self.s1 += w.sum(axis=0)
        self.s2 += (w * w).sum(axis=0)
        self.sx += w.T @ points
        self.sxx += w.T @ (points * points)
        if outside is not None:
            self.s_out += w[outside].sum(axis=0)
        if self._hist is not None and bins is not None:
            from tgpflow.stats.histogram_kernel import add_weighted_counts  # Numba: imported when first used

            bins = np.ascontiguousarray(bins, dtype=np.int64)
            if bins.size and (bins.min() < 0 or bins.max() >= self._hist.shape[0]):  # the kernel does not check
                raise ValueError(f"histogram bin indices outside [0, {self._hist.shape[0]})")
            add_weighted_counts(bins, np.ascontiguousarray(w), self._hist)

    def estimates(self, with_box: bool) -> list[NormalizerEstimate]:
        """One :class:`NormalizerEstimate` per candidate."""
        out = []
        for j in range(self.max.shape[0]):
            if not (np.isfinite(self.max[j]) and self.s1[j] > 0):
                raise FloatingPointError("the model's log density is −inf at every proposal draw: its "
                                         "normaliser cannot be estimated from the base")
            ess = float(self.s1[j] ** 2 / self.s2[j])
            mean = self.sx[j] / self.s1[j]
            var = np.maximum(self.sxx[j] / self.s1[j] - mean * mean, 0.0)
            out.append(NormalizerEstimate(
                log_z=float(self.max[j] + math.log(self.s1[j]) - math.log(self.n)),
                std_error=math.sqrt(max(1.0 / ess - 1.0 / self.n, 0.0)),
                ess=ess, n_draws=self.n, mean=mean, std=np.sqrt(var),
                mass_outside=float(self.s_out[j] / self.s1[j]) if with_box else None))
        return out


def estimate_log_normalizer(log_density: Callable[[np.ndarray], np.ndarray], base: Base, *,
                            n_draws: int = DEFAULT_NORMALIZER_DRAWS, random_state: Any = 0,
                            outside: Callable[[np.ndarray], np.ndarray] | None = None,
                            data_units: Callable[[np.ndarray], np.ndarray] | None = None,
                            tilt: Callable[[np.ndarray], np.ndarray] | None = None,
                            log_weight: Callable[[np.ndarray], np.ndarray] | None = None,
                            observe: Callable[[np.ndarray, np.ndarray], None] | None = None) -> NormalizerEstimate:
    """log Z of the unnormalised ``log_density`` by importance sampling from the defensive proposal around
    ``base`` (module docstring).

    ``outside(points) -> bool mask`` (optional, e.g. :meth:`tgpflow.stats.support.SupportBox.outside`)
    adds the normalised mass outside that region to the estimate. ``data_units`` maps the draws to
    the data's units (bounded columns) before the moments and ``outside`` see them. ``tilt``: for a tilt of ``base``,
    ``log_density − log base`` (unnormalised), so that the base's term comes from the proposal's own evaluation of it
    (:func:`base_proposal_blocks`; a mixture's is most of a draw's cost) instead of a second one. ``log_weight``:
    a term of the log density read off the draws in the data's units (a calibration of discrete columns' code
    frequencies, :mod:`tgpflow.features.code_calibration`). ``observe(data, log_w)`` is given each block's draws in
    the data's units and their log weights (the code calibration checks its reweighting on them).
    """
    sums = WeightSums(1, base.mean.shape[0])
    for points, log_prop, neg_log_base in base_proposal_blocks(base, n_draws, random_state):
        log_p = log_density(points) if tilt is None else tilt(points) - neg_log_base
        data = points if data_units is None else data_units(points)
        if log_weight is not None:
            log_p = log_p + log_weight(data)
        log_w = (np.asarray(log_p, dtype=np.float64) - log_prop)[:, None]
        sums.add(log_w, data, None if outside is None else outside(data))
        if observe is not None:
            observe(data, log_w[:, 0])
    return sums.estimates(outside is not None)[0]
