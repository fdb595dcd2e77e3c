"""Float64 sine and cosine of ``angle + phase`` for feature blocks, fast on the CPU.

Why this exists: a TGP statistics pass evaluates 2·S trigonometric functions per row and
one S×S SYRK per row. Measured on a 2-core x86-64 machine (AVX-512), NumPy's float64
``cos`` runs at ~75 M elements/s per core while OpenBLAS ``dsyrk`` at S = 1000 handles
~80 k rows/s, so NumPy trigonometry alone would cost as much as the product. The
branch-free kernel below (Cody–Waite reduction by π/2 with fdlibm's three-part π/2,
Taylor polynomials of degree 17/16 on [−π/4, π/4], quadrant selection without branches)
vectorises under LLVM and runs at ~1 G (sin, cos) pairs/s per core with a maximum
absolute error of ~2e-16 against ``numpy.sin``/``numpy.cos`` — float64 accuracy, so no
precision trade-off is needed on the CPU (tests/test_features.py checks the error).

The reduction is exact while ``|q| < 2**20`` (``|x| < 1.6e6``): callers pass angles
bounded by :data:`MAX_ANGLE` and fall back to NumPy beyond it (see ``rff``).
"""

from __future__ import annotations

import numpy as np
from numba import njit

__all__ = ["sincos_rows", "cos_sin_sums_rows", "cos_rows", "sin_sums_rows", "MAX_ANGLE"]

#: Largest |angle| for which the three-term Cody–Waite reduction is exact.
MAX_ANGLE = 1.0e6

_TWO_OVER_PI = 0.6366197723675814
# fdlibm __ieee754_rem_pio2: pi/2 split in 33 + 33 + 53 bits, so q * _PIO2_1 and
# q * _PIO2_2 are exact for |q| < 2**20.
_PIO2_1 = 1.57079632673412561417e00
_PIO2_2 = 6.07710050630396597660e-11
_PIO2_3 = 2.02226624871116645580e-21


# -- fused evaluation kernels --------------------------------------------------------------------------------
# Evaluating a fitted model needs sums over the features per row (θᵀφ, Zᵀ(θ ⊙ φ'), …), not the (S, n)
# blocks of the pass: forming the angles, sin and cos blocks in memory and multiplying them afterwards
# costs more in memory traffic than the trigonometry (measured: 3 S×n arrays of 22 MB per block of 2790
# rows). The kernels below form the angle of one feature for a short run of rows (L1-resident buffers),
# the same polynomials as above, and add the weighted values into the outputs at once.


#: Rows per tile of the fused kernels: the angle, sin and cos of one feature for a tile stay in L1.
TILE_ROWS = 256


@njit(cache=True, nogil=True, boundscheck=False, error_model="numpy", fastmath={"contract"}, inline="always")
def _angle_row(xt, W, s, abuf):  # pragma: no cover - compiled
    d, n = xt.shape
    w0 = W[s, 0]
    for i in range(n):
        abuf[i] = w0 * xt[0, i]
    for j in range(1, d):
        wj = W[s, j]
        for i in range(n):
            abuf[i] += wj * xt[j, i]


#: Taylor coefficients on [−π/4, π/4]: sin r = r + r·r²·P_sin(r²), cos r = 1 + r²·P_cos(r²) (degree 17/16).
_SIN = (-1.6666666666666666e-01, 8.3333333333333332e-03, -1.9841269841269841e-04, 2.7557319223985893e-06,
        -2.5052108385441720e-08, 1.6059043836821613e-10, -7.6471637318198164e-13, 2.8114572543455206e-15)
_COS = (-0.5, 4.1666666666666664e-02, -1.3888888888888889e-03, 2.4801587301587302e-05,
        -2.7557319223985888e-07, 2.0876756987868099e-09, -1.1470745597729725e-11, 4.7794773323873853e-14)


@njit(cache=True, nogil=True, boundscheck=False, error_model="numpy", fastmath={"contract"}, inline="always")
def _horner(z, c):  # pragma: no cover - compiled
    """c[0] + z·(c[1] + z·(… + z·c[7])) for an 8-tuple of constants (one FMA chain, innermost first)."""
    p = c[7]
    for k in range(6, -1, -1):
        p = c[k] + z * p
    return p


