"""A fitted estimator evaluated on rows in the data's units, written once for every family: the score function and
the Hyvärinen terms of any model (:class:`ScoreEvaluation`), and the log density of a density
(:class:`DensityEvaluation`).

Each reads the family's ``fitted(sigma)`` (:meth:`~tgpflow.models.estimator_base.Estimator.fitted`: the model as a
:class:`~tgpflow.models.fitted.Fitted` value, its standardization and bounds undone) and maps it over the rows:
eagerly for arrays and DataFrames in memory, as a lazy dask array for dask, Parquet, CSV and Zarr input
(:meth:`~tgpflow.models.streaming.StreamingMixin._map_rows`). ``sigma`` is the noise level of the GP-tilted NCFD
model; every other model refuses a σ other than 0.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

__all__ = ["ScoreEvaluation", "DensityEvaluation"]


class ScoreEvaluation:
    """The score function of a fitted model, and its Hyvärinen terms."""

    def grad_log_density(self, X: Any, sigma: float | None = None) -> Any:
        """The score function ∇ log p(x), shape (n, d); ``sigma``: NCFD's noise level."""
        return self._map_rows(X, self.fitted(sigma).grad_log_density, per_row_dims=True)  # type: ignore[attr-defined]

    def hyvarinen_terms(self, X: Any, sigma: float | None = None) -> Any:
        """½‖s(x)‖² + div s(x) per row, with the closed-form divergence: their mean over held-out rows is the
        Hyvärinen score-matching loss (:func:`tgpflow.metrics.hyvarinen_loss`)."""
        return self._map_rows(X, self.fitted(sigma).hyvarinen_terms, per_row_dims=False)  # type: ignore[attr-defined]


class DensityEvaluation(ScoreEvaluation):
    """A fitted density: its log density, unnormalised or normalised by its estimated log normaliser."""

    #: Why ``log_density(normalized=True)`` is refused when the model has no normaliser estimate (``normalizer_``
    #: None) and, where there is one, what fixes it; formatted with the estimator's ``method`` and class ``name``.
    NO_NORMALIZER: ClassVar[str] = "{name} has no normaliser: its log density is unnormalised"

    def log_density(self, X: Any, sigma: float | None = None, *, normalized: bool = False) -> Any:
        """Log density, shape (n,); lazy for dask, Parquet, CSV and Zarr input.

        Unnormalised by default (the models' closed forms). ``normalized=True`` subtracts the importance-sampling
        estimate of log Z kept in ``normalizer_`` (its standard error too; for another estimate, the family's
        ``log_normalizer``): a log-likelihood comparable
        across models and with other libraries. ``sigma`` (NCFD only): the noise-conditional density at level
        σ ≥ 0, normalised by its own estimate; σ = 0 (the default) is the data-level density.
        """
        values = self._map_rows(X, self.fitted(sigma).log_density, per_row_dims=False)  # type: ignore[attr-defined]
        if not normalized:
            return values
        if sigma not in (None, 0):
            return values - self.log_normalizer(sigma=sigma).log_z  # type: ignore[attr-defined]
        normalizer = getattr(self, "normalizer_", None)
        if normalizer is None:
            raise ValueError(self.NO_NORMALIZER.format(method=getattr(self, "method", None), name=type(self).__name__))
        return values - normalizer.log_z

    def score_samples(self, X: Any) -> Any:
        """scikit-learn's name for :meth:`log_density` (unnormalised)."""
        return self.log_density(X)

    def score(self, X: Any, y: Any = None) -> float:
        """The sum of the unnormalised log density over the rows of ``X``."""
        return float(np.sum(self.log_density(X)))
