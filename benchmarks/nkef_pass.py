"""Nyström KEF pass throughput vs the same-run GEMM (SYRK) bound; wall time and peak memory; with
``--error-rows``, the score error of dimension subsampling against the full statistics (issue 18).

Per row the curl-free statistics need ``C += B(x)ᵀB(x)`` with B(x) of shape d × md: in blocks,
one SYRK of the stacked (rows·d × md) matrix. With dimension subsampling (``--components ℓ``,
[Sutherland et al.], docs/mathematics.md, "Nyström kernel exponential family") only the columns of the index set I (|I|
= mℓ) are formed and the SYRK is (rows·d × |I|). The bound is OpenBLAS ``dsyrk`` on exactly the shape used, all cores
(the better of one call on all BLAS threads and one single-threaded call per core at once), converted to rows/s. The
issue's size is n = 10⁶, d = 10, m = 500 (md = 5000): with all md components that pass takes hours on 2 cores, so the
default runs ``--rows 20000`` and prints the extrapolated time for 10⁶ rows (the pass is linear in n; the solve is not
in it). Peak memory is the process RSS high-water mark (of the whole run).

``--error-rows n_ref`` draws the rows from a seeded Gaussian mixture with a closed-form score
(:class:`Mixture`; total covariance I, so σ_k ≈ 2d is the median heuristic) and reports the relative
score error E‖s_fit − s_true‖²/E‖s_true‖² on fresh held-out rows of (a) the full-statistics fit (all
md components) on the first n_ref rows, (b) the ℓ-subsampled fit on the same rows, (c) the
ℓ-subsampled fit on all ``--rows`` rows, and (d) E‖s_b − s_a‖²/E‖s_a‖², the score error against the
full statistics. All fits share the basis Y (the first m rows of a separate pilot sample), σ_k and
λ; λ is the best of a grid for the full fit on the pilot (``--pilot`` rows; error on held-out rows),
unless ``--lam`` is given. Every figure is measured in the run.

``--fit`` times the call a user makes instead, ``NystromKEF(n_basis=m).fit(X)`` end to end (pilot, bandwidth, pass on
dask's threads scheduler as a fit without a cluster runs, solve; all md components, ``--components`` is not read),
against the same SYRK bound. Per row the full-column SYRK is d·(md)² = 2.5·10⁸
flops at the issue's shape, so its bound is the machine's GEMM rate over that: about 250 rows/s at 63 GFLOP/s on two
cores (an earlier reading of 2 800 rows/s would need 700 GFLOP/s).

Usage: python benchmarks/nkef_pass.py [--rows N] [--components L] [--error-rows N_REF] [--fit]
"""

from __future__ import annotations

import argparse
import warnings
import json
import resource
import time
from typing import Any

import numpy as np
import scipy.linalg.blas as blas
from scipy.special import logsumexp

LAM_GRID = (1e-1, 1e-2, 1e-3, 1e-4, 1e-5, 1e-6)


def syrk_rows_per_second(k: int, rows_d: int, d: int, repeats: int = 3) -> float:
    """The SYRK bound in rows/s on (rows_d × k) blocks: the better of one dsyrk on all BLAS threads and one
    single-threaded dsyrk per core run concurrently (the pass's own scheme: Dask threads, BLAS at one thread
    each, :func:`tgpflow.core.engine.compute`) — on (3990 × 1000) blocks the second was the faster."""
    import os
    from concurrent.futures import ThreadPoolExecutor

    from threadpoolctl import threadpool_limits

    a = np.asfortranarray(np.random.default_rng(0).uniform(-1, 1, size=(rows_d, k)))

    def run(times: int) -> None:
        c = np.zeros((k, k), order="F")
        for _ in range(times):
            c = blas.dsyrk(1.0, a, beta=1.0, c=c, trans=1, lower=1, overwrite_c=1)

    run(1)
    t = time.perf_counter()
    run(repeats)
    shared = repeats * (rows_d / d) / (time.perf_counter() - t)
    cores = os.cpu_count() or 1
    with threadpool_limits(limits=1, user_api="blas"), ThreadPoolExecutor(cores) as pool:
        list(pool.map(run, [1] * cores))
        t = time.perf_counter()
        list(pool.map(run, [repeats] * cores))
        parallel = cores * repeats * (rows_d / d) / (time.perf_counter() - t)
    return max(shared, parallel)


