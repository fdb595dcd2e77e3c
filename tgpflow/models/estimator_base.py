"""The scikit-learn base of the tgpflow estimators (issue 16).

:class:`Estimator` is what every estimator shares: its parameter table (:mod:`tgpflow.models.params`),
checked once per public entry (:func:`entry`) and kept equal to ``__init__``'s signature (checked when the
class is made); the parts of a model file every family writes and reads back; the fitted model as a
value (``fitted()``). :class:`StatsEstimator` adds what the families solved from statistics (GP-tilted,
kernel) share: ``partial_fit``, the held-out selection over a grid of bandwidths (each family scores its
own candidates), and ``load(verify=True)``. The maths stays in the families.
"""

from __future__ import annotations

import abc
import dataclasses
import inspect
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
from sklearn.base import BaseEstimator
from sklearn.utils.validation import check_is_fitted

from tgpflow.core.backend import DeviceTarget, device_target, resolve_device
from tgpflow.core.engine import Progress, cluster_has_gpus
from tgpflow.errors import ModelFileError
from tgpflow.features.scaling import Scaling
from tgpflow.models.checked_entry import entry
from tgpflow.models.model_file import verify_solution, write_model
from tgpflow.models.params import ParamTable, plain
from tgpflow.models.scaled_fitted import in_data_units
from tgpflow.models.selection import Selector, select
from tgpflow.models.streaming import check_stats_kept, is_grid
from tgpflow.solve.normalizer import NormalizerEstimate
from tgpflow.stats.split import StatsBundle
from tgpflow.stats.support import SupportBox

__all__ = ["Estimator", "StatsEstimator", "entry", "carried_draw"]


