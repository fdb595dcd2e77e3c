"""A new model family in one file (issue 41): what the estimator protocol asks of a family, shown by the smallest
useful one — independent Gaussians, one per column, with their variances shrunk by λ towards 1:
``log p(x) = Σ_j log N(x_j | μ_j, v_j)``, ``μ_j = Σ_i x_ij / N``, ``v_j = (Σ_i (x_ij − μ_j)² + λ) / (N + λ)``.

Its statistics are sums over rows (N, Σ(x − c), Σ(x − c)², centred at the pilot mean c: the draw a pipeline's
store freezes), so it streams, merges and refits like the library's families. What it implements is the whole
protocol: the estimator's public pieces (``accumulate``, ``fit``, ``fit_from_stats``; ``prepare`` and the
evaluations over rows are the base's, :class:`~tgpflow.models.evaluation.DensityEvaluation`'s) and the abstract
hooks of :class:`~tgpflow.models.streaming.StreamingMixin` (``_draw_from_pilot``, ``_pass_spec``,
``_frozen_draw``, ``_restore_draw``, ``_from_artifact``) and :class:`~tgpflow.models.estimator_base.StatsEstimator`
(``_solve_stats``, ``_lam_grid``, ``_selector``); the state a fit starts without (``_FIT_STATE``); a statistics
class; a Fitted value; a parameter table; a summary; and :data:`TOY_KIND`, the registry line (registered by the
tests that use it, so that no other test sees it).
"""

from __future__ import annotations

import dataclasses
import hashlib
from pathlib import Path
from typing import Any, ClassVar, Self

import numpy as np

from tgpflow.core.gaussian_base import Base
from tgpflow.core.summable import AdditiveStats
from tgpflow.io.pilot import pilot_sample
from tgpflow.models.anomaly import AnomalyMixin
from tgpflow.models.estimator_base import StatsEstimator, entry
from tgpflow.models.evaluation import DensityEvaluation
from tgpflow.models.fitted import Fitted, prefixed
from tgpflow.models.model_file import fitted_arrays, read_fitted, stored_stats
from tgpflow.models.param_types import Fraction, NonNegativeNumber, OnBadRows, PositiveInt, Seed, param
from tgpflow.models.params import ParamTable
from tgpflow.models.registry import ModelKind
from tgpflow.models.streaming import StreamingMixin
from tgpflow.stats.support import SupportBox

MODULE = "tests.toy_family"


@dataclasses.dataclass(frozen=True, eq=False)
class ColumnCentre:
    """The draw: the pilot mean the sums are centred at (float64 sums of squares lose nothing far from 0)."""

    centre: np.ndarray

    @property
    def fingerprint(self) -> str:
        return hashlib.sha256(np.ascontiguousarray(self.centre, dtype=np.float64).tobytes()).hexdigest()

    @property
    def n_dims(self) -> int:
        return int(self.centre.shape[0])

    def to_arrays(self) -> dict[str, np.ndarray]:
        return {"centre": self.centre}


@dataclasses.dataclass(frozen=True, eq=False)
class ColumnStats(AdditiveStats):
    """N, Σ(x − c) and Σ(x − c)² per column for the centre c (``draw``)."""

    draw: ColumnCentre | None
    n: int | float
    s1: np.ndarray
    s2: np.ndarray
    fingerprint: str = dataclasses.field(default="", kw_only=True)

    @classmethod
    def _draw_from_arrays(cls, arrays: dict[str, np.ndarray], meta: Any) -> ColumnCentre:
        return ColumnCentre(np.asarray(arrays["centre"], dtype=np.float64))


def column_chunk_stats(x: np.ndarray, draw: ColumnCentre) -> ColumnStats:
    """The sums of one chunk (float64)."""
    r = np.asarray(x, dtype=np.float64) - draw.centre
    return ColumnStats(draw, int(r.shape[0]), r.sum(axis=0), (r * r).sum(axis=0))


