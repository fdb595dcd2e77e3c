"""A model's own standardization: ``z = (x − center) / scale`` per column, stored with the model.

A smooth tilt of one Gaussian base, a Nyström basis of one bandwidth or one RFF draw treats every column
alike; on mixed scales (one column about 1000, another 0.09) the wide column decides the bandwidth and the
narrow one is fitted as a spike, and the fit puts mass where there are no data. ``scale=True`` (every
estimator; ``tgpflow fit --scale``) and a pipeline's ``preprocess`` fit the model to standardized rows. The
standardization is part of the fitted model: it is frozen at fit time (from the pilot sample, or given, as
a pipeline gives its store's), saved in the model file, and applied inside every evaluation, so a model
takes and returns rows in the data's units wherever it is loaded:

``log p(x) = log q(z) − Σ_j log scale_j``,  ``∇ log p(x) = ∇ q(z) / scale``,  samples ``x = center + scale · z``.

Declared bounds are in the data's units too; the affine map carries them to the standardized units
(:meth:`tgpflow.features.bounds.ColumnBounds.scaled`), where the log/logit transform of a bounded column
differs from the one in the data's units by a constant only. float64 throughout.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import numpy as np

__all__ = ["Scaling"]


@dataclasses.dataclass(frozen=True, eq=False)
class Scaling:
    """Per-column centre and scale (scale > 0); :meth:`forward` maps the data's units to the model's."""

    center: np.ndarray
    scale: np.ndarray

    def __post_init__(self) -> None:
        center = np.asarray(self.center, dtype=np.float64).reshape(-1)
        scale = np.asarray(self.scale, dtype=np.float64).reshape(-1)
        if center.shape != scale.shape:
            raise ValueError(f"a scaling needs one centre and one scale per column; got {center.size} and {scale.size}")
        if not (np.all(np.isfinite(center)) and np.all(np.isfinite(scale)) and np.all(scale > 0)):
            raise ValueError("a scaling needs finite centres and finite positive scales")
        object.__setattr__(self, "center", center)
        object.__setattr__(self, "scale", scale)

    @classmethod
    def from_rows(cls, rows: np.ndarray, columns: Any = None, *, center: bool = True, scale: bool = True,
                  where: str = "the data") -> Scaling:
        """Mean and standard deviation of ``rows`` (n, d) per column (``center``/``scale`` False: 0 and 1); a
        column with no spread cannot be scaled and is refused by name."""
        rows = np.asarray(rows, dtype=np.float64)
        d = rows.shape[1]
        mean = rows.mean(axis=0) if center else np.zeros(d)
        sd = rows.std(axis=0) if scale else np.ones(d)
        flat = [j for j in range(d) if not sd[j] > 0]
        if flat:
            names = [str(columns[j]) if columns is not None else str(j) for j in flat]
            raise ValueError(f"{where}: column(s) {names} are constant in the pilot sample of {rows.shape[0]} rows "
                             f"and cannot be standardized; drop them from the columns")
        return cls(mean, sd)

    @classmethod
    def from_dict(cls, value: Mapping[str, Any] | None) -> Scaling | None:
        """The scaling of :meth:`to_dict` (a pipeline's ``preprocess`` record has the same keys); None for None."""
        return None if not value else cls(np.asarray(value["center"]), np.asarray(value["scale"]))

    def to_dict(self) -> dict[str, list[float]]:
        return {"center": self.center.tolist(), "scale": self.scale.tolist()}

    @property
    def n_dims(self) -> int:
        return int(self.center.shape[0])

    def forward(self, x: np.ndarray) -> np.ndarray:
        """Rows in the data's units → the model's (standardized) units."""
        return (x - self.center) / self.scale

    def inverse(self, z: np.ndarray) -> np.ndarray:
        """Rows in the model's units → the data's units."""
        return self.center + z * self.scale

    @property
    def log_jacobian(self) -> float:
        """log |dz/dx| = −Σ log scale: a density of z plus this is the density of x."""
        return -float(np.log(self.scale).sum())

    def equals(self, other: Scaling | None) -> bool:
        """Whether ``other`` is the same map (bit for bit)."""
        return other is not None and np.array_equal(self.center, other.center) and np.array_equal(self.scale,
                                                                                                    other.scale)
