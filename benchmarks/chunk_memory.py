"""Planned vs measured peak memory of one chunk task (issue 16, "Memory").

For FD (S = 1000), NCFD (S = 1000, H = 4 and H = 10) and NKEF (m = 100, d = 10), at budgets
for the per-row part (``block_bytes``) of 1, 64 and 256 MiB: the planner's rows per block and
planned peak (:func:`tgpflow.core.memory.plan_blocks`), and the peak that :mod:`tracemalloc` sees while
the chunk function runs (NumPy's allocations; the chunk itself is allocated before). Prints
planned, measured and measured/planned. The chunk holds enough rows for the largest budget's
block. Usage: python benchmarks/chunk_memory.py [--quick]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from tgpflow.core.memory import plan_blocks, traced_peak
from tgpflow.features.noise import noise_levels
from tgpflow.features.nystrom import NystromBasis
from tgpflow.features.rff import RandomFourierFeatures
from tgpflow.stats.kef import kef_chunk_stats, kef_memory
from tgpflow.stats.ncfd import ncfd_chunk_stats, ncfd_memory
from tgpflow.stats.tgp import tgp_chunk_stats, tgp_memory

MIB = 2**20


def cases(quick: bool) -> list[tuple[str, object, object, tuple, int]]:
    """(name, chunk function, cost, arguments after the rows, d) for each statistics kind."""
    rng = np.random.default_rng(0)
    S = 200 if quick else 1000
    d = 7
    feats = RandomFourierFeatures.draw(S, bandwidth=1.0, n_dims=d, random_state=0)
    out = [(f"FD S={S}", tgp_chunk_stats, tgp_memory(feats), (feats,), d)]
    for H in (4, 10):
        sig = noise_levels(1.0, H)
        out.append((f"NCFD S={S} H={H}", ncfd_chunk_stats, ncfd_memory(feats, H), (feats, sig), d))
    m, dk = (30, 5) if quick else (100, 10)
    basis = NystromBasis(rng.normal(size=(m, dk)), bandwidth=2.0 * dk)
    out.append((f"NKEF m={m} d={dk}", kef_chunk_stats, kef_memory(basis), (basis,), dk))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--quick", action="store_true", help="small sizes (a smoke run)")
    args = ap.parse_args()
    budgets = [1 * MIB, 4 * MIB] if args.quick else [1 * MIB, 64 * MIB, 256 * MIB]
    rng = np.random.default_rng(1)
    print(f"{'kind':<20} {'block_bytes':>11} {'rows':>7} {'fixed MiB':>9} {'planned MiB':>11} "
          f"{'measured MiB':>12} {'measured/planned':>16} {'s':>6}")
    for name, fn, cost, fargs, d in cases(args.quick):
        for bb in budgets:
            rows = plan_blocks(cost, bb).rows
            x = rng.normal(size=(max(2 * rows, 64), d))  # at least two blocks
            fn(x[:8], *fargs, block_bytes=bb)  # warm: compiled kernels, cached frequencies and phases
            plan = plan_blocks(cost, bb, chunk_rows=x.shape[0])
            t0 = time.perf_counter()
            _, peak = traced_peak(fn, x, *fargs, block_bytes=bb)
            secs = time.perf_counter() - t0
            print(f"{name:<20} {bb // MIB:>8} MiB {plan.rows:>7} {cost.fixed / MIB:>9.1f} "
                  f"{plan.planned / MIB:>11.1f} {peak / MIB:>12.1f} {peak / plan.planned:>16.2f} {secs:>6.1f}")


if __name__ == "__main__":
    main()
