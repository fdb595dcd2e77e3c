"""The Nyström KEF solve at md = 20 000 on CPU in float64: time and memory of the blocked Cholesky.

``tikhonov_direct`` on synthetic SPD C and G of size md (LAPACK's blocked ``dpotrf`` via
``scipy.linalg.solve(assume_a="pos")``), with one BLAS thread from md ≥ 14 000 (the OpenBLAS
0.3.31 multi-threaded SYRK/POTRF segfault, see ``tgpflow.solve.linalg``). Compared with a
same-run single-thread DGEMM rate: the Cholesky's n³/3 flops over that rate is the bound.
Usage: python benchmarks/blocked_solve.py [--size 20000]
"""

from __future__ import annotations

import argparse
import json
import resource
import time

import numpy as np


def main() -> None:
    from threadpoolctl import threadpool_limits

    from tgpflow.solve.kef import tikhonov_direct

    p = argparse.ArgumentParser()
    p.add_argument("--size", type=int, default=20_000)
    args = p.parse_args()
    n = args.size
    with threadpool_limits(1, "blas"):
        a = np.random.default_rng(0).normal(size=(2000, 2000))
        t = time.perf_counter()
        a @ a
        gemm = 2 * 2000**3 / (time.perf_counter() - t)
    rng = np.random.default_rng(1)
    C = np.full((n, n), 0.25)
    C[np.diag_indices(n)] += rng.uniform(1.0, 2.0, n)
    G = np.eye(n)
    h = rng.normal(size=n)
    t = time.perf_counter()
    c, _ = tikhonov_direct(C, h, G, 1000, 1e-3, 1e-5)  # [Sutherland et al.]'s ridge, as the residual below
    dt = time.perf_counter() - t
    resid = float(np.linalg.norm(C @ c / 1000 + 1e-3 * (G @ c) + 1e-5 * c + h / 1000) / np.linalg.norm(h / 1000))
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    bound = n**3 / 3 / gemm
    print(f"md = {n}: Tikhonov solve {dt:.1f} s (single-thread DGEMM bound for n³/3 flops: {bound:.1f} s, "
          f"ratio {bound / dt:.2f}); relative residual {resid:.1e}; peak RSS {rss:.1f} GiB")
    print(json.dumps({"md": n, "seconds": round(dt, 1), "bound_seconds": round(bound, 1), "ratio": round(bound / dt, 3),
                      "residual": resid, "peak_rss_gib": round(rss, 2)}))


if __name__ == "__main__":
    main()
