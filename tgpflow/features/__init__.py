"""Explicit, seeded feature draws (values that are saved with models and statistics)."""

from tgpflow.features.rff import RandomFourierFeatures, scott_bandwidth

__all__ = ["RandomFourierFeatures", "scott_bandwidth"]
