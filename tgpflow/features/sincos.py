"""Float64 sine and cosine of ``angle + phase`` for feature blocks, fast on the CPU.

Why this exists: a TGP statistics pass evaluates 2·S trigonometric functions per row and
one S×S SYRK per row. NumPy's float64 ``cos`` runs at ~75 M elements/s per core while
OpenBLAS ``dsyrk`` at S = 1000 handles ~40 k rows/s per core, so NumPy trigonometry alone
would cost as much as the product. The branch-free kernel below (Cody–Waite reduction by
π/2 with fdlibm's three-part π/2, fdlibm's minimax polynomials of degree 13/14 on
[−π/4, π/4], the quadrant's signs set by bit operations) vectorises under LLVM. Measured
on AVX2 (AMD EPYC, one core, S = 1000): the sin/cos alone at 0.71 G (sin, cos) pairs/s, and
the pass's kernel (7-column angles, sin/cos, the sin block's store, Σ cos) at 0.37 G, against
0.39 G and 0.22 G for the kernel it replaced (Taylor polynomials, and a float → int64
conversion for the quadrant, which AVX2 cannot vectorise). Its maximum absolute error
against ``numpy.sin``/``numpy.cos`` is 1.1e-16 for |x| ≤ 10 and 2.2e-16 up to 1e6 (the
reduced angle is kept without fdlibm's tail word) — float64 accuracy, so no precision
trade-off is needed on the CPU (tests/test_features.py checks the error).

The reduction is exact while ``|q| < 2**20`` (``|x| < 1.6e6``): callers pass angles
bounded by :data:`MAX_ANGLE` and fall back to NumPy beyond it (see ``rff``).
"""

from __future__ import annotations

import numpy as np
from numba import njit, types
from numba.extending import intrinsic

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
    # Up to four columns per sweep of abuf: each sweep is a load and a store of the row, so one column per
    # sweep made the angles load/store-bound (measured d = 7, 6 543 rows: 7.8 ms a block against 5.4).
    # The terms' order is unchanged, ((w₀x₀ + w₁x₁) + w₂x₂) + …: the same bits for odd d; for even d LLVM may
    # fuse the first pair the other way round (w₀x₀ into the FMA), a one-ulp difference in some angles.
    d, n = xt.shape
    w0 = W[s, 0]
    if d % 2:
        for i in range(n):
            abuf[i] = w0 * xt[0, i]
        j = 1
    else:
        w1 = W[s, 1]
        for i in range(n):
            abuf[i] = w0 * xt[0, i] + w1 * xt[1, i]
        j = 2
    while j + 3 < d:
        w0, w1, w2, w3 = W[s, j], W[s, j + 1], W[s, j + 2], W[s, j + 3]
        for i in range(n):
            abuf[i] = abuf[i] + w0 * xt[j, i] + w1 * xt[j + 1, i] + w2 * xt[j + 2, i] + w3 * xt[j + 3, i]
        j += 4
    if j < d:  # d − j is 0 or 2 here
        w0, w1 = W[s, j], W[s, j + 1]
        for i in range(n):
            abuf[i] = abuf[i] + w0 * xt[j, i] + w1 * xt[j + 1, i]


@intrinsic
def _as_int(typingctx, x):  # pragma: no cover - compiled
    """The bits of a float64 as an int64 (a free register move; vectorises)."""
    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], context.get_value_type(types.int64))
    return types.int64(types.float64), codegen


@intrinsic
def _as_float(typingctx, k):  # pragma: no cover - compiled
    """The float64 whose bits are an int64's."""
    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], context.get_value_type(types.float64))
    return types.float64(types.int64), codegen


#: x·(2/π) + 1.5·2⁵² rounds x·(2/π) to the nearest integer q, held in two's complement in the low bits of the
#: sum's mantissa (|q| < 2⁵¹): q's quadrant bits without a float → int64 conversion, which AVX2 lacks.
_ROUND_MAGIC = 6755399441055744.0
# fdlibm's k_sin.c / k_cos.c minimax polynomials on [−π/4, π/4]: sin r = r + r·r²·P(r²) with
# |sin r / r − (1 + r²P)| ≤ 2⁻⁵⁸, cos r = 1 − r²/2 + r⁴·Q(r²) with |error| ≤ 2⁻⁵⁸ (degree 13/14: three
# fewer terms than the Taylor series of the same accuracy).
_S1, _S2, _S3 = -1.66666666666666324348e-01, 8.33333333332248946124e-03, -1.98412698298579493134e-04
_S4, _S5, _S6 = 2.75573137070700676789e-06, -2.50507602534068634195e-08, 1.58969099521155010221e-10
_C1, _C2, _C3 = 4.16666666666666019037e-02, -1.38888888888741095749e-03, 2.48015872894767294178e-05
_C4, _C5, _C6 = -2.75573143513906633035e-07, 2.08757232129817482790e-09, -1.13596475577881948265e-11

