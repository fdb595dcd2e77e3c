"""FD: the GP-tilted density by Fisher divergence, a closed-form ridge solve ([Paisley et al.] Algorithm 2;
docs/mathematics.md, "Fisher divergence and base-measure learning")."""

from __future__ import annotations

import math
from typing import Any

from tgpflow.core.gaussian_base import Base
from tgpflow.features.rff import RandomFourierFeatures
from tgpflow.models.tgp_fitted import TGPFitted
from tgpflow.models.tgp_method import GridContext, Hyper, Solution, TGPMethod, with_tilt_scores
from tgpflow.models.tgp_methods import register_method
from tgpflow.solve.base_learning import learn_base
from tgpflow.solve.select import GridScorer
from tgpflow.solve.tgp import fd_system, solve_fd


class FD(TGPMethod):
    name = "fd"
    learns_base = True
    mixture_base = True

    def solve(self, stats: Any, hyper: Hyper) -> Solution:
        if math.isinf(hyper.lam):
            return self.no_tilt(hyper)
        if hyper.params.get("base") == "learn":
            theta, base, info = learn_base(stats, hyper.features, hyper.base, hyper.lam)
            objective = float(info["history"][-1])
        else:
            base = hyper.base
            theta, objective, info = solve_fd(stats, hyper.features, base, hyper.lam)
        fitted = TGPFitted(hyper.features, base, theta=theta, block_bytes=hyper.block_bytes)
        return Solution(fitted, info, objective, theta=theta)

    def score_grid(self, train: Any, val: Any, feats: RandomFourierFeatures, base: Base,
                   ctx: GridContext) -> list[dict[str, float]]:
        g2 = feats.gamma**2
        A0, b = fd_system(train, feats, base, 0.0)
        scorer = GridScorer(A0, b, val, feats, base)
        rows = [{"bandwidth": feats.gamma, "lam": lam, "loss": scorer.loss(lam * g2)} for lam in ctx.lams]
        return with_tilt_scores(rows, [scorer.theta(lam * g2) for lam in ctx.lams], val, feats, base, ctx)


METHOD = register_method(FD())
