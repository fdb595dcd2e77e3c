"""Samplers over fitted models and score functions (docs/architecture.md, "Layout").

* :func:`resample` — importance resampling from a GP-tilted density's base (docs/mathematics.md, "MAP, baselines and
  sampling"; :func:`~tgpflow.core.gaussian_base.importance_resample`, which a fitted model's ``sample`` uses);
* :func:`langevin`, :func:`mala` — unadjusted / Metropolis-adjusted Langevin chains on a score;
* :func:`mcmc_sample` — MALA chains started at the model's base, with R̂ and ESS across chains;
* :func:`kernel_hmc` — gradient-free HMC with a learned score ([Sutherland et al.] §5.2);
* :func:`svgd` — vanilla and graphical SVGD (docs/mathematics.md, "SVGD, graphical SVGD and the kernel Stein
  discrepancy", [Wang et al.] Algorithm 1);
* :func:`start_points` — where chains and particles start (the model's base, rows of a source, …).

Samplers take a :class:`Target` (:mod:`tgpflow.models.target`): a fitted model, a ``Fitted`` value or a
score callable.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tgpflow.core.gaussian_base import importance_resample
from tgpflow.models.target import Target, as_target
from tgpflow.sample.kernel_hmc import KernelHMCResult, kernel_hmc, leapfrog, trajectory_acceptance
from tgpflow.sample.langevin import ChainResult, langevin, mala
from tgpflow.sample.mcmc import MCMCResult, chain_diagnostics, mcmc_sample
from tgpflow.sample.chain_starts import start_points
from tgpflow.sample.svgd import SVGDResult, grid_graph, svgd, svgd_direction

__all__ = ["resample", "importance_resample", "langevin", "mala", "ChainResult", "kernel_hmc", "KernelHMCResult",
           "leapfrog", "trajectory_acceptance", "svgd", "svgd_direction", "SVGDResult", "grid_graph", "Target",
           "as_target", "mcmc_sample", "MCMCResult", "chain_diagnostics", "start_points"]


def resample(model: Any, n_samples: int, random_state: int | None = 0, **kwargs: Any) -> np.ndarray:
    """``n_samples`` rows by the model's importance resampler (GPTiltedDensity, ExactKDE: ``model.sample``)."""
    if not hasattr(model, "sample"):
        raise TypeError(f"{type(model).__name__} has no resampler: use langevin/mala/svgd on its score")
    return model.sample(n_samples, random_state=random_state, **kwargs)
