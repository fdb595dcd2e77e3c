"""Random features of the SDO kernel of root-Sobolev densities (docs/mathematics.md, "Root-Sobolev density", [Kozdoba et
al.]; errata D1, D4).

``k^a(x, y) = ∫ cos(2π⟨y − x, z⟩) w^a(z) dz``, ``w^a(z) = 1/(1 + a(2π)^{2m_s}‖z‖^{2m_s})``, m_s > d/2.
Frequencies come from the EXACT radial sampler (the paper's finite radial grid truncates the
heavy tail, D4): ``z = rθ``, θ uniform on the sphere, ``r = (v/a)^{1/2m_s}/(2π)``,
``v = G1/G2`` Beta-prime with ``G1 ~ Gamma(d/2m_s)``, ``G2 ~ Gamma(1 − d/2m_s)``, drawn in logs:
``log G(α) = log G(α + 1) + log(U)/α`` (U uniform), because a Gamma draw of small shape underflows
to 0 in float64 (at d = 75, m_s = 38 the shape 1 − d/2m_s = 1/76 gives G2 = 0, hence an infinite
frequency: measured 13 zeros in 200 000 draws).
Features ``φ_t(x) = √(2/T) cos(2π z_tᵀx + b_t)`` — with the 2π inside the cosine (D1) — so
that ``φ(x)ᵀφ(y) → k^a(x, y)/W``.

A draw is a :class:`~tgpflow.features.rff.RandomFourierFeatures` with ``Z = 2π z(1)``,
``c = b`` and width ``γ = a^{1/2m_s}``: since ``z(a) = a^{−1/2m_s} z(1)``, an a-sweep reuses one
draw through ``with_bandwidth`` (the scaling law), and the compiled float64 sincos, the
shifted phase and the fingerprint all carry over. float64.

:class:`SDODraw` is the draw of a root-Sobolev model as a value, independent of a: the a = 1
frequencies with the pilot whitening folded in (``Z ← Z W``, :mod:`tgpflow.features.whiten`), the
phases b of the centred input ``x − μ`` and the derivative order m_s; :meth:`SDODraw.at` gives the
features at any smoothness a. It is what a pipeline freezes and what ``fit(X, features=draw)`` reuses.
"""

from __future__ import annotations

import dataclasses
import math
from functools import cached_property

import numpy as np

from tgpflow.core.choices import WHITEN_MODES
from tgpflow.features.digest import array_hash
from tgpflow.features.rff import RandomFourierFeatures
from tgpflow.features.whiten import ROBUST_TRIM, Whitening, whitening

__all__ = ["draw_sdo_features", "sdo_width", "default_order", "log_gamma_draws", "SDODraw", "WHITEN_MODES"]


def default_order(d: int) -> int:
    """The smallest integer derivative order m_s > d/2."""
    return d // 2 + 1


def sdo_width(a: float, m_s: int) -> float:
    """γ = a^{1/2m_s}: the RFF width that turns the a = 1 frequencies into those of smoothness a."""
    if not (math.isfinite(a) and a > 0):
        raise ValueError(f"smoothness a must be a positive number; got {a!r}")
    return float(a) ** (1.0 / (2 * m_s))


def log_gamma_draws(shape: float, size: int, rng: np.random.Generator) -> np.ndarray:
    """log G for G ~ Gamma(shape, 1), finite for any shape > 0: ``G(α) = G(α + 1)·U^{1/α}`` in logs."""
    return np.log(rng.standard_gamma(shape + 1.0, size)) + np.log1p(-rng.random(size)) / shape


def draw_sdo_features(n_features: int, n_dims: int, *, m_s: int, a: float = 1.0, shift: np.ndarray | None = None,
                      random_state: int | np.random.Generator | None = None) -> RandomFourierFeatures:
    """T frequencies from the exact SDO radial sampler and phases b ~ U[0, 2π) (module docstring)."""
    d, T = int(n_dims), int(n_features)
    if not m_s > d / 2:
        raise ValueError(f"the SDO kernel needs a derivative order m_s > d/2 = {d / 2}; got m_s={m_s}")
    rng = np.random.default_rng(random_state)
    theta = rng.standard_normal((T, d))
    theta /= np.linalg.norm(theta, axis=1, keepdims=True)
    k = d / (2 * m_s)
    log_v = log_gamma_draws(k, T, rng) - log_gamma_draws(1.0 - k, T, rng)
    r = np.exp(log_v / (2 * m_s)) / (2 * np.pi)  # a = 1; other a by the width
    b = rng.uniform(0.0, 2.0 * np.pi, T)
    seed = int(random_state) if isinstance(random_state, (int, np.integer)) else None
    return RandomFourierFeatures(Z=2 * np.pi * r[:, None] * theta, c=b, gamma=sdo_width(a, m_s), shift=shift, seed=seed)


