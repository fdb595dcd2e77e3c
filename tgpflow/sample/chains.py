"""What the Markov-chain samplers share: the kept draws of parallel chains and the Metropolis probability."""

from __future__ import annotations

import dataclasses

import numpy as np

__all__ = ["Draws", "mh_probability"]


@dataclasses.dataclass
class Draws:
    """Kept draws of ``n_chains`` parallel chains after warm-up: ``samples`` (n_draws, n_chains, d)."""

    samples: np.ndarray

    @property
    def last(self) -> np.ndarray:
        """The final state of every chain, (n_chains, d)."""
        return self.samples[-1]

    def flat(self) -> np.ndarray:
        """All kept draws as rows, (n_draws · n_chains, d)."""
        return self.samples.reshape(-1, self.samples.shape[-1])


def mh_probability(log_ratio: np.ndarray) -> np.ndarray:
    """min(1, exp(log_ratio)) per chain; 0 where the ratio is not finite (NaN or ±inf log densities)."""
    with np.errstate(invalid="ignore", over="ignore"):
        return np.where(np.isfinite(log_ratio), np.exp(np.minimum(log_ratio, 0.0)), 0.0)
