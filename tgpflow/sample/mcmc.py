"""MCMC draws that start from the model's base measure, with across-chain diagnostics (R̂, ESS).

Chains started at data rows look right even for a model with a spurious mode: they never travel
to it. :func:`mcmc_sample` starts its chains from the model's own Gaussian base N(μ, Σ) — over-
dispersed relative to the data — runs MALA (or ULA) on the model, and reports, per column, the
rank-normalised split-R̂ and the bulk and tail effective sample sizes of Vehtari et al. (2021)
across chains, computed by ArviZ (``arviz_stats``). Chains that disagree (R̂ > 1.01) or too few
effective draws (bulk ESS < 400) warn (:class:`~tgpflow.models.diagnostics.DiagnosticWarning`);
those are the thresholds that paper recommends.
"""

from __future__ import annotations

import dataclasses
import warnings
from typing import Any

import numpy as np

from tgpflow.errors import DiagnosticWarning
from tgpflow.sample.chain_starts import has_gaussian_base
from tgpflow.sample.langevin import ChainResult, langevin

__all__ = ["MCMCResult", "mcmc_sample", "chain_diagnostics", "RHAT_MAX", "ESS_MIN"]

#: Largest acceptable rank-normalised split-R̂ (Vehtari et al. 2021).
RHAT_MAX = 1.01
#: Smallest acceptable bulk ESS over all chains (Vehtari et al. 2021: 100 per chain for 4 chains).
ESS_MIN = 400.0


def chain_diagnostics(samples: np.ndarray) -> dict[str, np.ndarray]:
    """Per column: rank-normalised split-R̂, bulk ESS and tail ESS of ``samples`` (n_draws, n_chains, d)."""
    from arviz_stats.base import array_stats

    if samples.ndim != 3 or samples.shape[0] < 4 or samples.shape[1] < 2:
        raise ValueError(f"R̂ and ESS need at least 2 chains of 4 draws; got samples of shape {samples.shape}")
    ary = np.moveaxis(samples, 2, 0)  # (d, n_draws, n_chains)
    return {"rhat": np.asarray(array_stats.rhat(ary, chain_axis=-1, draw_axis=-2, method="rank")),
            "ess_bulk": np.asarray(array_stats.ess(ary, chain_axis=-1, draw_axis=-2, method="bulk")),
            "ess_tail": np.asarray(array_stats.ess(ary, chain_axis=-1, draw_axis=-2, method="tail", prob=0.05))}


@dataclasses.dataclass
class MCMCResult:
    """The kept draws (n_samples, d), the chains they came from, and their diagnostics per column."""

    draws: np.ndarray
    chains: ChainResult
    rhat: np.ndarray
    ess_bulk: np.ndarray
    ess_tail: np.ndarray
    init: str
    warnings: list[str]

    def summary(self) -> dict[str, Any]:
        return dict(self.chains.summary(), init=self.init, rhat_max=float(self.rhat.max()),
                    ess_bulk_min=float(self.ess_bulk.min()), ess_tail_min=float(self.ess_tail.min()),
                    warnings=self.warnings)


def _start_points(model: Any, n: int, init: Any, rng: np.random.Generator) -> tuple[np.ndarray, str]:
    if isinstance(init, str):
        if init != "base":
            raise ValueError(f"init must be 'base' or an (n_chains, d) array; got {init!r}")
        if not has_gaussian_base(model):
            raise TypeError(f"{type(model).__name__} has no Gaussian base to start chains from; pass init=rows")
        return model.base_draws(n, random_state=rng), "base"
    x0 = np.asarray(init, dtype=np.float64)
    if x0.ndim != 2 or x0.shape[0] != n:
        raise ValueError(f"init must have one row per chain: shape ({n}, d); got {x0.shape}")
    return x0, "given"


def mcmc_sample(model: Any, n_samples: int, *, method: str = "mala", n_chains: int = 64, thin: int = 10,
                n_warmup: int = 500, step_size: float = 0.1, init: Any = "base",
                random_state: int | np.random.Generator | None = 0, warn: bool = True) -> MCMCResult:
    """``n_samples`` draws of ``model`` by MALA (or ULA) from ``n_chains`` chains started at its base.

    Each chain keeps every ``thin``-th state after ``n_warmup`` adaptive warm-up steps, until the
    chains hold ``n_samples`` draws together. R̂ and ESS are computed over the kept draws.
    """
    if method not in ("mala", "ula"):
        raise ValueError(f"method must be 'mala' or 'ula'; got {method!r}")
    if n_samples < 1 or n_chains < 2 or thin < 1:
        raise ValueError(f"need n_samples >= 1, n_chains >= 2, thin >= 1; got {n_samples}, {n_chains}, {thin}")
    rng = np.random.default_rng(random_state)
    x0, how = _start_points(model, int(n_chains), init, rng)
    per_chain = max(4, -(-int(n_samples) // int(n_chains)))
    chains = langevin(model, x0, per_chain * int(thin), step_size=step_size, n_warmup=int(n_warmup),
                      metropolis=method == "mala", thin=int(thin), random_state=rng)
    diag = chain_diagnostics(chains.samples)
    problems = []
    if float(diag["rhat"].max()) > RHAT_MAX:
        problems.append(f"MCMC chains disagree: R̂ up to {diag['rhat'].max():.4g} "
                        f"(> {RHAT_MAX}); the model may have separated modes, or the chains need more steps "
                        f"(raise n_warmup or thin; tgpflow sample: --warmup, --steps)")
    if float(diag["ess_bulk"].min()) < ESS_MIN:
        problems.append(f"MCMC bulk ESS is {diag['ess_bulk'].min():.0f} (< {ESS_MIN:.0f}): the draws are strongly "
                        f"correlated; raise thin or n_chains (tgpflow sample: --steps, --chains)")
    if warn:
        for message in problems:
            warnings.warn(message, DiagnosticWarning, stacklevel=2)
    draws = chains.samples.reshape(-1, chains.samples.shape[-1])[: int(n_samples)]
    return MCMCResult(draws, chains, diag["rhat"], diag["ess_bulk"], diag["ess_tail"], how, problems)
