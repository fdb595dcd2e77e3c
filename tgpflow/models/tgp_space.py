"""The GP-tilted estimator's fitting space (docs/gp_tilted.md, "Hard edges", "Integer codes and other lattices"):
how rows in the data's units become the rows a fit sums over — standardized (``scaling_``), bounded columns
transformed (``bounds_``), discrete columns dequantized over their cells (``discrete_``) — and back; what a first fit
reads off its pilot (the discrete columns, ``bounds="auto"``), and what an estimator that only solves statistics takes
from them. The maps are values that can go to the workers (:func:`data_units`); :class:`TGPFittingSpace` holds the
estimator's side.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

import numpy as np

from tgpflow.core.engine import Progress
from tgpflow.core.logs import logger
from tgpflow.features.bounds import BoundsSpec, ColumnBounds, bounded_chunk
from tgpflow.features.edges import EDGE_LEAK_COMPONENTS, edges_worth_keeping, suggest_bounds, with_linear_tails
from tgpflow.features.lattice import LatticeCells
from tgpflow.features.lattice_chunks import dequantize_chunk
from tgpflow.features.lattice_choice import choose_discrete
from tgpflow.features.scaling import Scaling
from tgpflow.io.column_kinds import column_kinds
from tgpflow.io.degenerate import check_pilot_rows
from tgpflow.io.pilot import LazyPilot
from tgpflow.io.sources import Source
from tgpflow.stats.split import StatsBundle

__all__ = ["TGPFittingSpace", "carried_by", "data_units", "from_data_rows", "to_data_rows"]


def to_data_rows(rows: np.ndarray, bounds: ColumnBounds | None, scaling: Scaling | None,
                  cells: LatticeCells | None = None) -> np.ndarray:
    """Rows of the fitting space in the data's units: the standardization undone (of the transformed values, with
    bounds), the bounded columns' transform inverted, the discrete columns rounded to their lattices (``cells``)."""
    if bounds is None:
        rows = rows if scaling is None else scaling.inverse(rows)
    else:
        if scaling is not None:  # the fitting space is the transformed values, standardized
            rows = bounds.transformed_scaling(scaling).inverse(rows)
        rows = bounds.inverse(rows)
    return rows if cells is None else cells.snap(rows)


def from_data_rows(rows: np.ndarray, bounds: ColumnBounds | None, scaling: Scaling | None) -> np.ndarray:
    """Rows in the data's units (strictly inside ``bounds``) in the fitting space: the inverse of
    :func:`to_data_rows` without its rounding."""
    if bounds is None:
        return rows if scaling is None else scaling.forward(rows)
    t = bounds.forward(rows)
    return t if scaling is None else bounds.transformed_scaling(scaling).forward(t)


def data_units(bounds: ColumnBounds | None, scaling: Scaling | None, cells: LatticeCells | None = None) -> Any:
    """The map from the fitting space to the data's units (``bounds`` in the data's units: the transformed
    values' scaling undone, then t⁻¹; without bounds the scaling's inverse; discrete columns rounded to their
    lattice, ``cells``) as a value that can go to the workers; None for the identity."""
    if bounds is None and scaling is None and cells is None:
        return None
    return functools.partial(to_data_rows, bounds=bounds, scaling=scaling, cells=cells)


def carried_by(stats: Any, name: str) -> Any:
    """What statistics carry in the field ``name`` (a selecting bundle's parts all carry the same), else None."""
    one = next(iter(stats.values())) if isinstance(stats, StatsBundle) else stats
    return getattr(one, name, None)