#: The kernels' constants, passed to them as an array (``K``), not written as literals: with literals, the
#: code LLVM emits under Numba rebuilt every constant inside the loop (a 64-bit immediate move and a
#: broadcast each: 39 of the 83 instructions per 4 values); read once from an argument they are
#: loop-invariant registers or stack operands (49 instructions; measured 1.42× the sin/cos rate on AVX2).
_KERNEL_CONSTANTS = np.array([_TWO_OVER_PI, _ROUND_MAGIC, _PIO2_1, _PIO2_2, _PIO2_3,
                              _S1, _S2, _S3, _S4, _S5, _S6, 1.0, -0.5, _C1, _C2, _C3, _C4, _C5, _C6])
_KERNEL_CONSTANTS.flags.writeable = False


@njit(cache=True, nogil=True, boundscheck=False, error_model="numpy", fastmath={"contract"}, inline="always")
def _constants(K):  # pragma: no cover - compiled
    """:data:`_KERNEL_CONSTANTS` as a tuple of runtime values, read once per kernel call."""
    return (K[0], K[1], K[2], K[3], K[4], K[5], K[6], K[7], K[8], K[9], K[10], K[11], K[12], K[13], K[14],
            K[15], K[16], K[17], K[18])


@njit(cache=True, nogil=True, boundscheck=False, error_model="numpy", fastmath={"contract"}, inline="always")
def _sincos1(x, c):  # pragma: no cover - compiled
    """(sin x, cos x) for |x| < :data:`MAX_ANGLE`, ``c`` from :func:`_constants`; branch-free, so that the
    loops calling it vectorise."""
    t = x * c[0] + c[1]
    q = t - c[1]
    k = _as_int(t)  # ≡ q (mod 4) in its low bits
    r = ((x - q * c[2]) - q * c[3]) - q * c[4]
    z = r * r
    sn = r + r * z * (c[5] + z * (c[6] + z * (c[7] + z * (c[8] + z * (c[9] + z * c[10])))))
    cs = c[11] + z * (c[12] + z * (c[13] + z * (c[14] + z * (c[15] + z * (c[16] + z * (c[17] + z * c[18]))))))
    # x = r + qπ/2: sin x = (−1)^⌊q/2⌋ (cos r if q odd else sin r), cos x = (−1)^⌊(q+1)/2⌋ (sin r if q odd
    # else cos r). Bit 0 of q on the sign bit selects (a blend on it); bit 1, and bit 1 of q + 1 (= bit 1 ⊕
    # bit 0), on the sign bit flip the signs.
    odd = k << 63
    sv = cs if odd < 0 else sn
    cv = sn if odd < 0 else cs
    flip = (k >> 1) << 63
    return _as_float(_as_int(sv) ^ flip), _as_float(_as_int(cv) ^ (flip ^ odd))


@njit(cache=True, nogil=True, boundscheck=False, error_model="numpy", fastmath={"contract"}, inline="always")
def _sincos_row(abuf, p, sbuf, cbuf, c):  # pragma: no cover - compiled
    for i in range(abuf.shape[0]):
        sbuf[i], cbuf[i] = _sincos1(abuf[i] + p, c)


@njit(cache=True, nogil=True, boundscheck=False, error_model="numpy", fastmath={"contract"}, inline="always")
def _tile(xt, i0, m):  # pragma: no cover - compiled
    """Columns i0 … i0+m of xt as a contiguous (d, m) tile (strided views defeat vectorisation)."""
    out = np.empty((xt.shape[0], m))
    for j in range(xt.shape[0]):
        for i in range(m):
            out[j, i] = xt[j, i0 + i]
    return out


@njit(cache=True, nogil=True, boundscheck=False, error_model="numpy", fastmath={"contract"})
def _sums_tile(xtt, W, phase, C, B, tc, ts, abuf, sbuf, cbuf, c):  # pragma: no cover - compiled
    m = xtt.shape[1]
    tc[:, :m] = 0.0
    ts[:, :m] = 0.0
    for s in range(W.shape[0]):
        _angle_row(xtt, W, s, abuf)
        _sincos_row(abuf, phase[s], sbuf, cbuf, c)
        for k in range(C.shape[1]):
            ck = C[s, k]
            for i in range(m):
                tc[k, i] += ck * cbuf[i]
        for k in range(B.shape[1]):
            bk = B[s, k]
            for i in range(m):
                ts[k, i] += bk * sbuf[i]


