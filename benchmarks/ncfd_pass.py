"""NCFD statistics throughput vs the SYRK bound for 2H products per row, and FD-vs-NCFD time.

NCFD (docs/mathematics.md, "Noise-conditional Fisher divergence") needs, per row and level h, the two S×S products
φ'_hφ'_hᵀ and φ_hφ_hᵀ (2H per row; at σ_1 = 0 the second has weight 0 and is skipped, so 2H − 1 are computed).
The bound is the same-run OpenBLAS ``dsyrk`` rate on the kernel's block shape, all cores,
divided by 2H. Both passes run on the threaded scheduler over the same in-memory array.
Usage: python benchmarks/ncfd_pass.py [--rows 300000] [--levels 10]
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np


def main() -> None:
    import dask
    import dask.array as da

    try:
        from benchmarks.stats_pass import syrk_rows_per_second
    except ImportError:  # run as a script: benchmarks/ is on sys.path
        from stats_pass import syrk_rows_per_second
    from tgpflow import RandomFourierFeatures
    from tgpflow.core.engine import accumulate
    from tgpflow.core.memory import DEFAULT_BLOCK_BYTES
    from tgpflow.features.noise import noise_levels
    from tgpflow.io.sources import as_source
    from tgpflow.stats.ncfd import ncfd_chunk_stats
    from tgpflow.stats.tgp import block_rows_for, tgp_chunk_stats

    p = argparse.ArgumentParser()
    p.add_argument("--rows", type=int, default=300_000)
    p.add_argument("--dims", type=int, default=7)
    p.add_argument("--features", type=int, default=1000)
    p.add_argument("--chunks", type=int, default=8, help="row chunks (tasks) of the in-memory array")
    p.add_argument("--levels", type=int, default=10)
    args = p.parse_args()
    N, d, S, H = args.rows, args.dims, args.features, args.levels
    block = block_rows_for(S, d, DEFAULT_BLOCK_BYTES)
    peak = syrk_rows_per_second(S, block)
    bound = peak / (2 * H)
    print(f"SYRK peak: {peak:,.0f} products·rows/s → bound for 2H = {2 * H} products per row: {bound:,.0f} rows/s")
    X = np.random.default_rng(1).normal(size=(N, d))
    Xd = da.from_array(X, chunks=(-(-N // args.chunks), d))  # one task per chunk: both cores busy
    f = RandomFourierFeatures.draw(S, bandwidth=0.4, n_dims=d, shift=np.zeros(d), random_state=0)
    sig = noise_levels(np.sqrt(d) / d, H)
    with dask.config.set(scheduler="threads"):
        accumulate(as_source(X[:20_000]), tgp_chunk_stats, f)  # compile the kernel
        t = time.perf_counter()
        accumulate(as_source(Xd), tgp_chunk_stats, f)
        t_fd = time.perf_counter() - t
        t = time.perf_counter()
        accumulate(as_source(Xd), ncfd_chunk_stats, f, sig)
        t_nc = time.perf_counter() - t
    rate = N / t_nc
    out = {"rows": N, "d": d, "S": S, "H": H, "syrk_peak_rows_s": round(peak), "bound_2H_rows_s": round(bound),
           "ncfd_rows_s": round(rate), "ratio_to_2H_bound": round(rate / bound, 3),
           "ratio_to_(2H-1)_bound": round(rate / (peak / (2 * H - 1)), 3),
           "fd_seconds": round(t_fd, 2), "ncfd_seconds": round(t_nc, 2), "ncfd_over_fd_time": round(t_nc / t_fd, 2)}
    print(f"NCFD pass: {rate:,.0f} rows/s = {rate / bound:.2f} of the 2H-product bound; "
          f"FD {t_fd:.1f} s vs NCFD {t_nc:.1f} s (×{t_nc / t_fd:.1f}; the paper reports ≈ H = {H})")
    print(json.dumps(out))


if __name__ == "__main__":
    main()
