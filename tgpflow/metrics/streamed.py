"""Means of per-row model quantities over any source, streamed (one pass, float64 chunk sums, tree-reduced)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from tgpflow.core.engine import accumulate
from tgpflow.io.sources import as_source

__all__ = ["streamed_mean"]


class _Sum:
    """(Σ values, n) — a mergeable value for the tree reduction."""

    def __init__(self, total: float, n: int):
        self.total, self.n = total, n

    def __add__(self, other: _Sum) -> _Sum:
        return _Sum(self.total + other.total, self.n + other.n)


def _chunk(block: np.ndarray, fn: Callable[[np.ndarray], np.ndarray]) -> _Sum:
    values = fn(block)
    return _Sum(float(np.sum(values, dtype=np.float64)), int(values.shape[0]))


def streamed_mean(model: Any, X: Any, fn: Callable[[np.ndarray], np.ndarray], *, columns: list[str] | None = None,
                  on_bad_rows: str = "raise") -> float:
    """Mean of ``fn(rows)`` over the validated rows of ``X``, read with ``model``'s column names when it has them."""
    names = getattr(model, "feature_names_in_", None)
    if columns is None and names is not None and not isinstance(X, np.ndarray):
        columns = [str(c) for c in names]
    source = as_source(X, columns=columns, on_bad_rows=on_bad_rows)
    total, _ = accumulate(source, _chunk, fn)
    if total.n == 0:
        raise ValueError(f"{source.description}: no rows to score")
    return total.total / total.n
