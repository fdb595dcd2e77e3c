"""The Nyström kernel exponential family ([Sutherland et al.]): :class:`NystromKEF`, the curl-free Tikhonov
:class:`~tgpflow.models.kernel_score.ScoreEstimator` with a log density ``f(x) + log q0(x)`` (docs/mathematics.md,
"Nyström kernel exponential family").
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tgpflow.core.memory import DEFAULT_BLOCK_BYTES
from tgpflow.features.nystrom import NystromBasis
from tgpflow.io.pilot import DEFAULT_PILOT_ROWS, LazyPilot
from tgpflow.models.anomaly import AnomalyMixin
from tgpflow.models.evaluation import DensityEvaluation
from tgpflow.models.kernel_forms import KernelForm, kernel_form
from tgpflow.models.kernel_score import ScoreEstimator
from tgpflow.models.params import NystromKEFParams
from tgpflow.solve.kef import DEFAULT_RANK_TOL

__all__ = ["NystromKEF"]


class NystromKEF(AnomalyMixin, DensityEvaluation, ScoreEstimator):
    """Nyström kernel exponential family ([Sutherland et al.] Theorem 1; docs/mathematics.md, "Nyström kernel
    exponential family").

    ``log p(x) = f(x) + log q0(x)`` with ``f = Σ_a ∂_y k(Y_a, ·)ᵀβ_a`` and
    ``β = −(C/N + λG)⁺ h/N`` ([Sutherland et al.] adds εI, ε = 1e-5: ``ridge``; none by default). The score-matching
    loss includes the cross term ∂f·∂log q0 (docs/mathematics.md, "Where the papers differ", item B1). The kernel is
    curl-free; ``regularizer`` may be changed for the spectral variants. ``anomaly_score`` is −log p; ``is_anomaly``
    needs a threshold, which its fit does not learn: ``calibrate_threshold(X, quantile)`` (a pipeline's version has
    one).
    """

    kernel = "curl_free"  # fixed: a class attribute, not a parameter
    params_table = NystromKEFParams
    NO_NORMALIZER = "this model has no normaliser (flat base: improper); fit with base='gaussian'"

    def __init__(self, *, n_basis: int = 100, bandwidth: str | float = "median", lam: float = 1e-3, base: str = "flat",
                 lite: bool = False, n_components: int | None = None, radial: str = "gaussian",
                 regularizer: str = "tikhonov", nu: float = 1.0, step: float | None = None, ridge: float = 0.0,
                 rank_tol: float = DEFAULT_RANK_TOL, lam_grid: list[float] | None = None,
                 validation_fraction: float = 0.1, pilot_rows: int = DEFAULT_PILOT_ROWS, on_bad_rows: str = "raise",
                 block_bytes: int = DEFAULT_BLOCK_BYTES, split_every: int = 8, random_state: int | None = 0,
                 device: str = "auto", scale: bool = False):
        self.device = device
        self.scale = scale
        self.lam_grid = lam_grid
        self.validation_fraction = validation_fraction
        self.lite = lite
        self.n_components = n_components
        self.n_basis = n_basis
        self.bandwidth = bandwidth
        self.lam = lam
        self.base = base
        self.radial = radial
        self.regularizer = regularizer
        self.nu = nu
        self.step = step
        self.ridge = ridge
        self.rank_tol = rank_tol
        self.pilot_rows = pilot_rows
        self.on_bad_rows = on_bad_rows
        self.block_bytes = block_bytes
        self.split_every = split_every
        self.random_state = random_state

    @property
    def _form(self) -> KernelForm:
        """The curl-free form, or the lite one (``lite``; :mod:`tgpflow.models.kernel_forms`)."""
        return kernel_form("lite" if self.lite else "curl_free")

    def _make_basis(self, source: Any, given: Any, lazy: LazyPilot) -> NystromBasis:
        basis = super()._make_basis(source, given, lazy)
        if self.n_components is None or isinstance(given, NystromBasis) or self.n_components >= basis.n_dims:
            return basis
        # [Sutherland et al.] §3: exactly ℓ of the d components of each basis point, uniformly, seeded
        return basis.with_components(self.n_components,
                                     np.random.default_rng(np.random.SeedSequence(self.random_state).spawn(2)[1]))

    @property
    def beta_(self) -> np.ndarray:
        """β of docs/mathematics.md, "Nyström kernel exponential family", (m, d) (α, (m,), for lite)."""
        return self.coef_
