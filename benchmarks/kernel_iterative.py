"""Issue 18, defect 3: Landweber, the ν-method (full basis) and KEF-CG by kernel mat-vecs — before, after, reference.

For n ∈ {2000, 5000} and d ∈ {2, 5} (rows from an equal mixture of N(v, 0.7² I) at 4 random vertices of
{−1, 1}^d, σ_k = 2d, flat q0; 500 test points), three ways each:

* **before** — the library as of commit ``OLD`` (issue 18 defects 1–2):
  Landweber / ν-method with basis = all rows through the Nyström statistics (the pass builds C, (nd)²) and
  ``spectral_solve(method="eigh")`` (eigendecompositions of G and of T, nd × nd); run where nd ≤
  ``--before-max-nd`` (the pass alone is O(n(nd)²d) flops), otherwise reported as not run with C's size.
  KEF-CG: ``FullKEF(solver="cg")`` of that commit (loaded from git: the kernel recomputed at every
  mat-vec, ``scipy.sparse.linalg.cg``), where nd ≤ ``--old-cg-max-nd`` (10 000: n = 5000, d = 5 is 70 s
  more on one core, over the 5-minute budget; pass 25000 to run it).
* **after** — this library: ``FullKEF(regularizer="landweber" | "nu")`` (the full-sample iterations on the
  n × n kernel matrix by blocked mat-vecs, :mod:`tgpflow.solve.full_sample`) and ``FullKEF(solver="cg")``;
  with ``--nystrom-auto``, where "before" runs, also the Nyström statistics path with ``method="auto"``
  (Cholesky-whitened mat-vecs; with every row as basis G is numerically singular and it falls back to eigh).
* **reference** — plain NumPy written here from [Zhou et al.] (Example 3.8's O(n²d) curl-free product, §3.2's
  Landweber and Example C.4's ν-method in the (a, c) form of docs/mathematics.md, "Score estimators on a Nyström basis",
  KEF-CG as CG on [Zhou et al.] eq 10 / docs/mathematics.md, "Nyström kernel exponential family"), sharing nothing with
  the library but the data: the Gaussian kernel matrix k(X, X) is computed once and every product uses it (as [Zhou et
  al.]'s code does). [Zhou et al.]'s code takes the step as a parameter and estimates no norm; the reference takes the
  library's fitted step (η = 1/(1.05‖G/n‖)), so both fit the same estimator. Its time is the kernel matrix and the
  iterations; the library's is shown twice: the whole fit (which also estimates ‖G/n‖ by Lanczos, ~21 products at n =
  5000: docs/mathematics.md, "Score estimators on a Nyström basis", issue 18 defect 2) and without it (ζ̂(X), α and
  ``full_sample_iteration`` with the step given) — the same work as the reference.

Printed per (n, d): seconds, ratio to the reference, peak memory (``tracemalloc``'s peak of NumPy/Python
allocations above the start of each fit, MiB; BLAS/LAPACK workspaces are not traced), and the relative
difference ‖s − s_ref‖/‖s_ref‖ of the fitted scores at the training rows and at the test points. "before"
(the Nyström estimator with every row as basis) equals the full-sample estimator at the rows only; off the
rows they differ by g(0)(ζ̂ − P_Vζ̂) (:mod:`tgpflow.solve.full_sample`).

Usage: OMP_NUM_THREADS=1 python benchmarks/kernel_iterative.py [--sizes 2000 5000] [--dims 2 5]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import subprocess
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path
from typing import Any, Callable

import numpy as np

#: The commit before defect 3 (defects 1–2 done): "before".
OLD = "ca1ef10"
#: λ of each method: Landweber t = ⌊1/λ⌋ = 25 steps, ν-method t = ⌊λ^−½⌋ = 31, KEF λ.
LAM = {"landweber": 4e-2, "nu": 1e-3, "kef_cg": 1e-3}
CG_TOL = 1e-8


def measured(fn: Callable[[], Any]) -> tuple[Any, float, float]:
    """fn(), its seconds and tracemalloc's peak above the start (MiB)."""
    tracemalloc.start()
    tracemalloc.reset_peak()
    base = tracemalloc.get_traced_memory()[0]
    t = time.perf_counter()
    out = fn()
    dt = time.perf_counter() - t
    peak = (tracemalloc.get_traced_memory()[1] - base) / 2**20
    tracemalloc.stop()
    return out, dt, peak


