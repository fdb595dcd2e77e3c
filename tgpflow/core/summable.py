"""What every additive statistic shares: ``sum(parts)`` starts from the integer 0, Dask's memory accounting
(``dask.sizeof``) sees the bytes of its arrays, not a few bytes of object, and — for the statistics of a
family (:class:`AdditiveStats`) — one algebra, written once, field by field from the dataclass fields.

Statistics are values (docs/architecture.md, "Statistics are values"): sums over rows, so the statistics of A ∪ B are
those of A plus those of B, a partition is removed by subtraction (sliding windows), and a forgetting factor
weights every row (:meth:`AdditiveStats.scaled`). Statistics carry the draw they were computed with (features,
a Nyström basis, a projection grid: types of :mod:`tgpflow.features` and :mod:`tgpflow.stats`, layers above this
one, so typed ``Any`` here), and their ``fingerprint`` is the draw's. Saving and loading them needs the artifact
writer of :mod:`tgpflow.io`, a layer above this one: it is added in :mod:`tgpflow.stats.stored`.
"""

from __future__ import annotations

import dataclasses
import sys
import typing
from collections.abc import Mapping
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

    A statistics class declares its draw first and its fingerprint last, keyword-only::

        draw: RandomFourierFeatures | None
        ...                                  # the sums
        fingerprint: str = dataclasses.field(default="", kw_only=True)

    ``fingerprint`` is derived from ``draw`` (:meth:`__post_init__`); it is given alone only for statistics read
    from a file written before statistics carried their draw (``draw`` is then None, and a solve asks for it).

    ``+``, ``−``, :meth:`scaled` and ``to_arrays``/``from_arrays`` act field by field:

    * the fields named in :attr:`CARRIED` (by default ``fingerprint`` and ``draw``) are the same in both parts —
      checked by fingerprint in :meth:`_check_combinable` — and carried over, not summed (the draw of either
      part: one read from an old file has none); a carried value with ``to_arrays``/``from_arrays`` (a mixture
      base) is saved as ``<field>.<name>`` like a nested one;
    * an array or a number (the row count ``n``) is added, subtracted or multiplied by the factor;
    * a statistics value (a :class:`~tgpflow.core.moments.Moments`) uses its own ``+``, ``−`` and ``scaled``;
    * a field that is None in either part (an optional sum) is None in the result.

    ``to_arrays`` names a nested value's arrays ``<field>.<name>`` (``moments.n``, ``moments.mean`` …) and the
    draw's ``draw.<name>`` (:meth:`_draw_arrays`), and leaves out the fingerprint and the draw's scalars, which
    an artifact keeps in its metadata (:meth:`artifact_meta`); :meth:`from_arrays` reads that layout back, a
    nested value through its type's ``from_arrays(arrays)``, the draw through :meth:`_draw_from_arrays`. The
    artifact's kind is the class name (the statistics store and model files dispatch on ``type(stats).__name__``).
    """

    __slots__ = ()

    #: Fields that are equal in both parts of a sum and carried over, not summed.
    CARRIED: ClassVar[tuple[str, ...]] = ("fingerprint", "draw")
    #: The :class:`~tgpflow.errors.FeaturesMismatchError` of ``a + b`` with other fingerprints; formatted
    #: with ``a`` and ``b``, the first 12 characters of the two.
    MISMATCH: ClassVar[str] = "cannot combine statistics of different draws ({a}… and {b}…)"
    #: The error of :meth:`check_draw` (``a``: these statistics' fingerprint, ``b``: the draw's).
    DRAW_MISMATCH: ClassVar[str] = ("the statistics were accumulated with another draw (fingerprints {a}… and "
                                    "{b}…); pass the draw they were accumulated with, or refit")
    #: The prefix of the draw's arrays in :meth:`to_arrays`.
    DRAW_PREFIX: ClassVar[str] = "draw."

    fingerprint: str

    def __post_init__(self) -> None:
        """The fingerprint of the draw; without a draw (an older file), the fingerprint given must be non-empty."""
        if "draw" not in self.__dataclass_fields__:  # type: ignore[attr-defined]
            return
        draw = self.draw  # type: ignore[attr-defined]
        if draw is None:
            if not self.fingerprint:
                raise ValueError(f"{type(self).__name__} needs the draw it was computed with (or, read from an older "
                                 f"file, that draw's fingerprint)")
            return
        if self.fingerprint and self.fingerprint != draw.fingerprint:
            raise FeaturesMismatchError(self.DRAW_MISMATCH.format(a=self.fingerprint[:12], b=draw.fingerprint[:12]))
        object.__setattr__(self, "fingerprint", draw.fingerprint)

    def with_draw(self, draw: Any) -> Self:
        """These statistics carrying ``draw`` (for statistics read without it); refused unless it is their draw."""
        self.check_draw(draw)
        return dataclasses.replace(self, draw=draw)  # type: ignore[type-var]

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
            if isinstance(other, AdditiveStats):  # not Python's TypeError: a user's mix-up, said as one
                raise ValueError(f"cannot combine {type(self).__name__} with {type(other).__name__}: statistics of "
                                 f"different kinds (another method or estimator) do not add; accumulate every part "
                                 f"with the same estimator")
            return NotImplemented
        self._check_combinable(other, sign)
        values = {}
        for f in dataclasses.fields(self):
            a, b = getattr(self, f.name), getattr(other, f.name)
            if f.name in self.CARRIED:
                values[f.name] = a if a is not None else b  # a draw: either part's (one from an old file has none)
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
    @classmethod
    def _draw_arrays(cls, draw: Any) -> dict[str, np.ndarray]:
        """The draw's arrays (its ``to_arrays()``); :meth:`_draw_meta` holds what is not an array."""
        return dict(draw.to_arrays())

    @classmethod
    def _draw_meta(cls, draw: Any) -> dict[str, Any]:
        """The draw's scalars that are not among its arrays (JSON: a seed, a kernel name)."""
        return {}

    @classmethod
    def _draw_from_arrays(cls, arrays: dict[str, np.ndarray], meta: Mapping[str, Any]) -> Any:
        """The draw of :meth:`_draw_arrays` and :meth:`_draw_meta`."""
        raise NotImplementedError(f"{cls.__name__} does not say how to read its draw back")

    def draw_meta(self) -> dict[str, dict[str, Any]]:
        """The scalars of every draw these statistics carry, by the prefix of its arrays without the dot
        (``{"draw": {"seed": 0}}``; a nested value's under ``"<field>.draw"``); empty without a draw."""
        out: dict[str, dict[str, Any]] = {}
        for f in dataclasses.fields(self):
            a = getattr(self, f.name)
            if f.name == "draw" and a is not None:
                out["draw"] = self._draw_meta(a)
            elif isinstance(a, AdditiveStats):
                out.update({f"{f.name}.{k}": v for k, v in a.draw_meta().items()})
        return out

    def artifact_meta(self) -> dict[str, Any]:
        """The metadata of an artifact holding :meth:`to_arrays`: the fingerprint and, when there is a draw, its
        scalars (``draws``, :meth:`draw_meta`) — none for statistics read from an older file, which are then
        written again as they were."""
        draws = self.draw_meta()
        return {"fingerprint": self.fingerprint, **({"draws": draws} if draws else {})}

    def to_arrays(self) -> dict[str, np.ndarray]:
        """Every field but the fingerprint as named arrays; a nested value's as ``<field>.<name>``, the draw's as
        ``draw.<name>``."""
        arrays: dict[str, np.ndarray] = {}
        for f in dataclasses.fields(self):
            a = getattr(self, f.name)
            if f.name == "fingerprint" or a is None:
                continue
            if f.name == "draw":
                arrays.update({f"{self.DRAW_PREFIX}{k}": np.asarray(v) for k, v in self._draw_arrays(a).items()})
            elif isinstance(a, Summable) or (f.name in self.CARRIED and hasattr(a, "to_arrays")):  # (a mixture base)
                arrays.update({f"{f.name}.{k}": v for k, v in a.to_arrays().items()})
            elif isinstance(a, np.ndarray):
                arrays[f.name] = a
            else:
                arrays[f.name] = count_array(a)
        return arrays

    @classmethod
    def from_artifact(cls, arrays: dict[str, np.ndarray], meta: Mapping[str, Any]) -> Self:
        """The statistics of an artifact written with :meth:`to_arrays` and :meth:`artifact_meta`."""
        return cls.from_arrays(meta["fingerprint"], arrays, meta.get("draws"))

    @classmethod
    def from_arrays(cls, fingerprint: str, arrays: dict[str, np.ndarray],
                    draws: Mapping[str, Any] | None = None) -> Self:
        """The statistics of :meth:`to_arrays` (``fingerprint`` and ``draws``, the draw's scalars, from the
        artifact's metadata, :meth:`artifact_meta`); arrays are float64, a missing optional array is None, and
        without ``draw.*`` arrays (a file written before statistics carried their draw) the draw is None."""
        hints = typing.get_type_hints(cls)
        values: dict[str, Any] = {}
        for f in dataclasses.fields(cls):
            kind = hints[f.name]
            if f.name == "fingerprint":
                values[f.name] = fingerprint
            elif f.name == "draw":
                own = {k[len(cls.DRAW_PREFIX):]: v for k, v in arrays.items() if k.startswith(cls.DRAW_PREFIX)}
                values[f.name] = cls._draw_from_arrays(own, (draws or {}).get("draw", {})) if own else None
            elif isinstance(kind, type) and issubclass(kind, Summable):
                prefix = f"{f.name}."
                values[f.name] = kind.from_arrays({k[len(prefix):]: v for k, v in arrays.items()
                                                   if k.startswith(prefix)})
            elif f.name in cls.CARRIED and _readable(kind):  # an optional carried value (a mixture base)
                prefix = f"{f.name}."
                own = {k[len(prefix):]: v for k, v in arrays.items() if k.startswith(prefix)}
                values[f.name] = _readable(kind).from_arrays(own) if own else None
            elif set(typing.get_args(kind) or (kind,)) <= {int, float}:
                values[f.name] = count_value(arrays[f.name])
            elif f.name in arrays or f.default is dataclasses.MISSING:
                values[f.name] = np.asarray(arrays[f.name], dtype=np.float64)
        return cls(**values)


def _readable(kind: Any) -> Any:
    """The type of an optional field's hint that reads itself back (``from_arrays``), else None."""
    return next((t for t in typing.get_args(kind) or (kind,) if hasattr(t, "from_arrays")), None)


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
