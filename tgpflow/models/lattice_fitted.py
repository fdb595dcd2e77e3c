"""A fitted density of dequantized rows, evaluated as cell densities on its discrete columns (docs/gp_tilted.md,
"Integer codes and other lattices"; :mod:`tgpflow.features.lattice`).

``inner`` is any :class:`~tgpflow.models.fitted.Fitted` value in the data's units, fitted to rows whose discrete
columns were moved by uniform noise over their cells, after the transform ``t`` onto ℝ of their range between
the outer edges of their extreme cells (the identity on the codes' range, log tails in the outer half-cells:
:meth:`~tgpflow.features.lattice.LatticeCells.bounds_with`). In the data's units

* ``log p(x) = log (1/|C|) ∫_C p_inner``: the average over the cell C of the lattice point nearest x (the other
  columns at their values). The integral is taken in the transformed coordinates, where the fitted density is
  smooth: ``∫_C p_inner dx = ∫_{t(C)} p_inner(x(τ)) / t'(x(τ)) dτ``, on the fixed points u of
  :meth:`~tgpflow.features.lattice.LatticeCells.cell_rule`: ``τ = τ_lo + (τ_hi − τ_lo)·u`` over an inner cell,
  and over an extreme cell, which reaches τ = ±∞, by one of two maps:

  * with the product midpoint rule (≤ 3 columns integrated), ``τ = τ_edge ∓ s·u/(1 − u)`` (s: the base's standard
    deviation along τ for a code's extreme cell, an atom's block width for its block; a far atom's block by its own
    law's quantile, :mod:`tgpflow.features.atom_blocks`). The algebraic map makes
    the integrand vanish smoothly at u = 1 for any exponential decay of the density along τ, where ``−s·log(1 − u)``
    left a singularity ``(1 − u)^(s−1)`` whenever s < 1: against brute force it cut the extreme cells' error in one
    column from ≤ 3.7e-3 to ≤ 7e-4 nats, and an atom's block's from ≤ 1.8e-3 to ≤ 1.5e-4 (in the log coordinate
    of atoms without a core);
  * with Sobol points (more columns), ``τ = τ_edge ∓ s·(−log(1 − u))``. Rows spread uniformly over an extreme
    cell's outer half (or an atom's block) have a density ∝ e^(±τ/s) near the bound in the log tail's coordinate
    (s = step/2, or an atom's block width), and this map makes that integrand constant in u. A Monte Carlo average's
    log is biased low by about its relative variance over 2N, so a flat integrand matters more here than a smooth
    one: on the letter set (32 code columns, in logit coordinates then) the held-out log-likelihood at 64 points
    rose from −25.11 (the algebraic map, the base's s) to −24.42 nats/row, against
    −24.20 at 1 024 points (measured accuracy in docs/gp_tilted.md). A code beyond the lattice's range gets its extreme
  cell's density times its share of that cell's tail (:meth:`~tgpflow.features.lattice.LatticeCells.tail_log_shares`);
  a value beyond an atom's edge has log density −inf. The sums are log-sum-exp in float64;
* samples, base draws and reference draws are the inner model's with the discrete columns rounded to the
  lattice (:meth:`~tgpflow.features.lattice.LatticeCells.snap`), and samples spill into the tails; weights and
  the normaliser are unchanged;
* a calibration of the code frequencies (:mod:`tgpflow.features.code_calibration`) multiplies a row's density
  by ``e^{η(k)}/Z`` at its codes k (beyond the range, the extreme code's), and a sample's proposal weight by
  ``e^{η(k)}`` before the one resampling;
* the score, its Jacobian diagonal and the Hyvärinen terms are the inner model's: a discrete column has none.
"""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar

import numpy as np
from scipy.special import logsumexp

from tgpflow.core.gaussian_base import resample
from tgpflow.features.atom_blocks import QUADRATURE_SPREAD, far_depths
from tgpflow.features.lattice import LatticeCells
from tgpflow.models.fitted import Fitted, WrappedFitted, fitted_from_arrays, prefixed, proposal_count

__all__ = ["LatticeFitted", "with_lattice"]

#: Points per block of cell averages (a block holds as many rows as fit, each evaluated at its cell's points,
#: :meth:`~tgpflow.features.lattice.LatticeCells.cell_rule`): 64k points of d columns, float64.
_BLOCK_POINTS = 1 << 16


def with_lattice(fitted: Fitted, cells: LatticeCells | None) -> Fitted:
    """``fitted`` (in the data's units) with its discrete columns as cells, or itself without any."""
    return fitted if cells is None else LatticeFitted(fitted, cells)


