"""Dense SPD solves with a documented fallback, float64 (NumPy/SciPy on the host).

``spd_solve`` tries a Cholesky factorisation; if it fails (the matrix is numerically not
positive definite), it retries with a diagonal jitter growing from 1e-10·mean(diag) by
×100 up to 1e-4·mean(diag); if that fails too it runs conjugate gradients on the
original matrix. Each fallback raises a :class:`~tgpflow.errors.TgpflowWarning` that says
what was done; a non-finite result raises instead of returning a NaN model.
"""

from __future__ import annotations

import contextlib
import dataclasses
import threading
import warnings
from typing import Any

import numpy as np
import scipy.linalg
import scipy.sparse.linalg

from tgpflow.core.engine import blas_controller, single_blas_thread
from tgpflow.errors import TgpflowWarning

__all__ = ["SPDFactor", "spd_factor", "spd_solve", "safe_blas_threads", "gemm_is_safe", "LARGE_BLAS_SIZE"]

#: From this matrix size on, dense factorisations run with one BLAS thread. Measured here:
#: the OpenBLAS 0.3.31 wheel of NumPy/SciPy segfaults in multi-threaded SYRK/POTRF at
#: n ≥ 16 000 (a 14 500 Cholesky passes, a 16 000 ``B @ B.T`` and a 20 000 Cholesky crash the
#: process); single-threaded, a 20 000 Cholesky takes 64 s and succeeds.
LARGE_BLAS_SIZE = 14_000


def safe_blas_threads(size: int) -> Any:
    """A context that limits BLAS to one thread for matrices of ``size`` ≥ LARGE_BLAS_SIZE."""
    if size < LARGE_BLAS_SIZE:
        return contextlib.nullcontext()
    return single_blas_thread()


def gemm_is_safe() -> bool:
    """Whether a large GEMM may take all of BLAS's threads here: on the main thread, or where BLAS runs one
    thread (inside :func:`tgpflow.core.engine.compute`, a distributed worker). Elsewhere — a task of Dask's
    own ``compute`` on the threaded scheduler — concurrent tasks' GEMMs each take every core and
    oversubscribe them; callers with an alternative take it there (measured, FVPD log density on 400k rows,
    2 cores, 2 Dask threads: 17.9 s by GEMM with M⁻¹, 11.4 s by triangular solves, 11.1 s by GEMM with one
    BLAS thread). A BLAS thread limit set from a worker thread is not a remedy: OpenBLAS 0.3.31 sometimes
    ignores it, and it outlives the task (measured: the caller's BLAS left at one thread)."""
    if threading.current_thread() is threading.main_thread():
        return True
    return all(lib.num_threads == 1 for lib in blas_controller().select(user_api="blas").lib_controllers)


@dataclasses.dataclass(frozen=True)
class SPDFactor:
    """A Cholesky factor (lower) of A + jitter·I, with what it took to get it."""

    chol: np.ndarray
    jitter: float

    def solve(self, b: np.ndarray) -> np.ndarray:
        return scipy.linalg.cho_solve((self.chol, True), b, check_finite=False)

    def logdet(self) -> float:
        return float(2.0 * np.log(np.diag(self.chol)).sum())


def spd_factor(A: np.ndarray, what: str = "system") -> SPDFactor | None:
    """Cholesky with growing jitter; None when even the largest jitter fails."""
    A = np.asarray(A, dtype=np.float64)
    scale = float(np.mean(np.diag(A)))
    for jitter in (0.0, 1e-10, 1e-8, 1e-6, 1e-4):
        try:
            with safe_blas_threads(A.shape[0]):
                L = scipy.linalg.cholesky(A + (jitter * scale) * np.eye(A.shape[0]) if jitter else A,
                                          lower=True, check_finite=True)
        except (np.linalg.LinAlgError, ValueError):
            continue
        if jitter:
            warnings.warn(f"the {what} matrix is not numerically positive definite; added a jitter of "
                          f"{jitter:g}×mean(diag) = {jitter * scale:.3g} to its diagonal", TgpflowWarning, stacklevel=3)
        return SPDFactor(L, jitter * scale)
    return None


def spd_solve(A: np.ndarray, b: np.ndarray, what: str = "system") -> tuple[np.ndarray, dict[str, object]]:
    """Solve A x = b for SPD A; returns x and a dict describing the method used."""
    factor = spd_factor(A, what)
    if factor is not None:
        x = factor.solve(b)
        info: dict[str, object] = {"method": "cholesky", "jitter": factor.jitter}
    else:
        warnings.warn(f"Cholesky of the {what} matrix failed even with jitter; solving it with "
                      f"conjugate gradients instead", TgpflowWarning, stacklevel=2)
        x, code = scipy.sparse.linalg.cg(A, b, rtol=1e-12, maxiter=20 * A.shape[0])
        info = {"method": "cg", "cg_exit": int(code)}
    if not np.all(np.isfinite(x)):
        raise FloatingPointError(f"solving the {what} gave non-finite values; the statistics are degenerate "
                                 f"(too few rows, or constant columns)")
    return x, info
