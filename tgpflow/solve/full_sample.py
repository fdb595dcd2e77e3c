"""Full-sample Landweber and ν-method on the kernel matrix of all n rows (docs/mathematics.md, "Score estimators on a
Nyström basis", "Full-sample iterations"; [Zhou et al.] §3.2 eq 13, Theorem 3.4 with the sign of docs/mathematics.md,
"Where the papers differ", item C1, §3.5 Example 3.8), float64.

The iterations of docs/mathematics.md, "Score estimators on a Nyström basis" run on the operator ``L̂s = (1/n) Σ_b K(·,
X_b) s(X_b)`` and the function ζ̂ (``ζ̂ = ∇ξ̂`` for the curl-free kernel, docs/mathematics.md, "Nyström kernel
exponential family" full KEF). Every iterate lies in span{ζ̂, K(·, X_b)e_j}: ``s = aζ̂ + Σ_b K(·, X_b)β_b``, and on
those coefficients ``L̂s = Σ_b K(·, X_b)[(aζ̂(X) + Gβ)/n]_b`` (a → 0), ``ζ̂ = (a = 1, β = 0)``. So Landweber and the
ν-method of :mod:`tgpflow.solve.kef` run unchanged on the stacked vector ``(a, β)`` (1 + nd numbers) with the operator
``(a, β) ↦ (0, (aζ̂(X) + Gβ)/n)`` — one product with the nd × nd Gram G a step, by
:class:`~tgpflow.solve.matfree.CurlFreeGram` (O(n²d), G never formed) — giving [Zhou et al.]'s forms: Landweber ``a_t =
−tη``, ``β_{k+1} = β_k − (η/n)(a_kζ̂(X) + Gβ_k)``; the ν-method ``a_k = a_{k−1} + u_k(a_{k−1} − a_{k−2}) − ω_k/ρ`` and
the same recursion on β with ``(a_{k−1}ζ̂(X) + Gβ_{k−1})/n``.

Scale: the nonzero spectrum of L̂ is that of G/n, so ‖L̂‖ = ‖G/n‖ is estimated by the Lanczos iteration of
:func:`~tgpflow.solve.kef.operator_norm` with the same products; the step is 1/(1.05‖G/n‖) as in the Nyström
solves. λ means the same: t = ⌊1/λ⌋ Landweber steps, t = ⌊λ^{−½}⌋ ν-method steps.

**Relation to the Nyström estimator with basis = all rows** (``ScoreEstimator.fit(X, basis=X)``): that one
is ``P_V g(P_V L̂ P_V) P_V ζ̂`` with V = span{K(·, X_b)e_j}; since L̂ maps into V, the two agree at the rows
(up to G's eigenvalues cut by ``rank_tol``) and differ off them by ``g(0)(ζ̂ − P_Vζ̂)`` (tη for Landweber):
this is [Zhou et al.]'s full-sample estimator, which keeps ζ̂ itself instead of its projection.

**Many Landweber steps in fewer products.** t Landweber steps are a polynomial of degree t − 1 in the operator:
``a_t = −tη`` and ``β_t = −h_t(A)b`` with ``A = G/n`` (symmetric PSD), ``b = ζ̂(X)/n`` and h_t the polynomial
``(g_t(σ) − tη)/σ`` of docs/mathematics.md, "Score estimators on a Nyström basis". So β_t lies in the Krylov space
span{b, Ab, …, A^{t−2}b}, and the Lanczos process (full reorthogonalisation, ``A Q_k ≈ Q_k T_k`` with T_k
tridiagonal) gives it from far fewer products: the same recursion on the projected operator ``(a, y) ↦ (0,
a‖b‖e₁ + T_k y)`` of 1 + k numbers gives ``y_t = η²S(T_k)‖b‖e₁`` (:func:`landweber_weight`, applied through the
eigendecomposition of T_k: O(k³) a check, whatever t), mapped back by ``β = Q_k y``. This is the Lanczos
approximation of a matrix function (Golub & Van Loan §10.2; Saad, *Iterative Methods*, §6.6), exact once k
reaches t − 1 and in practice converged at k ≈ a few √t: the filter changes over σ ≈ 1/(tη), which a
polynomial of degree O(√t) resolves (the reason the ν-method needs √t steps for Landweber's t).
The iterate is checked every :data:`KRYLOV_CHECK` products and accepted when it moved by at most
:data:`KRYLOV_RTOL` (relative, in the 2-norm) since the last check, or when the space is exact (invariant, or of
dimension t − 1); at most :data:`KRYLOV_MAX_STEPS` products, else the recursion runs. Used for t >
:data:`KRYLOV_MIN_STEPS`; ``solver_info_`` says ``"krylov": True`` and the products it took. Measured (ring,
n = 5 000, d = 2, t = 1 000): benchmarks/kernel_full_sample.py.

Memory: the Gram operator's α, κ (16·n² bytes when kept), a few (n, d) vectors, and for the Lanczos form its k
basis vectors (k·nd float64).
"""

