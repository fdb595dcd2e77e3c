"""What every tgpflow estimator shares: reading any source, and evaluating lazily over it.

``StreamingMixin`` gives an estimator ``_source`` (in-memory arrays through scikit-learn's
``validate_data``; Parquet/Zarr/dask through :func:`tgpflow.io.sources.as_source`, with
``n_features_in_``/``feature_names_in_`` set on a first fit), ``_map_rows`` (a per-row
function applied chunk by chunk: eager for in-memory input, a lazy dask array otherwise) and
``chunk_tasks`` (the delayed statistics of a source's chunks for the fitted draw: a pipeline's pass), and the
plan of a prepared estimator as a value (``plan``, :class:`~tgpflow.models.fit_plan.FitPlan`), which a fresh one
takes without reading data (``with_plan``).
"""

from __future__ import annotations

import abc
import logging
import math
import sys
from pathlib import Path
from typing import Any, ClassVar, Self

import dask
import dask.array as da
import numpy as np
from sklearn.utils.validation import validate_data

from tgpflow.core.engine import Progress, annotated, task_resources
from tgpflow.core.engine import accumulate as run_pass
from tgpflow.core.logs import phase
from tgpflow.features.scaling import Scaling
from tgpflow.io.pilot import LazyPilot, pilot_sample
from tgpflow.io.sources import Source, as_source, select_frame
from tgpflow.io.validate import check_exact_ints
from tgpflow.models.checked_entry import entry
from tgpflow.models.fit_plan import FitPlan
from tgpflow.models.param_types import plain
from tgpflow.stats.split import SPLIT_SALT, split_chunk_stats

__all__ = ["StreamingMixin", "is_lazy", "is_grid", "check_stats_kept"]

logger = logging.getLogger("tgpflow")


def is_grid(value: Any) -> bool:
    """A list of values to select from (a parameter grid), rather than one value."""
    return isinstance(value, (list, tuple, np.ndarray))


def check_stats_kept(est: Any) -> None:
    """Refuse to add rows to a model loaded without its statistics (``save(..., stats=False)``)."""
    if getattr(est, "stats_", None) is None:
        raise ValueError(f"this {type(est).__name__} keeps no statistics (saved with save(..., stats=False), or "
                         f"a full-sample fit: basis=X): partial_fit has nothing to add the new rows to; refit on all "
                         f"rows, or save with stats=True")


def is_lazy(X: Any) -> bool:
    """Whether X is read chunk by chunk (dask, Parquet/Zarr path, Source) rather than in memory."""
    if isinstance(X, (da.Array, Source, str, Path)):
        return True
    dd = sys.modules.get("dask.dataframe")  # not imported to look (1 s cold): none exists unless it was
    return dd is not None and isinstance(X, dd.DataFrame)


