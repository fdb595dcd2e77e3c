"""Held-out selection on a split pass's statistics: one skeleton for every family (docs/gp_tilted.md, "Held-out
selection").

A split pass sums, at each bandwidth of its grid, a training part and a validation part of the rows
(:class:`~tgpflow.stats.split.StatsBundle`). :func:`select` scores every candidate a family's :class:`Selector`
offers at every bandwidth on the validation part, chooses one by the selector's criterion and returns the
:class:`Selection` with the statistics of every row at the chosen bandwidth and the draw at that bandwidth, from
which the estimator then solves once. A family says only what its candidates are, how they are scored and which is
best; the bandwidths, the check that the bundle was summed with the estimator's draw, the curve and the record
are written here once.
"""

from __future__ import annotations

import abc
import dataclasses
from typing import Any

from tgpflow.core.logs import phase
from tgpflow.stats.split import StatsBundle

__all__ = ["Selection", "Selector", "select"]


@dataclasses.dataclass(frozen=True)
class Selection:
    """What a selection scored and chose: ``record`` is what the estimator keeps as ``selection_`` (the criterion
    in words, the validation fraction, the split's facts, the rows of each part, ``curve``: a row per candidate
    with its values and held-out scores, and ``chosen``: the chosen row)."""

    record: dict[str, Any]

    @property
    def chosen(self) -> dict[str, Any]:
        return self.record["chosen"]

    @property
    def curve(self) -> list[dict[str, Any]]:
        return self.record["curve"]


class Selector(abc.ABC):
    """A family's candidates and criterion: what :func:`select` asks of it."""

    @abc.abstractmethod
    def candidates(self, bandwidth: float, train: Any, val: Any, draw: Any) -> list[dict[str, Any]]:
        """One row per candidate at ``bandwidth``: its values (``bandwidth``, ``lam``, …) and held-out scores,
        fitted on ``train`` and scored on ``val`` with ``draw`` at that bandwidth."""

    @abc.abstractmethod
    def best(self, rows: list[dict[str, Any]]) -> int:
        """The index of the chosen row."""

    def unhealthy_choice(self, rows: list[dict[str, Any]], best: int) -> str | None:
        """A warning that the chosen row fails the family's health checks (``selection_["unhealthy_choice"]``; the
        fit says it after its solve, when the model it publishes fails them too), or None."""
        return None

    @abc.abstractmethod
    def criterion_text(self) -> str:
        """The criterion in words, for ``selection_["criterion"]``."""

    def log_facts(self) -> dict[str, Any]:
        """What the selection's log line says besides the number of bandwidths."""
        return {}

    def split_facts(self) -> dict[str, Any]:
        """What the record says about the split besides its fraction."""
        return {}

    def all_rows(self, bundle: StatsBundle, bandwidth: float) -> Any:
        """The statistics of every row of the split pass at ``bandwidth``."""
        return bundle[("train", bandwidth)] + bundle[("val", bandwidth)]

    def without_validation(self, bundle: StatsBundle, draw: Any, grid: list[float],
                           validation_fraction: float) -> tuple[Selection, Any, Any]:
        """Too few rows to hold any out: refused, unless the family has a fallback."""
        n = int(bundle[("train", grid[0])].n)
        raise ValueError(f"{n} rows leave no validation rows at validation_fraction={validation_fraction}: "
                         f"nothing to select on; give lam and bandwidth, or more rows")


def select(bundle: StatsBundle, draw: Any, selector: Selector,
           validation_fraction: float) -> tuple[Selection, Any, Any]:
    """Score ``selector``'s candidates at every bandwidth of ``bundle`` on its validation part and choose one (module
    docstring). Returns the selection, the statistics of every row at the chosen bandwidth and ``draw`` at it. A
    bundle summed with another draw is refused before any candidate is scored (the solve would refuse it after)."""
    grid = sorted({k[1] for k in bundle})
    for g in grid:
        bundle[("train", g)].check_draw(draw.with_bandwidth(g))
    if min(bundle[("val", g)].n for g in grid) < 1:
        return selector.without_validation(bundle, draw, grid, validation_fraction)
    rows: list[dict[str, Any]] = []
    with phase("select", bandwidths=len(grid), **selector.log_facts()) as info:
        for g in grid:
            rows.extend(selector.candidates(g, bundle[("train", g)], bundle[("val", g)], draw.with_bandwidth(g)))
        best = selector.best(rows)
        chosen = dict(rows[best])
        info.update(chosen={k: round(v, 6) for k, v in chosen.items()})
    g = chosen["bandwidth"]
    record = {"criterion": selector.criterion_text(), "validation_fraction": float(validation_fraction),
              **selector.split_facts(), "n_train": int(bundle[("train", g)].n),
              "n_validation": int(bundle[("val", g)].n), "curve": rows, "chosen": chosen}
    warning = selector.unhealthy_choice(rows, best)
    if warning is not None:
        record["unhealthy_choice"] = warning
    return Selection(record), selector.all_rows(bundle, g), draw.with_bandwidth(g)
