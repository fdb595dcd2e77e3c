"""Sampling by importance resampling from the Gaussian base (MATH.md §5).

Proposals ζ ~ N(μ, Σ) are weighted by ``exp(log q(ζ) − log N(ζ | μ, Σ))`` — the tilt
``θᵀφ(ζ)`` (FD) or ``½φᵀM⁻¹φ − φᵀM⁻¹m`` (FVPD) — and resampled multinomially. The effective
sample size of the weights says how good the proposal was; it is returned with the draw.
"""

from __future__ import annotations

import numpy as np

__all__ = ["importance_resample"]


def importance_resample(log_density, mean: np.ndarray, cov: np.ndarray, n_samples: int, n_proposals: int,
                        rng: np.random.Generator) -> tuple[np.ndarray, float]:
    """``n_samples`` rows resampled from ``n_proposals`` base draws; returns (rows, ESS)."""
    if n_samples < 1 or n_proposals < 1:
        raise ValueError(f"n_samples and n_proposals must be >= 1; got {n_samples}, {n_proposals}")
    chol = np.linalg.cholesky(cov)
    proposals = mean + rng.standard_normal((n_proposals, mean.shape[0])) @ chol.T
    r = np.linalg.solve(chol, (proposals - mean).T)
    log_base = -0.5 * np.einsum("dn,dn->n", r, r)  # constants cancel on normalising
    log_w = log_density(proposals) - log_base
    log_w -= log_w.max()
    w = np.exp(log_w)
    w /= w.sum()
    ess = float(1.0 / np.sum(w * w))
    idx = rng.choice(n_proposals, size=n_samples, replace=True, p=w)
    return proposals[idx], ess
