"""Issue 44, items 1–2: the full-sample iterative fits by the call users make, and the structured curl-free product.

Rows: the ring of [Sutherland et al.] §5.1 (``benchmarks/kef_ring_grid.py``, d = 2), flat q0, the median bandwidth.
For each n of ``--sizes``:

* **product** — one product ``G V`` with the nd × nd curl-free Gram, three ways in the same run, after the n × n
  weights are computed once (each the fastest of ``--repeat``):
  - ``gemm``: :class:`tgpflow.solve.matfree.CurlFreeGram` with ``form="gemm"`` (one GEMM of α with an
    (n, d² + 2d + 1) matrix);
  - ``blocked``: ``form="blocked"``, the product before issue 44 — per block of rows, w = κ ∘ ([X|1][V|−XᵀV]ᵀ),
    then w[X|1] and αV (three GEMMs, an n-wide work array written and read several times);
  - ``dense``: G formed as its d × d blocks (``RadialKernel.curl_free_gram``) and multiplied, where its 8(nd)²
    bytes fit in ``--dense-max-gb``; the time to form it is printed beside it.
  The relative difference of gemm and blocked to dense (or to each other) is printed. The default ``form="auto"``
  takes gemm for d ≤ ONE_GEMM_MAX_DIMS: ``--product-dims`` times the product alone at more d (noise columns
  N(0, 1) beside the ring) to place that crossover.
* **fit** — ``ScoreEstimator.preset("nu_method", lam=1e-3).fit(X, basis=X)`` (t = 31 steps) and
  ``preset("landweber", lam=1e-3)`` (t = 1 000): whole-fit seconds, the path ``solver_info_`` names, the products
  taken (Lanczos norm estimate included), and beside each the same iterations on the dense G (the plain recursion,
  one dense product a step, where G fits: the dense-block path, timed whole) or, where it does not, the products
  the plain recursion takes times the dense product's time (printed as an estimate, marked "est").

Measured on the development machine (2 cores, 2026-11-29; ``--sizes 5000 20000``):

* one product at n = 5 000: d = 2 gemm 31 ms, blocked 107 ms (3.4×), dense G 37 ms (1.2×; forming G 4.9 s);
  d = 5 2.0×, d = 8 1.15×, d = 12 0.82× (blocked/gemm): hence ONE_GEMM_MAX_DIMS = 8. Forms agree to 2e-15.
* n = 5 000, d = 2: ν-method fit 4.0 s (51 products), the same iterations on the dense G 6.0 s; Landweber (t =
  1 000) 4.9 s (85 products, 64 of them Lanczos), on the dense G with the plain recursion 34.3 s (7.0×); β agrees
  with the dense path to 7e-15 and 8e-14.
* n = 20 000, d = 2 (α kept, 3.2 GB): product gemm 620 ms, blocked 969 ms (1.56×); ν-method fit 60 s; Landweber
  79 s, where the plain recursion with the previous product needs 1 021 × 969 ms ≈ 990 s (est).

Usage: python benchmarks/kernel_full_sample.py [--sizes 5000 20000] [--repeat 3] [--dense-max-gb 2]
       [--product-dims 5 8 12]
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

import numpy as np

try:
    from benchmarks.kef_ring_grid import ring
except ImportError:  # run as a script
    from kef_ring_grid import ring


def best(fn: Any, repeat: int) -> tuple[Any, float]:
    out, times = None, []
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return out, min(times)


def main() -> None:
    from tgpflow import ScoreEstimator
    from tgpflow.features.kernels import RadialKernel, median_heuristic
    import tgpflow.solve.full_sample as fs
    from tgpflow.solve.full_sample import full_sample_iteration
    from tgpflow.solve.matfree import CurlFreeGram

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[5000, 20000])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--dense-max-gb", type=float, default=2.0)
    ap.add_argument("--product-dims", type=int, nargs="*", default=[5, 8, 12])
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    records: list[dict[str, Any]] = []
    n0 = args.sizes[0]
    for d in args.product_dims:  # the product alone, at more dimensions: where gemm stops paying
        X = np.hstack([ring(n0, 2, np.random.default_rng(0))[0], np.random.default_rng(2).normal(size=(n0, d - 2))])
        kernel = RadialKernel("gaussian", median_heuristic(X))
        V = np.random.default_rng(1).normal(size=(n0, d))
        gemm = CurlFreeGram(kernel, X, budget_bytes=2**34, form="gemm")
        blocked = CurlFreeGram(kernel, X, budget_bytes=2**34, form="blocked")
        a, t_gemm = best(lambda: gemm.matvec(V), args.repeat)
        b, t_blocked = best(lambda: blocked.matvec(V), args.repeat)
        gemm = blocked = None
        rel = float(np.linalg.norm(a - b) / np.linalg.norm(b))
        print(f"n = {n0}, d = {d}: one product — gemm {t_gemm * 1e3:.1f} ms, blocked {t_blocked * 1e3:.1f} ms "
              f"(blocked/gemm {t_blocked / t_gemm:.2f}); they differ by {rel:.1e}")
        records.append({"n": n0, "d": d, "product_gemm_s": t_gemm, "product_blocked_s": t_blocked, "rel": rel})
    for n in args.sizes:
        X, _ = ring(n, 2, np.random.default_rng(0))
        d = X.shape[1]
        kernel = RadialKernel("gaussian", median_heuristic(X))
        gram = CurlFreeGram(kernel, X, budget_bytes=2**34, form="gemm")
        V = np.random.default_rng(1).normal(size=(n, d))
        lib, t_lib = best(lambda: gram.matvec(V), args.repeat)
        gram.form = "blocked"
        old, t_old = best(lambda: gram.matvec(V), args.repeat)
        rec: dict[str, Any] = {"n": n, "d": d, "product_library_s": t_lib, "product_blocked_s": t_old,
                               "library_vs_blocked_rel": float(np.linalg.norm(lib - old) / np.linalg.norm(old))}
        dense_fits = 8 * (n * d) ** 2 <= args.dense_max_gb * 2**30
        G = None
        if dense_fits:
            t0 = time.perf_counter()
            G = kernel.curl_free_gram(X, X)
            rec["dense_form_s"] = time.perf_counter() - t0
            ref, t_dense = best(lambda: (G @ V.ravel()).reshape(n, d), args.repeat)
            rec["product_dense_s"] = t_dense
            rec["library_vs_dense_rel"] = float(np.linalg.norm(lib - ref) / np.linalg.norm(ref))
        print(f"n = {n}, d = {d}: one product G·V — gemm {t_lib * 1e3:.1f} ms, blocked (before) "
              f"{t_old * 1e3:.1f} ms ({t_old / t_lib:.2f}× gemm's)"
              + (f", dense G {rec['product_dense_s'] * 1e3:.1f} ms ({rec['product_dense_s'] / t_lib:.2f}×; forming "
                 f"it {rec['dense_form_s']:.1f} s); gemm vs dense {rec['library_vs_dense_rel']:.1e}"
                 if dense_fits else f"; dense G ({8 * (n * d) ** 2 / 2**30:.1f} GiB) not formed")
              + f"; gemm vs blocked {rec['library_vs_blocked_rel']:.1e}")
        gram = None  # its α freed before the fits
        for preset, reg, lam in (("nu_method", "nu", 1e-3), ("landweber", "landweber", 1e-3)):
            t0 = time.perf_counter()
            est = ScoreEstimator.preset(preset, lam=lam).fit(X, basis=X)
            t_fit = time.perf_counter() - t0
            info = est.solver_info_
            steps = int(info["iterations"]) - (reg == "nu")
            plain = int(info["norm_matvecs"]) + steps
            line = (f"  {preset:9s} λ = {lam:g} (t = {info['iterations']}): fit {t_fit:.2f} s, path "
                    f"{info.get('path')!r}, α {info['gram']}, {info['matvecs']} products"
                    + (f" ({info['lanczos_steps']} Lanczos)" if info.get("krylov") else ""))
            r = {"preset": preset, "fit_s": t_fit, "path": info.get("path"), "gram": info["gram"],
                 "products": int(info["matvecs"]),
                 "plain_products": plain}
            if G is not None:
                step = float(info["step"])
                zeta = _zeta(est)
                fs.KRYLOV_MIN_STEPS, keep = 10**9, fs.KRYLOV_MIN_STEPS  # the plain recursion, one product a step
                try:
                    t0 = time.perf_counter()
                    _, dense_beta, _ = full_sample_iteration(_Dense(G), zeta, lam, reg, step=step)
                finally:
                    fs.KRYLOV_MIN_STEPS = keep
                t_dense_fit = time.perf_counter() - t0 + rec["dense_form_s"]
                score_lib = est.grad_log_density(X[:500])
                r.update(dense_fit_s=t_dense_fit, dense_vs_library_beta_rel=float(
                    np.linalg.norm(dense_beta - est.coef_) / np.linalg.norm(dense_beta)))
                line += (f"; the same iterations on the dense G (formed, then {steps} products, step given) "
                         f"{t_dense_fit:.1f} s ({t_dense_fit / t_fit:.1f}× the library's fit); β vs dense "
                         f"{r['dense_vs_library_beta_rel']:.1e}; |s| at 500 rows {np.abs(score_lib).mean():.3g}")
            else:
                est_s = plain * rec["product_blocked_s"]
                r["plain_blocked_est_s"] = est_s
                ms = rec["product_blocked_s"] * 1e3
                line += (f"; the plain recursion with the previous product: {plain} × {ms:.0f} ms ≈ {est_s:.1f} s "
                         f"(est, {est_s / t_fit:.1f}× the library's fit)")
            print(line)
            rec[preset] = r
        records.append(rec)
    print(json.dumps(records))
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(records, fh, indent=1)


class _Dense:
    """G as a CurlFreeGram-like operator for full_sample_iteration (products counted)."""

    def __init__(self, G: np.ndarray):
        self.G, self.matvecs = G, 0

    def matvec(self, v: np.ndarray) -> np.ndarray:
        self.matvecs += 1
        return (self.G @ np.asarray(v).ravel()).reshape(np.shape(v))


def _zeta(est: Any) -> np.ndarray:
    from tgpflow.features.kernel_xi import xi_parts

    basis = est.basis_
    return xi_parts(basis.kernel, basis.Y, np.zeros_like(basis.Y), basis.Y)[1]


if __name__ == "__main__":
    main()