@njit(cache=True, nogil=True, boundscheck=False, error_model="numpy", fastmath={"contract"})
def _cos_sin_sums_kernel(xt, W, phase, C, B, out_c, out_s, K):  # pragma: no cover - compiled
    n = xt.shape[1]
    c = _constants(K)
    for i0 in range(0, n, TILE_ROWS):
        m = min(TILE_ROWS, n - i0)
        xtt = _tile(xt, i0, m)
        tc = np.empty((C.shape[1], m))
        ts = np.empty((B.shape[1], m))
        _sums_tile(xtt, W, phase, C, B, tc, ts, np.empty(m), np.empty(m), np.empty(m), c)
        for k in range(C.shape[1]):
            for i in range(m):
                out_c[k, i0 + i] += tc[k, i]
        for k in range(B.shape[1]):
            for i in range(m):
                out_s[k, i0 + i] += ts[k, i]


@njit(cache=True, nogil=True, boundscheck=False, error_model="numpy", fastmath={"contract"})
def _cos_kernel(xt, W, phase, scale, out, K):  # pragma: no cover - compiled
    n = xt.shape[1]
    c = _constants(K)
    for i0 in range(0, n, TILE_ROWS):
        m = min(TILE_ROWS, n - i0)
        xtt = _tile(xt, i0, m)
        a = np.empty(m)
        for s in range(W.shape[0]):
            _angle_row(xtt, W, s, a)
            p = phase[s]
            for i in range(m):  # straight into out (indexed: a sliced view's layout defeats vectorisation)
                out[s, i0 + i] = scale * _sincos1(a[i] + p, c)[1]


def cos_sin_sums_rows(xt: np.ndarray, W: np.ndarray, phase: np.ndarray, C: np.ndarray, B: np.ndarray,
                      out_c: np.ndarray, out_s: np.ndarray) -> None:
    """Add ``cos(W xt + phase)ᵀ C`` to ``out_c`` (kc, n) and ``sin(…)ᵀ B`` to ``out_s`` (ks, n).

    ``xt`` is the (d, n) block of shifted rows, transposed and C-contiguous; ``W`` (S, d), ``C`` (S, kc),
    ``B`` (S, ks) (either may have no columns). Angles bounded by :data:`MAX_ANGLE`, as for :func:`sincos_rows`.
    """
    _cos_sin_sums_kernel(xt, W, phase, C, B, out_c, out_s, _KERNEL_CONSTANTS)


def cos_rows(xt: np.ndarray, W: np.ndarray, phase: np.ndarray, scale: float, out: np.ndarray) -> None:
    """Write ``scale · cos(W xt + phase)`` into ``out`` (S, n), C-contiguous (conditions of :func:`cos_sin_sums_rows`)."""
    _cos_kernel(xt, W, phase, float(scale), out, _KERNEL_CONSTANTS)


@njit(cache=True, nogil=True, boundscheck=False, error_model="numpy", fastmath={"contract"})
def _sincos_kernel(angle, phase, sin_out, cos_out, K):  # pragma: no cover - compiled
    c = _constants(K)
    for s in range(angle.shape[0]):
        _sincos_row(angle[s], phase[s], sin_out[s], cos_out[s], c)


def sincos_rows(angle: np.ndarray, phase: np.ndarray, sin_out: np.ndarray, cos_out: np.ndarray) -> None:
    """Write ``sin(angle + phase[:, None])`` and ``cos(…)`` into ``sin_out``, ``cos_out``.

    ``angle`` is (S, n) float64 C-contiguous, ``phase`` (S,); ``|angle + phase|`` must stay
    below :data:`MAX_ANGLE` (not checked here: the caller bounds it cheaply per block).
    """
    _sincos_kernel(angle, phase, sin_out, cos_out, _KERNEL_CONSTANTS)


# -- the pass: sin block out, sums in ------------------------------------------------------------------------
# The statistics pass needs the sin block (S, rows) for its product and, of the cosines, only their row sums
# Σ cos (and the cos block itself only for the held-out Σφφᵀ). Formed apart, angles, sin and cos are three
# float64 (S, rows) blocks in memory (24·S bytes a row) and the sums read them again. Here the block goes by
# tiles of :data:`PASS_TILE` rows; a feature's angles and cosines for a tile stay in L1, its sines go straight
# into the block (float64), and Σ cos is summed from L1. Under precision="mixed" the sines are also kept in
# float64 in L1 for Σ sin and Σ sin (x − x₀)ᵀ (the float32 product cannot give them) and stored rounded.
# Measured at S = 1000, d = 7, one thread, 6 543-row block: 17–19 ms (float64) against 29.5 ms for the kernel
# that wrote each row through L1 buffers of the whole block's width, beside 150 ms for the block's SYRK.

