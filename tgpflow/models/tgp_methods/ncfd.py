"""NCFD: one θ for a ladder of noise levels, evaluated at any σ ≥ 0 (seed 003 Alg 3; MATH.md §3)."""

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
                    validation: bool = False, mixture: Any = None) -> Any:
        if validation:
            return None
        return ncfd_chunk_stats, (noise_levels, int(block_bytes), precision, mixture)

    def solve(self, stats: Any, hyper: Hyper) -> Solution:
        if math.isinf(hyper.lam):
            return self.no_tilt(hyper)
        theta, objective, info = solve_ncfd(stats, hyper.features, hyper.base, hyper.lam)
        return Solution(TGPFitted(hyper.features, hyper.base, theta=theta, block_bytes=hyper.block_bytes), info,
                        objective, theta=theta)

    def score_grid(self, train: Any, val: Any, feats: RandomFourierFeatures, base: Base,
                   ctx: GridContext) -> list[dict[str, float]]:
        val_fd = val.fd if isinstance(val, NCFDStats) else val
        A0, b = ncfd_system(train, feats, base, 0.0)
        scorer = GridScorer(A0, b, val_fd, feats, base)
        h = train.n_levels
        rows = [{"bandwidth": feats.gamma, "lam": lam, "loss": scorer.loss(lam * h)} for lam in ctx.lams]
        return with_tilt_scores(rows, [scorer.theta(lam * h) for lam in ctx.lams], val_fd, feats, base, ctx)


METHOD = register_method(NCFD())
