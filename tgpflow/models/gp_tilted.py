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

import numpy as np
from sklearn.base import BaseEstimator
from sklearn.utils.validation import check_is_fitted

from tgpflow.backend import resolve_device
from tgpflow.features.noise import level_bandwidth, noise_levels, paper_sigma_max
from tgpflow.features.rff import RandomFourierFeatures, paper_kernel_cov, scott_bandwidth
from tgpflow.io.artifact import write_artifact
from tgpflow.io.pilot import DEFAULT_PILOT_ROWS, pilot_sample
from tgpflow.io.sources import Source
from tgpflow.io.validate import check_on_bad_rows
from tgpflow.logs import logger, phase
from tgpflow.models.anomaly import AnomalyMixin
from tgpflow.models.evaluate import TGPEvaluator
from tgpflow.models.streaming import StreamingMixin, is_grid, is_positive
from tgpflow.sample.resample import importance_resample
from tgpflow.solve.base_learning import learn_base
from tgpflow.solve.map import base_draws, solve_map
from tgpflow.solve.ncfd import level_base, ncfd_system, solve_ncfd
from tgpflow.solve.select import DEFAULT_LAM_GRID, GridScorer, heldout_loss
from tgpflow.solve.tgp import Base, base_from_moments, fd_system, solve_fd, solve_fvpd
from tgpflow.stats.moments import Moments
from tgpflow.stats.ncfd import NCFDStats, ncfd_chunk_stats
from tgpflow.stats.reduce import accumulate as run_pass
from tgpflow.stats.split import StatsBundle
from tgpflow.stats.tgp import DEFAULT_BLOCK_BYTES, PRECISIONS, TGPStats, tgp_chunk_stats

__all__ = ["GPTiltedDensity", "METHODS"]

#: Inference methods: FD (Alg 2), NCFD (Alg 3), FVPD (Alg 4), MAP (Alg 1) and the KDE-RFF baseline.
METHODS = ("fd", "ncfd", "fvpd", "map", "kde_rff")



