"""The full kernel exponential family ([Sutherland et al.] eqs 4–5, Sriperumbudur et al.; docs/mathematics.md, "Nyström
kernel exponential family") — small n.

The reference the Nyström model approximates: the minimiser of ``Ĵ(f) + (λ/2)‖f‖²_H`` over all
of H lies in span{ξ̂, ∂_i k(X_a, ·)}, with

``(G + nλI) β = h/λ``,  ``G_{(a,i),(b,j)} = K_cf(X_a, X_b)_{ij}`` (nd × nd),  ``h_(b) = ∇ξ̂(X_b)``,
``ξ̂(x) = (1/n) Σ_a Σ_i [∂²_{y_i}k(y, x) + ∂_{y_i}k(y, x) ∂_i log q0(y)]_{y = X_a}``,
``f = −ξ̂/λ + Σ_{a,i} β_(a,i) ∂_{y_i}k(y, ·)|_{y = X_a}``.

With a radial k = ψ(‖r‖²), r = x − X_a: ``Σ_i ∂²_{y_i}k = 4ψ''u + 2dψ'``, its x-gradient is
``r(8ψ'''u + 4(d+2)ψ'')`` and ``∇_x[∂_y k · g] = K_cf(x, X_a) g``. ``solver="direct"`` factors the
nd × nd system (memory O(n²d²), time O(n³d³) — the cost the seeds report); ``solver="cg"``
(KEF-CG) runs conjugate gradients with the O(n²d) structured mat-vec of [Zhou et al.] Ex. 3.8 and
never forms G. ``solver="auto"`` (the default) factors where the system fits and switches to CG,
with an INFO log line, where it does not.

**KEF-CG**: each iteration is one product of :class:`~tgpflow.solve.matfree.CurlFreeGram` — one GEMM of
the weights α = −2ψ'(u), κ = −4ψ''(u) with an (n, d² + 2d + 1) matrix (d ≤ 8; a blocked form beyond), computed once
(Gaussian k: α alone, κ = −(2/σ_k)α, 8·n² bytes = 200 MB at n = 5000; IMQ: 16·n²) when they fit in
min(4 GiB, half the available RAM), else recomputed per row block each iteration. No Jacobi
preconditioner: G's diagonal is the constant −2ψ'(0) (radial k), so it would only rescale. It stops
at the relative residual ‖b − Aβ‖/‖b‖ ≤ ``cg_tol`` (the CG recursion's residual); ``solver_info_``
reports ``iterations``, ``residual`` and ``converged``.

**The full-sample iterations** (``regularizer="landweber"`` or ``"nu"``): s = a∇ξ̂ + Σ_a K_cf(·, X_a)β_a
(∇ξ̂ = ζ̂) by t products with G (:mod:`tgpflow.solve.full_sample`; docs/mathematics.md, "Score estimators on a Nyström
basis", [Zhou et al.] §3.2 and Example 3.8): no eigendecomposition and no nd × nd matrix. ``solver`` is then unused.
``xi_coef_`` is a: −1/λ for Tikhonov (the KEF), −tη for Landweber.

**Where the direct solve stops fitting.** It holds two float64 (nd)² matrices (G, built in
place into G + nλI, and the temporary of its block layout; LAPACK factors in place):
``16·(nd)²`` bytes — 6.4 GB at nd = 20 000, 64 MB at nd = 2 000. ``check_memory`` compares that with
the RAM available to this process (:func:`tgpflow.core.memory.check_fits`, psutil's "available") when
the fit starts: ``"auto"`` takes CG beyond it, ``"direct"`` raises ``MemoryError`` with both numbers.
CG keeps O(nd) vectors, the rows and α, κ (or row blocks of them). In-memory data only. float64.
"""

from __future__ import annotations

from typing import Any

import logging

import numpy as np
import scipy.linalg
from sklearn.utils.validation import check_is_fitted, validate_data

from tgpflow.core.choices import REGULARIZERS
from tgpflow.features.kernel_xi import xi_parts
from tgpflow.features.kernels import RadialKernel, median_heuristic
from tgpflow.models.estimator_base import Estimator, entry
from tgpflow.models.params import FullKEFParams
from tgpflow.solve.full_sample import full_sample_iteration
from tgpflow.solve.kef import check_memory
from tgpflow.solve.linalg import safe_blas_threads
from tgpflow.solve.matfree import CurlFreeGram, conjugate_gradient, gram_budget

__all__ = ["FullKEF", "DIRECT_MATRICES"]

logger = logging.getLogger("tgpflow")

#: float64 (nd)² matrices the direct solve holds at its peak (module docstring).
DIRECT_MATRICES = 2


