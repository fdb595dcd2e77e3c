"""The GP-tilted family's held-out selection of λ (and η, and NCFD's noise ladder) at each bandwidth
(docs/gp_tilted.md, "Held-out selection"): the :class:`~tgpflow.models.selection.Selector` that
:func:`~tgpflow.models.selection.select` runs on a split pass's statistics.

At each bandwidth the method scores its λ grid on the validation part (:meth:`TGPMethod.score_grid`: the
Hyvärinen loss, the normalised log-likelihood with its normaliser's ESS, the sliced KS and the mass outside the
support box, whatever the criterion); the default grid is extended upwards while its largest λ is the best; under
a mixture base λ = ∞ (θ = 0: the mixture alone) is a candidate too. The best row by ``criterion`` among the
healthy ones is chosen (:func:`~tgpflow.solve.select.choose`), with a warning naming the fix when none is healthy.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np

from tgpflow.core.engine import Progress
from tgpflow.core.logs import logger, phase
from tgpflow.features.rff import RandomFourierFeatures, scott_bandwidth
from tgpflow.models.diagnostics import DiagnosticWarning, remedies
from tgpflow.models.selection import Selection, Selector
from tgpflow.models.streaming import is_grid
from tgpflow.models.tgp_method import GridContext, TGPMethod, with_tilt_scores
from tgpflow.solve.pilot_bandwidth import (AUTO_BANDWIDTH_FACTORS, AUTO_BANDWIDTH_FOLDS, AUTO_BANDWIDTH_ROWS,
                                           TooFewRowsError, pilot_bandwidth)
from tgpflow.solve.select import (DEFAULT_LAM_GRID, DEFAULT_LOGLIK_LAM_GRID, GRID_EXTENSION_DECADES,
                                  MIN_SELECT_ESS_FRACTION, choose, healthy, heldout_loss)
from tgpflow.stats.ncfd import NCFDStats
from tgpflow.stats.projections import ProjectionGrid
from tgpflow.stats.split import SPLIT_SALT, HeldOut, StatsBundle, fold_index
from tgpflow.stats.support import SupportBox
from tgpflow.stats.tgp import TGPStats

__all__ = ["TGPSelector", "lam_grid", "eta_values", "raised_lam", "FitHealth", "raise_until_healthy", "FALLBACK_LAM",
           "base_outside"]

#: λ when ``lam="auto"`` has no validation rows to select on (a few rows): a smooth fit.
FALLBACK_LAM = 1.0


def lam_grid(criterion: str, given: Any) -> list[float]:
    """The λ values of ``lam="auto"``: ``lam_grid`` as given, else the criterion's default grid."""
    default = DEFAULT_LAM_GRID if criterion == "hyvarinen" else DEFAULT_LOGLIK_LAM_GRID
    return [float(v) for v in (given if given is not None else default)]


def eta_values(eta: Any, gamma: float) -> list[float]:
    """The η values of FVPD at bandwidth γ: a given grid, a given value, or ``"auto"``'s 1/γ²."""
    if is_grid(eta):
        return [float(v) for v in eta]
    return [1.0 / gamma**2 if eta == "auto" else float(eta)]


def base_outside(curve: list[dict[str, Any]]) -> float | None:
    """The mass outside of the base alone (the selection's λ = ∞ rows) where it exceeds the diagnostics' limit at
    every bandwidth: no λ brings a fit inside (:func:`~tgpflow.models.diagnostics.remedies`); else None."""
    alone = [r for r in curve if math.isinf(r.get("lam", 0.0)) and r.get("mass_outside") is not None]
    if not alone or any(r["mass_outside"] <= r.get("mass_outside_limit", math.inf) for r in alone):
        return None
    return float(min(r["mass_outside"] for r in alone))


