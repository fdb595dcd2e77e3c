"""FVPD: θ integrated over its Fisher variational posterior at temperature η ([Paisley et al.] Algorithm 4;
docs/mathematics.md, "The Fisher variational predictive distribution")."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np

from tgpflow.core.gaussian_base import Base
from tgpflow.features.rff import RandomFourierFeatures
from tgpflow.models.tgp_fitted import TGPFitted
from tgpflow.models.tgp_method import GridContext, Hyper, Solution, TGPMethod
from tgpflow.models.tgp_methods import register_method
from tgpflow.solve.base_learning import learn_base
from tgpflow.solve.select import GridScorer, score_fvpd
from tgpflow.solve.tgp import fd_system, solve_fvpd


class FVPD(TGPMethod):
    name = "fvpd"
    learns_base = True
    mixture_base = True
    uses_eta = True
    extra_arrays = ("posterior_mean_", "posterior_precision_", "predictive_m_")
    hyvarinen_criterion = "posterior-expected held-out Hyvärinen loss"

    def chunk_stats(self, *, block_bytes: int, precision: str, noise_levels: np.ndarray | None = None,
                    validation: bool = False, mixture: Any = None, ladder: bool = False) -> Any:
        fn, (blocks, prec, _, mix) = super().chunk_stats(block_bytes=block_bytes, precision=precision, mixture=mixture)
        return fn, (blocks, prec, validation, mix)  # held-out rows also sum φφᵀ

    def solve(self, stats: Any, hyper: Hyper) -> Solution:
        lam, eta, base = hyper.lam, hyper.eta, hyper.base
        if math.isinf(lam):  # λ = ∞: the posterior is a point mass at θ = 0, and the predictive is the base
            S, sol = hyper.features.n_features, self.no_tilt(hyper)
            extra = {"posterior_mean_": np.zeros(S), "posterior_precision_": np.diag(np.full(S, np.inf)),
                     "predictive_m_": np.zeros(S)}
            return dataclasses.replace(sol, objective=None, extra=extra, eta=eta)
        info: dict[str, Any] = {}
        if hyper.params.get("base") == "learn":  # μ̂ = θ_FD at λη: learn the base on that objective
            _, base, info = learn_base(stats, hyper.features, base, lam * eta)
        sol = solve_fvpd(stats, hyper.features, base, lam, eta)
        fitted = TGPFitted(hyper.features, base, M_chol=sol.M_chol, v=sol.v, block_bytes=hyper.block_bytes)
        extra = {"posterior_mean_": sol.posterior_mean, "posterior_precision_": sol.posterior_precision,
                 "predictive_m_": sol.m}
        return Solution(fitted, dict(info, **sol.info), theta=sol.posterior_mean, extra=extra, eta=eta)

    def score_grid(self, train: Any, val: Any, feats: RandomFourierFeatures, base: Base,
                   ctx: GridContext) -> list[dict[str, float]]:
        g2 = feats.gamma**2
        A0, b = fd_system(train, feats, base, 0.0)
        scorer = GridScorer(A0, b, val, feats, base)
        out: list[dict[str, float]] = []
        for eta in ctx.eta_values(feats.gamma):
            scores = score_fvpd(val, feats, base, A0, b, eta, ctx.lams, **ctx.score_kwargs)
            out.extend(dict({"bandwidth": feats.gamma, "lam": lam, "eta": eta,
                             "loss": scorer.expected_loss(lam * g2 * eta, eta)}, **sc)
                       for lam, sc in zip(ctx.lams, scores, strict=True))
        return out


METHOD = register_method(FVPD())
