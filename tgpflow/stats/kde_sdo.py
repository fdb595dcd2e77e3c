"""Statistics of the KDE-SDO baseline, and of the root-Sobolev start: ``Σ φ(x_i)`` and N (docs/mathematics.md,
"Root-Sobolev density").

KDE-SDO is ``p ∝ φ(x)ᵀ Σ_i φ(x_i)/N`` on SDO random features, so ``g = Σ_i φ(x_i)`` (T) and the row
count N are its sufficient statistics: sums over rows, hence a value with ``+`` (``sum(parts)``),
``−`` (a partition removed), :meth:`KDESDOStats.scaled` (forgetting) and ``to_arrays``/``from_arrays``,
carrying the features they were computed with (the SDO draw at one smoothness a, which is what the chunk
function is given). The same sums give the
root-Sobolev iteration its non-negative start ``w₀ ∝ Σφ(x_i)/N``. Rows in blocks sized by the
memory planner; float64.
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar

import numpy as np

from tgpflow.core.memory import DEFAULT_BLOCK_BYTES, F64, MemoryCost, declare, plan_blocks, task_budget
from tgpflow.features.rff import RandomFourierFeatures
from tgpflow.stats.tgp import RFFStats

__all__ = ["KDESDOStats", "kde_sdo_chunk_stats", "kde_sdo_memory"]


def kde_sdo_memory(features: RandomFourierFeatures) -> MemoryCost:
    """The bytes of one :func:`kde_sdo_chunk_stats` task: fixed, the frequencies and their absolute
    values (2·T·d) and a few T-vectors; per block row, the angles, sin and cos (3·T) and the shifted
    row (d) with its absolute value (d)."""
    T, d = features.n_features, features.n_dims
    return MemoryCost(f"KDE-SDO sums (T={T}, d={d})", F64 * (2 * T * d + 4 * T), F64 * (3 * T + 2 * d), 0,
                      "use fewer features (n_features)", F64 * T)


@dataclasses.dataclass(frozen=True, eq=False)
class KDESDOStats(RFFStats):
    """``g = Σ φ(x_i)`` and ``n`` (an int, or a float for weighted rows) for the features ``draw`` (a value: +, −,
    ``scaled``, save/load — :class:`~tgpflow.core.summable.AdditiveStats`; the draw saved as
    :class:`~tgpflow.stats.tgp.RFFStats` saves it)."""

    MISMATCH: ClassVar[str] = ("cannot combine KDE-SDO statistics of different feature draws ({a}… and {b}…); "
                               "accumulate every part with the same features")
    DRAW_MISMATCH: ClassVar[str] = (
        "the KDE-SDO statistics were accumulated with another feature draw (fingerprints {a}… and {b}…); pass "
        "features=est.features_ (or the draw the statistics were accumulated with) to fit_from_stats, or refit")

    draw: RandomFourierFeatures | None
    g: np.ndarray
    n: int | float
    fingerprint: str = dataclasses.field(default="", kw_only=True)

    @classmethod
    def zero(cls, features: RandomFourierFeatures) -> KDESDOStats:
        return cls(features, np.zeros(features.n_features), 0)


def kde_sdo_chunk_stats(x: np.ndarray, features: RandomFourierFeatures,
                        block_bytes: int = DEFAULT_BLOCK_BYTES) -> KDESDOStats:
    """``Σ φ(x_i)`` and the row count of one chunk, in row blocks planned within ``block_bytes``."""
    x = np.asarray(x, dtype=np.float64)
    rows = plan_blocks(kde_sdo_memory(features), block_bytes, chunk_rows=x.shape[0], budget=task_budget()[0]).rows
    g = np.zeros(features.n_features)
    for start in range(0, x.shape[0], max(rows, 1)):
        g += features.cos_features(x[start:start + rows]).sum(axis=1)  # φᵀ (S, rows) by the fused cosine kernel
    return KDESDOStats(features, g, int(x.shape[0]))


def _kde_sdo_cost(n_dims: int, features: RandomFourierFeatures,
                  block_bytes: int = DEFAULT_BLOCK_BYTES) -> tuple[MemoryCost, int]:
    return kde_sdo_memory(features), block_bytes


declare(kde_sdo_chunk_stats, _kde_sdo_cost)
