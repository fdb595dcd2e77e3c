"""Solves of the kernel models after the pass (MATH.md §6, §7), float64.

* ``kef_h`` / ``diag_h``: the linear term h of the curl-free (md, flattened (a, i) → a·d + i) or
  diagonal (m × d) model, with the base q0 — "flat" (uniform: no term) or "gaussian"
  N(μ0, Σ0) with μ0, Σ0 the exact moments, combined after the pass (MATH.md §6).
* ``tikhonov_direct``: ``c = −(C/N + λG + εI)⁻¹ h/N`` by Cholesky (seed 001's small ridge
  ε = 1e-5 makes the system definite when G is rank-deficient; a documented pseudo-inverse
  limit as ε → 0). LAPACK's ``dpotrf`` is a blocked Cholesky; the working set is three
  (md)² float64 matrices — 9.6 GB at md = 20 000 — and ``check_memory`` raises a
  ``MemoryError`` with the numbers when that exceeds the RAM available to this process.
* ``spectral_solve``: any filter g_λ on the projected operator: ``G = VκVᵀ`` (κ > ε κ_max
  kept), ``R⁻¹ = V_r κ_r^{−1/2}``, ``T = R⁻ᵀ(C/N)R⁻¹``, ``z = R⁻ᵀ(h/N)``, ``c = −R⁻¹ g_λ(T) z`` —
  Tikhonov ``1/(σ+λ)``, cut-off ``1{σ ≥ λ}/σ`` (by eigh of T), Landweber (t = ⌊1/λ⌋ steps,
  corrected recursion of MATH.md §11 C1) and the ν-method (t = ⌊λ^{−1/2}⌋), the last two by
  mat-vecs with T only.
"""

from __future__ import annotations


import numpy as np
import scipy.linalg

from tgpflow.core.choices import REGULARIZERS
from tgpflow.core.gaussian_base import Base
from tgpflow.core.memory import check_fits
from tgpflow.features.nystrom import NystromBasis
from tgpflow.solve.linalg import safe_blas_threads
from tgpflow.stats.kef import DiagStats, KEFStats, LiteStats

__all__ = ["REGULARIZERS", "kernel_heldout_loss", "kef_h", "diag_h", "lite_r", "tikhonov_direct", "spectral_solve", "check_memory", "nu_method_coeffs"]



def check_memory(n_matrices: int, size: int, what: str) -> None:
    """Raise MemoryError (with both numbers) if ``n_matrices`` float64 size×size matrices exceed the RAM
    available where the solve runs (this process, after the pass: :func:`tgpflow.core.memory.check_fits`)."""
    check_fits(n_matrices * 8 * size * size, f"{what} ({n_matrices} float64 matrices of {size}×{size})",
               "use fewer basis points (n_basis) or dimension subsampling")


def kef_h(stats: KEFStats, basis: NystromBasis, base: Base | None) -> np.ndarray:
    """h (m, d) of the curl-free model: Laplacian part plus Σ_x K_cf(x, Y_a)∇log q0(x) (MATH.md §6)."""
    h = stats.h_lap.copy()
    if base is not None:
        P0 = base.precision
        h -= np.einsum("aijl,jl->ai", stats.F, P0)
        h += np.einsum("aij,j->ai", stats.E0, P0 @ (base.mean - basis.shift))
    return h


def diag_h(stats: DiagStats, basis: NystromBasis, base: Base | None) -> np.ndarray:
    """h (m, d) of the diagonal model: Σ_x ∇_x k(Y_a, x) + Σ_x k(Y_a, x)∇log q0(x) (MATH.md §7)."""
    h = stats.h_grad.copy()
    if base is not None:
        h -= (stats.S1 - np.outer(stats.S0, base.mean - basis.shift)) @ base.precision.T
    return h


def lite_r(stats: LiteStats, basis: NystromBasis, base: Base | None) -> np.ndarray:
    """r_l (m,) of the lite model: Σ_x Δ_x k(Y_a, x) + Σ_x ∇_x k(Y_a, x)·∇log q0(x) (MATH.md §6)."""
    r = stats.lap.copy()
    if base is not None:
        P0 = base.precision
        r -= np.einsum("ajl,jl->a", stats.L2, P0)
        r += stats.L1 @ (P0 @ (base.mean - basis.shift))
    return r


def tikhonov_direct(C: np.ndarray, h: np.ndarray, G: np.ndarray, n: int, lam: float, eps: float = 1e-5) -> np.ndarray:
    """c = −(C/N + λG + εI)⁻¹ h/N (h may have several columns), solved as (C + NλG + NεI)c = −h.

    Working set: C, G and one more (md)² matrix (built in place, factored in place).
    """
    check_memory(3, C.shape[0], "Tikhonov solve")
    A = np.multiply(G, lam * n)
    A += C
    A[np.diag_indices_from(A)] += eps * n
    with safe_blas_threads(A.shape[0]):  # Aᵀ (= A) is Fortran-ordered: LAPACK factors it in place, no copy
        return -scipy.linalg.solve(A.T, h, assume_a="pos", overwrite_a=True, check_finite=False)


