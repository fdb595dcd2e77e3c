"""The Gaussian base measure N(μ, Σ): built from the exact moments of a pass, refused in the data's terms
when the data cannot carry it, and drawn from by importance resampling (docs/mathematics.md, "Features and the pilot
pass" and "MAP, baselines and sampling").

Every model family with a Gaussian base (the GP-tilted density, a kernel model with ``base="gaussian"``)
takes it from here, and so does a fitted model's ``sample``: proposals ζ from the base made defensive
(:mod:`tgpflow.core.proposal`) are weighted by ``exp(log p̃(ζ) − log q(ζ))`` and resampled multinomially (the effective
sample size of the weights says how good the proposal was). :func:`check_covariance` says why a covariance is singular —
fewer rows than d + 1, a constant column, collinear columns — naming the columns and the ``columns=``/``--columns``
that drops them, before any linear algebra fails on it.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import scipy.linalg

from tgpflow.core.moments import Moments
from tgpflow.core.proposal import weighted_draws
from tgpflow.errors import COLUMNS_HINT, SourceError

__all__ = ["Base", "base_from_moments", "mixture_base", "check_covariance", "COLLINEAR_TOL", "importance_resample",
           "resample"]

#: A column whose 1 − R² on the columns before it is at most this is called collinear with them.
COLLINEAR_TOL = 1e-10


@dataclasses.dataclass(frozen=True)
class Base:
    """The base measure under the tilt: the Gaussian N(μ, Σ) with its precision P = Σ⁻¹, or — with ``mixture`` — a
    Gaussian mixture m (:class:`~tgpflow.features.mixture_base.GaussianMixtureBase`) whose mean and covariance
    are μ and Σ (docs/gp_tilted.md, "A mixture base").

    What a tilted density needs of its base, for either kind: :meth:`neg_log` (−log of the unnormalised base) and
    :meth:`neg_score` (its gradient, Laplacian and Hessian diagonal, negated). The unnormalised log base is
    ``−½(x−μ)ᵀP(x−μ)`` for the Gaussian and ``log m(x) + ½ log|2πΣ|`` for a mixture: the same function for a
    mixture of one component.
    """

    mean: np.ndarray
    cov: np.ndarray
    precision: np.ndarray
    mixture: Any = None

    @property
    def is_mixture(self) -> bool:
        return self.mixture is not None

    @property
    def log_norm(self) -> float:
        """½ log|2πΣ|: the unnormalised Gaussian base's log normaliser."""
        _, log_det = np.linalg.slogdet(self.cov)
        return 0.5 * (log_det + self.mean.shape[0] * math.log(2 * math.pi))

    def neg_log(self, x: np.ndarray, log_m: np.ndarray | None = None) -> np.ndarray:
        """−log of the unnormalised base at the rows of ``x``: ½(x−μ)ᵀP(x−μ) for the Gaussian,
        −log m(x) − ½ log|2πΣ| for a mixture (from ``log_m``, the mixture's log density at ``x``, when the caller
        has it already)."""
        if self.mixture is not None:
            return -(self.mixture.log_pdf(x) if log_m is None else log_m) - self.log_norm
        r = x - self.mean
        return 0.5 * np.einsum("nd,nd->n", r, r @ self.precision)

    def neg_score(self, x: np.ndarray, *, div: bool = False,
                  hess_diag: bool = False) -> tuple[np.ndarray, Any, np.ndarray | None]:
        """(−∇ log base (n, d), −Δ log base or None, −∂²_j log base per column or None) at the rows of ``x``, from one
        evaluation of a mixture: P(x−μ), tr P (a number) and diag P (d,) for the Gaussian; per row for a mixture."""
        if self.mixture is not None:
            _, score, lap, diag = self.mixture.derivatives(x, hess_diag=hess_diag)
            return -score, (-lap if div else None), (None if diag is None else -diag)
        return ((x - self.mean) @ self.precision, float(np.trace(self.precision)) if div else None,
                np.diag(self.precision) if hess_diag else None)

    def draws(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """``n`` draws of the base (one seeded stream)."""
        if self.mixture is not None:
            return self.mixture.draw(int(n), rng)[0]
        z = rng.standard_normal((int(n), self.mean.shape[0]))
        return self.mean + z @ np.linalg.cholesky(self.cov).T


def mixture_base(mixture: Any) -> Base:
    """The base of a Gaussian mixture: its mean and covariance beside it."""
    cov = mixture.cov
    precision = scipy.linalg.cho_solve((scipy.linalg.cholesky(cov, lower=True), True), np.eye(cov.shape[0]))
    return Base(mixture.mean.copy(), cov, 0.5 * (precision + precision.T), mixture)


def base_from_moments(moments: Moments, columns: tuple[str, ...] | None = None) -> Base:
    """Base = exact moments of the pass: μ = mean, Σ = m2/N (population covariance)."""
    if moments.n < 2:
        raise ValueError(f"the GP-tilted density needs at least 2 rows; got {moments.n} sample"
                         f"{'s' if moments.n != 1 else ''} (n_samples = {moments.n})")
    cov = moments.covariance
    names = columns or tuple(str(j) for j in range(moments.d))
    check_covariance(int(moments.n), moments.mean, cov, names, "the data", "a Gaussian base")
    var = np.diag(cov)
    scale = max(float(var.max()), np.finfo(float).tiny)
    flat = np.flatnonzero(var <= 1e-14 * scale)
    if flat.size:
        names = [columns[j] if columns else str(j) for j in flat]
        raise ValueError(f"column(s) {names} are constant (zero variance); drop them before fitting")
    try:
        chol = scipy.linalg.cholesky(cov, lower=True)
    except np.linalg.LinAlgError as exc:
        raise ValueError("the data covariance is singular (collinear columns); drop redundant columns") from exc
    precision = scipy.linalg.cho_solve((chol, True), np.eye(cov.shape[0]))
    return Base(moments.mean.copy(), cov, 0.5 * (precision + precision.T))


def _others(columns: Sequence[str], leave_out: Sequence[str]) -> str:
    """The fix: the columns to keep, as the Python argument and the CLI flag."""
    keep = [c for c in columns if c not in leave_out]
    if not keep:
        return "a density needs at least one column that varies"
    return (f"leave {'it' if len(leave_out) == 1 else 'them'} out with columns={keep!r} "
            f"(CLI: --columns {','.join(keep)})")


def check_covariance(n: int, mean: np.ndarray, cov: np.ndarray, columns: Sequence[str], where: str,
                     model: str = "the GP-tilted density") -> None:
    """Refuse data whose covariance over ``n`` rows is singular, saying why: fewer rows than d + 1, a
    constant column, or collinear columns (named, with the ``columns=``/``--columns`` that drops them)."""
    columns = [str(c) for c in columns]
    d = len(columns)
    if n <= d:
        raise SourceError(
            f"{where}: {n} row(s) in {d} column(s) are too few (n_samples = {n}) for {model}, which estimates a "
            f"{d}×{d} covariance and needs at least {d + 1} rows (more rows than columns); supply more rows, or "
            f"select fewer columns with {COLUMNS_HINT}")
    std = np.sqrt(np.maximum(np.diag(cov), 0.0))
    # a constant column: its spread is rounding of its mean (exactly 0 when the values are all equal)
    flat = np.flatnonzero(std <= 8 * np.finfo(np.float64).eps * np.abs(mean))
    if flat.size:
        names = [columns[j] for j in flat]
        what = (f"column {names[0]!r} is" if len(names) == 1 else f"columns {names} are")
        values = ", ".join(f"{columns[j]!r} = {mean[j]:.6g}" for j in flat)
        raise SourceError(f"{where}: {what} constant over the {n} rows read ({values}), so {model} is "
                          f"degenerate in {'it' if len(names) == 1 else 'them'}; {_others(columns, names)}")
    corr = cov / np.outer(std, std)
    try:
        # the Cholesky pivots of the correlation matrix: L_kk² = 1 − R² of column k on the columns before it
        residual = np.diag(np.linalg.cholesky(corr)) ** 2
        first = int(np.argmax(residual <= COLLINEAR_TOL)) if (residual <= COLLINEAR_TOL).any() else None
    except np.linalg.LinAlgError:
        first = d - 1
    if first is None:
        return
    _, vectors = np.linalg.eigh(corr[:first + 1, :first + 1])
    weights = np.abs(vectors[:, 0])  # the (nearly) constant combination
    names = [columns[j] for j in np.flatnonzero(weights > 1e-6 * weights.max())]
    raise SourceError(f"{where}: columns {names} are collinear over the {n} rows read (a linear combination of "
                      f"them is constant), so their covariance is singular; {_others(columns, names[-1:])}")


def importance_resample(log_density: Callable[[np.ndarray], np.ndarray], mean: np.ndarray, cov: np.ndarray,
                        n_samples: int, n_proposals: int, rng: np.random.Generator,
                        mixture: Any = None) -> tuple[np.ndarray, float]:
    """``n_samples`` rows resampled from ``n_proposals`` draws of the defensive proposal around N(``mean``,
    ``cov``) — or around a ``mixture`` base with that mean and covariance — (:mod:`tgpflow.core.proposal`),
    weighted by ``exp(log_density − log q)`` (docs/mathematics.md, "MAP, baselines and sampling"); returns (rows, ESS of
    the weights)."""
    if n_samples < 1 or n_proposals < 1:
        raise ValueError(f"n_samples and n_proposals must be >= 1; got {n_samples}, {n_proposals}")
    return resample(*weighted_draws(log_density, mean, cov, n_proposals, rng, mixture), n_samples, rng)


def resample(points: np.ndarray, weights: np.ndarray, n_samples: int,
             rng: np.random.Generator) -> tuple[np.ndarray, float]:
    """``n_samples`` of ``points`` drawn with replacement by their normalised ``weights``; returns (rows, ESS of the
    weights, Kish's 1/Σw²)."""
    idx = rng.choice(weights.size, size=int(n_samples), replace=True, p=weights)
    return points[idx], float(1.0 / np.sum(weights * weights))
