"""Which columns a fit models as discrete, read off its pilot rows: the lattices of ``discrete=`` and the atoms at
continuous columns' edges (docs/gp_tilted.md, "Integer codes and other lattices" and "Atoms at an edge"). The
cells they make, and what a fit does with them, are :mod:`tgpflow.features.lattice`'s."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from tgpflow.errors import closest_hint
from tgpflow.features.atom_blocks import atom_depth
from tgpflow.features.lattice import LatticeCells
from tgpflow.io.column_kinds import as_decimal

__all__ = ["choose_discrete", "edge_atoms", "ATOM_BLOCK", "LONG_TAIL_SKEW", "AUTO_MIN_STEP_OVER_SPREAD"]

#: The width of an atom's block beyond its edge, as a share of the column's standard deviation
#: (:mod:`tgpflow.features.lattice`, "Atoms").
ATOM_BLOCK = 0.5
#: An atom's column is fitted after the log of its bound, not with a core, where its other values' skewness away
#: from the edge exceeds this (:func:`_cored`; on the development sets: thyroid's 14.5, cardio's 4.5 and 3.1,
#: glass's 6.8 took the log; cardio's 0.8–1.5, Pima's 2.2 and 0.6, the meters' 1.5–1.8 the core).
LONG_TAIL_SKEW = 3.0
#: ``discrete="auto"`` takes a lattice whose step is at least this share of the column's standard deviation
#: (integer codes: hour 0.14, month 0.29, weekday 0.5; a count of spread 200, 0.005, or values recorded to 3
#: decimals stay continuous: there a smooth density already matches the cell averages), and every binary column.
AUTO_MIN_STEP_OVER_SPREAD = 0.05


def choose_discrete(which: str | Sequence[str | int] | None, kinds: Mapping[str, Mapping[str, Any]],
                    rows: np.ndarray, bounded: Sequence[str], seed: int) -> LatticeCells | None:
    """The discrete columns of ``discrete=``: ``"auto"`` the binary columns and the lattices whose step is at least
    :data:`AUTO_MIN_STEP_OVER_SPREAD` of their spread (bounded columns excluded: they are fitted after a log/logit
    transform), a list those columns (each must be a lattice or binary in the pilot), None none.

    ``kinds`` are :func:`~tgpflow.io.column_kinds.column_kinds` of the pilot ``rows`` (data units); a binary
    column's step is the gap between its two values."""
    if which is None or which == "none":
        return None
    names = list(kinds)
    if which == "auto":
        chosen = [c for c in names if c not in bounded and (
            kinds[c]["kind"] == "binary" or (kinds[c]["kind"] == "lattice" and (
                kinds[c]["lattice"]["step_over_spread"] or 0.0) >= AUTO_MIN_STEP_OVER_SPREAD))]
    else:
        chosen = []
        if len({str(c) for c in which}) < len(which):
            raise ValueError(f"discrete names a column twice: {list(which)}")
        for c in which:
            name = str(c)
            if name not in names:
                raise ValueError(f"discrete names column {c!r}{closest_hint(name, names)}, which is not among the "
                                 f"data's columns {names}")
            if name in bounded:
                raise ValueError(f"discrete: column {name!r} also has bounds; a lattice column is modelled by its "
                                 f"cells, a bounded one after a log/logit transform: declare one of the two")
            if kinds[name]["kind"] not in ("lattice", "binary"):
                raise ValueError(f"discrete: column {name!r} is not on a lattice in the pilot sample "
                                 f"({kinds[name]['distinct']} distinct values, no common step); drop it from "
                                 f"discrete=")
            chosen.append(name)
    atoms = edge_atoms(kinds, rows, set(chosen) | set(bounded)) if which == "auto" else []
    if not chosen and not atoms:
        return None
    positions = np.array([names.index(c) for c in chosen], dtype=np.int64)
    origin, step, top = [], [], []
    for c, j in zip(chosen, positions, strict=True):
        lo, hi = float(np.min(rows[:, j])), float(np.max(rows[:, j]))
        h = float(kinds[c]["lattice"]["step"]) if kinds[c]["kind"] == "lattice" else hi - lo  # binary: its gap
        decimal = as_decimal(h, 1e-9)
        n = round((hi - lo) / (decimal or h))
        if decimal is not None and abs(lo + n * decimal - hi) <= 1e-9 * decimal:
            # the lowest and highest points on the step's own grid where they are (integer codes: exactly 0 and 23,
            # not a float64 rounding off them after a standardization's round trip)
            h = decimal
            lo, hi = _on_grid(lo, h), _on_grid(hi, h)
        elif n > 0:  # not a decimal step over the whole range (1/213 is 0.00469483568 to 1e-9 of itself, but 213 of
            h = (hi - lo) / n  # those end 1.6e-10 short of 1): the step the pilot's extreme values span
        origin.append(lo)
        step.append(h)
        top.append(hi)
    cells = LatticeCells(positions, tuple(chosen), np.array(origin, dtype=np.float64),
                         np.array(step, dtype=np.float64), np.array(top, dtype=np.float64), int(seed),
                         np.array([names.index(a[0]) for a in atoms], dtype=np.int64), tuple(a[0] for a in atoms),
                         *(np.array([a[i] for a in atoms], dtype=np.float64) for i in range(1, 5)),
                         atom_core=np.array([a[5] for a in atoms], dtype=np.float64),
                         atom_depth=np.array([a[6] for a in atoms], dtype=np.float64))
    k = cells.codes(rows)  # the rule of succession at each extreme code (module docstring)
    return dataclasses.replace(cells, tail_low=1.0 / (np.sum(k <= 0, axis=0) + 2.0),
                               tail_high=1.0 / (np.sum(k >= cells.n_steps, axis=0) + 2.0))


