"""Metrics: sliced KS/Wasserstein (seed 003 §IV) and the held-out Hyvärinen loss (MATH.md §10)."""

from tgpflow.metrics.hyvarinen import hyvarinen_loss
from tgpflow.metrics.sliced import SlicedDistances, model_reference_sample, random_directions, sliced_distances

__all__ = ["hyvarinen_loss", "sliced_distances", "SlicedDistances", "random_directions", "model_reference_sample"]