class StreamingMixin(abc.ABC):
    """Source handling and lazy evaluation for estimators with ``on_bad_rows``, and the protocol of a model family
    read in one pass: the abstract methods below (the public pieces :meth:`accumulate` and
    :meth:`fit_from_stats`; the hooks :meth:`_draw_from_pilot`, :meth:`_pass_spec`, :meth:`_frozen_draw`,
    :meth:`_restore_draw` and :meth:`_from_artifact`) with, for a family solved from statistics, those of
    :class:`~tgpflow.models.estimator_base.StatsEstimator`."""

    on_bad_rows: str
    pilot_rows: int
    random_state: Any
    #: The attribute holding the draw (``features_``, ``basis_``, ``draw_``): set by :meth:`prepare` or a fit.
    _DRAW: ClassVar[str]
    #: What a fit, :meth:`prepare` and :meth:`with_plan` start without: the state an earlier call left.
    _FIT_STATE: ClassVar[tuple[str, ...]]

    @entry
    def prepare(self, X: Any, *, columns: list[str] | None = None, scaling: Scaling | None = None,
                progress: Progress | None = None) -> Self:
        """Make the draw from a pilot sample of ``X`` without a pass (GPTiltedDensity's features and held-out grid, a
        kernel model's Nyström basis, a root-Sobolev density's SDO draw).

        A pipeline freezes it at its first run (:meth:`plan`), then accumulates each partition's statistics
        for it (:meth:`chunk_tasks`) and solves their sum (:meth:`fit_from_stats`), or refits a model without
        additive statistics with it. ``scaling``: a frozen standardization (a pipeline's ``preprocess``), else
        ``scale=`` decides. ``progress`` is called with the futures of each distributed compute.
        """
        self._forget(*self._FIT_STATE)
        fitting, pilot = self._new_fitting_source(self._source(X, columns, reset=True), scaling, progress)
        self._draw_from_pilot(fitting, pilot, progress)
        return self

    @abc.abstractmethod
    def _draw_from_pilot(self, fitting: Source, pilot: LazyPilot, progress: Progress | None) -> None:
        """The family's draw (and what it keeps with it) for the ``fitting`` source, from its pilot sample
        ``pilot`` (read when first asked for): what :meth:`prepare` makes."""

    def _new_fitting_source(self, source: Source, scaling: Scaling | None,
                            progress: Progress | None) -> tuple[Source, LazyPilot]:
        """A first fit's fitting space of ``source``, its standardization fixed (``scaling``, or ``scale=``:
        :meth:`_fix_scaling`), with its pilot sample, which the fit's stages share (GPTiltedDensity also fixes its
        bounds and discrete columns)."""
        self._fix_scaling(source, scaling, progress)
        fitting = self.fitting_source(source)
        return fitting, self._lazy_pilot(fitting, progress)

    def _fitting_source_of(self, X: Any, columns: list[str] | None, scaling: Scaling | None, known: bool,
                           progress: Progress | None) -> tuple[Source, LazyPilot]:
        """``X`` as a fitting source, with its pilot sample: in the fitting space of the draw the estimator has
        (``known``; the width checked against it), else in a new one (:meth:`_new_fitting_source`)."""
        source = self._source(X, columns, reset=not known)
        if not known:
            return self._new_fitting_source(source, scaling, progress)
        self._check_width(source)
        fitting = self.fitting_source(source)
        return fitting, self._lazy_pilot(fitting, progress)

    def _lazy_pilot(self, fitting: Source, progress: Progress | None) -> LazyPilot:
        """The pilot sample of a fitting source, read when a stage first needs it (seeded by ``random_state``)."""
        return LazyPilot(fitting, int(self.pilot_rows), np.random.SeedSequence(self.random_state), progress)

    @abc.abstractmethod
    def accumulate(self, X: Any, **kwargs: Any) -> Any:
        """The statistics of the rows of ``X`` for this estimator's draw (one pass)."""

    @abc.abstractmethod
    def fit_from_stats(self, stats: Any, *args: Any) -> Self:
        """The model solved from statistics (no data access)."""

    @abc.abstractmethod
    def _pass_spec(self) -> tuple[Any, tuple[Any, ...], bool]:
        """(chunk statistics function, its arguments after the rows, whether it takes each row's key) for the
        fitted or prepared draw: what :meth:`chunk_tasks` maps over a source's chunks."""

    @classmethod
    @abc.abstractmethod
    def _from_artifact(cls, arrays: dict[str, np.ndarray], meta: dict[str, Any], path: Path,
                       verify: bool = False) -> Self:
        """The model of a verified model file (:func:`tgpflow.load`), read from its stored solution without a solve;
        ``verify``: re-solve the statistics it stores and compare."""

    def _source(self, X: Any, columns: list[str] | None, reset: bool) -> Source:
        """A validated source; in-memory arrays go through sklearn's validate_data."""
        if not is_lazy(X):
            if hasattr(X, "iloc") and hasattr(X, "columns"):  # pandas: select by name, then check each column
                frame = select_frame(X, columns, "pandas DataFrame")
                validate_data(self, frame, reset=reset, skip_check_array=True)  # names and width only
                return as_source(frame, on_bad_rows=self.on_bad_rows)
            finite = self.on_bad_rows == "raise"
            if isinstance(X, np.ndarray) and X.ndim == 2:
                check_exact_ints(((str(j), x) for j, x in enumerate(X.T)), "array")
            X = validate_data(self, X, reset=reset, dtype=np.float64, ensure_all_finite=finite,
                              ensure_min_samples=1)
            return as_source(X, columns=columns, on_bad_rows=self.on_bad_rows)
        source = as_source(X, columns=columns, on_bad_rows=self.on_bad_rows)
        if reset:
            self.n_features_in_ = source.n_columns
            if source.named:
                self.feature_names_in_ = np.asarray(source.columns, dtype=object)
            elif hasattr(self, "feature_names_in_"):
                del self.feature_names_in_
        return source

    def _check_width(self, source: Source) -> None:
        """Refuse a source whose column count differs from the fitted ``n_features_in_``."""
        if source.n_columns != self.n_features_in_:
            raise ValueError(f"{source.description}: X has {source.n_columns} features, but {type(self).__name__} is "
                             f"expecting {self.n_features_in_} features as input")

    def _fix_scaling(self, source: Source, scaling: Scaling | None, progress: Progress | None = None) -> None:
        """``scaling_`` of a new fit (:mod:`tgpflow.features.scaling`): ``scaling`` when given (a pipeline's frozen
        ``preprocess``), else with ``scale=True`` the mean and standard deviation of a pilot sample of the raw
        rows (the estimator's seed), else none."""
        if scaling is not None:
            if not isinstance(scaling, Scaling):
                raise TypeError(f"scaling must be a tgpflow.features.scaling.Scaling (e.g. Scaling(center, scale), or "
                                f"est.scaling_ of a fitted model); got {type(scaling).__name__}")
            if scaling.n_dims != source.n_columns:
                raise ValueError(f"{source.description}: the scaling is for {scaling.n_dims} columns, the data have "
                                 f"{source.n_columns}")
            self.scaling_ = scaling
        elif getattr(self, "scale", False):
            with phase("scaling", chunks=source.n_chunks) as info:
                rows = pilot_sample(source, rows=int(self.pilot_rows), random_state=self.random_state,
                                    progress=progress).rows
                info.update(rows=rows.shape[0])
            if rows.shape[0] < 2:
                raise ValueError(f"{source.description}: scale=True needs at least 2 rows to standardize by; got "
                                 f"{rows.shape[0]}")
            self.scaling_ = Scaling.from_rows(rows, source.columns, where=source.description)
        else:
            self.scaling_ = None

    def _refuse_unknown_scaling(self) -> None:
        """Statistics are sums of standardized rows and do not carry the standardization: a fresh estimator with
        ``scale=True`` that was given none cannot solve them."""
        if getattr(self, "scale", False) and getattr(self, "scaling_", None) is None:
            raise ValueError("scale=True: statistics are sums of standardized rows and do not carry the "
                             "standardization; solve them with the estimator that accumulated them")

    def fitting_source(self, source: Source) -> Source:
        """``source`` in the space the model is fitted in: standardized by ``scaling_`` where there is one
        (GPTiltedDensity also transforms bounded columns)."""
        scaling = getattr(self, "scaling_", None)
        return source if scaling is None else source.map_rows(scaling.forward)

    def plan(self) -> FitPlan:
        """What :meth:`prepare` (or a fit) fixed before the pass, as a value: the parameters the statistics depend
        on, the columns, the standardization, the pilot rows' box and the draw
        (:class:`~tgpflow.models.fit_plan.FitPlan`). Statistics accumulated with one plan add up, wherever they were
        summed: ``plan.save(path)``, and ``Estimator(**plan.params).with_plan(FitPlan.load(path))`` elsewhere."""
        if not hasattr(self, self._DRAW):
            raise ValueError(f"this {type(self).__name__} has no draw to plan with: call prepare(X) or fit first (a "
                             f"model loaded from a file keeps its solution, not always its draw)")
        arrays, meta = self._frozen_draw()
        names = getattr(self, "feature_names_in_", None)
        return FitPlan(type(self).__name__, None if names is None else tuple(str(c) for c in names),
                       int(self.n_features_in_), getattr(self, "scaling_", None), arrays, meta,
                       getattr(self, "support_", None),
                       self.params_table.statistics_params(plain(self.get_params())))

    def with_plan(self, plan: FitPlan) -> Self:
        """This estimator as :meth:`prepare` left the one whose :meth:`plan` gave ``plan`` (its columns,
        standardization, draw and the pilot's box), without reading data: its :meth:`accumulate` and
        :meth:`chunk_tasks` then sum rows for that draw. Refuses a plan made for another estimator class, or with
        other values of the parameters the statistics depend on (``plan.params``)."""
        if not isinstance(plan, FitPlan):
            raise TypeError(f"with_plan takes a tgpflow.models.fit_plan.FitPlan (est.plan(), or FitPlan.load(path)); "
                            f"got {type(plan).__name__}")
        if plan.estimator != type(self).__name__:
            raise ValueError(f"this plan was made by a {plan.estimator}, not a {type(self).__name__}: its draw means "
                             f"nothing to this model")
        if plan.params is not None:
            own = self.params_table.statistics_params(plain(self.get_params()))
            differ = sorted(k for k in {*own, *plan.params} if own.get(k) != plan.params.get(k))
            if differ:
                raise ValueError(f"this plan was made with other values of {differ} ("
                                 f"{ {k: plan.params.get(k) for k in differ} }): its statistics would not add up "
                                 f"with this estimator's; make it with the plan's parameters, "
                                 f"{type(self).__name__}(**plan.params)")
        self._forget(*self._FIT_STATE)
        self.scaling_ = plan.scaling
        columns = None if plan.columns is None else list(plan.columns)
        self._restore_draw(dict(plan.draw_arrays), dict(plan.draw_meta), columns)
        self.n_features_in_ = plan.n_columns
        if plan.support is not None:  # the box a solve's diagnostics measure mass outside of
            self.support_ = plan.support
        if columns is not None:
            self.feature_names_in_ = np.asarray(columns, dtype=object)
        else:
            self.__dict__.pop("feature_names_in_", None)
        return self

    @abc.abstractmethod
    def _frozen_draw(self) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        """The draw of a prepared (or fitted) estimator as arrays and JSON metadata (with its ``fingerprint``): the
        draw of its :meth:`plan`, which :meth:`_restore_draw` puts back on a fresh estimator."""

    @abc.abstractmethod
    def _restore_draw(self, arrays: dict[str, np.ndarray], meta: dict[str, Any], columns: list[str] | None) -> None:
        """The draw of :meth:`_frozen_draw` on this fresh estimator (``scaling_`` already set; ``columns``: the
        data's names, None when unnamed)."""

    def chunk_tasks(self, source: Source) -> list[Any]:
        """One delayed statistics object per chunk of ``source`` for the fitted draw, to tree-reduce and add
        to statistics of other partitions (a pipeline's pass; call :meth:`prepare` or fit first). With a
        held-out selection pending, each is the train/validation split of its chunk."""
        fn, args, with_keys = self._pass_spec()
        task = dask.delayed(fn, pure=True)
        shared = [dask.delayed(a, pure=True) for a in args]
        source = self.fitting_source(source)
        with annotated(self._task_resources()):
            if with_keys:
                return [task(b, k, *shared) for b, k in zip(source.blocks(), source.row_keys(), strict=True)]
            return [task(b, *shared) for b in source.blocks()]

    def _task_resources(self) -> dict[str, int] | None:
        """What this estimator's chunk tasks ask of a worker: a GPU where they run on the device
        (:func:`~tgpflow.core.engine.task_resources`)."""
        return task_resources(self._device_target() is not None)

    def _stream_pass(self, source: Source, chunk_fn: Any, draw: Any, args: tuple[Any, ...],
                     variants: dict[float, Any] | None, val_args: tuple[Any, ...] | None = None,
                     grid: Any = None, progress: Progress | None = None, **facts: Any) -> Any:
        """The one pass of ``chunk_fn(rows, draw, *args)`` over ``source``.

        With ``variants`` (name → draw, e.g. one per bandwidth of a grid) the rows are split into
        train/validation by the row hash (``validation_fraction``) and the result is a
        :class:`~tgpflow.stats.split.StatsBundle` with both parts of every variant (``val_args``,
        when given, replace ``args`` for the validation rows; with a projection ``grid`` the
        validation parts also count the rows' projections). Dropped rows
        are logged and counted in ``last_rows_dropped_``; a pass that kept no row raises. ``progress`` goes
        to the engine (:func:`tgpflow.core.engine.accumulate`).
        """
        split = variants is not None
        resources = self._task_resources()
        with phase("pass", chunks=source.n_chunks, split=split, **facts) as info:
            if split:
                parts = {name: (v, *args) for name, v in variants.items()}
                val_parts = None if val_args is None else {name: (v, *val_args) for name, v in variants.items()}
                stats, dropped = run_pass(source, split_chunk_stats, float(self.validation_fraction), SPLIT_SALT,
                                          chunk_fn, parts, val_parts, grid, split_every=int(self.split_every),
                                          with_row_keys=True, progress=progress, resources=resources)
                first = next(iter(variants))
                n_rows = sum(v.n for k, v in stats.items() if k[1] == first)
            else:
                stats, dropped = run_pass(source, chunk_fn, draw, *args, split_every=int(self.split_every),
                                          progress=progress, resources=resources)
                n_rows = stats.n
            info.update(rows=n_rows, dropped=dropped)
        if dropped:
            logger.warning("%s: dropped %d rows with missing or non-finite values (or on or beyond declared bounds)",
                           source.description, dropped)
        self.last_rows_dropped_ = dropped
        if n_rows == 0:
            raise ValueError(f"{source.description}: no rows left to fit (all {dropped} rows were dropped)")
        return stats

    def _map_rows(self, X: Any, fn: Any, per_row_dims: bool) -> Any:
        """``fn`` over the rows of X: (n,) or (n, d) results; lazy for lazy X (its tasks carry no resource annotation:
        Dask's array graph drops them, so a model on the device evaluates on the CPU of a worker without one)."""
        if is_lazy(X):
            source = self._source(X, None, reset=False)
            self._check_width(source)
            ev = dask.delayed(fn, pure=True)
            parts = []
            for block, size in zip(source.blocks(), source.sizes, strict=True):
                rows = size if source.on_bad_rows == "raise" else math.nan
                shape = (rows, source.n_columns) if per_row_dims else (rows,)
                parts.append(da.from_delayed(ev(block), shape=shape, dtype=np.float64,
                                             meta=np.empty((0,) * len(shape))))
            return da.concatenate(parts) if len(parts) > 1 else parts[0]
        X = validate_data(self, X, reset=False, dtype=np.float64)
        return fn(X)
