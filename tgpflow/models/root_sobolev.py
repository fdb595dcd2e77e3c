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

import dask
import numpy as np

from tgpflow.features.rff import RandomFourierFeatures
from tgpflow.features.sdo import default_order, draw_sdo_features, sdo_width
from tgpflow.features.whiten import ROBUST_TRIM, Whitening, whitening
from tgpflow.io.degenerate import check_pilot_rows
from tgpflow.io.pilot import DEFAULT_PILOT_ROWS, pilot_sample
from tgpflow.io.sources import Source
from tgpflow.logs import phase
from tgpflow.memory import plan_pass
from tgpflow.models.anomaly import AnomalyMixin
from tgpflow.models.estimator_base import Estimator, entry
from tgpflow.models.model_file import fitted_arrays, read_fitted
from tgpflow.models.params import RootSobolevParams
from tgpflow.models.rsr_fitted import RSRFitted
from tgpflow.models.streaming import StreamingMixin, is_grid
from tgpflow.stats.reduce import compute, tree_reduce
from tgpflow.stats.rsr import RSRIterStats, rsr_chunk_stats
from tgpflow.stats.split import SPLIT_SALT, validation_mask
from tgpflow.stats.tgp import DEFAULT_BLOCK_BYTES, block_rows_for

__all__ = ["RootSobolevDensity"]

logger = logging.getLogger("tgpflow")


def _train_rows(block: np.ndarray, keys: np.ndarray, fraction: float, part: str) -> np.ndarray:
    held = validation_mask(keys, fraction, SPLIT_SALT)
    return block[held] if part == "val" else block[~held]


class _Rows:
    """The rows an iteration maps over: persisted blocks, or the source's lazy blocks (re-streamed)."""

    def __init__(self, source: Source, persist_bytes: int, part: str | None, fraction: float):
        blocks = source.blocks()
        self.n_columns, self._planned = source.n_columns, set()
        if part is not None:
            select = dask.delayed(_train_rows, pure=True)
            blocks = [select(b, k, fraction, part) for b, k in zip(blocks, source.row_keys(), strict=True)]
        est = (source.n_rows or 0) * source.n_columns * 8
        self.persisted = source.n_rows is not None and est <= persist_bytes
        if self.persisted:
            try:
                from distributed import get_client

                self.blocks = get_client().persist(blocks)
                self.where = "persisted in distributed memory"
            except (ImportError, ValueError):
                self.blocks = [dask.delayed(b, pure=True) for b in compute(*blocks)] if blocks else []
                self.where = "held in memory"
        else:
            self.blocks = blocks
            self.where = "re-streamed from the source each iteration"

    def reduce(self, fn: Any, *args: Any) -> Any:
        if fn not in self._planned:  # once per kind of iteration: log the memory plan, refuse early
            plan_pass(fn, args, self.n_columns)
            self._planned.add(fn)
        task = dask.delayed(fn, pure=True)
        shared = [dask.delayed(a, pure=True) for a in args]
        return compute(tree_reduce([task(b, *shared) for b in self.blocks], 8))[0]


class _CentredDraw:
    """One frequency draw ``Z`` (whitening folded in) and phases b for the centred input: the
    features at smoothness a are ``cos(Z(x − μ)/γ + b)``, ``γ = a^{1/2m_s}`` (MATH.md §8), stored as
    :class:`RandomFourierFeatures` with ``c = b − Zμ/γ`` and shift μ. Drawing b for x − μ rather
    than for x makes the draw itself, not only its kernel, invariant to a shift of the data."""

    def __init__(self, Z: np.ndarray, phase: np.ndarray, centre: np.ndarray, m_s: int, seed: int | None):
        self.Z, self.phase, self.centre, self.m_s, self.seed = Z, phase, centre, m_s, seed

    def at(self, a: float) -> RandomFourierFeatures:
        gamma = sdo_width(a, self.m_s)
        c = np.mod(self.phase - (self.Z @ self.centre) / gamma, 2 * np.pi)
        return RandomFourierFeatures(Z=self.Z, c=c, gamma=gamma, shift=self.centre, seed=self.seed)