@dataclasses.dataclass(frozen=True, eq=False)
class ColumnGaussianFitted(Fitted):
    """The fitted product of Gaussians; its base is itself, so importance resampling from it is exact."""

    kind: ClassVar[str] = "column_gaussian"
    centre: ColumnCentre
    mean: np.ndarray
    var: np.ndarray

    @property
    def draw(self) -> ColumnCentre:
        return self.centre

    @property
    def base(self) -> Base:
        return Base(self.mean, np.diag(self.var), np.diag(1.0 / self.var))

    def log_density(self, x: np.ndarray) -> np.ndarray:
        """Normalised: the exact log density."""
        z = (x - self.mean) ** 2 / self.var
        return -0.5 * (z + np.log(2 * np.pi * self.var)).sum(axis=1)

    def grad_log_density(self, x: np.ndarray) -> np.ndarray:
        return -(x - self.mean) / self.var

    def hyvarinen_terms(self, x: np.ndarray) -> np.ndarray:
        s = self.grad_log_density(x)
        return 0.5 * (s * s).sum(axis=1) - (1.0 / self.var).sum()

    def to_arrays(self) -> dict[str, np.ndarray]:
        return {"features.centre": self.centre.centre, "mean": self.mean, "var": self.var}

    def to_meta(self) -> dict[str, Any]:
        return {"kind": self.kind}

    @classmethod
    def from_arrays(cls, arrays: dict[str, np.ndarray], meta: dict[str, Any]) -> ColumnGaussianFitted:
        centre = ColumnCentre(np.asarray(prefixed(arrays, "features.")["centre"], dtype=np.float64))
        return cls(centre, np.asarray(arrays["mean"], dtype=np.float64), np.asarray(arrays["var"], dtype=np.float64))


class ColumnGaussianParams(ParamTable):
    """The toy's parameter table (the types of :mod:`tgpflow.models.param_types`)."""

    estimator: ClassVar[str] = "ColumnGaussianDensity"
    solve_only: ClassVar[frozenset[str]] = frozenset({"lam"})

    lam: NonNegativeNumber = param(1.0, "Shrinkage of each variance towards 1, in rows.")
    pilot_rows: PositiveInt = param(2000, "Rows of the pilot sample (the centre).")
    on_bad_rows: OnBadRows = param("raise", "Rows with missing or non-finite values.")
    split_every: PositiveInt = param(8, "Fan-in of the reduction tree.")
    random_state: Seed = param(0, "Seed of the pilot sample.")
    threshold_quantile: Fraction = param(0.01, "Share of training rows flagged by is_anomaly.")


