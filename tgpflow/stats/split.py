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

import dataclasses
import hashlib
from collections.abc import Callable, Iterator, Mapping
from typing import Any, ClassVar

import numpy as np

from tgpflow.core.memory import F64, MemoryCost, cost_of, declare, sequential
from tgpflow.core.summable import AdditiveStats, Summable
from tgpflow.stats.projections import ProjectionCounts, ProjectionGrid, projection_counts

__all__ = ["validation_mask", "fold_index", "StatsBundle", "HeldOut", "split_chunk_stats", "SPLIT_SALT"]

#: Salt of the hashed train/validation split, shared by every estimator (fixed: the same rows
#: are held out on every refit, and by every model of a pipeline).
SPLIT_SALT = 0x7467_7066_6C6F_77  # "tgpflow"

_M1, _M2, _GOLD = np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB), np.uint64(0x9E3779B97F4A7C15)


def _splitmix64(x: np.ndarray) -> np.ndarray:
    z = x + _GOLD  # uint64 arithmetic wraps, as splitmix64 requires
    z = (z ^ (z >> np.uint64(30))) * _M1
    z = (z ^ (z >> np.uint64(27))) * _M2
    return z ^ (z >> np.uint64(31))


def _uniform(keys: np.ndarray, salt: int) -> np.ndarray:
    """u(key) in [0, 1): the fixed hash of each row's key."""
    with np.errstate(over="ignore"):
        h = _splitmix64(np.asarray(keys, dtype=np.int64).view(np.uint64) ^ np.uint64(salt & (2**64 - 1)))
    return (h >> np.uint64(11)).astype(np.float64) * 2.0**-53


def validation_mask(keys: np.ndarray, fraction: float, salt: int = 0) -> np.ndarray:
    """True for the rows held out for validation (a fixed hash of each row's key)."""
    if not 0.0 < fraction < 1.0:
        raise ValueError(f"validation_fraction must be in (0, 1); got {fraction}")
    return _uniform(keys, salt) < fraction


def fold_index(keys: np.ndarray, n_folds: int, salt: int = 0) -> np.ndarray:
    """The cross-validation fold (0 … n_folds − 1) of each row, from the same fixed hash."""
    if n_folds < 2:
        raise ValueError(f"n_folds must be at least 2; got {n_folds}")
    return np.minimum((_uniform(keys, salt) * n_folds).astype(np.int64), n_folds - 1)


class StatsBundle(Summable, Mapping):
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


    def __sub__(self, other: Any) -> StatsBundle:
        if not isinstance(other, StatsBundle):
            return NotImplemented
        self._check(other)
        return StatsBundle({k: v - other[k] for k, v in self._parts.items()})

    def scaled(self, factor: float) -> StatsBundle:
        """Every part's row weights times ``factor`` (forgetting)."""
        return StatsBundle({k: v.scaled(factor) for k, v in self._parts.items()})

    @property
    def n(self) -> int | float:
        """Rows in the bundle: the train and validation parts of one variant."""
        first = next(iter(self._parts))[1]
        return sum(v.n for k, v in self._parts.items() if k[1] == first)

    @property
    def fingerprint(self) -> str:
        """A hash of the parts' keys and feature fingerprints."""
        h = hashlib.sha256(b"tgpflow.StatsBundle.v1")
        for key in sorted(self._parts, key=repr):
            h.update(f"{key!r}|{self._parts[key].fingerprint}".encode())
        return h.hexdigest()

    # -- storage (tgpflow.pipeline.store) -----------------------------------------------
    def to_arrays(self) -> dict[str, np.ndarray]:
        """Part ``i`` (in :meth:`artifact_meta` order) as arrays named ``p<i>.<name>``."""
        return {f"p{i}.{name}": a for i, key in enumerate(self._order())
                for name, a in self._parts[key].to_arrays().items()}

    def artifact_meta(self) -> dict[str, Any]:
        """JSON metadata: the bundle's fingerprint and, for each part, its key, statistics kind, feature
        fingerprint and the scalars of the draws it carries (``draws``, absent without)."""
        parts = []
        for key in self._order():
            part = self._parts[key]
            entry = {"key": list(key), "kind": type(part).__name__, "fingerprint": part.fingerprint}
            if isinstance(part, HeldOut):
                entry.update(stats_kind=type(part.stats).__name__, grid=part.projections.fingerprint)
            draws = part.draw_meta()
            if draws:
                entry["draws"] = draws
            parts.append(entry)
        return {"fingerprint": self.fingerprint, "parts": parts}

    @classmethod
    def from_arrays(cls, meta: dict[str, Any], arrays: dict[str, np.ndarray], kinds: Mapping[str, Any]) -> StatsBundle:
        parts = {}
        for i, part in enumerate(meta["parts"]):
            prefix = f"p{i}."
            own = {k[len(prefix):]: v for k, v in arrays.items() if k.startswith(prefix)}
            if part["kind"] == "HeldOut":
                value = HeldOut.from_arrays(part["fingerprint"], own, kinds[part["stats_kind"]], part["grid"],
                                            part.get("draws"))
            else:
                value = kinds[part["kind"]].from_arrays(part["fingerprint"], own, part.get("draws"))
            parts[tuple(part["key"])] = value
        return cls(parts)

    def _order(self) -> list[Any]:
        return sorted(self._parts, key=repr)


