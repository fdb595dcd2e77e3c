"""``GPTiltedDensity``: FD and FVPD GP-tilted densities fitted in one streamed pass (seed 003).

``fit(X)`` = pilot sample (MATH.md §1) → feature draw → one pass of chunk statistics,
tree-reduced (MATH.md §2) → closed-form solve (FD, MATH.md §2; FVPD, MATH.md §4). The
pieces are public: ``accumulate`` (data → statistics), ``fit_from_stats`` (statistics →
model), ``partial_fit`` (add statistics of new rows, re-solve).
"""

from __future__ import annotations

import datetime
import math
import numbers
from pathlib import Path
from typing import Any

import dask
import dask.array as da
import numpy as np
from sklearn.base import BaseEstimator
from sklearn.utils.validation import check_is_fitted, validate_data

from tgpflow.backend import resolve_device
from tgpflow.features.rff import RandomFourierFeatures, paper_kernel_cov, scott_bandwidth
from tgpflow.io.artifact import write_artifact
from tgpflow.io.pilot import DEFAULT_PILOT_ROWS, pilot_sample
from tgpflow.io.sources import Source, as_source
from tgpflow.io.validate import check_on_bad_rows
from tgpflow.logs import logger, phase
from tgpflow.models.evaluate import TGPEvaluator
from tgpflow.sample.resample import importance_resample
from tgpflow.solve.tgp import Base, base_from_moments, solve_fd, solve_fvpd
from tgpflow.stats.moments import Moments
from tgpflow.stats.reduce import accumulate as run_pass
from tgpflow.stats.tgp import DEFAULT_BLOCK_BYTES, TGPStats, tgp_chunk_stats

__all__ = ["GPTiltedDensity"]


def _is_lazy(X: Any) -> bool:
    if isinstance(X, (da.Array, Source, str, Path)):
        return True
    try:
        import dask.dataframe as dd

        return isinstance(X, dd.DataFrame)
    except ImportError:  # pragma: no cover
        return False


