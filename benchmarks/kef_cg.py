"""KEF-CG (structured O(n²d) mat-vec, never forming G) vs the direct full-KEF solve: time and accuracy.

The direct solve factors the nd × nd system: memory O(n²d²), time O(n³d³) — the cost the
seeds report. It is timed where it fits (``--direct-n``, default 1000 at d = 20: nd = 20 000,
3.2 GB a matrix); KEF-CG runs there too (accuracy: relative difference of the scores on test
points) and at the issue's n = 5000, d = 20 (nd = 100 000: the direct system would need
80 GB for G alone). Usage: python benchmarks/kef_cg.py [--n 5000] [--direct-n 1000]
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np


def main() -> None:
    from tgpflow.models.full_kef import FullKEF

    p = argparse.ArgumentParser()
    p.add_argument("--n", type=int, default=5000)
    p.add_argument("--direct-n", type=int, default=1000)
    p.add_argument("--dims", type=int, default=20)
    args = p.parse_args()
    d = args.dims
    rng = np.random.default_rng(0)
    centers = rng.choice([-1.0, 1.0], size=(4, d))
    Xall = centers[rng.integers(0, 4, args.n)] + rng.normal(0, 0.7, (args.n, d))
    test = centers[rng.integers(0, 4, 500)] + rng.normal(0, 0.7, (500, d))
    kw = dict(bandwidth=float(2 * d), lam=1e-3, cg_tol=1e-8)
    out = {}
    X = Xall[:args.direct_n]
    t = time.perf_counter()
    direct = FullKEF(solver="direct", **kw).fit(X)
    t_direct = time.perf_counter() - t
    t = time.perf_counter()
    cg = FullKEF(solver="cg", **kw).fit(X)
    t_cg = time.perf_counter() - t
    ref = direct.grad_log_density(test)
    rel = float(np.linalg.norm(cg.grad_log_density(test) - ref) / np.linalg.norm(ref))
    nd = args.direct_n * d
    out[f"n={args.direct_n}"] = {"nd": nd, "direct_seconds": round(t_direct, 1), "cg_seconds": round(t_cg, 1),
                                 "cg_vs_direct_score_rel_diff": rel, "direct_matrix_gib": round(8 * nd * nd / 2**30, 2)}
    print(f"n = {args.direct_n}, d = {d} (nd = {nd}): direct {t_direct:.1f} s ({8 * nd * nd / 2**30:.1f} GiB a matrix), "
          f"KEF-CG {t_cg:.1f} s ({cg.solver_info_}), score rel. difference {rel:.2e}", flush=True)
    if args.n > args.direct_n:
        t = time.perf_counter()
        big = FullKEF(solver="cg", **kw).fit(Xall)
        t_big = time.perf_counter() - t
        nd = args.n * d
        scale = (args.n / args.direct_n) ** 3
        out[f"n={args.n}"] = {"nd": nd, "cg_seconds": round(t_big, 1), "cg_exit": big.solver_info_["cg_exit"],
                              "direct_would_need_gib": round(8 * nd * nd / 2**30, 1),
                              "direct_extrapolated_seconds": round(t_direct * scale)}
        print(f"n = {args.n}, d = {d} (nd = {nd}): KEF-CG {t_big:.1f} s; the direct solve would need "
              f"{8 * nd * nd / 2**30:.0f} GiB for G and ≈ {t_direct * scale / 3600:.1f} h (n³ scaling)")
    print(json.dumps(out))


if __name__ == "__main__":
    main()
