"""What every additive statistic shares: ``sum(parts)`` starts from the integer 0, Dask's memory accounting
(``dask.sizeof``) sees the bytes of its arrays, not a few bytes of object, and — for the statistics of a
family (:class:`AdditiveStats`) — one algebra, written once, field by field from the dataclass fields.

Statistics are values (DESIGN.md, "Statistics are values"): sums over rows, so the statistics of A ∪ B are
those of A plus those of B, a partition is removed by subtraction (sliding windows), and a forgetting factor
weights every row (:meth:`AdditiveStats.scaled`). Saving and loading them needs the artifact writer of
:mod:`tgpflow.io`, a layer above this one: it is added in :mod:`tgpflow.stats.stored`.
"""

from __future__ import annotations

import dataclasses
import sys
import typing
from typing import Any, ClassVar, Self

import numpy as np
from dask.sizeof import sizeof

from tgpflow.errors import FeaturesMismatchError

__all__ = ["Summable", "AdditiveStats", "nbytes", "count_array", "count_value"]


class Summable:
    """Mixin for statistics with ``__add__``: ``0 + s`` is ``s``, so ``sum(parts)`` needs no start value."""

    __slots__ = ()

    def __radd__(self, other: Any) -> Any:
        if isinstance(other, int) and other == 0:
            return self
        return NotImplemented


def count_array(n: int | float) -> np.ndarray:
    """A row count as a 0-d array: int64, or float64 for a weighted count that is not a whole number."""
    weighted = isinstance(n, float) and not float(n).is_integer()
    return np.array(n, dtype=np.float64 if weighted else np.int64)


def count_value(a: np.ndarray) -> int | float:
    """The row count a 0-d array holds: an int when it is a whole number, else a float (weighted rows)."""
    n = float(np.asarray(a))
    return int(n) if n.is_integer() else n