def edge_atoms(kinds: Mapping[str, Mapping[str, Any]], rows: np.ndarray,
               taken: set[str]) -> list[tuple[str, float, float, float, float, float, float]]:
    """(column, value, side, width, unit, core, depth) of each edge of :func:`~tgpflow.io.column_kinds.column_kinds` (a
    value at the minimum or maximum that carries ≥ 1 % of the rows) in a column not ``taken``: the block beyond the
    edge is :data:`ATOM_BLOCK` of the column's standard deviation wide, the atom's density is given per the column's
    lattice step where it has one (values recorded to 3 decimals: 0.001), else per that width, ``core`` (1.0 or
    0.0) is :func:`_cored`'s choice of the column's coordinate, and ``depth`` the law of the rows in the block by
    the atom's share of the rows (:func:`~tgpflow.features.atom_blocks.atom_depth`)."""
    out = []
    for j, (name, kind) in enumerate(kinds.items()):
        if name in taken or not kind.get("edges"):
            continue
        width = ATOM_BLOCK * float(np.std(rows[:, j]))
        unit = float(kind["lattice"]["step"]) if kind["kind"] == "lattice" else width
        for side, edge in (("lower", -1.0), ("upper", 1.0)):
            if side in kind["edges"]:
                value = float(kind["edges"][side]["value"])
                if kind["kind"] == "lattice":  # on its recording grid: 0, not a standardization's 2e-16
                    value = _on_grid(value, unit)
                out.append((name, value, edge, width, unit, float(_cored(rows[:, j], value, edge, width)),
                            atom_depth(float(kind["edges"][side]["share"]))))
    return out


def _cored(column: np.ndarray, value: float, side: float, width: float) -> bool:
    """Whether a column with an atom at ``value`` is fitted with a core (the identity from the atom on, a log tail
    over the block) rather than after the log of its bound ``a = value + side·width`` over all of it: the log only
    where the column's other values have a long tail away from the edge (skewness beyond :data:`LONG_TAIL_SKEW`)
    that it shortens. It makes such a tail nearly Gaussian (thyroid's TSH: skewness 14.5, 5.0 after it; held out,
    0.24 nats/row better than with a core). On a column without one it turns a Gaussian component's tail into a
    lognormal one in the data's units (cardio: 18 % of the mass beyond the training rows' box with the log on every
    atom's column, 5 % with cores; docs/gp_tilted.md, "Atoms at an edge")."""
    from scipy.stats import skew

    rest = column[side * (column - value) < 0]
    if rest.size < 3 or np.ptp(rest) == 0:
        return True
    away = -side * skew(rest)  # > 0: a tail away from the edge
    logged = -side * skew(np.log(side * (value + side * width - rest)))
    return not (away > LONG_TAIL_SKEW and logged < away)


def _on_grid(value: float, step: float) -> float:
    """``value`` moved onto the grid k·step when it lies within 1e-6 of a step of it (a float64 round trip through a
    standardization), else as it is."""
    k = round(value / step)
    return k * step if abs(value / step - k) <= 1e-6 else value