class ColumnGaussianDensity(AnomalyMixin, DensityEvaluation, StreamingMixin, StatsEstimator):
    """Independent Gaussians per column (see the module docstring)."""

    params_table = ColumnGaussianParams
    _DRAW = "centre_"
    _FIT_STATE = ("centre_", "stats_", "_fitted", "support_")
    _NO_DRAW = "fit_from_stats needs the centre the statistics were summed at: pass it"

    def __init__(self, *, lam: float = 1.0, pilot_rows: int = 2000, on_bad_rows: str = "raise", split_every: int = 8,
                 random_state: int | None = 0, threshold_quantile: float = 0.01):
        self.lam = lam
        self.pilot_rows = pilot_rows
        self.on_bad_rows = on_bad_rows
        self.split_every = split_every
        self.random_state = random_state
        self.threshold_quantile = threshold_quantile

    # -- the public pieces --------------------------------------------------------------
    @entry
    def accumulate(self, X: Any, *, columns: list[str] | None = None, progress: Any = None) -> ColumnStats:
        if not hasattr(self, "centre_"):
            self.prepare(X, columns=columns, progress=progress)
        source = self._source(X, columns, reset=False)
        self._check_width(source)
        return self._stream_pass(self.fitting_source(source), column_chunk_stats, self.centre_, (), None,
                                 progress=progress)

    @entry
    def fit(self, X: Any, y: Any = None, *, columns: list[str] | None = None, progress: Any = None) -> Self:
        self._forget(*self._FIT_STATE)
        self.fit_from_stats(self.accumulate(X, columns=columns, progress=progress))
        self.n_rows_dropped_ = self.last_rows_dropped_
        source = self._source(X, columns, reset=False)
        self._set_threshold(pilot_sample(source, rows=self.pilot_rows, random_state=self.random_state).rows)
        return self

    @entry
    def fit_from_stats(self, stats: ColumnStats, centre: ColumnCentre | None = None) -> Self:
        self._solve_stats(stats, centre)
        return self

    def sample(self, n_samples: int = 1, random_state: int | None = None) -> np.ndarray:
        return self.fitted().sample(int(n_samples), self.random_state if random_state is None else random_state)

    # -- the hooks ----------------------------------------------------------------------
    def _draw_from_pilot(self, fitting: Any, pilot: Any, progress: Any) -> None:
        rows = pilot.get().rows
        self.centre_ = ColumnCentre(rows.mean(axis=0))
        self.support_ = SupportBox.from_rows(rows if self.scaling_ is None else self.scaling_.inverse(rows))

    def _pass_spec(self) -> tuple[Any, tuple[Any, ...], bool]:
        return column_chunk_stats, (self.centre_,), False

    def _frozen_draw(self) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        return {"centre": self.centre_.centre}, {"type": "column_centre", "fingerprint": self.centre_.fingerprint}

    def _restore_draw(self, arrays: dict[str, np.ndarray], meta: dict[str, Any], columns: list[str] | None) -> None:
        self.centre_ = ColumnCentre(np.asarray(arrays["centre"], dtype=np.float64))

    def _solve_stats(self, stats: ColumnStats, draw: Any) -> None:
        centre = self._solve_draw(stats, draw)
        stats.check_draw(centre)
        n, lam = float(stats.n), float(self.lam)
        shift = stats.s1 / n
        var = (stats.s2 - n * shift * shift + lam) / (n + lam)
        self.centre_, self.stats_, self.n_samples_seen_ = centre, stats, int(stats.n)
        self.lam_, self.solver_info_ = lam, {"method": "closed form"}
        self._set_fitted(ColumnGaussianFitted(centre, centre.centre + shift, var))

    def _set_fitted(self, fitted: ColumnGaussianFitted) -> None:
        self._fitted = fitted
        self.centre_, self.mean_, self.var_ = fitted.centre, fitted.mean, fitted.var
        self.n_features_in_ = int(fitted.mean.shape[0])

    def _lam_grid(self) -> list[float]:
        return [float(self.lam)]

    def _selector(self) -> Any:
        raise NotImplementedError("ColumnGaussianDensity selects nothing on held-out rows")

    def _model_meta(self) -> dict[str, Any]:
        return {"fingerprint": self.centre_.fingerprint, "lam": self.lam_, "solver_info": self.solver_info_}

    @classmethod
    def _from_artifact(cls, arrays: dict[str, np.ndarray], meta: dict[str, Any], path: Path,
                       verify: bool = False) -> ColumnGaussianDensity:
        est = cls(**meta["params"])
        est._restore_common(meta)
        est._set_fitted(read_fitted(ColumnGaussianFitted, fitted_arrays(arrays, {}), meta, path, {}))
        stats = stored_stats(arrays, meta, {"ColumnStats": ColumnStats})
        est.stats_ = None if stats is None else stats.with_draw(est.centre_)
        est.lam_, est.solver_info_ = float(meta["lam"]), meta["solver_info"]
        if verify:
            est._verify(path, arrays, legacy=False)
        return est


def column_summary(est: ColumnGaussianDensity) -> dict[str, Any]:
    """What ``tgpflow fit`` prints of a fitted toy model."""
    return {"rows": est.n_samples_seen_, "rows_dropped": est.n_rows_dropped_, "lam": est.lam_,
            "mean": [float(m) for m in est.mean_], "var": [float(v) for v in est.var_]}


#: The registry line (``tgpflow fit --model column_gaussian``; pipelines name it ``ColumnGaussianDensity``).
TOY_KIND = ModelKind("ColumnGaussianDensity", MODULE, cli=(("column_gaussian", ()),),
                     stats=(f"{MODULE}:ColumnStats",), table=f"{MODULE}:ColumnGaussianParams",
                     summary=f"{MODULE}:column_summary", work=None)
