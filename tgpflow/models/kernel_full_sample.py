"""The full-sample path of :class:`~tgpflow.models.kernel_score.ScoreEstimator`: an iterative fit whose basis is
every row (``preset("nu_method" | "landweber").fit(X, basis=X)``, [Zhou et al.]'s full-sample estimator) runs
matrix-free (docs/mathematics.md, "Score estimators on a Nyström basis", "Full-sample iterations").

Through the Nyström pass, basis = X means the (nd)² matrix C of the statistics and a Gram G that is numerically
singular (every row is a basis point), so the solve falls back to two eigendecompositions of nd × nd matrices
(10 000 × 10 000 at n = 5 000, d = 2), and C alone is 8·(nd)² bytes. The same iterations run on the n × n kernel
matrix by products (:mod:`tgpflow.solve.full_sample`, :class:`~tgpflow.solve.matfree.CurlFreeGram`) with no nd × nd
matrix, so the fit takes that path whenever it can tell the basis is the rows: the basis given as an array equal
to X (same rows, same order), X an in-memory NumPy array or pandas DataFrame of finite numbers (``columns`` not
given), a fixed λ and bandwidth (no held-out selection: every row is in the basis), no standardization
(``scale=False``, no ``scaling``), all curl-free columns (no ``n_components``). Otherwise — a basis given as a
``NystromBasis``, rows with NaN to drop — the fit goes through the pass as before, and an INFO line says when
it routes. The path runs on the host (``device`` is not used). The fitted model is ``s = aζ̂ + Σ_a
K_cf(·, X_a)β_a + ∇log q0`` (:class:`~tgpflow.models.kernel_fitted.KernelFitted` with its full-sample term); at the
rows it equals the Nyström path's (the two differ off the rows by g(0)(ζ̂ − P_Vζ̂): :mod:`tgpflow.solve.full_sample`).
``solver_info_["path"]`` says ``"full-sample (matrix-free)"``. It keeps no statistics (``partial_fit`` refuses), and
its model file stores the model as ``"curl_free_full_sample"``, which a tgpflow without this path refuses to load.
"""

from __future__ import annotations

import logging
import sys
from typing import Any

import numpy as np

from tgpflow.core.gaussian_base import Base, base_from_moments
from tgpflow.core.moments import Moments
from tgpflow.features.kernel_xi import xi_parts
from tgpflow.features.kernels import median_heuristic
from tgpflow.features.nystrom import NystromBasis
from tgpflow.models.kernel_fitted import KernelFitted
from tgpflow.models.streaming import is_grid
from tgpflow.solve.full_sample import full_sample_iteration
from tgpflow.solve.matfree import CurlFreeGram, gram_budget

__all__ = ["full_sample_rows", "fit_full_sample", "FULL_SAMPLE_PATH"]

FULL_SAMPLE_PATH = "full-sample (matrix-free)"

logger = logging.getLogger("tgpflow")


def full_sample_rows(est: Any, X: Any, basis: Any, columns: Any, scaling: Any) -> tuple[np.ndarray, list[str]] | None:
    """The rows (float64) and column names when ``est.fit(X, basis=basis, …)`` is a full-sample iterative fit that
    runs matrix-free (module docstring), else None: X a NumPy array or a pandas DataFrame of numeric (not boolean)
    columns, all finite, and the basis an array equal to it."""
    if (basis is None or isinstance(basis, NystromBasis) or est.kernel != "curl_free" or getattr(est, "lite", False)
            or getattr(est, "n_components", None) is not None or est.regularizer not in ("nu", "landweber")
            or est.lam == "auto" or is_grid(est.bandwidth) or est.scale or scaling is not None or columns is not None):
        return None
    names: list[str] = []
    pd = sys.modules.get("pandas")
    if isinstance(X, np.ndarray):
        if X.dtype.kind not in "iuf":
            return None
        rows = X
    elif pd is not None and isinstance(X, pd.DataFrame):
        if not all(pd.api.types.is_numeric_dtype(t) and not pd.api.types.is_bool_dtype(t) for t in X.dtypes):
            return None
        rows = X.to_numpy(dtype=np.float64)
        if all(isinstance(c, str) for c in X.columns):  # scikit-learn's rule for feature_names_in_
            names = list(X.columns)
    else:
        return None
    if rows.dtype.kind in "iu" and rows.size and np.abs(rows).max() > 2**53:
        return None  # not exact in float64: the pass's checks say so
    try:
        given = np.asarray(basis, dtype=np.float64)
    except (TypeError, ValueError):
        return None
    rows = np.asarray(rows, dtype=np.float64)
    if rows.ndim != 2 or given.shape != rows.shape or rows.shape[0] < 2 or not np.isfinite(rows).all():
        return None
    if not np.array_equal(rows, given):
        return None
    logger.info("%s.fit: the basis is every row of X: the full-sample iterations run matrix-free (%s)",
                type(est).__name__, FULL_SAMPLE_PATH)
    return rows, names


def fit_full_sample(est: Any, rows: np.ndarray, names: list[str]) -> tuple[KernelFitted, dict[str, Any]]:
    """The full-sample iterations of ``est``'s regularizer on ``rows`` (module docstring): the fitted model and its
    solver info."""
    bw = median_heuristic(rows, random_state=est.random_state) if est.bandwidth == "median" else float(est.bandwidth)
    basis = NystromBasis(rows, bw, est.radial, rows.mean(axis=0))
    base: Base | None = None
    g = np.zeros_like(rows)
    if est.base == "gaussian":
        base = base_from_moments(Moments.from_rows(rows), tuple(names) or None)
        g = -(rows - base.mean) @ base.precision
    _, zeta, _ = xi_parts(basis.kernel, basis.Y, g, basis.Y)
    gram = CurlFreeGram(basis.kernel, basis.Y, budget_bytes=gram_budget())
    a, beta, info = full_sample_iteration(gram, zeta, float(est.lam), est.regularizer, nu=float(est.nu),
                                          step=est.step)
    info = {"path": FULL_SAMPLE_PATH, "reason": "basis = every row of X, in memory: the iterations run on the n × n "
            "kernel matrix by products (no nd × nd matrix)", **info, "size": int(rows.size), **gram.info()}
    return KernelFitted(basis, "curl_free", beta, base, xi_coef=a, xi_weights=g), info
