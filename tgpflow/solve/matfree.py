"""Matrix-free pieces of the kernel solves (docs/mathematics.md, "Nyström kernel exponential family" and "Score
estimators on a Nyström basis"; [Zhou et al.] §3.2, §3.5 Example 3.8), float64.

* :class:`CurlFreeGram` — the nd × nd curl-free Gram ``G = [K_cf(X_a, X_b)]`` of n rows as an operator. Each d × d
  block is ``α_ab I + κ_ab r_ab r_abᵀ`` (``r_ab = X_a − X_b``, ``α = −2ψ'(u)``, ``κ = −4ψ''(u)``, ``u = ‖r_ab‖²``:
  :mod:`tgpflow.features.kernels`), so a product needs the n² scalars α, κ and never the blocks: expanding
  ``(r_abᵀV_b) r_ab`` it is one GEMM of the weights with an (n, d² + 2d + 1) matrix (:meth:`CurlFreeGram.matvec`),
  reading them once, for d ≤ :data:`ONE_GEMM_MAX_DIMS`; beyond, where d² columns cost more flops than the reads
  they save, three GEMMs per block of rows with an n-wide work array (the blocked form). α and κ (n × n
  float64; for the Gaussian kernel κ = −(2/σ_k)α, so α alone: 8·n² bytes,
  200 MB at n = 5000; IMQ 16·n²) are computed once when they fit in ``budget_bytes``; otherwise each product
  recomputes them in row blocks of about ``block_bytes`` (streamed: O(n·rows) memory, the kernel evaluated again
  every product). Both forms are O(n²) in memory traffic; measured in benchmarks/kernel_full_sample.py.
* :class:`WhitenedOperator` — the projected operator ``T = R⁻ᵀ(C/N)R⁻¹`` of docs/mathematics.md, "Score estimators on a
  Nyström basis" with the Cholesky factor ``G = R_cᵀR_c`` (R_c upper) in place of the eigen-square-root ``R =
  κ_r^{½}V_rᵀ``: ``T' = R_c⁻ᵀ(C/N)R_c⁻¹``, ``z' = R_c⁻ᵀh/N``, ``c = R_c⁻¹w'``. When G is definite both are square roots
  of G (``RᵀR = R_cᵀR_c``), so ``Q = R_cR⁻¹`` is orthogonal, ``T' = QTQᵀ``, ``g(T') = Qg(T)Qᵀ`` for every filter
  g and ``c = R_c⁻¹g(T')z' = R⁻¹g(T)z``:
  the same coefficients. Un-whitened, Landweber reads ``c ← c − ηG⁻¹(Cc + h)/N`` (the two triangular
  solves are G⁻¹ in halves). A product is one GEMV with the stored C and two triangular solves, O((md)²);
  the setup is one Cholesky, (md)³/3 flops, against the eigendecompositions of G and T and the two
  (md)³ products forming T of the eigh path.
* :func:`conjugate_gradient` — CG on an SPD operator with a relative-residual stopping rule.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import scipy.linalg

from tgpflow.features.kernels import RadialKernel, sq_dist

__all__ = ["CurlFreeGram", "WhitenedOperator", "conjugate_gradient", "GRAM_BUDGET_BYTES", "gram_budget"]

#: α (and κ) of :class:`CurlFreeGram` are kept up to this size by default (never more than half the available RAM:
#: :func:`gram_budget`): n ≈ 23 000 Gaussian (8·n² bytes), n ≈ 16 000 IMQ (16·n²). Beyond, every product computes
#: the kernel again (streamed): at n = 20 000 that is 4·10⁸ exponentials a product.
GRAM_BUDGET_BYTES = 4 * 2**30
#: The one-GEMM product (:meth:`CurlFreeGram.matvec`) up to this many dimensions d; the blocked form beyond. Measured in
#: benchmarks/kernel_full_sample.py (n = 5 000, 2 cores).
ONE_GEMM_MAX_DIMS = 8


def gram_budget() -> int:
    """The bytes a :class:`CurlFreeGram` may keep here: min(GRAM_BUDGET_BYTES, half the available RAM)."""
    import psutil

    return min(GRAM_BUDGET_BYTES, int(psutil.virtual_memory().available) // 2)


class CurlFreeGram:
    """``G V`` for the curl-free Gram of rows X (module docstring); V of shape (n, d) or (n·d,).

    ``budget_bytes``: keep α, κ (8·n² or 16·n² bytes) when they fit, else stream them in row blocks of
    ``block_bytes`` of (rows × n) work arrays. ``kept`` says which; ``bytes`` what is held.
    """

    def __init__(self, kernel: RadialKernel, X: np.ndarray, *, budget_bytes: int = GRAM_BUDGET_BYTES,
                 block_bytes: int = 64 * 2**20, form: str = "auto"):
        self.kernel, self.X = kernel, np.ascontiguousarray(X, dtype=np.float64)
        n = self.X.shape[0]
        if form not in ("auto", "gemm", "blocked"):
            raise ValueError(f"form must be 'auto', 'gemm' or 'blocked'; got {form!r}")
        #: the product's form (module docstring): "gemm" up to ONE_GEMM_MAX_DIMS columns, else "blocked"
        self.form = form if form != "auto" else ("gemm" if self.X.shape[1] <= ONE_GEMM_MAX_DIMS else "blocked")
        self.rows = max(1, int(block_bytes) // (8 * 4 * n))  # ~4 float64 (rows × n) work arrays a block
        #: Gaussian k: κ = −(2/σ_k)α, so only α is kept (8·n² bytes); otherwise α and κ (16·n²)
        self.kappa_scale = -2.0 / kernel.bandwidth if kernel.name == "gaussian" else None
        self.kept = self._matrices * 8 * n * n <= budget_bytes
        self._Xc = self.X - self.X.mean(axis=0)  # G depends on differences of rows only: centred for rounding
        #: rows of a blocked product's block when α, κ are kept: its (rows × n) work array about 2 MiB (in cache)
        self.cache_rows = max(16, 2**21 // (8 * n))
        self._X1 = np.hstack([self._Xc, np.ones((n, 1))])  # [X | 1] of the blocked form, built once
        self.alpha: np.ndarray | None = None
        self.kappa: np.ndarray | None = None
        if self.kept:
            self.alpha = np.empty((n, n))
            self.kappa = None if self.kappa_scale is not None else np.empty((n, n))
            for s in range(0, n, self.rows):
                alpha, kappa = self._parts(s)
                self.alpha[s:s + self.rows] = alpha
                if self.kappa is not None:
                    self.kappa[s:s + self.rows] = kappa
        self.matvecs = 0

    @property
    def _matrices(self) -> int:
        return 1 if self.kappa_scale is not None else 2

    @property
    def bytes(self) -> int:
        """Bytes held between products (α and κ, or none)."""
        return self._matrices * 8 * self.X.shape[0] ** 2 if self.kept else 0

    def info(self) -> dict[str, object]:
        """What a fit's ``solver_info_`` says of the Gram: ``gram`` ("kept" or "streamed") and ``gram_bytes``."""
        return {"gram": "kept" if self.kept else "streamed", "gram_bytes": self.bytes}

    def _parts(self, s: int) -> tuple[np.ndarray, np.ndarray]:
        _, d1, d2, _ = self.kernel.profile(sq_dist(self._Xc[s:s + self.rows], self._Xc))
        d1 *= -2.0
        d2 *= -4.0
        return d1, d2

    @property
    def diagonal(self) -> float:
        """Every diagonal entry of G: K_cf(x, x) = −2ψ'(0) I (radial k): a Jacobi preconditioner is a scalar."""
        return float(-2.0 * self.kernel.profile(np.zeros(1))[1][0])

    def matvec(self, V: np.ndarray) -> np.ndarray:
        """G V, shaped as V ((n, d) or flat), float64, by the radial structure of the blocks: with the rows
        centred (G is translation invariant), ``s_b = X_bᵀV_b`` and ``P_b = X_b V_bᵀ`` (d × d),

        ``(GV)_a = (αV)_a + X_a X_aᵀ(κV)_a − X_a(κs)_a − M_a X_a + (κ(s∘X))_a``,  ``M_a = (κP)_a``,

        so a product is one GEMM of the n × n weights with the (n, d² + 2d + 1) matrix ``W = [V | s | P | s∘X]``
        (Gaussian k: κ = −(2/σ_k)α, one GEMM with α; otherwise α V and κ W) and O(nd²) more: the weights are
        read once. With ``form == "blocked"``, :meth:`_matvec_blocked`."""
        if self.form == "blocked":
            return self._matvec_blocked(V)
        n, d = self.X.shape
        Vm = np.asarray(V, dtype=np.float64).reshape(n, d)
        Xc = self._Xc
        s = np.einsum("bd,bd->b", Xc, Vm)
        W = np.empty((n, d * d + 2 * d + 1))
        W[:, :d] = Vm
        W[:, d] = s
        W[:, d + 1:d + 1 + d * d] = (Xc[:, :, None] * Vm[:, None, :]).reshape(n, d * d)
        W[:, d + 1 + d * d:] = s[:, None] * Xc
        out = np.empty((n, d))
        step = n if self.kept else self.rows
        for a in range(0, n, step):
            e = min(n, a + step)
            if self.kept:
                alpha, kappa = self.alpha[a:e], None if self.kappa is None else self.kappa[a:e]
            else:
                alpha, kappa = self._parts(a)
            if self.kappa_scale is not None:  # Gaussian: κW = (−2/σ_k)·αW, one GEMM
                KW = alpha @ W
                aV = KW[:, :d].copy()
                KW *= self.kappa_scale
            else:
                aV, KW = alpha @ Vm, kappa @ W
            out[a:e] = aV + self._kappa_terms(Xc[a:e], KW, d)
        self.matvecs += 1
        return out.reshape(np.shape(V))

    def _matvec_blocked(self, V: np.ndarray) -> np.ndarray:
        """G V in row blocks: per block two GEMMs with ``[X | 1]`` (``w = [X_s | 1][V | −XᵀV]ᵀ`` and ``w[X | 1]``
        give Σ_b w_ab X_b and Σ_b w_ab at once), one with α, and one elementwise product with κ; O(n²d) flops,
        the (rows × n) block w in cache (``w_ab = κ_ab (X_aᵀV_b − X_bᵀV_b)``, docs/mathematics.md, "Nyström kernel
        exponential family")."""
        n, d = self.X.shape
        X1 = self._X1
        Vm = np.asarray(V, dtype=np.float64).reshape(n, d)
        V1 = np.empty((n, d + 1))
        V1[:, :d] = Vm
        V1[:, d] = -np.einsum("bd,bd->b", self._Xc, Vm)
        out = np.empty((n, d))
        step = self.rows if not self.kept else self.cache_rows
        for s in range(0, n, step):
            e = min(n, s + step)
            if self.kept:
                alpha = self.alpha[s:e]
                kappa = alpha if self.kappa is None else self.kappa[s:e]
            else:
                alpha, kappa = self._parts(s)
            w = X1[s:e] @ V1.T
            w *= kappa
            wx = w @ X1
            if self.kept and self.kappa is None:
                wx *= self.kappa_scale
            res = alpha @ Vm
            res += wx[:, d:] * self._Xc[s:e]
            res -= wx[:, :d]
            out[s:e] = res
        self.matvecs += 1
        return out.reshape(np.shape(V))

    @staticmethod
    def _kappa_terms(Xa: np.ndarray, KW: np.ndarray, d: int) -> np.ndarray:
        """Σ_b κ_ab (r_abᵀV_b) r_ab for the rows Xa from ``KW = κ W`` (:meth:`matvec`)."""
        kV, ks = KW[:, :d], KW[:, d]
        M = KW[:, d + 1:d + 1 + d * d].reshape(-1, d, d)
        ksX = KW[:, d + 1 + d * d:]
        res = (np.einsum("ad,ad->a", Xa, kV) - ks)[:, None] * Xa
        res -= np.einsum("aij,aj->ai", M, Xa)
        res += ksX
        return res


