"""Do GP-tilted fits put mass where there are no data? The demo mixture at 200k and 2M rows.

For each method (FD, NCFD, FVPD; MAP with ``--methods fd,ncfd,fvpd,map``) and each λ rule — the defaults (γ and λ
selected on held-out rows, ``criterion="sliced"``), the held-out log-likelihood criterion, and the paper's
fixed settings (λ = 0.1, Scott's γ, σ_max = √trΣ/d) — fit the demo's 3-D mixture
(``tgpflow.io.demo_data.make_dataset``'s generator) at 200k and 2M rows and print, against 20 000 held-out
rows: the model's normalised mass outside the training box (and the limit), the ESS of its base
proposals, the held-out log-likelihood, the sample check (sliced KS of 20 000 resampled rows, beside
two halves of the data; mean error; spread ratio) and the fit time. The last table compares each
method's 2M fit with its 200k fit: the larger fit must be at least as close to the held-out rows. The
sample KS of 10 000 draws is itself noisy (its floor is the two halves' KS), so the comparison also
gives the paired difference of the held-out log-likelihoods on the same 20 000 rows with its standard
error (per-row differences, plus the two normalisers' standard errors), the sharper of the two tests.

The "mixture" rule is the defaults on a Gaussian mixture base (``base="mixture"``, the default base), and the
"gaussian" rule the defaults on one Gaussian (``base="empirical"``, the default before the mixture): their fit
times' ratio is the mixture base's cost, printed per method (each rule's fit time over the first rule's, in the
same run). Before any timing, every rule fits the held-out rows once, untimed, so that no rule pays the imports
and the first start of Dask's thread pool; ``--repeats R`` times each fit R times and reports the median.

Usage: python benchmarks/demo_mixture.py [--sizes 200000,2000000] [--methods fd,ncfd,fvpd]
       [--rules default,loglik,paper] [--repeats 1]
"""

from __future__ import annotations

import argparse
import json
import time
import warnings

import numpy as np


def mixture(n: int, seed: int) -> np.ndarray:
    """The demo's generator (tgpflow.io.demo_data.mixture_rows), in memory."""
    from tgpflow.io.demo_data import mixture_rows

    return mixture_rows(n, np.random.default_rng(seed))


RULES = {
    "default": {},
    "loglik": {"criterion": "loglik"},
    "paper": {"lam": 0.1, "bandwidth": "scott", "sigma_max": "paper"},
    "mixture": {"base": "mixture"},
    "gaussian": {"base": "empirical"},
}


