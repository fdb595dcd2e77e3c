"""Issue 18: time and peak memory of every kernel score preset and NystromKEF at n = 5000, against plain NumPy.

The estimators, data sets, σ_k, basis sizes and the plain-NumPy references are those of
benchmarks/kernel_ridge.py (imported, not copied): ``ring`` (d = 2) and ``grid5`` (d = 5), a basis of
the first m training rows (kernel_ridge's m = 250, 200 for the 5-D curl-free kernel; for d = 2 also
m = 500: ``--basis-2d``), a flat q0, 2000 test points. Each estimator — ScoreEstimator.preset stein, ssge,
nkef, nu_method, landweber and NystromKEF — is fitted on n = 5000 rows at one fixed λ, the best λ of the n = 500 run
(kernel_ridge.py, "new" column: :data:`LAM`), two ways in the same run:

* **library**: ``accumulate(X, basis=Y)`` (the pass: C, h, and the Gaussian-base sums E0, F or S0, S1)
  then ``fit_from_stats`` (the solve; Landweber and the ν-method include the Lanczos estimate of ‖T‖);
* **reference**: kernel_ridge's ``Reference`` — C, h, G from dense kernel blocks (the pass) and the
  paper's solve: Tikhonov by SVD least squares, the cut-off by eigendecompositions of G and of T,
  Landweber and the ν-method on coefficients with G⁺ (pinv). The iterations take the library's fitted
  step ([Zhou et al.]'s code takes the step as a parameter), so both fit the same estimator; the reference does
  not estimate ‖T‖.

Printed: seconds of the pass and of the solve and their sum (the fastest of ``--repeat`` untraced fits,
after one untimed warm-up fit of each on 300 rows), the ratio library/reference of the sums, the peak
memory of each (``tracemalloc``'s peak of NumPy/Python allocations above the start of one more, traced,
fit, MiB; BLAS/LAPACK workspaces are not traced) and the relative difference ‖s_lib − s_ref‖/‖s_ref‖ of the
scores at the test points: "Δs ref" against the reference above, "Δs proj" against the reference's
solve in the form the library uses (``Reference.solve(projected=True)``: the filter on T in G-orthonormal
coordinates, untimed). Where G is numerically singular (the ring's basis; the 5-D curl-free G, rank 995
of 1000) the two reference forms differ in G's numerically null directions (1e-5 to 3e-4 here): the
library agrees with the second to rounding. Then one JSON line.

Usage: OMP_NUM_THREADS=1 python benchmarks/kernel_presets.py [--n 5000] [--basis-2d 250 500] [--repeat 2]
(about two minutes on one core).
"""

from __future__ import annotations

import argparse
import json
import time
import warnings
from typing import Any, Callable

import numpy as np

from benchmarks.kernel_iterative import measured, rel
from benchmarks.kernel_ridge import BANDWIDTH, ESTIMATORS, Reference, basis_size, dataset, estimator

#: λ of each (data set, estimator): the best λ of ``kernel_ridge.py --n 500`` for the library's defaults.
LAM = {"ring": {"stein": 1e-4, "ssge": 1e-4, "nkef": 1e-3, "nu_method": 1e-3, "landweber": 3e-3, "NystromKEF": 1e-3},
       "grid5": {"stein": 1e-3, "ssge": 1e-3, "nkef": 1e-3, "nu_method": 1e-2, "landweber": 1e-2,
                 "NystromKEF": 1e-3}}


def fit_library(label: str, X: np.ndarray, Y: np.ndarray, s: float, lam: float) -> tuple[Any, float, float]:
    """The library's fit as pass + solve: the estimator and the seconds of each."""
    est = estimator(label, s, "flat", lam=lam)
    t0 = time.perf_counter()
    stats = est.accumulate(X, basis=Y)
    t1 = time.perf_counter()
    est.fit_from_stats(stats)
    return est, t1 - t0, time.perf_counter() - t1


def fit_reference(X: np.ndarray, Y: np.ndarray, s: float, kernel: str, reg: str, lam: float,
                  step: float | None) -> tuple[Reference, np.ndarray, float, float]:
    """The reference's fit as pass (C, h, G) + solve: it, the coefficients and the seconds of each."""
    t0 = time.perf_counter()
    ref = Reference(X, Y, s, kernel, "flat")
    t1 = time.perf_counter()
    c = ref.solve(reg, lam, rho=None if step is None else 1.0 / step)  # the step: Landweber's η = 1/ρ
    return ref, c, t1 - t0, time.perf_counter() - t1


def best_of(fn: Callable[[], tuple[Any, ...]], repeat: int) -> tuple[Any, ...]:
    """The result of ``fn`` (…, pass seconds, solve seconds) with the least pass + solve of ``repeat`` untraced
    calls."""
    return min((fn() for _ in range(max(1, repeat))), key=lambda out: out[-2] + out[-1])


