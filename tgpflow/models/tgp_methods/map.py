"""MAP: the posterior mode of θ by Newton steps on a fixed importance point set ([Paisley et al.] Algorithm 1;
docs/mathematics.md, "MAP, baselines and sampling").

[Paisley et al.] Algorithm 1 estimates E_{N(μ,Σ)} e^{θᵀφ} on fixed base draws. Base draws cannot see a tilt that grows
beyond their reach, so the fit pays nothing for mass put there, and the held-out selection (which now sees it,
:mod:`tgpflow.core.proposal`) rejected the small λ that MAP preferred: on the demo mixture (200k rows)
it chose λ = 100 at a held-out log-likelihood of −3.5500. The same expectation on draws of the defensive
proposal, each weighted by N/q (:func:`~tgpflow.solve.map.proposal_point_set`), penalises that mass: λ = 46
was chosen, at −3.5336 (sample KS 1.45 ×10⁻² against 1.68).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from tgpflow.core.gaussian_base import Base
from tgpflow.features.rff import RandomFourierFeatures
from tgpflow.models.tgp_fitted import TGPFitted
from tgpflow.models.tgp_method import GridContext, Hyper, Solution, TGPMethod, with_tilt_scores
from tgpflow.models.tgp_methods import register_method
from tgpflow.solve.map import PointSet, base_draws, proposal_point_set, solve_map
from tgpflow.solve.select import choose, heldout_loss

#: Proposal draws of MAP's λ path in the held-out selection (see MAP.score_grid).
MAP_SELECTION_DRAWS = 25_000
#: Decades below the path's choice that the selection solves again on all map_draws (see MAP.score_grid).
#: Measured on the demo mixture (γ = 0.549, held-out log-likelihood, nats/row): on 25 000 draws the best λ
#: was 21.5 at 200k rows and ≥ 215 at 2M; on 100 000 draws it was 2.15 (−3.5029 against −3.5214 at 21.5)
#: and 21.5 (−3.5010 against −3.5206 at 215).
REFINE_DECADES = 2


def point_set(base: Base, n_draws: int, seed: Any, kind: str) -> PointSet:
    """MAP's expectation rule: ``map_points`` "proposal" (:func:`proposal_point_set`) or "base" ([Paisley et al.]
    Algorithm 1)."""
    return (proposal_point_set if kind == "proposal" else base_draws)(base, n_draws, seed)


class MAP(TGPMethod):
    name = "map"
    solve_draws = True
    mixture_base = True

    def solve(self, stats: Any, hyper: Hyper) -> Solution:
        if math.isinf(hyper.lam):
            return self.no_tilt(hyper)
        points = point_set(hyper.base, int(hyper.params["map_draws"]), hyper.seed, str(hyper.params["map_points"]))
        theta, objective, info = solve_map(stats.psi, stats.n, hyper.features, points, hyper.lam,
                                           max_iter=int(hyper.params["map_max_iter"]), block_bytes=hyper.block_bytes)
        fitted = TGPFitted(hyper.features, hyper.base, theta=theta, block_bytes=hyper.block_bytes)
        return Solution(fitted, info, objective, theta=theta)

    def score_grid(self, train: Any, val: Any, feats: RandomFourierFeatures, base: Base,
                   ctx: GridContext) -> list[dict[str, float]]:
        # The λ path first runs on at most MAP_SELECTION_DRAWS of the proposal draws: each Newton step
        # costs O(S₂S²), and 22 warm-started solves on all 100 000 draws took ~20 min on one core. Fewer
        # draws overfit sooner (their error is multiplied by N), so that path's choice errs to a larger λ
        # than the final solve on all map_draws wants: on the demo mixture its choice was 10× too large
        # (REFINE_DECADES). The λ values from a decade above the path's choice down REFINE_DECADES decades
        # are therefore solved again on all map_draws, warm-started, and their rows replace the path's (the
        # decade above, so that the choice among the neighbours of the path's choice compares fits on the
        # same draws: the final solve at a path row's λ is on all map_draws too).
        params = ctx.params
        kind, n_full = str(params["map_points"]), int(params["map_draws"])
        n_path = min(n_full, MAP_SELECTION_DRAWS)
        lams = sorted(ctx.lams, reverse=True)  # a warm-started path from the smoothest fit
        thetas = self._path(train, feats, point_set(base, n_path, ctx.seed, kind), lams, params)
        rows = self._scored(lams, thetas, n_path, train, val, feats, base, ctx)
        if n_full == n_path:
            return rows
        best = rows[choose(rows, str(params["criterion"]))]["lam"]
        refine = [lam for lam in lams if best * 10.0**-REFINE_DECADES <= lam <= 10.0 * best]
        start = thetas[lams.index(refine[0])]
        full = self._path(train, feats, point_set(base, n_full, ctx.seed, kind), refine, params, start)
        again = dict(zip(refine, self._scored(refine, full, n_full, train, val, feats, base, ctx), strict=True))
        return [again.get(r["lam"], r) for r in rows]

    @staticmethod
    def _path(train: Any, feats: RandomFourierFeatures, points: PointSet, lams: list[float],
              params: Mapping[str, Any], theta: Any = None) -> list[Any]:
        """θ(λ) along ``lams`` (largest first), each solve warm-started from the previous one."""
        thetas = []
        for lam in lams:
            theta, _, _ = solve_map(train.psi, train.n, feats, points, lam, max_iter=int(params["map_max_iter"]),
                                    theta0=theta, block_bytes=int(params["block_bytes"]))
            thetas.append(theta)
        return thetas

    @staticmethod
    def _scored(lams: list[float], thetas: list[Any], n_draws: int, train: Any, val: Any,
                feats: RandomFourierFeatures, base: Base, ctx: GridContext) -> list[dict[str, float]]:
        rows = [{"bandwidth": feats.gamma, "lam": lam, "loss": heldout_loss(val, feats, base, theta),
                 "map_draws": n_draws} for lam, theta in zip(lams, thetas, strict=True)]
        return with_tilt_scores(rows, thetas, val, feats, base, ctx)

    def diagnostics(self, info: dict[str, Any], params: Mapping[str, Any]) -> tuple[dict[str, Any], list[str]]:
        if "n_draws" not in info:  # λ = ∞: no Newton solve ran
            return {}, []
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
