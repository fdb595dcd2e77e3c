"""The root-Sobolev fit from rows (docs/root_sobolev.md, "The fit"): the batch iteration, the held-out choice of
the smoothness, and the online update of ``partial_fit``.

Each is a function of public values: the rows to map over (:class:`~tgpflow.models.rsr_rows.IterationRows`), the
features, and the iteration's settings (:class:`IterationSettings`, read off the estimator's parameters). Every
iteration is one map-reduce over the rows (:mod:`tgpflow.stats.rsr`); the step rule is
:func:`tgpflow.solve.rsr.natural_gradient_iterate`'s.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

import numpy as np

from tgpflow.core.engine import Progress
from tgpflow.core.logs import phase
from tgpflow.features.rff import RandomFourierFeatures
from tgpflow.features.sdo import SDODraw
from tgpflow.io.sources import Source
from tgpflow.models.rsr_rows import IterationRows
from tgpflow.solve.rsr import natural_gradient_iterate
from tgpflow.stats.kde_sdo import kde_sdo_chunk_stats
from tgpflow.stats.rsr import rsr_chunk_stats

__all__ = ["IterationSettings", "batch_fit", "select_smoothness", "online_update"]

logger = logging.getLogger("tgpflow")


@dataclasses.dataclass(frozen=True)
class IterationSettings:
    """The iteration's parameters as a ``RootSobolevDensity`` holds them (``step``, ``max_iter``, ``tol``; the
    chunk's ``block_bytes``; ``persist_bytes``, up to which the rows are kept in memory between passes)."""

    step: float
    max_iter: int
    tol: float
    block_bytes: int
    persist_bytes: int

    @classmethod
    def of(cls, est: Any) -> IterationSettings:
        return cls(float(est.step), int(est.max_iter), float(est.tol), int(est.block_bytes), int(est.persist_bytes))

    def pass_of(self, rows: IterationRows, features: RandomFourierFeatures) -> Any:
        """``w ↦`` the sums of one natural-gradient pass over ``rows`` at w."""
        return lambda w: rows.reduce(rsr_chunk_stats, features, w, self.block_bytes)


def batch_fit(rows: IterationRows, features: RandomFourierFeatures,
              settings: IterationSettings) -> tuple[np.ndarray, dict[str, Any]]:
    """The batch fit: the KDE start ``w₀ ∝ Σφ(x_i)/N`` (one pass), then the natural-gradient iteration; returns w
    and the iteration's report (``n``: the rows, ``iterations``, ``converged``, …)."""
    with phase("rsr-init", n_features=features.n_features):
        init = rows.reduce(kde_sdo_chunk_stats, features, settings.block_bytes)
    w = init.g / init.n
    w, info = natural_gradient_iterate(settings.pass_of(rows, features), w / np.linalg.norm(w), step=settings.step,
                                       max_iter=settings.max_iter, tol=settings.tol)
    if not info["converged"]:
        logger.warning("RSR did not converge in %d iterations (kernel width a^(1/2m_s) = %.3g)", settings.max_iter,
                       features.gamma)
    return w, {"n": init.n, **info}


def select_smoothness(source: Source, draw: SDODraw, grid: list[float], settings: IterationSettings, *,
                      order: int, rank: int, a_rule: str, validation_fraction: float,
                      progress: Progress | None = None) -> tuple[float, dict[str, Any]]:
    """The smoothness a of ``grid`` by the held-out Hyvärinen loss ``J = mean 2Δf/f`` of a batch fit on the
    training rows of the row-hash split (docs/root_sobolev.md, "Choosing the smoothness"): the smallest J
    (``a_rule="min"``) or the interior local minimum at the largest a (``"largest_local_min"``); only converged
    fits compete. Returns a and the selection record (the curve, the rule, the choice)."""
    if 2 * order <= rank + 4:
        # the RFF Laplacian Σ w_t‖z_t‖²φ_t needs E‖z‖⁴ < ∞, i.e. 2m_s > d + 4; the default m_s = ⌊d/2⌋ + 1
        # has E‖z‖² = ∞ (spectral tail ‖z‖^{d−1−2m_s}), so J is dominated by the few largest frequencies
        logger.warning("held-out Hyvärinen loss with order m_s = %d <= d/2 + 2 (d = %d): its value has infinite "
                       "variance over the feature draw; use order >= %d to select a", order, rank, rank // 2 + 3)
    train = IterationRows(source, settings.persist_bytes, "train", validation_fraction, progress)
    val = IterationRows(source, settings.persist_bytes, "val", validation_fraction, progress)
    curve = []
    for a in sorted(grid):
        feats = draw.at(a)
        w, info = batch_fit(train, feats, settings)
        st = val.reduce(rsr_chunk_stats, feats, w, settings.block_bytes)
        curve.append({"a": a, "heldout_hyvarinen": st.sum_hyvarinen / st.n, "iterations": info["iterations"],
                      "converged": info["converged"]})
    # only converged fits compete; J is unbounded below for rough fits, hence the rule of the interior minimum
    J = [c["heldout_hyvarinen"] if c["converged"] else np.inf for c in curve]
    if not np.isfinite(J).any():
        raise FloatingPointError("no smoothness in the grid converged; raise max_iter or use larger a")
    best = int(np.argmin(J))
    if a_rule == "largest_local_min":  # interior local minima of J over the a-grid, the largest a
        local = [i for i in range(1, len(J) - 1) if np.isfinite(J[i]) and J[i] <= J[i - 1] and J[i] <= J[i + 1]]
        best = max(local) if local else best
    return curve[best]["a"], {"curve": curve, "rule": a_rule, "chosen": curve[best]["a"]}


def online_update(rows: IterationRows, features: RandomFourierFeatures, coef: np.ndarray, n_old: int,
                  settings: IterationSettings) -> tuple[np.ndarray, dict[str, Any]]:
    """``partial_fit``'s update from the current ``coef`` on new ``rows``: the implicit stochastic-approximation
    step anchored at the fit on the ``n_old`` rows before (:func:`~tgpflow.solve.rsr.natural_gradient_iterate`);
    returns w and the report (``rows``: how many new rows)."""
    with phase("rsr-online", n_features=features.n_features, rows_before=n_old):
        w, info = natural_gradient_iterate(settings.pass_of(rows, features), coef, step=settings.step,
                                           max_iter=settings.max_iter, tol=settings.tol, anchor=coef,
                                           anchor_rows=n_old)
    if not info["converged"]:
        logger.warning("RSR partial_fit did not converge in %d iterations", settings.max_iter)
    return w, info
