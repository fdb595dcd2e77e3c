"""Issue 18: the kernel score estimators without a hidden ridge, against plain NumPy from the papers.

Until issue 18 every direct Tikhonov solve added ε = 1e-5 (×N) to the diagonal of C + NλG ([Sutherland et al.]
§5's "for numerical stability"), which biases small-λ fits; the library's default is now no
ridge (``ridge=0``: λG regularises on range(G); a numerically singular system is solved in the
pseudo-inverse limit, :mod:`tgpflow.solve.kef`). Landweber and the ν-method used to scale by a
Gershgorin bound ρ ≥ ‖T‖ (1.1–14× ‖T‖, so λ meant a different amount of regularisation on each data
set); their step is now 1/(1.05‖T‖), ‖T‖ by power iteration.

For each data set — ``ring`` ([Sutherland et al.] §5.1: circles of radii 1, 3, 5 in ℝ², benchmarks/kef_ring_grid.py),
``banana`` (a twisted Gaussian: x₁ ~ N(0, 1.5²), x₂ = z + 0.5(x₁² − 1.5²), z ~ N(0, 1)) and ``grid5``
(an equal mixture of N(v, 0.5² I) at 5 random vertices of {−1, 1}⁵) — n = 500 training rows and 2000
test rows, a basis of m = 250 training rows (m = 200 for the 5-D curl-free kernel), σ_k = a fixed
fraction of the median heuristic (the best of 0.03, 0.1, 0.3, 1 for the NumPy Tikhonov fits), and a
flat q0. Each estimator — the ScoreEstimator presets stein, ssge, nkef, nu_method, landweber and
NystromKEF (the nkef estimator through the density class; with a Gaussian q0 each fit would also
estimate log Z, 2¹⁷ draws, which triples the run) — is fitted at every λ of its grid, three ways:

* **old**: the library with ``ridge=1e-5`` (the Tikhonov presets) or the Gershgorin ρ (Landweber,
  ν-method: the library's ``spectral_solve`` with that step);
* **new**: the library's defaults;
* **ref**: plain NumPy written from the papers, sharing nothing with the library but the data, the
  basis and σ_k: the kernel and its derivatives, C, h, G ([Sutherland et al.] Thm 1, docs/mathematics.md, "Nyström
  kernel exponential family" and "Score estimators on a Nyström basis") and the solves — Tikhonov ``β = −(C/N + λG)^†
  h/N`` ([Sutherland et al.] eq 8; SVD least squares), the cut-off on the projected operator P_Y L̂ P_Y ([Zhou et al.]
  §3.2–3.4), Landweber and the ν-method iterated on the coefficients with the pseudo-inverse of G ([Zhou et al.] eq 13,
  Example C.4 / docs/mathematics.md, "Score estimators on a Nyström basis"), with ‖T‖ from a full eigendecomposition.

The relative score error ‖ŝ − ∇log p‖ / ‖∇log p‖ (over all test points and dimensions) is printed
at each variant's best λ on the grid (as [Sutherland et al.] §5 reports each method at its best parameters),
with the ratios old/ref and new/ref. Usage: python benchmarks/kernel_ridge.py [--n 500]
(about a minute on one core; OMP_NUM_THREADS=1).
"""

from __future__ import annotations

import argparse
import json
import time
import warnings
from functools import cached_property

import numpy as np

#: λ grids: the direct and cut-off solves; the ν-method (⌊λ^−½⌋ steps); Landweber (⌊1/λ⌋ steps).
GRID = (1e-8, 1e-7, 1e-6, 1e-5, 1e-4, 1e-3, 1e-2, 1e-1)
GRID_NU = (1e-6, 1e-5, 1e-4, 1e-3, 1e-2, 1e-1, 1.0)
GRID_LW = (3e-4, 1e-3, 3e-3, 1e-2, 3e-2, 1e-1, 0.3)
#: The small λ of the second table, and the estimators it shows.
SMALL = (1e-7, 1e-6, 1e-5)
TIKHONOV = ("stein", "nkef", "NystromKEF")
#: σ_k as a fraction of the median heuristic, per data set.
BANDWIDTH = {"ring": 0.1, "banana": 1.0, "grid5": 1.0}
#: (preset or class, kernel, regularizer, base) of each estimator.
ESTIMATORS = {"stein": ("diagonal", "tikhonov", "flat"), "ssge": ("diagonal", "cutoff", "flat"),
              "nkef": ("curl_free", "tikhonov", "flat"), "nu_method": ("curl_free", "nu", "flat"),
              "landweber": ("curl_free", "landweber", "flat"), "NystromKEF": ("curl_free", "tikhonov", "flat")}