def nu_method_coeffs(k: int, nu: float) -> tuple[float, float]:
    """u_k, ω_k of the ν-method (MATH.md §7)."""
    u = (k - 1) * (2 * k - 3) * (2 * k + 2 * nu - 1) / ((k + 2 * nu - 1) * (2 * k + 4 * nu - 1) * (2 * k + 2 * nu - 3))
    w = 4 * (2 * k + 2 * nu - 1) * (k + nu - 1) / ((k + 2 * nu - 1) * (2 * k + 4 * nu - 1))
    return u, w


def _norm_bound(T: np.ndarray) -> float:
    """An upper bound on ‖T‖₂ for symmetric PSD T: the largest row sum of |T| (Gershgorin)."""
    return float(np.abs(T).sum(axis=1).max())


def spectral_solve(C: np.ndarray, h: np.ndarray, G: np.ndarray, n: int, lam: float, regularizer: str, *,
                   eps: float = 1e-10, nu: float = 1.0, step: float | None = None) -> tuple[np.ndarray, dict[str, object]]:
    """c = −R⁻¹ g_λ(T) z on the projected operator (module docstring); h may have several columns."""
    if regularizer not in REGULARIZERS:
        raise ValueError(f"regularizer must be one of {REGULARIZERS}; got {regularizer!r}")
    check_memory(4, C.shape[0], f"{regularizer} solve")
    with safe_blas_threads(C.shape[0]):
        return _spectral(C, h, G, n, lam, regularizer, eps, nu, step)


def _spectral(C: np.ndarray, h: np.ndarray, G: np.ndarray, n: int, lam: float, regularizer: str, eps: float,
              nu: float, step: float | None) -> tuple[np.ndarray, dict[str, object]]:
    kappa, V = np.linalg.eigh(0.5 * (G + G.T))
    keep = kappa > eps * kappa.max()
    Rinv = V[:, keep] / np.sqrt(kappa[keep])
    T = Rinv.T @ (C / n) @ Rinv
    T = 0.5 * (T + T.T)
    z = Rinv.T @ (h / n)
    info: dict[str, object] = {"regularizer": regularizer, "rank": int(keep.sum())}
    if regularizer in ("tikhonov", "cutoff"):
        sigma, U = np.linalg.eigh(T)
        if regularizer == "tikhonov":
            g = 1.0 / (sigma + lam)
        else:
            g = np.where(sigma >= lam, 1.0 / np.where(sigma >= lam, sigma, 1.0), 0.0)
            info["kept"] = int((sigma >= lam).sum())
        w = -(U * g) @ (U.T @ z)
    elif regularizer == "landweber":
        t = int(np.floor(1.0 / lam))
        eta = step if step is not None else 1.0 / _norm_bound(T)
        w = np.zeros_like(z)
        for _ in range(t):  # w ← (I − ηT)w − ηz  ⇒  w_t = −Σ_{k<t} η(I − ηT)^k z = −g(T) z
            w = w - eta * (T @ w + z)
        info.update(iterations=t, step=eta)
    else:
        t = int(np.floor(lam**-0.5))
        rho = 1.0 / step if step is not None else _norm_bound(T)
        w_prev = np.zeros_like(z)
        w = -nu_method_coeffs(1, nu)[1] * z / rho
        for k in range(2, t + 1):
            u, om = nu_method_coeffs(k, nu)
            w, w_prev = w + u * (w - w_prev) - om * (z + T @ w) / rho, w
        if t < 1:
            w = np.zeros_like(z)
        info.update(iterations=t, rho=rho, nu=nu)
    return Rinv @ w, info


def kernel_heldout_loss(kind: str, val: KEFStats | DiagStats | LiteStats, basis: NystromBasis, base: Base | None,
                        coef: np.ndarray) -> float:
    """Mean Hyvärinen loss ``mean_x[½‖s(x)‖² + div s(x)]`` of a fitted kernel model over the rows of
    ``val``, from their statistics alone: ``(½ cᵀC c + cᵀh + Σ[½‖∇log q0‖² + Δ log q0]) / N``
    (MATH.md §7: the objective is quadratic in c with the pass's C and h)."""
    n = val.n
    if n == 0:
        raise ValueError("the validation part has no rows; raise validation_fraction or add rows")
    if kind == "curl_free":
        c = coef.ravel()
        idx = basis.index
        if idx is not None:
            c = c[idx]
            h = kef_h(val, basis, base).ravel()[idx]
        else:
            h = kef_h(val, basis, base).ravel()
        quad = 0.5 * c @ (val.C @ c) + c @ h
    elif kind == "diagonal":
        quad = 0.5 * float(np.sum(coef * (val.Ck @ coef))) + float(np.sum(coef * diag_h(val, basis, base)))
    else:
        quad = 0.5 * coef @ (val.Cl @ coef) + coef @ lite_r(val, basis, base)
    const = 0.0
    if base is not None:
        P = base.precision
        dm = val.moments.mean - base.mean
        scatter = val.moments.m2 + n * np.outer(dm, dm)
        const = 0.5 * float(np.sum((P @ P) * scatter)) - n * float(np.trace(P))
    return float(quad + const) / n