class AdditiveStats(Summable):
    """Base of a frozen dataclass of sums over rows computed with one draw (features, basis, grid).

    ``+``, ``−``, :meth:`scaled` and ``to_arrays``/``from_arrays`` act field by field:

    * the fields named in :attr:`CARRIED` (by default ``fingerprint``) are the same in both parts — checked
      by :meth:`_check_combinable` — and carried over;
    * an array or a number (the row count ``n``) is added, subtracted or multiplied by the factor;
    * a statistics value (a :class:`~tgpflow.core.moments.Moments`) uses its own ``+``, ``−`` and ``scaled``;
    * a field that is None in either part (an optional sum) is None in the result.

    ``to_arrays`` names a nested value's arrays ``<field>.<name>`` (``moments.n``, ``moments.mean`` …) and
    leaves out the fingerprint, which an artifact keeps in its metadata; :meth:`from_arrays` reads that
    layout back, a nested value through its type's ``from_arrays(arrays)``. The artifact's kind is the class
    name (the statistics store and model files dispatch on ``type(stats).__name__``).
    """

    __slots__ = ()

    #: Fields that are equal in both parts of a sum and carried over, not summed.
    CARRIED: ClassVar[tuple[str, ...]] = ("fingerprint",)
    #: The :class:`~tgpflow.errors.FeaturesMismatchError` of ``a + b`` with other fingerprints; formatted
    #: with ``a`` and ``b``, the first 12 characters of the two.
    MISMATCH: ClassVar[str] = "cannot combine statistics of different draws ({a}… and {b}…)"
    #: The error of :meth:`check_draw` (``a``: these statistics' fingerprint, ``b``: the draw's).
    DRAW_MISMATCH: ClassVar[str] = ("the statistics were accumulated with another draw (fingerprints {a}… and "
                                    "{b}…); pass the draw they were accumulated with, or refit")

    fingerprint: str

    def _check_combinable(self, other: Self, sign: float) -> None:
        """Raise unless ``other`` may be added (``sign`` = 1) or removed (−1): by default, the same fingerprint,
        and no more rows removed than there are (a count field ``n``; a nested
        :class:`~tgpflow.core.moments.Moments` checks its own)."""
        if "fingerprint" in self.CARRIED and other.fingerprint != self.fingerprint:
            raise FeaturesMismatchError(self.MISMATCH.format(a=self.fingerprint[:12], b=other.fingerprint[:12]))
        if sign < 0 and "n" in self.__dataclass_fields__ and other.n > self.n * (1 + 1e-12):
            raise ValueError(f"cannot remove {other.n} rows from {self.n}")

    def check_draw(self, draw: Any) -> None:
        """Raise :class:`~tgpflow.errors.FeaturesMismatchError` unless these statistics were accumulated with
        ``draw`` (anything with a ``fingerprint``: features, a Nyström basis, a projection grid)."""
        if draw.fingerprint != self.fingerprint:
            raise FeaturesMismatchError(self.DRAW_MISMATCH.format(a=self.fingerprint[:12], b=draw.fingerprint[:12]))

    def _combine(self, other: Any, sign: float) -> Any:
        if type(other) is not type(self):
            return NotImplemented
        self._check_combinable(other, sign)
        values = {}
        for f in dataclasses.fields(self):
            a, b = getattr(self, f.name), getattr(other, f.name)
            if f.name in self.CARRIED:
                values[f.name] = a
            elif a is None or b is None:  # an optional sum: kept only when both parts carry it
                values[f.name] = None
            else:  # a − b, not a + (−1)·b: the same bits, and a statistics value has its own −
                values[f.name] = a + b if sign > 0 else a - b
        return type(self)(**values)

    def __add__(self, other: Any) -> Any:
        return self._combine(other, 1.0)

    def __sub__(self, other: Any) -> Any:
        """The statistics of the rows of ``self`` that are not in ``other``."""
        return self._combine(other, -1.0)

    def scaled(self, factor: float) -> Self:
        """Every row's weight times ``factor`` (forgetting: every sum is linear in the row weights)."""
        if factor == 1.0:
            return self
        values = {}
        for f in dataclasses.fields(self):
            a = getattr(self, f.name)
            if f.name in self.CARRIED or a is None:
                values[f.name] = a
            else:
                values[f.name] = a.scaled(factor) if isinstance(a, Summable) else a * factor
        return type(self)(**values)

    # -- arrays (the artifact layout) -------------------------------------------------------
    def to_arrays(self) -> dict[str, np.ndarray]:
        """Every field but the fingerprint as named arrays; a nested value's as ``<field>.<name>``."""
        arrays: dict[str, np.ndarray] = {}
        for f in dataclasses.fields(self):
            a = getattr(self, f.name)
            if f.name == "fingerprint" or a is None:
                continue
            if isinstance(a, Summable):
                arrays.update({f"{f.name}.{k}": v for k, v in a.to_arrays().items()})
            elif isinstance(a, np.ndarray):
                arrays[f.name] = a
            else:
                arrays[f.name] = count_array(a)
        return arrays

    @classmethod
    def from_arrays(cls, fingerprint: str, arrays: dict[str, np.ndarray]) -> Self:
        """The statistics of :meth:`to_arrays` (``fingerprint`` from the artifact's metadata); arrays are float64,
        a missing optional array is None."""
        hints = typing.get_type_hints(cls)
        values: dict[str, Any] = {}
        for f in dataclasses.fields(cls):
            kind = hints[f.name]
            if f.name == "fingerprint":
                values[f.name] = fingerprint
            elif isinstance(kind, type) and issubclass(kind, Summable):
                prefix = f"{f.name}."
                values[f.name] = kind.from_arrays({k[len(prefix):]: v for k, v in arrays.items()
                                                   if k.startswith(prefix)})
            elif set(typing.get_args(kind) or (kind,)) <= {int, float}:
                values[f.name] = count_value(arrays[f.name])
            elif f.name in arrays or f.default is dataclasses.MISSING:
                values[f.name] = np.asarray(arrays[f.name], dtype=np.float64)
        return cls(**values)


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