@njit(cache=True, nogil=True, boundscheck=False, error_model="numpy", fastmath={"contract"}, inline="always")
def _sincos_row(abuf, p, sbuf, cbuf):  # pragma: no cover - compiled
    for i in range(abuf.shape[0]):
        x = abuf[i] + p
        q = np.rint(x * _TWO_OVER_PI)
        r = ((x - q * _PIO2_1) - q * _PIO2_2) - q * _PIO2_3
        r2 = r * r
        sn = r + r * r2 * _horner(r2, _SIN)
        cs = 1.0 + r2 * _horner(r2, _COS)
        k = np.int64(q)
        swap = (k & 1) == 1
        s_sign = 1.0 - 2.0 * ((k >> 1) & 1)
        c_sign = 1.0 - 2.0 * (((k + 1) >> 1) & 1)
        sv = cs if swap else sn
        cv = sn if swap else cs
        sbuf[i] = s_sign * sv
        cbuf[i] = c_sign * cv


@njit(cache=True, nogil=True, boundscheck=False, error_model="numpy", fastmath={"contract"}, inline="always")
def _tile(xt, i0, m):  # pragma: no cover - compiled
    """Columns i0 … i0+m of xt as a contiguous (d, m) tile (strided views defeat vectorisation)."""
    out = np.empty((xt.shape[0], m))
    for j in range(xt.shape[0]):
        for i in range(m):
            out[j, i] = xt[j, i0 + i]
    return out


@njit(cache=True, nogil=True, boundscheck=False, error_model="numpy", fastmath={"contract"})
def _sums_tile(xtt, W, phase, C, B, tc, ts, abuf, sbuf, cbuf):  # pragma: no cover - compiled
    m = xtt.shape[1]
    tc[:, :m] = 0.0
    ts[:, :m] = 0.0
    for s in range(W.shape[0]):
        _angle_row(xtt, W, s, abuf)
        _sincos_row(abuf, phase[s], sbuf, cbuf)
        for k in range(C.shape[1]):
            ck = C[s, k]
            for i in range(m):
                tc[k, i] += ck * cbuf[i]
        for k in range(B.shape[1]):
            bk = B[s, k]
            for i in range(m):
                ts[k, i] += bk * sbuf[i]


@njit(cache=True, nogil=True, boundscheck=False, error_model="numpy", fastmath={"contract"})
def _cos_sin_sums_kernel(xt, W, phase, C, B, out_c, out_s):  # pragma: no cover - compiled
    n = xt.shape[1]
    for i0 in range(0, n, TILE_ROWS):
        m = min(TILE_ROWS, n - i0)
        xtt = _tile(xt, i0, m)
        tc = np.empty((C.shape[1], m))
        ts = np.empty((B.shape[1], m))
        _sums_tile(xtt, W, phase, C, B, tc, ts, np.empty(m), np.empty(m), np.empty(m))
        for k in range(C.shape[1]):
            for i in range(m):
                out_c[k, i0 + i] += tc[k, i]
        for k in range(B.shape[1]):
            for i in range(m):
                out_s[k, i0 + i] += ts[k, i]


@njit(cache=True, nogil=True, boundscheck=False, error_model="numpy", fastmath={"contract"})
def _cos_kernel(xt, W, phase, scale, out):  # pragma: no cover - compiled
    n = xt.shape[1]
    for i0 in range(0, n, TILE_ROWS):
        m = min(TILE_ROWS, n - i0)
        xtt = _tile(xt, i0, m)
        a, sb, cb = np.empty(m), np.empty(m), np.empty(m)
        for s in range(W.shape[0]):
            _angle_row(xtt, W, s, a)
            _sincos_row(a, phase[s], sb, cb)
            for i in range(m):
                out[s, i0 + i] = scale * cb[i]


def cos_sin_sums_rows(xt: np.ndarray, W: np.ndarray, phase: np.ndarray, C: np.ndarray, B: np.ndarray,
                      out_c: np.ndarray, out_s: np.ndarray) -> None:
    """Add ``cos(W xt + phase)ᵀ C`` to ``out_c`` (kc, n) and ``sin(…)ᵀ B`` to ``out_s`` (ks, n).

    ``xt`` is the (d, n) block of shifted rows, transposed and C-contiguous; ``W`` (S, d), ``C`` (S, kc),
    ``B`` (S, ks) (either may have no columns). Angles bounded by :data:`MAX_ANGLE`, as for :func:`sincos_rows`.
    """
    _cos_sin_sums_kernel(xt, W, phase, C, B, out_c, out_s)


def cos_rows(xt: np.ndarray, W: np.ndarray, phase: np.ndarray, scale: float, out: np.ndarray) -> None:
    """Write ``scale · cos(W xt + phase)`` into ``out`` (S, n), C-contiguous (conditions of :func:`cos_sin_sums_rows`)."""
    _cos_kernel(xt, W, phase, float(scale), out)


