"""The GP-tilted estimator's solve from statistics (docs/gp_tilted.md): select on the held-out parts
(:mod:`tgpflow.models.tgp_selection`), solve on all rows with the method object, diagnose the solution, raise λ when
the all-rows fit fails the selection's check, calibrate the discrete columns' code frequencies.
"""

from __future__ import annotations

import functools
import math
import warnings
from typing import Any, Self

import numpy as np

from tgpflow.core.gaussian_base import base_from_moments, mixture_base
from tgpflow.core.logs import logger, phase
from tgpflow.features.code_calibration import MAX_RESIDUAL, calibrate_cells
from tgpflow.features.rff import RandomFourierFeatures
from tgpflow.models.diagnostics import DiagnosticWarning, fit_diagnostics, remedies
from tgpflow.models.estimator_base import entry
from tgpflow.models.streaming import is_grid
from tgpflow.models.tgp_fitted import TGPFitted
from tgpflow.models.tgp_method import Hyper
from tgpflow.models.tgp_selection import (FitHealth, TGPSelector, base_outside, eta_values, lam_grid,
                                          raise_until_healthy)
from tgpflow.models.tgp_space import from_data_rows
from tgpflow.solve.select import healthy
from tgpflow.stats.ncfd import NCFDStats
from tgpflow.stats.split import StatsBundle
from tgpflow.stats.tgp import TGPStats

__all__ = ["TGPSolve"]


