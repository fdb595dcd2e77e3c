"""Metrics: sliced KS/Wasserstein ([Paisley et al.] §IV), the held-out Hyvärinen loss and log-likelihood, KSD and MMD
(docs/mathematics.md, "SVGD, graphical SVGD and the kernel Stein discrepancy" and "Metrics"), and the check that a
model's samples match held-out data."""

from tgpflow.metrics.hyvarinen import heldout_loglik, hyvarinen_loss
from tgpflow.metrics.sample_check import SampleCheck, sample_check
from tgpflow.metrics.stein import ksd, mmd
from tgpflow.metrics.sliced import SlicedDistances, model_reference_sample, random_directions, sliced_distances

__all__ = ["hyvarinen_loss", "ksd", "mmd", "sliced_distances", "SlicedDistances", "random_directions", "model_reference_sample",
           "sample_check", "SampleCheck", "heldout_loglik"]
