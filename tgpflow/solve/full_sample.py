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

Memory: the Gram operator's α, κ (16·n² bytes when kept) and a few (n, d) vectors.
"""

from __future__ import annotations

import numpy as np

from tgpflow.solve.kef import landweber, nu_method, operator_norm, NORM_SAFETY
from tgpflow.solve.matfree import CurlFreeGram

__all__ = ["full_sample_iteration"]


def full_sample_iteration(gram: CurlFreeGram, zeta_rows: np.ndarray, lam: float, regularizer: str, *,
                          nu: float = 1.0, step: float | None = None) -> tuple[float, np.ndarray, dict[str, object]]:
    """a and β (n, d) of t Landweber (``regularizer="landweber"``, t = ⌊1/λ⌋) or ν-method (``"nu"``,
    t = ⌊λ^{−½}⌋) steps from s = 0 (module docstring); ``zeta_rows`` = ζ̂(X), (n, d). ``step``: η (or 1/ρ)
    instead of 1/(1.05‖G/n‖). Returns a, β and ``iterations``, ``step``, ``norm_estimate``,
    ``norm_matvecs``, ``matvecs`` (all products with G), and ``rho``, ``nu`` for the ν-method."""
    n, d = zeta_rows.shape
    flat_zeta = zeta_rows.ravel()
    start = gram.matvecs
    info: dict[str, object] = {"regularizer": regularizer}
    if step is None:
        norm, used = operator_norm(lambda v: gram.matvec(v) / n, size=n * d)
        if norm <= 0.0:
            raise FloatingPointError("the Gram matrix is zero (bandwidth too small or too large?): nothing to fit")
        step = 1.0 / (NORM_SAFETY * norm)
        info.update(norm_estimate=norm, norm_matvecs=used, norm_safety=NORM_SAFETY)

    def apply(w: np.ndarray) -> np.ndarray:
        out = np.empty_like(w)
        out[0] = 0.0
        out[1:] = (w[0] * flat_zeta + gram.matvec(w[1:])) / n
        return out

    z = np.zeros(1 + n * d)
    z[0] = 1.0
    if regularizer == "landweber":
        t = int(np.floor(1.0 / lam))
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
