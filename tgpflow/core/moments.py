"""First and second moments as a mergeable value (docs/mathematics.md, "Features and the pilot pass").

Stored centred — ``n``, ``mean`` and ``m2 = Σ (x − mean)(x − mean)ᵀ`` — and merged with
Chan et al.'s pairwise formula, the way ``dask.array.reductions.moment_combine`` does, so
that data with mean 10⁶ and unit spread lose nothing to cancellation. Within a chunk the
mean is found first and the centred sum is one BLAS call (float64 throughout).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from tgpflow.core.backend import namespace, to_numpy
from tgpflow.core.memory import F64, MemoryCost, declare
from tgpflow.core.summable import Summable, count_array, count_value

__all__ = ["Moments", "moments_memory"]


@dataclasses.dataclass(frozen=True, eq=False)
class Moments(Summable):
    """Row count, mean and centred scatter matrix of a set of rows (float64).

    ``n`` is an int, or a float for weighted rows (a forgetting factor: :meth:`scaled`).
    """

    n: int | float
    mean: np.ndarray
    m2: np.ndarray

    @classmethod
    def zero(cls, d: int) -> Moments:
        return cls(0, np.zeros(d), np.zeros((d, d)))

    @classmethod
    def from_rows(cls, x: Any) -> Moments:
        """Moments of an (n, d) block in any array namespace; result on the host."""
        xp = namespace(x)
        n = int(x.shape[0])
        d = int(x.shape[1])
        if n == 0:
            return cls.zero(d)
        mean = xp.sum(x, axis=0) / n
        xc = x - mean
        m2 = xp.matrix_transpose(xc) @ xc
        return cls(n, to_numpy(mean).astype(np.float64), to_numpy(m2).astype(np.float64))

    @property
    def d(self) -> int:
        return int(self.mean.shape[0])

    @property
    def covariance(self) -> np.ndarray:
        """Population covariance Σ = m2 / n (docs/mathematics.md, "Features and the pilot pass")."""
        if self.n < 1:
            raise ValueError("no rows: the covariance is undefined")
        return self.m2 / self.n

    def __add__(self, other: Moments) -> Moments:
        if not isinstance(other, Moments):
            return NotImplemented
        if other.d != self.d:
            raise ValueError(f"cannot merge moments of d={self.d} and d={other.d}")
        if other.n == 0:
            return self
        if self.n == 0:
            return other
        n = self.n + other.n
        delta = other.mean - self.mean
        mean = self.mean + delta * (other.n / n)
        m2 = self.m2 + other.m2 + np.outer(delta, delta) * (self.n * other.n / n)
        return Moments(n, mean, m2)


    def __sub__(self, other: Moments) -> Moments:
        """The moments of the rows of ``self`` that are not in ``other`` (reverse Chan)."""
        if not isinstance(other, Moments):
            return NotImplemented
        if other.n > self.n * (1 + 1e-12):
            raise ValueError(f"cannot remove {other.n} rows from {self.n}")
        if other.n == 0:
            return self
        n = self.n - other.n
        if n <= 1e-9 * self.n:
            return Moments.zero(self.d)
        mean = (self.mean * self.n - other.mean * other.n) / n
        delta = other.mean - mean
        m2 = self.m2 - other.m2 - np.outer(delta, delta) * (n * other.n / self.n)
        return Moments(n, mean, m2)

    def scaled(self, factor: float) -> Moments:
        """Every row's weight times ``factor`` (n and m2 scale; the mean does not)."""
        if factor == 1.0:
            return self
        return Moments(self.n * factor, self.mean, self.m2 * factor)

    def to_arrays(self) -> dict[str, np.ndarray]:
        return {"n": count_array(self.n), "mean": self.mean, "m2": self.m2}

    @classmethod
    def from_arrays(cls, arrays: dict[str, np.ndarray]) -> Moments:
        mean, m2 = np.asarray(arrays["mean"], np.float64), np.asarray(arrays["m2"], np.float64)
        return cls(count_value(arrays["n"]), mean, m2)


def moments_memory(n_dims: int) -> MemoryCost:
    """The bytes of one :meth:`Moments.from_rows` task: the centred copy of the chunk (d per chunk
    row) and the d-vectors and d×d sums; no blocks (see :mod:`tgpflow.core.memory`)."""
    d = int(n_dims)
    return MemoryCost(f"moments (d={d})", F64 * (3 * d * d + 3 * d), 0, F64 * d, "use fewer columns",
                      F64 * (d * d + d))


def _moments_cost(n_dims: int) -> tuple[MemoryCost, int]:
    return moments_memory(n_dims), 0


declare(Moments.from_rows, _moments_cost)
