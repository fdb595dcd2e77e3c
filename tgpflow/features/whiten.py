"""Whitening of a kernel's input from pilot rows: the Mahalanobis SDO kernel of RSR (docs/mathematics.md, "Root-Sobolev
density").

``u = W(x − μ)`` with ``W = L⁻¹ D^{−1/2}`` restricted to a numerically independent set of columns:
μ and D = diag(var) are the mean and variances of a set of rows, and ``P R P^T = L Lᵀ`` is the pivoted
Cholesky factor of the pilot correlation matrix R (LAPACK ``dpstrf``). Pivoting stops when the
largest remaining Schur-complement diagonal — the fraction of a column's variance not explained
by the columns already kept — falls below ``tol``: such columns are linear in the kept ones on the
pilot rows, and get weight 0 (so do constant columns). The rows of u then have mean 0 and
identity covariance in ``rank`` dimensions.

Classical (``trim = 0``): the moments of all rows. Robust (``trim > 0``): the moments of the bulk —
the reweighted minimum-covariance-determinant estimate (Rousseeuw & Van Driessen 1999) with
h = ⌈(1 − trim)n⌉ rows: concentration steps from the classical estimate (keep the h rows of
smallest ‖u‖², re-estimate, until the subset repeats or the bulk turns out flat in some columns
(an exact fit, determinant 0); each step lowers the subset's covariance determinant), then one
reweighting step with the rows whose ‖u‖² is within the χ²_rank 0.975
quantile, after rescaling ‖u‖² so that its median matches χ²_rank's, and the consistency factor of
that truncation at the normal. Columns that the bulk does not span but all rows do (e.g. constant
on the bulk: a sensor that is 0 except in faults) are appended as z-scores over all rows, so that
deviations in them stay visible. Unsupervised training rows
contain the anomalies; their share of the moments stretches the classical W along them (heavy
tails of annthyroid's hormone columns), which the robust W does not.

A radial kernel of u is a kernel of the Mahalanobis distance ``‖W(x − y)‖``. Because W is built
from the correlation matrix, it is equivariant to per-column scale and shift: with ``x' = s⊙x + c``
(s > 0), ``W' = W diag(1/s)`` and ``u' = u`` exactly, so the model does not depend on how the
columns were standardised. float64.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import scipy.linalg
import scipy.stats
from scipy.linalg import lapack

__all__ = ["Whitening", "whitening", "WHITEN_TOL", "ROBUST_TRIM"]

#: Unexplained-variance fraction below which a column counts as linear in the others (a column
#: kept at this level is amplified at most 10⁴-fold in u).
WHITEN_TOL = 1e-8


#: Share of rows the robust whitening may set aside (h = 75% of the rows define the bulk).
ROBUST_TRIM = 0.25


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


def whitening(rows: np.ndarray, tol: float = WHITEN_TOL, trim: float = 0.0, max_steps: int = 50) -> Whitening:
    """The whitening of ``rows`` (n, d), n ≥ 2: classical (trim = 0) or robust (module docstring)."""
    x = np.asarray(rows, dtype=np.float64)
    if x.ndim != 2 or x.shape[0] < 2:
        raise ValueError(f"whitening needs an (n, d) array with n >= 2; got shape {x.shape}")
    if not 0 < tol < 1:
        raise ValueError(f"tol must be in (0, 1); got {tol!r}")
    if not 0 <= trim <= 0.5:
        raise ValueError(f"trim must be in [0, 1/2]; got {trim!r}")
    classical = _moments_whitening(x, tol)
    n = x.shape[0]
    h = int(np.ceil((1.0 - trim) * n))
    if trim == 0 or h >= n or h < 2:
        return classical
    wh, subset = classical, None
    for _ in range(int(max_steps)):  # concentration steps
        d2 = np.sum(wh.transform(x) ** 2, axis=1)
        new = np.sort(np.argsort(d2, kind="stable")[:h])
        if subset is not None and np.array_equal(new, subset):
            break
        subset = new
        step = _moments_whitening(x[subset], tol, wh.columns)
        exact_fit = step.rank < wh.rank
        wh = step
        if exact_fit:  # the bulk is flat in some columns (det = 0, the MCD optimum): stop, else the steps
            break  # alternate between excluding and re-admitting the rows that vary in them
    d2 = np.sum(wh.transform(x) ** 2, axis=1)
    k = wh.rank
    scaled = d2 * scipy.stats.chi2.ppf(0.5, k) / max(float(np.median(d2)), np.finfo(float).tiny)
    inliers = scaled <= scipy.stats.chi2.ppf(0.975, k)
    if np.count_nonzero(inliers) >= 2:
        wh = _moments_whitening(x[inliers], tol, wh.columns)
    k = wh.rank
    # consistency at the normal: the moments of rows within the χ²_k 0.975 quantile shrink the
    # covariance by P(χ²_{k+2} ≤ q)/0.975 (Croux & Haesbroeck 1999)
    shrink = scipy.stats.chi2.cdf(scipy.stats.chi2.ppf(0.975, k), k + 2) / 0.975
    # columns the bulk does not span (constant or collinear on it) but all rows do: kept, z-scored
    # by all rows — else a deviation in a column that is constant on the bulk would be invisible
    rest = np.setdiff1d(classical.columns, wh.columns)
    shift, matrix = wh.shift.copy(), wh.matrix * np.sqrt(shrink)
    if rest.size:
        shift[rest] = x[:, rest].mean(axis=0)
        extra = np.zeros((rest.size, x.shape[1]))
        extra[np.arange(rest.size), rest] = 1.0 / x[:, rest].std(axis=0)
        matrix = np.vstack([matrix, extra])
    return Whitening(shift=shift, matrix=matrix, columns=np.concatenate([wh.columns, rest]))


def _moments_whitening(x: np.ndarray, tol: float, columns: np.ndarray | None = None) -> Whitening:
    """Classical whitening from the mean and covariance of the rows of x (of ``columns``, if given)."""
    d = x.shape[1]
    mean = x.mean(axis=0)
    sd = x.std(axis=0)
    live = np.flatnonzero(sd > 0)
    if columns is not None:
        live = np.intersect1d(live, columns)
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
