"""Issue 44 item 4: what the ν-method's λ means here and in kscore, on the three peer sets of
benchmarks/kernel_ridge.py (ring, banana, grid5: n = 500 training rows, 2000 test rows, the same σ_k).

Both libraries run the full-sample ν-method of [Zhou et al.] (docs/mathematics.md, "Score estimators on a Nyström
basis", full-sample iterations): t = ⌊λ^−½⌋ steps of w_k = w_{k−1} + u_k(w_{k−1} − w_{k−2}) − ω_k(ζ̂ + L̂w_{k−1})/ρ.
They differ in ρ. kscore's ``NuEstimator`` divides by nothing (ρ = 1, in the kernel's own units: its iteration
diverges where ‖K/M‖ > 1 and regularises more where ‖K/M‖ < 1); tgpflow takes ρ = 1.05‖T‖ (T = K/M, by Lanczos),
so that its t steps are t steps on every data set whatever its scale. The ν-method's filter after t steps with
step 1/ρ is a polynomial in σ/ρ that cuts the spectrum near σ ≈ ρ/t², so the same cut needs
t_tgpflow = t_kscore·√ρ, i.e. ``lam_tgpflow = lam_kscore / rho`` (``solver_info_["rho"]``).

For each set this prints the relative score error ‖ŝ − ∇log p‖/‖∇log p‖ on the test rows of

* **peer**: kscore's iteration (ρ = 1) in plain NumPy on the dense nd × nd Gram, at the issue's t = 32 (kscore's
  ``NuEstimator(iternum=32)``; its ``lam=1/32²`` would run 33 steps) and at its best t of {4, …, 256} (an oracle:
  chosen on the test rows);
* **same λ**: ``ScoreEstimator.preset("nu_method", lam=1/32²).fit(X, basis=X)``;
* **converted**: the same call at ``lam = (1/32²)/rho``, ρ from the same-λ fit's ``solver_info_``;
* **step=1**: the same call at λ = 1/32² with ``step=1.0``, kscore's ρ (refused where ‖T‖ > 1: NaN here);
* **auto**: ``lam="auto"`` (held-out selection on the estimator's own validation rows, no test data).

The NumPy iteration run at tgpflow's ρ is checked against the library's fit first (the "check" column: the largest
relative difference of the two scores), so that the columns differ in ρ and nothing else.
Usage: python benchmarks/nu_convention.py [--n 500] [--test 2000]
"""

from __future__ import annotations

import argparse
import json
import math
import time
import warnings

import numpy as np

from benchmarks.kernel_ridge import BANDWIDTH, _k, _kcf, dataset

PEER_T = 32
PEER_GRID = (4, 8, 16, 23, 32, 45, 64, 91, 128, 181, 256)


class PeerNu:
    """kscore's full-sample ν-method on the dense Gram, ρ given (kscore: 1): ŝ = aζ̂ + Σ_m K(·, x_m)c_m with
    a_1 = −ω_1/ρ, c_1 = 0 and the recursion of the module docstring (docs/mathematics.md, full-sample iterations)."""

    def __init__(self, X: np.ndarray, s: float):
        self.X, self.s = X, s
        n = X.shape[0]
        self.K = _kcf(X, X, s)  # (n·d, n·d)
        self.h = self.zeta(X).reshape(-1)  # ζ̂ at the rows
        self.norm = float(np.linalg.eigvalsh(self.K / n)[-1])

    def zeta(self, x: np.ndarray) -> np.ndarray:
        """ζ̂(x) = (1/M) Σ_m (4/σ²) k(x, x_m)(d + 2 − (2/σ)‖x − x_m‖²)(x − x_m), (len(x), d)."""
        k, r = _k(x, self.X, self.s)
        u = np.sum(r * r, axis=2)
        d = x.shape[1]
        return (4 / self.s**2) * np.einsum("ab,abi->ai", k * (d + 2 - (2 / self.s) * u), r) / self.X.shape[0]

    def fit(self, t: int, rho: float, nu: float = 1.0) -> tuple[float, np.ndarray]:
        n = self.X.shape[0]
        om1 = (4 * nu + 2) / (4 * nu + 1)  # ω_1
        a_prev, a = 0.0, -om1 / rho
        c_prev, c = np.zeros_like(self.h), np.zeros_like(self.h)
        for k in range(2, t + 1):
            u = ((k - 1) * (2 * k - 3) * (2 * k + 2 * nu - 1)
                 / ((k + 2 * nu - 1) * (2 * k + 4 * nu - 1) * (2 * k + 2 * nu - 3)))
            om = 4 * (2 * k + 2 * nu - 1) * (k + nu - 1) / ((k + 2 * nu - 1) * (2 * k + 4 * nu - 1))
            step = (a * self.h + self.K @ c) / (n * rho)
            a, a_prev = a + u * (a - a_prev) - om / rho, a
            c, c_prev = c + u * (c - c_prev) - om * step, c
        return a, c

    def score(self, fitted: tuple[float, np.ndarray], x: np.ndarray) -> np.ndarray:
        a, c = fitted
        return a * self.zeta(x) + (_kcf(x, self.X, self.s) @ c).reshape(x.shape)


