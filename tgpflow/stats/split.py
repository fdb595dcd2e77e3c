"""A train/validation split inside the one pass, and keyed bundles of statistics.

Every row goes to the validation part iff ``u(key) < fraction``, where ``key`` is the row's
stable key (its global position, see :meth:`tgpflow.io.sources.Source.row_keys`) and
``u = splitmix64(key ⊕ salt) / 2⁶⁴`` is a fixed hash: the same rows are held out on every
refit, whatever the chunking, scheduler or number of workers, and appended rows do not move
earlier rows between the parts. No random state is consumed.

:class:`StatsBundle` holds several statistics values under keys (e.g. ``("train", g)`` and
``("val", g)`` for each bandwidth γ_g of a grid) and adds/subtracts key by key, so a
split pass over a grid of G bandwidths is still one tree reduction (at G× the pass cost).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any

import numpy as np

__all__ = ["validation_mask", "StatsBundle", "split_chunk_stats", "SPLIT_SALT"]

#: Salt of the hashed train/validation split, shared by every estimator (fixed: the same rows
#: are held out on every refit, and by every model of a pipeline).
SPLIT_SALT = 0x7467_7066_6C6F_77  # "tgpflow"

_M1, _M2, _GOLD = np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB), np.uint64(0x9E3779B97F4A7C15)


def _splitmix64(x: np.ndarray) -> np.ndarray:
    z = x + _GOLD  # uint64 arithmetic wraps, as splitmix64 requires
    z = (z ^ (z >> np.uint64(30))) * _M1
    z = (z ^ (z >> np.uint64(27))) * _M2
    return z ^ (z >> np.uint64(31))


def validation_mask(keys: np.ndarray, fraction: float, salt: int = 0) -> np.ndarray:
    """True for the rows held out for validation (a fixed hash of each row's key)."""
    if not 0.0 < fraction < 1.0:
        raise ValueError(f"validation_fraction must be in (0, 1); got {fraction}")
    with np.errstate(over="ignore"):
        h = _splitmix64(np.asarray(keys, dtype=np.int64).view(np.uint64) ^ np.uint64(salt & (2**64 - 1)))
    u = (h >> np.uint64(11)).astype(np.float64) * 2.0**-53
    return u < fraction


class StatsBundle(Mapping):
    """Statistics values under keys; ``+``/``−`` act key by key (keys must match)."""

    def __init__(self, parts: Mapping[Any, Any]):
        self._parts = dict(parts)

    def __getitem__(self, key: Any) -> Any:
        return self._parts[key]

    def __iter__(self) -> Iterator[Any]:
        return iter(self._parts)

    def __len__(self) -> int:
        return len(self._parts)

    def _check(self, other: Any) -> None:
        if set(other) != set(self._parts):
            raise ValueError(f"cannot combine statistics bundles with keys {sorted(map(str, self))} "
                             f"and {sorted(map(str, other))}")

    def __add__(self, other: Any) -> StatsBundle:
        if not isinstance(other, StatsBundle):
            return NotImplemented
        self._check(other)
        return StatsBundle({k: v + other[k] for k, v in self._parts.items()})

    def __radd__(self, other: Any) -> StatsBundle:
        if isinstance(other, int) and other == 0:
            return self
        return NotImplemented

    def __sub__(self, other: Any) -> StatsBundle:
        if not isinstance(other, StatsBundle):
            return NotImplemented
        self._check(other)
        return StatsBundle({k: v - other[k] for k, v in self._parts.items()})


def split_chunk_stats(block: np.ndarray, keys: np.ndarray, fraction: float, salt: int,
                      chunk_fn: Callable[..., Any], variants: Mapping[Any, tuple[Any, ...]]) -> StatsBundle:
    """``chunk_fn(rows, *args)`` on the train and validation rows of a chunk, for each variant.

    ``variants`` maps a name (e.g. a bandwidth index) to the extra arguments of ``chunk_fn``;
    the result holds ``("train", name)`` and ``("val", name)``.
    """
    held = validation_mask(keys, fraction, salt)
    train, val = block[~held], block[held]
    out = {}
    for name, args in variants.items():
        out[("train", name)] = chunk_fn(train, *args)
        out[("val", name)] = chunk_fn(val, *args)
    return StatsBundle(out)
