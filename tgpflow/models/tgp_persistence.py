"""A GP-tilted model's file (docs/gp_tilted.md): what a fit records beside its solution, and the load that
reads it back without a solve; and the draw a pipeline's store freezes (the features and what the pass also needs).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Self

import numpy as np

from tgpflow.features.mixture_base import GaussianMixtureBase
from tgpflow.features.rff import RandomFourierFeatures
from tgpflow.models.fitted import prefixed
from tgpflow.models.model_file import fitted_arrays, read_fitted, stored_stats
from tgpflow.models.tgp_fitted import TGPFitted
from tgpflow.stats.ncfd import NCFDStats
from tgpflow.stats.projections import ProjectionGrid
from tgpflow.stats.tgp import TGPStats

__all__ = ["TGPModelFile"]


class TGPModelFile:
    """The model file of :class:`~tgpflow.models.gp_tilted.GPTiltedDensity`."""

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

    def _verify_params(self) -> dict[str, Any]:
        """The parameters a re-solve of the stored statistics is made with: ``bounds="auto"`` as the fit resolved
        them (the discrete columns' come back from the statistics' cells)."""
        params = self.get_params()
        if self._bounds_auto:
            params["bounds"] = None if self.bounds_ is None else self.bounds_.to_pairs()
        return params

    def _solution_extra(self) -> dict[str, np.ndarray]:
        """The method's solution attributes beyond the Fitted value (``extra_arrays``: FVPD's posterior, NCFD's
        levels)."""
        return {name: getattr(self, name) for name in self._method.extra_arrays}

    @classmethod
    def _from_artifact(cls, arrays: dict[str, np.ndarray], meta: dict[str, Any], path: Path,
                       verify: bool = False) -> Self:
        """The model of a verified artifact, read from its stored solution (no solve; ``verify``: re-solve
        the stored statistics and compare)."""
        params = dict(meta["params"])
        if "discrete" not in meta:  # written before discrete columns: fitted on every column as continuous
            params["discrete"] = None
        # files before map_points solved MAP on base draws ([Paisley et al.] Algorithm 1)
        if params.get("method") == "map":
            params.setdefault("map_points", "base")
        est = cls(**params)
        est._read_solution(arrays, meta, path, verify)
        return est

    def _read_solution(self, arrays: dict[str, np.ndarray], meta: dict[str, Any], path: Path, verify: bool) -> None:
        """The stored solution and what the fit recorded beside it, on this (new) estimator; ``verify``: then re-solve
        the stored statistics and compare."""
        method = self._method
        stats = stored_stats(arrays, meta, {**self._STATS_KINDS, method.stats_type.__name__: method.stats_type})
        solution = method.legacy_solution(fitted_arrays(arrays, self._FILE_NAMES), stats)
        self._set_fitted(read_fitted(TGPFitted, solution, meta, path, {"block_bytes": int(self.block_bytes),
                                                                       "feature_seed": meta.get("feature_seed")}))
        self._restore_meta(meta)
        self.stats_ = stats if stats is None else stats.with_draw(self._fitted.draw)  # the file stores the draw once
        self.lam_ = math.nan if meta.get("lam") is None else float(meta["lam"])
        self.solver_info_ = meta.get("solver_info") or {}
        if meta.get("objective") is not None:
            self.objective_ = float(meta["objective"])
        if method.uses_eta:
            self.eta_ = meta.get("eta")
        for name in method.extra_arrays:
            setattr(self, name, np.asarray(arrays[f"fitted.{name}"], dtype=np.float64))
        if verify:
            self._verify(path, arrays, legacy=meta.get("layout") is None)

    def _restore_meta(self, meta: dict[str, Any]) -> None:
        """What a fit recorded beside its solution, as stored: what every model file holds, the pilot, the rows
        dropped and the bounds (a load re-estimates nothing)."""
        self._restore_common(meta)
        self.pilot_ = meta.get("pilot", {})
        self.n_rows_dropped_ = meta.get("n_rows_dropped", 0)
        self._restore_space(meta.get("discrete"), meta.get("bounds"))

    # -- the draw a pipeline's store freezes ------------------------------------------------
    def _frozen_draw(self) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        """The random features with what the pass also needs: NCFD's noise levels, a held-out selection's
        projection grid, a mixture base, the discrete columns and the bounds as resolved
        (:meth:`~tgpflow.models.streaming.StreamingMixin.plan`)."""
        if self._selecting and getattr(self, "heldout_grid_", None) is None:
            raise ValueError("this GPTiltedDensity has no held-out grid (a model loaded from a file keeps none), so a "
                             "plan of it cannot select λ, η or γ as its fit did: make a new plan "
                             "(est.prepare(X).plan()), or fix them in the parameters (lam=est.lam_, …)")
        arrays = dict(self.features_.to_arrays())
        if hasattr(self, "noise_levels_"):
            arrays["noise_levels"] = np.asarray(self.noise_levels_)
        if getattr(self, "heldout_grid_", None) is not None:
            arrays.update({f"heldout.{k}": v for k, v in self.heldout_grid_.to_arrays().items()})
        if getattr(self, "base_mixture_", None) is not None:  # the pass sums its score
            arrays.update({f"mixture.{k}": v for k, v in self.base_mixture_.to_arrays().items()})
        meta = {"type": "rff", "seed": self.features_.seed, "fingerprint": self.features_.fingerprint}
        if getattr(self, "discrete_", None) is not None:  # the pass dequantizes these columns by each row's key
            meta["discrete"] = self.discrete_.to_dict()
        if getattr(self, "bounds_", None) is not None:  # as resolved: bounds="auto", and the discrete columns'
            meta["bounds"] = self.bounds_.to_record()
        return arrays, meta

    def _restore_draw(self, arrays: dict[str, np.ndarray], meta: dict[str, Any], columns: list[str] | None) -> None:
        self.features_ = RandomFourierFeatures.from_arrays(arrays, seed=meta.get("seed"))
        if "noise_levels" in arrays:
            self.noise_levels_ = np.asarray(arrays["noise_levels"], dtype=np.float64)
        # as the draw resolved them; a store drawn before it recorded them keeps the spec's bounds (and one drawn
        # before discrete columns has none)
        self._restore_space(meta.get("discrete"), meta.get("bounds"), declared_columns=columns)
        mixture = prefixed(arrays, "mixture.")
        if mixture:
            self.base_mixture_ = GaussianMixtureBase.from_arrays(mixture)
        grid = prefixed(arrays, "heldout.")
        if grid:  # projected after the bounded columns' inverse transform, as when it was drawn
            self.heldout_grid_ = ProjectionGrid.from_arrays(grid, units=self._fit_bounds())
