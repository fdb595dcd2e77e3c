"""The importance-sampling proposal of every tilted density: the base, made defensive (docs/mathematics.md, "MAP,
baselines and sampling").

A tilted density ``e^{T(x)} N(x | μ, Σ)`` is normalised, sampled and checked by importance sampling.
Drawing from the base ``N(μ, Σ)`` alone cannot see mass the tilt puts far from the data: on MAGIC
with bounds ([Paisley et al.]'s NCFD at λ = 0.1, γ = 3.0, d = 10), the tilt grows at Mahalanobis radius
7–9, where the base puts 10⁻⁶ of its draws; 250 000 base draws gave an ESS of 4 % and a
plausible log Z, while draws of N(μ, 4Σ) found that almost all of the model's mass lies out there
(ESS 7 of 250 000). A fit can then look healthy and be wrong everywhere.

The proposal is therefore Hesterberg's defensive mixture (Hesterberg 1995, *Technometrics* 37)

``q(x) = (1 − α) N(x | μ, Σ) + α N(x | μ, κ²Σ)``,  α = :data:`WIDE_SHARE`, κ = :data:`WIDE_SCALE`,

whose weights ``p/q ≤ p / ((1−α) N(μ, Σ))`` are never more than 1/(1−α) times the base's (a good
fit loses at most a share α of its effective draws), while a share α of the draws explores out to
κ times the data's radius, where a runaway tilt shows up as a collapse of the ESS. Each draw's
component comes from the same seeded stream as its coordinates, so a seed fixes the draws.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import scipy.linalg

__all__ = ["WIDE_SHARE", "WIDE_SCALE", "proposal_draws", "proposal_blocks", "weighted_draws", "DRAW_BLOCK"]

#: The share α of the proposal's draws that come from the wide component.
WIDE_SHARE = 0.2
#: The wide component's scale κ: N(μ, κ²Σ). In d dimensions the base's draws lie near radius √d
#: (Mahalanobis) and the wide ones near κ√d: κ = 2 reached the runaway region of the MAGIC fit
#: above (radius 7–9, d = 10) with a quarter of its draws.
WIDE_SCALE = 2.0
#: Rows per block of draws (one seed each).
DRAW_BLOCK = 8192


def _log_q(r2: np.ndarray, d: int, log_det_chol: float) -> np.ndarray:
    """log q at points of squared Mahalanobis radius ``r2`` (under Σ)."""
    c = -0.5 * d * math.log(2.0 * math.pi) - log_det_chol
    return np.logaddexp(math.log1p(-WIDE_SHARE) + c - 0.5 * r2, _log_wide(r2, d, log_det_chol))


def _log_wide(r2: np.ndarray, d: int, log_det_chol: float) -> np.ndarray:
    """log of the wide component's share α N(x | μ, κ²Σ) at points of squared Mahalanobis radius ``r2``."""
    c = -0.5 * d * math.log(2.0 * math.pi) - log_det_chol
    return math.log(WIDE_SHARE) + c - d * math.log(WIDE_SCALE) - 0.5 * r2 / WIDE_SCALE**2


def proposal_draws(mean: np.ndarray, chol: np.ndarray, n: int, rng: np.random.Generator,
                   mixture: Any = None) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """``n`` draws of the defensive proposal around N(mean, chol cholᵀ) — or around a mixture base with that mean
    and covariance (module docstring) — their log densities log q, and around a mixture its normalised log density
    log m at the draws (which log q needs, and the caller's base term too: None around the Gaussian)."""
    d = mean.shape[0]
    if mixture is not None:
        return _mixture_draws(mixture, mean, chol, int(n), rng)
    z = rng.standard_normal((int(n), d))
    wide = rng.random(int(n)) < WIDE_SHARE
    z[wide] *= WIDE_SCALE
    r2 = np.einsum("nd,nd->n", z, z)
    return mean + z @ chol.T, _log_q(r2, d, float(np.log(np.diag(chol)).sum())), None


def _mixture_draws(mixture: Any, mean: np.ndarray, chol: np.ndarray, n: int,
                   rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    d = mean.shape[0]
    wide = rng.random(n) < WIDE_SHARE
    points = np.empty((n, d))
    points[~wide] = mixture.draw(int((~wide).sum()), rng)[0]
    z = rng.standard_normal((int(wide.sum()), d)) * WIDE_SCALE
    points[wide] = mean + z @ chol.T
    r = scipy.linalg.solve_triangular(chol, (points - mean).T, lower=True)
    log_wide = _log_wide(np.einsum("dn,dn->n", r, r), d, float(np.log(np.diag(chol)).sum()))
    log_m = mixture.log_pdf(points)
    return points, np.logaddexp(math.log1p(-WIDE_SHARE) + log_m, log_wide), log_m


def weighted_draws(log_density: Callable[[np.ndarray], np.ndarray], mean: np.ndarray, cov: np.ndarray, n: int,
                   rng: np.random.Generator, mixture: Any = None) -> tuple[np.ndarray, np.ndarray]:
    """``n`` draws ζ of the proposal around N(``mean``, ``cov``) and their self-normalised importance weights
    ∝ exp(log p̃(ζ) − log q(ζ)) for an unnormalised ``log_density`` (docs/mathematics.md, "MAP, baselines and
    sampling"). A draw where the log density is not finite (e.g. KDE-RFF's estimate ≤ 0) gets weight 0; none finite
    raises. ``mixture``: the mixture base (with that mean and covariance) the proposal is built on."""
    points, log_q, _ = proposal_draws(mean, np.linalg.cholesky(cov), int(n), rng, mixture)
    log_w = log_density(points) - log_q
    finite = np.isfinite(log_w)
    if not finite.any():
        raise FloatingPointError("the model's log density is not finite at any proposal draw")
    w = np.exp(np.where(finite, log_w, -np.inf) - log_w[finite].max())
    return points, w / w.sum()


def _seed_sequence(random_state: Any) -> np.random.SeedSequence:
    if isinstance(random_state, np.random.SeedSequence):
        return random_state
    if isinstance(random_state, np.random.Generator):
        return np.random.SeedSequence(int(random_state.integers(2**63)))
    return np.random.SeedSequence(random_state)


def proposal_blocks(mean: np.ndarray, cov: np.ndarray, n_draws: int, random_state: Any,
                    block_rows: int = DRAW_BLOCK,
                    mixture: Any = None) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray | None]]:
    """Blocks of (ζ, log q(ζ), log m(ζ) or None) for ``n_draws`` draws of the proposal (:func:`proposal_draws`);
    block b from child seed b, so the draws depend only on (seed, n_draws), not on how they are consumed."""
    if n_draws < 1:
        raise ValueError(f"n_draws must be >= 1; got {n_draws}")
    chol = np.linalg.cholesky(cov)
    n_blocks = -(-int(n_draws) // block_rows)
    for b, seed in enumerate(_seed_sequence(random_state).spawn(n_blocks)):
        rows = min(block_rows, int(n_draws) - b * block_rows)
        yield proposal_draws(mean, chol, rows, np.random.default_rng(seed), mixture)