class GPTiltedDensity(AnomalyMixin, StreamingMixin, BaseEstimator):
    """GP-tilted density estimator (seed 003): FD, NCFD, FVPD, MAP, and the KDE-RFF baseline.

    ``log q(x) = θᵀφ(x) − ½(x−μ)ᵀΣ⁻¹(x−μ)`` with random Fourier features φ and the base
    N(μ, Σ) set to the exact moments of the data (MATH.md §2) or learnt (``base="learn"``).
    NCFD fits one θ for a ladder of noise levels and evaluates at any σ ≥ 0 (MATH.md §3).
    FVPD integrates θ over its Fisher variational posterior (MATH.md §4). MAP maximises the
    posterior with Newton steps on fixed base draws (MATH.md §5). ``kde_rff`` is the paper's
    RFF kernel density baseline ``p(x) ∝ φ(x)ᵀψ/N`` from the same pass (MATH.md §5).

    Parameters
    ----------
    method : {"fd", "ncfd", "fvpd", "map", "kde_rff"}
    n_features : int, S — number of random Fourier features (paper default 1000).
    lam : float or "auto" — ridge λ on θ, with the objective a SUM over rows (paper default
        0.1). "auto" selects λ from ``lam_grid`` on held-out rows (no extra pass, see below).
    bandwidth : "scott", float, or a list of floats — γ; Scott's rule by default. A list is a
        grid selected on held-out rows; every γ is accumulated in the same pass (G× its cost).
    noise_levels : int, H — NCFD noise levels σ_h = (h−1)σ_max/H (paper default 10).
    sigma_max : "auto" or float — "auto" is the paper's √(tr Σ)/d (MATH.md §11 A5).
    eta : "auto", float or a list of floats — FVPD temperature η; "auto" is 1/γ². A list is
        selected on held-out rows.
    base : {"empirical", "learn"} — the base N(μ, Σ): the exact data moments, or learnt by
        coordinate descent from the statistics (eqs 12–16; FD and FVPD only, no extra pass).
    lam_grid : sequence of floats, optional — the λ values of ``lam="auto"`` (default 19
        values, 10⁻⁴ … 10²).
    validation_fraction : float — share of rows held out when selecting, by a fixed hash of
        each row's position (the same rows on every refit). The final model is solved on all
        rows with the chosen values.
    map_draws : int, S₂ — base draws of the MAP expectation (paper: 100 000).
    map_max_iter : int — Newton iterations of MAP at most.
    kernel_cov : {"paper", "identity"} — Σ_z = dΣ/tr Σ (seed 003 §IV) or I.
    pilot : {"sample", "exact"} — a bounded pilot sample, or a full moments pass first.
    pilot_rows : int — rows in the pilot sample (default 100 000).
    on_bad_rows : {"raise", "drop"} — rows with missing/non-finite values.
    block_bytes : int — working-memory budget of a chunk task for feature blocks.
    split_every : int — fan-in of the reduction tree.
    random_state : int — seed of the pilot, the feature draw and the MAP draws.
    device : {"auto", "cpu", "gpu"} — "auto" resolves to the CPU in this release.
    precision : {"float64", "mixed"} — "mixed": float32 S×S products accumulated in float64
        (see ``benchmarks/precision_modes.py`` for the measured error and speed).
    threshold_quantile : float — share of (pilot) training rows flagged by ``is_anomaly``.
    """

    def __init__(self, *, method: str = "fd", n_features: int = 1000, lam: float | str = 0.1,
                 bandwidth: str | float | list[float] = "scott", noise_levels: int = 10,
                 sigma_max: str | float = "auto", eta: str | float | list[float] = "auto", base: str = "empirical",
                 lam_grid: list[float] | None = None, validation_fraction: float = 0.1, map_draws: int = 100_000,
                 map_max_iter: int = 100, kernel_cov: str = "paper", pilot: str = "sample",
                 pilot_rows: int = DEFAULT_PILOT_ROWS, on_bad_rows: str = "raise",
                 block_bytes: int = DEFAULT_BLOCK_BYTES, split_every: int = 8, random_state: int | None = 0,
                 device: str = "auto", precision: str = "float64", threshold_quantile: float = 0.01):
        self.threshold_quantile = threshold_quantile
        self.precision = precision
        self.method = method
        self.n_features = n_features
        self.lam = lam
        self.bandwidth = bandwidth
        self.noise_levels = noise_levels
        self.sigma_max = sigma_max
        self.eta = eta
        self.base = base
        self.lam_grid = lam_grid
        self.validation_fraction = validation_fraction
        self.map_draws = map_draws
        self.map_max_iter = map_max_iter
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
        if self.method not in METHODS:
            raise ValueError(f"method must be one of {METHODS}; got {self.method!r}")
        if not isinstance(self.n_features, numbers.Integral) or self.n_features < 1:
            raise ValueError(f"n_features must be a positive integer; got {self.n_features!r}")
        if not (self.lam == "auto" or is_positive(self.lam)):
            raise ValueError(f"lam must be a positive number or 'auto'; got {self.lam!r}")
        if self.lam_grid is not None and not (is_grid(self.lam_grid) and len(self.lam_grid) > 0
                                              and all(is_positive(v) for v in self.lam_grid)):
            raise ValueError(f"lam_grid must be a non-empty list of positive numbers; got {self.lam_grid!r}")
        if is_grid(self.bandwidth):
            if not (len(self.bandwidth) > 0 and all(is_positive(v) for v in self.bandwidth)):
                raise ValueError(f"a bandwidth grid must be a non-empty list of positive numbers; got {self.bandwidth!r}")
        elif not (self.bandwidth == "scott" or is_positive(self.bandwidth)):
            raise ValueError(f"bandwidth must be 'scott', a positive number or a list of them; got {self.bandwidth!r}")
        if not isinstance(self.noise_levels, numbers.Integral) or self.noise_levels < 1:
            raise ValueError(f"noise_levels must be a positive integer; got {self.noise_levels!r}")
        if not (self.sigma_max == "auto" or (isinstance(self.sigma_max, numbers.Real) and self.sigma_max >= 0)):
            raise ValueError(f"sigma_max must be 'auto' or a number >= 0; got {self.sigma_max!r}")
        if is_grid(self.eta):
            if not (len(self.eta) > 0 and all(is_positive(v) for v in self.eta)):
                raise ValueError(f"an eta grid must be a non-empty list of positive numbers; got {self.eta!r}")
        elif not (self.eta == "auto" or is_positive(self.eta)):
            raise ValueError(f"eta must be 'auto', a positive number or a list of them; got {self.eta!r}")
        if self.base not in ("empirical", "learn"):
            raise ValueError(f"base must be 'empirical' or 'learn'; got {self.base!r}")
        if self.base == "learn" and self.method not in ("fd", "fvpd"):
            raise ValueError(f"base='learn' is defined for method 'fd' and 'fvpd' (eqs 12–16); got {self.method!r}")
        if self.method == "kde_rff" and self._selecting:
            raise ValueError("kde_rff has no λ or η to select; give lam and bandwidth as numbers")
        if not (isinstance(self.validation_fraction, numbers.Real) and 0 < self.validation_fraction < 1):
            raise ValueError(f"validation_fraction must be in (0, 1); got {self.validation_fraction!r}")
        for name in ("map_draws", "map_max_iter"):
            value = getattr(self, name)
            if not isinstance(value, numbers.Integral) or value < 1:
                raise ValueError(f"{name} must be a positive integer; got {value!r}")
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
        if self.precision not in PRECISIONS:
            raise ValueError(f"precision must be one of {PRECISIONS}; got {self.precision!r}")

    @property
    def _selecting(self) -> bool:
        """Whether a held-out selection is asked for (λ = "auto", or a γ or η grid)."""
        return self.lam == "auto" or is_grid(self.bandwidth) or is_grid(self.eta)

    def _seeds(self) -> tuple[np.random.SeedSequence, ...]:
        return tuple(np.random.SeedSequence(self.random_state).spawn(3))  # pilot, features, MAP draws

    # -- data entry -------------------------------------------------------------------
    def _pilot_moments(self, source: Source) -> tuple[int, np.ndarray, np.ndarray, dict[str, Any]]:
        """(N, mean, covariance) from a bounded pilot sample, or exactly with ``pilot="exact"``."""
        pilot_seed = self._seeds()[0]
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
                self._pilot_rows = pilot.rows
                cov = np.cov(pilot.rows, rowvar=False, bias=True).reshape(source.n_columns, source.n_columns)
                info.update(rows=pilot.rows.shape[0], chunks_read=pilot.chunks_read, n_total=n_total,
                            n_total_exact=pilot.n_total_exact)
            if n_total < 2 or cov is None:
                raise ValueError(f"{source.description}: needs at least 2 rows; got {n_total} sample(s)")
        return n_total, mean, cov, dict(info)

    def _draw_features(self, n_total: int, mean: np.ndarray, cov: np.ndarray) -> RandomFourierFeatures:
        if is_grid(self.bandwidth):
            gamma = float(self.bandwidth[0])  # the grid shares Z and c; each γ is applied in the pass
        else:
            gamma = scott_bandwidth(n_total, cov) if self.bandwidth == "scott" else float(self.bandwidth)
        kernel_cov = paper_kernel_cov(cov) if self.kernel_cov == "paper" else None
        features = RandomFourierFeatures.draw(
            int(self.n_features), bandwidth=gamma, kernel_cov=kernel_cov, n_dims=mean.shape[0],
            shift=mean, random_state=np.random.default_rng(self._seeds()[1]))
        if isinstance(self.random_state, numbers.Integral):
            features = RandomFourierFeatures(features.Z, features.c, features.gamma, features.shift,
                                             seed=int(self.random_state))
        return features

    def _levels(self, cov: np.ndarray | None) -> np.ndarray:
        """The NCFD noise levels (needs the pilot covariance when sigma_max is "auto")."""
        if self.sigma_max == "auto":
            if cov is None:
                raise ValueError("sigma_max='auto' needs the data covariance: fit from data, or give sigma_max")
            smax = paper_sigma_max(cov)
        else:
            smax = float(self.sigma_max)
        return noise_levels(smax, int(self.noise_levels))

    def _chunk_fn(self) -> tuple[Any, tuple[Any, ...]]:
        """The per-chunk statistics function and its trailing arguments (after the features)."""
        if self.method == "ncfd":
            return ncfd_chunk_stats, (self.noise_levels_, int(self.block_bytes), self.precision)
        return tgp_chunk_stats, (int(self.block_bytes), self.precision)

    def _prepare(self, source: Source) -> None:
        """Draw the features from a pilot of ``source`` without a pass (pipelines: per-partition passes)."""
        self._check_params()
        n_total, mean, cov, self.pilot_ = self._pilot_moments(source)
        self.features_ = self._draw_features(n_total, mean, cov)
        self.n_features_in_ = source.n_columns
        if self.method == "ncfd":
            self.noise_levels_ = self._levels(cov)

    def _pass_spec(self) -> tuple[Any, tuple[Any, ...]]:
        """(chunk statistics function, its arguments after the rows) for the fitted draw."""
        fn, args = self._chunk_fn()
        return fn, (self.features_, *args)

    # -- the public pieces --------------------------------------------------------------
    def accumulate(self, X: Any, *, columns: list[str] | None = None,
                   features: RandomFourierFeatures | None = None) -> TGPStats | NCFDStats | StatsBundle:
        """Statistics of the rows of ``X`` for this estimator's feature draw (one pass).

        The draw is, in order: ``features`` if given, the fitted ``features_``, or a new
        draw from a pilot sample of ``X`` (stored as ``features_``, so that
        ``fit_from_stats`` can use it). The statistics are :class:`TGPStats`, or
        :class:`NCFDStats` for NCFD. On a first fit that selects λ, η or γ on held-out rows,
        they are a :class:`StatsBundle` with ``("train", γ)`` and ``("val", γ)`` parts for every γ.
        """
        self._check_params()
        fitted = hasattr(self, "features_")
        source = self._source(X, columns, reset=not fitted)
        if fitted:
            self._check_width(source)
        cov = None
        if features is None and fitted:
            features = self.features_
        elif features is None or (self.method == "ncfd" and self.sigma_max == "auto" and not fitted):
            n_total, mean, cov, self.pilot_ = self._pilot_moments(source)
            if features is None:
                features = self._draw_features(n_total, mean, cov)
        if features.n_dims != source.n_columns:
            raise ValueError(f"the features were drawn for d={features.n_dims} but the data have {source.n_columns} columns")
        if is_grid(self.bandwidth) and not fitted and features.gamma not in [float(g) for g in self.bandwidth]:
            raise ValueError("a bandwidth grid cannot be combined with given features of another γ")
        if self.method == "ncfd" and not (fitted and hasattr(self, "noise_levels_")):
            self.noise_levels_ = self._levels(cov)
        self.features_ = features
        fn, args = self._chunk_fn()
        variants = None
        if self._selecting and not fitted:
            grid = [float(g) for g in self.bandwidth] if is_grid(self.bandwidth) else [features.gamma]
            variants = {g: features.with_bandwidth(g) for g in grid}
            self.split_key_ = "global row position" if source.n_rows is not None else "chunk and row in chunk"
        return self._stream_pass(source, fn, features, args, variants, n_features=features.n_features)

    def fit(self, X: Any, y: Any = None, *, columns: list[str] | None = None,
            features: RandomFourierFeatures | None = None) -> GPTiltedDensity:
        """Fit from any source: NumPy/pandas, dask array/DataFrame, Parquet path/glob, Zarr path."""
        self._check_params()
        for attr in ("features_", "stats_", "selection_", "noise_levels_", "pilot_"):
            if hasattr(self, attr):
                delattr(self, attr)
        self.pilot_ = {"mode": "given"} if features is not None else {}
        self._pilot_rows = None
        stats = self.accumulate(X, columns=columns, features=features)
        self.n_rows_dropped_ = self.last_rows_dropped_
        self.fit_from_stats(stats)
        if getattr(self, "_pilot_rows", None) is not None:
            self._set_threshold(self._pilot_rows)
        self._pilot_rows = None
        return self

    def _raw_log_density(self, rows: np.ndarray) -> np.ndarray:
        return self._evaluator.log_density(rows)

    def fit_from_stats(self, stats: TGPStats | NCFDStats | StatsBundle,
                       features: RandomFourierFeatures | None = None) -> GPTiltedDensity:
        """Solve from statistics (no data access); ``features`` default to ``features_``.

        A :class:`StatsBundle` (from a selecting ``accumulate``) first selects λ, η and γ on
        its validation parts, then solves on all rows with the chosen values.
        """
        self._check_params()
        features = features if features is not None else getattr(self, "features_", None)
        if features is None:
            raise ValueError("fit_from_stats needs the feature draw the statistics were computed with: "
                             "pass features=… (or call accumulate first)")
        if isinstance(stats, StatsBundle):
            stats, features = self._select(stats, features)
        expected = NCFDStats if self.method == "ncfd" else TGPStats
        if not isinstance(stats, expected):
            raise TypeError(f"method {self.method!r} needs {expected.__name__}, got {type(stats).__name__}"
                            + ("; use stats.fd for the σ = 0 part of an NCFD pass" if isinstance(stats, NCFDStats) else ""))
        stats.check_features(features)
        if self.method == "ncfd":
            if not hasattr(self, "noise_levels_"):
                self.noise_levels_ = stats.sigmas.copy()
            stats.check_features(features, self.noise_levels_)
        lam, eta = self._chosen_lam_eta(features)
        columns = tuple(getattr(self, "feature_names_in_", ())) or None
        with phase("solve", method=self.method, n_features=features.n_features) as info:
            base = base_from_moments(stats.moments, columns)
            self._set_solution(stats, features, base, lam, eta)
            info.update(solver=self.solver_info_.get("method"))
        return self

    def partial_fit(self, X: Any, y: Any = None, *, columns: list[str] | None = None) -> GPTiltedDensity:
        """Add the statistics of new rows to ``stats_`` and re-solve (fits if not yet fitted).

        Values selected on held-out rows at ``fit`` (λ, η, γ) are kept, not re-selected.
        """
        if not hasattr(self, "stats_"):
            return self.fit(X, columns=columns)
        stats = self.accumulate(X, columns=columns)
        self.n_rows_dropped_ = getattr(self, "n_rows_dropped_", 0) + self.last_rows_dropped_
        return self.fit_from_stats(self.stats_ + stats)

    # -- selection ----------------------------------------------------------------------
    def _lam_values(self) -> list[float]:
        if self.lam != "auto":
            return [float(self.lam)]
        return [float(v) for v in (self.lam_grid if self.lam_grid is not None else DEFAULT_LAM_GRID)]

    def _eta_values(self, gamma: float) -> list[float]:
        if is_grid(self.eta):
            return [float(v) for v in self.eta]
        return [1.0 / gamma**2 if self.eta == "auto" else float(self.eta)]

    def _chosen_lam_eta(self, features: RandomFourierFeatures) -> tuple[float, float | None]:
        if self.method == "kde_rff":
            return math.nan, None
        chosen = getattr(self, "selection_", {}).get("chosen", {})
        if self.lam == "auto":
            if "lam" not in chosen:
                raise ValueError("lam='auto' selects λ during fit (a split pass); fit first, or give lam")
            lam = float(chosen["lam"])
        else:
            lam = float(self.lam)
        eta = None
        if self.method == "fvpd":
            eta = float(chosen["eta"]) if is_grid(self.eta) and "eta" in chosen else self._eta_values(features.gamma)[0]
        return lam, eta

    def _select(self, bundle: StatsBundle, features: RandomFourierFeatures) -> tuple[Any, RandomFourierFeatures]:
        """Score the (γ, λ, η) grid on the validation parts; return all-row stats of the chosen γ."""
        grid = sorted({k[1] for k in bundle})
        rows: list[dict[str, float]] = []
        with phase("select", method=self.method, bandwidths=len(grid)) as info:
            for gamma in grid:
                feats = features.with_bandwidth(gamma)
                train, val = bundle[("train", gamma)], bundle[("val", gamma)]
                base = base_from_moments(train.moments)
                rows.extend(self._score_grid(train, val, feats, base))
            best = min(range(len(rows)), key=lambda i: (rows[i]["loss"], i))
            chosen = dict(rows[best])
            info.update(chosen={k: round(v, 6) for k, v in chosen.items()})
        g = chosen["bandwidth"]
        self.selection_ = {
            "criterion": ("posterior-expected held-out Hyvärinen loss" if self.method == "fvpd"
                          else "held-out Hyvärinen loss (data level)"),
            "validation_fraction": float(self.validation_fraction),
            "split_key": getattr(self, "split_key_", "global row position"),
            "n_train": int(bundle[("train", g)].n),
            "n_validation": int(bundle[("val", g)].n),
            "curve": rows,
            "chosen": chosen,
        }
        return bundle[("train", g)] + bundle[("val", g)], features.with_bandwidth(g)

    def _score_grid(self, train: Any, val: Any, feats: RandomFourierFeatures, base: Base) -> list[dict[str, float]]:
        lams, g2 = self._lam_values(), feats.gamma**2
        out = []
        if self.method == "map":
            points = base_draws(base, int(self.map_draws), self._seeds()[2])
            for lam in lams:
                theta, _, _ = solve_map(train.psi, train.n, feats, points, lam, max_iter=int(self.map_max_iter))
                out.append({"bandwidth": feats.gamma, "lam": lam, "loss": heldout_loss(val, feats, base, theta)})
            return out
        if self.method == "ncfd":
            A0, b = ncfd_system(train, feats, base, 0.0)
            scorer = GridScorer(A0, b, val.fd, feats, base)
            return [{"bandwidth": feats.gamma, "lam": lam, "loss": scorer.loss(lam * train.n_levels)} for lam in lams]
        A0, b = fd_system(train, feats, base, 0.0)
        scorer = GridScorer(A0, b, val, feats, base)
        if self.method == "fd":
            return [{"bandwidth": feats.gamma, "lam": lam, "loss": scorer.loss(lam * g2)} for lam in lams]
        for eta in self._eta_values(feats.gamma):
            for lam in lams:
                out.append({"bandwidth": feats.gamma, "lam": lam, "eta": eta,
                            "loss": scorer.expected_loss(lam * g2 * eta, eta)})
        return out

    # -- solutions ----------------------------------------------------------------------
    def _set_solution(self, stats: Any, features: RandomFourierFeatures, base: Base, lam: float,
                      eta: float | None) -> None:
        self.features_ = features
        self.stats_ = stats
        self.n_samples_seen_ = int(stats.n)
        self.n_features_in_ = features.n_dims
        self.bandwidth_ = features.gamma
        self.lam_ = lam
        bb = int(self.block_bytes)
        if self.method == "fd":
            if self.base == "learn":
                self.theta_, base, self.solver_info_ = learn_base(stats, features, base, lam)
                self.objective_ = float(self.solver_info_["history"][-1])
            else:
                self.theta_, self.objective_, self.solver_info_ = solve_fd(stats, features, base, lam)
            self._evaluator = TGPEvaluator(features, base, theta=self.theta_, block_bytes=bb)
        elif self.method == "ncfd":
            self.theta_, self.objective_, self.solver_info_ = solve_ncfd(stats, features, base, lam)
            self._evaluator = TGPEvaluator(features, base, theta=self.theta_, block_bytes=bb)
        elif self.method == "map":
            points = base_draws(base, int(self.map_draws), self._seeds()[2])
            self.theta_, self.objective_, self.solver_info_ = solve_map(
                stats.psi, stats.n, features, points, lam, max_iter=int(self.map_max_iter), block_bytes=bb)
            if not self.solver_info_["converged"]:
                logger.warning("MAP did not converge in %d Newton iterations (decrement %.3g)",
                               self.map_max_iter, self.solver_info_["decrement"])
            self._evaluator = TGPEvaluator(features, base, theta=self.theta_, block_bytes=bb)
        elif self.method == "kde_rff":
            self.solver_info_ = {"method": "none"}
            self._evaluator = TGPEvaluator(features, base, kde_weights=stats.psi / stats.n, block_bytes=bb)
        else:
            self.eta_ = eta
            info: dict[str, Any] = {}
            if self.base == "learn":  # μ̂ = θ_FD at λη: learn the base on that objective
                _, base, info = learn_base(stats, features, base, lam * eta)
            sol = solve_fvpd(stats, features, base, lam, eta)
            self.posterior_mean_ = sol.posterior_mean
            self.posterior_precision_ = sol.posterior_precision
            self.predictive_m_ = sol.m
            self.predictive_chol_ = sol.M_chol
            self.predictive_v_ = sol.v
            self.solver_info_ = dict(info, **sol.info)
            self._evaluator = TGPEvaluator(features, base, M_chol=sol.M_chol, v=sol.v, block_bytes=bb)
        self.mean_ = base.mean
        self.covariance_ = base.cov
        self.precision_ = base.precision

    # -- evaluation -------------------------------------------------------------------
    def _evaluator_at(self, sigma: float | None) -> TGPEvaluator:
        check_is_fitted(self, "stats_")
        if sigma is None or sigma == 0:
            return self._evaluator
        if self.method != "ncfd":
            raise ValueError(f"sigma is defined for the noise-conditional model (method='ncfd'), not {self.method!r}")
        if not (isinstance(sigma, numbers.Real) and math.isfinite(sigma) and sigma > 0):
            raise ValueError(f"sigma must be a number >= 0; got {sigma!r}")
        ev = self._evaluator
        feats = ev.features.with_bandwidth(level_bandwidth(ev.features.gamma, float(sigma)))
        return TGPEvaluator(feats, level_base(ev.base, float(sigma)), theta=ev.theta, block_bytes=ev.block_bytes)

    def _evaluate(self, X: Any, which: str, sigma: float | None = None) -> Any:
        return self._map_rows(X, getattr(self._evaluator_at(sigma), which), per_row_dims=which == "grad_log_density")

    def log_density(self, X: Any, sigma: float | None = None) -> Any:
        """Unnormalised log density, shape (n,); lazy for dask/Parquet/Zarr input.

        ``sigma`` (NCFD only): the noise-conditional density at level σ ≥ 0 (MATH.md §3);
        σ = 0 (the default) is the data-level density.
        """
        return self._evaluate(X, "log_density", sigma)

    def score_samples(self, X: Any) -> Any:
        """scikit-learn's name for :meth:`log_density`."""
        return self.log_density(X)

    def score(self, X: Any, y: Any = None) -> float:
        """Sum of the unnormalised log density over the rows of X."""
        return float(np.sum(self.log_density(X)))

    def grad_log_density(self, X: Any, sigma: float | None = None) -> Any:
        """The score function ∇ log q(x), shape (n, d) (MATH.md §2–§4); ``sigma`` as in :meth:`log_density`."""
        return self._evaluate(X, "grad_log_density", sigma)

    def hyvarinen_terms(self, X: Any, sigma: float | None = None) -> Any:
        """½‖s(x)‖² + div s(x) per row, with the closed-form divergence (MATH.md §10); its mean
        over held-out rows is the Hyvärinen score-matching loss (``tgpflow.metrics.hyvarinen_loss``)."""
        return self._evaluate(X, "hyvarinen_terms", sigma)

    def sample(self, n_samples: int = 1, random_state: int | None = None, *, n_proposals: int | None = None,
               sigma: float | None = None) -> np.ndarray:
        """Draw rows by importance resampling from the base N(μ, Σ) (MATH.md §5).

        ``n_proposals`` defaults to max(20·n_samples, 10 000); the effective sample size of
        the weights is kept in ``last_sample_ess_``. ``sigma``: NCFD level to sample from.
        """
        ev = self._evaluator_at(sigma)
        seed = self.random_state if random_state is None else random_state
        rng = np.random.default_rng(seed)
        n_prop = n_proposals if n_proposals is not None else max(20 * int(n_samples), 10_000)
        rows, ess = importance_resample(ev.log_density, ev.base.mean, ev.base.cov, int(n_samples), int(n_prop), rng)
        self.last_sample_ess_ = ess
        return rows

    # -- persistence ------------------------------------------------------------------
    _FITTED = {"fd": ["theta_"], "ncfd": ["theta_", "noise_levels_"], "map": ["theta_"], "kde_rff": [],
               "fvpd": ["posterior_mean_", "posterior_precision_", "predictive_m_", "predictive_chol_",
                        "predictive_v_"]}

    def save(self, path: str | Path) -> Path:
        """Write the fitted model atomically as a Zarr group (schema version, checksums)."""
        check_is_fitted(self, "stats_")
        arrays = {f"features.{k}": v for k, v in self.features_.to_arrays().items()}
        arrays.update({f"stats.{k}": v for k, v in self.stats_.to_arrays().items()})
        names = ["mean_", "covariance_", "precision_"] + self._FITTED[self.method]
        arrays.update({f"fitted.{n}": getattr(self, n) for n in names})
        params = self.get_params()
        for key in ("bandwidth", "eta", "lam_grid"):  # JSON has no tuples/arrays
            if is_grid(params[key]):
                params[key] = [float(v) for v in params[key]]
        meta = {
            "params": params,
            "fingerprint": self.features_.fingerprint,
            "feature_seed": self.features_.seed,
            "stats_kind": type(self.stats_).__name__,
            "feature_names_in": [str(c) for c in getattr(self, "feature_names_in_", [])] or None,
            "n_samples_seen": self.n_samples_seen_,
            "n_rows_dropped": int(getattr(self, "n_rows_dropped_", 0)),
            "objective": getattr(self, "objective_", None),
            "eta": getattr(self, "eta_", None),
            "lam": None if self.method == "kde_rff" else self.lam_,
            "anomaly_threshold": getattr(self, "anomaly_threshold_", None),
            "selection": getattr(self, "selection_", None),
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
        kind = {"TGPStats": TGPStats, "NCFDStats": NCFDStats}.get(meta.get("stats_kind", "TGPStats"))
        if kind is None:
            raise ModelFileError(f"{path}: unknown statistics kind {meta.get('stats_kind')!r}")
        stats = kind.from_arrays(meta["fingerprint"], {k.split(".", 1)[1]: v for k, v in arrays.items()
                                                        if k.startswith("stats.")})
        if meta.get("feature_names_in"):
            est.feature_names_in_ = np.asarray(meta["feature_names_in"], dtype=object)
        est.pilot_ = meta.get("pilot", {})
        est.n_rows_dropped_ = meta.get("n_rows_dropped", 0)
        if meta.get("anomaly_threshold") is not None:
            est.anomaly_threshold_ = float(meta["anomaly_threshold"])
        if meta.get("selection"):
            est.selection_ = meta["selection"]
        stored = {k.split(".", 1)[1]: v for k, v in arrays.items() if k.startswith("fitted.")}
        if est.method == "map":
            # The Newton iteration is not re-run on load (it costs S₂·S² per step): the stored θ,
            # guarded by its checksum, is used with the re-derived base.
            base = base_from_moments(stats.moments)
            est._restore_map(stats, features, base, stored["theta_"], meta)
        else:
            est.fit_from_stats(stats, features)
        for name, value in stored.items():  # the re-solve must reproduce what was saved
            if not np.allclose(getattr(est, name), value, rtol=1e-8, atol=1e-12):
                raise ModelFileError(f"{path}: the stored {name} does not match the solve of the stored statistics")
        return est

    def _restore_map(self, stats: TGPStats, features: RandomFourierFeatures, base: Base, theta: np.ndarray,
                     meta: dict[str, Any]) -> None:
        self.features_, self.stats_, self.n_samples_seen_ = features, stats, int(stats.n)
        self.n_features_in_, self.bandwidth_ = features.n_dims, features.gamma
        self.lam_ = float(meta["lam"])
        self.theta_ = np.array(theta)
        self.objective_ = meta.get("objective")
        self.solver_info_ = meta.get("solver_info", {})
        self.mean_, self.covariance_, self.precision_ = base.mean, base.cov, base.precision
        self._evaluator = TGPEvaluator(features, base, theta=self.theta_, block_bytes=int(self.block_bytes))


def _version() -> str:
    from tgpflow import __version__

    return __version__