class WhitenedOperator:
    """``T' = R⁻ᵀ(C/N)R⁻¹`` with the Cholesky factor ``G = RᵀR`` (R upper; module docstring): ``matvec``,
    ``whiten(h)`` = R⁻ᵀh/N, ``coef(w)`` = R⁻¹w. ``factor`` is None when G is not numerically definite (the
    factorisation fails, or its reciprocal condition estimate, LAPACK ``dpocon`` in the 1-norm, is below
    ``rank_tol``: within a factor md of κ_min/κ_max, where the eigh path would cut eigenvalues); ``rcond``
    says it. Holds R, one (md)² float64 matrix, beside the caller's C and G (G is not modified)."""

    def __init__(self, C: np.ndarray, G: np.ndarray, n: int, rank_tol: float):
        self.C, self.n = C, n
        A = np.add(G, G.T)
        A *= 0.5
        anorm = float(np.abs(A).sum(axis=0).max())
        try:  # Aᵀ (= A) is Fortran-ordered: LAPACK factors it in place
            R = scipy.linalg.cholesky(A.T, lower=False, overwrite_a=True, check_finite=False)
            self.rcond = float(scipy.linalg.lapack.dpocon(R, anorm)[0])
        except np.linalg.LinAlgError:
            R, self.rcond = None, 0.0
        self.factor = R if R is not None and self.rcond >= rank_tol else None

    def _solve(self, v: np.ndarray, trans: int) -> np.ndarray:
        return scipy.linalg.solve_triangular(self.factor, v, lower=False, trans=trans, check_finite=False)

    def matvec(self, v: np.ndarray) -> np.ndarray:
        """T'v: R⁻ᵀ(C(R⁻¹v))/N — two triangular solves and one product with C, O((md)²)."""
        return self._solve(self.C @ self._solve(v, 0), 1) / self.n

    def whiten(self, h: np.ndarray) -> np.ndarray:
        return self._solve(h / self.n, 1)

    def coef(self, w: np.ndarray) -> np.ndarray:
        return self._solve(w, 0)


