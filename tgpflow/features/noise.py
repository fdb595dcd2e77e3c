"""Noise schedules of the noise-conditional GP-tilted density (docs/mathematics.md, "Features and the pilot pass" and
"Noise-conditional Fisher divergence").

Levels ``σ_h = (h−1) σ_max / H``, ``h = 1..H`` (σ_1 = 0, the data level); the paper's
``σ_max = √(tr Σ)/d`` is implemented as printed (docs/mathematics.md, "Where the papers differ", item A5) and can be
overridden. Level h uses the same draw (Z, c) at width ``γ_h = √(γ² + σ_h²)``.
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["noise_levels", "paper_sigma_max", "level_bandwidth", "ladder_prefixes", "AUTO_SIGMA_MAX_FACTOR",
           "LADDER_PREFIX_SHARES"]

#: ``sigma_max="auto"`` is this multiple of the kernel width γ. Measured on the demo mixture (3-D,
#: S = 1000, γ = 0.549 from the pilot, λ selected), the data-level held-out log-likelihood at
#: σ_max/γ = 1, ½, ¼ was −3.551, −3.509, −3.503 nats/row at 200k rows and −3.555, −3.509, −3.500 at 2M;
#: at σ_max = γ the 2M fit failed the sample check (spread 1.20× the data's). λ, selected on
#: held-out rows, already regularises; the noise ladder's smoothing then only blurs the data level.
AUTO_SIGMA_MAX_FACTOR = 0.25
#: ``sigma_max="auto"`` with a held-out selection also scores the ladder's lower parts: its first H' levels, for
#: H' = 1 (σ = 0 alone: FD's data term) and these shares of H (rounded up). The first H' levels of the ladder
#: for σ_max are the whole ladder for σ_max·H'/H with H' levels, so one pass serves every candidate
#: (:func:`ladder_prefixes`; docs/gp_tilted.md, "NCFD's noise ladder in the selection").
LADDER_PREFIX_SHARES = (0.25, 0.5)


def paper_sigma_max(cov: np.ndarray) -> float:
    """σ_max = (1/d)√tr Σ, [Paisley et al.] §IV as printed (docs/mathematics.md, "Where the papers differ", item A5)."""
    cov = np.atleast_2d(cov)
    return math.sqrt(float(np.trace(cov))) / cov.shape[0]


def noise_levels(sigma_max: float, n_levels: int) -> np.ndarray:
    """σ_h = (h−1)σ_max/H for h = 1..H (float64, σ_1 = 0)."""
    if int(n_levels) < 1:
        raise ValueError(f"noise_levels must be >= 1; got {n_levels}")
    if not (math.isfinite(sigma_max) and sigma_max >= 0):
        raise ValueError(f"sigma_max must be a finite number >= 0; got {sigma_max}")
    H = int(n_levels)
    return np.arange(H, dtype=np.float64) * (float(sigma_max) / H)


def level_bandwidth(gamma: float, sigma: float) -> float:
    """γ_σ = √(γ² + σ²)."""
    return math.sqrt(gamma * gamma + sigma * sigma)


def ladder_prefixes(n_levels: int) -> tuple[int, ...]:
    """The numbers of levels H' < H of the ladder's lower parts that a selection scores beside the whole ladder:
    1 and ⌈share·H⌉ for each of :data:`LADDER_PREFIX_SHARES`, increasing, without repeats (none for H = 1)."""
    H = int(n_levels)
    return tuple(sorted({1, *(math.ceil(share * H) for share in LADDER_PREFIX_SHARES)} - {H} & set(range(1, H))))
