"""Scoring throughput of fitted GP-tilted densities against the hardware floor (issue 20).

Fits FD, NCFD and FVPD (fixed λ and γ, S = 1000) on ``--fit-rows`` rows of the demo mixture and times
``log_density`` (= ``score_samples``) and ``grad_log_density`` on ``--rows`` in-memory NumPy rows, and
``log_density`` on the same rows as a dask array on the threaded scheduler with ``--threads`` threads.
In the same run it measures the floors:

* the fused float64 sin/cos kernel's (sin, cos) pairs/s on all ``--threads`` cores (one kernel call per thread on
  its own arrays): FD/NCFD need rows·S pairs, so their floor is rows·S / rate;
* DGEMM GFLOP/s on the FVPD shape (S×S)·(S×block) with OpenBLAS's own threads: FVPD's floor is one S×S product
  per row, 2·S²·rows flops / rate (a triangular solve needs half of that, so its ratio may be below 1).

Ratios are ``seconds / floor seconds`` (1 is the floor). On a shared machine compare the ratios of one run, not
seconds across runs. Prints a table on stderr and one JSON line on stdout.
Usage: python benchmarks/scoring.py [--rows 1000000] [--fit-rows 100000] [--methods fd,ncfd,fvpd]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np


def sincos_pairs_per_second(S: int, threads: int, rows: int = 4096, repeats: int = 5) -> float:
    """(sin, cos) pairs/s of the compiled kernel on ``threads`` threads (all busy at once)."""
    from tgpflow.features.sincos import sincos_rows

    rng = np.random.default_rng(0)
    angle = [rng.uniform(-20, 20, size=(S, rows)) for _ in range(threads)]
    phase = rng.uniform(0, 2 * np.pi, size=S)
    outs = [(np.empty((S, rows)), np.empty((S, rows))) for _ in range(threads)]

    def work(i: int) -> None:
        for _ in range(repeats):
            sincos_rows(angle[i], phase, *outs[i])

    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(work, range(threads)))  # compile, warm
        t = time.perf_counter()
        list(pool.map(work, range(threads)))
        dt = time.perf_counter() - t
    return threads * repeats * S * rows / dt


def dgemm_flops(S: int, cols: int, repeats: int = 5) -> float:
    """FLOP/s of an (S×S)·(S×cols) DGEMM (OpenBLAS's threads)."""
    rng = np.random.default_rng(0)
    A, B = rng.standard_normal((S, S)), rng.standard_normal((S, cols))
    out = np.empty((S, cols))
    np.matmul(A, B, out=out)
    t = time.perf_counter()
    for _ in range(repeats):
        np.matmul(A, B, out=out)
    return repeats * 2.0 * S * S * cols / (time.perf_counter() - t)


def main() -> None:
    import dask
    import dask.array as da

    from tgpflow import GPTiltedDensity
    from tgpflow.io.demo_data import mixture_rows

    p = argparse.ArgumentParser()
    p.add_argument("--rows", type=int, default=1_000_000)
    p.add_argument("--fit-rows", type=int, default=100_000)
    p.add_argument("--features", type=int, default=1000)
    p.add_argument("--methods", default="fd,ncfd,fvpd")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--chunks", type=int, default=8, help="row chunks of the dask array")
    p.add_argument("--no-grad", action="store_true", help="skip grad_log_density")
    args = p.parse_args()
    S, N = args.features, args.rows
    X = mixture_rows(args.fit_rows, np.random.default_rng(0))
    Y = mixture_rows(N, np.random.default_rng(1))
    Yd = da.from_array(Y, chunks=(-(-N // args.chunks), Y.shape[1]))
    load = os.getloadavg()
    results = []
    for method in args.methods.split(","):
        t = time.perf_counter()
        est = GPTiltedDensity(method=method, n_features=S, lam=1.0, bandwidth=0.5, noise_levels=10,
                              normalizer_draws=2000, random_state=0).fit(X)
        fit_s = time.perf_counter() - t
        est.log_density(Y[:5000])  # compile, warm
        est.grad_log_density(Y[:500])
        # the floors, measured now (the machine may be shared: the ratio is what compares)
        pairs = sincos_pairs_per_second(S, args.threads)
        flops = dgemm_flops(S, 2790)
        floor = N * S / pairs if method != "fvpd" else 2.0 * S * S * N / flops
        timings = {}
        t = time.perf_counter()
        ref = est.log_density(Y)
        timings["log_density numpy"] = time.perf_counter() - t
        with dask.config.set(scheduler="threads", num_workers=args.threads):
            t = time.perf_counter()
            lazy = est.log_density(Yd).compute()
            timings["log_density dask"] = time.perf_counter() - t
        assert np.allclose(lazy, ref, rtol=0, atol=1e-10 * np.abs(ref).max())
        if not args.no_grad:
            t = time.perf_counter()
            est.grad_log_density(Y)
            timings["grad_log_density numpy"] = time.perf_counter() - t
        for what, sec in timings.items():
            results.append({"method": method, "what": what, "rows": N, "seconds": round(sec, 3),
                            "rows_per_s": round(N / sec), "floor_s": round(floor, 3), "ratio": round(sec / floor, 2),
                            "sincos_pairs_per_s": round(pairs), "dgemm_gflops": round(flops / 1e9, 1),
                            "fit_s": round(fit_s, 1)})
        print(f"{method}: fit {fit_s:.1f} s; floor {floor:.2f} s (sincos {pairs / 1e9:.2f} G pairs/s, "
              f"DGEMM {flops / 1e9:.0f} GFLOP/s)", file=sys.stderr, flush=True)
    print(f"{'method':6} {'what':24} {'seconds':>8} {'rows/s':>10} {'floor s':>8} {'ratio':>6}", file=sys.stderr)
    for r in results:
        print(f"{r['method']:6} {r['what']:24} {r['seconds']:8.2f} {r['rows_per_s']:10,} {r['floor_s']:8.2f} "
              f"{r['ratio']:6.2f}", file=sys.stderr)
    print(json.dumps({"rows": N, "fit_rows": args.fit_rows, "S": S, "threads": args.threads,
                      "loadavg_before": [round(v, 2) for v in load], "loadavg_after": [round(v, 2) for v in os.getloadavg()],
                      "results": results}))


if __name__ == "__main__":
    main()
