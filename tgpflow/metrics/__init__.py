"""Metrics: sliced KS/Wasserstein (seed 003 §IV), the held-out Hyvärinen loss, KSD and MMD (MATH.md §9–§10)."""

from tgpflow.metrics.hyvarinen import hyvarinen_loss
from tgpflow.metrics.stein import ksd, mmd
from tgpflow.metrics.sliced import SlicedDistances, model_reference_sample, random_directions, sliced_distances

__all__ = ["hyvarinen_loss", "ksd", "mmd", "sliced_distances", "SlicedDistances", "random_directions", "model_reference_sample"]