def main() -> None:
    from tgpflow import ScoreEstimator
    from tgpflow.features.kernels import median_heuristic

    p = argparse.ArgumentParser()
    p.add_argument("--n", type=int, default=500)
    p.add_argument("--test", type=int, default=2000)
    p.add_argument("--datasets", nargs="+", default=["ring", "banana", "grid5"])
    args = p.parse_args()
    warnings.simplefilter("ignore")  # the diagnostics of deliberately under-regularised peer fits
    lam = 1.0 / PEER_T**2
    results, t_all = {}, time.perf_counter()
    print(f"relative score error ‖ŝ − ∇log p‖/‖∇log p‖ on {args.test} test rows (n = {args.n}); the peer is kscore's "
          f"ν-method (ρ = 1), tgpflow's is ρ = 1.05‖K/M‖")
    print(f"{'data':7s} {'‖K/M‖':>7s} {'peer t=32':>9s} {'peer best':>9s} {'(t)':>5s} {'same λ':>8s} {'converted':>9s}"
          f" {'(t)':>5s} {'step=1':>8s} {'auto':>8s} {'(t)':>5s} {'auto/peer32':>11s} {'auto/best':>9s}"
          f" {'conv/peer32':>11s} {'check':>8s}")
    for name in args.datasets:
        X, Xt, St = dataset(name, args.n, args.test)
        s = BANDWIDTH[name] * median_heuristic(X)

        def err(pred: np.ndarray) -> float:
            return float(np.linalg.norm(pred - St) / np.linalg.norm(St))

        peer = PeerNu(X, s)
        peer_errors = {t: err(peer.score(peer.fit(t, 1.0), Xt)) for t in PEER_GRID}
        best_t = min(peer_errors, key=lambda t: peer_errors[t] if np.isfinite(peer_errors[t]) else np.inf)

        def fit(value: float | str):
            return ScoreEstimator.preset("nu_method", lam=value, bandwidth=s).fit(X, basis=X)

        same = fit(lam)
        rho = float(same.solver_info_["rho"])
        check = float(np.max(np.abs(same.grad_log_density(Xt) - peer.score(peer.fit(PEER_T, rho), Xt)))
                      / np.max(np.abs(same.grad_log_density(Xt))))
        conv = fit(lam / rho)
        ks_step = (ScoreEstimator.preset("nu_method", lam=lam, bandwidth=s, step=1.0).fit(X, basis=X)
                   if peer.norm <= 1.0 else None)  # ρ = 1 below ‖T‖: refused (check_step)
        t0 = time.perf_counter()
        auto = fit("auto")
        auto_s = time.perf_counter() - t0
        row = {"sigma_k": s, "norm_K_over_M": peer.norm, "rho": rho, "peer_t32": peer_errors[PEER_T],
               "peer_best": peer_errors[best_t], "peer_best_t": best_t, "peer_errors": peer_errors,
               "same_lam": err(same.grad_log_density(Xt)), "converted": err(conv.grad_log_density(Xt)),
               "converted_t": conv.solver_info_["iterations"],
               "step_1": err(ks_step.grad_log_density(Xt)) if ks_step else math.nan,
               "auto": err(auto.grad_log_density(Xt)),
               "auto_lam": auto.lam_, "auto_t": int(np.floor(auto.lam_**-0.5)), "auto_seconds": auto_s,
               "check": check}
        results[name] = row
        print(f"{name:7s} {peer.norm:7.3f} {row['peer_t32']:9.4f} {row['peer_best']:9.4f} {best_t:5d} "
              f"{row['same_lam']:8.4f} {row['converted']:9.4f} {row['converted_t']:5d} {row['step_1']:8.4f} "
              f"{row['auto']:8.4f} "
              f"{row['auto_t']:5d} {row['auto'] / row['peer_t32']:11.3f} {row['auto'] / row['peer_best']:9.3f} "
              f"{row['converted'] / row['peer_t32']:11.3f} {check:8.1e}", flush=True)
    print(f"total {time.perf_counter() - t_all:.1f} s")
    print(json.dumps(results, default=float))


if __name__ == "__main__":
    main()
