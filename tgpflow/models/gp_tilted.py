"""``GPTiltedDensity``: FD and FVPD GP-tilted densities fitted in one streamed pass (seed 003).

``fit(X)`` = pilot sample (MATH.md §1) → feature draw → one pass of chunk statistics,
tree-reduced (MATH.md §2) → closed-form solve (FD, MATH.md §2; FVPD, MATH.md §4). The
pieces are public: ``accumulate`` (data → statistics), ``fit_from_stats`` (statistics →
model), ``partial_fit`` (add statistics of new rows, re-solve).
"""

from __future__ import annotations

import dataclasses
import functools
import math
import numbers
import warnings
from pathlib import Path
from typing import Any

import numpy as np
from sklearn.utils.validation import check_is_fitted

from tgpflow.core.backend import on_device
from tgpflow.core.engine import Progress
from tgpflow.core.engine import accumulate as run_pass
from tgpflow.core.gaussian_base import base_from_moments, check_covariance, mixture_base
from tgpflow.core.logs import logger, phase
from tgpflow.core.memory import DEFAULT_BLOCK_BYTES, declare_wrapper
from tgpflow.core.moments import Moments
from tgpflow.features.bounds import BoundsSpec, ColumnBounds, bounded_chunk
from tgpflow.features.edges import suggest_bounds, with_linear_tails
from tgpflow.features.code_calibration import calibrate_cells
from tgpflow.features.lattice import LatticeCells, dequantize_chunk
from tgpflow.features.lattice_choice import choose_discrete
from tgpflow.features.mixture_base import fit_mixture_base
from tgpflow.features.noise import AUTO_SIGMA_MAX_FACTOR, noise_levels, paper_sigma_max
from tgpflow.features.rff import RandomFourierFeatures, paper_kernel_cov, scott_bandwidth
from tgpflow.features.scaling import Scaling
from tgpflow.io.column_kinds import cell_widths, column_kinds
from tgpflow.io.degenerate import check_pilot_rows, check_rows_left
from tgpflow.io.pilot import DEFAULT_PILOT_ROWS, pilot_sample
from tgpflow.io.sources import Source
from tgpflow.models.anomaly import AnomalyMixin
from tgpflow.models.diagnostics import MIN_ESS_FRACTION, DiagnosticWarning, fit_diagnostics, remedies
from tgpflow.models.estimator_base import StatsEstimator, entry
from tgpflow.models.fitted import Fitted, proposal_count
from tgpflow.models.lattice_fitted import with_lattice
from tgpflow.models.model_file import fitted_arrays, read_fitted, stored_stats
from tgpflow.models.params import GPTiltedParams
from tgpflow.models.scaled_fitted import in_data_units
from tgpflow.models.streaming import StreamingMixin, is_grid
from tgpflow.models.tgp_fitted import BoundedFitted, TGPFitted
from tgpflow.models.tgp_method import Hyper, TGPMethod
from tgpflow.models.tgp_methods import get_method
from tgpflow.models.tgp_selection import TGPSelector, base_outside, eta_values, lam_grid, raised_lam
from tgpflow.solve.normalizer import DEFAULT_NORMALIZER_DRAWS, NormalizerEstimate, estimate_log_normalizer
from tgpflow.stats.ncfd import NCFDStats
from tgpflow.stats.projections import ProjectionGrid
from tgpflow.stats.split import SPLIT_SALT, StatsBundle, split_chunk_stats, validation_mask
from tgpflow.stats.support import SupportBox
from tgpflow.stats.tgp import TGPStats

__all__ = ["GPTiltedDensity"]


def _to_data_rows(rows: np.ndarray, bounds: ColumnBounds | None, scaling: Scaling | None,
                  cells: LatticeCells | None = None) -> np.ndarray:
    if bounds is None:
        rows = rows if scaling is None else scaling.inverse(rows)
    else:
        if scaling is not None:  # the fitting space is the transformed values, standardized
            rows = bounds.transformed_scaling(scaling).inverse(rows)
        rows = bounds.inverse(rows)
    return rows if cells is None else cells.snap(rows)


def _from_data_rows(rows: np.ndarray, bounds: ColumnBounds | None, scaling: Scaling | None) -> np.ndarray:
    """Rows in the data's units (strictly inside ``bounds``) in the fitting space: the inverse of
    :func:`_to_data_rows` without its rounding."""
    if bounds is None:
        return rows if scaling is None else scaling.forward(rows)
    t = bounds.forward(rows)
    return t if scaling is None else bounds.transformed_scaling(scaling).forward(t)


def _data_units(bounds: ColumnBounds | None, scaling: Scaling | None, cells: LatticeCells | None = None) -> Any:
    """The map from the fitting space to the data's units (``bounds`` in the data's units: the transformed
    values' scaling undone, then t⁻¹; without bounds the scaling's inverse; discrete columns rounded to their
    lattice, ``cells``) as a value that can go to the workers; None for the identity."""
    if bounds is None and scaling is None and cells is None:
        return None
    return functools.partial(_to_data_rows, bounds=bounds, scaling=scaling, cells=cells)


def _carried(stats: Any, name: str) -> Any:
    """What statistics carry in the field ``name`` (a selecting bundle's parts all carry the same), else None."""
    one = next(iter(stats.values())) if isinstance(stats, StatsBundle) else stats
    return getattr(one, name, None)


def _carrying(fn: Any, carried: dict[str, Any], *args: Any) -> Any:
    """``fn(*args)``, chunk statistics, carrying how their rows were read: the discrete columns' ``cells`` they were
    dequantized over and the ``bounds`` they were transformed by."""
    out = fn(*args)
    return dataclasses.replace(out, **carried) if hasattr(out, "cells") else out

# A chunk function run on the device, or carrying how its rows were read, is planned as the function it wraps.
declare_wrapper(on_device, 1)
declare_wrapper(_carrying, 0)