@dataclasses.dataclass(frozen=True, eq=False)
class SDODraw:
    """One SDO frequency draw for every smoothness a (see the module docstring).

    ``Z`` (T, d): the a = 1 frequencies 2π z(1) times the whitening matrix; ``phase`` (T,): b, the phases
    of ``x − centre``; ``centre`` (d,): μ; ``order``: m_s; ``rank``: the whitened dimension (the d of
    docs/mathematics.md, "Root-Sobolev density"); ``columns``: the input columns the whitening kept; ``seed``:
    informational. The features at smoothness a are ``cos(Z(x − μ)/γ + b)``, ``γ = a^{1/2m_s}``, stored as a
    :class:`RandomFourierFeatures` with ``c = b − Zμ/γ`` and shift μ: drawing b for ``x − μ`` rather than
    for x makes the draw itself, not only its kernel, invariant to a shift of the data.
    """

    Z: np.ndarray
    phase: np.ndarray
    centre: np.ndarray
    order: int
    rank: int
    columns: np.ndarray
    seed: int | None = None

    def __post_init__(self) -> None:
        Z = np.array(self.Z, dtype=np.float64)
        if Z.ndim != 2 or Z.shape[0] < 1 or not np.all(np.isfinite(Z)):
            raise ValueError(f"Z must be a finite (T, d) array; got shape {Z.shape}")
        T, d = Z.shape
        phase, centre = np.array(self.phase, dtype=np.float64), np.array(self.centre, dtype=np.float64)
        if phase.shape != (T,) or centre.shape != (d,):
            raise ValueError(f"phase must have shape ({T},) and centre ({d},); got {phase.shape}, {centre.shape}")
        for name, value in (("Z", Z), ("phase", phase), ("centre", centre)):
            value.setflags(write=False)
            object.__setattr__(self, name, value)
        object.__setattr__(self, "columns", np.array(self.columns, dtype=np.int64))
        object.__setattr__(self, "order", int(self.order))
        object.__setattr__(self, "rank", int(self.rank))

    @classmethod
    def from_pilot(cls, rows: np.ndarray, n_features: int, *, whiten: str = "robust", order: str | int = "auto",
                   random_state: int | None = 0) -> SDODraw:
        """Whiten by the pilot ``rows`` (``whiten``: one of :data:`WHITEN_MODES`), then draw T frequencies of
        the whitened rank (``order="auto"``: m_s = ⌊rank/2⌋ + 1) and fold the whitening into them."""
        if whiten not in WHITEN_MODES:
            raise ValueError(f"whiten must be one of {WHITEN_MODES}; got {whiten!r}")
        d = rows.shape[1]
        if whiten == "none":
            wh = Whitening(shift=rows.mean(axis=0), matrix=np.eye(d), columns=np.arange(d))
        else:
            wh = whitening(rows, trim=ROBUST_TRIM if whiten == "robust" else 0.0)
        m_s = default_order(wh.rank) if order == "auto" else int(order)
        draw = draw_sdo_features(int(n_features), wh.rank, m_s=m_s, a=1.0, random_state=random_state)
        return cls(Z=draw.Z @ wh.matrix, phase=draw.c, centre=wh.shift, order=m_s, rank=wh.rank, columns=wh.columns,
                   seed=draw.seed)

    @property
    def n_dims(self) -> int:
        """d, the input's columns (T is ``Z.shape[0]``)."""
        return int(self.Z.shape[1])

    @cached_property
    def fingerprint(self) -> str:
        """SHA-256 of (T, d, m_s, rank, Z, b, μ)."""
        return array_hash(b"tgpflow.SDODraw.v1", (*self.Z.shape, self.order, self.rank),
                          (self.Z, self.phase, self.centre)).hexdigest()

    def at(self, a: float) -> RandomFourierFeatures:
        """The features at smoothness a: width γ = a^{1/2m_s} (docs/mathematics.md, "Root-Sobolev density"'s scaling
        law)."""
        gamma = sdo_width(a, self.order)
        c = np.mod(self.phase - (self.Z @ self.centre) / gamma, 2 * np.pi)
        return RandomFourierFeatures(Z=self.Z, c=c, gamma=gamma, shift=self.centre, seed=self.seed)

    def to_arrays(self) -> dict[str, np.ndarray]:
        return {"Z": self.Z, "phase": self.phase, "centre": self.centre, "order": np.array(self.order),
                "rank": np.array(self.rank), "columns": self.columns}

    @classmethod
    def from_arrays(cls, arrays: dict[str, np.ndarray], seed: int | None = None) -> SDODraw:
        return cls(Z=arrays["Z"], phase=arrays["phase"], centre=arrays["centre"], order=int(arrays["order"]),
                   rank=int(arrays["rank"]), columns=arrays["columns"], seed=seed)
