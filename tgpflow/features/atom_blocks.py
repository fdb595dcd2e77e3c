"""Where an atom's rows lie in its block (docs/gp_tilted.md, "Atoms at an edge" and "Atoms on nearly every row").

An atom's rows are moved into a block beyond its edge, ``v − s·w`` for a lowest value v (w: the block's width, s in
(0, 1): the row's share of it; :meth:`~tgpflow.features.lattice.LatticeCells.dequantize`). The column is fitted in
a coordinate whose tail over the block reads the *depth* ``E = −log(1 − s)`` below the edge, in units of the
block's width where the column has a core (``t = v − w·E``) and in the log's own units after the log of its bound
(``t = log w − E``; :func:`~tgpflow.features.lattice_choice.edge_atoms`). Two laws of the depth:

* **uniform** (depth 0, every atom until 2026-12-01, and an atom on fewer than :data:`ATOM_FAR_SHARE` of the rows): s
  uniform on (0, 1), so ``E ~ Exp(1)``, densest at the edge;
* **far** (depth c = :data:`ATOM_FAR_DEPTH`, an atom on at least :data:`ATOM_FAR_SHARE` of the rows): ``E ~ N(c, 1)``
  truncated to E > 0, the atom's rows c block widths beyond its edge.

Why: a Gaussian component fitted to rows of depth Exp(1) has its mean one width beyond the edge and a standard
deviation of one width, so it puts about Φ(−1) = 16 % of its mass past the edge, among the column's other values.
Where those are 30 % of the rows that is a blur at the edge; where they are 0.1 % it is a hundred times the data's
own share. On mnist (11 of its 97 atoms on ≥ 99 % of the rows) the FD fit put 68 % of its mass outside the training
rows' box, 18–33 % of its draws past single such atoms; on cardio one atom on 99.86 % of the rows drew 15 % of the
samples off it. At depth 8 the same component spills Φ(−8/σ) of the atom's mass, its spread σ (in widths) growing
with the rare values' distance (about √(1 + (1 − p)(Δ/w + 8)²) for a share p and values Δ beyond the edge): mnist
then put 19 % outside, 1–2 % past each of those atoms, and cardio's atom drew 1.4 % off it (the training rows: 0.14 %,
the held-out rows 1.4 %). Below :data:`ATOM_FAR_SHARE` the column's other values are many, and a gap of 8 widths
between them and the atom's rows made one component span both: on mnist, atoms on 64–84 % of the rows then drew
74–86 % of the samples and 34 % of the mass went outside the box.

A row's probability at the atom integrates the fitted density over the whole half-line beyond the edge; the block's
law only places the rows the fit sees, so any mass the model puts beyond the edge is the atom's. The integral's
points follow the far law with a spread of :data:`QUADRATURE_SPREAD` (a fitted component is wider than the rows'
law: above), so that its integrand stays nearly flat. float64 throughout.
"""

from __future__ import annotations

import math

import numpy as np
from scipy.special import ndtr, ndtri

__all__ = ["ATOM_FAR_SHARE", "ATOM_FAR_DEPTH", "QUADRATURE_SPREAD", "block_shares", "far_depths", "atom_depth"]

#: An atom on at least this share of the pilot's rows has its rows placed far beyond its edge (module docstring).
ATOM_FAR_SHARE = 0.99
#: The mean depth, in block widths (or log units), of a far atom's rows beyond its edge.
ATOM_FAR_DEPTH = 8.0
#: The spread, in the same units, of the depths at which a row's probability at a far atom is integrated.
QUADRATURE_SPREAD = 3.0


def atom_depth(share: float) -> float:
    """The depth law of an atom on ``share`` of the rows: :data:`ATOM_FAR_DEPTH`, or 0 (uniform) below
    :data:`ATOM_FAR_SHARE`."""
    return ATOM_FAR_DEPTH if share >= ATOM_FAR_SHARE else 0.0


def far_depths(u: np.ndarray, depth: np.ndarray, spread: float = 1.0) -> tuple[np.ndarray, np.ndarray]:
    """(E, log dE/du): the depths of uniforms ``u`` in (0, 1) under ``N(depth, spread²)`` truncated to E > 0 (its
    quantile function, E = 0 at u = 0), broadcast against ``depth``: ``z = (E − c)/σ = Φ⁻¹(Φ(−c/σ) + u·Φ(c/σ))``,
    through its complement ``−Φ⁻¹((1 − u)·Φ(c/σ))`` above u = ½ (each exact at its end); ``dE/du = σ·Φ(c/σ)/φ(z)``."""
    a = np.asarray(depth, dtype=np.float64) / spread
    top = ndtr(a)
    z = np.where(u < 0.5, ndtri(ndtr(-a) + u * top), -ndtri((1.0 - u) * top))
    log_derivative = math.log(spread) + np.log(top) + 0.5 * z * z + 0.5 * math.log(2.0 * math.pi)
    return np.maximum(depth + spread * z, 0.0), log_derivative  # (not a rounding error's −2e-15 at u = 0)


def block_shares(u: np.ndarray, depth: np.ndarray) -> np.ndarray:
    """The shares s of the block's width at which rows of uniforms ``u`` (n, a) lie, per atom of ``depth`` (a,):
    ``u`` itself for the uniform law, ``1 − e^(−E)`` for a far one (module docstring)."""
    if not np.any(depth > 0):
        return u
    with np.errstate(invalid="ignore"):
        shares = -np.expm1(-far_depths(u, depth)[0])
    return np.where(depth > 0, shares, u)