class GPTiltedDensity(BaseEstimator):
    """GP-tilted density estimator (seed 003), FD (Alg 2) or FVPD (Alg 4).

    ``log q(x) = θᵀφ(x) − ½(x−μ)ᵀΣ⁻¹(x−μ)`` with random Fourier features φ and the base
    N(μ, Σ) set to the exact moments of the data (MATH.md §2). FVPD integrates θ over its
    Fisher variational posterior (MATH.md §4).

    Parameters
    ----------
    method : {"fd", "fvpd"}
    n_features : int, S — number of random Fourier features (paper default 1000).
    lam : float — ridge λ on θ, with the objective a SUM over rows (paper default 0.1).
    bandwidth : "scott" or float — γ; Scott's rule N^{−1/(d+4)}√(tr Σ/d) by default.
    eta : "auto" or float — FVPD temperature η; "auto" is 1/γ².
    kernel_cov : {"paper", "identity"} — Σ_z = dΣ/tr Σ (seed 003 §IV) or I.
    pilot : {"sample", "exact"} — a bounded pilot sample, or a full moments pass first.
    pilot_rows : int — rows in the pilot sample (default 100 000).
    on_bad_rows : {"raise", "drop"} — rows with missing/non-finite values.
    block_bytes : int — working-memory budget of a chunk task for feature blocks.
    split_every : int — fan-in of the reduction tree.
    random_state : int — seed of the pilot and of the feature draw.
    device : {"auto", "cpu", "gpu"} — "auto" resolves to the CPU in this release.
    """

    def __init__(self, *, method: str = "fd", n_features: int = 1000, lam: float = 0.1,
                 bandwidth: str | float = "scott", eta: str | float = "auto", kernel_cov: str = "paper",
                 pilot: str = "sample", pilot_rows: int = DEFAULT_PILOT_ROWS, on_bad_rows: str = "raise",
                 block_bytes: int = DEFAULT_BLOCK_BYTES, split_every: int = 8, random_state: int | None = 0,
                 device: str = "auto"):
        self.method = method
        self.n_features = n_features
        self.lam = lam
        self.bandwidth = bandwidth
        self.eta = eta
        self.kernel_cov = kernel_cov
        self.pilot = pilot
        self.pilot_rows = pilot_rows
        self.on_bad_rows = on_bad_rows
        self.block_bytes = block_bytes
        self.split_every = split_every
        self.random_state = random_state
        self.device = device

    # -- parameter checks -------------------------------------------------------------
    def _check_params(self) -> None:
        if self.method not in ("fd", "fvpd"):
            raise ValueError(f"method must be 'fd' or 'fvpd'; got {self.method!r}")
        if not isinstance(self.n_features, numbers.Integral) or self.n_features < 1:
            raise ValueError(f"n_features must be a positive integer; got {self.n_features!r}")
        if not (isinstance(self.lam, numbers.Real) and math.isfinite(self.lam) and self.lam > 0):
            raise ValueError(f"lam must be a positive number; got {self.lam!r}")
        if not (self.bandwidth == "scott" or (isinstance(self.bandwidth, numbers.Real) and self.bandwidth > 0)):
            raise ValueError(f"bandwidth must be 'scott' or a positive number; got {self.bandwidth!r}")
        if not (self.eta == "auto" or (isinstance(self.eta, numbers.Real) and self.eta > 0)):
            raise ValueError(f"eta must be 'auto' or a positive number; got {self.eta!r}")
        if self.kernel_cov not in ("paper", "identity"):
            raise ValueError(f"kernel_cov must be 'paper' or 'identity'; got {self.kernel_cov!r}")
        if self.pilot not in ("sample", "exact"):
            raise ValueError(f"pilot must be 'sample' or 'exact'; got {self.pilot!r}")
        if not isinstance(self.pilot_rows, numbers.Integral) or self.pilot_rows < 2:
            raise ValueError(f"pilot_rows must be an integer >= 2; got {self.pilot_rows!r}")
        check_on_bad_rows(self.on_bad_rows)
        if not isinstance(self.split_every, numbers.Integral) or self.split_every < 2:
            raise ValueError(f"split_every must be an integer >= 2; got {self.split_every!r}")
        resolve_device(self.device)

    def _seeds(self) -> tuple[np.random.SeedSequence, np.random.SeedSequence]:
        pilot_seed, feature_seed = np.random.SeedSequence(self.random_state).spawn(2)
        return pilot_seed, feature_seed

    # -- data entry -------------------------------------------------------------------
    def _source(self, X: Any, columns: list[str] | None, reset: bool) -> Source:
        """A validated source; in-memory arrays go through sklearn's validate_data."""
        if not _is_lazy(X):
            finite = self.on_bad_rows == "raise"
            X = validate_data(self, X, reset=reset, dtype=np.float64, ensure_all_finite=finite,
                              ensure_min_samples=1)
            if columns is not None:
                X = X[:, list(columns)]
            return as_source(X, on_bad_rows=self.on_bad_rows)
        source = as_source(X, columns=columns, on_bad_rows=self.on_bad_rows)
        if reset:
            self.n_features_in_ = source.n_columns
            if source.named:
                self.feature_names_in_ = np.asarray(source.columns, dtype=object)
            elif hasattr(self, "feature_names_in_"):
                del self.feature_names_in_
        return source

    def _draw_features(self, source: Source) -> tuple[RandomFourierFeatures, dict[str, Any]]:
        pilot_seed, feature_seed = self._seeds()
        with phase("pilot", mode=self.pilot, chunks=source.n_chunks) as info:
            if self.pilot == "exact":
                moments, _ = run_pass(source, Moments.from_rows, split_every=self.split_every)
                n_total, mean, cov = moments.n, moments.mean, moments.covariance if moments.n else None
                info.update(rows=moments.n, chunks_read=source.n_chunks)
            else:
                pilot = pilot_sample(source, rows=self.pilot_rows, random_state=pilot_seed)
                if pilot.rows.shape[0] < 2:
                    raise ValueError(f"{source.description}: the pilot sample has {pilot.rows.shape[0]} row(s); "
                                     f"the GP-tilted density needs at least 2 samples (got 1 sample or fewer)")
                n_total, mean = pilot.n_total, pilot.rows.mean(axis=0)
                cov = np.cov(pilot.rows, rowvar=False, bias=True).reshape(source.n_columns, source.n_columns)
                info.update(rows=pilot.rows.shape[0], chunks_read=pilot.chunks_read, n_total=n_total,
                            n_total_exact=pilot.n_total_exact)
            if n_total < 2 or cov is None:
                raise ValueError(f"{source.description}: needs at least 2 rows; got {n_total} sample(s)")
            gamma = scott_bandwidth(n_total, cov) if self.bandwidth == "scott" else float(self.bandwidth)
            kernel_cov = paper_kernel_cov(cov) if self.kernel_cov == "paper" else None
            features = RandomFourierFeatures.draw(
                int(self.n_features), bandwidth=gamma, kernel_cov=kernel_cov, n_dims=source.n_columns,
                shift=mean, random_state=np.random.default_rng(feature_seed))
            if isinstance(self.random_state, numbers.Integral):
                features = RandomFourierFeatures(features.Z, features.c, features.gamma, features.shift,
                                                 seed=int(self.random_state))
            info.update(gamma=round(gamma, 6))
        return features, dict(info)

    # -- the public pieces --------------------------------------------------------------
    def accumulate(self, X: Any, *, columns: list[str] | None = None,
                   features: RandomFourierFeatures | None = None) -> TGPStats:
        """Statistics of the rows of ``X`` for this estimator's feature draw (one pass).

        The draw is, in order: ``features`` if given, the fitted ``features_``, or a new
        draw from a pilot sample of ``X`` (stored as ``features_``, so that
        ``fit_from_stats`` can use it).
        """
        self._check_params()
        fitted = hasattr(self, "features_")
        source = self._source(X, columns, reset=not fitted)
        if fitted and source.n_columns != self.n_features_in_:
            raise ValueError(f"X has {source.n_columns} features, but {type(self).__name__} is expecting "
                             f"{self.n_features_in_} features as input")
        if features is None:
            if fitted:
                features = self.features_
            else:
                features, self.pilot_ = self._draw_features(source)
        if features.n_dims != source.n_columns:
            raise ValueError(f"the features were drawn for d={features.n_dims} but the data have {source.n_columns} columns")
        self.features_ = features
        with phase("pass", chunks=source.n_chunks, n_features=features.n_features) as info:
            stats, dropped = run_pass(source, tgp_chunk_stats, features, int(self.block_bytes),
                                      split_every=int(self.split_every))
            info.update(rows=stats.n, dropped=dropped)
        if dropped:
            logger.warning("%s: dropped %d rows with missing or non-finite values", source.description, dropped)
        self.last_rows_dropped_ = dropped
        if stats.n == 0:
            raise ValueError(f"{source.description}: no rows left to fit (all {dropped} rows were dropped)")
        return stats

    def fit(self, X: Any, y: Any = None, *, columns: list[str] | None = None,
            features: RandomFourierFeatures | None = None) -> GPTiltedDensity:
        """Fit from any source: NumPy/pandas, dask array/DataFrame, Parquet path/glob, Zarr path."""
        self._check_params()
        for attr in ("features_", "stats_"):
            if hasattr(self, attr):
                delattr(self, attr)
        self.pilot_ = {"mode": "given"} if features is not None else {}
        stats = self.accumulate(X, columns=columns, features=features)
        self.n_rows_dropped_ = self.last_rows_dropped_
        return self.fit_from_stats(stats)

    def fit_from_stats(self, stats: TGPStats, features: RandomFourierFeatures | None = None) -> GPTiltedDensity:
        """Solve from statistics (no data access); ``features`` default to ``features_``."""
        self._check_params()
        features = features if features is not None else getattr(self, "features_", None)
        if features is None:
            raise ValueError("fit_from_stats needs the feature draw the statistics were computed with: "
                             "pass features=… (or call accumulate first)")
        stats.check_features(features)
        columns = tuple(getattr(self, "feature_names_in_", ())) or None
        with phase("solve", method=self.method, n_features=features.n_features) as info:
            base = base_from_moments(stats.moments, columns)
            self._set_solution(stats, features, base)
            info.update(solver=self.solver_info_.get("method"))
        return self

    def partial_fit(self, X: Any, y: Any = None, *, columns: list[str] | None = None) -> GPTiltedDensity:
        """Add the statistics of new rows to ``stats_`` and re-solve (fits if not yet fitted)."""
        if not hasattr(self, "stats_"):
            return self.fit(X, columns=columns)
        stats = self.accumulate(X, columns=columns)
        self.n_rows_dropped_ = getattr(self, "n_rows_dropped_", 0) + self.last_rows_dropped_
        return self.fit_from_stats(self.stats_ + stats)

    def _set_solution(self, stats: TGPStats, features: RandomFourierFeatures, base: Base) -> None:
        self.features_ = features
        self.stats_ = stats
        self.n_samples_seen_ = int(stats.n)
        self.n_features_in_ = features.n_dims
        self.bandwidth_ = features.gamma
        self.mean_ = base.mean
        self.covariance_ = base.cov
        self.precision_ = base.precision
        lam = float(self.lam)
        if self.method == "fd":
            self.theta_, self.objective_, self.solver_info_ = solve_fd(stats, features, base, lam)
            self._evaluator = TGPEvaluator(features, base, theta=self.theta_, block_bytes=int(self.block_bytes))
        else:
            self.eta_ = 1.0 / features.gamma**2 if self.eta == "auto" else float(self.eta)
            sol = solve_fvpd(stats, features, base, lam, self.eta_)
            self.posterior_mean_ = sol.posterior_mean
            self.posterior_precision_ = sol.posterior_precision
            self.predictive_m_ = sol.m
            self.predictive_chol_ = sol.M_chol
            self.predictive_v_ = sol.v
            self.solver_info_ = sol.info
            self._evaluator = TGPEvaluator(features, base, M_chol=sol.M_chol, v=sol.v, block_bytes=int(self.block_bytes))

    # -- evaluation -------------------------------------------------------------------
    def _evaluate(self, X: Any, which: str) -> Any:
        check_is_fitted(self, "stats_")
        fn = getattr(self._evaluator, which)
        if _is_lazy(X):
            source = self._source(X, None, reset=False)
            if source.n_columns != self.n_features_in_:
                raise ValueError(f"X has {source.n_columns} features, but {type(self).__name__} is expecting "
                                 f"{self.n_features_in_} features as input")
            ev = dask.delayed(fn, pure=True)
            parts = []
            for block, size in zip(source.blocks(), source.sizes, strict=True):
                rows = size if source.on_bad_rows == "raise" else math.nan
                shape = (rows,) if which == "log_density" else (rows, source.n_columns)
                parts.append(da.from_delayed(ev(block), shape=shape, dtype=np.float64,
                                             meta=np.empty((0,) * len(shape))))
            return da.concatenate(parts) if len(parts) > 1 else parts[0]
        X = validate_data(self, X, reset=False, dtype=np.float64)
        return fn(X)

    def log_density(self, X: Any) -> Any:
        """Unnormalised log density, shape (n,); lazy for dask/Parquet/Zarr input."""
        return self._evaluate(X, "log_density")

    def score_samples(self, X: Any) -> Any:
        """scikit-learn's name for :meth:`log_density`."""
        return self.log_density(X)

    def score(self, X: Any, y: Any = None) -> float:
        """Sum of the unnormalised log density over the rows of X."""
        return float(np.sum(self.log_density(X)))

    def grad_log_density(self, X: Any) -> Any:
        """The score function ∇ log q(x), shape (n, d) (MATH.md §2, §4)."""
        return self._evaluate(X, "grad_log_density")

    def sample(self, n_samples: int = 1, random_state: int | None = None, *, n_proposals: int | None = None) -> np.ndarray:
        """Draw rows by importance resampling from the base N(μ, Σ) (MATH.md §5).

        ``n_proposals`` defaults to max(20·n_samples, 10 000); the effective sample size of
        the weights is kept in ``last_sample_ess_``.
        """
        check_is_fitted(self, "stats_")
        seed = self.random_state if random_state is None else random_state
        rng = np.random.default_rng(seed)
        n_prop = n_proposals if n_proposals is not None else max(20 * int(n_samples), 10_000)
        rows, ess = importance_resample(self._evaluator.log_density, self.mean_, self.covariance_,
                                        int(n_samples), int(n_prop), rng)
        self.last_sample_ess_ = ess
        return rows

    # -- persistence ------------------------------------------------------------------
    def save(self, path: str | Path) -> Path:
        """Write the fitted model atomically as a Zarr group (schema version, checksums)."""
        check_is_fitted(self, "stats_")
        arrays = {f"features.{k}": v for k, v in self.features_.to_arrays().items()}
        arrays.update({f"stats.{k}": v for k, v in self.stats_.to_arrays().items()})
        names = ["mean_", "covariance_", "precision_"] + (
            ["theta_"] if self.method == "fd" else
            ["posterior_mean_", "posterior_precision_", "predictive_m_", "predictive_chol_", "predictive_v_"])
        arrays.update({f"fitted.{n}": getattr(self, n) for n in names})
        meta = {
            "params": self.get_params(),
            "fingerprint": self.features_.fingerprint,
            "feature_seed": self.features_.seed,
            "feature_names_in": [str(c) for c in getattr(self, "feature_names_in_", [])] or None,
            "n_samples_seen": self.n_samples_seen_,
            "n_rows_dropped": int(getattr(self, "n_rows_dropped_", 0)),
            "objective": getattr(self, "objective_", None),
            "eta": getattr(self, "eta_", None),
            "solver_info": self.solver_info_,
            "pilot": getattr(self, "pilot_", {}),
            "tgpflow_version": _version(),
            "created": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        }
        return write_artifact(path, type(self).__name__, arrays, meta)

    @classmethod
    def _from_artifact(cls, arrays: dict[str, np.ndarray], meta: dict[str, Any], path: Path) -> GPTiltedDensity:
        from tgpflow.errors import ModelFileError

        est = cls(**meta["params"])
        features = RandomFourierFeatures.from_arrays(
            {k.split(".", 1)[1]: v for k, v in arrays.items() if k.startswith("features.")}, seed=meta.get("feature_seed"))
        if features.fingerprint != meta["fingerprint"]:
            raise ModelFileError(f"{path}: the stored features do not match their fingerprint; the file was modified")
        stats = TGPStats.from_arrays(meta["fingerprint"], {k.split(".", 1)[1]: v for k, v in arrays.items()
                                                            if k.startswith("stats.")})
        if meta.get("feature_names_in"):
            est.feature_names_in_ = np.asarray(meta["feature_names_in"], dtype=object)
        est.pilot_ = meta.get("pilot", {})
        est.n_rows_dropped_ = meta.get("n_rows_dropped", 0)
        est.fit_from_stats(stats, features)
        stored = {k.split(".", 1)[1]: v for k, v in arrays.items() if k.startswith("fitted.")}
        for name, value in stored.items():  # the re-solve must reproduce what was saved
            if not np.allclose(getattr(est, name), value, rtol=1e-8, atol=1e-12):
                raise ModelFileError(f"{path}: the stored {name} does not match the solve of the stored statistics")
        return est


def _version() -> str:
    from tgpflow import __version__

    return __version__