def raised_lam(selection: dict[str, Any], grid: list[float], lam: float, ess_fraction: float,
               outside: float | None, limit: float | None) -> tuple[float, str] | None:
    """The next λ when the all-rows fit at a selected ``lam`` fails the check its candidate passed on held-out
    rows (docs/gp_tilted.md, "Held-out selection"), and why: ``"ess"``, its normaliser's ESS under
    :data:`~tgpflow.solve.select.MIN_SELECT_ESS_FRACTION` of the draws, or ``"outside"``, its mass outside the
    support box over the ``limit``. The next λ is the smallest larger one tried (``selection["curve"]``, the
    grid's extension included) or on ``grid``; None when the fit passes or no larger λ is left."""
    chosen = selection.get("chosen", {})
    # only a candidate that passed the support check on held-out rows is held to it on all rows: where none
    # passed (hard bounds not declared: MAGIC puts ~30 % below them at every λ) the support check cannot tell the
    # candidates apart, and raising λ would only flatten the fit
    passed = "mass_outside" in chosen and healthy(chosen)
    too_much_outside = passed and outside is not None and limit is not None and outside > limit
    low_ess = ess_fraction < MIN_SELECT_ESS_FRACTION
    if not low_ess and not too_much_outside:
        return None
    tried = {float(r["lam"]) for r in selection.get("curve", [])}
    larger = sorted(v for v in tried | set(grid) if v > lam)
    if not larger:
        return None
    return min(larger), "ess" if low_ess else "outside"


@dataclasses.dataclass(frozen=True)
class FitHealth:
    """What the raise policy reads of an all-rows fit (:func:`raise_until_healthy`): its λ, its normaliser's ESS
    fraction, its mass outside the support box and the diagnostics' limit on it (None: not measured)."""

    lam: float
    ess_fraction: float
    mass_outside: float | None
    limit: float | None


def raise_until_healthy(selection: dict[str, Any], grid: list[float], health: FitHealth,
                        solve_at: Callable[[float], FitHealth]) -> tuple[FitHealth, list[dict[str, Any]]]:
    """The all-rows fit of a selected λ, raised along ``grid`` while it fails the check its candidate passed on
    held-out rows (:func:`raised_lam`); ``solve_at(λ)`` solves and diagnoses the fit at λ and says its health.
    Returns the final fit's health and the steps kept (``selection_["raised"]``; none when the fit passed).

    A step taken for mass outside that does not lower it is undone (it is the base's own tails: measured on 600
    rows, 5.4 % outside at λ = 1 and 6.5 % at 10), and the diagnostics warn instead."""
    raised: list[dict[str, Any]] = []
    while True:
        step = raised_lam(selection, grid, health.lam, health.ess_fraction, health.mass_outside, health.limit)
        if step is None:
            return health, raised
        after = solve_at(step[0])
        if step[1] == "outside" and not (after.mass_outside or 0.0) < (health.mass_outside or 0.0):
            return solve_at(health.lam), raised
        raised.append({"lam": after.lam, "ess_fraction": after.ess_fraction, "mass_outside": after.mass_outside})
        health = after