class Estimator(BaseEstimator):
    """A tgpflow estimator: keyword-only ``__init__`` that stores the parameters of its ``params_table``."""

    #: The declarative parameter table (its fields are ``__init__``'s parameters, with the same defaults).
    params_table: ClassVar[type[ParamTable]]
    #: A model file keeps the Fitted value's arrays under these estimator attribute names (model_file).
    _FILE_NAMES: ClassVar[dict[str, str]] = {}

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        table = cls.__dict__.get("params_table")
        if table is None:
            return
        signature = {n: p.default for n, p in inspect.signature(cls.__init__).parameters.items() if n != "self"}
        defaults = table.defaults()
        differ = sorted(n for n in {*signature, *defaults} if n not in signature or n not in defaults
                        or signature[n] != defaults[n])
        if differ:  # a parameter, or its default, in only one of them
            raise TypeError(f"{cls.__name__}.__init__ and its parameter table {table.__name__} differ in {differ}")
        # its parameters' documentation is its table's (one place for the help of help(), the CLI and the checks)
        cls.__doc__ = f"{inspect.cleandoc(cls.__doc__ or cls.__name__)}\n\n{table.numpydoc()}\n"

    def check_params(self) -> ParamTable:
        """The parameters checked against the estimator's table: a ValueError naming each invalid one, its value
        and what is allowed (and, with a ``device``, that the device exists here)."""
        table = self.params_table.check(self.get_params(deep=False))
        table.fit_rules()
        if "device" in self.params_table.model_fields:
            resolve_device(table.device, self._runs_on_gpu, cluster_gpus=cluster_has_gpus())  # type: ignore[attr-defined]
        return table

    #: Whether this family's pass and evaluation run on a GPU (docs/gpu.md); without, ``device="gpu"`` is refused.
    _runs_on_gpu: ClassVar[bool] = False

    def _device_target(self) -> DeviceTarget | None:
        """Where this estimator's chunks go: the GPU's :class:`~tgpflow.core.backend.DeviceTarget`, or None (host)."""
        return device_target(getattr(self, "device", "cpu"), self._runs_on_gpu, cluster_gpus=cluster_has_gpus())

    def _forget(self, *names: str) -> None:
        """Drop what a previous fit set."""
        for name in names:
            self.__dict__.pop(name, None)

    def fitted(self, sigma: float | None = None) -> Any:
        """The fitted model as a :class:`~tgpflow.models.fitted.Fitted` value (``log_density`` where it has one,
        ``grad_log_density``, ``hyvarinen_terms``, ``to_arrays``); ``sigma`` is the noise level of
        GPTiltedDensity's NCFD."""
        if sigma not in (None, 0):
            raise ValueError("sigma is defined for the noise-conditional GP-tilted density only")
        check_is_fitted(self, "_fitted")
        return in_data_units(self._on_device(self._fitted), getattr(self, "scaling_", None))

    def __getstate__(self) -> dict[str, Any]:
        state = super().__getstate__()
        state.pop("_device_copy", None)  # a cache of the fitted model on this process's device (:meth:`_on_device`)
        return state

    def _on_device(self, fitted: Any) -> Any:
        """``fitted`` evaluating its rows on this estimator's device (docs/gpu.md): one copy per fitted model and
        device, kept, so that what the model caches (FVPD's L⁻¹, M⁻¹) is computed once. A fitted model without a
        ``device`` field (a family that computes on the CPU) is returned as it is."""
        target = self._device_target()
        if target == getattr(fitted, "device", None):
            return fitted
        cached = self.__dict__.get("_device_copy")  # (the host model, its device, the copy on it)
        if cached is None or cached[0] is not fitted or cached[1] != target:
            cached = (fitted, target, dataclasses.replace(fitted, device=target))
            self.__dict__["_device_copy"] = cached
        return cached[2]

    # -- model files --------------------------------------------------------------------------
    @classmethod
    def load(cls, path: str | Path, *, verify: bool = False, storage_options: dict[str, Any] | None = None) -> Any:
        """The model a model file holds, read from its stored solution (no solve) after its schema version and the
        checksums of every array and of the metadata are verified; never unpickled. On a family's class a file of
        another kind is refused; ``Estimator.load`` reads any registered kind (:func:`tgpflow.load`, which also
        reads a pipeline's model directory). ``verify``: solve the stored statistics again and compare."""
        from tgpflow.io.artifact import read_artifact
        from tgpflow.io.atomic import as_path
        from tgpflow.models.registry import model_kinds

        kinds = model_kinds()  # only the file's estimator is imported
        path = as_path(path, storage_options)
        kind, arrays, meta = read_artifact(path, expected_kinds=tuple(kinds) if cls is Estimator else (cls.__name__,))
        return kinds[kind].estimator_class()._from_artifact(arrays, meta, path, verify=verify)

    @classmethod
    def _from_artifact(cls, arrays: dict[str, np.ndarray], meta: dict[str, Any], path: Path,
                       verify: bool = False) -> Any:
        """The model of a verified model file (a family that writes one implements it:
        :meth:`~tgpflow.models.streaming.StreamingMixin._from_artifact`)."""
        raise ModelFileError(f"{path}: a {cls.__name__} is not read from a model file")

    def save(self, path: str | Path, *, overwrite: bool = True, stats: bool = True,
             storage_options: dict[str, Any] | None = None) -> Any:
        """Write the fitted model atomically as a Zarr group (``.npz`` by suffix), every array and the metadata
        checksummed: its solution, which is what :func:`tgpflow.load` reads (:mod:`tgpflow.models.model_file`),
        and with ``stats`` the statistics it was solved from, where it has them (what ``partial_fit`` adds to
        and ``load(verify=True)`` re-solves). An existing path is replaced only if it holds a tgpflow model and
        ``overwrite`` (never a user's file or directory). ``path`` may be an fsspec URL (``memory://``,
        ``s3://`` …; ``storage_options`` for its filesystem), written as :mod:`tgpflow.io.atomic` says."""
        check_is_fitted(self, "_fitted")
        kept = getattr(self, "stats_", None) if stats else None
        return write_model(path, type(self).__name__, self._fitted, self._FILE_NAMES, extra=self._solution_extra(),
                           stats=kept, meta={**self._common_meta(), **self._model_meta()}, overwrite=overwrite,
                           storage_options=storage_options)

    def _verify_params(self) -> dict[str, Any]:
        """The parameters ``load(verify=True)`` re-solves the stored statistics with: by default the estimator's."""
        return self.get_params()

    def _model_meta(self) -> dict[str, Any]:
        """What a family stores in a model file's metadata beyond :meth:`_common_meta`."""
        return {}

    def _solution_extra(self) -> dict[str, np.ndarray]:
        """Solution attributes stored beside the Fitted value (by attribute name)."""
        return {}

    def _common_meta(self) -> dict[str, Any]:
        """The metadata every model file holds: parameters (as JSON holds them), column names, rows seen, the
        selection record, the anomaly threshold and support box of the training rows (in the data's units), the
        standardization (``scaling_``: ``scale=True`` or a pipeline's ``preprocess``), and for a model with a
        normaliser its estimate and the fit diagnostics."""
        support = getattr(self, "support_", None)
        scaling = getattr(self, "scaling_", None)
        params = plain(self.get_params())
        if params.get("device") == "gpu":  # a GPU where it was fitted is not part of the model: it loads anywhere
            params["device"] = "auto"
        meta = {"params": params,
                "scaling": None if scaling is None else scaling.to_dict(),
                "feature_names_in": [str(c) for c in getattr(self, "feature_names_in_", [])] or None,
                "n_samples_seen": self.n_samples_seen_,
                "selection": getattr(self, "selection_", None),
                "anomaly_threshold": getattr(self, "anomaly_threshold_", None),
                "support": None if support is None else support.to_dict()}
        if hasattr(self, "log_normalizer"):
            normalizer = getattr(self, "normalizer_", None)
            meta.update(normalizer=None if normalizer is None else normalizer.to_dict(),
                        fit_diagnostics=getattr(self, "fit_diagnostics_", None))
        return meta

    def _restore_common(self, meta: dict[str, Any]) -> None:
        """What :meth:`_common_meta` stored, as stored (a load re-estimates nothing)."""
        if meta.get("feature_names_in"):
            self.feature_names_in_ = np.asarray(meta["feature_names_in"], dtype=object)
        self.n_samples_seen_ = int(meta["n_samples_seen"])
        if meta.get("selection"):
            self.selection_ = meta["selection"]
        if meta.get("anomaly_threshold") is not None:
            self.anomaly_threshold_ = float(meta["anomaly_threshold"])
        if meta.get("support"):
            self.support_ = SupportBox.from_dict(meta["support"])
        self.scaling_ = Scaling.from_dict(meta.get("scaling"))  # files written before it: none
        if hasattr(self, "log_normalizer"):
            self.normalizer_ = NormalizerEstimate.from_dict(meta["normalizer"]) if meta.get("normalizer") else None
            self.fit_diagnostics_ = meta.get("fit_diagnostics") or {"warnings": []}


