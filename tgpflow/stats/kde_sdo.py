"""Statistics of the KDE-SDO baseline, and of the root-Sobolev start: ``Σ φ(x_i)`` and N (MATH.md §8).

KDE-SDO is ``p ∝ φ(x)ᵀ Σ_i φ(x_i)/N`` on SDO random features, so ``g = Σ_i φ(x_i)`` (T) and the row
count N are its sufficient statistics: sums over rows, hence a value with ``+`` (``sum(parts)``),
``−`` (a partition removed), :meth:`KDESDOStats.scaled` (forgetting) and ``to_arrays``/``from_arrays``,
carrying the fingerprint of the features they were computed with. The same sums give the
root-Sobolev iteration its non-negative start ``w₀ ∝ Σφ(x_i)/N``. Rows in blocks sized by the
memory planner; float64.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import numpy as np

from tgpflow.errors import FeaturesMismatchError
from tgpflow.features.rff import RandomFourierFeatures
from tgpflow.io.artifact import read_artifact, write_artifact
from tgpflow.core.memory import F64, MemoryCost, declare, plan_blocks, task_budget
from tgpflow.core.summable import Summable
from tgpflow.core.memory import DEFAULT_BLOCK_BYTES

__all__ = ["KDESDOStats", "kde_sdo_chunk_stats", "kde_sdo_memory"]


def kde_sdo_memory(features: RandomFourierFeatures) -> MemoryCost:
    """The bytes of one :func:`kde_sdo_chunk_stats` task: fixed, the frequencies and their absolute
    values (2·T·d) and a few T-vectors; per block row, the angles, sin and cos (3·T) and the shifted
    row (d) with its absolute value (d)."""
    T, d = features.n_features, features.n_dims
    return MemoryCost(f"KDE-SDO sums (T={T}, d={d})", F64 * (2 * T * d + 4 * T), F64 * (3 * T + 2 * d), 0,
                      "use fewer features (n_features)", F64 * T)


@dataclasses.dataclass(frozen=True, eq=False)
class KDESDOStats(Summable):
    """``g = Σ φ(x_i)`` and ``n`` (an int, or a float for weighted rows) for the features ``fingerprint``."""

    fingerprint: str
    g: np.ndarray
    n: int | float

    @classmethod
    def zero(cls, features: RandomFourierFeatures) -> KDESDOStats:
        return cls(features.fingerprint, np.zeros(features.n_features), 0)

    def check_features(self, features: RandomFourierFeatures) -> None:
        """Raise unless these statistics were accumulated with ``features``."""
        if features.fingerprint != self.fingerprint:
            raise FeaturesMismatchError(
                f"the KDE-SDO statistics were accumulated with another feature draw (fingerprints "
                f"{self.fingerprint[:12]}… and {features.fingerprint[:12]}…); pass features=est.features_ "
                f"(or the draw the statistics were accumulated with) to fit_from_stats, or refit")

    def _combine(self, other: Any, sign: float) -> Any:
        if not isinstance(other, KDESDOStats):
            return NotImplemented
        if other.fingerprint != self.fingerprint:
            raise FeaturesMismatchError(f"cannot combine KDE-SDO statistics of different feature draws "
                                        f"({self.fingerprint[:12]}… and {other.fingerprint[:12]}…); accumulate "
                                        f"every part with the same features")
        if sign < 0 and other.n > self.n * (1 + 1e-12):
            raise ValueError(f"cannot remove {other.n} rows from {self.n}")
        return KDESDOStats(self.fingerprint, self.g + sign * other.g, self.n + (other.n if sign > 0 else -other.n))

    def __add__(self, other: Any) -> Any:
        return self._combine(other, 1.0)

    def __sub__(self, other: Any) -> Any:
        return self._combine(other, -1.0)

    def scaled(self, factor: float) -> KDESDOStats:
        """Every row's weight times ``factor`` (forgetting: both sums are linear in the weights)."""
        if factor == 1.0:
            return self
        return KDESDOStats(self.fingerprint, self.g * factor, self.n * factor)

    def to_arrays(self) -> dict[str, np.ndarray]:
        weighted = isinstance(self.n, float) and not float(self.n).is_integer()
        return {"g": self.g, "n": np.array(self.n, dtype=np.float64 if weighted else np.int64)}

    @classmethod
    def from_arrays(cls, fingerprint: str, arrays: dict[str, np.ndarray]) -> KDESDOStats:
        n = np.asarray(arrays["n"])
        return cls(fingerprint, np.asarray(arrays["g"], dtype=np.float64), float(n) if n.dtype.kind == "f" else int(n))

    def save(self, path: str | Path) -> Path:
        """Write atomically to a Zarr group or, for a ``.npz`` path, a NumPy archive (no pickle)."""
        return write_artifact(path, "KDESDOStats", self.to_arrays(), {"fingerprint": self.fingerprint})

    @classmethod
    def load(cls, path: str | Path) -> KDESDOStats:
        _, arrays, meta = read_artifact(path, expected_kinds=("KDESDOStats",))
        return cls.from_arrays(meta["fingerprint"], arrays)


def kde_sdo_chunk_stats(x: np.ndarray, features: RandomFourierFeatures,
                        block_bytes: int = DEFAULT_BLOCK_BYTES) -> KDESDOStats:
    """``Σ φ(x_i)`` and the row count of one chunk, in row blocks planned within ``block_bytes``."""
    x = np.asarray(x, dtype=np.float64)
    rows = plan_blocks(kde_sdo_memory(features), block_bytes, chunk_rows=x.shape[0], budget=task_budget()[0]).rows
    g = np.zeros(features.n_features)
    for start in range(0, x.shape[0], max(rows, 1)):
        g += features.transform(x[start:start + rows])[0].sum(axis=0)
    return KDESDOStats(features.fingerprint, g, int(x.shape[0]))


def _kde_sdo_cost(n_dims: int, features: RandomFourierFeatures,
                  block_bytes: int = DEFAULT_BLOCK_BYTES) -> tuple[MemoryCost, int]:
    return kde_sdo_memory(features), block_bytes


declare(kde_sdo_chunk_stats, _kde_sdo_cost)
