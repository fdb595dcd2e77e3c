"""Kernel exponential families and kernel score estimators on a Nyström basis ([Sutherland et al.],
[Zhou et al.]).

``ScoreEstimator(kernel, regularizer)`` fits ``s(x) = Σ_a K(x, Y_a) c_a + ∇log q0(x)`` from one
pass of :class:`~tgpflow.stats.kef.KEFStats` (curl-free K) or
:class:`~tgpflow.stats.kef.DiagStats` (diagonal K = k I_d), then applies a regularizer after
the pass (docs/mathematics.md, "Score estimators on a Nyström basis"). :class:`~tgpflow.models.nystrom_kef.NystromKEF`
is the curl-free Tikhonov case with [Sutherland et al.]'s solve and a log density ``f(x) + log q0(x)``
(docs/mathematics.md, "Nyström kernel exponential family"). Named presets (``ScoreEstimator.preset("stein")`` …) follow
docs/mathematics.md, "Score estimators on a Nyström basis".

The basis Y is ``n_basis`` rows drawn uniformly (seeded) from the pilot sample, or given
(``fit(X, basis=Y)``); σ_k is the median heuristic on the pilot sample unless given; the
Gaussian base uses the exact moments of the pass. float64 throughout.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import numpy as np
from sklearn.utils.validation import check_is_fitted

from tgpflow.core.backend import on_device
from tgpflow.core.engine import Progress
from tgpflow.core.gaussian_base import Base, base_from_moments
from tgpflow.core.logs import logger, phase
from tgpflow.core.memory import DEFAULT_BLOCK_BYTES
from tgpflow.features.kernels import median_heuristic
from tgpflow.features.nystrom import NystromBasis
from tgpflow.features.scaling import Scaling
from tgpflow.io.degenerate import check_pilot_rows
from tgpflow.io.pilot import DEFAULT_PILOT_ROWS, LazyPilot
from tgpflow.io.sources import Source
from tgpflow.models.diagnostics import fit_diagnostics, remedies
from tgpflow.models.estimator_base import StatsEstimator, entry
from tgpflow.models.evaluation import ScoreEvaluation
from tgpflow.models.kernel_fitted import KernelFitted
from tgpflow.models.kernel_forms import KernelForm, kernel_form
from tgpflow.models.kernel_full_sample import FULL_SAMPLE_PATH, fit_full_sample, full_sample_rows
from tgpflow.models.kernel_selection import KernelSelector
from tgpflow.models.model_file import fitted_arrays, read_fitted, stored_stats
from tgpflow.models.params import ScoreParams
from tgpflow.models.streaming import StreamingMixin, is_grid
from tgpflow.models.tgp_fitted import base_arrays
from tgpflow.solve.kef import DEFAULT_RANK_TOL, kernel_solve
from tgpflow.solve.normalizer import DEFAULT_NORMALIZER_DRAWS, NormalizerEstimate, estimate_log_normalizer
from tgpflow.stats.kef import DiagStats, KEFStats
from tgpflow.stats.split import SPLIT_SALT, StatsBundle, split_chunk_stats
from tgpflow.stats.support import SupportBox

__all__ = ["ScoreEstimator", "PRESETS"]

#: λ grid of ``lam="auto"``: 13 values, 10⁻⁶ … 1, two per decade.
DEFAULT_KERNEL_LAM_GRID = tuple(float(v) for v in np.logspace(-6, 0, 13))
#: Landweber's default grid stops at this λ (t = ⌊1/λ⌋ = 10⁴ steps).
LANDWEBER_MIN_LAM = 1e-4

#: Named estimators of docs/mathematics.md, "Score estimators on a Nyström basis" (kernel, regularizer).
PRESETS = {"stein": ("diagonal", "tikhonov"), "ssge": ("diagonal", "cutoff"), "nkef": ("curl_free", "tikhonov"),
           "nu_method": ("curl_free", "nu"), "landweber": ("curl_free", "landweber")}


class ScoreEstimator(ScoreEvaluation, StreamingMixin, StatsEstimator):
    """Kernel score estimator on a Nyström basis ([Zhou et al.] in the streamed form of docs/mathematics.md, "Score
    estimators on a Nyström basis").

    The parameters below are read off its table, :class:`~tgpflow.models.params.ScoreParams`, which checks them.
    """

    params_table = ScoreParams
    _DRAW = "basis_"
    _FIT_STATE = ("basis_", "stats_", "selection_", "support_", "_fitted")
    _NO_DRAW = ("fit_from_stats needs the basis the statistics were computed with, and these statistics do not carry "
                "it (read from a file written before statistics carried their draw): pass basis=… (the NystromBasis "
                "they were accumulated on, e.g. est.basis_ of that model)")

    def __init__(self, *, kernel: str = "curl_free", regularizer: str = "tikhonov", n_basis: int = 100,
                 bandwidth: str | float | list[float] = "median", lam: float | str = 1e-3, base: str = "flat",
                 radial: str = "gaussian", nu: float = 1.0, step: float | None = None, ridge: float = 0.0,
                 rank_tol: float = DEFAULT_RANK_TOL, lam_grid: list[float] | None = None,
                 validation_fraction: float = 0.1, pilot_rows: int = DEFAULT_PILOT_ROWS, on_bad_rows: str = "raise",
                 block_bytes: int = DEFAULT_BLOCK_BYTES, split_every: int = 8, random_state: int | None = 0,
                 device: str = "auto", scale: bool = False):
        self.device = device
        self.scale = scale
        self.kernel = kernel
        self.lam_grid = lam_grid
        self.validation_fraction = validation_fraction
        self.regularizer = regularizer
        self.n_basis = n_basis
        self.bandwidth = bandwidth
        self.lam = lam
        self.base = base
        self.radial = radial
        self.nu = nu
        self.step = step
        self.ridge = ridge
        self.rank_tol = rank_tol
        self.pilot_rows = pilot_rows
        self.on_bad_rows = on_bad_rows
        self.block_bytes = block_bytes
        self.split_every = split_every
        self.random_state = random_state

    @classmethod
    def preset(cls, name: str, **params: Any) -> Any:
        """A named estimator of [Zhou et al.] (Zhou, Shi & Zhu, *Nonparametric Score Estimators*; docs/mathematics.md,
        "Score estimators on a Nyström basis") on a Nyström basis of ``n_basis`` points ([Zhou et al.] §3.4's P_Z
        projection; with ``basis=X`` it is the paper's full-sample estimator at the samples). ``params`` are passed on.
        Each paper's hyperparameters, converted (k(x, y) = exp(−‖x − y‖²/σ_k) throughout: a length-scale ℓ in exp(−‖x −
        y‖²/2ℓ²) is σ_k = 2ℓ²):

        * ``"stein"`` — the Stein gradient estimator (Li & Turner 2018; [Zhou et al.] Example 3.7, Table 1):
          diagonal kernel k I_d, Tikhonov. Li & Turner's ridge η in ``(K + ηI)⁻¹`` is ``lam = η/N``
          (N rows); at the samples with ``basis=X`` the fit is their ``−(K + ηI)⁻¹⟨∇, K⟩``, and out of sample
          [Zhou et al.]'s principled extension ``k(x, X)c``.
        * ``"ssge"`` — the spectral Stein gradient estimator (Shi et al. 2018; [Zhou et al.] Example 3.6, eq 15):
          diagonal kernel, spectral cut-off. Keeping Shi et al.'s J leading eigenfunctions of the Gram K
          is ``lam`` in (λ_{J+1}(K)/N, λ_J(K)/N] (the threshold is on the eigenvalues of K/N: docs/mathematics.md,
          "Where the papers differ", item C4).
        * ``"nkef"`` — the Nyström kernel exponential family (Sutherland et al. 2018 = [Sutherland et al.]; [Zhou et
          al.] §3.4, Table 1 "NKEF"): curl-free kernel, Tikhonov. [Sutherland et al.]'s λ in ``Ĵ(f) + (λ/2)‖f‖²`` is
          ``lam`` unchanged (docs/mathematics.md, "Score estimators on a Nyström basis"); its ε = 1e-5 ridge is
          ``ridge=1e-5`` (off by default); m = ``n_basis``.
        * ``"nu_method"`` — the iterative curl-free estimator with the ν-method ([Zhou et al.] §3.2, §3.5 Example 3.8,
          appendix C.4.3; Engl, Hanke & Neubauer Alg 6.13): t iterations are ``lam = 1/t²`` (t = ⌊λ^{−1/2}⌋),
          ν is ``nu``; the paper's ρ ≥ ‖T‖ is 1.05 × ‖T‖ by Lanczos, so that t steps are t steps on any data
          (``step=1.0``: the papers' code, kscore's ρ = 1 in the kernel's units; docs/mathematics.md, "What λ means
          for the iterations").
        * ``"landweber"`` — Landweber iteration ([Zhou et al.] §3.2 eq 13, Theorem 3.4 with the sign of
          docs/mathematics.md, "Where the papers differ", item C1), curl-free kernel: t iterations are ``lam = 1/t`` (t
          = ⌊1/λ⌋); the step η = 1/(1.05‖T‖), or ``step``.

          Both iterations apply T by mat-vecs with the stored C and the Cholesky factor of G (no
          eigendecomposition where G is numerically definite: :func:`~tgpflow.solve.kef.spectral_solve`).
          With ``basis=X`` (the array X itself, in memory) the fit is [Zhou et al.]'s full-sample estimator by
          kernel mat-vecs alone: no pass, no nd × nd matrix, O(n²d) a step, Landweber's many steps through a
          Lanczos projection (:mod:`tgpflow.models.kernel_full_sample`; ``solver_info_["path"]`` says so).
        * ``"kef"`` / ``"kef_cg"`` — the full (non-Nyström, in-memory, small n) kernel exponential family
          (Sriperumbudur et al. 2017; [Zhou et al.] Example 3.5, §3.5 KEF-CG), as :class:`FullKEF` with
          ``solver="auto"`` (direct where it fits in memory, else CG, logged) or ``"cg"``; its λ is ``lam``.
        """
        if name in ("kef", "kef_cg"):
            from tgpflow.models.full_kef import FullKEF

            return FullKEF(solver="auto" if name == "kef" else "cg", **params)
        if name not in PRESETS:
            raise ValueError(f"unknown preset {name!r}; choose from {sorted(PRESETS) + ['kef', 'kef_cg']}")
        kernel, regularizer = PRESETS[name]
        return cls(kernel=kernel, regularizer=regularizer, **params)

    # -- the basis ----------------------------------------------------------------------
    def _make_basis(self, source: Any, given: Any, lazy: LazyPilot) -> NystromBasis:
        """The basis: ``given`` (a basis, or its points), else points drawn from the pilot sample ``lazy`` of the
        fitting ``source``, which a median bandwidth also reads."""
        if isinstance(given, NystromBasis):
            return given
        need_pilot = given is None or self.bandwidth == "median"
        rows = None
        if need_pilot:
            with phase("pilot", chunks=source.n_chunks) as info:
                pilot = lazy.get()
                rows = pilot.rows
                info.update(rows=rows.shape[0])
            check_pilot_rows(pilot, source.description, 2, "a kernel model")
        if given is None:
            m = min(int(self.n_basis), rows.shape[0])
            if m < self.n_basis:
                logger.warning("n_basis=%d but only %d pilot rows: using %d basis points", self.n_basis, m, m)
            pick = np.random.default_rng(np.random.SeedSequence(self.random_state).spawn(1)[0])
            Y = rows[np.sort(pick.choice(rows.shape[0], m, replace=False))]
        else:
            Y = np.asarray(given, dtype=np.float64)
            if Y.ndim != 2 or Y.shape[1] != source.n_columns:
                raise ValueError(f"basis must be an (m, {source.n_columns}) array; got shape {Y.shape}")
        if self.bandwidth == "median":
            bw = median_heuristic(rows, random_state=self.random_state)
        else:  # a grid shares Y; each σ_k is applied in the pass
            bw = float(self.bandwidth[0]) if is_grid(self.bandwidth) else float(self.bandwidth)
        shift = rows.mean(axis=0) if rows is not None else Y.mean(axis=0)
        return NystromBasis(Y, bw, self.radial, shift)

    @property
    def _form(self) -> KernelForm:
        """The kernel model this estimator fits (:mod:`tgpflow.models.kernel_forms`): its ``kernel``."""
        return kernel_form(self.kernel)

    @property
    def _runs_on_gpu(self) -> bool:  # type: ignore[override]
        """The pass and evaluation run on a GPU (docs/gpu.md), except with dimension subsampling (``n_components``,
        or a given basis that has it)."""
        basis = getattr(self, "basis_", None)
        return getattr(self, "n_components", None) is None and (basis is None or basis.components is None)

    def _chunk_fn(self) -> Any:
        """The statistics function of one chunk; on the device, each chunk goes there inside its task."""
        fn = self._form.chunk_stats
        target = self._device_target()
        return fn if target is None else functools.partial(on_device, target, fn)

    def _draw_from_pilot(self, fitting: Source, pilot: LazyPilot, progress: Progress | None) -> None:
        """:meth:`prepare`'s draw: the basis (and the box of the pilot rows it was drawn from)."""
        self.basis_ = self._make_basis(fitting, None, pilot)
        self.n_features_in_ = fitting.n_columns
        self._set_support(pilot)

    def _pass_spec(self) -> tuple[Any, tuple[Any, ...], bool]:
        """(chunk statistics function, its arguments after the rows, whether it takes row keys) for the fitted
        basis; with a selection pending (``lam="auto"``, a bandwidth grid), the hashed train/validation split of
        :func:`~tgpflow.stats.split.split_chunk_stats`, every bandwidth of the grid in it."""
        fn, args = self._chunk_fn(), (int(self.block_bytes),)
        if not self._split_pending:
            return fn, (self.basis_, *args), False
        parts = {b: (self.basis_.with_bandwidth(b), *args) for b in self._bandwidths(self.basis_.bandwidth)}
        return split_chunk_stats, (float(self.validation_fraction), SPLIT_SALT, fn, parts, None, None), True

    def _frozen_draw(self) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        """The Nyström basis (:meth:`~tgpflow.models.streaming.StreamingMixin.plan`)."""
        basis = self.basis_
        meta = {"type": "nystrom", "kernel": basis.kernel_name, "fingerprint": basis.fingerprint}
        return dict(basis.to_arrays()), meta

    def _restore_draw(self, arrays: dict[str, np.ndarray], meta: dict[str, Any], columns: list[str] | None) -> None:
        self.basis_ = NystromBasis.from_arrays(arrays, meta["kernel"])

    # -- the public pieces --------------------------------------------------------------
    @entry
    def accumulate(self, X: Any, *, columns: list[str] | None = None, basis: Any = None,
                   scaling: Scaling | None = None, progress: Progress | None = None) -> KEFStats | DiagStats:
        """One pass: the statistics of the rows of X on the basis (given, fitted, or drawn from a pilot), in the
        standardized units of the fitted ``scaling_`` (on a fresh estimator: ``scaling``, or from the pilot with
        ``scale=True``). ``progress``: see :meth:`fit`."""
        return self._accumulate(X, columns, basis, scaling, progress)[0]

    def _accumulate(self, X: Any, columns: list[str] | None, basis: Any, scaling: Scaling | None,
                    progress: Progress | None) -> tuple[KEFStats | DiagStats, LazyPilot]:
        """:meth:`accumulate`, with the pilot sample it read (or not) to draw the basis."""
        fitted = hasattr(self, "basis_")
        source, lazy = self._fitting_source_of(X, columns, scaling, fitted, progress)
        if basis is None and fitted:
            basis = self.basis_
        else:
            basis = self._make_basis(source, basis, lazy)
        if basis.n_dims != source.n_columns:
            raise ValueError(f"the basis is in d={basis.n_dims} but the data have {source.n_columns} columns")
        self.basis_ = basis
        variants = None
        if self._split_pending:  # a first fit, or statistics for a prepared basis (as its chunk_tasks make them)
            variants = {b: basis.with_bandwidth(b) for b in self._bandwidths(basis.bandwidth)}
        stats = self._stream_pass(source, self._chunk_fn(), basis, (int(self.block_bytes),), variants,
                                  progress=progress, n_basis=basis.n_basis, kernel=self._form.name)
        return stats, lazy

    @property
    def _selecting(self) -> bool:
        """Whether a held-out selection is asked for (λ = "auto", or a bandwidth grid)."""
        return self.lam == "auto" or is_grid(self.bandwidth)

    @entry
    def fit(self, X: Any, y: Any = None, *, columns: list[str] | None = None, basis: Any = None,
            scaling: Scaling | None = None, progress: Progress | None = None) -> ScoreEstimator:
        """Fit from any source; ``basis``: an (m, d) array of basis points or a NystromBasis (in the fitting
        units); ``scaling``: a frozen standardization to fit in (with ``scale=True`` one is taken from the pilot;
        rows in and out stay in the data's units either way, :mod:`tgpflow.features.scaling`). ``progress`` is
        called with the futures of each distributed compute of the fit (the pilot, the pass), e.g.
        ``distributed.progress`` (:data:`tgpflow.core.engine.Progress`)."""
        self._forget(*self._FIT_STATE)
        full = full_sample_rows(self, X, basis, columns, scaling)
        if full is not None:  # every row a basis point: the matrix-free iterations (kernel_full_sample)
            return self._fit_full_sample(*full)
        stats, lazy = self._accumulate(X, columns, basis, scaling, progress)
        self.n_rows_dropped_ = self.last_rows_dropped_
        self._set_support(lazy)
        return self.fit_from_stats(stats)

    def _fit_full_sample(self, rows: np.ndarray, names: list[str]) -> ScoreEstimator:
        """:meth:`fit` with the basis every row of in-memory X (:mod:`tgpflow.models.kernel_full_sample`)."""
        self._forget("feature_names_in_", "scaling_")
        if names:
            self.feature_names_in_ = np.asarray(names, dtype=object)
        with phase("solve", kernel=self._form.name, regularizer=self.regularizer, n_basis=rows.shape[0],
                   path=FULL_SAMPLE_PATH):
            self.lam_ = float(self.lam)
            fitted, self.solver_info_ = fit_full_sample(self, rows, names)
        self.coef_ = fitted.coef
        self.stats_ = None
        self.n_rows_dropped_ = self.last_rows_dropped_ = 0
        self.n_samples_seen_ = int(rows.shape[0])
        self.support_ = SupportBox.from_rows(rows)
        self._set_fitted(fitted)
        self._diagnose()
        return self

    def _set_support(self, pilot: LazyPilot) -> None:
        """``support_``: the box of the pilot rows in the data's units, where they were read (to draw the basis)."""
        rows = None if pilot.sample is None else pilot.sample.rows
        if rows is not None and rows.shape[0] > 1:
            scaling = getattr(self, "scaling_", None)
            self.support_ = SupportBox.from_rows(rows if scaling is None else scaling.inverse(rows))

    @entry
    def fit_from_stats(self, stats: KEFStats | DiagStats, basis: NystromBasis | None = None) -> ScoreEstimator:
        """Solve from statistics (no data access) on ``basis``; by default the estimator's ``basis_`` (set by
        ``accumulate`` or a fit: the statistics are checked against it), else — on a fresh estimator — the basis
        the statistics carry. A proper density (Gaussian base, curl-free kernel) then gets its normaliser and fit
        diagnostics."""
        if not hasattr(self, "basis_"):
            self._refuse_unknown_scaling()
        self._solve_stats(stats, basis)
        self._diagnose()
        return self

    def _solve_stats(self, stats: KEFStats | DiagStats, basis: NystromBasis | None) -> None:
        basis = self._solve_draw(stats, basis)
        if isinstance(stats, StatsBundle):
            stats, basis = self._select(stats, basis)
        expected = self._form.stats_type
        if not isinstance(stats, expected):
            raise TypeError(f"this model ({self._form.name}) needs {expected.__name__}, got {type(stats).__name__}")
        stats.check_basis(basis)
        names = tuple(getattr(self, "feature_names_in_", ())) or None
        base = base_from_moments(stats.moments, names) if self.base == "gaussian" else None
        with phase("solve", kernel=self._form.name, regularizer=self.regularizer, n_basis=basis.n_basis):
            self.lam_ = self._chosen_lam()
            self.coef_, self.solver_info_ = self._solve(stats, basis, base, self.lam_)
        self.stats_ = stats
        self.n_samples_seen_ = int(stats.n)
        self._set_fitted(KernelFitted(basis, self._form.name, self.coef_, base))

    def _set_fitted(self, fitted: KernelFitted) -> None:
        """The estimator's attributes of a solved model, read off its Fitted value (a solve and a load share this)."""
        self._fitted = fitted
        self.basis_, self.coef_, self.base_ = fitted.basis, fitted.coef, fitted.base
        self.n_features_in_ = fitted.basis.n_dims
        self.bandwidth_ = fitted.basis.bandwidth

    # -- normaliser and diagnostics -------------------------------------------------------
    @property
    def _normalisable(self) -> bool:
        """A proper density with a Gaussian base to draw from: a curl-free (or lite) field on q0 = N(μ0, Σ0)."""
        return self._form.has_density and self.base == "gaussian"

    def log_normalizer(self, *, n_draws: int = DEFAULT_NORMALIZER_DRAWS, random_state: Any = None) -> NormalizerEstimate:
        """log Z of ``f + log q0`` by importance sampling from q0 (weights e^f; :mod:`tgpflow.solve.normalizer`).

        With a flat base the model is improper (e^f → 1 far from the basis: Z = ∞); a diagonal-kernel
        score has no density.
        """
        check_is_fitted(self, "_fitted")
        if not self._normalisable:
            raise ValueError(f"a {type(self).__name__} with kernel={self._form.name!r} and base={self.base!r} has no "
                             f"finite normaliser: fit with base='gaussian' (and a curl-free kernel)")
        box = getattr(self, "support_", None)
        scaling = getattr(self, "scaling_", None)
        seed = np.random.SeedSequence(self.random_state).spawn(3)[2] if random_state is None else random_state
        return estimate_log_normalizer(self._fitted.log_density, self.base_, n_draws=int(n_draws),
                                       random_state=seed, outside=None if box is None else box.outside,
                                       data_units=None if scaling is None else scaling.inverse)

    def _diagnose(self) -> None:
        if not self._normalisable:
            self.normalizer_ = None
            self.fit_diagnostics_ = {"warnings": [], "note": "no normaliser: flat base or a diagonal kernel"}
            return
        with phase("diagnose", draws=DEFAULT_NORMALIZER_DRAWS):
            self.normalizer_ = self.log_normalizer()
        fix = remedies(lam=self.lam, lam_fitted=self.lam_, box=getattr(self, "support_", None),
                       scaled=getattr(self, "scaling_", None) is not None, suggested_bounds=None)
        self.fit_diagnostics_ = fit_diagnostics(self.normalizer_, getattr(self, "support_", None),
                                                what=f"the {type(self).__name__} fit", fix=fix,
                                                extra={"lam": self.lam_})

    def base_draws(self, n_samples: int, random_state: Any = None) -> np.ndarray:
        """``n_samples`` draws of the Gaussian base q0 (MCMC starts; needs base='gaussian')."""
        check_is_fitted(self, "_fitted")
        if self.base_ is None:
            raise ValueError("a flat base has no draws: pass start points (init=...)")
        return self.fitted().base_draws(n_samples, self.random_state if random_state is None else random_state)

    def _lam_grid(self) -> list[float]:
        if self.lam_grid is not None:
            return [float(v) for v in self.lam_grid]
        if self.regularizer == "landweber":  # t = ⌊1/λ⌋ mat-vecs: 10⁶ steps at λ = 10⁻⁶
            return [float(v) for v in DEFAULT_KERNEL_LAM_GRID if v >= LANDWEBER_MIN_LAM * (1 - 1e-12)]
        return list(DEFAULT_KERNEL_LAM_GRID)

    def _selector(self) -> KernelSelector:
        return KernelSelector(self._form.name, self._lam_values(), self.base == "gaussian", self._solve)

    def _solve(self, stats: Any, basis: NystromBasis, base: Base | None,
               lam: float) -> tuple[np.ndarray, dict[str, Any]]:
        return kernel_solve(self._form.name, stats, basis, base, lam, regularizer=self.regularizer,
                            ridge=float(self.ridge), rank_tol=float(self.rank_tol), nu=float(self.nu),
                            step=self.step)

    # -- persistence ------------------------------------------------------------------
    #: A model file keeps the Fitted value's arrays under these names (model_file); β as ``coef_``.
    _FILE_NAMES = {"coef": "coef_"}

    def _model_meta(self) -> dict[str, Any]:
        return {"fingerprint": self.basis_.fingerprint, "radial": self.basis_.kernel_name, "lam": self.lam_,
                "solver_info": self.solver_info_}

    @classmethod
    def _from_artifact(cls, arrays: dict[str, np.ndarray], meta: dict[str, Any], path: Path,
                       verify: bool = False) -> ScoreEstimator:
        """The model of a verified artifact, read from its stored solution (no solve; ``verify``: re-solve
        the stored statistics and compare)."""
        est = cls(**cls.params_table.current_names(meta["params"]))  # e.g. eps (before issue 18) as ridge
        kind = est._form.stats_type
        stats = stored_stats(arrays, meta, {kind.__name__: kind})
        solution = fitted_arrays(arrays, cls._FILE_NAMES)
        legacy = meta.get("layout") is None
        if legacy and est.base == "gaussian" and stats is not None:
            # layout 1 derived q0 = N(μ0, Σ0) from the stored moments on load (a d × d factorisation, no solve)
            names = tuple(meta.get("feature_names_in") or ()) or None
            solution.update(base_arrays(base_from_moments(stats.moments, names)))
        fitted = read_fitted(KernelFitted, solution, meta, path, {"model": est._form.name, "radial": meta["radial"]})
        est._restore_common(meta)
        est._set_fitted(fitted)
        est.stats_ = stats if stats is None else stats.with_draw(fitted.draw)  # the file stores the basis once
        est.lam_ = float(meta["lam"]) if meta.get("lam") is not None else est._chosen_lam()
        est.solver_info_ = meta.get("solver_info") or {}
        if verify:
            est._verify(path, arrays, legacy)
        return est
