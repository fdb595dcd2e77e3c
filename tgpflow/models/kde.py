"""Exact kernel density baseline on a bounded subsample ([Paisley et al.] §IV; docs/mathematics.md, "MAP, baselines and
sampling").

``p(x) = (1/n) Σ_i k(x, x_i)`` with the TGP's kernel ``k = exp(−δᵀΣ_zδ/2γ²)`` normalised
(``Σ_z = dΣ/trΣ`` or I, γ by Scott's rule), fitted on a pilot subsample of at most
``max_rows`` rows — it needs the rows at evaluation time, which is why it is a baseline for
small data only. The anisotropic kernel is scikit-learn's Gaussian ``KernelDensity`` in the
coordinates ``y = Lᵀx`` (``Σ_z = LLᵀ``), where it is isotropic with width γ.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from sklearn.neighbors import KernelDensity
from sklearn.utils.validation import check_is_fitted, validate_data

from tgpflow.core.gaussian_base import check_covariance
from tgpflow.features.rff import paper_kernel_cov, scott_bandwidth
from tgpflow.io.degenerate import check_pilot_rows
from tgpflow.io.pilot import pilot_sample
from tgpflow.io.sources import as_source
from tgpflow.models.estimator_base import Estimator, entry
from tgpflow.models.params import ExactKDEParams

__all__ = ["ExactKDE"]


class ExactKDE(Estimator):
    """Exact Gaussian KDE on a uniform subsample (≤ ``max_rows``) of any source. The parameters below are read off
    its table, :class:`~tgpflow.models.params.ExactKDEParams`."""

    params_table = ExactKDEParams

    def __init__(self, *, bandwidth: str | float = "scott", kernel_cov: str = "paper", max_rows: int = 20_000,
                 random_state: int | None = 0):
        self.bandwidth = bandwidth
        self.kernel_cov = kernel_cov
        self.max_rows = max_rows
        self.random_state = random_state

    @entry
    def fit(self, X: Any, y: Any = None) -> ExactKDE:
        if isinstance(X, np.ndarray) or hasattr(X, "iloc"):
            X = validate_data(self, X, dtype=np.float64)
        source = as_source(X)
        self.n_features_in_ = source.n_columns
        pilot = pilot_sample(source, rows=int(self.max_rows), random_state=self.random_state)
        rows = pilot.rows
        check_pilot_rows(pilot, source.description, 1, "the exact KDE")
        cov = np.atleast_2d(np.cov(rows, rowvar=False, bias=True))
        if self.kernel_cov == "paper":
            check_covariance(rows.shape[0], rows.mean(axis=0), cov, source.columns, source.description, "the exact KDE")
        self.bandwidth_ = scott_bandwidth(pilot.n_total, cov) if self.bandwidth == "scott" else float(self.bandwidth)
        self.kernel_cov_ = paper_kernel_cov(cov) if self.kernel_cov == "paper" else np.eye(cov.shape[0])
        self.transform_ = np.linalg.cholesky(self.kernel_cov_)  # y = Lᵀx
        self.rows_ = rows
        self.n_samples_seen_ = int(pilot.n_total)
        self.kde_ = KernelDensity(bandwidth=self.bandwidth_, kernel="gaussian").fit(rows @ self.transform_)
        self._log_jacobian = float(np.log(np.diag(self.transform_)).sum())  # log|det Lᵀ|
        return self

    def log_density(self, X: Any) -> np.ndarray:
        """Normalised log density (density in x = density in y times |det Lᵀ|)."""
        check_is_fitted(self, "kde_")
        X = validate_data(self, X, reset=False, dtype=np.float64)
        return self.kde_.score_samples(X @ self.transform_) + self._log_jacobian

    def score_samples(self, X: Any) -> np.ndarray:
        return self.log_density(X)

    def grad_log_density(self, X: Any) -> np.ndarray:
        """∇ log p(x) = Σ_i w_i(x) Σ_z (x_i − x)/γ², w = softmax of the kernel exponents."""
        check_is_fitted(self, "kde_")
        X = validate_data(self, X, reset=False, dtype=np.float64)
        out = np.empty_like(X)
        Y = self.rows_ @ self.transform_
        g2 = self.bandwidth_**2
        for start in range(0, X.shape[0], 256):
            y = X[start:start + 256] @ self.transform_
            e = -0.5 * (np.sum(y * y, axis=1)[:, None] - 2 * y @ Y.T + np.sum(Y * Y, axis=1)[None, :]) / g2
            w = np.exp(e - e.max(axis=1, keepdims=True))
            w /= w.sum(axis=1, keepdims=True)
            out[start:start + 256] = (w @ self.rows_ - X[start:start + 256]) @ self.kernel_cov_ / g2
        return out

    def sample(self, n_samples: int = 1, random_state: int | None = None) -> np.ndarray:
        check_is_fitted(self, "kde_")
        seed = self.random_state if random_state is None else random_state
        y = self.kde_.sample(int(n_samples), random_state=seed)
        return np.linalg.solve(self.transform_.T, y.T).T
