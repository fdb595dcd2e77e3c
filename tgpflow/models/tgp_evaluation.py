"""The fitted GP-tilted model on rows in the data's units (docs/gp_tilted.md): log density (normalised by the
importance-sampling log Z), score, Hyvärinen terms, samples and reference samples, at NCFD's noise levels too.
"""

from __future__ import annotations

import math
import numbers
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
from sklearn.utils.validation import check_is_fitted

from tgpflow.models.diagnostics import MIN_ESS_FRACTION, DiagnosticWarning
from tgpflow.models.evaluation import DensityEvaluation
from tgpflow.models.fitted import Fitted, proposal_count
from tgpflow.models.lattice_fitted import with_lattice
from tgpflow.models.scaled_fitted import in_data_units
from tgpflow.models.tgp_fitted import BoundedFitted, TGPFitted
from tgpflow.solve.normalizer import NormalizerEstimate, estimate_log_normalizer

__all__ = ["TGPEvaluation"]


class TGPEvaluation(DensityEvaluation):
    """The evaluation side of :class:`~tgpflow.models.gp_tilted.GPTiltedDensity`: its Fitted value at any NCFD
    level, its normaliser and samples (the log density, score and Hyvärinen terms over rows are
    :class:`~tgpflow.models.evaluation.DensityEvaluation`'s)."""

    NO_NORMALIZER = "method {method!r} has no normaliser (its estimate, e.g. KDE-RFF's, is not integrable)"

    def log_normalizer(self, *, sigma: float | None = None, n_draws: int | None = None,
                       random_state: Any = None,
                       observe: Callable[[np.ndarray, np.ndarray], None] | None = None) -> NormalizerEstimate:
        """log Z of the fitted (unnormalised) density by importance sampling from its base (docs/mathematics.md, "MAP,
        baselines and sampling").

        Returns a :class:`~tgpflow.solve.normalizer.NormalizerEstimate`: ``log_z``, its standard
        error, the ESS of the proposal draws, the model's mean and spread and (when the fit recorded
        the data's support box) its mass outside that box. A calibration of the discrete columns' code
        frequencies is part of the density (docs/gp_tilted.md, "Calibrated code frequencies"). Defaults:
        ``normalizer_draws`` draws from the estimator's seed — the value stored in ``normalizer_`` after a fit.
        ``sigma``: the NCFD level. ``observe``: as in :func:`~tgpflow.solve.normalizer.estimate_log_normalizer`.
        """
        ev = self._level(sigma)
        if ev.kde_weights is not None:
            raise ValueError("the KDE-RFF estimate φ(x)ᵀψ/N does not decay away from the data: it has no "
                             "normaliser on R^d")
        box, cells = getattr(self, "support_", None), getattr(self, "discrete_", None)
        calibrated = cells is not None and cells.calibrated and not sigma  # the weights are the fit's at σ = 0
        return estimate_log_normalizer(
            ev.log_density, ev.base, n_draws=int(n_draws or self.normalizer_draws),
            random_state=self._seeds()[3] if random_state is None else random_state,
            outside=None if box is None else box.outside, data_units=self._to_data,
            tilt=ev.log_tilt if ev.device is None else None,  # a device evaluates the whole density there
            log_weight=(lambda data: cells.code_log_weights(cells.codes(data))) if calibrated else None,
            observe=observe)

    def fitted(self, sigma: float | None = None) -> Fitted:
        """The fitted model as a :class:`~tgpflow.models.fitted.Fitted` value, on rows in the data's units:
        ``log_density``, ``grad_log_density``, ``hyvarinen_terms``, ``sample``, ``to_arrays``. ``sigma``
        (NCFD only): the model at noise level σ ≥ 0 (docs/mathematics.md, "Noise-conditional Fisher divergence"), in the
        standardized units with a scaling."""
        cells = getattr(self, "discrete_", None)
        if cells is not None and sigma:  # the calibration matched the data's codes at σ = 0, not a noisier level
            cells = cells.uncalibrated()
        return with_lattice(self._continuous_fitted(sigma), cells)

    def _continuous_fitted(self, sigma: float | None) -> Fitted:
        """:meth:`fitted` before its discrete columns become cells: the density of the dequantized rows."""
        ev, bounds, scaling = self._level(sigma), getattr(self, "bounds_", None), getattr(self, "scaling_", None)
        if bounds is None:
            return in_data_units(ev, scaling)
        # the transform in the data's units, then its values standardized (ColumnBounds.transformed_scaling)
        return BoundedFitted(in_data_units(ev, bounds.transformed_scaling(scaling)), bounds)

    def _level(self, sigma: float | None) -> TGPFitted:
        """The fitted model at level σ in the fitting space (bounded columns transformed)."""
        check_is_fitted(self, "_fitted")
        if sigma is None or sigma == 0:
            return self._on_device(self._fitted)
        if not self._method.noise_conditional:
            raise ValueError(f"sigma is defined for the noise-conditional model (method='ncfd'), not {self.method!r}")
        if not (isinstance(sigma, numbers.Real) and math.isfinite(sigma) and sigma > 0):
            raise ValueError(f"sigma must be a number >= 0; got {sigma!r}")
        return self._on_device(self._fitted.at_level(float(sigma)))

    def sample(self, n_samples: int = 1, random_state: int | None = None, *, n_proposals: int | None = None,
               sigma: float | None = None) -> np.ndarray:
        """Draw rows by importance resampling from the base N(μ, Σ) (docs/mathematics.md, "MAP, baselines and
        sampling").

        ``n_proposals`` defaults to max(20·n_samples, 10 000); the effective sample size of
        the weights is kept in ``last_sample_ess_``. ``sigma``: NCFD level to sample from.
        """
        seed = self.random_state if random_state is None else random_state
        n_prop = proposal_count(n_samples, n_proposals)
        rows, ess = self.fitted(sigma).sample(int(n_samples), seed, n_proposals=int(n_prop), return_ess=True)
        self.last_sample_ess_ = ess
        self.last_sample_info_ = {"method": "importance resampling from the base", "ess": ess,
                                  "n_proposals": int(n_prop), "ess_fraction": ess / int(n_prop)}
        if ess / int(n_prop) < MIN_ESS_FRACTION:
            warnings.warn(f"sample(): only {ess:.0f} effective draws among {n_prop} base proposals "
                          f"({100 * ess / n_prop:.3g}% < {100 * MIN_ESS_FRACTION:g}%): the rows repeat a few proposals "
                          f"and do not represent the model; refit with a larger lam (or lam='auto'; CLI: --lam), or "
                          f"sample by MCMC from the base (tgpflow.sample.mcmc_sample; CLI: tgpflow sample --method "
                          f"mala)", DiagnosticWarning, stacklevel=2)
        return rows

    def base_draws(self, n_samples: int, random_state: Any = None) -> np.ndarray:
        """``n_samples`` draws of the model's Gaussian base N(μ, Σ), in the data's units (e.g. MCMC starts)."""
        return self.fitted().base_draws(n_samples, self.random_state if random_state is None else random_state)

    def reference_sample(self, n_samples: int = 250_000, random_state: Any = 0,
                         sigma: float | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Base draws (in the data's units) and their normalised importance weights ∝ q̃(ζ)/N(ζ|μ,Σ):
        the weighted reference sample of the sliced metrics ([Paisley et al.] §IV; docs/mathematics.md, "MAP, baselines
        and sampling")."""
        return self.fitted(sigma).reference_sample(n_samples, random_state)