#: Rows per tile of the pass kernel: its float64 row buffers (8 KiB each: three, or five with the sine's sums) and
#: the (d, tile) rows (56 KiB at d = 7) stay in L1 and L2. Measured at 256–2 048 rows: the same pass rate, and the
#: same block time for the kernel with the sine's sums by pairs.
PASS_TILE = 1024


@njit(cache=True, nogil=True, boundscheck=False, error_model="numpy", fastmath={"contract", "reassoc"})
def _row_sums(sbuf, cbuf, xt, s, i0, sin_out, cos_out, u, U, psi):  # pragma: no cover - compiled
    # reassoc for these sums only (vectorised partial sums); the sine and cosine, without it, are the
    # caller's: reassociation would break the Cody–Waite reduction. Stores round to the outputs' dtype.
    n = cbuf.shape[0]
    tc = 0.0
    for i in range(n):
        tc += cbuf[i]
    psi[s] += tc
    if cos_out.shape[0]:
        for i in range(n):
            cos_out[s, i0 + i] = cbuf[i]
    if u.shape[0]:
        ts = 0.0
        for i in range(n):
            sin_out[s, i0 + i] = sbuf[i]
            ts += sbuf[i]
        u[s] += ts
        d = xt.shape[0]
        j = 0
        while j + 3 < d:  # four columns per sweep of sbuf: one column a sweep is load-bound
            t0, t1, t2, t3 = 0.0, 0.0, 0.0, 0.0
            for i in range(n):
                v = sbuf[i]
                t0 += v * xt[j, i]
                t1 += v * xt[j + 1, i]
                t2 += v * xt[j + 2, i]
                t3 += v * xt[j + 3, i]
            U[s, j] += t0
            U[s, j + 1] += t1
            U[s, j + 2] += t2
            U[s, j + 3] += t3
            j += 4
        for j in range(j, d):
            t = 0.0
            for i in range(n):
                t += sbuf[i] * xt[j, i]
            U[s, j] += t


@njit(cache=True, nogil=True, boundscheck=False, error_model="numpy", fastmath={"contract", "reassoc"},
      inline="always")
def _pair_columns(s0b, s1b, xt, j, k, U, s):  # pragma: no cover - compiled
    # U[s:s+2, j:j+k] += (sines of features s, s+1) · xt[j:j+k]ᵀ for k ≤ 4, every row of xt loaded once for
    # both features (8 accumulators, of AVX2's 16 registers). Always four columns, a remainder of k < 4 padded with
    # its last column (an L1 hit; those sums are dropped): a fixed number of accumulators keeps them in registers,
    # and the padded loop measured as fast as one loop per width (d = 7, 5, 3: 22.7–23.9, 21.1–22.0, 18.7–19.1 ms a
    # block against 23.6–24.1, 21.5–21.8, 19.0–19.4), and faster than a remainder of 3 done as 1 + 1 + 1 (24.7–30.3).
    n = s0b.shape[0]
    a0 = a1 = a2 = a3 = b0 = b1 = b2 = b3 = 0.0
    j1, j2, j3 = j + min(1, k - 1), j + min(2, k - 1), j + min(3, k - 1)  # k < 4: the last column again, unused
    for i in range(n):
        v0, v1 = s0b[i], s1b[i]
        x0, x1, x2, x3 = xt[j, i], xt[j1, i], xt[j2, i], xt[j3, i]
        a0 += v0 * x0
        a1 += v0 * x1
        a2 += v0 * x2
        a3 += v0 * x3
        b0 += v1 * x0
        b1 += v1 * x1
        b2 += v1 * x2
        b3 += v1 * x3
    U[s, j] += a0
    U[s + 1, j] += b0
    if k > 1:
        U[s, j + 1] += a1
        U[s + 1, j + 1] += b1
    if k > 2:
        U[s, j + 2] += a2
        U[s + 1, j + 2] += b2
    if k > 3:
        U[s, j + 3] += a3
        U[s + 1, j + 3] += b3