class TGPFittingSpace:
    """The fitting space of :class:`~tgpflow.models.gp_tilted.GPTiltedDensity`: resolved by a first fit, carried by
    its statistics, restored by a load. A stage of that estimator, not a class of its own: it reads the estimator's
    parameters and seeds (``_seeds``), and its :meth:`fitting_source` extends
    :meth:`~tgpflow.models.streaming.StreamingMixin.fitting_source`, which follows it in the estimator's bases."""

    def _column_names(self, source: Source) -> list[str]:
        """The data's column names: those of a DataFrame given in memory, else the source's."""
        names = getattr(self, "feature_names_in_", None)
        return [str(c) for c in names] if names is not None else [str(c) for c in source.columns]

    def _new_fitting_source(self, source: Source, scaling: Scaling | None,
                            progress: Progress | None) -> tuple[Source, LazyPilot]:
        """A first fit's fitting space: the standardization (``scaling``, or ``scale=``), the bounds and the discrete
        columns (:meth:`_fix_discrete`); with its pilot sample, which the fit's stages share."""
        self._fix_scaling(source, scaling, progress)
        self.bounds_ = ColumnBounds.from_param(self._declared_bounds(), self._column_names(source))
        self.discrete_ = None
        self.edges_: dict[str, dict[str, Any]] | None = None
        return self._fix_discrete(source, progress)

    def _lazy_pilot(self, fitting: Source, progress: Progress | None) -> LazyPilot:
        """The pilot sample of a fitting source, read when a stage first needs it (the same seed for every stage)."""
        return LazyPilot(fitting, int(self.pilot_rows), self._seeds()[0], progress)

    @property
    def _bounds_auto(self) -> bool:
        """Whether ``bounds="auto"``: bounds a fit reads off its pilot (:meth:`_auto_bounds`)."""
        return isinstance(self.bounds, str) and self.bounds == "auto"

    def _declared_bounds(self) -> BoundsSpec:
        """``bounds=`` as declared: None for "auto", which a fit reads off its pilot (:meth:`_fix_discrete`)."""
        return None if self._bounds_auto else self.bounds

    def _fix_discrete(self, source: Source, progress: Progress | None) -> tuple[Source, LazyPilot]:
        """The fitting space of ``source`` (raw rows) with ``discrete_`` read off the column kinds of the pilot sample
        (the pilot the fit then uses: no second read): those columns dequantized in the data's units and bounded at
        their lattices' outer cell edges (``bounds_`` then holds the user's bounds and theirs), the pilot rows too
        (their noise drawn from their keys; :mod:`tgpflow.features.lattice`)."""
        fitting = self.fitting_source(source)
        lazy = self._lazy_pilot(fitting, progress)
        if (self.discrete is None or self.discrete == "none") and not self._bounds_auto:
            return fitting, lazy
        pilot = lazy.get()
        check_pilot_rows(pilot, fitting.description, 1, "the GP-tilted density")
        rows, names = self._to_data(pilot.rows), self._column_names(source)
        bounded = list(self.bounds_.to_dict()) if self.bounds_ is not None else []
        seed = int(self._seeds()[6].generate_state(1, np.uint64)[0])
        self.discrete_ = choose_discrete(self.discrete, column_kinds(rows, names), rows, bounded, seed)
        self.bounds_ = self._with_cells(self.bounds_, names)
        found = self._auto_bounds(rows, names) if self._bounds_auto else None
        self.bounds_ = with_linear_tails(self.bounds_, rows, declared=bounded)  # past the pilot's extreme values
        if self.discrete_ is not None or found is not None:  # the pilot's rows in the new fitting space
            dequantized = rows if self.discrete_ is None else self.discrete_.dequantize(rows, pilot.keys)
            pilot = dataclasses.replace(pilot, rows=from_data_rows(dequantized, self.bounds_,
                                                                     getattr(self, "scaling_", None)))
            fitting = self.fitting_source(source)
        cells = self.discrete_
        if cells is not None:
            logger.info("discrete columns and atoms (dequantized over their cells; discrete=None fits them as "
                        "continuous): %s", ", ".join(
                            [f"{c} (step {h:g})" for c, h in zip(cells.columns, cells.step, strict=True)]
                            + [f"{c} = {v:g} (block {w:g})" for c, v, w in zip(cells.atom_columns, cells.atom_value,
                                                                               cells.atom_width, strict=True)]))
        return fitting, dataclasses.replace(lazy, source=fitting, sample=pilot)

    def _auto_bounds(self, rows: np.ndarray, names: list[str]) -> ColumnBounds | None:
        """``bounds="auto"``: the bounds :func:`~tgpflow.features.edges.suggest_bounds` reads off the pilot's rows
        (just beyond them: a row on a bound would be a bad row), in the columns that are neither bounded nor
        discrete already, those worth their transform (:func:`~tgpflow.features.edges.edges_worth_keeping`, for the
        fit's base; its tests kept in ``edges_``, and a fit's ``pilot_["edges"]``); added to ``bounds_``. None when
        no column qualifies."""
        found = suggest_bounds(rows, names, self.bounds_)
        found, self.edges_ = edges_worth_keeping(rows, names, found, self._edge_seed(),
                                                 EDGE_LEAK_COMPONENTS if self._mixture_base else 1)
        dropped = [c for c, test in self.edges_.items() if not test["kept"]]
        if dropped:
            logger.info("bounds='auto': left open, as their bounds neither stop a leak, score better on the "
                        "pilot's held-out rows nor make a skewed column symmetric: %s", ", ".join(dropped))
        if not found:
            return None
        logger.info("bounds='auto': %s", ColumnBounds.from_param(found, names).describe())
        # beside the bounds already there (declared, discrete, atoms), which suggest_bounds left out
        merged = {**({} if self.bounds_ is None else self.bounds_.to_dict()), **found}
        self.bounds_ = self._with_cells(ColumnBounds.from_param(merged, names), names)
        return self.bounds_

    def _edge_seed(self) -> int:
        """The seed of ``bounds="auto"``'s edge tests (the estimator's ninth stream)."""
        return int(self._seeds()[8].generate_state(1, np.uint64)[0])

    def _with_cells(self, bounds: ColumnBounds | None, names: list[str]) -> ColumnBounds | None:
        """``bounds`` with the discrete columns' bounds and cores (:meth:`LatticeCells.bounds_with`): once the pilot
        chose them, and wherever bounds are rebuilt from their JSON (``to_dict`` keeps the edges, not the cores)."""
        cells = getattr(self, "discrete_", None)
        return bounds if cells is None else cells.bounds_with(bounds, names)

    def _restore_space(self, discrete: dict[str, Any] | None, bounds: dict[str, Any] | None,
                       declared_columns: list[str] | None = None) -> None:
        """``discrete_`` and ``bounds_`` as a record stored them (a model file's meta, a store's frozen draw), the
        discrete columns' bounds and cores added back (:meth:`_with_cells`). Without a bounds record: the declared
        ``bounds=`` on ``declared_columns`` with the cells' (a store drawn before it recorded them), else none."""
        self.discrete_ = LatticeCells.from_dict(discrete)
        if bounds:
            self.bounds_ = self._with_cells(ColumnBounds.from_record(bounds), list(bounds["columns"]))
        elif declared_columns is not None:
            self.bounds_ = self._with_cells(ColumnBounds.from_param(self._declared_bounds(), declared_columns),
                                            declared_columns)
        else:
            self.bounds_ = None

    def fitting_source(self, source: Source) -> Source:
        """``source`` in the fitting space: standardized (``scaling_``), bounded columns transformed (rows on or
        beyond a bound, in the data's units, are bad rows), discrete columns dequantized first (``discrete_``, in the
        data's units)."""
        cells = getattr(self, "discrete_", None)
        if cells is not None:
            source = source.map_validated(functools.partial(dequantize_chunk, cells=cells))
        bounds = getattr(self, "bounds_", None)
        if bounds is None:
            return super().fitting_source(source)
        return source.map_validated(functools.partial(bounded_chunk, bounds=bounds, on_bad_rows=source.on_bad_rows,
                                                      scaling=getattr(self, "scaling_", None)))

    def _fit_bounds(self) -> ColumnBounds | None:
        """``bounds_`` (in the data's units) in the standardized units: the held-out grid projects rows mapped
        back through them (:class:`~tgpflow.stats.projections.ProjectionGrid`'s ``units``)."""
        bounds = getattr(self, "bounds_", None)
        return None if bounds is None else bounds.scaled(getattr(self, "scaling_", None))

    def _to_data(self, rows: np.ndarray) -> np.ndarray:
        """Rows of the fitting space in the data's units (the identity without bounds, scaling or discrete
        columns)."""
        to_data = self._data_map()
        return rows if to_data is None else to_data(rows)

    def _data_map(self) -> Any:
        """:func:`data_units` of this estimator's bounds, scaling and discrete columns."""
        return data_units(getattr(self, "bounds_", None), getattr(self, "scaling_", None),
                           getattr(self, "discrete_", None))

    def _fresh_names(self, d: int) -> list[str]:
        """The data's column names for an estimator that solves statistics: those it has seen, else x0 … x{d−1}."""
        names = getattr(self, "feature_names_in_", None)
        return [str(c) for c in names] if names is not None else [f"x{j}" for j in range(d)]

    def _stats_cells(self, d: int, stats: Any) -> LatticeCells | None:
        """The discrete columns that statistics carry, for an estimator that did not accumulate them (named by its
        columns where it has seen them), with ``bounds_`` widened by their cells' bounds."""
        cells = carried_by(stats, "cells")
        if cells is None:
            return None
        names = self._fresh_names(d)
        cells = cells.named(names)
        self.bounds_ = cells.bounds_with(self.bounds_, names)
        return cells

    def _fresh_bounds(self, d: int, stats: Any) -> ColumnBounds | None:
        """``bounds=`` of an estimator that solves statistics it did not accumulate, sums in a fitting space that carry
        the bounds their rows were read with (``stats.bounds``): ``bounds="auto"`` and declared bounds of the same
        edges take those, linear tails included (other edges fail the solve); bounds by name need a fit's columns."""
        names, carried = self._fresh_names(d), carried_by(stats, "bounds")
        if self._bounds_auto:
            return None if carried is None else carried.named(names)
        if self.bounds is not None and not hasattr(self, "feature_names_in_") and isinstance(self.bounds, dict):
            raise ValueError("bounds= names columns, but this estimator has not seen the data's columns: give one "
                             "(lower, upper) pair per column, or solve with the estimator that accumulated the "
                             "statistics")
        declared = ColumnBounds.from_param(self.bounds, names)
        same = declared is not None and carried is not None and carried.to_pairs() == declared.to_pairs()
        return carried.named(names) if same else declared

