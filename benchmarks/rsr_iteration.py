"""One root-Sobolev iteration on 10⁶ rows × d = 10, T = 2000 (2 cores): rows/s vs same-run peaks.

An iteration is one map-reduce: per row the angles (a d × T GEMM), T sin/cos, then f = φw and
g += φ/f (two O(T) passes). Two same-run references, all cores, same block shapes: (a) the
angle GEMM alone (the "GEMM-bound" rate the issue names — not the binding cost here, since
d = 10 makes the GEMM cheap next to T transcendental evaluations per row) and (b) the compiled float64
sincos kernel alone on the same angle block (T pairs per row), the binding cost.
Usage: python benchmarks/rsr_iteration.py [--rows 1000000]
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np


def main() -> None:
    import dask
    import dask.array as da

    from tgpflow.features.sdo import draw_sdo_features
    from tgpflow.io.sources import as_source
    from tgpflow.stats.reduce import accumulate
    from tgpflow.stats.rsr import rsr_chunk_stats
    from tgpflow.stats.tgp import DEFAULT_BLOCK_BYTES, block_rows_for

    p = argparse.ArgumentParser()
    p.add_argument("--rows", type=int, default=1_000_000)
    p.add_argument("--dims", type=int, default=10)
    p.add_argument("--features", type=int, default=2000)
    args = p.parse_args()
    N, d, T = args.rows, args.dims, args.features
    X = np.random.default_rng(0).normal(size=(N, d))
    f = draw_sdo_features(T, d, m_s=d // 2 + 1, a=1.0, random_state=0)
    w = np.random.default_rng(1).normal(size=T)
    w /= np.linalg.norm(w)
    block = block_rows_for(T, d, DEFAULT_BLOCK_BYTES)
    W = np.ascontiguousarray(f.frequencies)
    xb = X[:block]
    t = time.perf_counter()
    for _ in range(20):
        W @ xb.T
    gemm = 20 * block / (time.perf_counter() - t)
    from concurrent.futures import ThreadPoolExecutor

    from tgpflow.features.sincos import sincos_rows

    angle = W @ (xb - f.shift).T
    sin_buf, cos_buf = np.empty_like(angle), np.empty_like(angle)
    reps = max(1, N // (2 * block))

    def kernel(_):
        s_, c_ = np.empty_like(angle), np.empty_like(angle)
        for _ in range(reps):
            sincos_rows(angle, f.phase, s_, c_)

    sincos_rows(angle, f.phase, sin_buf, cos_buf)  # compile
    with ThreadPoolExecutor(2) as pool:
        t = time.perf_counter()
        list(pool.map(kernel, range(2)))
    feats = 2 * reps * block / (time.perf_counter() - t)
    src = as_source(da.from_array(X, chunks=(N // 8, d)))
    with dask.config.set(scheduler="threads"):
        accumulate(as_source(X[:20_000]), rsr_chunk_stats, f, w)
        t = time.perf_counter()
        accumulate(src, rsr_chunk_stats, f, w)
        it = N / (time.perf_counter() - t)
    print(f"one RSR iteration: {it:,.0f} rows/s ({N / it:.2f} s for {N} rows); angle-GEMM rate (1 thread) "
          f"{gemm:,.0f} rows/s → ratio {it / (2 * gemm):.2f} of the 2-core GEMM bound; the compiled sincos "
          f"alone (T pairs per row, 2 threads) {feats:,.0f} rows/s → ratio {it / feats:.2f}")
    print(json.dumps({"rows": N, "d": d, "T": T, "iteration_rows_s": round(it), "gemm_rows_s_2cores": round(2 * gemm),
                      "ratio_to_gemm": round(it / (2 * gemm), 3), "feature_rows_s": round(feats),
                      "ratio_to_features": round(it / feats, 3)}))


if __name__ == "__main__":
    main()