@dataclasses.dataclass(frozen=True, eq=False)
class LatticeFitted(WrappedFitted):
    """See the module docstring."""

    kind: ClassVar[str] = "lattice"
    inner: Fitted
    cells: LatticeCells

    def _to_data(self, rows: np.ndarray) -> np.ndarray:
        return self.cells.snap(rows)

    # -- storage ----------------------------------------------------------------------------
    def _own_arrays(self) -> dict[str, np.ndarray]:
        return {f"cells.{k}": v for k, v in self.cells.to_arrays().items()}

    def to_meta(self) -> dict[str, Any]:
        return {"kind": self.kind, "columns": list(self.cells.columns), "atom_columns": list(self.cells.atom_columns),
                "inner": self.inner.to_meta()}

    @classmethod
    def from_arrays(cls, arrays: dict[str, np.ndarray], meta: dict[str, Any]) -> LatticeFitted:
        cells = LatticeCells.from_arrays(prefixed(arrays, "cells."))
        cells = dataclasses.replace(cells, columns=tuple(meta["columns"]),
                                    atom_columns=tuple(meta.get("atom_columns", cells.atom_columns)))
        return cls(fitted_from_arrays(prefixed(arrays, "inner."), meta["inner"]), cells)

    # -- evaluation -------------------------------------------------------------------------
    def log_density(self, x: np.ndarray) -> np.ndarray:
        rows = self.cells.snap(x, block=False)  # a reading at an atom is within δ/2 of it; further beyond has no mass
        distinct, inverse = np.unique(rows, axis=0, return_inverse=True)
        if distinct.shape[0] <= rows.shape[0] // 2:
            # equal rows have equal densities: a table of codes alone repeats a few hundred cells over its rows, and
            # each cell's integral costs up to 256 points (measured: the anomaly threshold over a 30 000-row pilot of
            # four codes took 14 s). Rows that are mostly distinct are integrated as they come, in their order
            return self._snapped_log_density(distinct)[inverse.reshape(-1)]
        return self._snapped_log_density(rows)

    def _snapped_log_density(self, rows: np.ndarray) -> np.ndarray:
        """:meth:`log_density` of rows already snapped to the atoms."""
        cells = self.cells
        codes = cells.codes(rows)
        # a code beyond the range: its edge cell's, times its share; a calibration's weight of the row's codes
        tails = cells.tail_log_shares(codes) + cells.code_log_weights(codes)
        rows = cells.clip_codes(rows)
        at = cells.at_atom(rows)
        beyond = cells.atom_side * (rows[:, cells.atom_positions] - cells.atom_value) > 1e-9 * cells.atom_width
        inside = ~np.any(beyond, axis=1) & np.isfinite(tails)
        out = np.full(rows.shape[0], -np.inf)  # beyond an atom's edge (or a tail of no mass): no cell, no mass
        for pattern in np.unique(at[inside], axis=0):  # the rows at the same atoms integrate over the same blocks
            chosen = inside & np.all(at == pattern, axis=1)
            out[chosen] = self._cell_log_density(rows[chosen], np.flatnonzero(pattern)) + tails[chosen]
        return out

    def sample(self, n_samples: int, random_state: Any = None, *, n_proposals: int | None = None,
               return_ess: bool = False) -> np.ndarray | tuple[np.ndarray, float]:
        """The inner model's draws rounded to the lattice, their extreme codes moved into the tails
        (:meth:`~tgpflow.features.lattice.LatticeCells.spill`). The diagnostics' draws (base and reference draws)
        are not: a model's tails are its guess at codes the data never showed, not mass it put off them."""
        if not self.cells.calibrated:
            rows, ess = self.inner.sample(n_samples, random_state, n_proposals=n_proposals, return_ess=True)
        else:  # the inner model's weighted proposal draws, each weight times its codes' e^η, resampled once
            rng = np.random.default_rng(random_state)
            n_prop = proposal_count(n_samples, n_proposals)
            points, weights = self.inner.reference_sample(n_prop, rng)
            log_w = np.log(weights, out=np.full(n_prop, -np.inf), where=weights > 0)
            log_w += self.cells.code_log_weights(self.cells.codes(points))
            weights = np.exp(log_w - log_w.max())
            rows, ess = resample(points, weights / weights.sum(), n_samples, rng)
        rows = self.cells.spill(self._to_data(rows), rows)
        return (rows, ess) if return_ess else rows

    def _cell_log_density(self, rows: np.ndarray, atoms: np.ndarray) -> np.ndarray:
        """log (∫ over each row's cell and the blocks of ``atoms`` (indices of the atoms it is at)) − log of their
        sizes (the cells' steps and the atoms' units)."""
        cells = self.cells
        positions = np.r_[cells.positions, cells.atom_positions[atoms]].astype(np.int64)
        if positions.size == 0:
            return self.inner.log_density(rows)
        full = cells.bounds_with(None, [str(j) for j in range(rows.shape[1])])
        span = full.columns_at(positions)
        n, n_lat = rows.shape[0], cells.positions.size
        centres = np.clip(rows[:, cells.positions], cells.origin, cells.top)
        low = np.c_[centres <= cells.origin, np.broadcast_to(cells.atom_side[atoms] < 0, (n, atoms.size))]
        high = np.c_[centres >= cells.top, np.broadcast_to(cells.atom_side[atoms] > 0, (n, atoms.size))]
        value = np.broadcast_to(cells.atom_value[atoms], (n, atoms.size))
        with np.errstate(divide="ignore", invalid="ignore"):
            lo = span.forward(np.c_[np.where(low[:, :n_lat], cells.origin, centres - cells.step / 2), value])
            hi = span.forward(np.c_[np.where(high[:, :n_lat], cells.top, centres + cells.step / 2), value])
        units, weights, n_plain = cells.cell_rule(positions.size)
        k, m = units.shape
        product = m <= 3  # the product midpoint rule, else scrambled Sobol points (cell_rule)
        # the decay along τ of rows spread over an extreme cell, e^(±τ/w) in its core's log tail (w: the cell's
        # half-step, an atom's block width; e^(±τ) where an atom's column has the log of its bound): the scale of
        # both maps, except the product rule's where the half-line does not start with the tail (an extreme code
        # cell starts with the flat core half of the cell): the base's spread there (against brute force on two
        # code columns, 0.088 nats at worst on the Gaussian base and 0.11 on the mixture base, where the half-step
        # gave 0.15 and 0.18; on a cored atom's block, which starts at its edge, the width is within 1e-3 nats at
        # 32 points: tests/test_lattice.py)
        cored = span.cored[n_lat:]
        scale = np.r_[cells.step / 2, np.where(cored, cells.atom_width[atoms], 1.0)]
        # a far atom's block (atom_blocks): points at its rows' depths, widened to QUADRATURE_SPREAD, in both rules
        depth = np.r_[np.zeros(n_lat), cells.atom_depth[atoms]]
        far = depth > 0
        if self.inner.base is not None and product:
            spread = np.sqrt(np.diag(self.inner.base.cov))[positions]
            scale = np.where(np.r_[np.ones(n_lat, dtype=bool), ~cored] & ~far, spread, scale)
        u = units[None]  # (1, k, m)
        # an extreme cell (module docstring): τ = edge ∓ s·u/(1 − u), dτ/du = s/(1 − u)², for the product rule;
        # τ = edge ∓ s·(−log(1 − u)), dτ/du = s/(1 − u), for Sobol points (the same for every row: once)
        reach = scale * u / (1 - u) if product else -scale * np.log1p(-u)
        log_tail = np.log(scale) - (2 if product else 1) * np.log1p(-u)
        if far.any():
            deep, log_deep = far_depths(u, depth, QUADRATURE_SPREAD)
            reach, log_tail = np.where(far, scale * deep, reach), np.where(far, np.log(scale) + log_deep, log_tail)
        values = np.empty(n)
        block = max(1, _BLOCK_POINTS // k)
        for start in range(0, n, block):
            b = slice(start, min(start + block, n))
            interior = ~(low[b] | high[b])[:, None, :]
            edge = np.where(low[b], hi[b], lo[b])[:, None, :]
            tau = np.where(interior, lo[b, None, :] + (hi[b] - lo[b])[:, None, :] * u,
                           np.where(low[b, None, :], edge - reach, edge + reach))
            with np.errstate(divide="ignore", invalid="ignore"):
                log_du = np.where(interior, np.log(hi[b] - lo[b])[:, None, :], log_tail)
            xs = span.inverse(tau.reshape(-1, m))
            points = np.repeat(rows[b], k, axis=0)
            points[:, positions] = xs
            # far out on a half-line (u → 1: τ = ±60·s) t⁻¹ reaches the bound in float64, where t' is infinite and
            # the density's point carries nothing: its term is −inf, not a warning or a NaN
            with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
                terms = self.inner.log_density(points) - np.log(span.derivatives(xs)[1]).sum(axis=1)
            terms = np.where(np.isnan(terms), -np.inf, terms).reshape(-1, k) + log_du.sum(axis=2)
            with np.errstate(divide="ignore"):  # a cell where the density is 0 has log density −inf
                total, sign = logsumexp(terms, axis=1, b=weights, return_sign=True)
                # the extrapolation fails (≤ 0) only where the coarse rule exceeds 4× the fine one: keep the fine one
                plain = logsumexp(terms[:, :n_plain], axis=1) - np.log(n_plain)
            values[b] = np.where(sign > 0, total, plain)
        return values - cells.log_volume - np.log(cells.atom_unit[atoms]).sum()  # ∫ p / (|C|·Π δ)

    def grad_log_density(self, x: np.ndarray) -> np.ndarray:
        return self.inner.grad_log_density(x)

    def score_hessian_diag(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return self.inner.score_hessian_diag(x)  # type: ignore[attr-defined]

    def hyvarinen_terms(self, x: np.ndarray) -> np.ndarray:
        return self.inner.hyvarinen_terms(x)
