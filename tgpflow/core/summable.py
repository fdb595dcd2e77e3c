"""What every additive statistic shares: ``sum(parts)`` starts from the integer 0, and Dask's
memory accounting (``dask.sizeof``) sees the bytes of its arrays, not a few bytes of object."""

from __future__ import annotations

import dataclasses
import sys
from typing import Any

import numpy as np
from dask.sizeof import sizeof

__all__ = ["Summable", "nbytes"]


class Summable:
    """Mixin for statistics with ``__add__``: ``0 + s`` is ``s``, so ``sum(parts)`` needs no start value."""

    __slots__ = ()

    def __radd__(self, other: Any) -> Any:
        if isinstance(other, int) and other == 0:
            return self
        return NotImplemented


def nbytes(stats: Any) -> int:
    """The bytes of the arrays of a statistics value: those of ``to_arrays()``, else of its
    dataclass fields (recursively), else of the value itself if it is an array."""
    if isinstance(stats, np.ndarray):
        return int(stats.nbytes)
    if hasattr(stats, "to_arrays"):
        return sum(int(np.asarray(a).nbytes) for a in stats.to_arrays().values())
    if dataclasses.is_dataclass(stats):
        return sum(nbytes(getattr(stats, f.name)) for f in dataclasses.fields(stats))
    return 0


@sizeof.register(Summable)
def _sizeof_stats(stats: Summable) -> int:
    return nbytes(stats) + sys.getsizeof(stats)