class Mixture:
    """A seeded Gaussian mixture in d dimensions with its exact score; scaled to total covariance I."""

    def __init__(self, d: int, n_components: int = 3, seed: int = 0):
        rng = np.random.default_rng(seed)
        self.weights = np.array([0.5, 0.3, 0.2][:n_components])
        self.weights = self.weights / self.weights.sum()
        means = rng.normal(scale=1.0, size=(n_components, d))
        covs = []
        for _ in range(n_components):
            A = rng.normal(size=(d, d)) / np.sqrt(d)
            covs.append(A @ A.T * 0.6 + 0.2 * np.eye(d))  # anisotropic, well conditioned
        mean = self.weights @ means
        total = sum(w * (c + np.outer(mu - mean, mu - mean)) for w, c, mu in zip(self.weights, covs, means))
        scale = np.linalg.cholesky(np.linalg.inv(total))  # whiten: x ↦ Lᵀ(x − mean) has covariance I
        self.means = (means - mean) @ scale
        self.covs = np.array([scale.T @ c @ scale for c in covs])
        self.precisions = np.linalg.inv(self.covs)
        self.chols = np.linalg.cholesky(self.covs)
        self.log_norms = np.log(self.weights) - 0.5 * np.linalg.slogdet(self.covs)[1]

    def sample(self, n: int, rng: np.random.Generator) -> np.ndarray:
        k = rng.choice(self.weights.size, size=n, p=self.weights)
        z = rng.normal(size=(n, self.means.shape[1]))
        return self.means[k] + np.einsum("nij,nj->ni", self.chols[k], z)

    def score(self, X: np.ndarray) -> np.ndarray:
        """∇ log p(x) = Σ_k r_k(x)(−P_k(x − μ_k)), r_k the posterior responsibilities."""
        diff = X[:, None, :] - self.means[None]  # (n, K, d)
        grad = -np.einsum("kij,nkj->nki", self.precisions, diff)
        logp = self.log_norms + 0.5 * np.einsum("nki,nki->nk", diff, grad)
        resp = np.exp(logp - logsumexp(logp, axis=1, keepdims=True))
        return np.einsum("nk,nki->ni", resp, grad)


def rel_error(s: np.ndarray, ref: np.ndarray) -> float:
    """E‖s − ref‖² / E‖ref‖² over the rows."""
    return float(np.sum((s - ref) ** 2) / np.sum(ref**2))