def carried_draw(stats: Any) -> Any:
    """The draw statistics carry (None when read from a file written before they carried it); of a bundle of a
    split pass, that of its first training part (the parts share Z and c, or Y; each γ is applied in the pass)."""
    if isinstance(stats, StatsBundle):
        train = [stats[k] for k in stats if isinstance(k, tuple) and k[0] == "train"]
        return train[0].draw if train else None
    return getattr(stats, "draw", None)


class StatsEstimator(Estimator, abc.ABC):
    """An estimator solved from statistics of one pass: ``accumulate`` → ``fit_from_stats``, and so
    ``partial_fit``; a selection scores a grid on the held-out parts of a split pass. A family implements the
    abstract hooks :meth:`_solve_stats`, :meth:`_lam_grid` and :meth:`_selector`."""

    #: The attribute holding the draw the statistics are computed with (``features_``, ``basis_``).
    _DRAW: ClassVar[str]  # (also StreamingMixin's)
    #: The error of ``fit_from_stats`` when neither the estimator nor the statistics have a draw (naming what to pass).
    _NO_DRAW: ClassVar[str]

    @entry
    def partial_fit(self, X: Any, y: Any = None, *, columns: list[str] | None = None,
                    progress: Progress | None = None) -> Any:
        """Add the statistics of new rows to ``stats_`` and re-solve (fits if not yet fitted). Values selected on
        held-out rows at ``fit`` (λ, η, the bandwidth) are kept, not re-selected. ``progress`` is called with
        the futures of each distributed compute (:data:`tgpflow.core.engine.Progress`)."""
        if not hasattr(self, "stats_"):
            return self.fit(X, columns=columns, progress=progress)  # type: ignore[attr-defined]
        check_stats_kept(self)
        stats = self.accumulate(X, columns=columns, progress=progress)  # type: ignore[attr-defined]
        self.n_rows_dropped_ = getattr(self, "n_rows_dropped_", 0) + self.last_rows_dropped_
        return self.fit_from_stats(self.stats_ + stats)  # type: ignore[attr-defined]

    @property
    def _selecting(self) -> bool:
        """Whether a held-out selection is asked for (a family with one says when)."""
        return False

    def _bandwidths(self, own: float) -> list[float]:
        """The bandwidths a split pass sums and a selection scores: the grid given as ``bandwidth``, else the
        draw's ``own``."""
        bandwidth = self.bandwidth  # type: ignore[attr-defined]
        return [float(b) for b in bandwidth] if is_grid(bandwidth) else [own]

    @property
    def _split_pending(self) -> bool:
        """Whether this estimator's statistics are split into training and held-out rows: a selection is asked for
        and none was made yet (a first fit, a prepared draw, a plan: not a fitted model, whose ``partial_fit``
        keeps its selection). ``accumulate`` and ``chunk_tasks`` split by this one rule, so their statistics add."""
        return self._selecting and not hasattr(self, "_fitted")

    @abc.abstractmethod
    def _solve_stats(self, stats: Any, draw: Any) -> None:
        """Solve from statistics and the draw they were computed with (``fit_from_stats`` without diagnostics)."""

    def _solve_draw(self, stats: Any, draw: Any) -> Any:
        """The draw to solve ``stats`` with: ``draw`` if given; else the estimator's own (set by ``accumulate``, a fit
        or ``prepare``: the statistics are checked against it); else, on a fresh estimator, the draw the statistics
        carry (:func:`carried_draw`). Statistics read from a file written before they carried it have none: then
        :attr:`_NO_DRAW`, which names the argument to pass."""
        for candidate in (draw, getattr(self, self._DRAW, None), carried_draw(stats)):
            if candidate is not None:
                return candidate
        raise ValueError(self._NO_DRAW)

    def _verify(self, path: Path, arrays: dict[str, np.ndarray], legacy: bool) -> None:
        """``load(verify=True)``: solve the stored statistics again and compare (:func:`verify_solution`)."""
        def solve(ref: StatsEstimator) -> Any:
            ref._solve_stats(self.stats_, getattr(self, self._DRAW))
            return ref._fitted

        verify_solution(self, path, arrays, self._FILE_NAMES, solve, extra=tuple(self._solution_extra()),
                        legacy=legacy, params=self._verify_params())

    # -- held-out selection -------------------------------------------------------------------
    @abc.abstractmethod
    def _lam_grid(self) -> list[float]:
        """The λ values of ``lam="auto"``."""

    def _chosen_lam(self) -> float:
        """λ as given, or as a held-out selection chose it (``lam="auto"``)."""
        if self.lam != "auto":  # type: ignore[attr-defined]
            return float(self.lam)  # type: ignore[attr-defined]
        chosen = getattr(self, "selection_", {}).get("chosen", {})
        if "lam" not in chosen:
            raise ValueError("lam='auto' selects λ during fit (a split pass); fit first, or give lam")
        return float(chosen["lam"])

    def _lam_values(self) -> list[float]:
        return self._lam_grid() if self.lam == "auto" else [float(self.lam)]  # type: ignore[attr-defined]

    def _select(self, bundle: StatsBundle, draw: Any) -> tuple[Any, Any]:
        """Held-out selection on a split pass (:func:`~tgpflow.models.selection.select` with this estimator's
        :meth:`_selector`), recorded in ``selection_``; returns the statistics of every row and the draw at the
        chosen bandwidth."""
        selection, stats, draw = select(bundle, draw, self._selector(), float(self.validation_fraction))
        self.selection_ = selection.record
        return stats, draw

    @abc.abstractmethod
    def _selector(self) -> Selector:
        """The family's candidates and criterion (:class:`~tgpflow.models.selection.Selector`)."""
