"""The full-sample term ξ̂ of the kernel exponential family and of the full-sample score estimators, with its
gradient ζ̂ = ∇ξ̂ and Laplacian (docs/mathematics.md, "Nyström kernel exponential family"; [Zhou et al.] §3.2, §3.5).

For rows X_a with ``g_a = ∇log q0(X_a)`` and a radial k = ψ(u), ``r_a = x − X_a``, ``u_a = ‖r_a‖²``:

* ``ξ̂(x) = (1/n) Σ_a [4ψ''u + 2dψ' − 2ψ' r_aᵀg_a]``;
* ``∇ξ̂(x) = (1/n) Σ_a [φ_a − 4ψ''(r_aᵀg_a)] r_a − 2ψ'g_a``,  ``φ = 8ψ'''u + 4(d + 2)ψ''``;
* ``Δξ̂(x) = (1/n) Σ_a dφ + 2uφ' − (r_aᵀg_a)φ``,  ``φ' = 8ψ''''u + 4(d + 4)ψ'''`` (the divergence of the line
  above term by term: ∇·(φr) = dφ + 2uφ', ∇·(ψ''(rᵀg)r) = (rᵀg)[2ψ'''u + (d + 1)ψ''], ∇·(ψ'g) = 2ψ''rᵀg).

Every sum over a is a GEMM or a row sum on (rows × n) blocks: ``Σ_a c_a r_a = (Σ_a c_a)x − cX`` and
``r_aᵀg_a = xᵀg_a − X_aᵀg_a``; no (rows, n, d) array. float64.
"""

from __future__ import annotations

import numpy as np

from tgpflow.features.kernels import RadialKernel, sq_dist

__all__ = ["xi_parts"]


def xi_parts(kernel: RadialKernel, X: np.ndarray, g: np.ndarray, x: np.ndarray,
             laplacian: bool = False) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """ξ̂(x), ∇ξ̂(x) and (``laplacian``) Δξ̂(x) for rows x (module docstring), in blocks of 8 MiB (rows × n)."""
    n, d = X.shape
    xg = np.einsum("ad,ad->a", X, g)
    rows = max(1, 2**23 // (8 * n))
    xi = np.empty(x.shape[0])
    grad = np.empty(x.shape)
    lap = np.empty(x.shape[0]) if laplacian else None
    for s in range(0, x.shape[0], rows):
        xb = x[s:s + rows]
        u = sq_dist(xb, X)
        _, d1, d2, d3 = kernel.profile(u)
        rg = xb @ g.T
        rg -= xg
        xi[s:s + rows] = (np.sum(4 * d2 * u + 2 * d * d1, axis=1) - 2 * np.sum(d1 * rg, axis=1)) / n
        phi = 8 * d3 * u + 4 * (d + 2) * d2
        if lap is not None:
            dphi = 8 * kernel.fourth(u) * u + 4 * (d + 4) * d3
            lap[s:s + rows] = np.sum(d * phi + 2 * u * dphi - rg * phi, axis=1) / n
        c = phi - 4.0 * d2 * rg
        grad[s:s + rows] = (c.sum(axis=1)[:, None] * xb - c @ X - 2.0 * d1 @ g) / n
    return xi, grad, lap
