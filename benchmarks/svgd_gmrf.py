"""[Wang et al.] §4.1: a 10 × 10 grid Gaussian MRF, vanilla vs graphical SVGD vs Langevin vs exact draws.

p(x) ∝ exp(bᵀx − ½xᵀAx) on the 4-neighbourhood grid (d = 100): b_i ~ N(0, 1), A_ij ~ U[−0.1, 0.1]
on the edges, A ← (A + Aᵀ)/2, A_ii = 0.1 + Σ_{j≠i}|A_ij| — a new (A, b) per trial. For n particles:
MSE of the means E x_i and of the second moments E x_i², averaged over the coordinates, and the
MMD² (median-trick RBF) to 2000 exact draws: the V-statistic (the squared RKHS distance between the
particles' empirical law and the draws, ≥ 0) and the unbiased U-statistic. The U-statistic assumes
i.i.d. rows; SVGD particles repel each other, so their U-statistic can be negative. SVGD: AdaGrad (ε = 0.1), h by the
median rule, particles start from N(0, I); Langevin: n ULA chains from the same start, step adapted during
warm-up, the last state of each chain; "exact": n independent draws (the Monte-Carlo reference).
The paper's claim (Fig. 2b): graphical SVGD beats vanilla SVGD on the second moments.
Usage: python benchmarks/svgd_gmrf.py [--trials 3] [--iters 1000] [--particles 20,50,100,200]
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np


def gmrf(rng: np.random.Generator, rows: int = 10, cols: int = 10):
    from tgpflow.sample import grid_graph

    nb = grid_graph(rows, cols)
    d = rows * cols
    raw = rng.uniform(-0.1, 0.1, (d, d))
    A = np.zeros((d, d))
    for i, js in enumerate(nb):
        A[i, js] = raw[i, js]
    A = (A + A.T) / 2
    A[np.diag_indices(d)] = 0.1 + np.abs(A).sum(1)
    b = rng.normal(size=d)
    return nb, A, b


def main() -> None:
    from tgpflow.metrics import mmd
    from tgpflow.sample import Target, langevin, svgd

    p = argparse.ArgumentParser()
    p.add_argument("--trials", type=int, default=3)
    p.add_argument("--iters", type=int, default=1000)
    p.add_argument("--particles", default="20,50,100,200")
    args = p.parse_args()
    sizes = [int(v) for v in args.particles.split(",")]
    methods = ["SVGD (vanilla)", "SVGD (graphical)", "Langevin", "exact"]
    res = {m: {n: {"mse_mean": [], "mse_m2": [], "mmd": [], "mmd_u": []} for n in sizes} for m in methods}
    seconds = {m: 0.0 for m in methods}
    for trial in range(args.trials):
        rng = np.random.default_rng(1000 + trial)
        nb, A, b = gmrf(rng)
        cov = np.linalg.inv(A)
        mean = cov @ b
        m2 = np.diag(cov) + mean**2
        chol = np.linalg.cholesky(cov)
        truth = mean + rng.standard_normal((2000, len(b))) @ chol.T
        tgt = Target(lambda x: b - x @ A, lambda x: x @ b - 0.5 * np.einsum("nd,de,ne->n", x, A, x))
        for n in sizes:
            x0 = rng.standard_normal((n, len(b)))
            for m in methods:
                t = time.perf_counter()
                if m == "SVGD (vanilla)":
                    out = svgd(tgt, x0, args.iters, step_size=0.1).particles
                elif m == "SVGD (graphical)":
                    out = svgd(tgt, x0, args.iters, step_size=0.1, graph=nb).particles
                elif m == "Langevin":
                    out = langevin(tgt, x0, args.iters // 2, n_warmup=args.iters // 2, step_size=0.1,
                                   random_state=trial).last
                else:
                    out = mean + rng.standard_normal((n, len(b))) @ chol.T
                seconds[m] += time.perf_counter() - t
                r = res[m][n]
                r["mse_mean"].append(float(np.mean((out.mean(0) - mean) ** 2)))
                r["mse_m2"].append(float(np.mean(((out**2).mean(0) - m2) ** 2)))
                r["mmd"].append(mmd(out, truth))
                r["mmd_u"].append(mmd(out, truth, unbiased=True))
            print(f"trial {trial} n={n} done", flush=True)
    for key, title in (("mse_mean", "MSE of E[x_i]"), ("mse_m2", "MSE of E[x_i²]"), ("mmd", "MMD² (V-statistic) to exact draws"),
                       ("mmd_u", "MMD² (U-statistic) to exact draws")):
        print(f"\n{title} (mean over {args.trials} trials)")
        print(f"{'n':>6} " + " ".join(f"{m:>18}" for m in methods))
        for n in sizes:
            print(f"{n:>6} " + " ".join(f"{np.mean(res[m][n][key]):>18.4g}" for m in methods))
    wins = sum(np.mean(res["SVGD (graphical)"][n]["mse_m2"]) < np.mean(res["SVGD (vanilla)"][n]["mse_m2"])
               for n in sizes)
    print(f"\ngraphical SVGD beats vanilla SVGD on the second moments at {wins}/{len(sizes)} particle counts "
          f"(paper Fig. 2b: at all). Wall seconds: " + ", ".join(f"{m} {s:.1f}" for m, s in seconds.items()))
    print(json.dumps({m: {n: {k: float(np.mean(v)) for k, v in r.items()} for n, r in res[m].items()}
                      for m in methods}))


if __name__ == "__main__":
    main()
