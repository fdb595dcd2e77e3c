"""Radial kernels and their curl-free matrix kernel (docs/mathematics.md, "Nyström kernel exponential family" and "Score
estimators on a Nyström basis"; [Zhou et al.] Example 3.8).

A radial kernel is ``k(x, y) = ψ(u)``, ``u = ‖r‖²``, ``r = x − y``:

* ``"gaussian"``: ``ψ(u) = exp(−u/σ_k)`` (σ_k is a bandwidth, docs/mathematics.md, "Conventions");
* ``"imq"`` (inverse multiquadric): ``ψ(u) = (1 + u/σ_k)^{−1/2}``.

Everything the estimators need follows from ψ and its first three derivatives (the fourth for one Laplacian):

* ``∇_x k = 2ψ'(u) r``;
* curl-free block ``K_cf(x, y) = ∂_x∂_yᵀ k = −2ψ'(u) I − 4ψ''(u) r rᵀ`` (symmetric; Gaussian:
  ``(2/σ_k)[I − (2/σ_k) r rᵀ] k``), applied to a vector in O(d) as
  ``−2ψ' v − 4ψ'' r (rᵀv)`` — the d×d block is never formed in a mat-vec;
* ``f_β(x) = Σ_a ∂_{y}k(Y_a, x)ᵀβ_a = Σ_a −2ψ'(u_a) r_aᵀβ_a`` has ``∇f = Σ_a K_cf(x, Y_a) β_a`` and
  ``Δf = Σ_a ℓ_a(x)ᵀβ_a`` with ``ℓ_a = −r_a [8ψ'''(u_a) u_a + 4(d + 2) ψ''(u_a)]``
  (Gaussian: ``(4/σ_k²) k r (2u/σ_k − d − 2)``, docs/mathematics.md, "Nyström kernel exponential family" with r = x −
  Y_a).

The bandwidth default is the median heuristic on the pilot sample: σ_k = median ‖x_i − x_j‖²
over pairs (the squared distance, since k = exp(−‖r‖²/σ_k)). All float64.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from tgpflow.core.backend import namespace
from tgpflow.core.choices import KERNELS

__all__ = ["RadialKernel", "KERNELS", "median_heuristic", "curl_free_blocks", "curl_free_columns", "sq_dist"]


@dataclasses.dataclass(frozen=True)
class RadialKernel:
    """``k(x, y) = ψ(‖x − y‖²)`` with bandwidth σ_k (see module docstring)."""

    name: str
    bandwidth: float

    def __post_init__(self) -> None:
        if self.name not in KERNELS:
            raise ValueError(f"kernel must be one of {KERNELS}; got {self.name!r}")
        if not (math.isfinite(self.bandwidth) and self.bandwidth > 0):
            raise ValueError(f"bandwidth must be a finite positive number; got {self.bandwidth!r}")

    def profile(self, u: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """ψ, ψ', ψ'', ψ''' at u = ‖r‖²."""
        s = self.bandwidth
        if self.name == "gaussian":  # u of any array namespace: the device path evaluates ψ where u is
            k = np.exp(-u / s) if isinstance(u, np.ndarray) else namespace(u).exp(-u / s)
            return k, -k / s, k / s**2, -k / s**3
        t = 1.0 + u / s
        k = t**-0.5
        return k, -0.5 * k / (t * s), 0.75 * k / (t * t * s * s), -1.875 * k / (t**3 * s**3)

    def fourth(self, u: np.ndarray) -> np.ndarray:
        """The fourth derivative of ψ at u (the Laplacian of the full-sample term: tgpflow.features.kernel_xi)."""
        s = self.bandwidth
        if self.name == "gaussian":
            return np.exp(-u / s) / s**4
        t = 1.0 + u / s
        return 6.5625 * t**-0.5 / (t**4 * s**4)  # (105/16) t^(−9/2) / s⁴

    def __call__(self, X: np.ndarray, Y: np.ndarray) -> np.ndarray:
        """k(X_i, Y_j), (n, m)."""
        return self.profile(sq_dist(X, Y))[0]

    def curl_free_parts(self, X: np.ndarray, Y: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """r (n, m, d), α = −2ψ', κ = −4ψ'' (n, m) and the Laplacian weights ω = −(8ψ'''u + 4(d+2)ψ'')
        so that ``K_cf(x, Y_a) = α I + κ r rᵀ`` and ``ℓ_a = ω r``."""
        r = X[:, None, :] - Y[None, :, :]
        return (r, *self.curl_free_weights(np.einsum("nmd,nmd->nm", r, r), X.shape[1]))

    def curl_free_weights(self, u: np.ndarray, d: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """α, κ, ω of :meth:`curl_free_parts` from the squared distances u alone (n, m), in dimension d."""
        _, d1, d2, d3 = self.profile(u)
        return -2.0 * d1, -4.0 * d2, -(8.0 * d3 * u + 4.0 * (d + 2) * d2)

    def curl_free_matvec(self, X: np.ndarray, Y: np.ndarray, V: np.ndarray, block_rows: int | None = None) -> np.ndarray:
        """Σ_a K_cf(X_i, Y_a) V_a for every row i, (n, d), in O(n m d) ([Zhou et al.] Ex. 3.8).

        With r_a = x − Y_a: ``Σ_a α_a V_a + Σ_a w_a (x − Y_a)``, ``w_a = κ_a (xᵀV_a − Y_aᵀV_a)`` —
        three GEMMs on (rows × m) blocks; neither the d×d blocks nor the (n, m, d) differences
        are formed. Rows go in blocks of ~64 MiB of (rows × m) work arrays.
        """
        rows = block_rows or max(1, 2**23 // max(1, Y.shape[0]))
        yv = np.einsum("md,md->m", Y, V)
        out = np.empty((X.shape[0], X.shape[1]))
        for s in range(0, X.shape[0], rows):
            xb = X[s:s + rows]
            _, d1, d2, _ = self.profile(sq_dist(xb, Y))
            w = -4.0 * d2 * (xb @ V.T - yv)
            out[s:s + rows] = -2.0 * d1 @ V + w.sum(axis=1)[:, None] * xb - w @ Y
        return out

    def curl_free_gram(self, X: np.ndarray, Y: np.ndarray) -> np.ndarray:
        """The dense block matrix [K_cf(X_i, Y_a)] of shape (n·d, m·d) (small problems, G)."""
        r, alpha, kappa, _ = self.curl_free_parts(X, Y)
        n, m, d = r.shape
        return curl_free_blocks(r, alpha, kappa).reshape(n * d, m * d)


def curl_free_blocks(r: np.ndarray, alpha: np.ndarray, kappa: np.ndarray) -> np.ndarray:
    """``out[n, i, a, j] = K_cf(x_n, Y_a)_{ij} = α δ_ij + κ r_i r_j`` from the parts, (n, d, m, d)."""
    n, m, d = r.shape
    # C-ordered output (NumPy would follow the transposed operand's strides), so that the callers'
    # reshape to (n·d, m·d) is a view, not a second copy of the largest array of a block.
    out = np.empty((n, d, m, d))
    np.multiply(kappa[:, None, :, None] * r.transpose(0, 2, 1)[:, :, :, None], r[:, None, :, :], out=out)
    idx = np.arange(d)
    out[:, idx, :, idx] += alpha[None, :, :]
    return out


def curl_free_columns(x: np.ndarray, Y: np.ndarray, alpha: np.ndarray, kappa: np.ndarray,
                      index: np.ndarray) -> np.ndarray:
    """The columns ``index`` (flat a·d + j) of the stacked blocks: ``out[n, i, c] = K_cf(x_n, Y_a)_{ij}`` for
    c ↔ (a, j), shape (n, d, |I|) — :func:`curl_free_blocks` restricted to the index set I of dimension
    subsampling (docs/mathematics.md, "Nyström kernel exponential family"), without forming the other m·d − |I| columns
    (they cost more than the SYRK once |I| is small) or the differences r for all m·d. ``index`` must be grouped by
    component, ``index % d`` non-decreasing, so that the α δ_ij term is d slice additions (a scattered
    addition costs as much as the rest). α, κ: (n, m) from :meth:`RadialKernel.curl_free_weights`.
    """
    d = x.shape[1]
    a, j = np.divmod(index, d)
    if np.any(np.diff(j) < 0):
        raise ValueError("index must be sorted by component (index % d non-decreasing)")
    w = np.take(kappa, a, axis=1)
    w *= np.take(x, j, axis=1) - Y[a, j]  # κ_a r_{a,j}
    # C order given, not inferred from the operands (NumPy would not): the callers' reshape to (n·d, |I|) is a view
    out = np.subtract(x[:, :, None], Y[a].T[None, :, :], out=np.empty((x.shape[0], d, index.size)))  # r_{a,i}
    out *= w[:, None, :]
    al = np.take(alpha, a, axis=1)
    bounds = np.searchsorted(j, np.arange(d + 1))
    for i in range(d):  # + α_a δ_ij: the columns of component i are the slice bounds[i]:bounds[i + 1]
        out[:, i, bounds[i]:bounds[i + 1]] += al[:, bounds[i]:bounds[i + 1]]
    return out


def sq_dist(X: np.ndarray, Y: np.ndarray) -> np.ndarray:
    """‖X_i − Y_j‖² (n, m), clipped at 0 (the expanded form can round below it)."""
    d2 = np.sum(X * X, axis=1)[:, None] - 2.0 * X @ Y.T + np.sum(Y * Y, axis=1)[None, :]
    return np.maximum(d2, 0.0)


def median_heuristic(rows: np.ndarray, max_rows: int = 2000, random_state: int | None = 0) -> float:
    """σ_k = median of ‖x_i − x_j‖² over distinct pairs of (a seeded subsample of) ``rows``."""
    rows = np.asarray(rows, dtype=np.float64)
    if rows.shape[0] > max_rows:
        rows = rows[np.random.default_rng(random_state).choice(rows.shape[0], max_rows, replace=False)]
    d2 = sq_dist(rows, rows)[np.triu_indices(rows.shape[0], k=1)]
    if d2.size == 0 or not np.median(d2) > 0:
        raise ValueError("the median heuristic needs at least 2 distinct rows")
    return float(np.median(d2))
