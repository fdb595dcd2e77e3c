"""``RootSobolevDensity``: the root-Sobolev density on SDO random features, ``f = wᵀφ``, ``p ∝ f²``, and its
KDE-SDO baseline ``p ∝ f`` (docs/root_sobolev.md).

The estimator reads its ``method`` through a method object (:mod:`tgpflow.models.sobolev_methods`): whether
the fit has additive statistics (KDE-SDO: ``accumulate``, ``fit_from_stats``, an exact ``partial_fit``, a
pipeline's store) or iterates over the rows (RSR: :mod:`tgpflow.models.rsr_iteration`, one map-reduce per
iteration, the smoothness chosen by the exact held-out Hyvärinen loss; ``partial_fit`` an online update). The
input is whitened by the bulk of the pilot rows (``whiten``: docs/root_sobolev.md, "Input whitening").
Anomaly scores: ``−log p`` with a threshold at the ``threshold_quantile`` of the training rows
(:class:`~tgpflow.models.anomaly.AnomalyMixin`).
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
from tgpflow.io.pilot import DEFAULT_PILOT_ROWS, LazyPilot, PilotSample
from tgpflow.io.sources import Source
from tgpflow.models.anomaly import AnomalyMixin
from tgpflow.models.estimator_base import Estimator, entry
from tgpflow.models.evaluation import DensityEvaluation
from tgpflow.models.model_file import fitted_arrays, read_fitted, stored_stats, verify_solution
from tgpflow.models.params import RootSobolevParams
from tgpflow.models.rsr_fitted import RSRFitted
from tgpflow.models.rsr_iteration import IterationSettings, batch_fit, online_update, select_smoothness
from tgpflow.models.rsr_rows import IterationRows
from tgpflow.models.sobolev_methods import SobolevMethod, sobolev_method
from tgpflow.models.streaming import StreamingMixin, check_stats_kept, is_grid
from tgpflow.stats.kde_sdo import KDESDOStats, kde_sdo_chunk_stats

__all__ = ["RootSobolevDensity"]

logger = logging.getLogger("tgpflow")

#: What ``fit_from_stats`` on a fresh estimator asks for when the statistics do not carry their features.
NO_KDE_DRAW = ("fit_from_stats needs the features the statistics were computed with, and these statistics do not "
               "carry them (read from a file written before statistics carried their draw): pass features=… (est.draw_ "
               "of the model that accumulated them, or its features_ at the smoothness)")


class RootSobolevDensity(AnomalyMixin, DensityEvaluation, StreamingMixin, Estimator):
    """Root-Sobolev density with SDO random features (docs/root_sobolev.md); see the module docstring.

    ``log_density`` is log f(x)² (unnormalised; −inf where f = 0), or the log of the KDE-SDO estimate;
    ``grad_log_density`` is 2∇f/f.

    Fitted attributes: ``draw_`` (the :class:`~tgpflow.features.sdo.SDODraw`, set by ``fit``/``prepare``),
    ``features_`` (the draw at ``smoothness_``), ``coef_`` (w), ``order_``, ``whitening_``, ``fit_info_``,
    ``n_samples_seen_``, ``anomaly_threshold_``, ``stats_`` (KDE-SDO: its statistics; RSR: None).

    The parameters below are read off its table, :class:`~tgpflow.models.params.RootSobolevParams`, which checks
    them.
    """

    NO_NORMALIZER = "a root-Sobolev density has no normaliser estimate: its log density is unnormalised"
    _DRAW = "draw_"
    _FIT_STATE = ("draw_", "features_", "stats_", "selection_", "smoothness_", "_fitted", "support_")

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

    @property
    def _method(self) -> SobolevMethod:
        """The method object of ``method`` (:mod:`tgpflow.models.sobolev_methods`)."""
        return sobolev_method(self.method)

    def _grid(self) -> list[float]:
        return [float(a) for a in (self.smoothness if is_grid(self.smoothness) else [self.smoothness])]

    # -- the draw -------------------------------------------------------------------------
    def _draw_from_pilot(self, fitting: Source, pilot: LazyPilot, progress: Progress | None) -> None:
        """:meth:`prepare`'s draw: whitened by the pilot sample, the features for every smoothness (``draw_``). A
        pipeline accumulates KDE-SDO's statistics on it or, for RSR, refits on all its partitions with it
        (``fit(…, features=draw_)``)."""
        self._adopt_draw(self._draw(self._pilot(pilot).rows), fitting.n_columns, fitting.description)

    @staticmethod
    def _pilot(pilot: LazyPilot) -> PilotSample:
        """The pilot rows, read now, refused when too few to whiten by."""
        with phase("pilot", chunks=pilot.source.n_chunks) as info:
            sample = pilot.get()
            info.update(rows=sample.rows.shape[0])
        check_pilot_rows(sample, pilot.source.description, 2, "the root-Sobolev density")
        return sample

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

    def _frozen_draw(self) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        """The draw for every smoothness (:meth:`~tgpflow.models.streaming.StreamingMixin.plan`)."""
        draw = self.draw_
        return dict(draw.to_arrays()), {"type": "sdo", "seed": draw.seed, "fingerprint": draw.fingerprint}

    def _restore_draw(self, arrays: dict[str, np.ndarray], meta: dict[str, Any], columns: list[str] | None) -> None:
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
        self._forget(*self._FIT_STATE)
        source, lazy = self._new_fitting_source(self._source(X, columns, reset=True), scaling, progress)
        pilot = self._pilot(lazy)  # also the rows the anomaly threshold is learned on
        self._adopt_draw(features if features is not None else self._draw(pilot.rows), source.n_columns,
                         source.description)
        grid = self._grid()
        if self._method.additive:
            self.smoothness_ = grid[0]
            self.fit_from_stats(self._accumulate_source(source, self.draw_.at(grid[0]), progress))
        else:
            settings = IterationSettings.of(self)
            if len(grid) > 1:
                self.smoothness_, self.selection_ = select_smoothness(
                    source, self.draw_, grid, settings, order=self.order_, rank=int(self.whitening_["rank"]),
                    a_rule=self.a_rule, validation_fraction=float(self.validation_fraction), progress=progress)
            else:
                self.smoothness_ = grid[0]
            features_a = self.draw_.at(self.smoothness_)
            rows = IterationRows(source, settings.persist_bytes, progress=progress)
            logger.info("RSR rows are %s", rows.where)
            self.rows_held_ = rows.where
            coef, self.fit_info_ = batch_fit(rows, features_a, settings)
            self._set_fitted(RSRFitted(features_a, coef, self.method, settings.block_bytes))
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
        self._method.require_statistics()
        known = hasattr(self, "features_") or hasattr(self, "draw_")
        source, pilot = self._fitting_source_of(X, columns, None, known, progress)
        if features is not None or not known:
            draw = features if features is not None else self._draw(self._pilot(pilot).rows)
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
        self._method.require_statistics()
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
        with phase("solve", method=self.method, n_features=feats.n_features):
            self._set_fitted(RSRFitted(feats, stats.g / stats.n, self.method, int(self.block_bytes)))
        self.stats_ = stats
        self.n_samples_seen_ = int(stats.n)
        self.fit_info_ = {"n": stats.n, "iterations": 0, "method": self.method}
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
        if self._method.additive:
            check_stats_kept(self)
            return self.fit_from_stats(self.stats_ + self.accumulate(X, columns=columns, progress=progress))
        source = self._source(X, columns, reset=False)
        self._check_width(source)
        settings = IterationSettings.of(self)
        rows = IterationRows(self.fitting_source(source), settings.persist_bytes, progress=progress)
        features, n_old = self.features_, self.n_samples_seen_
        w, info = online_update(rows, features, self.coef_, n_old, settings)
        self._set_fitted(RSRFitted(features, w, self.method, settings.block_bytes))
        self.n_samples_seen_ = int(n_old + info["rows"])
        self.fit_info_ = {**info, "n": self.n_samples_seen_,
                          "partial_fits": int(self.fit_info_.get("partial_fits", 0)) + 1}
        return self

    def _pass_spec(self) -> tuple[Any, tuple[Any, ...], bool]:
        """(chunk statistics function, its arguments after the rows, whether it takes row keys): a pipeline's
        pass of KDE-SDO statistics (:meth:`chunk_tasks`). RSR has no statistics to accumulate."""
        self._method.require_statistics()
        return kde_sdo_chunk_stats, (self._kde_features(), int(self.block_bytes)), False

    # -- evaluation -------------------------------------------------------------------------
    def hyvarinen_terms(self, X: Any, sigma: float | None = None) -> Any:
        """½‖s‖² + div s = 2Δf/f per row: exact for p = f² (the Laplacian of log f² needs no density's normaliser);
        KDE-SDO's estimate is not a square and has no such form."""
        if not self._method.exact_hyvarinen:
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
        if verify and not est._method.additive:
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
