"""Samplers over fitted models."""

from tgpflow.sample.resample import importance_resample

__all__ = ["importance_resample"]
