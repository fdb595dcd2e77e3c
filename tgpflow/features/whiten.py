"""Whitening of a kernel's input from pilot moments: the Mahalanobis SDO kernel of RSR (MATH.md §8).

``u = W(x − μ)`` with ``W = L⁻¹ D^{−1/2}`` restricted to a numerically independent set of columns:
μ and D = diag(var) are the pilot mean and variances, and ``P R P^T = L Lᵀ`` is the pivoted
Cholesky factor of the pilot correlation matrix R (LAPACK ``dpstrf``). Pivoting stops when the
largest remaining Schur-complement diagonal — the fraction of a column's variance not explained
by the columns already kept — falls below ``tol``: such columns are linear in the kept ones on the
pilot rows, and get weight 0 (so do constant columns). The pilot rows of u then have mean 0 and
identity covariance in ``rank`` dimensions.

A radial kernel of u is a kernel of the Mahalanobis distance ``‖W(x − y)‖``. Because W is built
from the correlation matrix, it is equivariant to per-column scale and shift: with ``x' = s⊙x + c``
(s > 0), ``W' = W diag(1/s)`` and ``u' = u`` exactly, so the model does not depend on how the
columns were standardised. float64.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import scipy.linalg
from scipy.linalg import lapack

__all__ = ["Whitening", "whitening", "WHITEN_TOL"]

#: Unexplained-variance fraction below which a column counts as linear in the others (a column
#: kept at this level is amplified at most 10⁴-fold in u).
WHITEN_TOL = 1e-8


@dataclasses.dataclass(frozen=True)
class Whitening:
    """``u = matrix @ (x − shift)``: ``matrix`` is (rank, d), zero on the dropped columns."""

    shift: np.ndarray
    matrix: np.ndarray
    columns: np.ndarray  # the kept input columns, in pivot order

    @property
    def rank(self) -> int:
        return int(self.matrix.shape[0])

    def transform(self, x: np.ndarray) -> np.ndarray:
        return (np.asarray(x, dtype=np.float64) - self.shift) @ self.matrix.T


def whitening(rows: np.ndarray, tol: float = WHITEN_TOL) -> Whitening:
    """The whitening of ``rows`` (n, d), n ≥ 2 (module docstring)."""
    x = np.asarray(rows, dtype=np.float64)
    if x.ndim != 2 or x.shape[0] < 2:
        raise ValueError(f"whitening needs an (n, d) array with n >= 2; got shape {x.shape}")
    if not 0 < tol < 1:
        raise ValueError(f"tol must be in (0, 1); got {tol!r}")
    d = x.shape[1]
    mean = x.mean(axis=0)
    sd = x.std(axis=0)
    live = np.flatnonzero(sd > 0)
    if live.size == 0:
        raise ValueError("every column is constant on the pilot rows: nothing to whiten")
    z = (x[:, live] - mean[live]) / sd[live]
    corr = (z.T @ z) / x.shape[0]
    np.fill_diagonal(corr, 1.0)  # exact: the first pivot is then column order, not rounding, so W is scale-equivariant
    chol, piv, rank, _ = lapack.dpstrf(corr, lower=1, tol=tol)
    keep = piv[:rank] - 1  # 1-based pivots
    L = np.tril(chol[:rank, :rank])
    inv = scipy.linalg.solve_triangular(L, np.eye(rank), lower=True)  # L⁻¹
    matrix = np.zeros((rank, d))
    matrix[:, live[keep]] = inv / sd[live[keep]]
    return Whitening(shift=mean, matrix=matrix, columns=live[keep])
