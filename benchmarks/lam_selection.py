"""Cost of held-out λ selection from validation statistics vs one pass (target < 5%).

One split pass (train/validation by row hash) over N rows, then λ scored on a 20-value grid
from the validation statistics (one eigendecomposition, O(S²) per value; ``GridScorer``).
Compared with the plain pass over the same rows in the same run; the split pass itself is
also timed against the plain one (it should cost the same: every row goes to one part).
Usage: python benchmarks/lam_selection.py [--rows 1000000]
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np


def main() -> None:
    import dask
    import dask.array as da

    from tgpflow import GPTiltedDensity, RandomFourierFeatures
    from tgpflow.core.engine import accumulate
    from tgpflow.io.sources import as_source
    from tgpflow.stats.tgp import tgp_chunk_stats

    p = argparse.ArgumentParser()
    p.add_argument("--rows", type=int, default=1_000_000)
    p.add_argument("--dims", type=int, default=7)
    p.add_argument("--features", type=int, default=1000)
    p.add_argument("--chunks", type=int, default=8, help="row chunks (tasks) of the in-memory array")
    p.add_argument("--grid", type=int, default=20)
    args = p.parse_args()
    N, d, S = args.rows, args.dims, args.features
    rng = np.random.default_rng(1)
    X = np.concatenate([rng.normal(-1, 0.5, size=(N // 2, d)), rng.normal(1, 1.0, size=(N - N // 2, d))])
    Xd = da.from_array(X, chunks=(-(-N // args.chunks), d))  # one task per chunk: both cores busy
    f = RandomFourierFeatures.draw(S, bandwidth=0.4, n_dims=d, shift=X[:1000].mean(0), random_state=0)
    grid = list(np.logspace(-4, 2, args.grid))
    with dask.config.set(scheduler="threads"):
        accumulate(as_source(X[:20_000]), tgp_chunk_stats, f)  # compile the kernel
        t = time.perf_counter()
        accumulate(as_source(Xd), tgp_chunk_stats, f)
        t_pass = time.perf_counter() - t
        est = GPTiltedDensity(method="fd", n_features=S, lam="auto", lam_grid=grid)
        t = time.perf_counter()
        bundle = est.accumulate(Xd, features=f)
        t_split = time.perf_counter() - t
    t = time.perf_counter()
    est.fit_from_stats(bundle)
    t_select_and_solve = time.perf_counter() - t
    t = time.perf_counter()
    GPTiltedDensity(method="fd", n_features=S, lam=est.lam_).fit_from_stats(bundle[("train", f.gamma)] + bundle[("val", f.gamma)], f)
    t_solve = time.perf_counter() - t
    t_select = t_select_and_solve - t_solve
    out = {"rows": N, "S": S, "grid": len(grid), "pass_seconds": round(t_pass, 2), "split_pass_seconds": round(t_split, 2),
           "selection_seconds": round(t_select, 3), "selection_over_pass": round(t_select / t_pass, 4),
           "split_pass_over_pass": round(t_split / t_pass, 3), "chosen_lam": est.lam_}
    print(f"pass {t_pass:.1f} s, split pass {t_split:.1f} s (×{t_split / t_pass:.2f}); λ selection over {len(grid)} "
          f"values {t_select:.2f} s = {100 * t_select / t_pass:.1f}% of one pass (target < 5%)")
    print(json.dumps(out))


if __name__ == "__main__":
    main()