from __future__ import annotations

import numpy as np
import scipy.linalg

from tgpflow.solve.kef import NORM_SAFETY, check_step, landweber, nu_method, operator_norm
from tgpflow.solve.matfree import CurlFreeGram

__all__ = ["full_sample_iteration", "landweber_weight", "KRYLOV_MIN_STEPS"]

#: Landweber runs on the Lanczos projection (module docstring) beyond this many steps; the ν-method's √t steps and
#: short Landweber runs take the recursion itself.
KRYLOV_MIN_STEPS = 64
#: Lanczos products between two checks of the projected iterate.
KRYLOV_CHECK = 16
#: The projected iterate is accepted when a check moved it by at most this (relative 2-norm).
KRYLOV_RTOL = 1e-12
#: Lanczos products at most (its basis: this many nd-vectors); unsettled by then, the recursion runs instead.
KRYLOV_MAX_STEPS = 1000


def full_sample_iteration(gram: CurlFreeGram, zeta_rows: np.ndarray, lam: float, regularizer: str, *,
                          nu: float = 1.0, step: float | None = None) -> tuple[float, np.ndarray, dict[str, object]]:
    """a and β (n, d) of t Landweber (``regularizer="landweber"``, t = ⌊1/λ⌋) or ν-method (``"nu"``,
    t = ⌊λ^{−½}⌋) steps from s = 0 (module docstring); ``zeta_rows`` = ζ̂(X), (n, d). ``step``: η (or 1/ρ)
    instead of 1/(1.05‖G/n‖), at most 1/‖G/n‖ (:func:`~tgpflow.solve.kef.check_step`). Returns a, β and
    ``iterations``, ``step``, ``norm_estimate``, ``norm_matvecs``, ``matvecs`` (all products with G), and ``rho``,
    ``nu`` for the ν-method."""
    n, d = zeta_rows.shape
    flat_zeta = zeta_rows.ravel()
    start = gram.matvecs
    info: dict[str, object] = {"regularizer": regularizer}
    norm, used = operator_norm(lambda v: gram.matvec(v) / n, size=n * d)
    info.update(norm_estimate=norm, norm_matvecs=used)
    if step is None:
        if norm <= 0.0:
            raise FloatingPointError("the Gram matrix is zero (bandwidth too small or too large?): nothing to fit")
        step = 1.0 / (NORM_SAFETY * norm)
        info["norm_safety"] = NORM_SAFETY
    else:
        check_step(step, norm)

    def apply(w: np.ndarray) -> np.ndarray:
        out = np.empty_like(w)
        out[0] = 0.0
        out[1:] = (w[0] * flat_zeta + gram.matvec(w[1:])) / n
        return out

    z = np.zeros(1 + n * d)
    z[0] = 1.0
    if regularizer == "landweber":
        t = int(np.floor(1.0 / lam))
        projected = _krylov_landweber(gram, flat_zeta / n, t, step, norm) if t > KRYLOV_MIN_STEPS else None
        if projected is not None:
            a, beta, krylov = projected
            info.update(iterations=t, step=step, krylov=True, **krylov, matvecs=gram.matvecs - start)
            return a, beta.reshape(n, d), info
        if t > KRYLOV_MIN_STEPS:
            info["krylov"] = f"not settled in {KRYLOV_MAX_STEPS} Lanczos products: the recursion ran"
        w = landweber(apply, z, t, step)
        info.update(iterations=t, step=step)
    elif regularizer == "nu":
        t = int(np.floor(lam**-0.5))
        w = nu_method(apply, z, t, 1.0 / step, nu)
        info.update(iterations=t, step=step, rho=1.0 / step, nu=nu)
    else:
        raise ValueError(f"full-sample iterations are 'landweber' or 'nu'; got {regularizer!r}")
    info["matvecs"] = gram.matvecs - start
    return float(w[0]), w[1:].reshape(n, d), info


