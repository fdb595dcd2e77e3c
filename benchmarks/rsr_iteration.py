"""One root-Sobolev iteration on 10⁶ rows × d = 10, T = 2000 (2 cores): rows/s vs same-run floors.

An iteration is one map-reduce (docs/mathematics.md, "Root-Sobolev density"): per row the T angles (a d × T GEMM), T
cosines, then f = φw, Δf and g += φ/f. It runs as the fused compiled loop of ``tgpflow.stats.rsr_kernel``
(tiles of rows: one BLAS GEMM into a reused L2-sized tile, then cos and the reductions in L1).

References measured in the same run, on the same tiles, 2 threads (one per core) each:
  (a) the angle GEMM alone into the reused tile — the "GEMM-bound" rate the issue names;
  (b) angle GEMM + the kernel's float64 cosines and nothing else — the compute floor of any
      float64 implementation that evaluates the T cosines per row (at d = 10 the cosines cost
      more than the GEMM, so (b) is well below (a));
  (c) the unfused NumPy path (GEMM → sin/cos block → two GEMVs), for the speed-up.
Usage: python benchmarks/rsr_iteration.py [--rows 1000000] [--dims 10] [--features 2000]
"""

from __future__ import annotations

import argparse
import json
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np


def main() -> None:
    import dask
    import dask.array as da

    from tgpflow.core.engine import accumulate
    from tgpflow.core.memory import DEFAULT_BLOCK_BYTES
    from tgpflow.features.sdo import draw_sdo_features
    from tgpflow.io.sources import as_source
    from tgpflow.stats.rsr import rsr_chunk_stats
    from tgpflow.stats.rsr_kernel import floor_kernels

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
    wt = np.ascontiguousarray(f.frequencies.T)
    phase = np.asarray(f.phase)
    halves = [np.ascontiguousarray(X[: N // 2] - f.shift), np.ascontiguousarray(X[N // 2:] - f.shift)]
    floor_kernels(halves[0][:100], wt, phase)  # compile
    with ThreadPoolExecutor(2) as pool:  # each thread times its own GEMM-only and GEMM + cos passes
        times = list(pool.map(lambda h: floor_kernels(h, wt, phase), halves))
    gemm = N / max(t_[0] for t_ in times)
    floor = N / max(t_[1] for t_ in times)
    src = as_source(da.from_array(X, chunks=(N // 8, d)))
    with dask.config.set(scheduler="threads", num_workers=2):
        accumulate(as_source(X[:20_000]), rsr_chunk_stats, f, w)  # compile
        t = time.perf_counter()
        accumulate(src, rsr_chunk_stats, f, w)
        it = N / (time.perf_counter() - t)
        small = as_source(da.from_array(X[: N // 5], chunks=(N // 40, d)))
        t = time.perf_counter()
        accumulate(small, rsr_chunk_stats, f, w, DEFAULT_BLOCK_BYTES, False)
        unfused = (N // 5) / (time.perf_counter() - t)
    print(f"one RSR iteration (fused): {it:,.0f} rows/s ({N / it:.2f} s for {N:,} rows, d = {d}, T = {T}, 2 cores)")
    print(f"  (a) angle GEMM alone, same tiles, 2 threads: {gemm:,.0f} rows/s → ratio {it / gemm:.2f}")
    print(f"  (b) angle GEMM + float64 cosines (compute floor): {floor:,.0f} rows/s → ratio {it / floor:.2f}; "
          f"the floor itself is {floor / gemm:.2f} of (a)")
    print(f"  (c) unfused NumPy path: {unfused:,.0f} rows/s → fused speed-up {it / unfused:.2f}×")
    print(json.dumps({"rows": N, "d": d, "T": T, "iteration_rows_s": round(it), "gemm_rows_s": round(gemm),
                      "ratio_to_gemm": round(it / gemm, 3), "floor_rows_s": round(floor),
                      "ratio_to_floor": round(it / floor, 3), "floor_to_gemm": round(floor / gemm, 3),
                      "unfused_rows_s": round(unfused), "speedup": round(it / unfused, 2)}))


if __name__ == "__main__":
    main()