def main() -> None:
    from tgpflow import GPTiltedDensity
    from tgpflow.metrics import heldout_loglik, sample_check

    p = argparse.ArgumentParser()
    p.add_argument("--sizes", default="200000,2000000")
    p.add_argument("--methods", default="fd,ncfd,fvpd")
    p.add_argument("--rules", default="default,loglik,paper")
    p.add_argument("--repeats", type=int, default=1)
    args = p.parse_args()
    test = mixture(20_000, 1)
    with warnings.catch_warnings():  # untimed: the imports and the thread pool's start are no rule's cost
        warnings.simplefilter("ignore")
        for rule in args.rules.split(","):
            GPTiltedDensity(method="fd", random_state=0, **RULES[rule]).fit(test)
    results = []
    per_row: dict[tuple[int, str, str], tuple[np.ndarray, float]] = {}
    for n in [int(v) for v in args.sizes.split(",")]:
        X = mixture(n, 0)
        for method in args.methods.split(","):
            for rule in args.rules.split(","):
                times = []
                for _ in range(max(1, args.repeats)):
                    t = time.perf_counter()
                    with warnings.catch_warnings(record=True) as caught:
                        warnings.simplefilter("always")
                        est = GPTiltedDensity(method=method, random_state=0, **RULES[rule]).fit(X)
                    times.append(time.perf_counter() - t)
                fit_s = float(np.median(times))
                d = est.fit_diagnostics_
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    check = sample_check(est, test, n_samples=10_000, max_ks=0.04)
                row = {"n": n, "method": method, "rule": rule, "fit_s": round(fit_s, 2),
                       "fit_times": [round(t, 2) for t in times],
                       "gamma": round(est.bandwidth_, 4), "lam": est.lam_,
                       "mass_outside": round(d["mass_outside"], 4), "limit": round(d["mass_outside_limit"], 4),
                       "ess_fraction": round(d["ess_fraction"], 4),
                       "heldout_loglik": round(heldout_loglik(est, test), 4),
                       "sample_ks": round(100 * check.ks_median, 2), "data_ks": round(100 * check.ks_data, 2),
                       "mean_err": round(float(np.abs(check.mean_error).max()), 3),
                       "spread": [round(float(check.spread_ratio.min()), 3), round(float(check.spread_ratio.max()), 3)],
                       "sample_ess": round(100 * (check.ess_fraction or 0), 3), "passed": check.passed,
                       "warnings": len([w for w in caught if "Diagnostic" in type(w.message).__name__])}
                per_row[(n, method, rule)] = (est.log_density(test, normalized=True), est.normalizer_.std_error)
                results.append(row)
                print(json.dumps(row), flush=True)
    print("\nn        method rule     γ       λ        outside (limit)   ESS    LL       KS×10⁻² (data)  "
          "mean err  spread        pass  fit s")
    for r in results:
        print(f"{r['n']:<8d} {r['method']:6s} {r['rule']:8s} {r['gamma']:.3f} {r['lam']:<8.3g} "
              f"{100 * r['mass_outside']:6.2f}% ({100 * r['limit']:4.1f}%) {100 * r['ess_fraction']:5.1f}% "
              f"{r['heldout_loglik']:8.4f} {r['sample_ks']:5.2f} ({r['data_ks']:4.2f})    {r['mean_err']:.3f}     "
              f"{r['spread'][0]:.3f}–{r['spread'][1]:.3f}  {'yes' if r['passed'] else 'NO ':4s} {r['fit_s']:6.1f}")
    rules = args.rules.split(",")
    if len(rules) > 1:
        print(f"\nfit time over the {rules[0]!r} rule's, same run (median of {max(1, args.repeats)})")
        for r in results:
            first = [f for f in results if f["n"] == r["n"] and f["method"] == r["method"] and f["rule"] == rules[0]]
            if r["rule"] != rules[0] and first:
                print(f"  {r['n']:<8d} {r['method']:6s} {r['rule']:8s} {r['fit_s']:6.1f} s / "
                      f"{first[0]['fit_s']:6.1f} s = {r['fit_s'] / first[0]['fit_s']:.2f}×")
    sizes = sorted({r["n"] for r in results})
    if len(sizes) > 1:
        print(f"\ngetting worse with N? (sample KS and held-out LL at {sizes[0]} vs {sizes[-1]} rows)")
        for r_small in (r for r in results if r["n"] == sizes[0]):
            big = [r for r in results if r["n"] == sizes[-1] and r["method"] == r_small["method"]
                   and r["rule"] == r_small["rule"]]
            if big:
                b = big[0]
                (ll_s, se_s), (ll_b, se_b) = (per_row[(r["n"], r["method"], r["rule"])] for r in (r_small, b))
                diff = ll_b - ll_s
                se = float(np.sqrt(diff.var(ddof=1) / diff.size + se_s**2 + se_b**2))
                print(f"  {r_small['method']:5s} {r_small['rule']:8s} "
                      f"KS {r_small['sample_ks']:.2f} → {b['sample_ks']:.2f}, "
                      f"LL {r_small['heldout_loglik']:.4f} → {b['heldout_loglik']:.4f} "
                      f"(paired difference {diff.mean():+.4f} ± {se:.4f} nats/row)")


if __name__ == "__main__":
    main()
