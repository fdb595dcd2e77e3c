"""The TGP pass's products on a CUDA GPU through CuPy (docs/gpu.md, "The statistics pass").

:func:`tgpflow.stats.tgp.level_products` sends CuPy chunks here. Per block of rows, on the device:

* the sines of the angles ``W (x − x₀)ᵀ + c'`` and ``Σ cos`` by one fused kernel (:data:`FUSED_SOURCE`, float64 as
  on the CPU), which writes the sine block and nothing else (the cosines too where ``Σ cos cosᵀ`` is asked for);
* float64: one cuBLAS ``dsyrk`` of the augmented block ``A = [sin; (x − x₀)ᵀ; 1]`` into an (S + d + 1)² float64
  accumulator (beta = 1), which also gives ``Σ sin (x − x₀)ᵀ`` and ``Σ sin``, as the NumPy path does;
* mixed: ``ssyrk`` of the sin block rounded to float32 into a float32 block product, added to the float64
  accumulator; ``Σ sin`` and ``Σ sin (x − x₀)ᵀ`` from the float64 block;
* the held-out ``Σ cos cosᵀ`` by a second SYRK where asked, ``Σ sin s₀ᵀ`` by a GEMM.

The accumulators stay on the device for the whole chunk; the chunk's sums then come back to the host in float64
(:func:`tgpflow.core.backend.to_numpy`), where Dask's tree adds chunks. Blocks hold :data:`DEVICE_BLOCK_BYTES` of
sines, a fixed size chosen for the device rather than the worker's RAM (each concurrent task holds about three such
blocks on the GPU). Σ cos is added by atomic adds, so its last bits vary from run to run (relative 1e-16).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tgpflow.core.backend import to_numpy
from tgpflow.features.rff import RandomFourierFeatures

__all__ = ["products_cupy", "DEVICE_BLOCK_BYTES", "syrk_add", "sin_block", "FUSED"]

#: Bytes of one block's sin block on the device (its angle and cos blocks come beside it): 256 MiB, 32 000 rows
#: at S = 1000, enough for cuBLAS to run each SYRK near its rate.
DEVICE_BLOCK_BYTES = 1 << 28

#: The sines (and cosines) of a block by the fused kernel (:data:`FUSED_SOURCE`), else by a GEMM for the angles and an
#: element-wise kernel: the reference benchmarks/gpu/bench.py measures the fused kernel against (0.74 s against
#: 0.63 s for 14.3M rows on an H200); the tests check both against the CPU.
FUSED = True

#: One thread block per (feature i, range of rows): the angle ``c'_i + Σ_k W_ik x_jk`` formed in registers (d is
#: small), ``sincos`` in float64, the sine stored into the block A, Σ_j cos added into ψ_i by a shared-memory
#: reduction and one atomicAdd per thread block; the cosine is stored only where the held-out Σ cos cosᵀ needs it.
#: No (S, rows) angle or cosine block is written and read back: the kernel writes the sines and nothing else.
FUSED_SOURCE = r"""
extern "C" __global__ void tgp_sin_cossum(const double* __restrict__ xs, const double* __restrict__ W,
                                          const double* __restrict__ phase, double* __restrict__ sin_out,
                                          double* __restrict__ cos_out, double* __restrict__ psi,
                                          const int nb, const int d)
{
    __shared__ double red[256];
    const int i = blockIdx.y;
    const double p = phase[i];
    double acc = 0.0;
    for (int j = blockIdx.x * blockDim.x + threadIdx.x; j < nb; j += blockDim.x * gridDim.x) {
        double a = p;
        for (int k = 0; k < d; ++k) a += W[(long long)i * d + k] * xs[(long long)j * d + k];
        double s, c;
        sincos(a, &s, &c);
        sin_out[(long long)i * nb + j] = s;
#if WRITE_COS
        cos_out[(long long)i * nb + j] = c;
#endif
        acc += c;
    }
    red[threadIdx.x] = acc;
    __syncthreads();
    for (int h = blockDim.x / 2; h > 0; h >>= 1) {
        if (threadIdx.x < h) red[threadIdx.x] += red[threadIdx.x + h];
        __syncthreads();
    }
    if (threadIdx.x == 0) atomicAdd(&psi[i], red[0]);
}
"""
#: Threads per thread block of the fused kernel: the size of its shared reduction array ``red`` (keep them equal).
THREADS = 256
#: CUDA's largest grid dimension y: the fused kernel's one thread-block row per feature.
MAX_FEATURES = 65_535
#: Rows per thread in the fused kernel (a grid of ⌈rows / (THREADS · this)⌉ × S thread blocks).
ROWS_PER_THREAD = 4

_KERNELS: dict[str, Any] = {}


def _kernel(name: str) -> Any:
    """A compiled kernel, once per process: "sincos" (element-wise), "fused" or "fused_cos" (:data:`FUSED_SOURCE`)."""
    if name not in _KERNELS:
        import cupy as cp

        if name == "sincos":
            _KERNELS[name] = cp.ElementwiseKernel("float64 a, float64 p", "float64 s, float64 c",
                                                  "const double t = a + p; s = sin(t); c = cos(t);", "tgpflow_sincos")
        else:
            flag = "-DWRITE_COS=1" if name == "fused_cos" else "-DWRITE_COS=0"
            _KERNELS[name] = cp.RawKernel(FUSED_SOURCE, "tgp_sin_cossum", options=(flag,))
    return _KERNELS[name]


def sin_block(xs: Any, W: Any, phase: Any, sin: Any, cos: Any, psi: Any, with_cos: bool, fused: bool) -> None:
    """The sines of ``W xsᵀ + c'`` into ``sin`` (S, nb), Σ cos added into ``psi``, the cosines into ``cos`` where
    ``with_cos`` (else it may be left unwritten): by the fused kernel, or a GEMM and the element-wise one."""
    if not fused:
        _kernel("sincos")(W @ xs.T, phase[:, None], sin, cos)
        psi += cos.sum(axis=1)
        return
    nb, d = int(xs.shape[0]), int(xs.shape[1])
    S = int(W.shape[0])
    grid = (max(1, -(-nb // (THREADS * ROWS_PER_THREAD))), S)
    _kernel("fused_cos" if with_cos else "fused")(grid, (THREADS,), (xs, W, phase, sin, cos, psi, np.int32(nb),
                                                                     np.int32(d)))


def syrk_add(a: Any, acc: Any, trans: str = "N") -> None:
    """``acc += a aᵀ`` (``trans="T"``: ``acc += aᵀa``) on one triangle of ``acc`` by cuBLAS SYRK (``a`` and ``acc``
    of one dtype); the other triangle is left as it was (:func:`symmetric` completes it)."""
    from cupy import cublas

    cublas.syrk(trans, a, out=acc, alpha=1.0, beta=1.0, lower=False)


def symmetric(acc: Any) -> Any:
    """The full matrix from a SYRK accumulator whose other triangle was never written (zeros): whichever triangle
    cuBLAS filled, ``acc + accᵀ − diag`` is the symmetric whole."""
    import cupy as cp

    return acc + acc.T - cp.diag(cp.diag(acc))


def products_cupy(x: Any, features: RandomFourierFeatures, cos_gram: bool, mixed: bool = False,
                  score: np.ndarray | None = None, fused: bool | None = None) -> tuple[Any, ...]:
    """:func:`tgpflow.stats.tgp.level_products` for a CuPy chunk ``x`` (n, d): the unscaled sums, host float64.
    ``fused``: the fused sine kernel (default :data:`FUSED`) or the GEMM and element-wise one."""
    fused = FUSED if fused is None else bool(fused)
    if fused and features.n_features > MAX_FEATURES:
        raise ValueError(f"the GPU pass takes at most {MAX_FEATURES} features (one CUDA grid row each); got "
                         f"n_features={features.n_features}")
    import cupy as cp

    n = int(x.shape[0])
    S, d = features.n_features, features.n_dims
    aug = 0 if mixed else d + 1
    low = cp.float32 if mixed else cp.float64
    rows = max(1, min(n, DEVICE_BLOCK_BYTES // (8 * (S + aug))))
    W = cp.ascontiguousarray(cp.asarray(features.frequencies))
    phase = cp.ascontiguousarray(cp.asarray(features.phase))
    shift = cp.asarray(features.shift)
    score_x = None if score is None else cp.asarray(score)
    acc = cp.zeros((S + aug, S + aug))
    acc_cos = cp.zeros((S, S)) if cos_gram else None
    block = cp.zeros((S, S), dtype=low) if mixed else None
    block_cos = cp.zeros((S, S), dtype=low) if mixed and cos_gram else None
    u, U, psi = cp.zeros(S), cp.zeros((S, d)), cp.zeros(S)
    V = None if score is None else cp.zeros((S, d))
    buf = cp.empty((S + aug) * rows)
    cos_buf = cp.empty(S * rows) if cos_gram or not fused else buf  # the fused kernel writes it only for Σ cos cosᵀ
    for start in range(0, n, rows):
        xs = cp.ascontiguousarray(x[start:start + rows] - shift)
        nb = xs.shape[0]
        A = buf[: (S + aug) * nb].reshape(S + aug, nb)
        sin, cos = A[:S], cos_buf[: S * nb].reshape(S, nb)
        sin_block(xs, W, phase, sin, cos, psi, cos_gram, fused)
        if V is not None:
            V += sin @ score_x[start:start + nb]
        if mixed:  # float32 products, float64 sums
            u += sin.sum(axis=1)
            U += sin @ xs
            block.fill(0)
            syrk_add(sin.astype(cp.float32), block)
            acc += block
            if cos_gram:
                block_cos.fill(0)
                syrk_add(cos.astype(cp.float32), block_cos)
                acc_cos += block_cos
        else:
            A[S:S + d] = xs.T
            A[S + d] = 1.0
            syrk_add(A, acc)
            if cos_gram:
                syrk_add(cos, acc_cos)
    full = symmetric(acc)
    if not mixed:
        U, u = full[:S, S:S + d], full[:S, S + d]
    gram = full[:S, :S]
    gram_cos = None if acc_cos is None else symmetric(acc_cos)
    return tuple(None if a is None else to_numpy(a).astype(np.float64) for a in (gram, gram_cos, u, U, psi, V))
