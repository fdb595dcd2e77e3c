"""[Sutherland et al.] §5.1 (Figure 1): score error of full KEF, Nyström KEF (falling m) and lite on 'ring' and 'grid'.

* ring: points uniform along circles of radii 1, 3, 5 in ℝ², N(0, 0.1²) radial noise, plus
  extra dimensions of N(0, 0.1²) noise; true score ∂_r log Σ_c N(r; R_c, 0.1²) · x/r − x/r² on the
  circle plane and −x_j/0.01 on the extra dimensions.
* grid: d random vertices of the hypercube {−1, 1}^d, an equal mixture of N(v, 0.5² I) at them
  (the seed does not give the component scale; 0.5 is our choice).

n = 500 training rows, 5000 (ring) / 1500 (grid) test rows, a flat base q0. As in the seed,
each method reports its best (σ_k, λ) on a small grid, scored on the test points by the mean
squared score error ‖ŝ − ∇log p‖² (lower is better). The seed's finding to reproduce: Nyström
is close to full KEF, its error falls as m grows, lite is similar to Nyström at the same m;
and Nyström is cheaper than full. Usage: python benchmarks/kef_ring_grid.py [--dims 2 6]
"""

from __future__ import annotations

import argparse
import itertools
import json
import time

import numpy as np


def ring(n: int, d: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    radii = np.array([1.0, 3.0, 5.0])
    r = radii[rng.integers(0, 3, n)] + rng.normal(0, 0.1, n)
    t = rng.uniform(0, 2 * np.pi, n)
    X = np.column_stack([r * np.cos(t), r * np.sin(t), rng.normal(0, 0.1, (n, d - 2))])
    rr = np.hypot(X[:, 0], X[:, 1])
    logw = -0.5 * ((rr[:, None] - radii) / 0.1) ** 2
    w = np.exp(logw - logw.max(axis=1, keepdims=True))
    w /= w.sum(axis=1, keepdims=True)
    dlogp_dr = -(w * (rr[:, None] - radii)).sum(axis=1) / 0.01 - 1.0 / rr
    score = np.column_stack([dlogp_dr * X[:, 0] / rr, dlogp_dr * X[:, 1] / rr, -X[:, 2:] / 0.01])
    return X, score


def grid(n: int, d: int, rng: np.random.Generator, vertices: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    X = vertices[rng.integers(0, len(vertices), n)] + rng.normal(0, 0.5, (n, d))
    diff = X[:, None, :] - vertices[None]
    logw = -0.5 * np.sum(diff**2, axis=2) / 0.25
    w = np.exp(logw - logw.max(axis=1, keepdims=True))
    w /= w.sum(axis=1, keepdims=True)
    return X, -(w[:, :, None] * diff).sum(axis=1) / 0.25


def main() -> None:
    from tgpflow import NystromKEF
    from tgpflow.features.kernels import median_heuristic
    from tgpflow.models.full_kef import FullKEF

    p = argparse.ArgumentParser()
    p.add_argument("--dims", type=int, nargs="+", default=[2, 6])
    p.add_argument("--n", type=int, default=500)
    args = p.parse_args()
    n = args.n
    ms = [n // 12, n // 6, n // 3, 2 * n // 3]
    table, results = [], {}
    for dataset, d in itertools.product(("ring", "grid"), args.dims):
        rng = np.random.default_rng(d)
        if dataset == "ring":
            X, _ = ring(n, d, rng)
            Xt, St = ring(5000, d, rng)
        else:
            V = rng.choice([-1.0, 1.0], size=(d, d))
            X, _ = grid(n, d, rng, V)
            Xt, St = grid(1500, d, rng, V)
        med = median_heuristic(X)
        grid_params = [(med * f, lam) for f in (0.1, 0.3, 1.0, 3.0) for lam in (1e-8, 1e-6, 1e-4, 1e-2)]

        def best(make):
            out = (np.inf, None, 0.0)
            for s, lam in grid_params:
                t = time.perf_counter()
                est = make(s, lam)
                dt = time.perf_counter() - t
                err = float(np.mean(np.sum((est.grad_log_density(Xt) - St) ** 2, axis=1)))
                if err < out[0]:
                    out = (err, (s, lam), dt)
            return out

        rows = {"full": best(lambda s, lam: FullKEF(bandwidth=s, lam=lam).fit(X))}
        for m in ms:
            Y = X[np.random.default_rng(m).choice(n, m, replace=False)]
            rows[f"nystrom m={m}"] = best(lambda s, lam, Y=Y: NystromKEF(bandwidth=s, lam=lam, ridge=1e-8).fit(X, basis=Y))
            rows[f"lite m={m}"] = best(lambda s, lam, Y=Y: NystromKEF(lite=True, bandwidth=s, lam=lam).fit(X, basis=Y))
        ref = float(np.mean(np.sum(St**2, axis=1)))
        for name, (err, params, dt) in rows.items():
            table.append((dataset, d, name, err / ref, dt))
            results[f"{dataset} d={d} {name}"] = {"rel_score_mse": round(err / ref, 4), "fit_seconds": round(dt, 3),
                                                  "sigma_k": params[0], "lam": params[1]}
        print(f"done {dataset} d={d}", flush=True)
    print(f"\n{'data':6s} {'d':>3s}  {'model':16s} {'score MSE / E‖∇log p‖²':>24s} {'fit s':>8s}")
    for dataset, d, name, rel, dt in table:
        print(f"{dataset:6s} {d:3d}  {name:16s} {rel:24.4f} {dt:8.3f}")
    print(json.dumps(results))


if __name__ == "__main__":
    main()