# -- the reference: plain NumPy from [Zhou et al.]
# ------------------------------------------------------------------------
class Reference:
    """Gaussian k = exp(−‖x − y‖²/σ); K_cf(x, y) = (2/σ)[I − (2/σ) r rᵀ] k, r = x − y (docs/mathematics.md, "Nyström
    kernel exponential family")."""

    def __init__(self, X: np.ndarray, s: float):
        self.X, self.s = X, s
        sq = np.sum(X * X, 1)
        D = np.maximum(sq[:, None] - 2 * X @ X.T + sq[None, :], 0.0)
        self.K = np.exp(-D / s)  # the kernel matrix, kept: one n × n float64 array
        n, d = X.shape
        c = self.K * (d + 2 - (2 / s) * D)  # ζ̂(X_b) = (4/(nσ²)) Σ_a c_ba (X_b − X_a)
        del D
        self.zeta = (4 / (n * s * s)) * (c.sum(1)[:, None] * X - c @ X)

    def G(self, V: np.ndarray) -> np.ndarray:
        """(GV)_a = Σ_b K_cf(X_a, X_b)V_b = (2/σ)Σ_b k V_b − (4/σ²)Σ_b k (r·V_b) r ([Zhou et al.] Example 3.8)."""
        X, s = self.X, self.s
        M = X @ V.T  # one n × n temporary, updated in place
        M -= np.sum(X * V, 1)[None, :]
        M *= self.K
        return (2 / s) * (self.K @ V) - (4 / s**2) * (M.sum(1)[:, None] * X - M @ X)

    def landweber(self, lam: float, eta: float) -> tuple[float, np.ndarray]:
        """s_t = a_tζ̂ + Σ_b K(·, X_b)c_b: a ← a − η, c ← c − (η/n)(aζ̂(X) + Gc) (docs/mathematics.md, "Score estimators
        on a Nyström basis" and "Where the papers differ", item C1)."""
        n = self.X.shape[0]
        a, c = 0.0, np.zeros_like(self.X)
        for _ in range(int(np.floor(1 / lam))):
            a, c = a - eta, c - (eta / n) * (a * self.zeta + self.G(c))
        return a, c

    def nu(self, lam: float, step: float, nu: float = 1.0) -> tuple[float, np.ndarray]:
        """Engl, Hanke & Neubauer Alg 6.13 on (a, c), ρ = 1/step (docs/mathematics.md, "Score estimators on a Nyström
        basis"; [Zhou et al.] Example C.4)."""
        n = self.X.shape[0]
        rho = 1.0 / step
        a_prev, a = 0.0, -(4 * nu + 2) / (4 * nu + 1) / rho
        c_prev, c = np.zeros_like(self.X), np.zeros_like(self.X)
        for k in range(2, int(np.floor(lam**-0.5)) + 1):
            u = ((k - 1) * (2 * k - 3) * (2 * k + 2 * nu - 1)
                 / ((k + 2 * nu - 1) * (2 * k + 4 * nu - 1) * (2 * k + 2 * nu - 3)))
            om = 4 * (2 * k + 2 * nu - 1) * (k + nu - 1) / ((k + 2 * nu - 1) * (2 * k + 4 * nu - 1))
            c, c_prev = c + u * (c - c_prev) - om * (a * self.zeta + self.G(c)) / (n * rho), c
            a, a_prev = a + u * (a - a_prev) - om / rho, a
        return a, c

    def kef_cg(self, lam: float, tol: float) -> tuple[float, np.ndarray, int]:
        """(G + nλI)β = ζ̂(X)/λ by plain CG ([Zhou et al.] §3.5, docs/mathematics.md, "Nyström kernel exponential
        family"); s = −ζ̂/λ + Σ K(·, X_b)β_b."""
        n = self.X.shape[0]
        b = self.zeta / lam
        x, r = np.zeros_like(b), b.copy()
        p, rr, bn, k = r.copy(), float(np.sum(r * r)), float(np.linalg.norm(b)), 0
        while np.sqrt(rr) > tol * bn and k < 10 * b.size:
            Ap = self.G(p) + n * lam * p
            step = rr / float(np.sum(p * Ap))
            x += step * p
            r -= step * Ap
            rr, rr_old = float(np.sum(r * r)), rr
            p = r + (rr / rr_old) * p
            k += 1
        return -1 / lam, x, k

    def score(self, a: float, c: np.ndarray, x: np.ndarray) -> np.ndarray:
        """a ζ̂(x) + Σ_b K_cf(x, X_b)c_b at new points."""
        X, s = self.X, self.s
        n, d = X.shape
        sq = np.sum(x * x, 1)
        D = np.maximum(sq[:, None] - 2 * x @ X.T + np.sum(X * X, 1)[None, :], 0.0)
        K = np.exp(-D / s)
        cz = K * (d + 2 - (2 / s) * D)
        zeta = (4 / (n * s * s)) * (cz.sum(1)[:, None] * x - cz @ X)
        M = K * (x @ c.T - np.sum(X * c, 1)[None, :])
        return a * zeta + (2 / s) * (K @ c) - (4 / s**2) * (M.sum(1)[:, None] * x - M @ X)