@dataclasses.dataclass(frozen=True)
class TGPSelector(Selector):
    """What a GP-tilted selection needs of its estimator, as values (module docstring).

    ``params``: the estimator's parameters (``method``, ``criterion``, ``lam``, ``lam_grid``, ``eta``,
    ``normalizer_draws`` and ``block_bytes`` are read here; all of them go to the method's grid context).
    ``seeds``: makes the estimator's eight seed sequences afresh (the held-out normalisers draw from the fourth,
    MAP's draws from the third), at each use: spawning from a SeedSequence changes it, and every candidate must
    get the same draws.
    ``base_of``: the base a solve of given statistics tilts. ``lams``: the λ values scored at each bandwidth (the
    grid of ``lam="auto"``, else the given λ), before any extension. ``box``, ``heldout_grid``, ``data_units``: the
    support box, the held-out projection grid and the map to the data's units the candidates are scored with.
    ``scaled``, ``suggested_bounds``: what the warning of an unhealthy choice suggests. ``split_key``: how rows
    were assigned to the parts, for the record.
    """

    method: TGPMethod
    params: dict[str, Any]
    seeds: Callable[[], tuple[np.random.SeedSequence, ...]]
    base_of: Callable[[Any], Any]
    lams: tuple[float, ...]
    box: SupportBox | None = None
    heldout_grid: ProjectionGrid | None = None
    data_units: Callable[[np.ndarray], np.ndarray] | None = None
    scaled: bool = False
    suggested_bounds: Any = None
    split_key: str = "global row position"

    @property
    def criterion(self) -> str:
        return str(self.params["criterion"])

    def selection_draws(self) -> tuple[int, np.random.SeedSequence]:
        """Base draws of the held-out normalisers: a quarter of ``normalizer_draws``, the same for every candidate."""
        return max(int(self.params["normalizer_draws"]) // 4, 1000), self.seeds()[3]

    def pilot_bandwidth(self, rows: np.ndarray, features: RandomFourierFeatures, *,
                        data_units: Callable[[np.ndarray], np.ndarray] | None, mixture: Any,
                        progress: Progress | None) -> tuple[float, dict[str, Any] | None]:
        """``bandwidth="auto"``: γ by the cross-validated log-likelihood of FD fits on (≤ 30 000 of) the pilot
        ``rows``, before the pass; returns γ and the record the estimator keeps as ``bandwidth_selection_`` (Scott's
        γ of ``features`` and None, with a warning, when the rows are too few to hold any out).

        The grid is :data:`~tgpflow.solve.pilot_bandwidth.AUTO_BANDWIDTH_FACTORS` × Scott's γ for those rows;
        they go to :data:`~tgpflow.solve.pilot_bandwidth.AUTO_BANDWIDTH_FOLDS` folds by a hash of their position,
        every γ shares the draw (Z, c) (the normalisers' proposal draws: see
        :func:`~tgpflow.solve.pilot_bandwidth.pilot_bandwidth`), and λ runs over the λ grid; only healthy
        candidates compete (ESS and mass outside the support box, :func:`~tgpflow.solve.select.healthy`). The
        log-likelihood, a proper scoring rule, is smooth in γ where the sliced KS on a few thousand pilot rows is
        noisy (measured on the demo mixture: the KS curve over γ jumped by ±1 KS point between neighbours, and
        picked γ = 0.19 where the log-likelihood's 0.55 gives a better model at 200k and 2M rows);
        its blindness to mass without data is what the constraint and the λ ``criterion`` address.
        Only the pilot rows already in memory are used (no extra read); the full pass then selects λ at this
        γ. ``data_units``: the map of fitted rows to the data's units; ``mixture``: the mixture base every fold's fit
        tilts, if any.
        """
        if rows.shape[0] > AUTO_BANDWIDTH_ROWS:  # a uniform subsample of the (uniform) pilot
            keep = np.random.default_rng(self.seeds()[4]).choice(rows.shape[0], AUTO_BANDWIDTH_ROWS, replace=False)
            rows = rows[np.sort(keep)]
        cov = np.atleast_2d(np.cov(rows, rowvar=False, bias=True))
        base_gamma = scott_bandwidth(rows.shape[0], cov)
        gammas = [base_gamma * f for f in AUTO_BANDWIDTH_FACTORS]
        n_draws, seed = self.selection_draws()
        folds = fold_index(np.arange(rows.shape[0], dtype=np.int64), AUTO_BANDWIDTH_FOLDS, SPLIT_SALT)
        with phase("bandwidth", rows=rows.shape[0], candidates=len(gammas)) as info:
            try:
                gamma, curve = pilot_bandwidth(rows, folds, features, gammas,
                                               lam_grid(self.criterion, self.params["lam_grid"]), n_draws=n_draws,
                                               random_state=seed, block_bytes=int(self.params["block_bytes"]),
                                               data_units=data_units, progress=progress, mixture=mixture)
            except TooFewRowsError as exc:
                warnings.warn(f"{exc}; bandwidth='auto' fell back to Scott's rule", DiagnosticWarning, stacklevel=5)
                return features.gamma, None
            info.update(chosen=round(gamma, 6), scott=round(base_gamma, 6))
        return gamma, {"criterion": "held-out log-likelihood of FD fits on the pilot sample",
                       "scott_pilot": base_gamma, "curve": curve, "chosen": gamma}

    # -- the Selector ---------------------------------------------------------------------
    def log_facts(self) -> dict[str, Any]:
        return {"method": self.params["method"], "criterion": self.criterion}

    def split_facts(self) -> dict[str, Any]:
        return {"split_key": self.split_key}

    def candidates(self, bandwidth: float, train: Any, val: Any,
                   draw: RandomFourierFeatures) -> list[dict[str, Any]]:
        """The λ (and η) grid at one γ; the default grid is extended upwards, a decade at a time and up to
        :data:`~tgpflow.solve.select.GRID_EXTENSION_DECADES` decades, while the best of these rows is the
        largest λ (a choice on the grid's edge says the criterion wanted a smoother fit than offered)."""
        base = self.base_of(train)
        lams = list(self.lams)
        rows = self._score_grid(train, val, draw, base, lams)
        # under a mixture base, λ = ∞ (θ = 0: the mixture alone) is a candidate too, so that a selection never
        # settles on a tilt that does worse on the held-out rows than the mixture it tilts
        auto = self.params["lam"] == "auto"
        no_tilt = self._no_tilt_row(val, draw, base) if base.is_mixture and auto else []
        if not auto or self.params["lam_grid"] is not None:  # a grid the user gave is the grid
            return rows + no_tilt
        for _ in range(GRID_EXTENSION_DECADES):
            if rows[choose(rows, self.criterion)]["lam"] < lams[-1]:
                break
            more = [lams[-1] * 10 ** (k / 3) for k in (1, 2, 3)]
            logger.info("λ grid extended to %g at γ = %g: the best candidate was its largest λ", more[-1], bandwidth)
            rows += self._score_grid(train, val, draw, base, more)
            lams += more
        return rows + no_tilt

    def best(self, rows: list[dict[str, Any]]) -> int:
        """The best row by ``criterion`` (:func:`~tgpflow.solve.select.choose`)."""
        return choose(rows, self.criterion)

    def unhealthy_choice(self, rows: list[dict[str, Any]], best: int) -> str | None:
        """The warning when no candidate passed the normaliser and support checks (said by the fit when its
        published model fails them too: :meth:`~tgpflow.models.tgp_solve.TGPSolve.fit_from_stats`)."""
        if self.criterion == "hyvarinen" or healthy(rows[best]):
            return None
        fix = remedies(lam="auto", lam_fitted=math.nan, box=self.box, scaled=self.scaled,
                       suggested_bounds=self.suggested_bounds, base_outside=base_outside(rows))
        return (f"no (γ, λ) on the grid has a reliable normaliser (ESS >= {MIN_SELECT_ESS_FRACTION:.0%} of the "
                f"proposal draws) and keeps its mass inside the training rows' support box; chose the best by the "
                f"criterion among those with a reliable normaliser, else the largest ESS (ESS "
                f"{rows[best]['ess_fraction']:.3%}, mass outside {rows[best].get('mass_outside', float('nan')):.3%})"
                f": {fix}")

    def criterion_text(self) -> str:
        guard = (f"; candidates whose normaliser has ESS < {MIN_SELECT_ESS_FRACTION:.0%} of the proposal draws, or "
                 f"whose mass outside the training rows' support box exceeds the diagnostics' limit, skipped")
        return {"loglik": "held-out log-likelihood (log Z by importance sampling from the base" + guard + ")",
                "sliced": "held-out sliced KS (median over the projection grid's directions" + guard + ")",
                "hyvarinen": self.method.hyvarinen_criterion}[self.criterion]

    def all_rows(self, bundle: StatsBundle, bandwidth: float) -> TGPStats | NCFDStats:
        """The statistics of every row of a split pass at γ (train + validation, without held-out extras)."""
        val = bundle[("val", bandwidth)]
        total = bundle[("train", bandwidth)] + (val.stats if isinstance(val, HeldOut) else val)
        return total.without_phi_gram() if isinstance(total, TGPStats) else total

    def without_validation(self, bundle: StatsBundle, draw: RandomFourierFeatures, grid: list[float],
                           validation_fraction: float) -> tuple[Selection, Any, RandomFourierFeatures]:
        """Too few rows to hold any out: the first γ and :data:`FALLBACK_LAM`, with a warning."""
        g = grid[0]
        n = int(bundle[("train", g)].n)
        warnings.warn(f"{n} rows leave no validation rows at validation_fraction={validation_fraction}: "
                      f"nothing to select on; fell back to lam={FALLBACK_LAM:g} and γ={g:.4g} (give lam and "
                      f"bandwidth, or more rows)", DiagnosticWarning, stacklevel=5)
        chosen = {"bandwidth": g, "lam": FALLBACK_LAM}
        if self.method.uses_eta:
            chosen["eta"] = eta_values(self.params["eta"], g)[0]
        record = {"criterion": "none: no validation rows", "curve": [], "chosen": chosen, "n_train": n,
                  "n_validation": 0}
        return Selection(record), self.all_rows(bundle, g), draw.with_bandwidth(g)

    # -- scoring --------------------------------------------------------------------------
    def _no_tilt_row(self, heldout: Any, feats: RandomFourierFeatures, base: Any) -> list[dict[str, Any]]:
        """The held-out scores of λ = ∞ (θ = 0, the base alone; every method's limit), as a grid row."""
        val = heldout.stats if isinstance(heldout, HeldOut) else heldout
        val = val.fd if isinstance(val, NCFDStats) else val  # scored at the data level
        theta = np.zeros(feats.n_features)
        row: dict[str, Any] = {"bandwidth": feats.gamma, "lam": math.inf, "loss": heldout_loss(val, feats, base, theta)}
        if self.method.uses_eta:
            row["eta"] = eta_values(self.params["eta"], feats.gamma)[0]
        return with_tilt_scores([row], [theta], val, feats, base, self.grid_context(heldout, [math.inf]))

    def _score_grid(self, train: Any, heldout: Any, feats: RandomFourierFeatures, base: Any,
                    lams: list[float]) -> list[dict[str, float]]:
        """Every λ of ``lams`` (and η) at one γ, scored on the held-out part by the method
        (:meth:`TGPMethod.score_grid`): the Hyvärinen loss (``loss``), the normalised log-likelihood (``loglik``)
        with its normaliser's ESS, and the sliced KS between the held-out rows and the model (``sliced_ks``),
        whatever the criterion (all are cheap)."""
        val = heldout.stats if isinstance(heldout, HeldOut) else heldout
        return self.method.score_grid(train, val, feats, base, self.grid_context(heldout, lams))

    def grid_context(self, heldout: Any, lams: list[float]) -> GridContext:
        """What scoring ``lams`` on the held-out part needs: the same seeded draws, projection grid and box for
        every candidate (:class:`~tgpflow.models.tgp_method.GridContext`)."""
        n_draws, seed = self.selection_draws()
        projections = heldout.projections if isinstance(heldout, HeldOut) else None
        grid = self.heldout_grid
        if grid is None and projections is not None:  # a fresh estimator: the grid the held-out counts carry
            grid = projections.draw
        extra = dict(n_draws=n_draws, random_state=seed, grid=grid, projections=projections, box=self.box,
                     data_units=self.data_units)
        return GridContext(lams, functools.partial(eta_values, self.params["eta"]), extra, self.params,
                           self.seeds()[2])
