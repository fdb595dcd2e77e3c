"""Solves of the kernel models after the pass (docs/mathematics.md, "Nyström kernel exponential family" and "Score
estimators on a Nyström basis"), float64.

* ``kef_h`` / ``diag_h``: the linear term h of the curl-free (md, flattened (a, i) → a·d + i) or
  diagonal (m × d) model, with the base q0 — "flat" (uniform: no term) or "gaussian"
  N(μ0, Σ0) with μ0, Σ0 the exact moments, combined after the pass (docs/mathematics.md, "Nyström kernel exponential
  family").
* ``tikhonov_direct``: ``c = −(C/N + λG + εI)⁻¹ h/N`` by Cholesky, with **no ridge by default**
  (ε = ``ridge`` = 0): λG already regularises on range(G), and null(G) ⊆ null(C) with h ⊥ null(G)
  (a coefficient vector in null(G) is the zero field), so the system is consistent. When G is
  numerically rank-deficient the Cholesky factorisation fails or is numerically singular
  (reciprocal condition below :data:`SINGULAR_RCOND`); the solve then takes the pseudo-inverse
  limit ε → 0 — the Tikhonov filter ``1/(σ+λ)`` on the projected operator below, with G's
  eigenvalues under ``rank_tol``·κ_max cut — and says so in its info (``method``, ``fallback``).
  [Sutherland et al.]'s ε = 1e-5 (``ridge=1e-5``) adds a second penalty ε‖β‖²: another estimator than the
  paper's, most at small λ (issue 18: benchmarks/kernel_ridge.py).
  LAPACK's ``dpotrf`` is a blocked Cholesky; the working set is three (md)² float64 matrices —
  9.6 GB at md = 20 000 — and ``check_memory`` raises a ``MemoryError`` with the numbers when
  that exceeds the RAM available to this process.
* ``spectral_solve``: any filter g_λ on the projected operator: ``G = VκVᵀ`` (κ > ``rank_tol``·κ_max
  kept), ``R⁻¹ = V_r κ_r^{−1/2}``, ``T = R⁻ᵀ(C/N)R⁻¹``, ``z = R⁻ᵀ(h/N)``, ``c = −R⁻¹ g_λ(T) z`` —
  Tikhonov ``1/(σ+λ)``, cut-off ``1{σ ≥ λ}/σ`` (by eigh of T), Landweber (``landweber``) and the
  ν-method (``nu_method``), the last two by mat-vecs with T only — and T itself applied by mat-vecs:
  with the Cholesky factor ``G = R_cᵀR_c`` as the square root, ``Tv = R_c⁻ᵀ(C(R_c⁻¹v))/N`` (two triangular
  solves and one product with the stored C; :class:`~tgpflow.solve.matfree.WhitenedOperator`, which
  shows it gives the same c), so neither G nor T is eigendecomposed unless G is not numerically definite
  (``method="eigh"`` keeps the eigendecomposition path). Full-sample (basis = all rows) iterations
  never form C or G: :mod:`tgpflow.solve.full_sample` and :class:`~tgpflow.models.full_kef.FullKEF`.
* The iterations' scale (docs/mathematics.md, "Score estimators on a Nyström basis"): λ sets the number of steps — t =
  ⌊1/λ⌋ for Landweber, t = ⌊λ^{−1/2}⌋ for the ν-method — and the step comes from ‖T‖ alone, estimated by
  :func:`operator_norm` (Lanczos from a seeded start, about :data:`POWER_ITERATIONS` mat-vecs at
  most) times the safety factor :data:`NORM_SAFETY`: Landweber's step η = 1/(1.05‖T‖), the
  ν-method's ρ = 1.05‖T‖ (both need ‖T‖ ≤ 1/η = ρ; a Lanczos estimate is from below).
  No data-dependent bound (a Gershgorin row sum, 1.1–14× ‖T‖) shifts what λ means. A given ``step`` replaces
  1/(1.05‖T‖) (:func:`check_step` refuses one above 1/‖T‖): for the ν-method ``step=1`` is kscore's ``NuEstimator``,
  where λ is in the kernel's units, and the same filter as λ there takes ``lam_here = lam_there / rho`` here
  (docs/mathematics.md, "What λ means for the iterations").
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, Union

import numpy as np
import scipy.linalg

from tgpflow.core.choices import DEFAULT_RANK_TOL, REGULARIZERS
from tgpflow.core.gaussian_base import Base
from tgpflow.core.memory import check_fits
from tgpflow.features.nystrom import NystromBasis
from tgpflow.solve.linalg import safe_blas_threads
from tgpflow.solve.matfree import WhitenedOperator
from tgpflow.stats.kef import DiagStats, KEFStats, LiteStats

__all__ = ["REGULARIZERS", "kernel_heldout_loss", "kernel_solve", "kef_h", "diag_h", "lite_r", "tikhonov_direct",
           "spectral_solve", "check_memory", "check_step", "nu_method_coeffs", "operator_norm", "landweber",
           "nu_method", "DEFAULT_RANK_TOL", "NORM_SAFETY", "POWER_ITERATIONS", "SINGULAR_RCOND", "ITERATIVE_METHODS"]

logger = logging.getLogger("tgpflow")

#: The step of Landweber and the ν-method is set from NORM_SAFETY × the Lanczos estimate of ‖T‖.
NORM_SAFETY = 1.05
#: Mat-vecs of the ‖T‖ estimate, about at most (Lanczos stops earlier at 1e-10; its power-iteration fallback at 1e-12).
POWER_ITERATIONS = 100
#: A Cholesky factor whose reciprocal condition number (LAPACK ``dpocon``) is below this is treated as
#: numerically singular: the direct Tikhonov solve then takes the pseudo-inverse limit.
SINGULAR_RCOND = 1e-13
#: How Landweber and the ν-method apply T: "auto" (Cholesky-whitened mat-vecs, eigh only where G is not
#: numerically definite) or "eigh" (T formed from G's eigendecomposition: the path before issue 18 defect 3).
ITERATIVE_METHODS = ("auto", "eigh")

#: An operator: a matrix, or a function applying it to a vector (or to columns).
Operator = Union[np.ndarray, Callable[[np.ndarray], np.ndarray]]


def _applier(T: Operator) -> Callable[[np.ndarray], np.ndarray]:
    return T if callable(T) else T.__matmul__


def check_memory(n_matrices: int, size: int, what: str) -> None:
    """Raise MemoryError (with both numbers) if ``n_matrices`` float64 size×size matrices exceed the RAM
    available where the solve runs (this process, after the pass: :func:`tgpflow.core.memory.check_fits`)."""
    check_fits(n_matrices * 8 * size * size, f"{what} ({n_matrices} float64 matrices of {size}×{size})",
               "use fewer basis points (n_basis) or dimension subsampling")


def kef_h(stats: KEFStats, basis: NystromBasis, base: Base | None) -> np.ndarray:
    """h (m, d) of the curl-free model: Laplacian part plus Σ_x K_cf(x, Y_a)∇log q0(x) (docs/mathematics.md, "Nyström
    kernel exponential family")."""
    h = stats.h_lap.copy()
    if base is not None:
        P0 = base.precision
        h -= np.einsum("aijl,jl->ai", stats.F, P0)
        h += np.einsum("aij,j->ai", stats.E0, P0 @ (base.mean - basis.shift))
    return h


def diag_h(stats: DiagStats, basis: NystromBasis, base: Base | None) -> np.ndarray:
    """h (m, d) of the diagonal model: Σ_x ∇_x k(Y_a, x) + Σ_x k(Y_a, x)∇log q0(x) (docs/mathematics.md, "Score
    estimators on a Nyström basis")."""
    h = stats.h_grad.copy()
    if base is not None:
        h -= (stats.S1 - np.outer(stats.S0, base.mean - basis.shift)) @ base.precision.T
    return h


def lite_r(stats: LiteStats, basis: NystromBasis, base: Base | None) -> np.ndarray:
    """r_l (m,) of the lite model: Σ_x Δ_x k(Y_a, x) + Σ_x ∇_x k(Y_a, x)·∇log q0(x) (docs/mathematics.md, "Nyström
    kernel exponential family")."""
    r = stats.lap.copy()
    if base is not None:
        P0 = base.precision
        r -= np.einsum("ajl,jl->a", stats.L2, P0)
        r += stats.L1 @ (P0 @ (base.mean - basis.shift))
    return r


def tikhonov_direct(C: np.ndarray, h: np.ndarray, G: np.ndarray, n: int, lam: float, ridge: float = 0.0, *,
                    rank_tol: float = DEFAULT_RANK_TOL) -> tuple[np.ndarray, dict[str, object]]:
    """c = −(C/N + λG + εI)⁻¹ h/N (ε = ``ridge``; h may have several columns), solved as (C + NλG + NεI)c = −h
    by Cholesky; a failed or numerically singular factorisation takes the pseudo-inverse limit on range(G)
    (module docstring). Returns c and what was done: ``method`` "cholesky" (with ``rcond``) or "eigh" (with
    ``fallback``, the reason, and the projected operator's ``rank``), ``ridge``.

    Working set: C, G and one more (md)² matrix (built in place, factored in place).
    """
    check_memory(3, C.shape[0], "Tikhonov solve")
    A = np.multiply(G, lam * n)
    A += C
    if ridge:
        A[np.diag_indices_from(A)] += ridge * n
    anorm = max(float(np.abs(A[i:i + 1024]).sum(axis=1).max()) for i in range(0, A.shape[0], 1024))  # ‖A‖₁ = ‖A‖_∞
    with safe_blas_threads(A.shape[0]):  # Aᵀ (= A) is Fortran-ordered: LAPACK factors it in place, no copy
        try:
            U, _ = scipy.linalg.cho_factor(A.T, lower=False, overwrite_a=True, check_finite=False)
            rcond = float(scipy.linalg.lapack.dpocon(U, anorm)[0])
        except np.linalg.LinAlgError:
            U, rcond = None, 0.0
        if U is not None and rcond >= SINGULAR_RCOND:
            c = -np.ascontiguousarray(scipy.linalg.cho_solve((U, False), h, check_finite=False))  # as a file reads back
            return c, {"method": "cholesky", "rcond": rcond, "ridge": float(ridge)}
    del A, U
    reason = (f"C/N + λG{' + εI' if ridge else ''} is numerically singular (Cholesky "
              + ("failed" if rcond == 0.0 else f"reciprocal condition {rcond:.2g} < {SINGULAR_RCOND:g}") + ")")
    logger.info("Tikhonov solve (λ=%g, size %d): %s; taking the pseudo-inverse limit on range(G) "
                "(eigenvalues of G below %g·max cut)", lam, C.shape[0], reason, rank_tol)
    c, info = spectral_solve(C, h, G, n, lam, "tikhonov", rank_tol=rank_tol)
    info.update(method="eigh", fallback=reason, ridge=float(ridge))
    if ridge:
        info["ridge_ignored"] = True  # the limit is of λG alone
    return c, info


def nu_method_coeffs(k: int, nu: float) -> tuple[float, float]:
    """u_k, ω_k of the ν-method (docs/mathematics.md, "Score estimators on a Nyström basis"); u_1 = 0 (it multiplies w_0
    − w_{−1}; its formula is 0/0 at ν = ½)."""
    u = 0.0 if k == 1 else (k - 1) * (2 * k - 3) * (2 * k + 2 * nu - 1) / ((k + 2 * nu - 1) * (2 * k + 4 * nu - 1) * (2 * k + 2 * nu - 3))
    w = 4 * (2 * k + 2 * nu - 1) * (k + nu - 1) / ((k + 2 * nu - 1) * (2 * k + 4 * nu - 1))
    return u, w


def operator_norm(T: Operator, iterations: int = POWER_ITERATIONS, seed: int = 0,
                  size: int | None = None) -> tuple[float, int]:
    """‖T‖₂ of a symmetric PSD T (a matrix, or a mat-vec function of vectors of length ``size``): its largest
    eigenvalue by Lanczos (ARPACK's implicitly restarted Lanczos, ``scipy.sparse.linalg.eigsh``, k = 1) from a
    seeded start vector (deterministic), to 1e-10 relative, within about ``iterations`` mat-vecs. A Ritz value
    of a symmetric T lies in its spectrum, so the estimate is from below, as the step's :data:`NORM_SAFETY`
    assumes. Lanczos needs far fewer products than power iteration when the top eigenvalues are close
    (measured on full-sample kernel operators: 21–31 products to 1e-10, where 100 power steps reached
    1e-7). A T of at most 8 rows is read whole (8 products); if ARPACK fails, power iteration. Returns the
    estimate and the mat-vecs used."""
    apply = _applier(T)
    n = T.shape[0] if size is None else int(size)
    used = 0

    def matvec(v: np.ndarray) -> np.ndarray:
        nonlocal used
        used += 1
        return apply(np.asarray(v, dtype=np.float64).reshape(-1))

    if n <= 8:  # ARPACK needs more Lanczos vectors than this: n products give T itself
        M = np.column_stack([matvec(e) for e in np.eye(n)])
        return max(float(np.linalg.eigvalsh(0.5 * (M + M.T)).max()), 0.0), used
    import scipy.sparse.linalg as spla

    v0 = np.random.default_rng(seed).standard_normal(n)
    ncv = min(n - 1, 20)
    try:
        top = spla.eigsh(spla.LinearOperator((n, n), matvec=matvec, dtype=np.float64), k=1, which="LA", v0=v0,
                         ncv=ncv, tol=1e-10, maxiter=max(1, int(iterations) // ncv), return_eigenvectors=False)
        return max(float(top[0]), 0.0), used
    except spla.ArpackNoConvergence as exc:  # the best Ritz value so far: still from below
        if len(exc.eigenvalues):
            return max(float(np.max(exc.eigenvalues)), 0.0), used
    except spla.ArpackError:  # e.g. a T that is zero on the start vector's Krylov space
        pass
    est, k = _power_norm(apply, v0, iterations)
    return est, used + k


def _power_norm(apply: Callable[[np.ndarray], np.ndarray], v: np.ndarray, iterations: int) -> tuple[float, int]:
    """Power iteration: the Rayleigh quotient of T^k v, stopped when it changes by < 1e-12 or after
    ``iterations`` products (from below for PSD T)."""
    v = v / np.linalg.norm(v)
    est, k = 0.0, 0
    for k in range(1, int(iterations) + 1):
        w = apply(v)
        new = float(v @ w)  # the Rayleigh quotient of v (unit)
        length = float(np.linalg.norm(w))
        if length == 0.0:  # v ⟂ range(T): T = 0 on everything the iteration can reach
            return max(new, 0.0), k
        v = w / length
        if abs(new - est) <= 1e-12 * abs(new):
            return new, k
        est = new
    return est, k


def landweber(T: Operator, z: np.ndarray, steps: int, step: float) -> np.ndarray:
    """w_t of t = ``steps`` Landweber steps w ← w − η(Tw + z) from w_0 = 0, i.e. w_t = −Σ_{k<t} η(I − ηT)^k z
    = −g(T) z with g(σ) = (1 − (1 − ησ)^t)/σ (docs/mathematics.md, "Score estimators on a Nyström basis"; the corrected
    recursion, "Where the papers differ", item C1). T: a matrix or a mat-vec function; one product a step."""
    apply = _applier(T)
    w = np.zeros_like(z)
    for _ in range(int(steps)):
        w = w - step * (apply(w) + z)
    return w


def nu_method(T: Operator, z: np.ndarray, steps: int, rho: float, nu: float) -> np.ndarray:
    """w_t of t = ``steps`` ν-method steps (docs/mathematics.md, "Score estimators on a Nyström basis"): w_0 = 0, w_1 =
    −ω_1 z/ρ, w_k = w_{k−1} + u_k(w_{k−1} − w_{k−2}) − ω_k(z + Tw_{k−1})/ρ; ρ ≥ ‖T‖. T: a matrix or a mat-vec
    function; t − 1 products."""
    apply = _applier(T)
    if steps < 1:
        return np.zeros_like(z)
    w_prev = np.zeros_like(z)
    w = -nu_method_coeffs(1, nu)[1] * z / rho
    for k in range(2, int(steps) + 1):
        u, om = nu_method_coeffs(k, nu)
        w, w_prev = w + u * (w - w_prev) - om * (z + apply(w)) / rho, w
    return w


def check_step(step: float, norm: float) -> None:
    """Refuse a given step above 1/‖T‖ (``norm``: the Lanczos estimate, from below): the filters are defined for
    Landweber's η ≤ 1/‖T‖ and the ν-method's ρ ≥ ‖T‖ (docs/mathematics.md, "Score estimators on a Nyström basis");
    beyond, the ν-method's iterates grow without bound, and Landweber's diverge past 2/‖T‖."""
    if step * norm > 1.0 + 1e-9:
        safe = float(f"{1.0 / (NORM_SAFETY * norm):.3g}")  # 5 % below the bound: its rounding cannot cross it
        raise ValueError(f"step={step:g} is above 1/‖T‖ = {1.0 / norm:.4g} (‖T‖ = {norm:.4g}, by Lanczos), where "
                         f"the iterations stop being a filter of the spectrum; use a step of at most 1/‖T‖ (e.g. "
                         f"step={safe:g}), or step=None (1/(1.05‖T‖))")


def spectral_solve(C: np.ndarray, h: np.ndarray, G: np.ndarray, n: int, lam: float, regularizer: str, *,
                   rank_tol: float = DEFAULT_RANK_TOL, nu: float = 1.0, step: float | None = None,
                   method: str = "auto") -> tuple[np.ndarray, dict[str, object]]:
    """c = −R⁻¹ g_λ(T) z on the projected operator (module docstring); h may have several columns.

    ``rank_tol``: eigenvalues of G below rank_tol·κ_max are cut. ``step`` (Landweber and ν-method only)
    replaces the step read off ‖T‖: Landweber's η, or 1/ρ of the ν-method. ``method`` (Landweber and ν-method
    only): "auto" applies T by mat-vecs with the Cholesky factor of G and the stored C
    (:class:`~tgpflow.solve.matfree.WhitenedOperator`: no eigendecomposition, T never formed; the same c when G is
    definite), falling back to "eigh" (G = VκVᵀ, T formed, the path before issue 18 defect 3) where G is not
    numerically definite. The info says the rank, ``method`` (and ``rcond`` or ``fallback``), and for
    the iterations ``norm_estimate`` (‖T‖ by Lanczos), ``norm_matvecs``, ``step`` (η, or 1/ρ) and
    ``iterations`` (t); ``rho`` and ``nu`` for the ν-method; ``kept`` for the cut-off.
    Working set: C, G and one (md)² factor ("auto"), or C, G and two more (md)² matrices ("eigh").
    """
    if regularizer not in REGULARIZERS:
        raise ValueError(f"regularizer must be one of {REGULARIZERS}; got {regularizer!r}")
    if method not in ITERATIVE_METHODS:
        raise ValueError(f"method must be one of {ITERATIVE_METHODS}; got {method!r}")
    iterative = regularizer in ("landweber", "nu")
    reason = None
    with safe_blas_threads(C.shape[0]):
        if iterative and method == "auto":
            check_memory(3, C.shape[0], f"{regularizer} solve")
            op = WhitenedOperator(C, G, n, rank_tol)
            if op.factor is not None:
                info: dict[str, object] = {"regularizer": regularizer, "method": "cholesky", "rcond": op.rcond,
                                           "rank": int(C.shape[0]), "rank_tol": float(rank_tol)}
                w = _iterate(op.matvec, op.whiten(h), lam, regularizer, nu, step, info)
                return op.coef(w), info
            why = "failed" if op.rcond == 0.0 else f"reciprocal condition {op.rcond:.2g} < rank_tol {rank_tol:g}"
            reason = f"G is not numerically definite (Cholesky {why})"
            del op
        check_memory(4, C.shape[0], f"{regularizer} solve")
        c, info = _spectral(C, h, G, n, lam, regularizer, rank_tol, nu, step)
    if iterative:
        info["method"] = "eigh"
        if reason:
            info["fallback"] = reason
    return c, info


def _iterate(apply: Callable[[np.ndarray], np.ndarray], z: np.ndarray, lam: float, regularizer: str, nu: float,
             step: float | None, info: dict[str, object]) -> np.ndarray:
    """w = −g_λ(T)z by Landweber or the ν-method with mat-vecs ``apply``; the step from ‖T‖ (Lanczos)
    unless given. Records what was done in ``info``."""
    norm, matvecs = operator_norm(apply, size=z.shape[0])
    info.update(norm_estimate=norm, norm_matvecs=matvecs)
    if step is None:
        info["norm_safety"] = NORM_SAFETY
        scale = NORM_SAFETY * norm
        if scale <= 0.0:
            raise FloatingPointError("the projected operator T is zero (no rows, or a degenerate basis): "
                                     "nothing to fit")
        step = 1.0 / scale
    else:
        check_step(step, norm)
    if regularizer == "landweber":
        t = int(np.floor(1.0 / lam))
        info.update(iterations=t, step=step)
        return landweber(apply, z, t, step)
    t = int(np.floor(lam**-0.5))
    info.update(iterations=t, step=step, rho=1.0 / step, nu=nu)
    return nu_method(apply, z, t, 1.0 / step, nu)


def _spectral(C: np.ndarray, h: np.ndarray, G: np.ndarray, n: int, lam: float, regularizer: str, rank_tol: float,
              nu: float, step: float | None) -> tuple[np.ndarray, dict[str, object]]:
    kappa, V = np.linalg.eigh(0.5 * (G + G.T))
    keep = kappa > rank_tol * kappa.max()
    Rinv = V[:, keep] / np.sqrt(kappa[keep])
    T = Rinv.T @ (C / n) @ Rinv
    T = 0.5 * (T + T.T)
    z = Rinv.T @ (h / n)
    info: dict[str, object] = {"regularizer": regularizer, "rank": int(keep.sum()), "rank_tol": float(rank_tol)}
    if regularizer in ("tikhonov", "cutoff"):
        sigma, U = np.linalg.eigh(T)
        if regularizer == "tikhonov":
            g = 1.0 / (np.maximum(sigma, 0.0) + lam)
        else:
            g = np.where(sigma >= lam, 1.0 / np.where(sigma >= lam, sigma, 1.0), 0.0)
            info["kept"] = int((sigma >= lam).sum())
        w = -(U * g) @ (U.T @ z)
        return Rinv @ w, info
    return Rinv @ _iterate(T.__matmul__, z, lam, regularizer, nu, step, info), info


def kernel_heldout_loss(kind: str, val: KEFStats | DiagStats | LiteStats, basis: NystromBasis, base: Base | None,
                        coef: np.ndarray) -> float:
    """Mean Hyvärinen loss ``mean_x[½‖s(x)‖² + div s(x)]`` of a fitted kernel model over the rows of
    ``val``, from their statistics alone: ``(½ cᵀC c + cᵀh + Σ[½‖∇log q0‖² + Δ log q0]) / N``
    (docs/mathematics.md, "Score estimators on a Nyström basis": the objective is quadratic in c with the pass's C and
    h)."""
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


def kernel_solve(kind: str, stats: KEFStats | DiagStats | LiteStats, basis: NystromBasis, base: Base | None,
                 lam: float, *, regularizer: str, ridge: float, rank_tol: float,
                 nu: float, step: float | None = None) -> tuple[np.ndarray, dict[str, Any]]:
    """The coefficients of a kernel model of ``kind`` ("curl_free", "diagonal" or "lite") from a pass's
    statistics at ``lam``, (m, d) ((m,) for lite), and the solver's report: Tikhonov by :func:`tikhonov_direct`
    (``ridge``: [Sutherland et al.]'s ε), else the spectral ``regularizer`` (:func:`spectral_solve`, with ``nu`` and
    ``step``). With
    dimension subsampling (``basis.index``) the solve is on the kept entries and the others are 0."""
    m, d, n = basis.n_basis, basis.n_dims, stats.n
    Y = basis.Y
    if kind == "lite":  # α = −(Cl/N + λ(K_YY + I))⁻¹ r_l/N ([Sutherland et al.]'s lite, λ/2 scaling: B3)
        G = basis.kernel(Y, Y) + np.eye(m)
        alpha, info = tikhonov_direct(stats.Cl, lite_r(stats, basis, base), G, n, lam, 0.0, rank_tol=rank_tol)
        return alpha, {"regularizer": "tikhonov", **info, "model": "lite"}
    index = basis.index if kind == "curl_free" else None
    if kind == "curl_free":
        C, h, G = stats.C, kef_h(stats, basis, base).reshape(m * d), basis.kernel.curl_free_gram(Y, Y)
        if index is not None:  # dimension subsampling: rows/cols of G and entries of h restricted to I
            h, G = h[index], G[np.ix_(index, index)]
    else:
        C, h, G = stats.Ck, diag_h(stats, basis, base), basis.kernel(Y, Y)
    if regularizer == "tikhonov":
        c, info = tikhonov_direct(C, h, G, n, lam, ridge, rank_tol=rank_tol)
        info = {"regularizer": "tikhonov", **info}
    else:
        c, info = spectral_solve(C, h, G, n, lam, regularizer, rank_tol=rank_tol, nu=nu, step=step)
    if not np.all(np.isfinite(c)):
        raise FloatingPointError("the kernel solve gave non-finite coefficients; raise lam or ridge")
    if index is not None:
        full = np.zeros(m * d)
        full[index] = c
        c = full
    return c.reshape(m, d), info