def timed_pass(est: Any, X: np.ndarray, basis: Any, chunks: int) -> tuple[Any, float]:
    """The statistics of X on ``basis`` (threads scheduler, ``chunks`` chunks) and the pass seconds."""
    import dask
    import dask.array as da

    Xd = da.from_array(X, chunks=(-(-X.shape[0] // chunks), X.shape[1]))
    with dask.config.set(scheduler="threads"):
        t = time.perf_counter()
        stats = est.accumulate(Xd, basis=basis)
        return stats, time.perf_counter() - t


def timed_fit(est: Any, stats: Any, basis: Any) -> float:
    t = time.perf_counter()
    est.fit_from_stats(stats, basis)
    return time.perf_counter() - t


def syrk_bound(basis: Any) -> tuple[float, int, int]:
    """The same-run SYRK bound (rows/s) on this basis's block shape, its rows per block and |I|."""
    from tgpflow.core.memory import DEFAULT_BLOCK_BYTES
    from tgpflow.stats.kef import kef_block_rows

    d = basis.n_dims
    size = basis.n_basis * d if basis.index is None else basis.index.size
    block = kef_block_rows(basis, DEFAULT_BLOCK_BYTES)
    return syrk_rows_per_second(size, block * d, d), block, size


def choose_lam(pilot: np.ndarray, test: np.ndarray, s_test: np.ndarray, basis: Any, chunks: int,
               lam: float | None) -> tuple[float, dict[str, float]]:
    """λ given, or the grid value with the least held-out score error of the full fit on the pilot."""
    from tgpflow import NystromKEF

    if lam is not None:
        return lam, {}
    est = NystromKEF(bandwidth=basis.bandwidth, lam=LAM_GRID[0], base="gaussian")
    stats, _ = timed_pass(est, pilot, basis, chunks)
    errors = {}
    for value in LAM_GRID:
        est.set_params(lam=value)
        est.fit_from_stats(stats, basis)
        errors[f"{value:g}"] = round(rel_error(est.grad_log_density(test), s_test), 5)
    best = min(LAM_GRID, key=lambda v: errors[f"{v:g}"])
    return best, errors


def error_run(args: argparse.Namespace) -> dict[str, Any]:
    """(a)–(d) of the module docstring, with the pass rate of (c) against its SYRK bound."""
    from tgpflow import NystromKEF
    from tgpflow.features.kernels import median_heuristic
    from tgpflow.features.nystrom import NystromBasis

    N, d, m, n_ref = args.rows, args.dims, args.basis, args.error_rows
    mix = Mixture(d, seed=args.seed)
    rng = np.random.default_rng(args.seed + 1)
    pilot, test, X = mix.sample(args.pilot, rng), mix.sample(args.heldout, rng), mix.sample(N, rng)
    s_test = mix.score(test)
    sigma = median_heuristic(pilot)
    full = NystromBasis(pilot[:m], sigma, "gaussian", pilot.mean(axis=0))
    sub = full.with_components(args.components or d, np.random.default_rng(args.seed + 2))
    lam, lam_errors = choose_lam(pilot, test, s_test, full, args.chunks, args.lam)
    print(f"σ_k = {sigma:.4g} (median heuristic on {args.pilot} pilot rows); λ = {lam:g}"
          + (f" (pilot held-out errors {lam_errors})" if lam_errors else " (given)"))
    est = NystromKEF(bandwidth=sigma, lam=lam, base="gaussian")
    out: dict[str, Any] = {"sigma_k": sigma, "lam": lam, "lam_pilot_errors": lam_errors}
    fits = {}
    for name, rows, basis in (("a_full_ref", X[:n_ref], full), ("b_sub_ref", X[:n_ref], sub), ("c_sub_all", X, sub)):
        stats, t_pass = timed_pass(est, rows, basis, args.chunks)
        t_solve = timed_fit(est, stats, basis)
        fits[name] = est.grad_log_density(test)
        out[name] = {"rows": rows.shape[0], "size": stats.C.shape[0], "pass_seconds": round(t_pass, 1),
                     "pass_rows_s": round(rows.shape[0] / t_pass, 1), "solve_seconds": round(t_solve, 1),
                     "score_error": round(rel_error(fits[name], s_test), 5), "solver": est.solver_info_.get("method")}
        print(f"({name[0]}) {name[2:]}: {rows.shape[0]} rows, |I| = {stats.C.shape[0]}: score error "
              f"{out[name]['score_error']:.4f}; pass {t_pass:.1f} s ({rows.shape[0] / t_pass:,.0f} rows/s), "
              f"solve {t_solve:.1f} s")
    out["d_sub_vs_full_ref"] = round(rel_error(fits["b_sub_ref"], fits["a_full_ref"]), 5)
    peak, block, size = syrk_bound(sub)
    rate = out["c_sub_all"]["pass_rows_s"]
    out.update(syrk_bound_rows_s=round(peak, 1), block_rows=block, ratio_to_bound=round(rate / peak, 3),
               extrapolated_pass_seconds_1e6_rows=round(1e6 / rate))
    print(f"(d) E‖s_b − s_a‖²/E‖s_a‖² = {out['d_sub_vs_full_ref']:.4f} (score error against the full statistics)")
    print(f"(c)'s pass {rate:,.1f} rows/s = {rate / peak:.2f} of the SYRK bound on ({block}·{d} × {size}) blocks, "
          f"all cores ({peak:,.1f} rows/s); 10⁶ rows ≈ {1e6 / rate:.0f} s")
    return out


def throughput_run(args: argparse.Namespace) -> dict[str, Any]:
    """The pass on N(0, I) rows (the original benchmark), all md components or ``--components``."""
    from tgpflow import NystromKEF
    from tgpflow.features.nystrom import NystromBasis

    N, d, m = args.rows, args.dims, args.basis
    X = np.random.default_rng(0).normal(size=(N, d))
    basis = NystromBasis(X[:m], float(2 * d), "gaussian", np.zeros(d))
    if args.components is not None:
        basis = basis.with_components(args.components, np.random.default_rng(args.seed + 2))
    peak, block, size = syrk_bound(basis)
    print(f"SYRK bound on ({block}·{d} × {size}) blocks, all cores: {peak:,.1f} rows/s "
          f"= {peak * d * size**2 / 1e9:.1f} GFLOP/s")
    est = NystromKEF(bandwidth=float(2 * d), lam=1e-3, base="gaussian")
    stats, t_pass = timed_pass(est, X, basis, args.chunks)
    t_solve = timed_fit(est, stats, basis)
    rate = N / t_pass
    out = {"syrk_bound_rows_s": round(peak, 1), "pass_rows_s": round(rate, 1), "ratio_to_bound": round(rate / peak, 3),
           "pass_seconds": round(t_pass, 1), "solve_seconds": round(t_solve, 1),
           "extrapolated_pass_seconds_1e6_rows": round(1e6 / rate)}
    print(f"pass {rate:,.1f} rows/s = {rate / peak:.2f} of the SYRK bound; pass {t_pass:.1f} s, solve "
          f"(size {size}) {t_solve:.1f} s; 10⁶ rows would take ≈ {1e6 / rate / 3600:.2f} h")
    return out


def fit_run(args: argparse.Namespace) -> dict[str, Any]:
    """The call a user makes, ``NystromKEF(n_basis=m).fit(X)`` on N(0, I) rows (pilot, median bandwidth, the pass on
    the threads scheduler and the solve), end to end against the same-run SYRK bound of its basis (issue 44 item
    3)."""
    from tgpflow import NystromKEF
    from tgpflow.features.nystrom import NystromBasis

    N, d, m = args.rows, args.dims, args.basis
    X = np.random.default_rng(0).normal(size=(N, d))
    before, _, _ = syrk_bound(NystromBasis(X[:m], float(2 * d), "gaussian", np.zeros(d)))  # the block shape: m, d
    t = time.perf_counter()
    est = NystromKEF(n_basis=m).fit(X)
    seconds = time.perf_counter() - t
    after, block, size = syrk_bound(est.basis_)
    peak = max(before, after)  # the machine is shared: the better of the bounds measured before and after the fit
    rate = N / seconds
    print(f"SYRK bound on ({block}·{d} × {size}) blocks, all cores: {peak:,.1f} rows/s "
          f"= {peak * d * size**2 / 1e9:.1f} GFLOP/s (d·(md)² = {d * size**2:.2g} flops a row)")
    print(f"NystromKEF(n_basis={m}).fit(X) on {N} × {d} rows: {seconds:.1f} s, {rate:,.1f} rows/s = {rate / peak:.2f} "
          f"of the SYRK bound, everything included (solver {est.solver_info_.get('method')})")
    return {"syrk_bound_rows_s": round(peak, 1), "syrk_bounds_before_after": [round(before, 1), round(after, 1)],
            "fit_rows_s": round(rate, 1), "ratio_to_bound": round(rate / peak, 3),
            "fit_seconds": round(seconds, 1), "size": size}


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--rows", type=int, default=20_000)
    p.add_argument("--dims", type=int, default=10)
    p.add_argument("--basis", type=int, default=500)
    p.add_argument("--chunks", type=int, default=4)
    p.add_argument("--components", type=int, default=None, help="ℓ components per basis point (default: all d)")
    p.add_argument("--error-rows", type=int, default=None, help="n_ref: rows of the full-statistics reference fit")
    p.add_argument("--pilot", type=int, default=2000, help="pilot rows (basis, σ_k, λ) in the error mode")
    p.add_argument("--heldout", type=int, default=5000, help="held-out rows of the score error")
    p.add_argument("--lam", type=float, default=None, help="λ (error mode; default: chosen on the pilot)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--fit", action="store_true", help="time NystromKEF(n_basis=m).fit(X) end to end instead")
    args = p.parse_args()
    from tgpflow.errors import DiagnosticWarning

    # the importance-sampling normaliser's warning (log Z only; the score is what is measured here)
    warnings.simplefilter("ignore", DiagnosticWarning)
    t = time.perf_counter()
    out = {"rows": args.rows, "d": args.dims, "m": args.basis, "md": args.basis * args.dims,
           "components": args.components}
    out.update(fit_run(args) if args.fit else error_run(args) if args.error_rows else throughput_run(args))
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # KiB → GiB
    out.update(peak_rss_gib=round(rss, 2), total_seconds=round(time.perf_counter() - t, 1))
    print(f"peak RSS {rss:.2f} GiB; whole run {out['total_seconds']:.0f} s")
    print(json.dumps(out))


if __name__ == "__main__":
    main()