# -- before: the library at OLD --------------------------------------------------------------------------------------
def old_full_kef() -> Any:
    """FullKEF as of commit OLD, loaded from git (its KEF-CG recomputes the kernel at every mat-vec). Its
    ``__init__`` gains today's two parameters (unused by its fit) so that it matches today's parameter table."""
    src = subprocess.run(["git", "show", f"{OLD}:tgpflow/models/full_kef.py"], capture_output=True, text=True,
                         check=True, cwd=Path(__file__).resolve().parents[1]).stdout
    old_sig = "cg_tol: float = 1e-10, max_rows: int = 20_000):"
    assert old_sig in src
    src = src.replace(old_sig, "cg_tol: float = 1e-10, max_rows: int = 20_000,\n"
                      "                 regularizer: str = 'tikhonov', nu: float = 1.0):\n"
                      "        self.regularizer, self.nu = regularizer, nu")
    path = Path(tempfile.mkdtemp()) / "full_kef_old.py"
    path.write_text(src)
    spec = importlib.util.spec_from_file_location("full_kef_old", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules["full_kef_old"] = mod
    spec.loader.exec_module(mod)
    return mod.FullKEF


def all_rows_basis(X: np.ndarray, s: float) -> Any:
    from tgpflow.features.nystrom import NystromBasis

    return NystromBasis(X, s, "gaussian", X.mean(0))


def nystrom_pass(X: np.ndarray, s: float) -> Any:
    """The Nyström statistics with basis = all rows (C is (nd)²)."""
    from tgpflow import ScoreEstimator

    return ScoreEstimator(kernel="curl_free", bandwidth=s).accumulate(X, basis=all_rows_basis(X, s))


def nystrom_all_rows(X: np.ndarray, s: float, reg: str, lam: float, method: str, stats: Any) -> Any:
    """Landweber / ν-method with basis = all rows on the Nyström statistics by ``spectral_solve(method)``."""
    from tgpflow.solve.kef import kef_h, spectral_solve

    basis = all_rows_basis(X, s)
    G = basis.kernel.curl_free_gram(X, X)
    c, info = spectral_solve(stats.C, kef_h(stats, basis, None).reshape(-1), G, stats.n, lam, reg, method=method)
    return c.reshape(X.shape), info


def rel(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


def run(n: int, d: int, args: argparse.Namespace, OldFullKEF: Any) -> dict[str, Any]:
    from tgpflow.features.kernels import RadialKernel
    from tgpflow.models.full_kef import FullKEF
    from tgpflow.solve.full_sample import full_sample_iteration
    from tgpflow.solve.matfree import CurlFreeGram

    rng = np.random.default_rng(18)
    V = rng.choice([-1.0, 1.0], size=(4, d))
    X = V[rng.integers(0, 4, n)] + rng.normal(0, 0.7, (n, d))
    xt = V[rng.integers(0, 4, 500)] + rng.normal(0, 0.7, (500, d))
    s = 2.0 * d
    kernel = RadialKernel("gaussian", s)
    out: dict[str, Any] = {}
    ref, t_ref_setup, m_ref_setup = measured(lambda: Reference(X, s))
    stats, t_pass = None, 0.0
    rows = X[:1000]  # the scores compared at 1000 of the training rows
    for method in ("landweber", "nu", "kef_cg"):
        lam = LAM[method]
        row: dict[str, Any] = {}
        if method == "kef_cg":
            (a_r, c_r, it_r), t_r, m_r = measured(lambda: ref.kef_cg(lam, CG_TOL))
            after, t_a, m_a = measured(lambda: FullKEF(bandwidth=s, lam=lam, solver="cg", cg_tol=CG_TOL).fit(X))
            row["after_info"] = {k: after.solver_info_[k] for k in ("iterations", "residual", "gram", "gram_bytes")}
            row["reference_iterations"] = it_r
            if n * d <= args.old_cg_max_nd:
                before, t_b, m_b = measured(lambda: OldFullKEF(bandwidth=s, lam=lam, solver="cg", cg_tol=CG_TOL).fit(X))
                row["before"] = {"seconds": t_b, "peak_mib": m_b, "iterations": before.solver_info_["iterations"],
                                 "rows_rel": rel(before.grad_log_density(rows), after.grad_log_density(rows)),
                                 "test_rel": rel(before.grad_log_density(xt), after.grad_log_density(xt))}
        else:
            after, t_a, m_a = measured(lambda: FullKEF(bandwidth=s, lam=lam, regularizer=method).fit(X))
            step = after.solver_info_["step"]
            fn = ref.landweber if method == "landweber" else ref.nu
            (a_r, c_r), t_r, m_r = measured(lambda: fn(lam, step))  # [Zhou et al.]'s code: the step given
            row["after_info"] = {k: after.solver_info_[k] for k in ("iterations", "matvecs", "norm_matvecs", "gram",
                                                                     "gram_bytes")}
            # the same work as the reference: ζ̂(X), the kernel part (α) and the iterations, the step given
            def iterations_only() -> Any:
                return full_sample_iteration(CurlFreeGram(kernel, X), after._xi_parts(X)[1], lam, method, step=step)

            _, t_it, _ = measured(iterations_only)
            row["after_iterations_only_seconds"] = t_it
            if n * d <= args.before_max_nd:
                if stats is None:  # the pass (C, (nd)²), once; charged to both
                    stats, t_pass, _ = measured(lambda: nystrom_pass(X, s))
                (c_b, info_b), t_b, m_b = measured(lambda: nystrom_all_rows(X, s, method, lam, "eigh", stats))
                t_b += t_pass
                gram = CurlFreeGram(kernel, X)
                s_b = gram.matvec(c_b)
                row["before"] = {"seconds": t_b, "pass_seconds": t_pass, "peak_mib": m_b + 8 * (n * d) ** 2 / 2**20,
                                 "method": info_b["method"],
                                 "rows_rel": rel(s_b[:1000], after.grad_log_density(rows)),
                                 "test_rel": rel(kernel.curl_free_matvec(xt, X, c_b), after.grad_log_density(xt))}
                if args.nystrom_auto:
                    (c_n, info_n), t_n, m_n = measured(lambda: nystrom_all_rows(X, s, method, lam, "auto", stats))
                    row["nystrom_auto"] = {"seconds_solve_only": t_n, "peak_mib": m_n, "method": info_n["method"],
                                           "rows_rel_to_before": rel(gram.matvec(c_n), s_b)}
                del gram
            else:
                row["before"] = {"not_run": f"nd = {n * d}: C and G are {8 * (n * d) ** 2 / 2**30:.2f} GiB each"}
        row.update(after_seconds=t_a, after_peak_mib=m_a, reference_seconds=t_r + t_ref_setup,
                   reference_peak_mib=max(m_ref_setup, 8 * n * n / 2**20 + m_r),  # k(X, X) is held throughout
                   ratio=t_a / (t_r + t_ref_setup),
                   rows_rel=rel(after.grad_log_density(rows), ref.score(a_r, c_r, rows)),
                   test_rel=rel(after.grad_log_density(xt), ref.score(a_r, c_r, xt)))
        out[method] = row
    return out


def notes(row: dict[str, Any], before: dict[str, Any]) -> list[str]:
    """The extra lines under a row: the reference's work without the norm estimate, the Nyström auto solve."""
    out = []
    if "after_iterations_only_seconds" in row:
        same, info = row["after_iterations_only_seconds"], row["after_info"]
        out.append(f"the same work as the reference (kernel + iterations, step given, no ‖G/n‖ estimate): after "
                   f"{same:.2f} s, ratio {same / row['reference_seconds']:.2f}; the fit's ‖G/n‖ estimate (Lanczos) is "
                   f"{info['norm_matvecs']} of its {info['matvecs']} products")
    if "nystrom_auto" in row:
        na = row["nystrom_auto"]
        out.append(f"Nyström stats, method=auto ({na['method']}): solve {na['seconds_solve_only']:.2f} s (before's "
                   f"{before['seconds']:.2f} s includes the pass), rows vs before {na['rows_rel_to_before']:.1e}")
    return out


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--sizes", type=int, nargs="+", default=[2000, 5000])
    p.add_argument("--dims", type=int, nargs="+", default=[2, 5])
    p.add_argument("--before-max-nd", type=int, default=4000, help="run the eigh path where n·d is at most this")
    p.add_argument("--old-cg-max-nd", type=int, default=10_000,
                   help="run the old KEF-CG where n·d is at most this (n = 5000, d = 5 takes 70 s more: 25000)")
    p.add_argument("--nystrom-auto", action="store_true",
                   help="also solve the all-rows Nyström statistics with method='auto' (G is numerically singular "
                        "with every row as basis: it falls back to eigh)")
    args = p.parse_args()
    OldFullKEF = old_full_kef()
    t0 = time.perf_counter()
    results = {}
    print(f"λ: {LAM}; CG rtol {CG_TOL}; seconds (ratio after/reference), tracemalloc peak MiB, and ‖Δs‖/‖s‖ "
          f"at 1000 training rows / at 500 test points", flush=True)
    for n in args.sizes:
        for d in args.dims:
            r = run(n, d, args, OldFullKEF)
            results[f"n={n},d={d}"] = r
            for method, row in r.items():
                b = row["before"] if "before" in row else {"not_run": "n·d > --old-cg-max-nd"}
                before = (f"before {b['seconds']:7.2f} s {b['peak_mib']:7.0f} MiB (vs after: rows {b['rows_rel']:.1e}, "
                          f"test {b['test_rel']:.1e})" if "seconds" in b else f"before not run ({b['not_run']})")
                print(f"n={n:5d} d={d} {method:9s} after {row['after_seconds']:6.2f} s "
                      f"{row['after_peak_mib']:6.0f} MiB | "
                      f"reference {row['reference_seconds']:6.2f} s {row['reference_peak_mib']:6.0f} MiB | ratio "
                      f"{row['ratio']:5.2f} | after vs ref: rows {row['rows_rel']:.1e} test {row['test_rel']:.1e} | "
                      f"{before} | {row['after_info']}", flush=True)
                for note in notes(row, b):
                    print(f"{'':21s} {note}", flush=True)
    print(f"total {time.perf_counter() - t0:.0f} s")
    print(json.dumps(results, default=float))


if __name__ == "__main__":
    main()
