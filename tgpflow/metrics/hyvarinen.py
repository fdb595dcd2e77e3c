"""The held-out Hyvärinen score-matching loss, streamed over any source (MATH.md §0, §10).

``J(s) = mean_i [½‖s(x_i)‖² + div s(x_i)]`` with the model's closed-form divergence, over the
validated rows of ``X`` (one pass, chunk sums tree-reduced in float64). Lower is better; it
equals the Fisher divergence to the data distribution up to a model-free constant.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tgpflow.io.sources import as_source
from tgpflow.stats.reduce import accumulate

__all__ = ["hyvarinen_loss"]


class _Sum:
    """(Σ terms, n) — a mergeable value for the tree reduction."""

    def __init__(self, total: float, n: int):
        self.total, self.n = total, n

    def __add__(self, other: _Sum) -> _Sum:
        return _Sum(self.total + other.total, self.n + other.n)


def _chunk(block: np.ndarray, terms: Any) -> _Sum:
    values = terms(block)
    return _Sum(float(np.sum(values, dtype=np.float64)), int(values.shape[0]))


def hyvarinen_loss(model: Any, X: Any, *, sigma: float | None = None, columns: list[str] | None = None,
                   on_bad_rows: str = "raise") -> float:
    """Mean of ``½‖s‖² + div s`` of ``model`` over the rows of ``X`` (any source).

    ``model`` needs ``hyvarinen_terms`` (every tgpflow density does); ``sigma`` is passed on
    for noise-conditional models.
    """
    if not hasattr(model, "hyvarinen_terms"):
        raise TypeError(f"{type(model).__name__} has no hyvarinen_terms; it cannot be scored by score matching")
    names = getattr(model, "feature_names_in_", None)
    if columns is None and names is not None and not isinstance(X, np.ndarray):
        columns = [str(c) for c in names]
    source = as_source(X, columns=columns, on_bad_rows=on_bad_rows)
    evaluator = model._evaluator_at(sigma) if hasattr(model, "_evaluator_at") else None
    terms = evaluator.hyvarinen_terms if evaluator is not None else model.hyvarinen_terms
    total, _ = accumulate(source, _chunk, terms)
    if total.n == 0:
        raise ValueError(f"{source.description}: no rows to score")
    return total.total / total.n