def run(name: str, label: str, m: int, X: np.ndarray, Xt: np.ndarray, s: float, repeat: int) -> dict[str, Any]:
    """One estimator: the peaks from a traced fit of each, the seconds from the best of ``repeat`` untraced ones."""
    kernel, reg, _ = ESTIMATORS[label]
    lam = LAM[name][label]
    Y = X[:m]
    (est, *_), _, lib_peak = measured(lambda: fit_library(label, X, Y, s, lam))
    step = est.solver_info_.get("step") if reg in ("landweber", "nu") else None
    (ref, c, *_), _, ref_peak = measured(lambda: fit_reference(X, Y, s, kernel, reg, lam, step))
    _, lib_pass, lib_solve = best_of(lambda: fit_library(label, X, Y, s, lam), repeat)
    *_, ref_pass, ref_solve = best_of(lambda: fit_reference(X, Y, s, kernel, reg, lam, step), repeat)
    info = est.solver_info_
    s_lib, rho = est.grad_log_density(Xt), None if step is None else 1.0 / step
    return {"lam": lam, "n_basis": m, "lib_pass": lib_pass, "lib_solve": lib_solve, "ref_pass": ref_pass,
            "ref_solve": ref_solve, "ratio": (lib_pass + lib_solve) / (ref_pass + ref_solve),
            "lib_peak_mib": lib_peak, "ref_peak_mib": ref_peak,
            "test_rel": rel(s_lib, ref.score(c, Xt)),
            "test_rel_projected": rel(s_lib, ref.score(ref.solve(reg, lam, rho, projected=True), Xt)),
            "solver": {k: info[k] for k in ("method", "iterations", "norm_matvecs", "kept", "rank") if k in info}}


def warm_up(labels: list[str]) -> None:
    """One small fit of each estimator and reference, untimed: imports and first-call costs out of the table."""
    X, _, _ = dataset("ring", 300, 10)
    for label in labels:
        kernel, reg, _ = ESTIMATORS[label]
        est, *_ = fit_library(label, X, X[:50], 1.0, 1e-2)
        fit_reference(X, X[:50], 1.0, kernel, reg, 1e-2, est.solver_info_.get("step"))


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--n", type=int, default=5000)
    p.add_argument("--test", type=int, default=2000)
    p.add_argument("--datasets", nargs="+", default=["ring", "grid5"])
    p.add_argument("--estimators", nargs="+", default=list(ESTIMATORS))
    p.add_argument("--basis-2d", type=int, nargs="+", default=[250, 500], help="basis sizes m for d = 2")
    p.add_argument("--repeat", type=int, default=2, help="untraced fits timed per estimator (the fastest is shown)")
    args = p.parse_args()
    from tgpflow.features.kernels import median_heuristic

    warnings.simplefilter("ignore")
    warm_up(args.estimators)
    t_all = time.perf_counter()
    results: dict[str, Any] = {}
    print(f"n = {args.n} training rows, {args.test} test points, flat q0; seconds pass + solve = fit; tracemalloc peak "
          f"MiB (NumPy/Python allocations; BLAS/LAPACK workspaces are not traced); ‖s_lib − s_ref‖/‖s_ref‖ at "
          f"the test points; λ: the best of kernel_ridge.py --n 500")
    head = (f"{'data':6s} {'estimator':10s} {'m':>4s} {'λ':>6s} | {'library pass':>12s} {'solve':>6s} {'fit':>6s} | "
            f"{'NumPy pass':>10s} {'solve':>6s} {'fit':>6s} | {'lib/ref':>7s} | {'peak lib':>8s} {'ref':>6s} | "
            f"{'Δs ref':>7s} {'Δs proj':>7s} | library solve")
    print(head, flush=True)
    for name in args.datasets:
        X, Xt, _ = dataset(name, args.n, args.test)
        s = BANDWIDTH[name] * median_heuristic(X)
        for label in args.estimators:
            kernel = ESTIMATORS[label][0]
            sizes = args.basis_2d if X.shape[1] == 2 else [basis_size(kernel, X.shape[1])]
            for m in sizes:
                r = run(name, label, m, X, Xt, s, args.repeat)
                r["sigma_k"] = s
                results[f"{name} {label} m={m}"] = r
                print(f"{name:6s} {label:10s} {m:4d} {r['lam']:6.0e} | {r['lib_pass']:12.2f} {r['lib_solve']:6.2f} "
                      f"{r['lib_pass'] + r['lib_solve']:6.2f} | {r['ref_pass']:10.2f} {r['ref_solve']:6.2f} "
                      f"{r['ref_pass'] + r['ref_solve']:6.2f} | {r['ratio']:7.2f} | {r['lib_peak_mib']:8.0f} "
                      f"{r['ref_peak_mib']:6.0f} | {r['test_rel']:7.1e} {r['test_rel_projected']:7.1e} | "
                      f"{r['solver']}", flush=True)
    print(f"total {time.perf_counter() - t_all:.0f} s")
    print(json.dumps(results, default=float))


if __name__ == "__main__":
    main()