def landweber_weight(theta: np.ndarray, t: int, step: float) -> np.ndarray:
    """``S(θ) = Σ_{j<t} j (1 − ηθ)^{t−1−j}`` (η = ``step``), so that t Landweber steps of the stacked recursion give
    ``y_t = η² S(T) ‖b‖e₁`` on the projected operator (module docstring). With x = ηθ: for tx ≥ 1 the closed form
    ``(tx + expm1(t log1p(−x))) / x²`` (no cancellation: its numerator is at least 1/e); below, the exact finite
    series ``Σ_i C(t, i + 2)(−x)^i`` (Σ_j C(j, 1) C(t − 1 − j, i) = C(t, i + 2)), summed until its terms, which shrink
    like (tx)^i / i!, stop counting. float64."""
    x = np.clip(np.asarray(theta, dtype=np.float64) * step, 0.0, None)
    out = np.empty_like(x)
    big = t * x >= 1.0
    xb = x[big]
    below = xb < 1.0  # (1 − x)^t − 1 through log1p where 1 − x > 0; a step past 1/θ (x ≥ 1) by the power itself
    power = np.empty_like(xb)
    power[below] = np.expm1(t * np.log1p(-xb[below]))
    power[~below] = (1.0 - xb[~below]) ** t - 1.0
    out[big] = (t * xb + power) / (xb * xb)
    xs = x[~big]
    term = np.full_like(xs, t * (t - 1) / 2.0)  # C(t, 2)
    total = term.copy()
    for i in range(1, t - 1):
        term *= -xs * (t - i - 1) / (i + 2)  # C(t, i + 2)/C(t, i + 1) = (t − i − 1)/(i + 2)
        total += term
        if not np.any(np.abs(term) > 1e-17 * np.abs(total)):
            break
    out[~big] = total
    return out


def _krylov_landweber(gram: CurlFreeGram, b: np.ndarray, t: int, step: float,
                      norm: float) -> tuple[float, np.ndarray, dict[str, object]] | None:
    """a and β (flat) of t Landweber steps from the Lanczos projection of A = G/n on b (module docstring; ``norm``:
    ‖A‖ by Lanczos, the scale a vanishing β_k is judged on), and
    ``lanczos_steps``, ``lanczos_change`` (the last check's relative move) and ``lanczos_exact`` (the Krylov space
    became invariant, or reached t − 1 dimensions) for the info; None when :data:`KRYLOV_MAX_STEPS` products do not
    settle it (the caller runs the recursion)."""
    n = gram.X.shape[0]
    size = b.size
    bnorm = float(np.linalg.norm(b))
    if bnorm == 0.0:
        return -t * step, np.zeros(size), {"lanczos_steps": 0, "lanczos_change": 0.0, "lanczos_exact": True}
    exact_at = min(size, t - 1)
    limit = min(exact_at, KRYLOV_MAX_STEPS)
    Q = np.empty((size, limit + 1), order="F")
    Q[:, 0] = b / bnorm
    alpha, beta = np.empty(limit), np.empty(limit)
    previous, change = None, np.inf

    def projected(k: int) -> np.ndarray:
        theta, U = scipy.linalg.eigh_tridiagonal(alpha[:k], beta[:k - 1])
        return Q[:, :k] @ (U @ (step * step * landweber_weight(theta, t, step) * U[0] * bnorm))

    for k in range(1, limit + 1):
        v = gram.matvec(Q[:, k - 1]) / n
        alpha[k - 1] = float(Q[:, k - 1] @ v)
        v -= Q[:, :k] @ (Q[:, :k].T @ v)  # full reorthogonalisation, twice (twice is enough: Kahan, Parlett)
        v -= Q[:, :k] @ (Q[:, :k].T @ v)
        beta[k - 1] = float(np.linalg.norm(v))
        exact = beta[k - 1] <= 1e-13 * norm or k == exact_at  # an invariant subspace, or degree t − 2 reached
        if exact or k % KRYLOV_CHECK == 0:
            x = projected(k)
            if previous is not None:
                change = float(np.linalg.norm(x - previous)) / max(float(np.linalg.norm(x)), 1e-300)
            previous = x
            if exact or change <= KRYLOV_RTOL:
                return -t * step, x, {"lanczos_steps": k, "lanczos_change": change, "lanczos_exact": bool(exact)}
        Q[:, k] = v / beta[k - 1]
    return None
