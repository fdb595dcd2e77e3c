"""The one method every additive statistic shares: ``sum(parts)`` starts from the integer 0."""

from __future__ import annotations

from typing import Any

__all__ = ["Summable"]


class Summable:
    """Mixin for statistics with ``__add__``: ``0 + s`` is ``s``, so ``sum(parts)`` needs no start value."""

    __slots__ = ()

    def __radd__(self, other: Any) -> Any:
        if isinstance(other, int) and other == 0:
            return self
        return NotImplemented
