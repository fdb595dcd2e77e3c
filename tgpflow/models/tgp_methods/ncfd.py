"""NCFD: one θ for a ladder of noise levels, evaluated at any σ ≥ 0 ([Paisley et al.] Algorithm 3; docs/mathematics.md,
"Noise-conditional Fisher divergence").

With ``sigma_max="auto"`` a held-out selection scores the ladder's lower parts as well as the whole ladder: its
first H' levels, which are the whole ladder for σ_max·H'/H (:func:`~tgpflow.features.noise.ladder_prefixes`), so
the upper noise level is part of the health-first search at no extra pass (docs/gp_tilted.md, "NCFD's noise
ladder in the selection"). H' = 1 is FD's data term alone: NCFD's selection sees FD's candidates too."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from tgpflow.core.gaussian_base import Base
from tgpflow.features.rff import RandomFourierFeatures
from tgpflow.models.tgp_fitted import TGPFitted
from tgpflow.models.tgp_method import GridContext, Hyper, Solution, TGPMethod, with_tilt_scores
from tgpflow.models.tgp_methods import register_method
from tgpflow.solve.ncfd import ncfd_system, solve_ncfd
from tgpflow.solve.select import GridScorer
from tgpflow.stats.ncfd import NCFDStats, ncfd_chunk_stats


class NCFD(TGPMethod):
    name = "ncfd"
    stats_type = NCFDStats
    noise_conditional = True
    mixture_base = True
    extra_arrays = ("noise_levels_",)

    def chunk_stats(self, *, block_bytes: int, precision: str, noise_levels: np.ndarray | None = None,
                    validation: bool = False, mixture: Any = None, ladder: bool = False) -> Any:
        if validation:
            return None
        return ncfd_chunk_stats, (noise_levels, int(block_bytes), precision, mixture, bool(ladder))

    def solve(self, stats: Any, hyper: Hyper) -> Solution:
        if math.isinf(hyper.lam):
            return self.no_tilt(hyper)
        step = _step(stats)
        if hyper.levels is not None:  # the ladder's lower part the selection chose
            stats = stats.truncated(hyper.levels)
        theta, objective, info = solve_ncfd(stats, hyper.features, hyper.base, hyper.lam)
        info = dict(info, noise_levels=int(stats.n_levels), sigma_max=float(stats.n_levels * step))
        return Solution(TGPFitted(hyper.features, hyper.base, theta=theta, block_bytes=hyper.block_bytes), info,
                        objective, theta=theta)

    def score_grid(self, train: Any, val: Any, feats: RandomFourierFeatures, base: Base,
                   ctx: GridContext) -> list[dict[str, float]]:
        val_fd = val.fd if isinstance(val, NCFDStats) else val
        out: list[dict[str, float]] = []
        for h in (*train.prefixes, train.n_levels):  # the ladder's lower parts, then all of it
            part = train.truncated(h)
            A0, b = ncfd_system(part, feats, base, 0.0)
            scorer = GridScorer(A0, b, val_fd, feats, base)
            ladder = {"noise_levels": h, "sigma_max": h * _step(train)} if train.prefixes else {}
            rows = [{"bandwidth": feats.gamma, "lam": lam, **ladder, "loss": scorer.loss(lam * h)} for lam in ctx.lams]
            out += with_tilt_scores(rows, [scorer.theta(lam * h) for lam in ctx.lams], val_fd, feats, base, ctx)
        return out


def _step(stats: NCFDStats) -> float:
    """The ladder's step σ_max/H (0 with one level)."""
    return float(stats.sigmas[1]) if stats.n_levels > 1 else 0.0


METHOD = register_method(NCFD())