# -- data ---------------------------------------------------------------------------------------------------
def banana(n: int, rng: np.random.Generator, s1: float = 1.5, b: float = 0.5) -> tuple[np.ndarray, np.ndarray]:
    x1 = rng.normal(0, s1, n)
    x2 = rng.normal(0, 1, n) + b * (x1**2 - s1**2)
    X = np.column_stack([x1, x2])
    u = x2 - b * (x1**2 - s1**2)
    return X, np.column_stack([-x1 / s1**2 + 2 * b * x1 * u, -u])


def dataset(name: str, n: int, n_test: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    from benchmarks.kef_ring_grid import grid, ring

    rng = np.random.default_rng(18)
    if name == "ring":
        X, _ = ring(n, 2, rng)
        Xt, St = ring(n_test, 2, rng)
    elif name == "banana":
        X, _ = banana(n, rng)
        Xt, St = banana(n_test, rng)
    else:
        V = rng.choice([-1.0, 1.0], size=(5, 5))
        X, _ = grid(n, 5, rng, V)
        Xt, St = grid(n_test, 5, rng, V)
    return X, Xt, St


# -- the NumPy reference ------------------------------------------------------------------------------------
def _k(A: np.ndarray, B: np.ndarray, s: float) -> tuple[np.ndarray, np.ndarray]:
    """k(a, b) = exp(−‖a − b‖²/σ) and r = a − b, (na, nb) and (na, nb, d)."""
    r = A[:, None, :] - B[None, :, :]
    return np.exp(-np.sum(r * r, axis=2) / s), r


def _kcf(A: np.ndarray, B: np.ndarray, s: float) -> np.ndarray:
    """The curl-free blocks ∂_{a_i}∂_{b_j} k = (2/σ)[δ_ij − (2/σ) r_i r_j] k as an (na·d, nb·d) matrix."""
    k, r = _k(A, B, s)
    d = A.shape[1]
    blocks = (2 / s) * k[:, :, None, None] * (np.eye(d) - (2 / s) * r[:, :, :, None] * r[:, :, None, :])
    return blocks.transpose(0, 2, 1, 3).reshape(A.shape[0] * d, B.shape[0] * d)


class Reference:
    """C, h, G of one data set, basis and kernel ([Sutherland et al.] Thm 1; [Zhou et al.] §3), and the four solves."""

    def __init__(self, X: np.ndarray, Y: np.ndarray, s: float, kernel: str, base: str):
        n, d = X.shape
        self.Y, self.s, self.kernel, self.n = Y, s, kernel, n
        self.mu, self.P = (X.mean(0), np.linalg.inv(np.cov(X.T, bias=True))) if base == "gaussian" else (None, None)
        g = np.zeros_like(X) if self.mu is None else -(X - self.mu) @ self.P  # ∇log q0 at the rows
        k, r = _k(Y, X, s)  # r = Y_a − X_b
        if kernel == "diagonal":
            B = _k(X, Y, s)[0]  # (n, m)
            self.C = B.T @ B
            self.h = (2 / s) * np.einsum("ab,abi->ai", k, r) + B.T @ g  # Σ_x ∇_x k(Y_a, x) + k g
            self.G = _k(Y, Y, s)[0]
        else:
            B = _kcf(X, Y, s)  # (n·d, m·d): the rows' blocks B_x stacked
            self.C = B.T @ B
            u = np.sum(r * r, axis=2)
            lap = (4 / s**2) * np.einsum("ab,abi->ai", k * (d + 2 - (2 / s) * u), r)  # Σ_j ∂_i ∂²_{j+d} k(Y_a, x)
            self.h = (lap.reshape(-1) + B.T @ g.reshape(-1))[:, None]
            self.G = _kcf(Y, Y, s)

    # what only some solves need is computed on first use (benchmarks/kernel_presets.py times each solve)
    @cached_property
    def Gpinv(self) -> np.ndarray:
        return np.linalg.pinv(self.G, rcond=1e-10, hermitian=True)

    @cached_property
    def projected(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """The projected operator in G-orthonormal coordinates (for the cut-off and ‖T‖): W = V_r κ_r^−½
        (G = VκVᵀ), T = Wᵀ(C/N)W and T = U diag(σ) Uᵀ."""
        kap, V = np.linalg.eigh(self.G)
        keep = kap > 1e-10 * kap.max()
        W = V[:, keep] / np.sqrt(kap[keep])
        T = W.T @ (self.C / self.n) @ W
        sig, U = np.linalg.eigh(T)
        return W, T, sig, U

    @property
    def norm(self) -> float:
        return float(self.projected[2].max())

    @property
    def gershgorin(self) -> float:
        return float(np.abs(self.projected[1]).sum(axis=1).max())

    def solve(self, reg: str, lam: float, rho: float | None = None, nu: float = 1.0,
              projected: bool = False) -> np.ndarray:
        """The coefficients c of regularizer ``reg`` at λ (Landweber's step / the ν-method's 1/ρ: 1/``rho``, by
        default 1/(1.05‖T‖)). ``projected``: every solve as the filter on T in the G-orthonormal coordinates W
        (the same estimator; Tikhonov as 1/(max(σ, 0) + λ), the iterations on T, then c = Ww), not by least
        squares / G⁺ on the coefficients — where G is numerically singular the two forms differ in its
        numerically null directions."""
        n, h = self.n, self.h / self.n
        if reg == "tikhonov" and not projected:  # [Sutherland et al.] eq 8: β = −(C/N + λG)^† h/N
            return -np.linalg.lstsq(self.C / n + lam * self.G, h, rcond=None)[0]
        if reg in ("cutoff", "tikhonov"):
            W, _, sig, U = self.projected
            g = (np.where(sig >= lam, 1 / np.maximum(sig, lam), 0.0) if reg == "cutoff"
                 else 1 / (np.maximum(sig, 0.0) + lam))
            return -W @ ((U * g) @ (U.T @ (W.T @ h)))
        rho = 1.05 * self.norm if rho is None else rho
        if projected:
            W, T, _, _ = self.projected
            return W @ self._iterate(reg, lam, T, W.T @ h, rho, nu)
        return self._iterate(reg, lam, self.Gpinv @ (self.C / n), self.Gpinv @ h, rho, nu)  # P_Y L̂ P_Y, P_Y ζ̂

    @staticmethod
    def _iterate(reg: str, lam: float, M: np.ndarray, b: np.ndarray, rho: float, nu: float) -> np.ndarray:
        if reg == "landweber":  # [Zhou et al.] eq 13 on the span: c ← c − η(b + Mc), η = 1/ρ
            c = np.zeros_like(b)
            for _ in range(int(np.floor(1 / lam))):
                c = c - (b + M @ c) / rho
            return c
        t = int(np.floor(lam**-0.5))  # ν-method (Engl, Hanke & Neubauer Alg 6.13; docs/mathematics.md, "Score estimators on a Nyström basis")
        c_prev, c = np.zeros_like(b), -(4 * nu + 2) / (4 * nu + 1) * b / rho
        for k in range(2, t + 1):
            u = (k - 1) * (2 * k - 3) * (2 * k + 2 * nu - 1) / ((k + 2 * nu - 1) * (2 * k + 4 * nu - 1) * (2 * k + 2 * nu - 3))
            om = 4 * (2 * k + 2 * nu - 1) * (k + nu - 1) / ((k + 2 * nu - 1) * (2 * k + 4 * nu - 1))
            c, c_prev = c + u * (c - c_prev) - om * (b + M @ c) / rho, c
        return c

    def score(self, c: np.ndarray, x: np.ndarray) -> np.ndarray:
        if self.kernel == "diagonal":
            s = _k(x, self.Y, self.s)[0] @ c
        else:
            s = (_kcf(x, self.Y, self.s) @ c[:, 0]).reshape(x.shape)
        return s if self.mu is None else s - (x - self.mu) @ self.P


def basis_size(kernel: str, d: int) -> int:
    """m: 250 basis rows, 200 for the curl-free kernel in d > 2 (its md × md system)."""
    return 200 if kernel == "curl_free" and d > 2 else 250


def estimator(label: str, s: float, base: str, **kw):
    """The library's estimator ``label`` (a preset or NystromKEF) of ESTIMATORS, σ_k = s."""
    from tgpflow import NystromKEF, ScoreEstimator

    if label == "NystromKEF":
        return NystromKEF(bandwidth=s, base=base, **kw)
    return ScoreEstimator.preset(label, bandwidth=s, base=base, **kw)


def main() -> None:
    from tgpflow.features.kernels import median_heuristic
    from tgpflow.solve.kef import kef_h, spectral_solve

    p = argparse.ArgumentParser()
    p.add_argument("--n", type=int, default=500)
    p.add_argument("--test", type=int, default=2000)
    p.add_argument("--datasets", nargs="+", default=["ring", "banana", "grid5"])
    args = p.parse_args()
    warnings.simplefilter("ignore")  # diagnostics of the deliberately over- and under-regularised fits
    rows, results = [], {}
    t_all = time.perf_counter()
    for name in args.datasets:
        X, Xt, St = dataset(name, args.n, args.test)
        s = BANDWIDTH[name] * median_heuristic(X)
        ref_norm = float(np.linalg.norm(St))

        def err(pred: np.ndarray) -> float:
            return float(np.linalg.norm(pred - St)) / ref_norm

        for label, (kernel, reg, base) in ESTIMATORS.items():
            t0 = time.perf_counter()
            m = basis_size(kernel, X.shape[1])
            Y = X[:m]
            ref = Reference(X, Y, s, kernel, base)
            grid = {"nu": GRID_NU, "landweber": GRID_LW}.get(reg, GRID)

            def make(**kw):
                return estimator(label, s, base, **kw)

            stats = make(lam=grid[0]).accumulate(X, basis=Y)  # one pass, reused by every solve
            curves: dict[str, list[float]] = {"old": [], "new": [], "ref": []}
            for lam in grid:
                new = make(lam=lam).fit_from_stats(stats)
                curves["new"].append(err(new.grad_log_density(Xt)))
                if reg == "tikhonov":
                    old = make(lam=lam, ridge=1e-5).fit_from_stats(stats)
                    curves["old"].append(err(old.grad_log_density(Xt)))
                elif reg in ("landweber", "nu"):  # the Gershgorin step, through the library's solve
                    h = kef_h(stats, new.basis_, None).reshape(-1)
                    c, _ = spectral_solve(stats.C, h, new.basis_.kernel.curl_free_gram(Y, Y), stats.n, lam, reg,
                                          step=1 / ref.gershgorin)
                    curves["old"].append(err(ref.score(c[:, None], Xt)))
                curves["ref"].append(err(ref.score(ref.solve(reg, lam), Xt)))
            best = {k: (min(v), grid[int(np.argmin(v))]) if v else (np.nan, np.nan) for k, v in curves.items()}
            dt = time.perf_counter() - t0
            rows.append((name, label, best, ref.gershgorin / ref.norm, dt))
            results[f"{name} {label}"] = {"lam_grid": list(grid), "sigma_k": s, "n_basis": m, "seconds": round(dt, 2),
                                          "gershgorin_over_norm": round(ref.gershgorin / ref.norm, 2),
                                          **{k: [round(e, 4) for e in v] for k, v in curves.items()}}
            print(f"done {name} {label} ({dt:.1f} s)", flush=True)
    print(f"\nrelative score error ‖ŝ − ∇log p‖/‖∇log p‖ at each variant's best λ (n = {args.n}, "
          f"{args.test} test points); old = ridge 1e-5 (Tikhonov) / Gershgorin ρ (iterations)")
    print(f"{'data':7s} {'estimator':11s} {'old':>7s} {'(λ)':>7s} {'new':>7s} {'(λ)':>7s} {'NumPy ref':>9s} {'(λ)':>7s}"
          f" {'old/ref':>8s} {'new/ref':>8s} {'ρ_G/‖T‖':>8s}")
    for name, label, best, gratio, _ in rows:
        (eo, lo), (en, ln), (er, lr) = best["old"], best["new"], best["ref"]
        old = (f"{eo:7.3f} {lo:7.0e}" if np.isfinite(eo) else f"{'same':>7s} {'':7s}")  # the cut-off: unchanged
        ratio = f"{eo / er:8.3f}" if np.isfinite(eo) else f"{'':8s}"
        print(f"{name:7s} {label:11s} {old} {en:7.3f} {ln:7.0e} {er:9.3f} {lr:7.0e} {ratio} {en / er:8.3f} {gratio:8.2f}")
    print(f"\nthe Tikhonov fits at small λ (no ridge: the pseudo-inverse limit, as [Sutherland et al.] eq 8 states it)")
    print(f"{'data':7s} {'estimator':11s} " + " ".join(f"{'λ=' + format(v, '.0e'):>23s}" for v in SMALL))
    print(f"{'':19s} " + " ".join(f"{'old':>7s} {'new':>7s} {'ref':>7s}" for _ in SMALL))
    for name, label, *_ in rows:
        r = results[f"{name} {label}"]
        if r["old"] and label in TIKHONOV:
            cells = [r["lam_grid"].index(v) for v in SMALL]
            print(f"{name:7s} {label:11s} " + " ".join(f"{r['old'][i]:7.3f} {r['new'][i]:7.3f} {r['ref'][i]:7.3f}"
                                                        for i in cells))
    print(f"total {time.perf_counter() - t_all:.1f} s")
    print(json.dumps(results))


if __name__ == "__main__":
    main()
