"""Anomaly scores from a fitted density: ``−log p(x)`` and a threshold at a training quantile.

``anomaly_threshold_`` is set at fit time as the ``1 − threshold_quantile`` quantile of the
anomaly scores of (a bounded pilot sample of) the training rows, so that about
``threshold_quantile`` of the training rows are flagged. ``anomaly_score`` and ``is_anomaly``
are lazy for dask/Parquet/Zarr input, like ``log_density``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["AnomalyMixin"]


class AnomalyMixin:
    """Needs ``threshold_quantile``, ``log_density`` and ``_raw_log_density(rows)`` (NumPy, no checks)."""

    threshold_quantile: float

    def _set_threshold(self, rows: np.ndarray) -> None:
        scores = -self._raw_log_density(np.asarray(rows, dtype=np.float64))
        scores = np.where(np.isfinite(scores), scores, np.inf)  # f = 0 (or p ≤ 0): the most anomalous
        self.anomaly_threshold_ = float(np.quantile(scores, 1.0 - float(self.threshold_quantile), method="higher"))

    def anomaly_score(self, X: Any) -> Any:
        """−log p(x): larger is more anomalous (+inf where the density estimate is 0)."""
        return -self.log_density(X)

    def is_anomaly(self, X: Any) -> Any:
        """``anomaly_score(X) > anomaly_threshold_`` (the training ``threshold_quantile`` is flagged)."""
        if not hasattr(self, "anomaly_threshold_"):
            raise AttributeError("no anomaly threshold: fit the model (the threshold is learned at fit time)")
        return self.anomaly_score(X) > self.anomaly_threshold_
