"""Lattice-valued columns modelled as discrete: uniform dequantization and cell densities (docs/gp_tilted.md,
"Integer codes and other lattices").

A column whose values lie on a lattice ``origin + k·step`` (integer codes, binary flags, counts) has no density:
a smooth model fitted to its points either collapses onto them or spreads between them. ``discrete=`` declares
such columns (``"auto"``: the coarse lattices the pilot shows,
:func:`~tgpflow.features.lattice_choice.choose_discrete`). For them

* the fit sees each row moved by uniform noise over its cell, ``x_j + (u_j − ½)·step_j`` (in the data's units,
  before any standardization) with ``u_j`` in (0, 1) a fixed function of the chunk's content (a BLAKE2b digest
  of its rows), the row's place in it and the column: every pass and refit sees the same noise for the same
  chunk (a pipeline's partitions, a refit's old chunks), and chunks that hold other rows draw other noise (two
  partitions, or two ``partial_fit`` batches, whose rows sit in the same order do not share their noise). The
  pilot's rows draw theirs from their keys. A value of the pass off the pilot's lattice, or beyond its lowest
  or highest point, is an error naming the chunk and the column
  (:func:`~tgpflow.features.lattice_chunks.dequantize_chunk`). Noise over the middle half of each cell
  (:data:`NOISE_WIDTH` 0.5) leaves gaps at the cell edges that keep a mixture base's spill out of the neighbouring
  cells (the rental table: +0.14 nats/row held out), but the Gaussian base's
  tilt then chases the comb it makes (a 7-code table: held-out −3.24 to −3.54 against −3.22 nats/row, code
  frequencies 2–13 times further from the data's), so the noise spans whole cells;
* the dequantized column lies strictly inside ``(lowest − step/2, highest + step/2)``, the outer edges of the
  pilot's extreme cells, and is fitted after a transform onto ℝ that is the identity on ``[lowest, highest]`` with
  log tails in the outer half-cells (:meth:`LatticeCells.bounds_with`; the cores of
  :class:`~tgpflow.features.bounds.ColumnBounds`): a smooth model of the flat blocks that uniform noise makes
  cannot stop at their hard outer edges (on the rental table 17 % of a fit's mass lay beyond the codes without
  the bounds), and the logit of those edges, used before, stretched the cells next to them (on the letter set
  the samples came out 8 % wider than the data, column by column, and 1.27× the tuned mixture's sliced KS);
* a code beyond the pilot's range is not impossible, only unseen: each extreme cell lends a share ε of its
  probability to the codes beyond it, ``ε·(1 − ρ)·ρ^(s−1)`` to the code s steps beyond (:data:`TAIL_RATIO` ρ),
  with ε = 1/(n + 2) for the n pilot rows at that code (Laplace's rule of succession: the chance that the
  next row past the edge is new). The fit never sees the tails (a pass value beyond the range is still an
  error); a held-out row beyond the range scores its edge cell's density times its tail share (:meth:`LatticeCells.
  tail_log_shares`), and the model's samples at an extreme code move beyond it with that law (:meth:`LatticeCells.
  spill`). Without them, a held-out row one code past the training rows' (four ADBench sets) scored −inf;
* the model q is a density of the dequantized rows, and a row's density is its cell's average of q,
  ``p(x) = (1/|C(x)|) ∫_{C(x)} q``, where C(x) is the cell of the lattice point nearest x in the discrete
  columns (the other columns at their values): piecewise constant across a cell, it is a density in the data's
  units, comparable with any continuous model on dequantized rows, and ``p(x)·Π step_j`` is the probability of
  the row's lattice point (for the discrete columns) times the density of the others;
* the cell average is a weighted mean over fixed points u of the cell (:meth:`LatticeCells.cell_rule`), taken in
  the transformed coordinate τ where the fit is smooth (:class:`~tgpflow.models.lattice_fitted.LatticeFitted`): for up
  to three discrete columns the product midpoint rule on k and k/2 points a column, Richardson-extrapolated
  (``(4·I_k − I_{k/2})/3``, its error O(k⁻⁴) against the midpoint's O(k⁻²); k = 32, 8, 4: 48, 80, 72 points),
  scrambled Sobol points (:data:`CELL_POINTS`, a fixed seed) for more. Against brute-force integrals in the
  data's units it missed by ≤ 3e-4 nats on inner cells and ≤ 2e-3 on extreme cells in one column, ≤ 1e-4 and
  ≤ 0.04 (cells holding ≥ 0.1 % of the mass) in two. Scoring costs that many evaluations of q a row;
* samples are the model's draws with those columns rounded to the nearest lattice point (up to the importance
  resampling, their law is the cell probabilities), and the diagnostics (mass outside the training rows' box,
  the sample check) judge the rounded values.

Atoms. A continuous column whose lowest (or highest) value carries at least 1 % of the rows (a meter's exact
zeros; :func:`~tgpflow.io.column_kinds.column_kinds`'s ``edges``) has a point mass there. ``discrete="auto"``
dequantizes it into a block beyond the edge, ``(v − w, v)`` for a lowest value v (w:
:data:`~tgpflow.features.lattice_choice.ATOM_BLOCK` of the column's standard deviation; where in it:
:mod:`tgpflow.features.atom_blocks`), bounds the column at ``v − w`` and fits it after ``log(x − v + w)`` or with a
core (:func:`~tgpflow.features.lattice_choice.edge_atoms`). A row at the atom gets the block's probability over ``δ``
(the column's lattice step where it has one: 0.001 for 3 decimals; else ``w``); samples in the block (and within
δ/2 of v) are v.

The score of a discrete column is not defined; :meth:`grad_log_density` of such a model is the dequantized
density's (q's), the field a sampler of the continuous relaxation needs. float64 throughout; the noise is
float64 from 53 bits of a SplitMix64 hash.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from tgpflow.features.atom_blocks import block_shares
from tgpflow.features.bounds import ColumnBounds
from tgpflow.io.column_kinds import decimals

__all__ = ["LatticeCells", "keyed_uniform", "CELL_POINTS", "NOISE_WIDTH", "TAIL_RATIO"]

#: The share of its cell, about its lattice point, that a row's noise spreads it over: the whole cell (module
#: docstring says why not less).
NOISE_WIDTH = 1.0
#: Sobol points of a cell average beyond three discrete columns (a power of 2: the scrambled net's balance). The
#: log of a Monte Carlo average is biased low; on the letter set (32 code columns, held out) the log-likelihood
#: was −24.42, −24.32, −24.24 and −24.20 nats/row at 64, 128, 256 and 1 024 points: 256 is within 0.04.
CELL_POINTS = 256
#: Midpoints a column of the finer of the two product rules, by the number of discrete columns (1, 2, 3).
_MIDPOINTS = {1: 32, 2: 8, 3: 4}
#: The ratio of a tail's geometric law beyond an extreme code: each code further out has this share of the
#: previous one's probability (a half: the tail's mean reach is two steps; module docstring).
TAIL_RATIO = 0.5
#: The salt of the uniforms that move a sample's extreme code into its tail (another stream than the noise's).
_TAIL_SALT = 0x7A11

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_COLUMN = np.uint64(0xD1B54A32D192ED03)


def _splitmix64(z: np.ndarray) -> np.ndarray:
    """SplitMix64's finaliser on uint64 (wrapping arithmetic; numpy arrays wrap without a warning)."""
    z = z + _GOLDEN
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