@njit(cache=True, nogil=True, boundscheck=False, error_model="numpy", fastmath={"contract", "reassoc"})
def _pair_row_sums(s0b, c0b, s1b, c1b, xt, s, i0, sin_out, cos_out, u, U, psi):  # pragma: no cover - compiled
    # _row_sums for features s and s + 1 at once: the sine's sums u, U are the kernel's only load-bound part (a
    # sweep per ≤ 4 columns of xt, each loading xt again per feature), so a pair shares each load of xt. Measured
    # at S = 1000, d = 7, one thread, 6 543-row block: 23.2–24.8 ms against 27.2–27.6 for one feature at a time,
    # beside 19.9–21.1 without the sums (the float32 block alone).
    n = c0b.shape[0]
    tc0 = tc1 = ts0 = ts1 = 0.0
    for i in range(n):
        v0, v1 = s0b[i], s1b[i]
        sin_out[s, i0 + i] = v0
        sin_out[s + 1, i0 + i] = v1
        tc0 += c0b[i]
        tc1 += c1b[i]
        ts0 += v0
        ts1 += v1
    psi[s] += tc0
    psi[s + 1] += tc1
    u[s] += ts0
    u[s + 1] += ts1
    if cos_out.shape[0]:
        for i in range(n):
            cos_out[s, i0 + i] = c0b[i]
            cos_out[s + 1, i0 + i] = c1b[i]
    d = xt.shape[0]
    for j in range(0, d, 4):
        _pair_columns(s0b, s1b, xt, j, min(4, d - j), U, s)


@njit(cache=True, nogil=True, boundscheck=False, error_model="numpy", fastmath={"contract"})
def _sin_sums_kernel(xt, W, phase, sin_out, cos_out, u, U, psi, K):  # pragma: no cover - compiled
    n, S = xt.shape[1], W.shape[0]
    c = _constants(K)
    abuf = np.empty(PASS_TILE)
    sbuf, cbuf, sbuf1, cbuf1 = np.empty(PASS_TILE), np.empty(PASS_TILE), np.empty(PASS_TILE), np.empty(PASS_TILE)
    for i0 in range(0, n, PASS_TILE):
        m = min(PASS_TILE, n - i0)
        xtt = _tile(xt, i0, m)
        a, sb, cb, sb1, cb1 = abuf[:m], sbuf[:m], cbuf[:m], sbuf1[:m], cbuf1[:m]
        s = 0
        if u.shape[0]:  # the sine's sums wanted: float64 sines kept (and stored rounded), two features at a time
            while s + 1 < S:
                _angle_row(xtt, W, s, a)
                _sincos_row(a, phase[s], sb, cb, c)
                _angle_row(xtt, W, s + 1, a)
                _sincos_row(a, phase[s + 1], sb1, cb1, c)
                _pair_row_sums(sb, cb, sb1, cb1, xtt, s, i0, sin_out, cos_out, u, U, psi)
                s += 2
        for s in range(s, S):  # every feature without the sine's sums, or the last of an odd S with them
            _angle_row(xtt, W, s, a)
            p = phase[s]
            if u.shape[0]:
                _sincos_row(a, p, sb, cb, c)
            else:  # straight into the block (indexed, not a sliced view: a view's layout defeats vectorisation)
                for i in range(m):
                    sin_out[s, i0 + i], cb[i] = _sincos1(a[i] + p, c)
            _row_sums(sb, cb, xtt, s, i0, sin_out, cos_out, u, U, psi)


def sin_sums_rows(xt: np.ndarray, W: np.ndarray, phase: np.ndarray, sin_out: np.ndarray, cos_out: np.ndarray | None,
                  psi: np.ndarray, u: np.ndarray | None = None, U: np.ndarray | None = None) -> None:
    """Write ``sin(W xt + phase)`` into ``sin_out`` (S, n) (and the cosine into ``cos_out``, unless None), rounded to
    their dtype (float64 or float32), and add in float64 the cosine's row sums to ``psi`` (S,) and, when given,
    the sine's row sums to ``u`` (S,) and ``sin · xtᵀ`` to ``U`` (S, d).

    ``xt`` is the (d, n) block of shifted rows, transposed and C-contiguous; ``W`` (S, d); sines and cosines are
    those of :func:`sincos_rows` (float64), with angles bounded by :data:`MAX_ANGLE` likewise.
    """
    if (u is None) != (U is None):
        raise ValueError("pass both of the sine's sums u and U, or neither")
    empty = np.empty((0, 0), dtype=sin_out.dtype)
    _sin_sums_kernel(xt, W, phase, sin_out, empty if cos_out is None else cos_out,
                     np.empty(0) if u is None else u, np.empty((0, 0)) if U is None else U, psi, _KERNEL_CONSTANTS)
