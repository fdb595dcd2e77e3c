"""The draws a store freezes on its first run (or ``refit: full``): the preprocessing and each model's features,
basis or root-Sobolev draw, saved as arrays and restored on a fresh estimator at every later run, so that every
partition's statistics are summed with the same ones and stay mergeable (:mod:`tgpflow.pipeline.runner`, step 2).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tgpflow.core.engine import Progress
from tgpflow.errors import TgpflowError
from tgpflow.features.bounds import ColumnBounds
from tgpflow.features.lattice import LatticeCells
from tgpflow.features.mixture_base import GaussianMixtureBase
from tgpflow.features.nystrom import NystromBasis
from tgpflow.features.rff import RandomFourierFeatures
from tgpflow.features.scaling import Scaling
from tgpflow.features.sdo import SDODraw
from tgpflow.io.pilot import pilot_sample
from tgpflow.io.sources import Source
from tgpflow.pipeline.spec import PipelineSpec
from tgpflow.stats.projections import ProjectionGrid

__all__ = ["new_estimator", "draw_arrays", "restore_draw", "freeze_preprocess"]


def new_estimator(model_spec: Any) -> Any:
    """A fresh estimator of a spec's model, with the spec's parameters."""
    est = model_spec.estimator_class()()
    est.set_params(**model_spec.params)
    return est


def draw_arrays(est: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """The arrays and metadata of a prepared estimator's draw that the store freezes (:func:`restore_draw` reads
    them back): a root-Sobolev draw, random features with what the pass also needs (noise levels, the held-out
    projection grid, a mixture base, the discrete columns and the bounds as resolved), or a Nyström basis."""
    if isinstance(getattr(est, "draw_", None), SDODraw):  # a root-Sobolev draw, for every smoothness
        draw = est.draw_
        return dict(draw.to_arrays()), {"type": "sdo", "seed": draw.seed, "fingerprint": draw.fingerprint}
    if hasattr(est, "features_"):
        arrays = dict(est.features_.to_arrays())
        if hasattr(est, "noise_levels_"):
            arrays["noise_levels"] = np.asarray(est.noise_levels_)
        if getattr(est, "heldout_grid_", None) is not None:  # a held-out selection's projection grid
            arrays.update({f"heldout.{k}": v for k, v in est.heldout_grid_.to_arrays().items()})
        if getattr(est, "base_mixture_", None) is not None:  # base="mixture": the pass sums its score
            arrays.update({f"mixture.{k}": v for k, v in est.base_mixture_.to_arrays().items()})
        meta = {"type": "rff", "seed": est.features_.seed, "fingerprint": est.features_.fingerprint}
        if getattr(est, "discrete_", None) is not None:  # the pass dequantizes these columns by each row's key
            meta["discrete"] = est.discrete_.to_dict()
        if getattr(est, "bounds_", None) is not None:  # as resolved: bounds="auto", and the discrete columns'
            meta["bounds"] = est.bounds_.to_record()
        return arrays, meta
    return dict(est.basis_.to_arrays()), {"type": "nystrom", "kernel": est.basis_.kernel_name,
                                          "fingerprint": est.basis_.fingerprint}


def restore_draw(est: Any, arrays: dict[str, Any], meta: dict[str, Any], columns: list[str],
                 scaling: Scaling | None) -> None:
    """The store's frozen draw and standardization on a fresh estimator, as :meth:`prepare` left them."""
    est.scaling_ = scaling
    if meta["type"] == "sdo":
        est.draw_ = SDODraw.from_arrays(arrays, seed=meta.get("seed"))
    elif meta["type"] == "rff":
        est.features_ = RandomFourierFeatures.from_arrays(arrays, seed=meta.get("seed"))
        if "noise_levels" in arrays:
            est.noise_levels_ = np.asarray(arrays["noise_levels"], dtype=np.float64)
        if hasattr(est, "bounds"):  # in the data's units; the fit applies them in the standardized ones
            est.bounds_ = ColumnBounds.from_param(est._declared_bounds(), columns)
        if hasattr(est, "discrete"):  # a store drawn before discrete columns has none
            est.discrete_ = LatticeCells.from_dict(meta.get("discrete"))
            # bounded at their lattices' outer cell edges, beside the spec's bounds
            est.bounds_ = est._with_cells(est.bounds_, columns)
        if meta.get("bounds"):  # as the draw resolved them (a store drawn before keeps the spec's)
            est.bounds_ = est._with_cells(ColumnBounds.from_record(meta["bounds"]), list(meta["bounds"]["columns"]))
        mixture = {k.split(".", 1)[1]: v for k, v in arrays.items() if k.startswith("mixture.")}
        if mixture:
            est.base_mixture_ = GaussianMixtureBase.from_arrays(mixture)
        grid = {k.split(".", 1)[1]: v for k, v in arrays.items() if k.startswith("heldout.")}
        if grid:  # projected after the bounded columns' inverse transform, as when it was drawn
            bounds = getattr(est, "bounds_", None)
            est.heldout_grid_ = ProjectionGrid.from_arrays(grid, units=None if bounds is None
                                                           else bounds.scaled(scaling))
    else:
        est.basis_ = NystromBasis.from_arrays(arrays, meta["kernel"])
    est.n_features_in_ = len(columns)
    est.feature_names_in_ = np.asarray(columns, dtype=object)


def freeze_preprocess(spec: PipelineSpec, src: Source, seed: int, progress: Progress | None) -> dict[str, Any] | None:
    """The spec's ``preprocess`` as a :class:`~tgpflow.features.scaling.Scaling` of the raw rows of a pilot sample
    (its dict; None without one): every model of the store is fitted in these units, and carries them."""
    if not (spec.preprocess.center or spec.preprocess.scale):
        return None
    rows = pilot_sample(src, rows=100_000, random_state=seed, progress=progress).rows
    try:
        scaling = Scaling.from_rows(rows, src.columns, center=spec.preprocess.center, scale=spec.preprocess.scale,
                                    where=spec.source.path)
    except ValueError as exc:
        raise TgpflowError(str(exc)) from None
    return scaling.to_dict()