class GPTiltedDensity(AnomalyMixin, StreamingMixin, StatsEstimator):
    """GP-tilted density estimator (seed 003): FD, NCFD, FVPD, MAP, and the KDE-RFF baseline.

    ``log q(x) = θᵀφ(x) − ½(x−μ)ᵀΣ⁻¹(x−μ)`` with random Fourier features φ and the base
    N(μ, Σ) set to the exact moments of the data (MATH.md §2) or learnt (``base="learn"``), or
    ``θᵀφ(x) + log m(x)`` on a Gaussian mixture base m (``base="mixture"``; what the default ``base="auto"``
    takes when λ is selected).
    NCFD fits one θ for a ladder of noise levels and evaluates at any σ ≥ 0 (MATH.md §3).
    FVPD integrates θ over its Fisher variational posterior (MATH.md §4). MAP maximises the
    posterior with Newton steps on fixed draws of the defensive proposal (MATH.md §5). ``kde_rff`` is the paper's
    RFF kernel density baseline ``p(x) ∝ φ(x)ᵀψ/N`` from the same pass (MATH.md §5).

    Parameters
    ----------
    method : {"fd", "ncfd", "fvpd", "map", "kde_rff"} or a registered method's name — each is a
        :class:`~tgpflow.models.tgp_method.TGPMethod` in :mod:`tgpflow.models.tgp_methods`.
    n_features : int, S — number of random Fourier features (paper default 1000).
    lam : float or "auto" — ridge λ on θ, with the objective a SUM over rows. "auto" (the
        default) selects λ from ``lam_grid`` on held-out rows (no extra pass, see below). A fixed
        λ means less and less as N grows (the penalty stands beside a sum over rows): the paper's
        0.1 put 12 % of the demo mixture's mass outside the data at 200k rows.
    bandwidth : "auto", "scott", float, or a list of floats — γ. "auto" (the default) selects γ
        from multiples of Scott's rule by the 3-fold cross-validated log-likelihood of FD fits on
        the pilot sample (no extra read; see :data:`~tgpflow.solve.pilot_bandwidth.AUTO_BANDWIDTH_FACTORS`).
        "scott" is the paper's rule, which shrinks γ as N grows while S stays fixed (2M rows of
        the demo mixture: held-out log-likelihood 0.11 nats/row below the selected γ). A list is
        a grid selected on held-out rows of the full pass, every γ accumulated in it (G× its cost).
        For the paper's settings: ``lam=0.1, bandwidth="scott", sigma_max="paper"``.
    noise_levels : int, H — NCFD noise levels σ_h = (h−1)σ_max/H (paper default 10).
    sigma_max : "auto", "paper" or float — the largest NCFD noise level. "auto" is γ/4 (for a
        γ grid, a quarter of its smallest value; :data:`~tgpflow.features.noise.AUTO_SIGMA_MAX_FACTOR`
        gives the measurements): with λ selected on held-out rows, a wider ladder only blurs the
        data-level density (σ_max = γ: 0.05 nats/row worse at 200k and 2M rows of the demo
        mixture, and an over-spread 2M fit). With ``lam="auto"`` it is an upper limit: the selection also
        scores the ladder's first H' levels (σ_max·H'/H, H' = 1 and ⌈H/4⌉, ⌈H/2⌉; H' = 1 is σ = 0 alone), health
        first, and ``selection_["chosen"]`` says which (``noise_levels``, ``sigma_max``; docs/gp_tilted.md,
        "NCFD's noise ladder in the selection"). "paper" is seed 003's √(tr Σ)/d (MATH.md §11 A5).
    eta : "auto", float or a list of floats — FVPD temperature η; "auto" is 1/γ². A list is
        selected on held-out rows.
    base : {"auto", "empirical", "learn", "mixture"} — "auto" (the default) is "mixture" for FD, NCFD, FVPD and
        MAP when ``lam="auto"`` (the selection's λ = ∞ candidate then guards it) and "empirical" otherwise.
        The others: N(μ, Σ) of the exact data moments, that Gaussian learnt
        by coordinate descent from the statistics (eqs 12–16; FD and FVPD only, no extra pass), or a Gaussian
        mixture fitted on the pilot rows before the pass (K by held-out log-likelihood; FD, NCFD, FVPD and MAP;
        ``base_mixture_``), whose score enters the pass's sums (docs/gp_tilted.md, "A mixture base"). Under a
        mixture, ``lam="auto"`` also scores λ = ∞ — the mixture alone — so a selection never keeps a tilt that
        does worse on the held-out rows. Measured on MAGIC (standardized, 80/20): FD's held-out −5.03 nats/row
        against −9.76 on the Gaussian base and −4.97 for a tuned scikit-learn GaussianMixture (docs/gp_tilted.md).
    lam_grid : sequence of floats, optional — the λ values of ``lam="auto"`` (default: 22 values,
        10⁻³ … 10⁴, for the "sliced" and "loglik" criteria; 19 values, 10⁻⁴ … 10², for "hyvarinen").
        The default grid is extended upwards, up to three decades, while its largest λ wins (FVPD's λ
        acts as λ/γ², so on wide γ its optimum can sit above 10⁴); a grid given here is used as given.
    criterion : {"sliced", "loglik", "hyvarinen"} — what a selection optimises on the held-out
        rows: "sliced" (the default) the median sliced KS between the held-out rows and the
        candidate's importance-weighted proposal draws, candidates within its noise of the best tied
        and the tie going to the held-out log-likelihood (:func:`~tgpflow.solve.select.choose`); "loglik" the normalised log-likelihood (log Z
        by importance sampling from the base, the same seeded draws for every candidate); for
        both, candidates whose normaliser rests on < 1 % of the draws, or that put more mass
        outside the training rows' box than the diagnostics allow, are skipped. "hyvarinen" is
        the score-matching loss, which cannot see mass where there are no data.
    normalizer_draws : int — proposal draws of the normaliser estimated after every fit
        (``normalizer_``, ``fit_diagnostics_``); a selection uses a quarter of them per γ.
    validation_fraction : float — share of rows held out when selecting, by a fixed hash of
        each row's position (the same rows on every refit). The final model is solved on all
        rows with the chosen values.
    map_draws : int, S₂ — proposal draws of the MAP expectation (paper: 100 000 base draws).
    map_max_iter : int — Newton iterations of MAP at most.
    map_points : {"proposal", "base"} — MAP's expectation E_base e^{θᵀφ} on draws of the defensive proposal
        weighted by N/q (the default: the fit pays for mass put beyond the base's reach), or on plain base draws
        (seed 003 Alg 1, for reproducing the paper; model files written before this option load as "base").
    kernel_cov : {"paper", "identity"} — Σ_z = dΣ/tr Σ (seed 003 §IV) or I.
    bounds : "auto", dict, list or None — hard bounds of columns, ``{"col": (lower, upper)}`` or one
        pair per column, None for an open side (e.g. ``{"length": (0, None), "angle": (0, 90)}``).
        Bounded columns are fitted after a log/logit transform and every output (densities,
        scores, samples) is in the data's units with the Jacobian (:mod:`tgpflow.features.bounds`).
        ``"auto"`` (the default) declares the bounds the pilot shows, one gap beyond its extreme values (the
        distance to the 1 % quantile): for columns that never go below 0 (above 1) while a Gaussian of them
        would, and where the rows pile up against an extreme value
        (:func:`~tgpflow.features.edges.suggest_bounds`); None fits every column open and only
        suggests them (``pilot_["suggested_bounds"]``). ``bounds_`` holds what a fit resolved, the statistics
        carry it, and a refit reads every partition within it (docs/gp_tilted.md, "Hard edges").
    discrete : "auto", None or a list of columns — columns modelled as discrete by uniform dequantization over
        their lattice's cells (:mod:`tgpflow.features.lattice`): the fit sees each row's value moved by fixed
        noise within its cell, a row's density is its cell's average of the fitted density (a density in the
        data's units, constant across a cell), and samples are rounded to the lattice. "auto" (the default) takes
        the binary columns and the lattices the pilot shows whose step is at least 5 % of their spread (integer
        codes such as hour, weekday, month; not values recorded to a few decimals), bounded columns excluded,
        and the atoms at continuous columns' edges (a value at the minimum or maximum carrying ≥ 1 % of the rows,
        e.g. a meter's exact zeros); ``discrete_`` holds them (None: none). docs/gp_tilted.md, "Integer codes
        and other lattices" and "Atoms at an edge".
    pilot : {"sample", "exact"} — a bounded pilot sample, or a full moments pass first.
    pilot_rows : int — rows in the pilot sample (default 100 000).
    on_bad_rows : {"raise", "drop"} — rows with missing/non-finite values.
    block_bytes : int — cap on the per-row part of a chunk task's memory (its feature blocks, 8·(3S + 2d)
        bytes a row); the S² accumulators and temporaries come on top. Each pass is planned and logged by
        :mod:`tgpflow.core.memory` within the workers' memory limit per thread (else this machine's available
        RAM), and refused with both numbers when one row does not fit.
    split_every : int — fan-in of the reduction tree.
    random_state : int — seed of the pilot, the feature draw and the MAP draws.
    device : {"auto", "cpu", "gpu"} — "gpu": each chunk's statistics and the log density on a CUDA GPU through
        CuPy (results back on the host: the model file is the same); "auto": the GPU when CuPy sees one
        (docs/gpu.md).
    precision : {"float64", "mixed"} — "mixed": float32 S×S products accumulated in float64
        (see ``benchmarks/precision_modes.py`` for the measured error and speed).
    threshold_quantile : float — share of (pilot) training rows flagged by ``is_anomaly``.
    scale : bool — standardize each column by the pilot's mean and standard deviation inside the model
        (``scaling_``, stored in the model file; :mod:`tgpflow.features.scaling`): rows in and out, bounds,
        samples and densities stay in the data's units. For columns of mixed scales (1000, 20 and 0.09: six of
        the README's seven fits put 4–7 % of their mass outside the data unscaled; scaled, only the paper's
        fixed λ = 0.1 did, 4.4 %). ``fit(…, scaling=…)``
        gives a frozen one instead (a pipeline's ``preprocess``).

    The parameters' types, ranges and the methods they apply to are its table,
    :class:`~tgpflow.models.params.GPTiltedParams`.
    """

    params_table = GPTiltedParams
    _runs_on_gpu = True
    _DRAW = "features_"
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
        # the code calibration's draws
        return tuple(np.random.SeedSequence(self.random_state).spawn(8))

    # -- data entry -------------------------------------------------------------------
    def _pilot_moments(self, source: Source,
                       progress: Progress | None) -> tuple[int, np.ndarray, np.ndarray, dict[str, Any]]:
        """(N, mean, covariance) from a bounded pilot sample, or exactly with ``pilot="exact"``."""
        pilot_seed = self._seeds()[0]
        with phase("pilot", mode=self.pilot, chunks=source.n_chunks) as info:
            if self.pilot == "exact":
                moments, dropped = run_pass(source, Moments.from_rows, split_every=self.split_every, progress=progress)
                check_rows_left(int(moments.n), dropped, source.n_chunks, source.description, 1,
                                "the GP-tilted density")
                n_total = n_rows = int(moments.n)
                mean, cov = moments.mean, moments.covariance
                info.update(rows=moments.n, chunks_read=source.n_chunks)
            else:
                pilot = getattr(self, "_pilot_sample", None) or pilot_sample(
                    source, rows=self.pilot_rows, random_state=pilot_seed, progress=progress)
                check_pilot_rows(pilot, source.description, 1, "the GP-tilted density")
                n_total, n_rows, mean = pilot.n_total, pilot.rows.shape[0], pilot.rows.mean(axis=0)
                self._pilot_rows, self._pilot_keys = pilot.rows, pilot.keys
                cov = np.cov(pilot.rows, rowvar=False, bias=True).reshape(source.n_columns, source.n_columns)
                info.update(rows=pilot.rows.shape[0], chunks_read=pilot.chunks_read, n_total=n_total,
                            n_total_exact=pilot.n_total_exact)
            check_covariance(n_rows, mean, cov, self._column_names(source), source.description)
        return n_total, mean, cov, dict(info)

    def _draw_features(self, n_total: int, mean: np.ndarray, cov: np.ndarray, source: Source | None = None,
                       progress: Progress | None = None) -> RandomFourierFeatures:
        if self._mixture_base:
            self._fit_mixture(source, progress)
        if is_grid(self.bandwidth):
            gamma = float(self.bandwidth[0])  # the grid shares Z and c; each γ is applied in the pass
        elif self.bandwidth in ("scott", "auto"):
            gamma = scott_bandwidth(n_total, cov)
        else:
            gamma = float(self.bandwidth)
        kernel_cov = paper_kernel_cov(cov) if self.kernel_cov == "paper" else None
        features = RandomFourierFeatures.draw(
            int(self.n_features), bandwidth=gamma, kernel_cov=kernel_cov, n_dims=mean.shape[0],
            shift=mean, random_state=np.random.default_rng(self._seeds()[1]))
        if isinstance(self.random_state, numbers.Integral):
            features = RandomFourierFeatures(features.Z, features.c, features.gamma, features.shift,
                                             seed=int(self.random_state))
        if self.bandwidth == "auto" and self._method.selects:  # the KDE baseline keeps Scott's rule
            features = features.with_bandwidth(self._auto_bandwidth(features, source, progress))
        return features

    def _fit_mixture(self, source: Source | None, progress: Progress | None = None) -> None:
        """A mixture base (``base="mixture"``, or ``"auto"`` with λ selected: :attr:`_mixture_base`): the Gaussian
        mixture fitted on the pilot rows (in the fitting space), K by held-out log-likelihood
        (:func:`~tgpflow.features.mixture_base.fit_mixture_base`), before the pass sums its score
        (docs/gp_tilted.md, "A mixture base"). Kept in ``base_mixture_``, its curve in ``pilot_["mixture"]``."""
        if getattr(self, "_pilot_rows", None) is None:
            if source is None:
                raise ValueError("base='mixture' fits its mixture on a pilot sample of the data: fit from data")
            self._read_pilot(source, progress)
        rows, keys = self._pilot_rows, getattr(self, "_pilot_keys", None)
        if self._selecting and keys is not None and len(keys) == len(rows):
            # not on the rows that the selection holds out: it compares the tilts with the mixture alone there
            rows = rows[~validation_mask(keys, float(self.validation_fraction), SPLIT_SALT)]
        cells = cell_widths(rows, column_kinds(rows, [str(j) for j in range(rows.shape[1])]))
        with phase("mixture base", rows=rows.shape[0], dequantized=len(cells)) as info:
            self.base_mixture_, curve = fit_mixture_base(rows, self._seeds()[5], cells=cells, progress=progress)
            info.update(components=self.base_mixture_.n_components)
        self.pilot_ = dict(getattr(self, "pilot_", {}) or {}, mixture={
            "components": self.base_mixture_.n_components, "rows": int(rows.shape[0]), "curve": curve})

    def _read_pilot(self, source: Source, progress: Progress | None) -> None:
        """The pilot sample's rows (fitting space) and keys, when the pilot moments did not read them."""
        pilot = pilot_sample(source, rows=int(self.pilot_rows), random_state=self._seeds()[0], progress=progress)
        self._pilot_rows, self._pilot_keys = pilot.rows, pilot.keys

    def _base_of(self, stats: Any) -> Any:
        """The base of a solve: the mixture the statistics were summed under, else N(μ, Σ) of their exact
        moments (:mod:`tgpflow.core.gaussian_base`)."""
        mixture = getattr(stats, "mixture", None)
        if mixture is None and self.base == "mixture":
            raise ValueError("base='mixture' needs statistics summed under its mixture base; these were summed under "
                             "a Gaussian base: accumulate them with this estimator (or refit)")
        if mixture is not None:
            return mixture_base(mixture)
        return base_from_moments(stats.moments, tuple(getattr(self, "feature_names_in_", ())) or None)

    def _auto_bandwidth(self, features: RandomFourierFeatures, source: Source | None,
                        progress: Progress | None = None) -> float:
        """``bandwidth="auto"``: γ chosen on the pilot rows already in memory (read now when the pilot moments did
        not read them), by :meth:`~tgpflow.models.tgp_selection.TGPSelector.pilot_bandwidth`; its curve is kept
        in ``bandwidth_selection_``."""
        if getattr(self, "_pilot_rows", None) is None:
            if source is None:
                raise ValueError("bandwidth='auto' selects γ on a pilot sample of the data: fit from data, or give "
                                 "a bandwidth")
            self._read_pilot(source, progress)
        # the map to the data's units as a value of its own (it goes to the workers; self._to_data would take the
        # whole estimator there)
        gamma, record = self._selector().pilot_bandwidth(self._pilot_rows, features, units=self._fit_bounds(),
                                                         data_units=self._data_map(),
                                                         mixture=getattr(self, "base_mixture_", None),
                                                         progress=progress)
        if record is not None:
            self.bandwidth_selection_ = record
        return gamma

    def _levels(self, cov: np.ndarray | None, features: RandomFourierFeatures) -> np.ndarray:
        """The NCFD noise levels (sigma_max="paper" needs the pilot covariance)."""
        if self.sigma_max == "auto":
            gamma = min(float(g) for g in self.bandwidth) if is_grid(self.bandwidth) else features.gamma
            smax = AUTO_SIGMA_MAX_FACTOR * gamma
        elif self.sigma_max == "paper":
            if cov is None:
                raise ValueError("sigma_max='paper' needs the data covariance: fit from data, or give sigma_max")
            smax = paper_sigma_max(cov)
        else:
            smax = float(self.sigma_max)
        return noise_levels(smax, int(self.noise_levels))

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
        return functools.partial(_carrying, spec[0], carried), spec[1]  # the statistics say how rows were read

    def _val_args(self) -> tuple[Any, ...] | None:
        """Arguments of the chunk function for held-out rows, where they need more sums (FVPD's Σφφᵀ)."""
        spec = self._chunk_fn(validation=True)
        return None if spec is None else spec[1]

    @entry
    def prepare(self, X: Any, *, columns: list[str] | None = None, scaling: Scaling | None = None,
                progress: Progress | None = None) -> GPTiltedDensity:
        """Draw the features (and a selection's held-out grid) from a pilot sample of ``X``, without a pass.

        A pipeline then accumulates each partition's statistics for this draw (:meth:`chunk_tasks`) and
        solves their sum (:meth:`fit_from_stats`). ``scaling``: a frozen standardization (a pipeline's
        ``preprocess``), else ``scale=`` decides. ``progress``: see :meth:`fit`.
        """
        source = self._new_fitting_source(self._source(X, columns, reset=True), scaling, progress)
        n_total, mean, cov, self.pilot_ = self._pilot_moments(source, progress)
        self.features_ = self._draw_features(n_total, mean, cov, source, progress)
        if self._selecting:
            self._make_heldout_grid(source, progress)
        if self._pilot_rows is not None:
            self.support_ = SupportBox.from_rows(self._to_data(self._pilot_rows))
        self._pilot_rows = self._pilot_sample = None
        self.n_features_in_ = source.n_columns
        if self._method.noise_conditional:
            self.noise_levels_ = self._levels(cov, self.features_)
        return self

    def _pass_spec(self) -> tuple[Any, tuple[Any, ...], bool]:
        """(chunk statistics function, its arguments after the rows, whether it takes row keys) for
        the fitted draw; with a selection pending (``lam="auto"``, a γ or η grid), the hashed
        train/validation split of :func:`~tgpflow.stats.split.split_chunk_stats`."""
        fn, args = self._chunk_fn()
        if not self._selecting:
            return fn, (self.features_, *args), False
        grid = [float(g) for g in self.bandwidth] if is_grid(self.bandwidth) else [self.features_.gamma]
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
        fitted = hasattr(self, "features_")
        source = self._source(X, columns, reset=not fitted)
        if fitted:
            self._check_width(source)
            return self._accumulate_source(self.fitting_source(source), features, progress)
        return self._accumulate_source(self._new_fitting_source(source, None, progress), features, progress)

    def _accumulate_source(self, source: Source, features: RandomFourierFeatures | None,
                           progress: Progress | None = None) -> Any:
        fitted = hasattr(self, "features_")
        cov = None
        if features is None and fitted:
            features = self.features_
        elif features is None or (self._method.noise_conditional and self.sigma_max == "paper" and not fitted):
            n_total, mean, cov, self.pilot_ = self._pilot_moments(source, progress)
            if features is None:
                features = self._draw_features(n_total, mean, cov, source, progress)
        if not fitted and self._mixture_base and getattr(self, "base_mixture_", None) is None:
            self._fit_mixture(source, progress)  # given features: the mixture is still the pilot's
        if features.n_dims != source.n_columns:
            raise ValueError(f"the features were drawn for d={features.n_dims} but the data have {source.n_columns} columns")
        if is_grid(self.bandwidth) and not fitted and features.gamma not in [float(g) for g in self.bandwidth]:
            raise ValueError("a bandwidth grid cannot be combined with given features of another γ")
        if self._method.noise_conditional and not (fitted and hasattr(self, "noise_levels_")):
            self.noise_levels_ = self._levels(cov, features)
        self.features_ = features
        fn, args = self._chunk_fn()
        variants = None
        if self._selecting and not fitted:
            grid = [float(g) for g in self.bandwidth] if is_grid(self.bandwidth) else [features.gamma]
            variants = {g: features.with_bandwidth(g) for g in grid}
            self.split_key_ = "global row position" if source.n_rows is not None else "chunk and row in chunk"
            self._make_heldout_grid(source, progress)
        return self._stream_pass(source, fn, features, args, variants, self._val_args() if variants else None,
                                 getattr(self, "heldout_grid_", None) if variants else None, progress=progress,
                                 n_features=features.n_features)

    def _make_heldout_grid(self, source: Source, progress: Progress | None = None) -> None:
        """The projection grid on which the held-out rows' sliced CDFs are counted in the pass
        (:mod:`tgpflow.stats.projections`), from the pilot rows of the fitting space."""
        if getattr(self, "_pilot_rows", None) is None:
            self._read_pilot(source, progress)
        self.heldout_grid_ = ProjectionGrid.from_rows(self._pilot_rows, random_state=self._seeds()[4],
                                                      units=self._fit_bounds())

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
        self._forget("features_", "stats_", "selection_", "noise_levels_", "pilot_", "support_", "heldout_grid_",
                     "bandwidth_selection_", "_fitted", "base_mixture_", "discrete_")
        source = self._new_fitting_source(self._source(X, columns, reset=True), scaling, progress)
        self.pilot_ = {"mode": "given"} if features is not None else {}
        stats = self._accumulate_source(source, features, progress)
        self.n_rows_dropped_ = self.last_rows_dropped_
        if self._pilot_rows is None:  # pilot="exact" or given features: a bounded sample for the checks
            self._read_pilot(source, progress)
        rows = self._to_data(self._pilot_rows)  # the pilot in the data's units
        self.support_ = SupportBox.from_rows(rows)
        discrete = () if self.discrete_ is None else self.discrete_.columns  # their cells bound them already
        self.pilot_["suggested_bounds"] = {c: b for c, b in suggest_bounds(rows, self._column_names(source),
                                                                           self.bounds_).items() if c not in discrete}
        self.pilot_["column_kinds"] = column_kinds(rows, self._column_names(source))
        if self.pilot_["suggested_bounds"]:
            logger.info("columns that look bounded (at 0 or 1, or rows piled against an edge): %s; declare them with "
                        "bounds=, or bounds='auto'", self.pilot_["suggested_bounds"])
        self.fit_from_stats(stats)
        self._set_threshold(rows)
        self._pilot_rows = self._pilot_sample = None
        return self

    def _column_names(self, source: Source) -> list[str]:
        """The data's column names: those of a DataFrame given in memory, else the source's."""
        names = getattr(self, "feature_names_in_", None)
        return [str(c) for c in names] if names is not None else [str(c) for c in source.columns]

    def _new_fitting_source(self, source: Source, scaling: Scaling | None, progress: Progress | None) -> Source:
        """A first fit's fitting space: the standardization (``scaling``, or ``scale=``), the bounds and the discrete
        columns (:meth:`_fix_discrete`)."""
        self._fix_scaling(source, scaling, progress)
        self.bounds_ = ColumnBounds.from_param(self._declared_bounds(), self._column_names(source))
        self._pilot_rows = self._pilot_sample = self.discrete_ = None
        return self._fix_discrete(source, progress)

    @property
    def _bounds_auto(self) -> bool:
        """Whether ``bounds="auto"``: bounds a fit reads off its pilot (:meth:`_auto_bounds`)."""
        return isinstance(self.bounds, str) and self.bounds == "auto"

    def _declared_bounds(self) -> BoundsSpec:
        """``bounds=`` as declared: None for "auto", which a fit reads off its pilot (:meth:`_fix_discrete`)."""
        return None if self._bounds_auto else self.bounds

    def _fix_discrete(self, source: Source, progress: Progress | None) -> Source:
        """The fitting space of ``source`` (raw rows) with ``discrete_`` read off the column kinds of the pilot sample
        (the pilot the fit then uses: no second read): those columns dequantized in the data's units and bounded at
        their lattices' outer cell edges (``bounds_`` then holds the user's bounds and theirs), the pilot rows too
        (their noise drawn from their keys; :mod:`tgpflow.features.lattice`)."""
        fitting = self.fitting_source(source)
        if (self.discrete is None or self.discrete == "none") and not self._bounds_auto:
            return fitting
        pilot = pilot_sample(fitting, rows=int(self.pilot_rows), random_state=self._seeds()[0], progress=progress)
        check_pilot_rows(pilot, fitting.description, 1, "the GP-tilted density")
        rows, names = self._to_data(pilot.rows), self._column_names(source)
        bounded = list(self.bounds_.to_dict()) if self.bounds_ is not None else []
        seed = int(self._seeds()[6].generate_state(1, np.uint64)[0])
        self.discrete_ = choose_discrete(self.discrete, column_kinds(rows, names), rows, bounded, seed)
        self.bounds_ = self._with_cells(self.bounds_, names)
        found = self._auto_bounds(rows, names) if self._bounds_auto else None
        self.bounds_ = with_linear_tails(self.bounds_, rows, declared=bounded)  # past the pilot's extreme values
        if self.discrete_ is not None or found is not None:  # the pilot's rows in the new fitting space
            dequantized = rows if self.discrete_ is None else self.discrete_.dequantize(rows, pilot.keys)
            pilot = dataclasses.replace(pilot, rows=_from_data_rows(dequantized, self.bounds_,
                                                                     getattr(self, "scaling_", None)))
            fitting = self.fitting_source(source)
        cells = self.discrete_
        if cells is not None:
            logger.info("discrete columns and atoms (dequantized over their cells; discrete=None fits them as "
                        "continuous): %s", ", ".join(
                            [f"{c} (step {h:g})" for c, h in zip(cells.columns, cells.step, strict=True)]
                            + [f"{c} = {v:g} (block {w:g})" for c, v, w in zip(cells.atom_columns, cells.atom_value,
                                                                               cells.atom_width, strict=True)]))
        self._pilot_sample, self._pilot_rows, self._pilot_keys = pilot, pilot.rows, pilot.keys
        return fitting

    def _auto_bounds(self, rows: np.ndarray, names: list[str]) -> ColumnBounds | None:
        """``bounds="auto"``: the bounds :func:`~tgpflow.features.edges.suggest_bounds` reads off the pilot's rows
        (just beyond them: a row on a bound would be a bad row), in the columns that are neither bounded nor
        discrete already; added to ``bounds_``. None when no column qualifies."""
        found = suggest_bounds(rows, names, self.bounds_)
        if not found:
            return None
        logger.info("bounds='auto': %s", ColumnBounds.from_param(found, names).describe())
        # beside the bounds already there (declared, discrete, atoms), which suggest_bounds left out
        merged = {**({} if self.bounds_ is None else self.bounds_.to_dict()), **found}
        self.bounds_ = self._with_cells(ColumnBounds.from_param(merged, names), names)
        return self.bounds_

    def _with_cells(self, bounds: ColumnBounds | None, names: list[str]) -> ColumnBounds | None:
        """``bounds`` with the discrete columns' bounds and cores (:meth:`LatticeCells.bounds_with`): once the pilot
        chose them, and wherever bounds are rebuilt from their JSON (``to_dict`` keeps the edges, not the cores)."""
        cells = getattr(self, "discrete_", None)
        return bounds if cells is None else cells.bounds_with(bounds, names)

    def fitting_source(self, source: Source) -> Source:
        """``source`` in the fitting space: standardized (``scaling_``), bounded columns transformed (rows on or
        beyond a bound, in the data's units, are bad rows), discrete columns dequantized first (``discrete_``, in the
        data's units)."""
        cells = getattr(self, "discrete_", None)
        if cells is not None:
            source = source.map_validated(functools.partial(dequantize_chunk, cells=cells))
        bounds = getattr(self, "bounds_", None)
        if bounds is None:
            return super().fitting_source(source)
        return source.map_validated(functools.partial(bounded_chunk, bounds=bounds, on_bad_rows=source.on_bad_rows,
                                                      scaling=getattr(self, "scaling_", None)))

    def _fit_bounds(self) -> ColumnBounds | None:
        """``bounds_`` (in the data's units) in the standardized units: the held-out grid projects rows mapped
        back through them (:class:`~tgpflow.stats.projections.ProjectionGrid`'s ``units``)."""
        bounds = getattr(self, "bounds_", None)
        return None if bounds is None else bounds.scaled(getattr(self, "scaling_", None))

    def _to_data(self, rows: np.ndarray) -> np.ndarray:
        """Rows of the fitting space in the data's units (the identity without bounds, scaling or discrete
        columns)."""
        to_data = self._data_map()
        return rows if to_data is None else to_data(rows)

    def _data_map(self) -> Any:
        """:func:`_data_units` of this estimator's bounds, scaling and discrete columns."""
        return _data_units(getattr(self, "bounds_", None), getattr(self, "scaling_", None),
                           getattr(self, "discrete_", None))

    def _raw_log_density(self, rows: np.ndarray) -> np.ndarray:
        return self.fitted().log_density(rows)

    @entry
    def fit_from_stats(self, stats: TGPStats | NCFDStats | StatsBundle,
                       features: RandomFourierFeatures | None = None) -> GPTiltedDensity:
        """Solve from statistics (no data access) with ``features``; by default the estimator's ``features_`` (set
        by ``accumulate`` or a fit: the statistics are checked against them), else — on a fresh estimator — the
        draw the statistics carry. Statistics do not record ``bounds=``: a fresh estimator must be given the bounds
        they were accumulated with (a bounded fit's sums are in its log/logit space). They do carry the discrete
        columns' lattices (``stats.cells``), which a fresh estimator takes as its ``discrete_``.

        A :class:`StatsBundle` (from a selecting ``accumulate``) first selects λ, η and γ on
        its validation parts, then solves on all rows with the chosen values. The solved model's
        normaliser and diagnostics follow (``normalizer_``, ``fit_diagnostics_``); a failed check
        warns with the fix (:class:`~tgpflow.models.diagnostics.DiagnosticWarning`).

        When λ was selected by a normalised criterion ("sliced", "loglik") and the all-rows fit fails
        the check the candidates passed — its normaliser rests on fewer than 1 % of its proposal draws,
        or it puts more mass outside the support box than the diagnostics allow (a λ can pass on the
        training part and not on all rows: θ is then dominated by directions the data barely
        determine; measured on the demo mixture at 2M rows: 3.3 % outside against a 3 % limit) —
        λ is raised along the grid until it passes; ``selection_["raised"]`` records each step.
        """
        self._solve_stats(stats, features)
        self._diagnose(warn=False)
        raised = []
        while True:
            lam_before, outside_before = self.lam_, self.fit_diagnostics_.get("mass_outside")
            reason = self._raise_lam()
            if not reason:
                break
            self._diagnose(warn=False)
            if reason == "outside" and not self.fit_diagnostics_.get("mass_outside", 0.0) < outside_before:
                # a smoother tilt did not pull mass back in (it is the base's own tails: measured on 600
                # rows, 5.4 % outside at λ = 1 and 6.5 % at 10): keep the chosen λ, and let the
                # diagnostics warn
                self._resolve_at(lam_before)
                self._diagnose(warn=False)
                break
            raised.append({"lam": self.lam_, "ess_fraction": self.normalizer_.ess_fraction,
                           "mass_outside": self.fit_diagnostics_.get("mass_outside")})
        if raised:
            self.selection_["raised"] = raised
            logger.info("raised λ to %g: the all-rows fit failed the selection's check (ESS, mass outside): %s",
                        self.lam_, raised)
        self._calibrate_codes()
        for message in self.fit_diagnostics_["warnings"]:
            warnings.warn(message, DiagnosticWarning, stacklevel=2)
        return self

    def _calibrate_codes(self) -> None:
        """Reweight the solved model's code frequencies to match the statistics' sums of each discrete column
        (:mod:`tgpflow.features.code_calibration`; docs/gp_tilted.md, "Calibrated code frequencies"): ``discrete_``
        then carries the weights, and ``fit_diagnostics_["code_calibration"]`` what it did. A calibration that
        cannot match the sums is not applied, and warns."""
        cells = getattr(self, "discrete_", None)
        if cells is None or cells.positions.size == 0 or not self._method.integrable:
            return
        bounds, scaling = getattr(self, "bounds_", None), getattr(self, "scaling_", None)
        self.discrete_ = cells.uncalibrated()  # the reference draws are the uncalibrated model's
        self.discrete_, result = calibrate_cells(
            cells, self.stats_.moments, functools.partial(_from_data_rows, bounds=bounds, scaling=scaling),
            self._to_data(self.stats_.moments.mean[None])[0],
            lambda: self._continuous_fitted(None).reference_sample(int(self.normalizer_draws), self._seeds()[7]))
        self.fit_diagnostics_["code_calibration"] = result.to_dict()
        if not result.matched:
            self.fit_diagnostics_["warnings"].append(
                f"the discrete columns' code frequencies could not be matched to the data's (a mismatch of "
                f"{result.residual:.2g} model standard deviations remains: the fit draws too few rows at a code "
                f"the data hold); its samples and scores keep the fit's own frequencies: raise normalizer_draws, "
                f"or fit the columns as continuous with discrete=None")

    def _raise_lam(self) -> str | None:
        """One step up the λ grid when a selected all-rows fit fails the candidates' check (see
        fit_from_stats; :func:`~tgpflow.models.tgp_selection.raised_lam`); returns why, or None when λ stays."""
        if self.lam != "auto" or self.criterion == "hyvarinen" or self.normalizer_ is None:
            return None
        step = raised_lam(self.selection_, self._lam_grid(), self.lam_, self.normalizer_.ess_fraction,
                          self.fit_diagnostics_.get("mass_outside"), self.fit_diagnostics_.get("mass_outside_limit"))
        if step is None:
            return None
        self._resolve_at(step[0])
        return step[1]

    def _resolve_at(self, lam: float) -> None:
        """Re-solve the all-rows fit at another λ of the grid (the selection's other choices kept)."""
        self.selection_["chosen"] = dict(self.selection_["chosen"], lam=lam)
        lam, eta = self._chosen_lam_eta(self.features_)
        self._set_solution(self.stats_, self.features_, self._base_of(self.stats_), lam, eta)

    def _solve_stats(self, stats: TGPStats | NCFDStats | StatsBundle, features: RandomFourierFeatures | None) -> None:
        features = self._solve_draw(stats, features)
        if not hasattr(self, "features_"):  # no draw of its own yet: bounds= as set now (a failed call leaves none)
            self._refuse_unknown_scaling()
            self.bounds_ = self._fresh_bounds(features.n_dims, stats)
            self.discrete_ = self._stats_cells(features.n_dims, stats)
        if isinstance(stats, StatsBundle):
            stats, features = self._select(stats, features)
        expected = self._method.stats_type
        if not isinstance(stats, expected):
            raise TypeError(f"method {self.method!r} needs {expected.__name__}, got {type(stats).__name__}"
                            + ("; use stats.fd for the σ = 0 part of an NCFD pass" if isinstance(stats, NCFDStats) else ""))
        stats.check_features(features)
        if hasattr(stats, "check_cells"):  # rows dequantized over the same cells as this model reads rows with
            stats.check_cells(getattr(self, "discrete_", None))
        if getattr(stats, "bounds", None) is not None:  # and transformed by the same bounds (none: older files)
            stats.check_bounds(getattr(self, "bounds_", None))
        if self._method.noise_conditional:
            if not hasattr(self, "noise_levels_"):
                self.noise_levels_ = stats.sigmas.copy()
            stats.check_features(features, self.noise_levels_)
        lam, eta = self._chosen_lam_eta(features)
        with phase("solve", method=self.method, n_features=features.n_features) as info:
            self._set_solution(stats, features, self._base_of(stats), lam, eta)
            info.update(solver=self.solver_info_.get("method"))

    def _verify_params(self) -> dict[str, Any]:
        """The parameters a re-solve of the stored statistics is made with: ``bounds="auto"`` as the fit resolved
        them (the discrete columns' come back from the statistics' cells)."""
        params = self.get_params()
        if self._bounds_auto:
            params["bounds"] = None if self.bounds_ is None else self.bounds_.to_pairs()
        return params

    def _fresh_names(self, d: int) -> list[str]:
        """The data's column names for an estimator that solves statistics: those it has seen, else x0 … x{d−1}."""
        names = getattr(self, "feature_names_in_", None)
        return [str(c) for c in names] if names is not None else [f"x{j}" for j in range(d)]

    def _stats_cells(self, d: int, stats: Any) -> LatticeCells | None:
        """The discrete columns that statistics carry, for an estimator that did not accumulate them (named by its
        columns where it has seen them), with ``bounds_`` widened by their cells' bounds."""
        cells = _carried(stats, "cells")
        if cells is None:
            return None
        names = self._fresh_names(d)
        cells = cells.named(names)
        self.bounds_ = cells.bounds_with(self.bounds_, names)
        return cells

    def _fresh_bounds(self, d: int, stats: Any) -> ColumnBounds | None:
        """``bounds=`` of an estimator that solves statistics it did not accumulate, sums in a fitting space that carry
        the bounds their rows were read with (``stats.bounds``): ``bounds="auto"`` and declared bounds of the same
        edges take those, linear tails included (other edges fail the solve); bounds by name need a fit's columns."""
        names, carried = self._fresh_names(d), _carried(stats, "bounds")
        if self._bounds_auto:
            return None if carried is None else carried.named(names)
        if self.bounds is not None and not hasattr(self, "feature_names_in_") and isinstance(self.bounds, dict):
            raise ValueError("bounds= names columns, but this estimator has not seen the data's columns: give one "
                             "(lower, upper) pair per column, or solve with the estimator that accumulated the "
                             "statistics")
        declared = ColumnBounds.from_param(self.bounds, names)
        same = declared is not None and carried is not None and carried.to_pairs() == declared.to_pairs()
        return carried.named(names) if same else declared

    # -- selection ----------------------------------------------------------------------
    def _lam_grid(self) -> list[float]:
        return lam_grid(self.criterion, self.lam_grid)

    def _chosen_lam_eta(self, features: RandomFourierFeatures) -> tuple[float, float | None]:
        if not self._method.selects:
            return math.nan, None
        chosen = getattr(self, "selection_", {}).get("chosen", {})
        lam = self._chosen_lam()
        eta = None
        if self._method.uses_eta:
            given = is_grid(self.eta) and "eta" in chosen
            eta = float(chosen["eta"]) if given else eta_values(self.eta, features.gamma)[0]
        return lam, eta

    def _selector(self) -> TGPSelector:
        """This estimator's held-out selection, as values (:mod:`tgpflow.models.tgp_selection`)."""
        return TGPSelector(self._method, self.get_params(), self._seeds, self._base_of, tuple(self._lam_values()),
                           box=getattr(self, "support_", None), heldout_grid=getattr(self, "heldout_grid_", None),
                           data_units=self._to_data, scaled=getattr(self, "scaling_", None) is not None,
                           suggested_bounds=getattr(self, "pilot_", {}).get("suggested_bounds"),
                           split_key=getattr(self, "split_key_", "global row position"))

    # -- solutions ----------------------------------------------------------------------
    def _set_solution(self, stats: Any, features: RandomFourierFeatures, base: Any, lam: float,
                      eta: float | None) -> None:
        self.stats_ = stats
        self.n_samples_seen_ = int(stats.n)
        self.lam_ = lam
        levels = getattr(self, "selection_", {}).get("chosen", {}).get("noise_levels")  # NCFD: the ladder's part
        sol = self._method.solve(stats, Hyper(features, base, lam, eta, self.get_params(), self._seeds()[2],
                                              None if levels is None else int(levels)))
        self.solver_info_ = sol.info
        if sol.objective is not None:
            self.objective_ = sol.objective
        if self._method.uses_eta:
            self.eta_ = sol.eta
        for name, value in sol.extra.items():
            setattr(self, name, value)
        self._diag_theta = sol.theta if sol.theta is not None else sol.fitted.theta
        self._set_fitted(sol.fitted)

    def _set_fitted(self, fitted: TGPFitted) -> None:
        """The estimator's attributes of a solved model, read off its Fitted value (a solve and a load share this)."""
        self._fitted = fitted
        self.features_ = fitted.features
        self.n_features_in_ = fitted.features.n_dims
        self.bandwidth_ = fitted.features.gamma
        if fitted.theta is not None:
            self.theta_ = fitted.theta
        if fitted.M_chol is not None:
            self.predictive_chol_, self.predictive_v_ = fitted.M_chol, fitted.v
        self.mean_, self.covariance_, self.precision_ = fitted.base.mean, fitted.base.cov, fitted.base.precision
        if fitted.base.mixture is not None:
            self.base_mixture_ = fitted.base.mixture

    # -- diagnostics ------------------------------------------------------------------------
    def _diagnose(self, warn: bool = True) -> None:
        """``normalizer_`` and ``fit_diagnostics_`` of the solved model (:mod:`tgpflow.models.diagnostics`)."""
        method = self._method
        if not method.integrable:  # e.g. the RFF kernel sum does not decay: no normaliser on ℝ^d
            self.normalizer_ = None
            self.fit_diagnostics_ = {"warnings": [], "note": f"{method.name.upper()} is not integrable on R^d: "
                                                              f"no normaliser"}
            return
        box = getattr(self, "support_", None)
        with phase("diagnose", draws=int(self.normalizer_draws)) as info:
            est = self.log_normalizer()
            info.update(ess_fraction=round(est.ess_fraction, 4), mass_outside=est.mass_outside)
        extra: dict[str, Any] = {"theta_norm": float(np.linalg.norm(self._diag_theta)), "lam": self.lam_}
        more, warns = method.diagnostics(self.solver_info_, self.get_params())
        extra.update(more, warnings=warns)
        fix = remedies(lam=self.lam, lam_fitted=self.lam_, box=box, scaled=getattr(self, "scaling_", None) is not None,
                       suggested_bounds=getattr(self, "pilot_", {}).get("suggested_bounds"),
                       base_outside=base_outside(getattr(self, "selection_", {}).get("curve", [])))
        self.normalizer_ = est
        self.fit_diagnostics_ = fit_diagnostics(est, box, what=f"the {self.method.upper()} fit", fix=fix,
                                                extra=extra, warn=warn)

    def log_normalizer(self, *, sigma: float | None = None, n_draws: int | None = None,
                       random_state: Any = None) -> NormalizerEstimate:
        """log Z of the fitted (unnormalised) density by importance sampling from its base (MATH.md §5).

        Returns a :class:`~tgpflow.solve.normalizer.NormalizerEstimate`: ``log_z``, its standard
        error, the ESS of the proposal draws, the model's mean and spread and (when the fit recorded
        the data's support box) its mass outside that box. Defaults: ``normalizer_draws`` draws
        from the estimator's seed — the value stored in ``normalizer_`` after a fit. ``sigma``:
        the NCFD level.
        """
        ev = self._level(sigma)
        if ev.kde_weights is not None:
            raise ValueError("the KDE-RFF estimate φ(x)ᵀψ/N does not decay away from the data: it has no "
                             "normaliser on R^d")
        box = getattr(self, "support_", None)
        return estimate_log_normalizer(
            ev.log_density, ev.base, n_draws=int(n_draws or self.normalizer_draws),
            random_state=self._seeds()[3] if random_state is None else random_state,
            outside=None if box is None else box.outside, data_units=self._to_data)

    # -- evaluation -------------------------------------------------------------------
    def fitted(self, sigma: float | None = None) -> Fitted:
        """The fitted model as a :class:`~tgpflow.models.fitted.Fitted` value, on rows in the data's units:
        ``log_density``, ``grad_log_density``, ``hyvarinen_terms``, ``sample``, ``to_arrays``. ``sigma``
        (NCFD only): the model at noise level σ ≥ 0 (MATH.md §3), in the standardized units with a scaling."""
        cells = getattr(self, "discrete_", None)
        if cells is not None and sigma:  # the calibration matched the data's codes at σ = 0, not a noisier level
            cells = cells.uncalibrated()
        return with_lattice(self._continuous_fitted(sigma), cells)

    def _continuous_fitted(self, sigma: float | None) -> Fitted:
        """:meth:`fitted` before its discrete columns become cells: the density of the dequantized rows."""
        ev, bounds, scaling = self._level(sigma), getattr(self, "bounds_", None), getattr(self, "scaling_", None)
        if bounds is None:
            return in_data_units(ev, scaling)
        # the transform in the data's units, then its values standardized (ColumnBounds.transformed_scaling)
        return BoundedFitted(in_data_units(ev, bounds.transformed_scaling(scaling)), bounds)

    def _level(self, sigma: float | None) -> TGPFitted:
        """The fitted model at level σ in the fitting space (bounded columns transformed)."""
        check_is_fitted(self, "_fitted")
        if sigma is None or sigma == 0:
            return self._on_device(self._fitted)
        if not self._method.noise_conditional:
            raise ValueError(f"sigma is defined for the noise-conditional model (method='ncfd'), not {self.method!r}")
        if not (isinstance(sigma, numbers.Real) and math.isfinite(sigma) and sigma > 0):
            raise ValueError(f"sigma must be a number >= 0; got {sigma!r}")
        return self._on_device(self._fitted.at_level(float(sigma)))

    def _evaluate(self, X: Any, which: str, sigma: float | None = None) -> Any:
        return self._map_rows(X, getattr(self.fitted(sigma), which), per_row_dims=which == "grad_log_density")

    def log_density(self, X: Any, sigma: float | None = None, *, normalized: bool = False) -> Any:
        """Log density, shape (n,); lazy for dask/Parquet/Zarr input.

        Unnormalised by default (the papers' closed forms). ``normalized=True`` subtracts the
        importance-sampling estimate of log Z (``normalizer_``; see :meth:`log_normalizer` for
        its standard error): a log-likelihood comparable across models and with other libraries.
        ``sigma`` (NCFD only): the noise-conditional density at level σ ≥ 0 (MATH.md §3);
        σ = 0 (the default) is the data-level density.
        """
        values = self._evaluate(X, "log_density", sigma)
        if not normalized:
            return values
        if sigma not in (None, 0):
            return values - self.log_normalizer(sigma=sigma).log_z
        if getattr(self, "normalizer_", None) is None:
            raise ValueError(f"method {self.method!r} has no normaliser (its estimate, e.g. KDE-RFF's, is not "
                             f"integrable)")
        return values - self.normalizer_.log_z

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
        seed = self.random_state if random_state is None else random_state
        n_prop = proposal_count(n_samples, n_proposals)
        rows, ess = self.fitted(sigma).sample(int(n_samples), seed, n_proposals=int(n_prop), return_ess=True)
        self.last_sample_ess_ = ess
        self.last_sample_info_ = {"method": "importance resampling from the base", "ess": ess,
                                  "n_proposals": int(n_prop), "ess_fraction": ess / int(n_prop)}
        if ess / int(n_prop) < MIN_ESS_FRACTION:
            warnings.warn(f"sample(): only {ess:.0f} effective draws among {n_prop} base proposals "
                          f"({100 * ess / n_prop:.3g}% < {100 * MIN_ESS_FRACTION:g}%): the rows repeat a few proposals "
                          f"and do not represent the model; raise lam (or lam='auto'), or sample by MCMC from the "
                          f"base (tgpflow.sample.mcmc_sample)", DiagnosticWarning, stacklevel=2)
        return rows

    def base_draws(self, n_samples: int, random_state: Any = None) -> np.ndarray:
        """``n_samples`` draws of the model's Gaussian base N(μ, Σ), in the data's units (e.g. MCMC starts)."""
        return self.fitted().base_draws(n_samples, self.random_state if random_state is None else random_state)

    def reference_sample(self, n_samples: int = 250_000, random_state: Any = 0,
                         sigma: float | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Base draws (in the data's units) and their normalised importance weights ∝ q̃(ζ)/N(ζ|μ,Σ):
        the weighted reference sample of the sliced metrics (seed 003 §IV; MATH.md §5)."""
        return self.fitted(sigma).reference_sample(n_samples, random_state)

    # -- persistence ------------------------------------------------------------------
    #: A model file keeps the Fitted value's arrays under the estimator's attribute names (model_file).
    _FILE_NAMES = {"theta": "theta_", "M_chol": "predictive_chol_", "v": "predictive_v_", "kde_weights": "kde_weights_",
                   "base.mean": "mean_", "base.cov": "covariance_", "base.precision": "precision_"}
    #: The statistics a model file may hold (and a registered method's own).
    _STATS_KINDS = {"TGPStats": TGPStats, "NCFDStats": NCFDStats}

    def _model_meta(self) -> dict[str, Any]:
        return {
            "fingerprint": self.features_.fingerprint,
            "feature_seed": self.features_.seed,
            "n_rows_dropped": int(getattr(self, "n_rows_dropped_", 0)),
            "objective": getattr(self, "objective_", None),
            "eta": getattr(self, "eta_", None),
            "lam": self.lam_ if self._method.selects else None,
            "solver_info": self.solver_info_,
            "bounds": None if getattr(self, "bounds_", None) is None else self.bounds_.to_record(),
            "discrete": None if getattr(self, "discrete_", None) is None else self.discrete_.to_dict(),
            "pilot": getattr(self, "pilot_", {}),
        }

    def _solution_extra(self) -> dict[str, np.ndarray]:
        """The method's solution attributes beyond the Fitted value (``extra_arrays``: FVPD's posterior, NCFD's levels)."""
        return {name: getattr(self, name) for name in self._method.extra_arrays}

    @classmethod
    def _from_artifact(cls, arrays: dict[str, np.ndarray], meta: dict[str, Any], path: Path,
                       verify: bool = False) -> GPTiltedDensity:
        """The model of a verified artifact, read from its stored solution (no solve; ``verify``: re-solve
        the stored statistics and compare)."""
        params = dict(meta["params"])
        if "discrete" not in meta:  # written before discrete columns: fitted on every column as continuous
            params["discrete"] = None
        if params.get("method") == "map":  # files before map_points solved MAP on base draws (seed 003 Alg 1)
            params.setdefault("map_points", "base")
        est = cls(**params)
        method = est._method
        stats = stored_stats(arrays, meta, {**cls._STATS_KINDS, method.stats_type.__name__: method.stats_type})
        solution = method.legacy_solution(fitted_arrays(arrays, cls._FILE_NAMES), stats)
        est._set_fitted(read_fitted(TGPFitted, solution, meta, path, {"block_bytes": int(est.block_bytes),
                                                                      "feature_seed": meta.get("feature_seed")}))
        est._restore_meta(meta)
        est.stats_ = stats if stats is None else stats.with_draw(est._fitted.draw)  # the file stores the draw once
        est.lam_ = math.nan if meta.get("lam") is None else float(meta["lam"])
        est.solver_info_ = meta.get("solver_info") or {}
        if meta.get("objective") is not None:
            est.objective_ = float(meta["objective"])
        if method.uses_eta:
            est.eta_ = meta.get("eta")
        for name in method.extra_arrays:
            setattr(est, name, np.asarray(arrays[f"fitted.{name}"], dtype=np.float64))
        if verify:
            est._verify(path, arrays, legacy=meta.get("layout") is None)
        return est

    def _restore_meta(self, meta: dict[str, Any]) -> None:
        """What a fit recorded beside its solution, as stored: what every model file holds, the pilot, the rows
        dropped and the bounds (a load re-estimates nothing)."""
        self._restore_common(meta)
        self.pilot_ = meta.get("pilot", {})
        self.n_rows_dropped_ = meta.get("n_rows_dropped", 0)
        stored = meta.get("bounds")
        self.discrete_ = LatticeCells.from_dict(meta.get("discrete"))
        self.bounds_ = None if not stored else self._with_cells(ColumnBounds.from_record(stored), stored["columns"])
