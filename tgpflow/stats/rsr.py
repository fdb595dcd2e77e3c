"""Per-iteration statistics of the root-Sobolev fit (docs/mathematics.md, "Root-Sobolev density"): one map-reduce per
iteration.

For the current w, per chunk: ``g = Σ_i φ(x_i)/f(x_i)`` (T), ``N``, ``Σ log f(x_i)²`` and the count
of rows with ``f(x_i) ≤ 0`` (sign changes of the RFF SDO model, reported). Also the held-out
Hyvärinen sums ``Σ 2Δf/f`` (docs/mathematics.md, "Where the papers differ", item D6). A value: ``+``. float64
everywhere: the sums of log f² and 1/f over millions of rows, with f near 0 at the edges, leave no room for float32.

NumPy chunks go through the fused compiled row loop of :mod:`tgpflow.stats.rsr_kernel` (no
T × rows intermediate); chunks whose angles could leave the kernel's exact range reduction use
the blocked NumPy path below, which is also the reference the tests compare against.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from tgpflow.core.memory import DEFAULT_BLOCK_BYTES, F64, MemoryCost, declare, plan_blocks, task_budget
from tgpflow.core.summable import Summable
from tgpflow.features.rff import RandomFourierFeatures

__all__ = ["RSRIterStats", "rsr_chunk_stats", "rsr_memory"]

#: The blocked path keeps a block's cos within ~4 MiB, so that its three O(T) passes stay in cache.
CACHE_BLOCK_BYTES = 2**22


def rsr_memory(features: RandomFourierFeatures) -> MemoryCost:
    """The bytes of one :func:`rsr_chunk_stats` task (see :mod:`tgpflow.core.memory`).

    Fixed: the T-vectors (g, the weights, f and Δf coefficients). Per chunk row: the shifted,
    contiguous rows and their absolute values (2·d). Per block row of the blocked path: the
    angles, sin and cos (3·T) and f, Δf, 1/f, log f² (about 6); the fused compiled loop needs
    no block.
    """
    T, d = features.n_features, features.n_dims
    return MemoryCost(f"RSR iteration sums (T={T}, d={d})", F64 * (10 * T + 2 * T * d), F64 * (3 * T + 6),
                      F64 * 2 * d, "use fewer features (n_features)", F64 * T)


@dataclasses.dataclass(frozen=True, eq=False)
class RSRIterStats(Summable):
    """Sums of one RSR iteration over a set of rows."""

    g: np.ndarray
    n: int
    sum_log_f2: float
    n_nonpositive: int
    sum_hyvarinen: float

    def __add__(self, other: RSRIterStats) -> RSRIterStats:
        return RSRIterStats(self.g + other.g, self.n + other.n, self.sum_log_f2 + other.sum_log_f2,
                            self.n_nonpositive + other.n_nonpositive, self.sum_hyvarinen + other.sum_hyvarinen)



def rsr_chunk_stats(x: np.ndarray, features: RandomFourierFeatures, w: np.ndarray,
                    block_bytes: int = DEFAULT_BLOCK_BYTES, fused: bool = True) -> RSRIterStats:
    """The iteration sums of one chunk: the fused row loop, or (``fused=False`` or angles out of
    the kernel's range) row blocks of features followed by two GEMVs."""
    from tgpflow.stats.rsr_kernel import rsr_rows

    x = np.asarray(x, dtype=np.float64)
    T = features.n_features
    lap_w = -w * np.einsum("td,td->t", features.Z, features.Z) / features.gamma**2  # Δφ_t = −‖Z_t/γ‖² φ_t
    xs_all = np.ascontiguousarray(x - features.shift)
    scale = np.sqrt(2.0 / T)
    if fused and features.in_kernel_range(xs_all):
        g = np.zeros(T)
        sums = np.zeros(3)
        rsr_rows(xs_all, np.ascontiguousarray(features.frequencies.T), np.asarray(features.phase, dtype=np.float64),
                 scale * w, scale * lap_w, g, sums)
        return RSRIterStats(scale * g, int(x.shape[0]), float(sums[0]), int(sums[1]), float(sums[2]))
    g = np.zeros(T)
    sum_log = 0.0
    nonpos = 0
    hyv = 0.0
    # blocks of ~4 MiB of cos: the three O(T) passes over a block then stay in cache
    plan = plan_blocks(rsr_memory(features), block_bytes, chunk_rows=x.shape[0], budget=task_budget()[0])
    rows = max(1, min(plan.rows, CACHE_BLOCK_BYTES // (8 * T)))
    both = np.stack([scale * w, scale * lap_w])  # f and Δf in one GEMM
    for start in range(0, x.shape[0], rows):
        _, cos = features.sincos(xs_all[start:start + rows])  # (T, rows); φ = scale·cos
        f, lap = both @ cos
        nonpos += int(np.count_nonzero(f <= 0))
        with np.errstate(divide="ignore"):
            inv = 1.0 / f
            sum_log += float(np.sum(np.log(f * f)))
            g += scale * (cos @ inv)  # Σ φ/f as one GEMV: no (rows × T) temporary
            hyv += float(2.0 * lap @ inv)
    return RSRIterStats(g, int(x.shape[0]), sum_log, nonpos, hyv)


def _rsr_cost(n_dims: int, features: RandomFourierFeatures, w: np.ndarray, block_bytes: int = DEFAULT_BLOCK_BYTES,
              fused: bool = True) -> tuple[MemoryCost, int]:
    return rsr_memory(features), block_bytes


declare(rsr_chunk_stats, _rsr_cost)
