"""Sampling by importance resampling from the Gaussian base, made defensive (MATH.md §5).

Proposals ζ ~ q, the base N(μ, Σ) mixed with a share of N(μ, κ²Σ) (:mod:`tgpflow.solve.proposal`:
mass that a tilt puts far from the data must be seen, not missed), are weighted by
``exp(log p̃(ζ) − log q(ζ))`` and resampled multinomially. The effective sample size of the weights
says how good the proposal was; it is returned with the draw.
"""

from __future__ import annotations

import numpy as np

from tgpflow.solve.proposal import proposal_draws

__all__ = ["importance_resample"]


def importance_resample(log_density, mean: np.ndarray, cov: np.ndarray, n_samples: int, n_proposals: int,
                        rng: np.random.Generator) -> tuple[np.ndarray, float]:
    """``n_samples`` rows resampled from ``n_proposals`` draws of the defensive proposal around the base
    N(mean, cov) (:mod:`tgpflow.solve.proposal`); returns (rows, ESS of the weights)."""
    if n_samples < 1 or n_proposals < 1:
        raise ValueError(f"n_samples and n_proposals must be >= 1; got {n_samples}, {n_proposals}")
    proposals, log_q = proposal_draws(mean, np.linalg.cholesky(cov), n_proposals, rng)
    log_w = log_density(proposals) - log_q
    log_w -= log_w.max()
    w = np.exp(log_w)
    w /= w.sum()
    ess = float(1.0 / np.sum(w * w))
    idx = rng.choice(n_proposals, size=n_samples, replace=True, p=w)
    return proposals[idx], ess