@njit(cache=True, nogil=True, boundscheck=False, error_model="numpy", fastmath={"contract"})
def _sincos_kernel(angle, phase, sin_out, cos_out):  # pragma: no cover - compiled
    for s in range(angle.shape[0]):
        _sincos_row(angle[s], phase[s], sin_out[s], cos_out[s])


def sincos_rows(angle: np.ndarray, phase: np.ndarray, sin_out: np.ndarray, cos_out: np.ndarray) -> None:
    """Write ``sin(angle + phase[:, None])`` and ``cos(…)`` into ``sin_out``, ``cos_out``.

    ``angle`` is (S, n) float64 C-contiguous, ``phase`` (S,); ``|angle + phase|`` must stay
    below :data:`MAX_ANGLE` (not checked here: the caller bounds it cheaply per block).
    """
    _sincos_kernel(angle, phase, sin_out, cos_out)


# -- the pass: sin block out, sums in ------------------------------------------------------------------------
# The statistics pass needs the sin block (S, rows) for its product and, of the cosines, only their row sums
# Σ cos (and the cos block itself only for the held-out Σφφᵀ). Formed apart, angles, sin and cos are three
# float64 (S, rows) blocks in memory (24·S bytes a row) and the sums read them again; here each feature's row
# of angles, sines and cosines stays in L1 and goes out once, with its sums. Measured at S = 1000, d = 7:
# float64, 2 threads, +3 % on the whole pass (its product is 85 % of it); under precision="mixed" (the block
# rounded to float32, and Σ sin and Σ sin (x − x₀)ᵀ summed here in float64 too, since the float32 product
# cannot give them), one thread: 6.6 µs a row against 8 µs apart, beside 12.4 µs for the float32 product.


@njit(cache=True, nogil=True, boundscheck=False, error_model="numpy", fastmath={"contract", "reassoc"})
def _row_out(sbuf, cbuf, xt, s, sin_out, cos_out, u, U, psi):  # pragma: no cover - compiled
    # reassoc for these sums only (vectorised partial sums); the sine and cosine, without it, are the
    # caller's: reassociation would break the Cody–Waite reduction. Stores round to the outputs' dtype.
    n = sbuf.shape[0]
    tc = 0.0
    for i in range(n):
        sin_out[s, i] = sbuf[i]
        tc += cbuf[i]
    psi[s] += tc
    if cos_out.shape[0]:
        for i in range(n):
            cos_out[s, i] = cbuf[i]
    if u.shape[0]:
        ts = 0.0
        for i in range(n):
            ts += sbuf[i]
        u[s] += ts
        for j in range(xt.shape[0]):
            t = 0.0
            for i in range(n):
                t += sbuf[i] * xt[j, i]
            U[s, j] += t


@njit(cache=True, nogil=True, boundscheck=False, error_model="numpy", fastmath={"contract"})
def _sin_sums_kernel(xt, W, phase, sin_out, cos_out, u, U, psi):  # pragma: no cover - compiled
    n = xt.shape[1]
    abuf, sbuf, cbuf = np.empty(n), np.empty(n), np.empty(n)
    for s in range(W.shape[0]):
        _angle_row(xt, W, s, abuf)
        _sincos_row(abuf, phase[s], sbuf, cbuf)
        _row_out(sbuf, cbuf, xt, s, sin_out, cos_out, u, U, psi)


def sin_sums_rows(xt: np.ndarray, W: np.ndarray, phase: np.ndarray, sin_out: np.ndarray, cos_out: np.ndarray | None,
                  psi: np.ndarray, u: np.ndarray | None = None, U: np.ndarray | None = None) -> None:
    """Write ``sin(W xt + phase)`` into ``sin_out`` (S, n) (and the cosine into ``cos_out``, unless None), rounded to
    their dtype (float64 or float32), and add in float64 the cosine's row sums to ``psi`` (S,) and, when given,
    the sine's row sums to ``u`` (S,) and ``sin · xtᵀ`` to ``U`` (S, d).

    ``xt`` is the (d, n) block of shifted rows, transposed and C-contiguous; ``W`` (S, d); sines and cosines are
    those of :func:`sincos_rows` (float64), with angles bounded by :data:`MAX_ANGLE` likewise.
    """
    empty = np.empty((0, 0), dtype=sin_out.dtype)
    _sin_sums_kernel(xt, W, phase, sin_out, empty if cos_out is None else cos_out,
                     np.empty(0) if u is None else u, np.empty((0, 0)) if U is None else U, psi)
