"""The fused, compiled row loop of one root-Sobolev iteration (docs/mathematics.md, "Root-Sobolev density"), float64
throughout.

Why this exists: with d = 10 and T = 2000 the iteration is bound by the T cosines per row,
not by the d × T angle GEMM. The unfused NumPy path (GEMM → cos block → two GEMVs) writes and
re-reads a large T × rows block three times and evaluates sin as well as cos. Here the angles
of a tile of rows come from one BLAS GEMM into a reused tile that fits in L2; each row of the
tile is then turned into cosines in place (in L1), reduced into f(x) and Δf(x), and added
into g as ``c / f`` — all inside one compiled, GIL-free loop, so Dask threads run chunks in
parallel and nothing of size T × rows is ever allocated. Measured (benchmarks/rsr_iteration.py)
the loop runs within ~20 % of the floor "angle GEMM + T cosines", of which the cosines are
the larger half at d = 10.

Cosine: reduction by π (``x = qπ + r``, |r| ≤ π/2, Cody–Waite with fdlibm's three-part
π, exact for |q| < 2²⁰), then ``cos x = (−1)^q cos r`` with the Taylor polynomial of
degree 22 (truncation error < 1e-19 on [−π/2, π/2]); one polynomial, no quadrant select.
The sums over t (f, Δf) live in a separate function compiled with ``reassoc`` so LLVM may
vectorise the reductions; the range reduction is compiled without it, because its
exactness depends on the evaluation order.
"""

from __future__ import annotations

import numpy as np
from numba import njit

__all__ = ["rsr_rows", "cos_shifted"]

_INV_PI = 0.3183098861837907
# 2 × fdlibm's 33 + 33 + 53-bit split of π/2 (scaling by 2 is exact): q·_PI_1, q·_PI_2 exact for |q| < 2**20
_PI_1 = 2 * 1.57079632673412561417e00
_PI_2 = 2 * 6.07710050630396597660e-11
_PI_3 = 2 * 2.02226624871116645580e-21


@njit(inline="always", fastmath={"contract"})
def _cos(x):  # pragma: no cover - compiled
    q = np.rint(x * _INV_PI)
    r = ((x - q * _PI_1) - q * _PI_2) - q * _PI_3
    r2 = r * r
    c = 1.0 + r2 * (-0.5 + r2 * (4.1666666666666664e-02 + r2 * (-1.3888888888888889e-03
        + r2 * (2.4801587301587302e-05 + r2 * (-2.7557319223985888e-07 + r2 * (2.0876756987868099e-09
        + r2 * (-1.1470745597729725e-11 + r2 * (4.7794773323873853e-14 + r2 * (-1.5619206968586225e-16
        + r2 * (4.1103176233121648e-19 + r2 * -8.8967913924505740e-22))))))))))
    return c * (1.0 - 2.0 * (np.int64(q) & 1))


@njit(cache=True, nogil=True, boundscheck=False, fastmath={"contract"})
def _cos_block(angle, out):  # pragma: no cover - compiled
    for i in range(angle.shape[0]):
        out[i] = _cos(angle[i])


# not inline="always": Numba-IR inlining would compile the body with the caller's flags (no reassoc)
@njit(nogil=True, boundscheck=False, fastmath={"contract", "reassoc"})
def _dot2(a, b, c):  # pragma: no cover - compiled
    s = 0.0
    u = 0.0
    for t in range(c.shape[0]):
        s += a[t] * c[t]
        u += b[t] * c[t]
    return s, u


@njit(cache=True, nogil=True, boundscheck=False, error_model="numpy", fastmath={"contract"})
def _rsr_rows(x, wt, phase, w, lap_w, g, sums, tile):  # pragma: no cover - compiled
    n = x.shape[0]
    T = phase.shape[0]
    buf = np.empty((tile, T))
    sum_log = 0.0
    nonpos = 0
    hyv = 0.0
    for s in range(0, n, tile):
        m = min(tile, n - s)
        block = buf[:m]
        np.dot(x[s:s + m], wt, block)  # angles of `tile` rows: one BLAS GEMM into a cache-resident tile
        for r in range(m):
            c = block[r]
            for t in range(T):
                c[t] = _cos(c[t] + phase[t])
            f, lap = _dot2(w, lap_w, c)
            if f <= 0.0:
                nonpos += 1
            inv = 1.0 / f
            sum_log += np.log(f * f)
            hyv += 2.0 * lap * inv
            for t in range(T):
                g[t] += c[t] * inv
    sums[0] += sum_log
    sums[1] += nonpos
    sums[2] += hyv


#: Bytes of one angle tile: 32 rows at T = 2000 (512 KiB) measured fastest on a 1 MiB-L2 core.
TILE_BYTES = 2**19


def rsr_rows(x: np.ndarray, wt: np.ndarray, phase: np.ndarray, w: np.ndarray, lap_w: np.ndarray,
             g: np.ndarray, sums: np.ndarray) -> None:
    """Add one iteration's row sums of ``x`` into ``g`` (T) and ``sums`` = [Σ log f², #f ≤ 0, Σ 2Δf/f].

    ``x`` (n, d) C-contiguous rows minus the feature shift; ``wt`` (d, T) the frequencies
    transposed; ``phase`` the shifted phase; ``w``, ``lap_w`` the coefficients of f and Δf
    on the raw cosines (scale included); ``g`` receives ``Σ cos/f`` (the caller scales it).
    |angle| must stay below ``features.sincos.MAX_ANGLE`` (the caller checks per chunk).
    """
    tile = max(1, TILE_BYTES // (8 * phase.shape[0]))
    _rsr_rows(x, wt, phase, w, lap_w, g, sums, tile)


def cos_shifted(angle: np.ndarray) -> np.ndarray:
    """The kernel's cosine of a 1-d float64 array (for tests against ``numpy.cos``)."""
    angle = np.ascontiguousarray(angle, dtype=np.float64)
    out = np.empty_like(angle)
    _cos_block(angle, out)
    return out


@njit(cache=True, nogil=True, boundscheck=False, fastmath={"contract"})
def _angles_and_cos(x, wt, phase, tile):  # pragma: no cover - compiled
    n = x.shape[0]
    T = phase.shape[0]
    buf = np.empty((tile, T))
    for s in range(0, n, tile):
        m = min(tile, n - s)
        block = buf[:m]
        np.dot(x[s:s + m], wt, block)
        for r in range(m):
            c = block[r]
            for t in range(T):
                c[t] = _cos(c[t] + phase[t])
    return buf[0, 0]


@njit(cache=True, nogil=True, boundscheck=False)
def _angles(x, wt, tile):  # pragma: no cover - compiled
    n = x.shape[0]
    buf = np.empty((tile, wt.shape[1]))
    for s in range(0, n, tile):
        m = min(tile, n - s)
        np.dot(x[s:s + m], wt, buf[:m])
    return buf[0, 0]


def floor_kernels(x: np.ndarray, wt: np.ndarray, phase: np.ndarray) -> tuple[float, float]:
    """Seconds for the same tiles' angle GEMMs alone, and angle GEMMs plus cosines (benchmark references)."""
    import time

    tile = max(1, TILE_BYTES // (8 * phase.shape[0]))
    t = time.perf_counter()
    _angles(x, wt, tile)
    gemm = time.perf_counter() - t
    t = time.perf_counter()
    _angles_and_cos(x, wt, phase, tile)
    return gemm, time.perf_counter() - t
