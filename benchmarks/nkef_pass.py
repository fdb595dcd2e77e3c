"""Nyström KEF pass throughput vs the same-run GEMM (SYRK) bound; wall time and peak memory.

Per row the curl-free statistics need ``C += B(x)ᵀB(x)`` with B(x) of shape d × md: in blocks,
one SYRK of the stacked (rows·d × md) matrix. The bound is OpenBLAS ``dsyrk`` on exactly that
shape, all cores, converted to rows/s. The issue's size is n = 10⁶, d = 10, m = 500 (md = 5000):
at the measured rate that pass takes hours on 2 cores, so the default runs ``--rows 20000``
and prints the extrapolated time for 10⁶ rows (the pass is linear in n; the solve is not in it).
Peak memory is the process RSS high-water mark. Usage: python benchmarks/nkef_pass.py [--rows N]
"""

from __future__ import annotations

import argparse
import json
import resource
import time

import numpy as np
import scipy.linalg.blas as blas


def syrk_rows_per_second(k: int, rows_d: int, d: int, repeats: int = 3) -> float:
    a = np.asfortranarray(np.random.default_rng(0).uniform(-1, 1, size=(rows_d, k)))
    c = np.zeros((k, k), order="F")
    blas.dsyrk(1.0, a, beta=1.0, c=c, trans=1, lower=1, overwrite_c=1)
    t = time.perf_counter()
    for _ in range(repeats):
        c = blas.dsyrk(1.0, a, beta=1.0, c=c, trans=1, lower=1, overwrite_c=1)
    return repeats * (rows_d / d) / (time.perf_counter() - t)


def main() -> None:
    import dask
    import dask.array as da

    from tgpflow import NystromKEF
    from tgpflow.core.memory import DEFAULT_BLOCK_BYTES
    from tgpflow.features.nystrom import NystromBasis
    from tgpflow.stats.kef import kef_block_rows

    p = argparse.ArgumentParser()
    p.add_argument("--rows", type=int, default=20_000)
    p.add_argument("--dims", type=int, default=10)
    p.add_argument("--basis", type=int, default=500)
    p.add_argument("--chunks", type=int, default=4)
    args = p.parse_args()
    N, d, m = args.rows, args.dims, args.basis
    rng = np.random.default_rng(0)
    X = rng.normal(size=(N, d))
    basis = NystromBasis(X[:m], float(2 * d), "gaussian", np.zeros(d))
    block = kef_block_rows(basis, DEFAULT_BLOCK_BYTES)
    peak = syrk_rows_per_second(m * d, block * d, d)
    print(f"SYRK bound on ({block}·{d} × {m * d}) blocks, all cores: {peak:,.1f} rows/s "
          f"= {peak * d * (m * d) ** 2 / 1e9:.1f} GFLOP/s")
    Xd = da.from_array(X, chunks=(-(-N // args.chunks), d))
    est = NystromKEF(bandwidth=float(2 * d), lam=1e-3, base="gaussian")
    with dask.config.set(scheduler="threads"):
        t = time.perf_counter()
        stats = est.accumulate(Xd, basis=basis)
        t_pass = time.perf_counter() - t
    t = time.perf_counter()
    est.fit_from_stats(stats, basis)
    t_solve = time.perf_counter() - t
    rate = N / t_pass
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # KiB → GiB
    out = {"rows": N, "d": d, "m": m, "md": m * d, "syrk_bound_rows_s": round(peak, 1), "pass_rows_s": round(rate, 1),
           "ratio_to_bound": round(rate / peak, 3), "pass_seconds": round(t_pass, 1), "solve_seconds": round(t_solve, 1),
           "extrapolated_pass_seconds_1e6_rows": round(1e6 / rate), "peak_rss_gib": round(rss, 2)}
    print(f"pass {rate:,.1f} rows/s = {rate / peak:.2f} of the SYRK bound; pass {t_pass:.1f} s, solve "
          f"(md = {m * d}) {t_solve:.1f} s; 10⁶ rows would take ≈ {1e6 / rate / 3600:.1f} h; peak RSS {rss:.2f} GiB")
    print(json.dumps(out))


if __name__ == "__main__":
    main()