class RootSobolevDensity(AnomalyMixin, StreamingMixin, Estimator):
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

    The parameters' types and ranges are its table, :class:`~tgpflow.models.params.RootSobolevParams`.
    """

    params_table = RootSobolevParams
    #: A model file keeps w under the estimator's attribute name (model_file).
    _FILE_NAMES = {"coef": "coef_"}

    def __init__(self, *, method: str = "rsr", n_features: int = 2000, smoothness: float | list[float] = 1.0,
                 order: str | int = "auto", whiten: str = "robust", a_rule: str = "min", max_iter: int = 200,
                 tol: float = 1e-6,
                 step: float = 0.25, persist_bytes: int = 2**30, validation_fraction: float = 0.2,
                 threshold_quantile: float = 0.01, pilot_rows: int = DEFAULT_PILOT_ROWS, on_bad_rows: str = "raise",
                 block_bytes: int = DEFAULT_BLOCK_BYTES, random_state: int | None = 0, device: str = "auto"):
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

    # -- fitting --------------------------------------------------------------------------
    @entry
    def fit(self, X: Any, y: Any = None, *, columns: list[str] | None = None) -> RootSobolevDensity:
        """Fit from any source (NumPy/pandas, dask, Parquet, Zarr)."""
        source = self._source(X, columns, reset=True)
        with phase("pilot", chunks=source.n_chunks) as info:
            pilot = pilot_sample(source, rows=self.pilot_rows, random_state=self.random_state)
            info.update(rows=pilot.rows.shape[0])
        check_pilot_rows(pilot, source.description, 2, "the root-Sobolev density")
        d = source.n_columns
        if self.whiten != "none":
            wh = whitening(pilot.rows, trim=ROBUST_TRIM if self.whiten == "robust" else 0.0)
        else:
            wh = Whitening(shift=pilot.rows.mean(axis=0), matrix=np.eye(d), columns=np.arange(d))
        self.whitening_ = {"whiten": self.whiten, "rank": wh.rank, "columns": [int(c) for c in wh.columns]}
        self.order_ = default_order(wh.rank) if self.order == "auto" else int(self.order)
        draw = draw_sdo_features(int(self.n_features), wh.rank, m_s=self.order_, a=1.0, random_state=self.random_state)
        base = _CentredDraw(Z=draw.Z @ wh.matrix, phase=draw.c, centre=wh.shift, m_s=self.order_, seed=draw.seed)
        grid = [float(a) for a in (self.smoothness if is_grid(self.smoothness) else [self.smoothness])]
        if len(grid) > 1 and self.method == "rsr":
            self.smoothness_, self.selection_ = self._select(source, base, grid)
        else:
            self.smoothness_ = grid[0]
        features = base.at(self.smoothness_)
        rows = _Rows(source, int(self.persist_bytes), None, 0.0)
        logger.info("RSR rows are %s", rows.where)
        self.rows_held_ = rows.where
        coef, self.fit_info_ = self._iterate(rows, features)
        self._set_fitted(RSRFitted(features, coef, self.method, int(self.block_bytes)))
        self.n_samples_seen_ = int(self.fit_info_["n"])
        self._set_threshold(pilot.rows)
        return self

    def _iterate(self, rows: _Rows, features: Any) -> tuple[np.ndarray, dict[str, Any]]:
        T = features.n_features
        with phase("rsr-init", n_features=T):  # the KDE initialisation: Σφ(x_i)/N, one pass
            init = rows.reduce(_sum_phi, features, int(self.block_bytes))
        n = init.n
        w = init.g / n
        if self.method == "kde_sdo":
            return w, {"n": n, "iterations": 0, "method": "kde_sdo"}
        w = w / np.linalg.norm(w)
        eta_max = float(self.step)
        eta, converged, rejected, streak = eta_max, False, 0, 0
        st: RSRIterStats = rows.reduce(rsr_chunk_stats, features, w, int(self.block_bytes))
        loss = -st.sum_log_f2 / st.n + float(w @ w)
        history = [{"loss": loss, "nonpositive": st.n_nonpositive}]
        it = 0
        while it < int(self.max_iter):
            # one pass per candidate. Monotone: a step that raises L (or adds rows with f ≤ 0) is
            # rejected and retried from the same w with half the step. −log f(x_i)² is a barrier at
            # f(x_i) = 0, so accepted steps keep the sign of f on every row (MATH.md §8: L is convex
            # on that cone) — the plain fixed-point step of seed 004 leaves it on the RFF kernel,
            # whose negative values make g = Σφ/f jump (measured: L 2.37 → 5.82 in one step).
            it += 1
            cand = (1 - 2 * eta) * w + 2 * eta * st.g / st.n
            st_c = rows.reduce(rsr_chunk_stats, features, cand, int(self.block_bytes))
            loss_c = -st_c.sum_log_f2 / st_c.n + float(cand @ cand)
            # (a rounding margin: at the fixed point the full step returns w and L to the last bits)
            if not (loss_c <= loss + 1e-12 * max(1.0, abs(loss)) and st_c.n_nonpositive <= st.n_nonpositive):
                rejected += 1
                streak = 0
                eta /= 2
                if eta < 1e-8:  # no descent along the natural gradient: a stationary point to rounding
                    converged = True
                    break
                continue
            change = (loss - loss_c) * eta_max / eta  # the decrease scaled to a full step
            w, st, loss = cand, st_c, loss_c
            history.append({"loss": loss, "nonpositive": st.n_nonpositive})
            streak += 1
            if change <= self.tol * max(1.0, abs(loss)):
                converged = True
                break
            if streak >= 2:  # grow back after two accepted steps in a row (not after each: that
                eta = min(2 * eta, eta_max)  # alternates accept/reject and doubles the passes)
        nonpos = history[-1]["nonpositive"]
        if not converged:
            logger.warning("RSR did not converge in %d iterations (kernel width a^(1/2m_s) = %.3g)", self.max_iter,
                           features.gamma)
        # w ↔ −w is a symmetry (p = f²): the rows on the minority side of f's sign are its sign changes
        return w, {"n": n, "iterations": it, "converged": converged, "loss": history[-1]["loss"], "final_step": eta,
                   "rejected_steps": rejected, "residual": float(np.linalg.norm(st.g / st.n - w) / np.linalg.norm(w)),
                   "nonpositive_rows": nonpos, "sign_change_rows": min(nonpos, n - nonpos),
                   "norm_w": float(np.linalg.norm(w)), "history": [h["loss"] for h in history]}

    def _select(self, source: Source, base: Any, grid: list[float]) -> tuple[float, dict[str, Any]]:
        k = int(self.whitening_["rank"])
        if 2 * self.order_ <= k + 4:
            # the RFF Laplacian Σ w_t‖z_t‖²φ_t needs E‖z‖⁴ < ∞, i.e. 2m_s > d + 4; the default m_s = ⌊d/2⌋ + 1
            # has E‖z‖² = ∞ (spectral tail ‖z‖^{d−1−2m_s}), so J is dominated by the few largest frequencies
            logger.warning("held-out Hyvärinen loss with order m_s = %d <= d/2 + 2 (d = %d): its value has infinite "
                           "variance over the feature draw; use order >= %d to select a", self.order_, k, k // 2 + 3)
        fraction = float(self.validation_fraction)
        train = _Rows(source, int(self.persist_bytes), "train", fraction)
        val = _Rows(source, int(self.persist_bytes), "val", fraction)
        curve = []
        for a in sorted(grid):
            feats = base.at(a)
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
    def _raw_log_density(self, x: np.ndarray) -> np.ndarray:
        return self.fitted().log_density(x)

    def log_density(self, X: Any) -> Any:
        """log f(x)² (unnormalised; −inf where f = 0), or log of the KDE-SDO estimate."""
        return self._map_rows(X, self.fitted().log_density, per_row_dims=False)

    def score_samples(self, X: Any) -> Any:
        return self.log_density(X)

    def grad_log_density(self, X: Any) -> Any:
        """2∇f/f (MATH.md §8)."""
        return self._map_rows(X, self.fitted().grad_log_density, per_row_dims=True)

    def hyvarinen_terms(self, X: Any) -> Any:
        """½‖s‖² + div s = 2Δf/f per row (exact for p = f², MATH.md D6)."""
        if self.method != "rsr":
            raise AttributeError("the exact 2Δf/f form holds for the root-Sobolev model (p = f²), not KDE-SDO")
        return self._map_rows(X, self.fitted().hyvarinen_terms, per_row_dims=False)

    def _model_meta(self) -> dict[str, Any]:
        """The draw's stamp, the chosen a and m_s, the iteration's report and the whitening (no statistics: the
        fit iterates over the rows, so ``save(stats=...)`` has none to store)."""
        return {"fingerprint": self.features_.fingerprint, "feature_seed": self.features_.seed,
                "smoothness": self.smoothness_, "order": self.order_,
                "fit_info": {k: v for k, v in self.fit_info_.items() if k != "history"},
                "whitening": getattr(self, "whitening_", None)}

    @classmethod
    def _from_artifact(cls, arrays: dict[str, Any], meta: dict[str, Any], path: Any,
                       verify: bool = False) -> RootSobolevDensity:
        """The model of a verified artifact, read from its stored w (the fit is not repeated)."""
        from tgpflow.errors import ModelFileError

        if verify:
            raise ModelFileError(f"{path}: a RootSobolevDensity is fitted by iterating over the rows, so its file holds "
                                 f"no statistics to re-solve: verify=True cannot check it (its arrays are checksummed)")
        est = cls(**meta["params"])
        est._set_fitted(read_fitted(RSRFitted, fitted_arrays(arrays, cls._FILE_NAMES), meta, path,
                                    {"method": est.method, "block_bytes": int(est.block_bytes),
                                     "feature_seed": meta.get("feature_seed")}))
        est._restore_common(meta)
        est.smoothness_, est.order_ = float(meta["smoothness"]), int(meta["order"])
        est.fit_info_ = dict(meta["fit_info"])
        if meta.get("whitening"):
            est.whitening_ = meta["whitening"]
        return est

    def _set_fitted(self, fitted: RSRFitted) -> None:
        """The estimator's attributes of a fitted model, read off its Fitted value (a fit and a load share this)."""
        self._fitted = fitted
        self.features_, self.coef_ = fitted.features, fitted.coef
        self.n_features_in_ = fitted.features.n_dims


def _sum_phi(x: np.ndarray, features: Any, block_bytes: int) -> Any:
    """Σφ(x_i) of a chunk, as an RSRIterStats (only g and n used)."""
    rows = block_rows_for(features.n_features, features.n_dims, block_bytes)
    g = np.zeros(features.n_features)
    for s in range(0, x.shape[0], rows):
        g += features.transform(np.asarray(x[s:s + rows], dtype=np.float64))[0].sum(axis=0)
    return RSRIterStats(g, int(x.shape[0]), 0.0, 0, 0.0)
