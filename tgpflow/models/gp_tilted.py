"""``GPTiltedDensity``: GP-tilted densities fitted in one streamed pass (docs/gp_tilted.md).

``fit(X)`` = pilot sample → feature draw → one pass of chunk statistics, tree-reduced → closed-form solve (FD,
NCFD, FVPD; MAP's Newton steps on fixed draws). The pieces are public: ``accumulate`` (data → statistics),
``fit_from_stats`` (statistics → model), ``partial_fit`` (add statistics of new rows, re-solve).

The estimator's stages live beside it, one module each: the fitting space (:mod:`tgpflow.models.tgp_space`), the
pilot stage (:mod:`tgpflow.models.tgp_pilot`), the solve (:mod:`tgpflow.models.tgp_solve`), the evaluation
(:mod:`tgpflow.models.tgp_evaluation`) and the model file (:mod:`tgpflow.models.tgp_persistence`); this module holds
its parameters and the pass that joins them.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

import numpy as np

from tgpflow.core.backend import on_device
from tgpflow.core.engine import Progress
from tgpflow.core.logs import logger
from tgpflow.core.memory import DEFAULT_BLOCK_BYTES, declare_wrapper
from tgpflow.features.bounds import BoundsSpec
from tgpflow.features.code_calibration import count_codes
from tgpflow.features.edges import suggest_bounds
from tgpflow.features.rff import RandomFourierFeatures
from tgpflow.features.scaling import Scaling
from tgpflow.io.column_kinds import column_kinds
from tgpflow.io.pilot import DEFAULT_PILOT_ROWS, LazyPilot
from tgpflow.io.sources import Source
from tgpflow.models.anomaly import AnomalyMixin
from tgpflow.models.estimator_base import StatsEstimator, entry
from tgpflow.models.params import GPTiltedParams
from tgpflow.models.streaming import StreamingMixin, is_grid
from tgpflow.models.tgp_evaluation import TGPEvaluation
from tgpflow.models.tgp_method import TGPMethod
from tgpflow.models.tgp_methods import get_method
from tgpflow.models.tgp_persistence import TGPModelFile
from tgpflow.models.tgp_pilot import TGPPilot
from tgpflow.models.tgp_solve import TGPSolve
from tgpflow.models.tgp_space import TGPFittingSpace, to_data_rows
from tgpflow.solve.normalizer import DEFAULT_NORMALIZER_DRAWS
from tgpflow.stats.ncfd import NCFDStats
from tgpflow.stats.split import SPLIT_SALT, StatsBundle, split_chunk_stats
from tgpflow.stats.support import SupportBox
from tgpflow.stats.tgp import TGPStats

__all__ = ["GPTiltedDensity"]


def _carrying(fn: Any, carried: dict[str, Any], counter: Any, *args: Any) -> Any:
    """``fn(*args)``, chunk statistics, carrying how their rows were read: the discrete columns' ``cells`` they were
    dequantized over and the ``bounds`` they were transformed by; and, with a ``counter`` (:func:`count_codes`
    bound to the cells), the rows per code of each discrete column (the rows are ``args[0]``)."""
    out = fn(*args)
    if not hasattr(out, "cells"):
        return out
    return dataclasses.replace(out, **carried, **({} if counter is None else {"code_counts": counter(args[0])}))

# A chunk function run on the device, or carrying how its rows were read, is planned as the function it wraps.
declare_wrapper(on_device, 1)
declare_wrapper(_carrying, 0)


class GPTiltedDensity(AnomalyMixin, TGPEvaluation, TGPSolve, TGPModelFile, TGPPilot, TGPFittingSpace, StreamingMixin,
                      StatsEstimator):
    """GP-tilted density estimator: FD, NCFD, FVPD, MAP, and the KDE-RFF baseline (docs/gp_tilted.md).

    ``log q(x) = θᵀφ(x) − ½(x−μ)ᵀΣ⁻¹(x−μ)`` with random Fourier features φ and the base N(μ, Σ) set to the exact
    moments of the data or learnt (``base="learn"``), or ``θᵀφ(x) + log m(x)`` on a Gaussian mixture base m
    (``base="mixture"``; what the default ``base="auto"`` takes when λ is selected). NCFD fits one θ for a ladder
    of noise levels and evaluates at any σ ≥ 0; FVPD integrates θ over its Fisher variational posterior; MAP
    maximises the posterior with Newton steps on fixed draws of the defensive proposal; ``kde_rff`` is the RFF
    kernel density baseline ``p(x) ∝ φ(x)ᵀψ/N`` from the same pass. The parameters below are read off its table,
    :class:`~tgpflow.models.params.GPTiltedParams`, which checks them; docs/gp_tilted.md, "Parameters" says
    what their one-line help cannot (the defaults' measurements, the paper's settings).
    """

    params_table = GPTiltedParams
    _runs_on_gpu = True
    _DRAW = "features_"
    _FIT_STATE = ("features_", "stats_", "selection_", "noise_levels_", "pilot_", "support_", "heldout_grid_",
                  "bandwidth_selection_", "_fitted", "base_mixture_", "discrete_", "split_key_", "edges_")
    _NO_DRAW = ("fit_from_stats needs the feature draw the statistics were computed with, and these statistics do not "
                "carry it (read from a file written before statistics carried their draw): pass features=… (the "
                "RandomFourierFeatures they were accumulated with, e.g. est.features_ of that model)")

    def __init__(self, *, method: str = "fd", n_features: int = 1000, lam: float | str = "auto",
                 bandwidth: str | float | list[float] = "auto", noise_levels: int = 10,
                 sigma_max: str | float = "auto", eta: str | float | list[float] = "auto", base: str = "auto",
                 lam_grid: list[float] | None = None, criterion: str = "sliced",
                 normalizer_draws: int = DEFAULT_NORMALIZER_DRAWS, validation_fraction: float = 0.1,
                 map_draws: int = 100_000,
                 map_max_iter: int = 100, map_points: str = "proposal", kernel_cov: str = "paper",
                 bounds: BoundsSpec | str = "auto",
                 discrete: str | list[str] | None = "auto", pilot: str = "sample",
                 pilot_rows: int = DEFAULT_PILOT_ROWS, on_bad_rows: str = "raise",
                 block_bytes: int = DEFAULT_BLOCK_BYTES, split_every: int = 8, random_state: int | None = 0,
                 device: str = "auto", precision: str = "float64", threshold_quantile: float = 0.01,
                 scale: bool = False):
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
        self.criterion = criterion
        self.normalizer_draws = normalizer_draws
        self.validation_fraction = validation_fraction
        self.map_draws = map_draws
        self.map_max_iter = map_max_iter
        self.map_points = map_points
        self.kernel_cov = kernel_cov
        self.bounds = bounds
        self.discrete = discrete
        self.pilot = pilot
        self.pilot_rows = pilot_rows
        self.on_bad_rows = on_bad_rows
        self.block_bytes = block_bytes
        self.split_every = split_every
        self.random_state = random_state
        self.device = device
        self.scale = scale

    @property
    def _method(self) -> TGPMethod:
        """The method object of ``method`` (:mod:`tgpflow.models.tgp_methods`)."""
        return get_method(self.method)

    @property
    def _mixture_base(self) -> bool:
        """Whether the pass sums under a Gaussian mixture base: ``base="mixture"``, or ``base="auto"`` for a method
        that takes one when λ is selected, so that the selection's no-tilt candidate (the mixture alone, λ → ∞)
        bounds it from below (docs/gp_tilted.md, "A mixture base")."""
        if self.base == "auto":
            return self._method.mixture_base and self.lam == "auto"
        return self.base == "mixture"

    @property
    def _selecting(self) -> bool:
        """Whether a held-out selection is asked for (λ = "auto", or a γ or η grid; KDE-RFF has none)."""
        return self._method.selects and (self.lam == "auto" or is_grid(self.bandwidth) or is_grid(self.eta))

    def _seeds(self) -> tuple[np.random.SeedSequence, ...]:
        # pilot, features, MAP draws, normaliser draws, held-out projection directions, mixture base, lattice noise,
        # the code calibration's draws, bounds="auto"'s edge tests (a child's stream does not depend on how many
        # are spawned: adding one left the others as they were)
        return tuple(np.random.SeedSequence(self.random_state).spawn(9))

    def _chunk_fn(self, validation: bool = False) -> Any:
        """The method's per-chunk statistics function and its trailing arguments (after the features);
        ``validation``: for held-out rows, None where they need no more sums than the others."""
        spec = self._method.chunk_stats(block_bytes=int(self.block_bytes), precision=self.precision,
                                        noise_levels=getattr(self, "noise_levels_", None), validation=validation,
                                        mixture=getattr(self, "base_mixture_", None),
                                        ladder=self.sigma_max == "auto" and self.lam == "auto")
        if spec is None:
            return spec
        target = self._device_target()
        if target is not None:  # each chunk goes to the device inside its task; its sums come back (docs/gpu.md)
            spec = functools.partial(on_device, target, spec[0]), spec[1]
        cells = getattr(self, "discrete_", None)
        carried = {k: v for k, v in (("cells", None if cells is None else cells.uncalibrated()),
                                     ("bounds", getattr(self, "bounds_", None))) if v is not None}
        if not carried:
            return spec
        counter = None
        if cells is not None and cells.positions.size:  # the code frequencies the fit is calibrated to
            to_data = functools.partial(to_data_rows, bounds=getattr(self, "bounds_", None),
                                        scaling=getattr(self, "scaling_", None))
            counter = functools.partial(count_codes, cells=cells.uncalibrated(), to_data=to_data)
        return functools.partial(_carrying, spec[0], carried, counter), spec[1]  # the statistics say how rows were read

    def _val_args(self) -> tuple[Any, ...] | None:
        """Arguments of the chunk function for held-out rows, where they need more sums (FVPD's Σφφᵀ)."""
        spec = self._chunk_fn(validation=True)
        return None if spec is None else spec[1]

    def _draw_from_pilot(self, fitting: Source, pilot: LazyPilot, progress: Progress | None) -> None:
        """:meth:`prepare`'s draw: the pilot's moments, the features, a selection's held-out grid, the box of the
        pilot rows (where a stage read them) and NCFD's noise levels."""
        n_total, mean, cov, self.pilot_ = self._pilot_moments(fitting, pilot, progress)
        self.features_ = self._draw_features(n_total, mean, cov, pilot, progress)
        if self._selecting:
            self._make_heldout_grid(pilot)
        if pilot.sample is not None:  # read by a stage (not by pilot="exact" alone): the box of the data's rows
            self.support_ = SupportBox.from_rows(self._to_data(pilot.sample.rows))
        self.n_features_in_ = fitting.n_columns
        if self._method.noise_conditional:
            self.noise_levels_ = self._levels(cov, self.features_)

    def _pass_spec(self) -> tuple[Any, tuple[Any, ...], bool]:
        """(chunk statistics function, its arguments after the rows, whether it takes row keys) for
        the fitted draw; with a selection pending (``lam="auto"``, a γ or η grid), the hashed
        train/validation split of :func:`~tgpflow.stats.split.split_chunk_stats`."""
        fn, args = self._chunk_fn()
        if not self._split_pending:
            return fn, (self.features_, *args), False
        grid = self._bandwidths(self.features_.gamma)
        parts = {g: (self.features_.with_bandwidth(g), *args) for g in grid}
        val_args = self._val_args()
        val_parts = None if val_args is None else {g: (v[0], *val_args) for g, v in parts.items()}
        return split_chunk_stats, (float(self.validation_fraction), SPLIT_SALT, fn, parts, val_parts,
                                   self.heldout_grid_), True

    # -- the public pieces --------------------------------------------------------------
    @entry
    def accumulate(self, X: Any, *, columns: list[str] | None = None, features: RandomFourierFeatures | None = None,
                   progress: Progress | None = None) -> TGPStats | NCFDStats | StatsBundle:
        """Statistics of the rows of ``X`` for this estimator's feature draw (one pass).

        The draw is, in order: ``features`` if given, the fitted ``features_``, or a new
        draw from a pilot sample of ``X`` (stored as ``features_``, so that later parts use it and
        stay mergeable). The statistics carry it (``stats.draw``) and are :class:`TGPStats`, or
        :class:`NCFDStats` for NCFD. On a first fit that selects λ, η or γ on held-out rows,
        they are a :class:`StatsBundle` with ``("train", γ)`` and ``("val", γ)`` parts for every γ.
        ``progress``: see :meth:`fit`.
        """
        fitting, pilot = self._fitting_source_of(X, columns, None, hasattr(self, "features_"), progress)
        return self._accumulate_source(fitting, pilot, features, progress)

    def _accumulate_source(self, source: Source, lazy: LazyPilot, features: RandomFourierFeatures | None,
                           progress: Progress | None = None) -> Any:
        """The pass over a fitting ``source`` (its pilot sample ``lazy``, read only by the stages a first fit
        needs: the moments, the mixture base, the bandwidth, the held-out grid)."""
        fitted = hasattr(self, "features_")
        cov = None
        if features is None and fitted:
            features = self.features_
        elif features is None or (self._method.noise_conditional and self.sigma_max == "paper" and not fitted):
            n_total, mean, cov, self.pilot_ = self._pilot_moments(source, lazy, progress)
            if features is None:
                features = self._draw_features(n_total, mean, cov, lazy, progress)
        if not fitted and self._mixture_base and getattr(self, "base_mixture_", None) is None:
            self._fit_mixture(lazy, progress)  # given features: the mixture is still the pilot's
        if features.n_dims != source.n_columns:
            raise ValueError(f"the features were drawn for d={features.n_dims} but the data have {source.n_columns} "
                             f"columns")
        if is_grid(self.bandwidth) and not fitted and features.gamma not in [float(g) for g in self.bandwidth]:
            raise ValueError("a bandwidth grid cannot be combined with given features of another γ")
        if self._method.noise_conditional and not (fitted and hasattr(self, "noise_levels_")):
            self.noise_levels_ = self._levels(cov, features)
        self.features_ = features
        fn, args = self._chunk_fn()
        variants = None
        if self._split_pending:  # a first fit, or statistics for a prepared draw (as its chunk_tasks make them): the
            # held-out split a selection is made on
            grid = self._bandwidths(features.gamma)
            variants = {g: features.with_bandwidth(g) for g in grid}
            self.split_key_ = "global row position" if source.n_rows is not None else "chunk and row in chunk"
            if getattr(self, "heldout_grid_", None) is None:  # a prepared draw has its grid
                self._make_heldout_grid(lazy)
        return self._stream_pass(source, fn, features, args, variants, self._val_args() if variants else None,
                                 getattr(self, "heldout_grid_", None) if variants else None, progress=progress,
                                 n_features=features.n_features)

    @entry
    def fit(self, X: Any, y: Any = None, *, columns: list[str] | None = None,
            features: RandomFourierFeatures | None = None, scaling: Scaling | None = None,
            progress: Progress | None = None) -> GPTiltedDensity:
        """Fit from any source: NumPy/pandas, dask array/DataFrame, Parquet path/glob, Zarr path.

        ``features``: a draw to reuse (in the fitting space); ``scaling``: a frozen standardization to fit in
        (with ``scale=True`` one is taken from the pilot; rows in and out stay in the data's units either way,
        :mod:`tgpflow.features.scaling`). ``progress`` is called with the futures of each distributed compute of
        the fit (the pilot, the pass), e.g. ``distributed.progress`` (:data:`tgpflow.core.engine.Progress`).
        """
        self._forget(*self._FIT_STATE)
        source, lazy = self._new_fitting_source(self._source(X, columns, reset=True), scaling, progress)
        self.pilot_ = {"mode": "given"} if features is not None else {}
        stats = self._accumulate_source(source, lazy, features, progress)
        self.n_rows_dropped_ = self.last_rows_dropped_
        rows = self._to_data(lazy.get().rows)  # the pilot in the data's units (read now after pilot="exact" or
        # given features)
        self.support_ = SupportBox.from_rows(rows)
        discrete = () if self.discrete_ is None else self.discrete_.columns  # their cells bound them already
        self.pilot_["suggested_bounds"] = {c: b for c, b in suggest_bounds(rows, self._column_names(source),
                                                                           self.bounds_).items() if c not in discrete}
        self.pilot_["column_kinds"] = column_kinds(rows, self._column_names(source))
        tested = getattr(self, "edges_", None) or {}  # bounds="auto"'s edge tests
        if tested:  # kept in the model file with the pilot's other findings
            self.pilot_["edges"] = tested
        # a column the tests left open has its fix named by the summary (bounds=); the others may want bounds='auto'
        untested = {c: b for c, b in self.pilot_["suggested_bounds"].items() if c not in tested}
        if untested:
            logger.info("columns that look bounded (at 0 or 1, or rows piled against an edge): %s; declare them with "
                        "bounds=, or bounds='auto'", untested)
        self.fit_from_stats(stats)
        self._set_threshold(rows)
        return self