class TGPSolve:
    """The solve of :class:`~tgpflow.models.gp_tilted.GPTiltedDensity` (statistics → model, no data access)."""

    @entry
    def fit_from_stats(self, stats: TGPStats | NCFDStats | StatsBundle,
                       features: RandomFourierFeatures | None = None) -> Self:
        """Solve from statistics (no data access) with ``features``; by default the estimator's ``features_`` (set
        by ``accumulate`` or a fit: the statistics are checked against them), else — on a fresh estimator — the
        draw the statistics carry. Statistics do not record ``bounds=``: a fresh estimator must be given the bounds
        they were accumulated with (a bounded fit's sums are in its log/logit space). They do carry the discrete
        columns' lattices (``stats.cells``), which a fresh estimator takes as its ``discrete_``.

        A :class:`StatsBundle` (from a selecting ``accumulate``) first selects λ, η and γ on
        its validation parts, then solves on all rows with the chosen values. The solved model's
        normaliser and diagnostics follow (``normalizer_``, ``fit_diagnostics_``); a failed check
        warns with the fix (:class:`~tgpflow.models.diagnostics.DiagnosticWarning`).

        When λ was selected by a normalised criterion ("sliced", "loglik") and the all-rows fit fails
        the check the candidates passed — its normaliser rests on fewer than 1 % of its proposal draws,
        or it puts more mass outside the support box than the diagnostics allow (a λ can pass on the
        training part and not on all rows: θ is then dominated by directions the data barely
        determine; measured on the demo mixture at 2M rows: 3.3 % outside against a 3 % limit) —
        λ is raised along the grid until it passes; ``selection_["raised"]`` records each step.
        """
        if getattr(self, "discrete_", None) is not None:  # a refit is diagnosed and calibrated from its own solve
            self.discrete_ = self.discrete_.uncalibrated()
        selecting = isinstance(stats, StatsBundle)
        self._solve_stats(stats, features)
        self._diagnose(warn=False)
        raised: list[dict[str, Any]] = []
        if self.lam == "auto" and self.criterion != "hyvarinen" and self.normalizer_ is not None:
            _, raised = raise_until_healthy(self.selection_, self._lam_grid(), self._health(), self._solve_at)
        if raised:
            self.selection_["raised"] = raised
            logger.info("raised λ to %g: the all-rows fit failed the selection's check (ESS, mass outside): %s",
                        self.lam_, raised)
        self._calibrate_codes()
        said = list(self.fit_diagnostics_["warnings"])
        choice = self.selection_.get("unhealthy_choice") if selecting else None
        if choice is not None and self._passes():  # the candidates failed the checks; the published model does not
            logger.info("the selection's candidates failed the normaliser or support check, the published model "
                        "passes both (ESS %.1f%%, mass outside %.2f%%%s): %s",
                        100 * self.fit_diagnostics_["ess_fraction"], 100 * self.fit_diagnostics_["mass_outside"],
                        ", after the code calibration" if getattr(self.discrete_, "calibrated", False) else "", choice)
        elif choice is not None:
            said.insert(0, choice)
        for message in said:
            warnings.warn(message, DiagnosticWarning, stacklevel=2)
        return self

    def _passes(self) -> bool:
        """Whether the published model passes the checks a selection's candidates are held to
        (:func:`~tgpflow.solve.select.healthy`)."""
        diag = getattr(self, "fit_diagnostics_", {})  # read as a candidate's row: the same keys and defaults
        return diag.get("ess_fraction") is not None and diag.get("mass_outside") is not None and healthy(diag)

    def _calibrate_codes(self) -> None:
        """Reweight the solved model's code frequencies to match the statistics' sums of each discrete column
        (:mod:`tgpflow.features.code_calibration`; docs/gp_tilted.md, "Calibrated code frequencies"): ``discrete_``
        then carries the weights, ``normalizer_`` and ``fit_diagnostics_`` are the calibrated model's (the one that
        scores and samples), and ``fit_diagnostics_["code_calibration"]`` says what the calibration did, with the
        uncalibrated fit's health (``before``). A calibration that cannot match the sums of every column warns."""
        cells = getattr(self, "discrete_", None)
        if cells is None or cells.positions.size == 0 or not self._method.integrable:
            return
        bounds, scaling = getattr(self, "bounds_", None), getattr(self, "scaling_", None)
        before = {k: self.fit_diagnostics_.get(k) for k in ("ess_fraction", "mass_outside")}
        self.discrete_ = cells.uncalibrated()  # the reference draws are the uncalibrated model's
        check = vars(self).pop("_normaliser_codes", None)  # no scratch state left on the estimator
        self.discrete_, result = calibrate_cells(
            cells, self.stats_.moments, functools.partial(from_data_rows, bounds=bounds, scaling=scaling),
            self._to_data(self.stats_.moments.mean[None])[0],
            lambda: self._continuous_fitted(None).reference_sample(int(self.normalizer_draws), self._seeds()[7]),
            getattr(self.stats_, "code_counts", None), check)
        if self.discrete_.calibrated:
            self._diagnose(warn=False)
        self.fit_diagnostics_["code_calibration"] = dict(result.to_dict(), before=before)
        if result.n_matched < cells.positions.size:
            first = result if result.first is None else result.first
            why = (f"a mismatch of {first.residual:.2g} model standard deviations remains: the fit draws too few "
                   f"rows at a code the data hold" if first.residual > MAX_RESIDUAL else
                   f"matching them would keep {min(first.ess_ratio, first.check_ess_ratio or 1.0):.1%} of the "
                   f"draws' effective size: the fit's frequencies are far from the data's")
            kept = ("its samples and scores keep the fit's own frequencies" if not result.matched else
                    f"the means of the {result.n_matched} columns furthest off were matched, the other "
                    f"{cells.positions.size - result.n_matched} keep the fit's own")
            self.fit_diagnostics_["warnings"].append(
                f"the discrete columns' code frequencies could not all be matched to the data's ({why}); {kept}: "
                f"raise normalizer_draws, or fit the columns as continuous with discrete=None")

    def _health(self) -> FitHealth:
        """The solved and diagnosed fit, as the raise policy reads it."""
        return FitHealth(self.lam_, self.normalizer_.ess_fraction, self.fit_diagnostics_.get("mass_outside"),
                         self.fit_diagnostics_.get("mass_outside_limit"))

    def _solve_at(self, lam: float) -> FitHealth:
        """The all-rows fit solved and diagnosed at another λ of the grid (:meth:`_resolve_at`)."""
        self._resolve_at(lam)
        self._diagnose(warn=False)
        return self._health()

    def _resolve_at(self, lam: float) -> None:
        """Re-solve the all-rows fit at another λ of the grid (the selection's other choices kept)."""
        self.selection_["chosen"] = dict(self.selection_["chosen"], lam=lam)
        lam, eta = self._chosen_lam_eta(self.features_)
        self._set_solution(self.stats_, self.features_, self._base_of(self.stats_), lam, eta)

    def _solve_stats(self, stats: TGPStats | NCFDStats | StatsBundle, features: RandomFourierFeatures | None) -> None:
        features = self._solve_draw(stats, features)
        if not hasattr(self, "features_"):  # no draw of its own yet: bounds= as set now (a failed call leaves none)
            self._refuse_unknown_scaling()
            self.bounds_ = self._fresh_bounds(features.n_dims, stats)
            self.discrete_ = self._stats_cells(features.n_dims, stats)
        if isinstance(stats, StatsBundle):
            stats, features = self._select(stats, features)
        expected = self._method.stats_type
        if not isinstance(stats, expected):
            raise TypeError(f"method {self.method!r} needs {expected.__name__}, got {type(stats).__name__}"
                            + ("; use stats.fd for the σ = 0 part of an NCFD pass"
                               if isinstance(stats, NCFDStats) else ""))
        stats.check_features(features)
        if hasattr(stats, "check_cells"):  # rows dequantized over the same cells as this model reads rows with
            stats.check_cells(getattr(self, "discrete_", None))
        if getattr(stats, "bounds", None) is not None:  # and transformed by the same bounds (none: older files)
            stats.check_bounds(getattr(self, "bounds_", None))
        if self._method.noise_conditional:
            if not hasattr(self, "noise_levels_"):
                self.noise_levels_ = stats.sigmas.copy()
            stats.check_features(features, self.noise_levels_)
        lam, eta = self._chosen_lam_eta(features)
        with phase("solve", method=self.method, n_features=features.n_features) as info:
            self._set_solution(stats, features, self._base_of(stats), lam, eta)
            info.update(solver=self.solver_info_.get("method"))

    # -- selection ----------------------------------------------------------------------
    def _lam_grid(self) -> list[float]:
        return lam_grid(self.criterion, self.lam_grid)

    def _chosen_lam_eta(self, features: RandomFourierFeatures) -> tuple[float, float | None]:
        if not self._method.selects:
            return math.nan, None
        chosen = getattr(self, "selection_", {}).get("chosen", {})
        lam = self._chosen_lam()
        eta = None
        if self._method.uses_eta:
            given = is_grid(self.eta) and "eta" in chosen
            eta = float(chosen["eta"]) if given else eta_values(self.eta, features.gamma)[0]
        return lam, eta

    def _selector(self) -> TGPSelector:
        """This estimator's held-out selection, as values (:mod:`tgpflow.models.tgp_selection`)."""
        return TGPSelector(self._method, self.get_params(), self._seeds, self._base_of, tuple(self._lam_values()),
                           box=getattr(self, "support_", None), heldout_grid=getattr(self, "heldout_grid_", None),
                           data_units=self._to_data, scaled=getattr(self, "scaling_", None) is not None,
                           suggested_bounds=getattr(self, "pilot_", {}).get("suggested_bounds"),
                           split_key=getattr(self, "split_key_", "global row position"))

    # -- solutions ----------------------------------------------------------------------
    def _base_of(self, stats: Any) -> Any:
        """The base of a solve: the mixture the statistics were summed under, else N(μ, Σ) of their exact
        moments (:mod:`tgpflow.core.gaussian_base`)."""
        mixture = getattr(stats, "mixture", None)
        if mixture is None and self.base == "mixture":
            raise ValueError("base='mixture' needs statistics summed under its mixture base; these were summed under "
                             "a Gaussian base: accumulate them with this estimator (or refit)")
        if mixture is not None:
            return mixture_base(mixture)
        return base_from_moments(stats.moments, tuple(getattr(self, "feature_names_in_", ())) or None)

    def _set_solution(self, stats: Any, features: RandomFourierFeatures, base: Any, lam: float,
                      eta: float | None) -> None:
        self.stats_ = stats
        self.n_samples_seen_ = int(stats.n)
        self.lam_ = lam
        levels = getattr(self, "selection_", {}).get("chosen", {}).get("noise_levels")  # NCFD: the ladder's part
        sol = self._method.solve(stats, Hyper(features, base, lam, eta, self.get_params(), self._seeds()[2],
                                              None if levels is None else int(levels)))
        self.solver_info_ = sol.info
        if sol.objective is not None:
            self.objective_ = sol.objective
        if self._method.uses_eta:
            self.eta_ = sol.eta
        for name, value in sol.extra.items():
            setattr(self, name, value)
        self._diag_theta = sol.theta if sol.theta is not None else sol.fitted.theta
        self._set_fitted(sol.fitted)

    def _set_fitted(self, fitted: TGPFitted) -> None:
        """The estimator's attributes of a solved model, read off its Fitted value (a solve and a load share this)."""
        self._fitted = fitted
        self.features_ = fitted.features
        self.n_features_in_ = fitted.features.n_dims
        self.bandwidth_ = fitted.features.gamma
        if fitted.theta is not None:
            self.theta_ = fitted.theta
        if fitted.M_chol is not None:
            self.predictive_chol_, self.predictive_v_ = fitted.M_chol, fitted.v
        self.mean_, self.covariance_, self.precision_ = fitted.base.mean, fitted.base.cov, fitted.base.precision
        if fitted.base.mixture is not None:
            self.base_mixture_ = fitted.base.mixture

    # -- diagnostics ------------------------------------------------------------------------
    def _diagnose(self, warn: bool = True) -> None:
        """``normalizer_`` and ``fit_diagnostics_`` of the solved model (:mod:`tgpflow.models.diagnostics`)."""
        method = self._method
        if not method.integrable:  # e.g. the RFF kernel sum does not decay: no normaliser on ℝ^d
            self.normalizer_ = None
            self.fit_diagnostics_ = {"warnings": [], "note": f"{method.name.upper()} is not integrable on R^d: "
                                                              f"no normaliser"}
            return
        box, cells = getattr(self, "support_", None), getattr(self, "discrete_", None)
        kept: list[tuple[np.ndarray, np.ndarray]] = []  # an uncalibrated model's draws, which a calibration checks on
        collect = cells is not None and cells.positions.size > 0 and not cells.calibrated
        with phase("diagnose", draws=int(self.normalizer_draws)) as info:
            est = self.log_normalizer(observe=(lambda data, log_w: kept.append(
                (cells.code_indices(data).astype(np.int32), log_w))) if collect else None)
            info.update(ess_fraction=round(est.ess_fraction, 4), mass_outside=est.mass_outside)
        if kept:  # the codes and weights of the uncalibrated model's normaliser draws (:meth:`_calibrate_codes`)
            log_w = np.concatenate([w for _, w in kept])
            self._normaliser_codes = (np.concatenate([c for c, _ in kept]),
                                      np.exp(log_w - np.max(log_w, initial=-np.inf)))
        extra: dict[str, Any] = {"theta_norm": float(np.linalg.norm(self._diag_theta)), "lam": self.lam_}
        more, warns = method.diagnostics(self.solver_info_, self.get_params())
        extra.update(more, warnings=warns)
        fix = remedies(lam=self.lam, lam_fitted=self.lam_, box=box, scaled=getattr(self, "scaling_", None) is not None,
                       suggested_bounds=getattr(self, "pilot_", {}).get("suggested_bounds"),
                       base_outside=base_outside(getattr(self, "selection_", {}).get("curve", [])))
        self.normalizer_ = est
        self.fit_diagnostics_ = fit_diagnostics(est, box, what=f"the {self.method.upper()} fit", fix=fix,
                                                extra=extra, warn=warn)