def keyed_uniform(keys: np.ndarray, positions: np.ndarray, seed: int, salt: int = 0) -> np.ndarray:
    """Uniform numbers in (0, 1), (n, m): a fixed function of (``seed``, ``salt``, a row's key, the column
    position)."""
    k = np.asarray(keys, dtype=np.int64).astype(np.uint64)[:, None]
    j = np.asarray(positions, dtype=np.int64).astype(np.uint64)[None, :] + np.uint64(1)
    mixed = _splitmix64(np.array([seed ^ _splitmix64(np.array([salt], dtype=np.uint64))[0]], dtype=np.uint64))[0]
    z = _splitmix64(_splitmix64(k ^ mixed) ^ (j * _COLUMN))
    return ((z >> np.uint64(11)).astype(np.float64) + 0.5) * 2.0**-53  # in (0, 1): never on a cell's edge


def _none(dtype: Any = np.float64) -> Any:
    return dataclasses.field(default_factory=lambda: np.empty(0, dtype=dtype))


@dataclasses.dataclass(frozen=True, eq=False)
class LatticeCells:
    """The discrete columns: their positions and names, each lattice's origin (its lowest point in the pilot),
    step and highest point, in the data's units, and the noise seed; and the atoms at continuous columns' edges
    (``atom_*``, one entry per atom: the column's position and name, the edge value v, the side of the block
    beyond it (−1: below a lowest value, +1: above a highest), the block's width w, the unit δ its density is
    given per, 1 where the column is fitted with a core (the identity from the atom on), 0 after the log of its
    bound, and the depth law of its block's rows, 0 uniform; module docstring, "Atoms"); and the fit's calibration
    of the code frequencies (``code_weights`` (m, K) η_j(k) and ``code_log_z`` (1,) log Z; empty: none;
    :mod:`tgpflow.features.code_calibration`)."""

    positions: np.ndarray
    columns: tuple[str, ...]
    origin: np.ndarray
    step: np.ndarray
    top: np.ndarray
    seed: int
    atom_positions: np.ndarray = _none(np.int64)
    atom_columns: tuple[str, ...] = ()
    atom_value: np.ndarray = _none()
    atom_side: np.ndarray = _none()
    atom_width: np.ndarray = _none()
    atom_unit: np.ndarray = _none()
    tail_low: np.ndarray = _none()
    tail_high: np.ndarray = _none()
    atom_core: np.ndarray = _none()
    atom_depth: np.ndarray = _none()
    code_weights: np.ndarray = _none()
    code_log_z: np.ndarray = _none()

    def __post_init__(self) -> None:
        for name in ("tail_low", "tail_high"):  # cells stored before the tails existed: none (ε = 0)
            if getattr(self, name).size != self.positions.size:
                object.__setattr__(self, name, np.zeros(self.positions.size))
        for name in ("atom_core", "atom_depth"):  # stored before atoms had cores (the log of the bound) or depths
            if getattr(self, name).size != self.atom_positions.size:  # (the uniform law)
                object.__setattr__(self, name, np.zeros(self.atom_positions.size))

    @property
    def calibrated(self) -> bool:
        """Whether the fit reweighted the codes (:mod:`tgpflow.features.code_calibration`)."""
        return self.code_weights.size > 0

    def with_calibration(self, weights: np.ndarray, log_z: float) -> LatticeCells:
        """These cells with the code weights η (m, K) and log Z of a calibration."""
        return dataclasses.replace(self, code_weights=np.asarray(weights, dtype=np.float64),
                                   code_log_z=np.array([log_z], dtype=np.float64))

    def uncalibrated(self) -> LatticeCells:
        """These cells without a calibration: what the statistics carry, and a fit starts from."""
        return dataclasses.replace(self, code_weights=np.empty(0), code_log_z=np.empty(0)) if self.calibrated else self

    def code_log_weights(self, k: np.ndarray) -> np.ndarray:
        """(n,): ``Σ_j η_j(k_j) − log Z`` at code indices ``k`` (:meth:`codes`; beyond the range: the extreme
        code's, whose tails share its cell), 0 without a calibration."""
        if not self.calibrated:
            return np.zeros(k.shape[0])
        at = np.clip(k, 0, self.n_steps).astype(np.int64)
        return self.code_weights[np.arange(self.positions.size)[None, :], at].sum(axis=1) - self.code_log_z[0]

    @property
    def log_volume(self) -> float:
        """Σ_j log step_j: the log of a cell's volume."""
        return float(np.sum(np.log(self.step)))

    @property
    def fingerprint(self) -> str:
        """A digest of the lattices and the seed: statistics summed under other cells do not combine (the tails
        and the calibration are left out: they change the scoring, not the rows a pass sums)."""
        from tgpflow.features.digest import array_hash

        ints = (self.positions.size, *self.positions.tolist(), self.atom_positions.size, *self.atom_positions.tolist())
        floats = (self.origin, self.step, self.top, self.atom_value, self.atom_side, self.atom_width, self.atom_unit)
        floats += (self.atom_core,) if self.atom_core.any() else ()  # atoms fitted after the log: the digest they had
        floats += (self.atom_depth,) if self.atom_depth.any() else ()  # (uniform blocks: likewise)
        return array_hash(b"tgpflow.LatticeCells.v1", ints, floats,
                          prefix=np.array([self.seed], dtype="<u8").tobytes()).hexdigest()

    def named(self, names: Sequence[str]) -> LatticeCells:
        """The same cells with the columns named from ``names`` (all the data's columns)."""
        return dataclasses.replace(self, columns=tuple(str(names[j]) for j in self.positions),
                                   atom_columns=tuple(str(names[j]) for j in self.atom_positions))

    _OPTIONAL_ARRAYS = ("atom_positions", "atom_value", "atom_side", "atom_width", "atom_unit", "tail_low", "tail_high",
                        "atom_core", "atom_depth", "code_weights", "code_log_z")

    def to_arrays(self) -> dict[str, np.ndarray]:
        """The arrays a statistics value carries (without the column names: :meth:`named` gives them back; a
        calibration only where there is one)."""
        optional = [k for k in self._OPTIONAL_ARRAYS if (self.calibrated or not k.startswith("code_"))
                    and (k != "atom_depth" or self.atom_depth.any())]  # (uniform blocks: the arrays they had)
        return {"positions": self.positions, "origin": self.origin, "step": self.step, "top": self.top,
                "seed": np.array([self.seed], dtype=np.uint64), **{k: getattr(self, k) for k in optional}}

    @classmethod
    def from_arrays(cls, arrays: Mapping[str, np.ndarray]) -> LatticeCells:
        positions = np.asarray(arrays["positions"], dtype=np.int64)
        atoms = {k: np.asarray(arrays[k], dtype=np.int64 if k == "atom_positions" else np.float64)
                 for k in cls._OPTIONAL_ARRAYS if k in arrays}
        return cls(positions, tuple(str(j) for j in positions), np.asarray(arrays["origin"], dtype=np.float64),
                   np.asarray(arrays["step"], dtype=np.float64), np.asarray(arrays["top"], dtype=np.float64),
                   int(np.asarray(arrays["seed"]).astype(np.uint64)[0]),
                   atom_columns=tuple(str(j) for j in atoms.get("atom_positions", ())), **atoms)

    def at_atom(self, x: np.ndarray) -> np.ndarray:
        """(n, a): whether each row holds each atom's value (to 1e-9 of its block's width, a float64 round trip
        through a standardization; after :meth:`snap`: anywhere in its block)."""
        return np.abs(x[:, self.atom_positions] - self.atom_value) <= 1e-9 * self.atom_width

    def codes(self, x: np.ndarray) -> np.ndarray:
        """(n, m): the index k of each discrete column's nearest lattice point, ``origin + k·step`` (any integer:
        below 0 or above :attr:`n_steps` beyond the pilot's range)."""
        return np.round((x[:, self.positions] - self.origin) / self.step)

    def code_indices(self, x: np.ndarray) -> np.ndarray:
        """(n, m) int64: :meth:`codes` clipped to the pilot's range, each row's cell among its column's codes."""
        return np.clip(self.codes(x), 0, self.n_steps).astype(np.int64)

    @property
    def n_steps(self) -> np.ndarray:
        """(m,): the index of each lattice's highest point."""
        return np.round((self.top - self.origin) / self.step)

    def tail_log_shares(self, k: np.ndarray) -> np.ndarray:
        """(n,): Σ_j log of the share of its cell's probability that code index ``k[:, j]`` (:meth:`codes`) gets
        under the tails (module docstring): 0 inside, log(1 − ε) at an extreme code, log(ε·(1 − ρ)·ρ^(s−1)) s steps
        beyond one (−inf where ε = 0). A row beyond the range has its extreme cell's density (:meth:`clip_codes`)
        times this share."""
        below, above = -k, k - self.n_steps
        with np.errstate(divide="ignore"):
            log_rho, log_keep = np.log(TAIL_RATIO), np.log(1.0 - TAIL_RATIO)
            out = np.where(below == 0, np.log1p(-self.tail_low), 0.0) + np.where(above == 0, np.log1p(
                -self.tail_high), 0.0)
            out = np.where(below > 0, np.log(self.tail_low) + log_keep + (below - 1) * log_rho, out)
            out = np.where(above > 0, np.log(self.tail_high) + log_keep + (above - 1) * log_rho, out)
        return out.sum(axis=1)

    def clip_codes(self, x: np.ndarray) -> np.ndarray:
        """A copy of rows ``x`` with each discrete column at its nearest lattice point within the pilot's range."""
        out = np.array(x, dtype=np.float64, copy=True)
        out[:, self.positions] = self.points(self.code_indices(x))
        return out

    def points(self, k: np.ndarray) -> np.ndarray:
        """(n, m): the lattice points of code indices ``k`` (any integers), as the table holds them. On a decimal
        lattice (origin and step with at most 15 decimals: integer codes, values recorded to 3 decimals),
        ``origin + k·step`` rounded to those decimals: the float64 that reading the value's digits gives (0.3, not
        3 × 0.1's 0.30000000000000004). On another, ``origin + (top − origin)·k/n`` with n the highest code: the
        pilot's extreme values exactly, and k/n where they are 0 and 1 (min-max scaled codes: thyroid's k/213)."""
        out = self.origin + self.step * (k := np.asarray(k, dtype=np.float64))
        for j, (origin, step, top, n) in enumerate(zip(self.origin, self.step, self.top, self.n_steps, strict=True)):
            digits = max(decimals(origin), decimals(step))
            if digits <= 15:
                out[:, j] = np.round(out[:, j], digits)
            elif n > 0:
                out[:, j] = origin + (top - origin) * (k[:, j] / n)
        return out

    def spill(self, rows: np.ndarray, keys: np.ndarray) -> np.ndarray:
        """Samples ``rows`` (on the lattice) with each extreme code moved into its tail with the tails' law, s ≥ 1
        steps beyond with probability ε·(1 − ρ)·ρ^(s−1): ``u < ε`` moves it 1 + ⌊log(u/ε)/log ρ⌋ steps, for u
        uniform from a hash of each row's ``keys`` (the continuous draw it was rounded from: a fixed function of
        the sample, independent of its cell)."""
        out = np.array(rows, dtype=np.float64, copy=True)
        z = np.zeros(keys.shape[0], dtype=np.uint64)
        for column in np.ascontiguousarray(keys, dtype=np.float64).view(np.uint64).T:
            z = _splitmix64(z ^ column)
        u = keyed_uniform(z.view(np.int64), self.positions, self.seed, _TAIL_SALT)
        k = self.codes(out)
        for edge, eps, side in ((k <= 0, self.tail_low, -1.0), (k >= self.n_steps, self.tail_high, 1.0)):
            with np.errstate(divide="ignore"):
                steps = 1.0 + np.floor(np.log(u / np.where(eps > 0, eps, 1.0)) / np.log(TAIL_RATIO))
            move = edge & (u < eps)
            out[:, self.positions] += np.where(move, side * steps * self.step, 0.0)
        return out

    def snap(self, x: np.ndarray, block: bool = True) -> np.ndarray:
        """A copy of rows ``x`` with the discrete columns at their nearest lattice point, and an atom column's
        values within half its unit of the atom (recorded as it) at the atom, and with ``block`` (a sample, a
        diagnostic's draw) those in its block too."""
        out = np.array(x, dtype=np.float64, copy=True)
        out[:, self.positions] = self.points(self.codes(out))
        for j, v, side, w, unit in zip(self.atom_positions, self.atom_value, self.atom_side, self.atom_width,
                                       self.atom_unit, strict=True):
            gap = side * (out[:, j] - v)  # how far beyond the edge, into the block
            # a value recorded as v covers v ± step/2 on a lattice column (the unit is then its step, < the width)
            reach = unit / 2 if unit < w else 0.0
            out[:, j] = np.where((gap > -reach) & (gap < (w if block else reach)), v, out[:, j])
        return out

    def dequantize(self, x: np.ndarray, keys: np.ndarray, salt: int = 0) -> np.ndarray:
        """A copy of ``x`` with each discrete column moved by its row's noise, ``(u − ½)·step``, and each row at an
        atom moved into its block, ``v + side·s·w`` (s from the row's noise u by the atom's depth law,
        :func:`~tgpflow.features.atom_blocks.block_shares`)."""
        out = np.array(x, dtype=np.float64, copy=True)
        u = keyed_uniform(keys, self.positions, self.seed, salt)
        out[:, self.positions] += (u - 0.5) * (NOISE_WIDTH * self.step)
        if self.atom_positions.size:
            # the atoms' noise from other streams than the lattices' (their positions shifted past any column's)
            u = keyed_uniform(keys, self.atom_positions + (1 << 20) * (2 + self.atom_side.astype(np.int64)),
                              self.seed, salt)
            at = self.at_atom(out)
            moved = self.atom_value + self.atom_side * block_shares(u, self.atom_depth) * self.atom_width
            for i, j in enumerate(self.atom_positions):
                out[:, j] = np.where(at[:, i], moved[:, i], out[:, j])
        return out

    def cell_rule(self, m: int | None = None) -> tuple[np.ndarray, np.ndarray, int]:
        """Points (K, m) of the unit cube and weights (K,) of a cell average, and how many of the first points are a
        plain rule on their own (equal weights): Richardson-extrapolated product midpoints for m ≤ 3 (the fine rule
        first, weights 4/(3·n_fine), then the coarse one, −1/(3·n_coarse)), scrambled Sobol points beyond (module
        docstring). ``m``: the columns integrated over (default: the lattice columns)."""
        m = len(self.positions) if m is None else m
        if m > 3:
            from scipy.stats import qmc

            points = qmc.Sobol(d=m, scramble=True, seed=np.random.default_rng(self.seed)).random(CELL_POINTS)
            return points, np.full(CELL_POINTS, 1.0 / CELL_POINTS), CELL_POINTS
        grids = []
        for k in (_MIDPOINTS[m], _MIDPOINTS[m] // 2):
            axis = (np.arange(k) + 0.5) / k
            grids.append(np.stack(np.meshgrid(*([axis] * m), indexing="ij"), axis=-1).reshape(-1, m))
        fine, coarse = grids
        weights = np.r_[np.full(len(fine), 4.0 / (3 * len(fine))), np.full(len(coarse), -1.0 / (3 * len(coarse)))]
        return np.vstack(grids), weights, len(fine)

    def bounds_with(self, bounds: ColumnBounds | None, columns: Sequence[str]) -> ColumnBounds:
        """``bounds`` (the user's, None for none) with each discrete column bounded at the outer edges of its
        extreme cells, ``(origin − step/2, top + step/2)``, its core the values' range, ``[origin, top]``
        (:class:`~tgpflow.features.bounds.ColumnBounds`), and each atom's column at the outer end of
        its block, ``v ∓ w``, with a core from the atom on (the block its log tail) where :attr:`atom_core` says so
        (for a column with atoms at both ends: both)."""
        d = len(columns)
        lower = np.full(d, -np.inf) if bounds is None else bounds.lower.copy()
        upper = np.full(d, np.inf) if bounds is None else bounds.upper.copy()
        core_lower = np.full(d, np.nan) if bounds is None or bounds.core_lower is None else bounds.core_lower.copy()
        core_upper = np.full(d, np.nan) if bounds is None or bounds.core_upper is None else bounds.core_upper.copy()
        lower[self.positions] = self.origin - self.step / 2
        upper[self.positions] = self.top + self.step / 2
        core_lower[self.positions], core_upper[self.positions] = self.origin, self.top  # identity on the values' range
        for j, v, side, w in zip(self.atom_positions, self.atom_value, self.atom_side, self.atom_width, strict=True):
            if side < 0:
                lower[j] = v - w
            else:
                upper[j] = v + w
        for j in np.unique(self.atom_positions[self.atom_core > 0]):  # the block its tail, the values its core
            mine = self.atom_positions == j
            if not np.all(self.atom_core[mine] > 0):
                continue
            ends = {float(s): float(v) for s, v in zip(self.atom_side[mine], self.atom_value[mine], strict=True)}
            c0, c1 = ends.get(-1.0, -np.inf), ends.get(1.0, np.inf)
            if np.isfinite(c0) == np.isfinite(lower[j]) and np.isfinite(c1) == np.isfinite(upper[j]):
                core_lower[j], core_upper[j] = c0, c1  # (a bound of another kind on the other side: no core)
        return ColumnBounds(lower, upper, tuple(str(c) for c in columns), core_lower, core_upper,
                            None if bounds is None else bounds.linear_from)  # (the linear tails it keeps)

    def to_dict(self) -> dict[str, Any]:
        """JSON: ``{"columns": {column: {position, origin, step, top, tails: [ε below, ε above], weights: [η(0),
        …]}}, "atoms": [{column, position, value, side, width, unit, core, depth}], "seed", "log_z"}`` (weights and
        log_z with a calibration)."""
        out: dict[str, Any] = {
            "columns": {c: {"position": int(p), "origin": float(o), "step": float(s), "top": float(t),
                            "tails": [float(lo), float(hi)]}
                        for c, p, o, s, t, lo, hi in zip(self.columns, self.positions, self.origin, self.step,
                                                         self.top, self.tail_low, self.tail_high, strict=True)},
            "seed": int(self.seed)}
        if self.calibrated:
            for entry, w, n in zip(out["columns"].values(), self.code_weights, self.n_steps, strict=True):
                entry["weights"] = [float(v) for v in w[:int(n) + 1]]
            out["log_z"] = float(self.code_log_z[0])
        if self.atom_positions.size:
            out["atoms"] = [{"column": c, "position": int(p), "value": float(v), "side": "lower" if sd < 0 else "upper",
                             "width": float(w), "unit": float(u), "core": bool(k), "depth": float(e)}
                            for c, p, v, sd, w, u, k, e in zip(self.atom_columns, self.atom_positions, self.atom_value,
                                                               self.atom_side, self.atom_width, self.atom_unit,
                                                               self.atom_core, self.atom_depth, strict=True)]
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> LatticeCells | None:
        if not data or not (data.get("columns") or data.get("atoms")):
            return None
        cols, atoms = data.get("columns") or {}, data.get("atoms") or []
        out = cls(np.array([v["position"] for v in cols.values()], dtype=np.int64), tuple(cols),
                  np.array([v["origin"] for v in cols.values()], dtype=np.float64),
                  np.array([v["step"] for v in cols.values()], dtype=np.float64),
                  np.array([v["top"] for v in cols.values()], dtype=np.float64), int(data["seed"]),
                  np.array([a["position"] for a in atoms], dtype=np.int64), tuple(a["column"] for a in atoms),
                  np.array([a["value"] for a in atoms], dtype=np.float64),
                  np.array([-1.0 if a["side"] == "lower" else 1.0 for a in atoms]),
                  np.array([a["width"] for a in atoms], dtype=np.float64),
                  np.array([a["unit"] for a in atoms], dtype=np.float64),
                  np.array([v.get("tails", (0.0, 0.0))[0] for v in cols.values()], dtype=np.float64),
                  np.array([v.get("tails", (0.0, 0.0))[1] for v in cols.values()], dtype=np.float64),
                  np.array([float(a.get("core", False)) for a in atoms], dtype=np.float64),
                  np.array([float(a.get("depth", 0.0)) for a in atoms], dtype=np.float64))
        if "log_z" not in data:
            return out
        weights = np.zeros((len(cols), int(np.max(out.n_steps, initial=-1)) + 1))
        for row, entry in zip(weights, cols.values(), strict=True):
            row[:len(entry["weights"])] = entry["weights"]
        return out.with_calibration(weights, float(data["log_z"]))
