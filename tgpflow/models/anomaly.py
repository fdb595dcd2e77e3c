"""Anomaly scores from a fitted density: ``−log p(x)`` and a threshold at a training quantile.

The one definition, used by the estimators (``anomaly_threshold_``, ``is_anomaly``), ``tgpflow score``
and a pipeline's scores: :func:`anomaly_threshold` is the ``1 − threshold_quantile`` quantile (the
observed value at or above it, numpy's ``method="higher"``) of the anomaly scores ``−log p`` of (a
bounded pilot sample of) the training rows, a row whose log density is not finite counting as the
most anomalous; :func:`is_anomalous` flags a row whose anomaly score is above it. So about
``threshold_quantile`` of the training rows are flagged — unless more of them than that have a zero (or
undefined) density: then every such row is flagged, the threshold being the largest finite score, and a
:class:`~tgpflow.errors.DiagnosticWarning` says the model puts no mass where those rows are.
``anomaly_score`` and ``is_anomaly`` are lazy for dask/Parquet/Zarr input, like ``log_density``.

A fit learns its threshold on at most :func:`threshold_rows` of its pilot rows (a sample under a fixed seed, so the
same rows give the same threshold): enough that at least about :data:`THRESHOLD_EXCEEDANCES` of them lie beyond it,
and never fewer than :data:`THRESHOLD_MIN_ROWS`. Beyond that, more rows only cost time (a discrete column's row is a
cell integral of 256 points) and move the flagged share by less than its sampling error.
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np

from tgpflow.errors import DiagnosticWarning

__all__ = ["AnomalyMixin", "anomaly_threshold", "is_anomalous", "model_log_normalizer", "score_threshold",
           "score_columns", "score_table", "threshold_rows"]

#: A fit's threshold is learned on rows enough that about this many of them lie beyond it ...
THRESHOLD_EXCEEDANCES = 100
#: ... and on at least this many (all of them, when the pilot has fewer).
THRESHOLD_MIN_ROWS = 10_000
#: The seed of the sample of pilot rows a fit's threshold is learned on.
THRESHOLD_SEED = 0


def threshold_rows(rows: np.ndarray, quantile: float) -> np.ndarray:
    """The pilot rows a fit learns its threshold on: all of them, or a seeded sample of max(10 000, 100/quantile) —
    at least about 100 rows beyond the threshold, so that the share it flags has a relative standard error of at
    most about 10 %."""
    keep = max(THRESHOLD_MIN_ROWS, int(np.ceil(THRESHOLD_EXCEEDANCES / float(quantile))))
    if rows.shape[0] <= keep:
        return rows
    chosen = np.random.default_rng(THRESHOLD_SEED).choice(rows.shape[0], keep, replace=False)
    return rows[np.sort(chosen)]


def anomaly_threshold(log_density: Any, quantile: float) -> float:
    """The threshold on ``−log p`` that flags about ``quantile`` of the rows whose log densities are given
    (see the module docstring)."""
    scores = -np.asarray(log_density, dtype=np.float64)
    finite = np.isfinite(scores)
    scores = np.where(finite, scores, np.inf)  # f = 0 (or p ≤ 0): the most anomalous
    if scores.size == 0:
        raise ValueError("no rows to learn an anomaly threshold from")
    threshold = float(np.quantile(scores, 1.0 - float(quantile), method="higher"))
    if np.isfinite(threshold):
        return threshold
    # the quantile falls among rows of zero density: a threshold of +inf would flag none of them (a score is
    # flagged when above it), so it goes below them, and the model is said to be wrong there
    share = 1.0 - float(finite.mean())
    warnings.warn(f"{share:.2%} of the {scores.size} rows the anomaly threshold is learned from have a zero or "
                  f"undefined density under the model (threshold_quantile is {quantile:g}): it puts no mass where "
                  f"those data are; they are all flagged, and the threshold is the largest finite anomaly score",
                  DiagnosticWarning, stacklevel=2)
    return float(scores[finite].max()) if finite.any() else -np.inf


def is_anomalous(log_density: Any, threshold: float) -> Any:
    """Whether each row's anomaly score ``−log p`` is above ``threshold``, a NaN log density counting as
    anomalous as in :func:`anomaly_threshold` (NumPy or lazy dask input)."""
    return ~(-log_density <= threshold)


def model_log_normalizer(est: Any) -> float | None:
    """The log normaliser log Z of a fitted model (its ``normalizer_``), None where it has none (an RFF kernel sum,
    a flat base, a root-Sobolev fit: their scores files keep the unnormalised log density)."""
    normalizer = getattr(est, "normalizer_", None)
    return None if normalizer is None else float(normalizer.log_z)


def score_threshold(est: Any) -> float | None:
    """The fit's anomaly threshold on the scale of the scores files' ``anomaly_score`` (:func:`score_columns`): learned
    on the unnormalised scale, it moves with the normaliser; None without a threshold."""
    threshold = getattr(est, "anomaly_threshold_", None)
    return None if threshold is None else float(threshold) + (model_log_normalizer(est) or 0.0)


def score_columns(log_density: np.ndarray, threshold: float | None,
                  log_normalizer: float | None = None) -> dict[str, np.ndarray]:
    """The columns of a scores file, ``tgpflow score``'s and a pipeline's per-partition ones alike: ``log_density``,
    ``anomaly_score`` (−log p) and, with a threshold learned at fit time, ``anomaly`` (:func:`is_anomalous`).

    ``log_density`` is the model's unnormalised log density minus ``log_normalizer`` where the model has one (a
    normalised log-likelihood, as scikit-learn's ``score_samples``: comparable across versions and models); the
    threshold, learned on the unnormalised scale, moves with it, so the same rows are flagged."""
    if log_normalizer is not None:
        log_density = log_density - log_normalizer
        threshold = None if threshold is None else threshold + log_normalizer
    columns = {"log_density": log_density, "anomaly_score": -log_density}
    if threshold is not None:
        columns["anomaly"] = is_anomalous(log_density, threshold)
    return columns


def score_table(validated: tuple[np.ndarray, int, np.ndarray | None], context: Any, log_density: Any,
                threshold: float | None, log_normalizer: float | None) -> Any:
    """One chunk of a scores file as a pyarrow table: the context of the rows its validation kept (``row``, the
    kept columns: :mod:`tgpflow.io.row_context`), then :func:`score_columns` of ``log_density(rows)``."""
    import pyarrow as pa

    from tgpflow.io.row_context import context_rows

    rows, _, kept = validated
    table = context_rows(context, kept)
    for name, values in score_columns(log_density(rows), threshold, log_normalizer).items():
        table = table.append_column(name, pa.array(np.asarray(values)))
    return table


class AnomalyMixin:
    """Needs ``log_density`` and ``fitted()`` (the model as a Fitted value); a fit that learns the threshold itself
    also ``threshold_quantile``."""

    threshold_quantile: float

    def calibrate_threshold(self, X: Any, quantile: float | None = None) -> Any:
        """Learn ``anomaly_threshold_`` on the rows of ``X`` (any source, in the data's units): ``is_anomaly`` then
        flags about ``quantile`` of rows like them (default: the estimator's ``threshold_quantile``). A fit learns it
        on its pilot rows; calibrate it on rows known to be normal to flag against those, or at another rate."""
        if quantile is None:
            quantile = getattr(self, "threshold_quantile", None)
            if quantile is None:
                raise ValueError(f"{type(self).__name__} has no threshold_quantile: give quantile (e.g. 0.01)")
        if not 0.0 < float(quantile) < 1.0:
            raise ValueError(f"quantile must be in (0, 1); got {quantile!r}")
        values = self.log_density(X)
        values = values.compute() if hasattr(values, "compute") else values  # lazy for dask/Parquet/Zarr input
        self.anomaly_threshold_ = anomaly_threshold(values, float(quantile))
        return self

    def _set_threshold(self, rows: np.ndarray) -> None:
        """The anomaly threshold from the log densities of training ``rows`` (NumPy, in the data's units; no checks),
        at most :func:`threshold_rows` of them."""
        rows = threshold_rows(np.asarray(rows, dtype=np.float64), self.threshold_quantile)
        values = self.fitted().log_density(rows)
        self.anomaly_threshold_ = anomaly_threshold(values, self.threshold_quantile)

    def anomaly_score(self, X: Any) -> Any:
        """−log p(x): larger is more anomalous (+inf where the density estimate is 0)."""
        return -self.log_density(X)

    def is_anomaly(self, X: Any) -> Any:
        """``anomaly_score(X) > anomaly_threshold_`` (the training ``threshold_quantile`` is flagged)."""
        if not hasattr(self, "anomaly_threshold_"):
            raise AttributeError("no anomaly threshold: fit the model (a fit learns it on its pilot rows), or "
                                 "calibrate_threshold(X, quantile) on rows known to be normal")
        return is_anomalous(self.log_density(X), self.anomaly_threshold_)
