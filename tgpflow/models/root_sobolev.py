"""``RootSobolevDensity``: the root-Sobolev density of seed 004 on SDO random features (MATH.md §8).

``f(x) = wᵀφ(x)``, ``p ∝ f²``. The fit minimises ``L(w) = −(1/N)Σ log f(x_i)² + ‖w‖²`` by the
natural-gradient iteration ``w ← (1 − 2η)w + 2η g/N``, ``g = Σ φ(x_i)/f(x_i)`` (η = ¼), from the
non-negative KDE initialisation ``w₀ ∝ Σφ(x_i)/N``. Every iteration is one map-reduce over the
rows (:mod:`tgpflow.stats.rsr`); the rows are kept in memory between iterations when they fit
``persist_bytes`` (persisted on the workers under a distributed client, computed once
otherwise) and re-streamed from the source when they do not — the log says which. The
iteration is monotone: a step that raises L, or adds rows with f ≤ 0, is rejected and retried
with half the step (it grows back to η after two accepted steps); since −log f(x_i)² is a barrier,
f keeps its sign on every training row, the cone on which L is convex. Iterations stop when an
accepted step, scaled to a full step η, lowers L by less than ``tol`` (relative); each candidate
step is one pass. The number of rows with
f ≤ 0 (the RFF SDO kernel takes negative values, so the KDE start can have some) is reported.

The smoothness a is given, or selected from a list by the held-out Hyvärinen loss in its exact
streamed form ``J = mean 2Δf/f`` (MATH.md D6; no Hutchinson probes) on rows held out by the
row-hash split: ``a_rule="min"`` (the smallest J) or ``"largest_local_min"`` (seed 004 App. L.2:
the stable local minimum at the largest a). ``method="kde_sdo"`` is the KDE-SDO baseline
``p ∝ φ(x)ᵀΣφ(x_i)/N`` from the same features. Anomaly scores: ``−log p`` with a threshold at
the ``threshold_quantile`` of the training rows (:class:`~tgpflow.models.anomaly.AnomalyMixin`).

Statistics, ``partial_fit`` and pipelines:

* ``method="kde_sdo"`` is a sum over rows: its statistics ``Σφ(x_i), N``
  (:class:`~tgpflow.stats.kde_sdo.KDESDOStats`) are additive, so ``accumulate``, ``fit_from_stats``
  and ``partial_fit`` (add the new rows' statistics, solve ``w = g/N``) are exact, and a pipeline keeps
  them in its statistics store like the other models' (incremental, window and forgetting refits).
* ``method="rsr"`` has no additive sufficient statistics: every pass's sums ``Σφ/f`` depend on the
  current w. ``accumulate`` and ``fit_from_stats`` refuse, saying so. A pipeline refit re-reads the
  partitions it has accepted and runs ``fit`` over all of them with the draw it froze on its first
  run (one pass per iteration), so each version is the batch fit of its rows, and the store keeps
  no statistics for it. ``partial_fit`` is an online update that approximates the batch fit: from the
  current w, the implicit stochastic-approximation step of :mod:`tgpflow.solve.rsr` on the new rows
  with the decaying weight ρ = N_B/n (like ``MiniBatchKMeans``' 1/count), keeping the features,
  whitening and smoothness of the first call; the anomaly threshold stays the one that call learned.

Input scale (``whiten="robust"``, the default): the SDO kernel acts on the pilot-whitened input
``u = W(x − μ)`` (:mod:`tgpflow.features.whiten`; W from the pivoted Cholesky factor of a
correlation matrix, numerically collinear and constant columns dropped), i.e. it is a kernel of
the Mahalanobis distance, and m_s and d in MATH.md §8 refer to rank(W). μ and the covariance are
those of the bulk of the pilot rows (reweighted MCD, 75% of the rows; ``"classical"``: of all
rows; ``"none"``: x as given, seed 004's setting after z-scoring). W is folded into the
frequencies (``Z ← Z W``), so the iteration, score and Laplacian are unchanged. The fit is then
invariant to per-column scale and shift, and a = 1 means a kernel scale of one standard deviation
along every principal direction of the bulk of the data. Why (benchmarks/adbench.py, seed 004's
anomaly setting): on z-scored but correlated columns the kernel sees a few high-variance
directions and ignores the low-variance ones in which many anomalies break the columns' linear
relations; and the unsupervised training rows contain the anomalies, whose share of the classical
moments stretches the scale along them.
The kernel width is ``a^{1/2m_s}``: a grid of a must be spread over many decades to move the
width at all in high d (``a = b^{2m_s}`` for a width b).
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np

from tgpflow.core.engine import Progress
from tgpflow.core.engine import accumulate as run_pass
from tgpflow.core.logs import phase
from tgpflow.core.memory import DEFAULT_BLOCK_BYTES
from tgpflow.features.rff import RandomFourierFeatures
from tgpflow.features.scaling import Scaling
from tgpflow.features.sdo import SDODraw
from tgpflow.io.degenerate import check_pilot_rows
from tgpflow.io.pilot import DEFAULT_PILOT_ROWS, PilotSample, pilot_sample
from tgpflow.io.sources import Source
from tgpflow.models.anomaly import AnomalyMixin
from tgpflow.models.estimator_base import Estimator, entry
from tgpflow.models.evaluation import DensityEvaluation
from tgpflow.models.model_file import fitted_arrays, read_fitted, stored_stats, verify_solution
from tgpflow.models.params import RootSobolevParams
from tgpflow.models.rsr_fitted import RSRFitted
from tgpflow.models.rsr_rows import IterationRows
from tgpflow.models.streaming import StreamingMixin, check_stats_kept, is_grid
from tgpflow.solve.rsr import natural_gradient_iterate
from tgpflow.stats.kde_sdo import KDESDOStats, kde_sdo_chunk_stats
from tgpflow.stats.rsr import rsr_chunk_stats

__all__ = ["RootSobolevDensity"]

logger = logging.getLogger("tgpflow")

#: Why method="rsr" has no accumulate/fit_from_stats, and what to do instead.
NO_RSR_STATS = ("RootSobolevDensity(method='rsr') has no additive sufficient statistics: every natural-gradient "
                "pass sums φ(x)/f(x) at the current w (MATH.md §8), so there is nothing to accumulate once and "
                "solve later. Refit on the rows (fit; partial_fit for an online update), or use "
                "method='kde_sdo', whose statistics Σφ(x_i), N add up")

#: What ``fit_from_stats`` on a fresh estimator asks for when the statistics do not carry their features.
NO_KDE_DRAW = ("fit_from_stats needs the features the statistics were computed with, and these statistics do not "
               "carry them (read from a file written before statistics carried their draw): pass features=… (est.draw_ "
               "of the model that accumulated them, or its features_ at the smoothness)")


class RootSobolevDensity(AnomalyMixin, DensityEvaluation, StreamingMixin, Estimator):
    """Root-Sobolev density (seed 004) with SDO random features; see the module docstring.

    Parameters
    ----------
    method : {"rsr", "kde_sdo"}
    n_features : int, T.
    smoothness : float or list of floats — a; a list is selected by the held-out Hyvärinen loss.
    order : "auto" or int — m_s > d/2 ("auto": ⌊d/2⌋ + 1; d = the whitened rank when ``whiten``).
    whiten : {"robust", "classical", "none"} — the kernel of the input whitened by the moments of the
        bulk of the pilot rows (Mahalanobis distance) or of all of them, or of x as given.
    a_rule : {"min", "largest_local_min"} — how a is picked from a list.
    max_iter, tol, step : the natural-gradient iteration (η = step < ½; at most max_iter passes).
    persist_bytes : keep the rows in memory between iterations up to this size.
    validation_fraction, threshold_quantile, pilot_rows, on_bad_rows, block_bytes, random_state, device.

    ``log_density`` is log f(x)² (unnormalised; −inf where f = 0), or the log of the KDE-SDO estimate;
    ``grad_log_density`` is 2∇f/f.

    Fitted attributes: ``draw_`` (the :class:`~tgpflow.features.sdo.SDODraw`, set by ``fit``/``prepare``),
    ``features_`` (the draw at ``smoothness_``), ``coef_`` (w), ``order_``, ``whitening_``, ``fit_info_``,
    ``n_samples_seen_``, ``anomaly_threshold_``, ``stats_`` (KDE-SDO: its statistics; RSR: None).

    The parameters' types and ranges are its table, :class:`~tgpflow.models.params.RootSobolevParams`.
    """

    NO_NORMALIZER = "a root-Sobolev density has no normaliser estimate: its log density is unnormalised"

    params_table = RootSobolevParams
    #: A model file keeps w under the estimator's attribute name (model_file).
    _FILE_NAMES = {"coef": "coef_"}

    def __init__(self, *, method: str = "rsr", n_features: int = 2000, smoothness: float | list[float] = 1.0,
                 order: str | int = "auto", whiten: str = "robust", a_rule: str = "min", max_iter: int = 200,
                 tol: float = 1e-6,
                 step: float = 0.25, persist_bytes: int = 2**30, validation_fraction: float = 0.2,
                 threshold_quantile: float = 0.01, pilot_rows: int = DEFAULT_PILOT_ROWS, on_bad_rows: str = "raise",
                 block_bytes: int = DEFAULT_BLOCK_BYTES, random_state: int | None = 0, device: str = "auto",
                 scale: bool = False):
        self.method = method
        self.n_features = n_features
        self.smoothness = smoothness
        self.order = order
        self.whiten = whiten
        self.a_rule = a_rule
        self.max_iter = max_iter
        self.tol = tol
        self.step = step
        self.persist_bytes = persist_bytes
        self.validation_fraction = validation_fraction
        self.threshold_quantile = threshold_quantile
        self.pilot_rows = pilot_rows
        self.on_bad_rows = on_bad_rows
        self.block_bytes = block_bytes
        self.random_state = random_state
        self.device = device
        self.scale = scale

    def _grid(self) -> list[float]:
        return [float(a) for a in (self.smoothness if is_grid(self.smoothness) else [self.smoothness])]

    # -- the draw -------------------------------------------------------------------------
    @entry
    def prepare(self, X: Any, *, columns: list[str] | None = None, scaling: Scaling | None = None,
                progress: Progress | None = None) -> RootSobolevDensity:
        """Whiten by a pilot sample of ``X`` and draw the features (``draw_``) without a pass: a pipeline
        freezes this draw, then accumulates each partition's KDE-SDO statistics on it (:meth:`chunk_tasks`,
        :meth:`fit_from_stats`) or, for RSR, refits on all its partitions with it (``fit(…, features=draw_)``).
        ``scaling``: a frozen standardization (a pipeline's ``preprocess``), else ``scale=`` decides."""
        source = self._source(X, columns, reset=True)
        self._fix_scaling(source, scaling, progress)
        source = self.fitting_source(source)
        self._adopt_draw(self._draw(self._pilot(source, progress).rows), source.n_columns, source.description)
        return self

    def _pilot(self, source: Source, progress: Progress | None = None) -> PilotSample:
        with phase("pilot", chunks=source.n_chunks) as info:
            pilot = pilot_sample(source, rows=self.pilot_rows, random_state=self.random_state, progress=progress)
            info.update(rows=pilot.rows.shape[0])
        check_pilot_rows(pilot, source.description, 2, "the root-Sobolev density")
        return pilot

    def _draw(self, rows: np.ndarray) -> SDODraw:
        return SDODraw.from_pilot(rows, int(self.n_features), whiten=self.whiten, order=self.order,
                                  random_state=self.random_state)

    def _adopt_draw(self, draw: SDODraw, n_columns: int, where: str) -> None:
        if not isinstance(draw, SDODraw):
            raise TypeError(f"features must be an SDODraw (est.draw_ of a fitted or prepared RootSobolevDensity); "
                            f"got {type(draw).__name__}")
        if draw.n_dims != n_columns:
            raise ValueError(f"{where}: the draw is for d={draw.n_dims} but the data have {n_columns} columns")
        self.draw_, self.order_ = draw, draw.order
        self.whitening_ = {"whiten": self.whiten, "rank": draw.rank, "columns": [int(c) for c in draw.columns]}

    def frozen_draw(self) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        """The draw for every smoothness (:meth:`~tgpflow.models.streaming.StreamingMixin.frozen_draw`)."""
        draw = self.draw_
        return dict(draw.to_arrays()), {"type": "sdo", "seed": draw.seed, "fingerprint": draw.fingerprint}

    def _restore_draw(self, arrays: dict[str, np.ndarray], meta: dict[str, Any], columns: list[str]) -> None:
        self.draw_ = SDODraw.from_arrays(arrays, seed=meta.get("seed"))

    def _kde_features(self, draw: SDODraw | RandomFourierFeatures | None = None) -> RandomFourierFeatures:
        """The KDE-SDO features: ``draw`` at the smoothness (features as they are), else the fitted
        ``features_``, else ``draw_`` at the smoothness."""
        if isinstance(draw, RandomFourierFeatures):
            return draw
        if draw is None and hasattr(self, "features_"):
            return self.features_
        draw = draw if draw is not None else getattr(self, "draw_", None)
        if draw is None:
            raise ValueError("no feature draw: fit or prepare first, or pass features=est.draw_")
        return draw.at(getattr(self, "smoothness_", self._grid()[0]))

    # -- fitting --------------------------------------------------------------------------
    @entry
    def fit(self, X: Any, y: Any = None, *, columns: list[str] | None = None,
            features: SDODraw | None = None, scaling: Scaling | None = None,
            progress: Progress | None = None) -> RootSobolevDensity:
        """Fit from any source (NumPy/pandas, dask, Parquet, Zarr). ``features``: an SDO draw to reuse
        (``est.draw_`` of an earlier fit or ``prepare``); by default one is drawn from the pilot rows.
        ``scaling``: a frozen standardization to fit in (with ``scale=True`` one is taken from the pilot; rows in
        and out stay in the data's units either way, :mod:`tgpflow.features.scaling`). ``progress`` is called
        with the futures of each distributed compute of the fit (the pilot, every pass), e.g.
        ``distributed.progress`` (:data:`tgpflow.core.engine.Progress`)."""
        self._forget("draw_", "features_", "stats_", "selection_", "smoothness_", "_fitted")
        source = self._source(X, columns, reset=True)
        self._fix_scaling(source, scaling, progress)
        source = self.fitting_source(source)
        pilot = self._pilot(source, progress)  # also the rows the anomaly threshold is learned on
        self._adopt_draw(features if features is not None else self._draw(pilot.rows), source.n_columns,
                         source.description)
        grid = self._grid()
        if self.method == "kde_sdo":
            self.smoothness_ = grid[0]
            self.fit_from_stats(self._accumulate_source(source, self.draw_.at(grid[0]), progress))
        else:
            if len(grid) > 1:
                self.smoothness_, self.selection_ = self._select(source, self.draw_, grid, progress)
            else:
                self.smoothness_ = grid[0]
            features_a = self.draw_.at(self.smoothness_)
            rows = IterationRows(source, int(self.persist_bytes), progress=progress)
            logger.info("RSR rows are %s", rows.where)
            self.rows_held_ = rows.where
            coef, self.fit_info_ = self._iterate(rows, features_a)
            self._set_fitted(RSRFitted(features_a, coef, self.method, int(self.block_bytes)))
            self.stats_ = None
            self.n_samples_seen_ = int(self.fit_info_["n"])
        scaling = getattr(self, "scaling_", None)  # the threshold is learned on rows in the data's units
        self._set_threshold(pilot.rows if scaling is None else scaling.inverse(pilot.rows))
        return self

    @entry
    def accumulate(self, X: Any, *, columns: list[str] | None = None, features: SDODraw | None = None,
                   progress: Progress | None = None) -> KDESDOStats:
        """KDE-SDO only: the statistics ``Σφ(x_i), N`` of the rows of ``X`` (one pass) for, in order, the draw
        ``features``, the fitted features, the prepared ``draw_``, or a new draw from a pilot sample of ``X``
        (kept as ``draw_``, so that later parts and ``fit_from_stats`` use it). RSR has none (it refuses)."""
        if self.method != "kde_sdo":
            raise ValueError(NO_RSR_STATS)
        known = hasattr(self, "features_") or hasattr(self, "draw_")
        source = self._source(X, columns, reset=not known)
        if known:
            self._check_width(source)
        else:
            self._fix_scaling(source, None, progress)
        source = self.fitting_source(source)
        if features is not None or not known:
            draw = features if features is not None else self._draw(self._pilot(source, progress).rows)
            self._adopt_draw(draw, source.n_columns, source.description)
        return self._accumulate_source(source, self._kde_features(features), progress)

    def _accumulate_source(self, source: Source, features: Any, progress: Progress | None = None) -> KDESDOStats:
        with phase("pass", chunks=source.n_chunks, n_features=features.n_features) as info:
            stats, dropped = run_pass(source, kde_sdo_chunk_stats, features, int(self.block_bytes), progress=progress)
            info.update(rows=stats.n, dropped=dropped)
        if dropped:
            logger.warning("%s: dropped %d rows with missing or non-finite values", source.description, dropped)
        self.last_rows_dropped_ = dropped
        if stats.n == 0:
            raise ValueError(f"{source.description}: no rows left to fit (all {dropped} rows were dropped)")
        return stats

    @entry
    def fit_from_stats(self, stats: KDESDOStats,
                       features: SDODraw | RandomFourierFeatures | None = None) -> RootSobolevDensity:
        """KDE-SDO only: ``w = Σφ(x_i)/N`` from statistics (no data access), for ``features`` (an SDO draw, or
        the features the statistics were accumulated with; default: the fitted or prepared draw, else — on a fresh
        estimator — the features the statistics carry). RSR refuses: it has no additive statistics (module
        docstring)."""
        if self.method != "kde_sdo":
            raise ValueError(NO_RSR_STATS)
        if not isinstance(stats, KDESDOStats):
            raise TypeError(f"method='kde_sdo' needs KDESDOStats, got {type(stats).__name__}")
        if not hasattr(self, "draw_"):
            self._refuse_unknown_scaling()
        if features is None and not hasattr(self, "features_"):
            # prepared (or restored by a pipeline), not yet fitted; else, fresh, the features the statistics carry
            features = getattr(self, "draw_", None)
            features = stats.draw if features is None else features
            if features is None:
                raise ValueError(NO_KDE_DRAW)
        feats = self._kde_features(features)
        stats.check_features(feats)
        if not stats.n > 0:
            raise ValueError("the statistics hold no rows")
        if isinstance(features, SDODraw):
            self._adopt_draw(features, features.n_dims, "fit_from_stats")
        self.smoothness_ = getattr(self, "smoothness_", self._grid()[0])
        with phase("solve", method="kde_sdo", n_features=feats.n_features):
            self._set_fitted(RSRFitted(feats, stats.g / stats.n, "kde_sdo", int(self.block_bytes)))
        self.stats_ = stats
        self.n_samples_seen_ = int(stats.n)
        self.fit_info_ = {"n": stats.n, "iterations": 0, "method": "kde_sdo"}
        return self

    @entry
    def partial_fit(self, X: Any, y: Any = None, *, columns: list[str] | None = None,
                    progress: Progress | None = None) -> RootSobolevDensity:
        """Update with new rows (fits if not yet fitted). KDE-SDO: exact (add their statistics, re-solve).
        RSR: the online update of :mod:`tgpflow.solve.rsr`, an approximation of the batch fit on all rows
        seen; the features, whitening and smoothness of the first call are kept, and so is its anomaly
        threshold."""
        if not hasattr(self, "_fitted"):
            return self.fit(X, columns=columns, progress=progress)
        if self.method == "kde_sdo":
            check_stats_kept(self)
            return self.fit_from_stats(self.stats_ + self.accumulate(X, columns=columns, progress=progress))
        source = self._source(X, columns, reset=False)
        self._check_width(source)
        rows = IterationRows(self.fitting_source(source), int(self.persist_bytes), progress=progress)
        features, n_old = self.features_, self.n_samples_seen_
        with phase("rsr-online", n_features=features.n_features, rows_before=n_old):
            w, info = natural_gradient_iterate(
                lambda v: rows.reduce(rsr_chunk_stats, features, v, int(self.block_bytes)), self.coef_,
                step=float(self.step), max_iter=int(self.max_iter), tol=float(self.tol), anchor=self.coef_,
                anchor_rows=n_old)
        n_new = info["rows"]
        if not info["converged"]:
            logger.warning("RSR partial_fit did not converge in %d iterations", self.max_iter)
        self._set_fitted(RSRFitted(features, w, self.method, int(self.block_bytes)))
        self.n_samples_seen_ = int(n_old + n_new)
        self.fit_info_ = {**info, "n": self.n_samples_seen_,
                          "partial_fits": int(self.fit_info_.get("partial_fits", 0)) + 1}
        return self

    def _pass_spec(self) -> tuple[Any, tuple[Any, ...], bool]:
        """(chunk statistics function, its arguments after the rows, whether it takes row keys): a pipeline's
        pass of KDE-SDO statistics (:meth:`chunk_tasks`). RSR has no statistics to accumulate."""
        if self.method != "kde_sdo":
            raise ValueError(NO_RSR_STATS)
        return kde_sdo_chunk_stats, (self._kde_features(), int(self.block_bytes)), False

    def _iterate(self, rows: IterationRows, features: Any) -> tuple[np.ndarray, dict[str, Any]]:
        """The batch fit: the KDE start ``w₀ ∝ Σφ(x_i)/N`` (one pass), then the natural-gradient iteration."""
        with phase("rsr-init", n_features=features.n_features):
            init = rows.reduce(kde_sdo_chunk_stats, features, int(self.block_bytes))
        w = init.g / init.n
        w, info = natural_gradient_iterate(
            lambda v: rows.reduce(rsr_chunk_stats, features, v, int(self.block_bytes)), w / np.linalg.norm(w),
            step=float(self.step), max_iter=int(self.max_iter), tol=float(self.tol))
        if not info["converged"]:
            logger.warning("RSR did not converge in %d iterations (kernel width a^(1/2m_s) = %.3g)", self.max_iter,
                           features.gamma)
        return w, {"n": init.n, **info}

    def _select(self, source: Source, draw: SDODraw, grid: list[float],
                progress: Progress | None = None) -> tuple[float, dict[str, Any]]:
        k = int(self.whitening_["rank"])
        if 2 * self.order_ <= k + 4:
            # the RFF Laplacian Σ w_t‖z_t‖²φ_t needs E‖z‖⁴ < ∞, i.e. 2m_s > d + 4; the default m_s = ⌊d/2⌋ + 1
            # has E‖z‖² = ∞ (spectral tail ‖z‖^{d−1−2m_s}), so J is dominated by the few largest frequencies
            logger.warning("held-out Hyvärinen loss with order m_s = %d <= d/2 + 2 (d = %d): its value has infinite "
                           "variance over the feature draw; use order >= %d to select a", self.order_, k, k // 2 + 3)
        fraction = float(self.validation_fraction)
        train = IterationRows(source, int(self.persist_bytes), "train", fraction, progress)
        val = IterationRows(source, int(self.persist_bytes), "val", fraction, progress)
        curve = []
        for a in sorted(grid):
            feats = draw.at(a)
            w, info = self._iterate(train, feats)
            st = val.reduce(rsr_chunk_stats, feats, w, int(self.block_bytes))
            curve.append({"a": a, "heldout_hyvarinen": st.sum_hyvarinen / st.n, "iterations": info["iterations"],
                          "converged": info["converged"]})
        # only converged fits compete; J is unbounded below for rough fits, hence seed 004's rule
        J = [c["heldout_hyvarinen"] if c["converged"] else np.inf for c in curve]
        if not np.isfinite(J).any():
            raise FloatingPointError("no smoothness in the grid converged; raise max_iter or use larger a")
        best = int(np.argmin(J))
        if self.a_rule == "largest_local_min":  # interior local minima of J over the a-grid, the largest a
            local = [i for i in range(1, len(J) - 1) if np.isfinite(J[i]) and J[i] <= J[i - 1] and J[i] <= J[i + 1]]
            best = max(local) if local else best
        return curve[best]["a"], {"curve": curve, "rule": self.a_rule, "chosen": curve[best]["a"]}

    # -- evaluation -------------------------------------------------------------------------
    def hyvarinen_terms(self, X: Any, sigma: float | None = None) -> Any:
        """½‖s‖² + div s = 2Δf/f per row: exact for p = f² (the Laplacian of log f² needs no density's normaliser);
        KDE-SDO's estimate is not a square and has no such form."""
        if self.method != "rsr":
            raise AttributeError("the exact 2Δf/f form holds for the root-Sobolev model (p = f²), not KDE-SDO")
        return super().hyvarinen_terms(X, sigma)

    def _model_meta(self) -> dict[str, Any]:
        """The draw's stamp, the chosen a and m_s, the iteration's report and the whitening (the statistics a
        file holds are KDE-SDO's; an RSR fit iterates over the rows and has none)."""
        return {"fingerprint": self.features_.fingerprint, "feature_seed": self.features_.seed,
                "smoothness": self.smoothness_, "order": getattr(self, "order_", None),
                "fit_info": {k: v for k, v in self.fit_info_.items() if k != "history"},
                "whitening": getattr(self, "whitening_", None)}

    @classmethod
    def _from_artifact(cls, arrays: dict[str, Any], meta: dict[str, Any], path: Any,
                       verify: bool = False) -> RootSobolevDensity:
        """The model of a verified artifact, read from its stored w (the fit is not repeated; ``verify``:
        KDE-SDO's w is compared with the solve of its stored statistics)."""
        from tgpflow.errors import ModelFileError

        est = cls(**meta["params"])
        if verify and est.method == "rsr":
            raise ModelFileError(f"{path}: a RootSobolevDensity is fitted by iterating over the rows, so its file holds "
                                 f"no statistics to re-solve: verify=True cannot check it (its arrays are checksummed)")
        est._set_fitted(read_fitted(RSRFitted, fitted_arrays(arrays, cls._FILE_NAMES), meta, path,
                                    {"method": est.method, "block_bytes": int(est.block_bytes),
                                     "feature_seed": meta.get("feature_seed")}))
        est._restore_common(meta)
        est.smoothness_ = float(meta["smoothness"])
        if meta.get("order") is not None:  # unknown for a model solved from statistics alone (their features)
            est.order_ = int(meta["order"])
        est.fit_info_ = dict(meta["fit_info"])
        if meta.get("whitening"):
            est.whitening_ = meta["whitening"]
        stats = stored_stats(arrays, meta, {"KDESDOStats": KDESDOStats})
        est.stats_ = stats if stats is None else stats.with_draw(est.features_)  # the file stores the draw once
        if verify:
            verify_solution(est, path, arrays, cls._FILE_NAMES,
                            lambda ref: ref.fit_from_stats(est.stats_, est.features_)._fitted)
        return est

    def _set_fitted(self, fitted: RSRFitted) -> None:
        """The estimator's attributes of a fitted model, read off its Fitted value (a fit and a load share this)."""
        self._fitted = fitted
        self.features_, self.coef_ = fitted.features, fitted.coef
        self.n_features_in_ = fitted.features.n_dims
