"""What a GP-tilted fit reads off its pilot sample before the pass (docs/gp_tilted.md): the pilot's moments, the
feature draw and its bandwidth, the mixture base, NCFD's noise levels and the held-out projection grid.
"""

from __future__ import annotations

import numbers
from typing import Any

import numpy as np

from tgpflow.core.engine import Progress
from tgpflow.core.engine import accumulate as run_pass
from tgpflow.core.gaussian_base import check_covariance
from tgpflow.core.logs import phase
from tgpflow.core.moments import Moments
from tgpflow.features.mixture_base import MIXTURE_FLOOR, fit_mixture_base
from tgpflow.features.noise import AUTO_SIGMA_MAX_FACTOR, noise_levels, paper_sigma_max
from tgpflow.features.rff import RandomFourierFeatures, paper_kernel_cov, scott_bandwidth
from tgpflow.io.column_kinds import cell_widths, column_kinds
from tgpflow.io.degenerate import check_pilot_rows, check_rows_left
from tgpflow.io.pilot import LazyPilot
from tgpflow.io.sources import Source
from tgpflow.models.streaming import is_grid
from tgpflow.stats.projections import ProjectionGrid
from tgpflow.stats.split import SPLIT_SALT, validation_mask

__all__ = ["TGPPilot"]


class TGPPilot:
    """The pilot stage of :class:`~tgpflow.models.gp_tilted.GPTiltedDensity` (before its pass)."""

    def _pilot_moments(self, source: Source, lazy: LazyPilot,
                       progress: Progress | None) -> tuple[int, np.ndarray, np.ndarray, dict[str, Any]]:
        """(N, mean, covariance) from the pilot sample of ``source`` (``lazy``), or exactly with ``pilot="exact"``."""
        with phase("pilot", mode=self.pilot, chunks=source.n_chunks) as info:
            if self.pilot == "exact":
                moments, dropped = run_pass(source, Moments.from_rows, split_every=self.split_every, progress=progress)
                check_rows_left(int(moments.n), dropped, source.n_chunks, source.description, 1,
                                "the GP-tilted density")
                n_total = n_rows = int(moments.n)
                mean, cov = moments.mean, moments.covariance
                info.update(rows=moments.n, chunks_read=source.n_chunks)
            else:
                pilot = lazy.get()
                check_pilot_rows(pilot, source.description, 1, "the GP-tilted density")
                n_total, n_rows, mean = pilot.n_total, pilot.rows.shape[0], pilot.rows.mean(axis=0)
                cov = np.cov(pilot.rows, rowvar=False, bias=True).reshape(source.n_columns, source.n_columns)
                info.update(rows=pilot.rows.shape[0], chunks_read=pilot.chunks_read, n_total=n_total,
                            n_total_exact=pilot.n_total_exact)
            check_covariance(n_rows, mean, cov, self._column_names(source), source.description)
        return n_total, mean, cov, dict(info)

    def _draw_features(self, n_total: int, mean: np.ndarray, cov: np.ndarray, lazy: LazyPilot,
                       progress: Progress | None = None) -> RandomFourierFeatures:
        """The random features: γ from ``bandwidth`` (on the pilot sample ``lazy`` for "auto"), the kernel's
        covariance and the shift from the pilot's moments; a mixture base is fitted on the pilot first."""
        if self._mixture_base:
            self._fit_mixture(lazy, progress)
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
            features = features.with_bandwidth(self._auto_bandwidth(features, lazy, progress))
        return features

    def _fit_mixture(self, lazy: LazyPilot, progress: Progress | None = None) -> None:
        """A mixture base (``base="mixture"``, or ``"auto"`` with λ selected: :attr:`_mixture_base`): the Gaussian
        mixture fitted on the pilot rows (in the fitting space), K by held-out log-likelihood
        (:func:`~tgpflow.features.mixture_base.fit_mixture_base`), before the pass sums its score
        (docs/gp_tilted.md, "A mixture base"), with its floor. Kept in ``base_mixture_``, its curve in
        ``pilot_["mixture"]``."""
        pilot = lazy.get()
        rows, keys = pilot.rows, pilot.keys
        if self._selecting and keys is not None and len(keys) == len(rows):
            # not on the rows that the selection holds out: it compares the tilts with the mixture alone there
            rows = rows[~validation_mask(keys, float(self.validation_fraction), SPLIT_SALT)]
        cells = cell_widths(rows, column_kinds(rows, [str(j) for j in range(rows.shape[1])]))
        with phase("mixture base", rows=rows.shape[0], dequantized=len(cells)) as info:
            self.base_mixture_, curve = fit_mixture_base(rows, self._seeds()[5], cells=cells, progress=progress)
            # the K components fitted; beside them (K > 1) the floor, the rows' own Gaussian (MIXTURE_FLOOR)
            floor = MIXTURE_FLOOR if self.base_mixture_.n_components > 1 else 0.0
            fitted = self.base_mixture_.n_components - (floor > 0)
            info.update(components=fitted)
        self.pilot_ = dict(getattr(self, "pilot_", {}) or {}, mixture={
            "components": fitted, "floor": floor, "rows": int(rows.shape[0]), "curve": curve})

    def _auto_bandwidth(self, features: RandomFourierFeatures, lazy: LazyPilot,
                        progress: Progress | None = None) -> float:
        """``bandwidth="auto"``: γ chosen on the pilot rows (``lazy``: already in memory, or read now), by
        :meth:`~tgpflow.models.tgp_selection.TGPSelector.pilot_bandwidth`; its curve is kept in
        ``bandwidth_selection_``."""
        # the map to the data's units as a value of its own (it goes to the workers; self._to_data would take the
        # whole estimator there)
        gamma, record = self._selector().pilot_bandwidth(lazy.get().rows, features, data_units=self._data_map(),
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

    def _make_heldout_grid(self, lazy: LazyPilot) -> None:
        """The projection grid on which the held-out rows' sliced CDFs are counted in the pass
        (:mod:`tgpflow.stats.projections`), from the pilot rows of the fitting space (``lazy``)."""
        self.heldout_grid_ = ProjectionGrid.from_rows(lazy.get().rows, random_state=self._seeds()[4],
                                                      units=self._fit_bounds())