def conjugate_gradient(matvec: Callable[[np.ndarray], np.ndarray], b: np.ndarray, *, rtol: float, max_iter: int,
                       precond: float = 1.0) -> tuple[np.ndarray, dict[str, object]]:
    """Solve Ax = b for SPD A by conjugate gradients from x = 0 (Golub & Van Loan Alg 11.5.1), one ``matvec`` an
    iteration, stopped when the recursive relative residual ‖r‖/‖b‖ ≤ ``rtol`` or after ``max_iter``.
    ``precond``: a scalar Jacobi preconditioner (M = precond·I) — for a constant diagonal it only rescales, so
    the iterates are those of plain CG. Returns x and ``iterations``, ``residual`` (the recursive relative
    residual), ``converged``. float64."""
    x = np.zeros_like(b, dtype=np.float64)
    r = np.array(b, dtype=np.float64)
    bnorm = float(np.linalg.norm(r))
    if bnorm == 0.0:
        return x, {"iterations": 0, "residual": 0.0, "converged": True}
    z = r / precond
    p = z.copy()
    rz = float(r @ z)
    res, k = 1.0, 0
    while k < max_iter:
        Ap = matvec(p)
        step = rz / float(p @ Ap)
        x += step * p
        r -= step * Ap
        k += 1
        res = float(np.linalg.norm(r)) / bnorm
        if res <= rtol:
            break
        z = r / precond
        rz, rz_old = float(r @ z), rz
        p *= rz / rz_old
        p += z
    return x, {"iterations": k, "residual": res, "converged": res <= rtol}
