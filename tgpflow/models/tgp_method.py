"""GP-tilted inference methods as values, and their registry ([Paisley et al.]; docs/mathematics.md, "Fisher divergence
and base-measure learning", "Noise-conditional Fisher divergence", "The Fisher variational predictive distribution" and
"MAP, baselines and sampling").

A method is a small object: the statistics type its pass accumulates and the chunk function that
makes them (:meth:`TGPMethod.chunk_stats`), the held-out scores of its (λ, η) grid
(:meth:`TGPMethod.score_grid`) and ``solve(stats, hyper) -> Solution`` (a
:class:`~tgpflow.models.tgp_fitted.TGPFitted` value with what the solve reports).
:class:`~tgpflow.models.gp_tilted.GPTiltedDensity` only reads these: adding a method is one file —
a module in :mod:`tgpflow.models.tgp_methods` named after the method (found without being imported
until it is used), or a method object passed to :func:`~tgpflow.models.tgp_methods.register_method`
from anywhere (the registry lives there, with ``get_method`` and ``method_names``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any, ClassVar

import numpy as np

from tgpflow.core.gaussian_base import Base
from tgpflow.features.rff import RandomFourierFeatures
from tgpflow.models.tgp_fitted import TGPFitted
from tgpflow.solve.select import score_tilts
from tgpflow.stats.tgp import TGPStats, tgp_chunk_stats

__all__ = ["TGPMethod", "Hyper", "Solution", "GridContext", "with_tilt_scores", "NO_TILT"]

#: The solver report of λ = ∞ (θ = 0): the model is its base. Under a mixture base a held-out selection scores
#: this candidate beside the grid, so that it never chooses a tilt that does worse than the mixture alone.
NO_TILT = "none: lam = inf, the base alone (θ = 0)"


@dataclasses.dataclass(frozen=True)
class Hyper:
    """What a solve is given besides the statistics: the draw, the base N(μ, Σ), λ and η (chosen or fixed),
    the estimator's parameters (``params``: ``base``, ``map_draws``, … as set), the seed of a solve's own
    draws (MAP's base draws) and, for NCFD, the number of the noise ladder's levels chosen (None: all)."""

    features: RandomFourierFeatures
    base: Base
    lam: float
    eta: float | None
    params: Mapping[str, Any]
    seed: Any = None
    levels: int | None = None

    @property
    def block_bytes(self) -> int:
        return int(self.params["block_bytes"])


@dataclasses.dataclass(frozen=True)
class Solution:
    """A solve's result: the fitted model, its objective and solver report, the vector whose norm the
    diagnostics report (θ, or FVPD's posterior mean), and arrays kept beside the Fitted value (saved
    under their attribute names, e.g. FVPD's posterior)."""

    fitted: TGPFitted
    info: dict[str, Any]
    objective: float | None = None
    theta: np.ndarray | None = None
    extra: dict[str, np.ndarray] = dataclasses.field(default_factory=dict)
    eta: float | None = None


@dataclasses.dataclass(frozen=True)
class GridContext:
    """What scoring a (λ, η) grid at one γ needs from the estimator: the λ values, the η values of a γ,
    the keyword arguments of :func:`~tgpflow.solve.select.score_tilts` (held-out draws, grid, box), and
    the estimator's parameters and the seed of a solve's own draws."""

    lams: list[float]
    eta_values: Callable[[float], list[float]]
    score_kwargs: dict[str, Any]
    params: Mapping[str, Any]
    seed: Any = None


class TGPMethod:
    """One GP-tilted method (see the module docstring). Subclasses set ``name`` and implement ``solve``
    (and ``score_grid`` when λ is selected on held-out rows)."""

    name: ClassVar[str]
    #: The statistics the pass accumulates.
    stats_type: ClassVar[type] = TGPStats
    # The capabilities below also say which estimator parameters a method uses: a parameter's entry in
    # tgpflow.models.params.GPTiltedParams names the capability it needs (``applies``).
    #: Whether it has λ (and η) to select on held-out rows (KDE-RFF has none).
    selects: ClassVar[bool] = True
    #: Whether ``base="learn"`` (eqs 12–16) applies.
    learns_base: ClassVar[bool] = False
    #: Whether ``base="mixture"`` applies (its statistics sum the base's score: docs/gp_tilted.md, "A mixture base").
    mixture_base: ClassVar[bool] = False
    #: Whether the model is noise-conditional (a ladder of levels, evaluated at any σ ≥ 0; docs/mathematics.md,
    # "Noise-conditional Fisher divergence").
    noise_conditional: ClassVar[bool] = False
    #: Whether it has the FVPD temperature η.
    uses_eta: ClassVar[bool] = False
    #: Whether the density is integrable (has a normaliser on R^d).
    integrable: ClassVar[bool] = True
    #: The estimator attributes saved beside the Fitted value.
    extra_arrays: ClassVar[tuple[str, ...]] = ()
    #: Whether the solve runs on draws of the base (MAP's expectation: ``map_draws``, ``map_max_iter``).
    solve_draws: ClassVar[bool] = False
    #: How the "hyvarinen" criterion is described in ``selection_``.
    hyvarinen_criterion: ClassVar[str] = "held-out Hyvärinen loss (data level)"

    def chunk_stats(self, *, block_bytes: int, precision: str, noise_levels: np.ndarray | None = None,
                    validation: bool = False, mixture: Any = None,
                    ladder: bool = False) -> tuple[Callable[..., Any], tuple[Any, ...]] | None:
        """The chunk statistics function and its arguments after (rows, features). ``validation``: for
        held-out rows, None when they need nothing more than the training rows. ``mixture``: the mixture base
        the statistics are summed under (methods with ``mixture_base``). ``ladder`` (NCFD): keep what scoring the
        noise ladder's lower parts needs."""
        if validation:
            return None
        return tgp_chunk_stats, (int(block_bytes), precision, False, mixture)

    def solve(self, stats: Any, hyper: Hyper) -> Solution:
        raise NotImplementedError

    @staticmethod
    def no_tilt(hyper: Hyper) -> Solution:
        """The solution at λ = ∞: θ = 0, the base alone (:data:`NO_TILT`)."""
        theta = np.zeros(hyper.features.n_features)
        fitted = TGPFitted(hyper.features, hyper.base, theta=theta, block_bytes=hyper.block_bytes)
        return Solution(fitted, {"method": NO_TILT}, 0.0, theta=theta)

    def score_grid(self, train: Any, val: Any, feats: RandomFourierFeatures, base: Base,
                   ctx: GridContext) -> list[dict[str, float]]:
        """Every λ (and η) at one γ, scored on the held-out statistics ``val`` (see GPTiltedDensity)."""
        raise NotImplementedError(f"method {self.name!r} selects no λ on held-out rows")

    def diagnostics(self, info: dict[str, Any], params: Mapping[str, Any]) -> tuple[dict[str, Any], list[str]]:
        """Extra diagnostics of a solve and the warnings they raise (MAP: convergence, draws' ESS)."""
        return {}, []

    def legacy_solution(self, solution: dict[str, np.ndarray], stats: Any) -> dict[str, np.ndarray]:
        """The solution arrays of a model file of an older layout, completed from its statistics."""
        return solution

    def __repr__(self) -> str:
        return f"<GP-tilted method {self.name!r}>"


def with_tilt_scores(rows: list[dict[str, float]], thetas: list[np.ndarray], val: Any, feats: RandomFourierFeatures,
                     base: Base, ctx: GridContext) -> list[dict[str, float]]:
    """``rows`` with the held-out scores of the tilts θ_k (log-likelihood, ESS, sliced KS; :func:`score_tilts`)."""
    scores = score_tilts(val, feats, base, np.asarray(thetas), **ctx.score_kwargs)
    return [dict(row, **sc) for row, sc in zip(rows, scores, strict=True)]
