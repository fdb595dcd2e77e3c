"""The kernel estimators' held-out selection of λ at each kernel bandwidth σ_k (docs/mathematics.md, "Score estimators
on a Nyström basis"): the :class:`~tgpflow.models.selection.Selector` of
:class:`~tgpflow.models.kernel_score.ScoreEstimator` and :class:`~tgpflow.models.nystrom_kef.NystromKEF`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import numpy as np

from tgpflow.core.gaussian_base import base_from_moments
from tgpflow.features.nystrom import NystromBasis
from tgpflow.models.selection import Selector
from tgpflow.solve.kef import kernel_heldout_loss

__all__ = ["KernelSelector"]


@dataclasses.dataclass(frozen=True)
class KernelSelector(Selector):
    """λ at each σ_k by the held-out Hyvärinen loss of its solve on the training part (docs/mathematics.md, "Score
    estimators on a Nyström basis"), the smallest loss chosen (:func:`~tgpflow.models.selection.select`). ``solve(stats,
    basis, base, lam)`` gives the coefficients; ``gaussian_base``: each part's base is N(μ, Σ) of its own moments, else
    flat."""

    kind: str
    lams: list[float]
    gaussian_base: bool
    solve: Callable[..., tuple[np.ndarray, dict[str, Any]]]

    def log_facts(self) -> dict[str, Any]:
        return {"kernel": self.kind}

    def candidates(self, bandwidth: float, train: Any, val: Any, draw: NystromBasis) -> list[dict[str, Any]]:
        base = base_from_moments(train.moments) if self.gaussian_base else None
        rows = []
        for lam in self.lams:
            coef, _ = self.solve(train, draw, base, lam)
            rows.append({"bandwidth": bandwidth, "lam": lam,
                         "loss": kernel_heldout_loss(self.kind, val, draw, base, coef)})
        return rows

    def best(self, rows: list[dict[str, Any]]) -> int:
        return min(range(len(rows)), key=lambda i: (rows[i]["loss"], i))

    def criterion_text(self) -> str:
        return "held-out Hyvärinen loss"