class FullKEF(Estimator):
    """Full-rank kernel exponential family (reference for small n); ``solver`` "auto" (direct where its
    16·(nd)² bytes fit in the available RAM, else CG, logged), "direct" or "cg" (module docstring);
    ``regularizer`` "tikhonov" (the KEF), or "landweber" / "nu" (the full-sample iterations, t = ⌊1/λ⌋ /
    ⌊λ^{−½}⌋ products with G). ``solver_info_`` says which ran (``solver``), and why for "auto" (``reason``).
    The parameters below are read off its table, :class:`~tgpflow.models.params.FullKEFParams`."""

    params_table = FullKEFParams

    def __init__(self, *, bandwidth: str | float = "median", lam: float = 1e-3, base: str = "flat",
                 radial: str = "gaussian", solver: str = "auto", cg_tol: float = 1e-10, max_rows: int = 20_000,
                 regularizer: str = "tikhonov", nu: float = 1.0, step: float | None = None):
        self.regularizer = regularizer
        self.nu = nu
        self.step = step
        self.bandwidth = bandwidth
        self.lam = lam
        self.base = base
        self.radial = radial
        self.solver = solver
        self.cg_tol = cg_tol
        self.max_rows = max_rows

    def _grad_log_q0(self, X: np.ndarray) -> np.ndarray:
        if self.base == "flat":
            return np.zeros_like(X)
        return -(X - self.mean_) @ self.precision_

    def _xi_parts(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """ξ̂(x) and ∇ξ̂(x) for rows x (:func:`tgpflow.features.kernel_xi.xi_parts`)."""
        xi, grad, _ = xi_parts(self.kernel_, self.X_, self.g_, x)
        return xi, grad

    @entry
    def fit(self, X: Any, y: Any = None) -> FullKEF:
        X = validate_data(self, X, dtype=np.float64, ensure_min_samples=2)
        n, d = X.shape
        if n > self.max_rows:
            raise ValueError(f"full KEF is for small data: {n} rows > max_rows={self.max_rows}; use NystromKEF")
        self.bandwidth_ = median_heuristic(X) if self.bandwidth == "median" else float(self.bandwidth)
        self.kernel_ = RadialKernel(self.radial, self.bandwidth_)
        self.mean_ = X.mean(axis=0)
        self.precision_ = np.linalg.inv(np.atleast_2d(np.cov(X, rowvar=False, bias=True)))
        self.X_ = X
        self.g_ = self._grad_log_q0(X)
        lam = float(self.lam)
        _, grad_xi = self._xi_parts(X)
        if self.regularizer != "tikhonov":
            if self.regularizer not in REGULARIZERS or self.regularizer == "cutoff":
                raise ValueError(f"FullKEF's regularizer is 'tikhonov', 'landweber' or 'nu'; got {self.regularizer!r}")
            gram = self._gram(X)
            self.xi_coef_, self.beta_, info = full_sample_iteration(gram, grad_xi, lam, self.regularizer,
                                                                    nu=float(self.nu), step=self.step)
            self.solver_info_ = {"solver": "iterative", **info, "size": n * d, **gram.info()}
            return self
        self.xi_coef_ = -1.0 / lam
        rhs = grad_xi.ravel() / lam
        solver, reason = self._pick_solver(n * d)
        if solver == "direct":
            A = self.kernel_.curl_free_gram(X, X)
            A[np.diag_indices_from(A)] += n * lam
            with safe_blas_threads(n * d):
                self.beta_ = scipy.linalg.solve(A.T, rhs, assume_a="pos", overwrite_a=True).reshape(n, d)
            self.solver_info_ = {"solver": "direct", "size": n * d}
        else:
            gram = self._gram(X)
            shift = n * lam
            sol, info = conjugate_gradient(lambda v: gram.matvec(v) + shift * v, rhs, rtol=float(self.cg_tol),
                                           max_iter=10 * n * d)
            self.beta_ = sol.reshape(n, d)
            self.solver_info_ = {"solver": "cg", "cg_exit": 0 if info["converged"] else int(info["iterations"]),
                                 **info, "rtol": float(self.cg_tol), "preconditioner": "none (constant diagonal)",
                                 "size": n * d, **gram.info()}
        if reason:
            self.solver_info_["reason"] = reason
        return self

    def _gram(self, X: np.ndarray) -> CurlFreeGram:
        """G as an operator; α, κ kept when 16·n² bytes fit in min(GRAM_BUDGET_BYTES, half the available RAM)."""
        return CurlFreeGram(self.kernel_, X, budget_bytes=gram_budget())

    def _pick_solver(self, size: int) -> tuple[str, str | None]:
        """"direct" or "cg" for an nd = ``size`` system, and why when ``solver="auto"`` chose CG."""
        if self.solver == "cg":
            return "cg", None
        try:
            check_memory(DIRECT_MATRICES, size, "full KEF direct solve")
        except MemoryError as exc:
            if self.solver == "direct":
                raise MemoryError(f"{exc}; or use solver='cg' (KEF-CG) or 'auto'") from None
            logger.info("FullKEF: %s; solving by conjugate gradients (KEF-CG, O(nd) memory) instead", exc)
            return "cg", str(exc)
        return "direct", None

    def log_density(self, X: Any) -> np.ndarray:
        """f(x) + log q0(x) = aξ̂(x) + Σ β_(a,i) ∂_{y_i}k(X_a, x) + log q0 (unnormalised; a = ``xi_coef_``,
        −1/λ for the KEF)."""
        check_is_fitted(self, "beta_")
        X = validate_data(self, X, reset=False, dtype=np.float64)
        xi, _ = self._xi_parts(X)
        r, alpha, _, _ = self.kernel_.curl_free_parts(X, self.X_)
        f = self.xi_coef_ * xi + np.einsum("nm,nmd,md->n", alpha, r, self.beta_)
        if self.base == "gaussian":
            rr = X - self.mean_
            f -= 0.5 * np.einsum("nd,de,ne->n", rr, self.precision_, rr)
        return f

    def grad_log_density(self, X: Any) -> np.ndarray:
        """a∇ξ̂(x) + Σ_a K_cf(x, X_a) β_a + ∇log q0(x) (a = ``xi_coef_``, −1/λ for the KEF)."""
        check_is_fitted(self, "beta_")
        X = validate_data(self, X, reset=False, dtype=np.float64)
        _, grad_xi = self._xi_parts(X)
        return self.xi_coef_ * grad_xi + self.kernel_.curl_free_matvec(X, self.X_, self.beta_) + self._grad_log_q0(X)
