"""MAP: the posterior mode of θ by Newton steps on a fixed importance point set (seed 003 Alg 1; MATH.md §5).

Alg 1 estimates E_{N(μ,Σ)} e^{θᵀφ} on fixed base draws. Base draws cannot see a tilt that grows beyond
their reach, so the fit pays nothing for mass put there, and the held-out selection (which now sees it,
:mod:`tgpflow.core.proposal`) rejected the small λ that MAP preferred: on the demo mixture (200k rows)
it chose λ = 100 at a held-out log-likelihood of −3.5500. The same expectation on draws of the defensive
proposal, each weighted by N/q (:func:`~tgpflow.solve.map.proposal_point_set`), penalises that mass: λ = 46
was chosen, at −3.5336 (sample KS 1.45 ×10⁻² against 1.68).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tgpflow.core.gaussian_base import Base
from tgpflow.features.rff import RandomFourierFeatures
from tgpflow.models.tgp_fitted import TGPFitted
from tgpflow.models.tgp_method import GridContext, Hyper, Solution, TGPMethod, with_tilt_scores
from tgpflow.models.tgp_methods import register_method
from tgpflow.solve.map import PointSet, base_draws, proposal_point_set, solve_map
from tgpflow.solve.select import heldout_loss

#: Proposal draws of MAP's λ path in the held-out selection (see MAP.score_grid).
MAP_SELECTION_DRAWS = 25_000


def point_set(base: Base, n_draws: int, seed: Any, kind: str) -> PointSet:
    """MAP's expectation rule: ``map_points`` "proposal" (:func:`proposal_point_set`) or "base" (Alg 1)."""
    return (proposal_point_set if kind == "proposal" else base_draws)(base, n_draws, seed)


class MAP(TGPMethod):
    name = "map"
    solve_draws = True

    def solve(self, stats: Any, hyper: Hyper) -> Solution:
        points = point_set(hyper.base, int(hyper.params["map_draws"]), hyper.seed, str(hyper.params["map_points"]))
        theta, objective, info = solve_map(stats.psi, stats.n, hyper.features, points, hyper.lam,
                                           max_iter=int(hyper.params["map_max_iter"]), block_bytes=hyper.block_bytes)
        fitted = TGPFitted(hyper.features, hyper.base, theta=theta, block_bytes=hyper.block_bytes)
        return Solution(fitted, info, objective, theta=theta)

    def score_grid(self, train: Any, val: Any, feats: RandomFourierFeatures, base: Base,
                   ctx: GridContext) -> list[dict[str, float]]:
        # the λ path on at most MAP_SELECTION_DRAWS of the fixed proposal draws: each Newton step costs
        # O(S₂S²), and 22 warm-started solves on all 100 000 draws took ~20 min on one core. Fewer
        # draws only rank λ (small λ overfits the draws sooner, so the choice errs to the smooth
        # side); the final solve at the chosen λ uses all map_draws.
        params = ctx.params
        n_map = min(int(params["map_draws"]), MAP_SELECTION_DRAWS)
        points = point_set(base, n_map, ctx.seed, str(params["map_points"]))
        rows, thetas, theta = [], [], None
        for lam in sorted(ctx.lams, reverse=True):  # a warm-started path from the smoothest fit
            theta, _, _ = solve_map(train.psi, train.n, feats, points, lam, max_iter=int(params["map_max_iter"]),
                                    theta0=theta, block_bytes=int(params["block_bytes"]))
            thetas.append(theta)
            rows.append({"bandwidth": feats.gamma, "lam": lam, "loss": heldout_loss(val, feats, base, theta)})
        return with_tilt_scores(rows, thetas, val, feats, base, ctx)

    def diagnostics(self, info: dict[str, Any], params: Mapping[str, Any]) -> tuple[dict[str, Any], list[str]]:
        n_fixed = int(info["n_draws"])
        extra = {"map_converged": bool(info["converged"]), "map_ess_fraction": float(info["ess"]) / n_fixed}
        warns = []
        if not info["converged"]:
            warns.append(f"MAP did not converge in {params['map_max_iter']} Newton iterations (decrement "
                         f"{info['decrement']:.3g}); raise map_max_iter or lam")
        if extra["map_ess_fraction"] < 0.01:
            warns.append(f"MAP's expectation rests on {info['ess']:.0f} of its {n_fixed} fixed proposal draws: "
                         f"the fit overfits those draws; raise map_draws or lam")
        return extra, warns


METHOD = register_method(MAP())