@dataclasses.dataclass(frozen=True, eq=False)
class HeldOut(AdditiveStats):
    """The validation part of a split pass: the model's statistics of the held-out rows and their
    projection counts (the data side of a held-out sliced KS distance, :mod:`tgpflow.stats.projections`).

    +, −, ``scaled`` and ``to_arrays`` (``stats.*``, ``projections.*``) act part by part
    (:class:`~tgpflow.core.summable.AdditiveStats`); each part checks its own draw.
    """

    CARRIED: ClassVar[tuple[str, ...]] = ()

    stats: Any
    projections: ProjectionCounts

    @property
    def n(self) -> int | float:
        return self.stats.n

    @property
    def fingerprint(self) -> str:
        return self.stats.fingerprint

    @classmethod
    def from_arrays(cls, fingerprint: str, arrays: dict[str, np.ndarray], stats_kind: Any,  # type: ignore[override]
                    grid_fingerprint: str, draws: Mapping[str, Any] | None = None) -> HeldOut:
        """The value of :meth:`to_arrays`: the kinds of the parts are not fields' types but the bundle's metadata
        (``draws``: the parts' draw scalars, :meth:`~tgpflow.core.summable.AdditiveStats.draw_meta`)."""
        def part(prefix: str, items: Mapping[str, Any]) -> dict[str, Any]:
            return {k[len(prefix):]: v for k, v in items.items() if k.startswith(prefix)}

        draws = draws or {}
        return cls(stats_kind.from_arrays(fingerprint, part("stats.", arrays), part("stats.", draws)),
                   ProjectionCounts.from_arrays(grid_fingerprint, part("projections.", arrays),
                                                part("projections.", draws)))


def split_chunk_stats(block: np.ndarray, keys: np.ndarray, fraction: float, salt: int,
                      chunk_fn: Callable[..., Any], variants: Mapping[Any, tuple[Any, ...]],
                      val_variants: Mapping[Any, tuple[Any, ...]] | None = None,
                      grid: ProjectionGrid | None = None) -> StatsBundle:
    """``chunk_fn(rows, *args)`` on the train and validation rows of a chunk, for each variant.

    ``variants`` maps a name (e.g. a bandwidth index) to the extra arguments of ``chunk_fn``;
    ``val_variants`` (optional) gives other arguments for the validation rows (e.g. to also
    accumulate a sum only held-out scoring needs). With a projection ``grid`` each validation
    part is a :class:`HeldOut` that also counts the rows' projections. The result holds
    ``("train", name)`` and ``("val", name)``.
    """
    held = validation_mask(keys, fraction, salt)
    train, val = block[~held], block[held]
    val_variants = variants if val_variants is None else val_variants
    counts = None if grid is None else projection_counts(val, grid)
    out = {}
    for name, args in variants.items():
        out[("train", name)] = chunk_fn(train, *args)
        val_stats = chunk_fn(val, *val_variants[name])
        out[("val", name)] = val_stats if counts is None else HeldOut(val_stats, counts)
    return StatsBundle(out)


def _split_cost(n_dims: int, fraction: float, salt: int, chunk_fn: Callable[..., Any],
                variants: Mapping[Any, tuple[Any, ...]], val_variants: Mapping[Any, tuple[Any, ...]] | None = None,
                grid: ProjectionGrid | None = None) -> tuple[MemoryCost, int] | None:
    """The parts run one after the other, every result kept; the train and validation copies of
    the chunk (d per chunk row) and the hash mask come on top."""
    val_variants = variants if val_variants is None else val_variants
    parts = [cost_of(chunk_fn, args, n_dims) for args in (*variants.values(), *val_variants.values())]
    if not parts or any(p is None for p in parts):
        return None
    cost = sequential([p[0] for p in parts], f"{parts[0][0].what} × {len(parts)} held-out parts",
                      per_chunk_row=F64 * (n_dims + 3))
    return cost, min(p[1] for p in parts)


declare(split_chunk_stats, _split_cost)
