"""The Nyström statistics of :mod:`tgpflow.stats.kef` for a chunk on a device (docs/gpu.md, "Kernel models").

The same sums as the NumPy path (docs/mathematics.md, "Nyström kernel exponential family" and "Score estimators on a
Nyström basis"), written with array-API calls so that they run where the chunk is (CuPy, or ``array_api_strict``'s
second device in the tests): the basis goes to the device once per chunk, the sums stay there across the chunk's blocks
and come back to the host once, in float64 (:func:`tgpflow.core.backend.to_numpy`). The md × md product of the curl-free
statistics is cuBLAS ``dsyrk`` on CuPy (half the flops of a GEMM; :func:`tgpflow.stats.tgp_cupy.syrk_add`), a matmul
elsewhere. ``F`` is summed as one GEMM of the stacked blocks with the rows, in the order (i, a, j, l), and put in the
order (a, i, j, l) once per chunk. Dimension subsampling (``basis.components``) has no device form: it is refused here
(the estimators resolve ``device`` to the CPU for it).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np

from tgpflow.core.backend import device_of, is_cupy, namespace, put_arrays, to_numpy
from tgpflow.features.nystrom import NystromBasis

__all__ = ["kef_sums_on_device", "diag_sums_on_device", "lite_sums_on_device", "KERNEL_DEVICE_BLOCK_BYTES"]

#: Bytes of one block's per-row work arrays on the device (those :func:`tgpflow.stats.kef.kef_memory` counts per
#: row: the curl-free blocks, m·d² per row, are formed once and their diagonal added in place): 1 GiB, about 1 100
#: rows at m = 500, d = 10 — each md × md SYRK then has k = 11 000, enough to run near cuBLAS's peak.
KERNEL_DEVICE_BLOCK_BYTES = 1 << 30


class _OnDevice:
    """The chunk's namespace and device, the basis there (about x₀, as the host path takes differences) and the
    accumulators: what every block of a chunk shares."""

    def __init__(self, x: Any, basis: NystromBasis) -> None:
        if basis.components is not None:
            raise ValueError("dimension subsampling (n_components) runs on the CPU: use device='cpu'")
        self.xp = namespace(x)
        self.dev = device_of(x)
        put = put_arrays({"shift": basis.shift, "Ys": basis.Y - basis.shift}, self.xp, self.dev)
        self.shift, self.Ys = put["shift"], put["Ys"]
        self.kernel = basis.kernel

    def zeros(self, *shape: int) -> Any:
        return self.xp.zeros(shape, dtype=self.xp.float64, device=self.dev)

    def blocks(self, x: Any, per_row_bytes: int, block_bytes: int) -> Iterator[tuple[Any, Any, Any]]:
        """(the block's rows about x₀, their differences r to the basis (nb, m, d), u = ‖r‖²) per block of at most
        ``block_bytes`` of per-row work arrays (on CuPy :data:`KERNEL_DEVICE_BLOCK_BYTES`: the host's cap is not
        the device's)."""
        xp, n = self.xp, int(x.shape[0])
        cap = KERNEL_DEVICE_BLOCK_BYTES if is_cupy(xp) else int(block_bytes)
        rows = max(1, cap // max(1, int(per_row_bytes)))
        for start in range(0, n, rows):
            xs = x[start:min(start + rows, n), ...] - self.shift
            r = xs[:, None, :] - self.Ys[None, :, :]
            yield xs, r, xp.sum(r * r, axis=2)


def _gram_add(a: Any, acc: Any) -> Any:
    """``acc + aᵀa``: cuBLAS SYRK into one triangle of ``acc`` on CuPy (completed by :func:`_gram_done`)."""
    if is_cupy(namespace(a)):
        from tgpflow.stats.tgp_cupy import syrk_add

        syrk_add(a, acc, trans="T")
        return acc
    return acc + namespace(a).matrix_transpose(a) @ a


def _gram_done(acc: Any) -> Any:
    """The whole symmetric matrix from :func:`_gram_add`'s accumulator."""
    if is_cupy(namespace(acc)):
        from tgpflow.stats.tgp_cupy import symmetric

        return symmetric(acc)
    return acc


def kef_sums_on_device(x: Any, basis: NystromBasis, per_row_bytes: int,
                       block_bytes: int) -> dict[str, np.ndarray]:
    """``C``, ``h_lap``, ``E0``, ``F`` of :func:`tgpflow.stats.kef.kef_chunk_stats` for a device chunk ``x``; host
    float64. ``per_row_bytes``: the per-row part of the task's memory (:func:`tgpflow.stats.kef.kef_memory`);
    ``block_bytes``: the cap on a block's (:meth:`_OnDevice.blocks`)."""
    on = _OnDevice(x, basis)
    xp = on.xp
    m, d = basis.n_basis, basis.n_dims
    C, h_lap = on.zeros(m * d, m * d), on.zeros(m, d)
    E0_t, F_t = on.zeros(d, m, d), on.zeros(d * m * d, d)  # in the order (i, a, j[, l]) until the end
    for xs, r, u in on.blocks(x, per_row_bytes, block_bytes):
        nb = int(xs.shape[0])
        alpha, kappa, omega = on.kernel.curl_free_weights(u, d)
        kr = xp.permute_dims(kappa[:, :, None] * r, (0, 2, 1))  # κ_a r_{a,i}: (nb, d, m)
        blocks = kr[:, :, :, None] * r[:, None, :, :]  # K_cf = κ r rᵀ + α I: (nb, d, m, d), the largest array
        for i in range(d):  # + α δ_ij in place: no second array of that size
            blocks[:, i, :, i] = blocks[:, i, :, i] + alpha
        C = _gram_add(xp.reshape(blocks, (nb * d, m * d)), C)
        h_lap = h_lap + xp.sum(omega[:, :, None] * r, axis=0)  # Σ ω_a r_a, from r: no cancellation far from x₀
        E0_t = E0_t + xp.sum(blocks, axis=0)
        F_t = F_t + xp.matrix_transpose(xp.reshape(blocks, (nb, d * m * d))) @ xs
    E0 = xp.permute_dims(E0_t, (1, 0, 2))
    F = xp.permute_dims(xp.reshape(F_t, (d, m, d, d)), (1, 0, 2, 3))
    return {"C": _host(_gram_done(C)), "h_lap": _host(h_lap), "E0": _host(E0), "F": _host(F)}


def diag_sums_on_device(x: Any, basis: NystromBasis, per_row_bytes: int,
                        block_bytes: int) -> dict[str, np.ndarray]:
    """``Ck``, ``h_grad``, ``S0``, ``S1`` of :func:`tgpflow.stats.kef.diag_chunk_stats` for a device chunk; host."""
    on = _OnDevice(x, basis)
    xp = on.xp
    m, d = basis.n_basis, basis.n_dims
    Ck, h_grad, S0, S1 = on.zeros(m, m), on.zeros(m, d), on.zeros(m), on.zeros(m, d)
    for xs, r, u in on.blocks(x, per_row_bytes, block_bytes):
        k, d1, _, _ = on.kernel.profile(u)
        Ck = _gram_add(k, Ck)
        g = 2.0 * d1  # Σ ∇_x k(Y_a, x) = Σ 2ψ'(u) r_a, a column at a time: (nb, m) temporaries only
        h_grad = h_grad + xp.stack([xp.sum(g * r[:, :, j], axis=0) for j in range(d)], axis=1)
        S0 = S0 + xp.sum(k, axis=0)
        S1 = S1 + xp.matrix_transpose(k) @ xs
    return {"Ck": _host(_gram_done(Ck)), "h_grad": _host(h_grad), "S0": _host(S0), "S1": _host(S1)}


def lite_sums_on_device(x: Any, basis: NystromBasis, per_row_bytes: int,
                        block_bytes: int) -> dict[str, np.ndarray]:
    """``Cl``, ``lap``, ``L1``, ``L2`` of :func:`tgpflow.stats.kef.lite_chunk_stats` for a device chunk; host."""
    on = _OnDevice(x, basis)
    xp = on.xp
    m, d = basis.n_basis, basis.n_dims
    Cl, lap, L1, L2 = on.zeros(m, m), on.zeros(m), on.zeros(m, d), on.zeros(m * d, d)
    for xs, r, u in on.blocks(x, per_row_bytes, block_bytes):
        nb = int(xs.shape[0])
        _, d1, d2, _ = on.kernel.profile(u)
        D = (2.0 * d1)[:, :, None] * r  # ∇_x k(Y_a, x): (nb, m, d)
        Cl = _gram_add(xp.reshape(xp.permute_dims(D, (0, 2, 1)), (nb * d, m)), Cl)
        lap = lap + xp.sum(4.0 * d2 * u + 2.0 * d * d1, axis=0)
        L1 = L1 + xp.sum(D, axis=0)
        L2 = L2 + xp.matrix_transpose(xp.reshape(D, (nb, m * d))) @ xs
    return {"Cl": _host(_gram_done(Cl)), "lap": _host(lap), "L1": _host(L1), "L2": _host(xp.reshape(L2, (m, d, d)))}


def _host(a: Any) -> np.ndarray:
    """The documented transfer back, in float64."""
    return to_numpy(a).astype(np.float64)
