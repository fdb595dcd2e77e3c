"""The Nyström basis of the kernel models: points Y (m, d), a radial kernel and its bandwidth.

A basis is a value like :class:`~tgpflow.features.rff.RandomFourierFeatures`: Y, the kernel
name, σ_k and the pilot shift x₀ (about which the moment-type sums of a Gaussian base are
accumulated, docs/mathematics.md, "Features and the pilot pass") define it; its fingerprint identifies it and is stored
with every statistics object and model computed from it. Y is drawn uniformly (seeded) from the pilot
sample, or given by the user. float64.
"""

from __future__ import annotations

import dataclasses
from functools import cached_property

import numpy as np

from tgpflow.features.digest import array_hash
from tgpflow.features.kernels import RadialKernel

__all__ = ["NystromBasis"]


@dataclasses.dataclass(frozen=True, eq=False)
class NystromBasis:
    """Basis points ``Y`` (m, d) with ``kernel`` ("gaussian" or "imq") of bandwidth σ_k.

    ``components`` (optional, (m, d) bool): [Sutherland et al.]'s dimension subsampling — only the
    derivative basis functions ∂_i k(Y_a, ·) with ``components[a, i]`` are used (the index set I).
    """

    Y: np.ndarray
    bandwidth: float
    kernel_name: str = "gaussian"
    shift: np.ndarray | None = None
    components: np.ndarray | None = None

    def __post_init__(self) -> None:
        Y = np.array(self.Y, dtype=np.float64, copy=True)
        if Y.ndim != 2 or Y.shape[0] < 1 or Y.shape[1] < 1:
            raise ValueError(f"the basis Y must be a non-empty (m, d) array; got shape {Y.shape}")
        if not np.all(np.isfinite(Y)):
            raise ValueError("the basis Y has non-finite values")
        Y.setflags(write=False)
        object.__setattr__(self, "Y", Y)
        RadialKernel(self.kernel_name, float(self.bandwidth))  # validates
        object.__setattr__(self, "bandwidth", float(self.bandwidth))
        shift = np.zeros(Y.shape[1]) if self.shift is None else np.array(self.shift, dtype=np.float64)
        if shift.shape != (Y.shape[1],):
            raise ValueError(f"shift must have shape ({Y.shape[1]},); got {shift.shape}")
        shift.setflags(write=False)
        object.__setattr__(self, "shift", shift)
        if self.components is not None:
            comp = np.array(self.components, dtype=bool)
            if comp.shape != Y.shape or not comp.any():
                raise ValueError(f"components must be a non-empty (m, d) = {Y.shape} boolean mask; got shape {comp.shape}")
            comp.setflags(write=False)
            object.__setattr__(self, "components", comp)

    @property
    def index(self) -> np.ndarray | None:
        """Flat indices a·d + i of the used components (None: all md)."""
        return None if self.components is None else np.flatnonzero(self.components.ravel())

    @property
    def n_basis(self) -> int:
        return int(self.Y.shape[0])

    @property
    def n_dims(self) -> int:
        return int(self.Y.shape[1])

    @cached_property
    def kernel(self) -> RadialKernel:
        return RadialKernel(self.kernel_name, self.bandwidth)

    @cached_property
    def fingerprint(self) -> str:
        h = array_hash(b"tgpflow.NystromBasis.v1", self.Y.shape, (self.Y, np.array([self.bandwidth]), self.shift),
                       prefix=self.kernel_name.encode())
        if self.components is not None:
            h.update(b"components")
            h.update(np.ascontiguousarray(self.components, dtype="u1").tobytes())
        return h.hexdigest()

    def with_bandwidth(self, bandwidth: float) -> NystromBasis:
        return NystromBasis(self.Y, bandwidth, self.kernel_name, self.shift, self.components)

    def with_components(self, n_components: int, rng: np.random.Generator) -> NystromBasis:
        """This basis with [Sutherland et al.]'s dimension subsampling (docs/mathematics.md, "Nyström kernel exponential
        family"): exactly ``n_components`` of the d components of each basis point, uniformly without replacement, drawn
        from ``rng`` point by point."""
        if not 1 <= int(n_components) <= self.n_dims:
            raise ValueError(f"n_components must be in 1..{self.n_dims} (d); got {n_components}")
        mask = np.zeros(self.Y.shape, dtype=bool)
        for a in range(self.n_basis):
            mask[a, rng.choice(self.n_dims, int(n_components), replace=False)] = True
        return NystromBasis(self.Y, self.bandwidth, self.kernel_name, self.shift, mask)

    def __repr__(self) -> str:
        return (f"NystromBasis(m={self.n_basis}, d={self.n_dims}, kernel={self.kernel_name!r}, "
                f"bandwidth={self.bandwidth:.6g}, fingerprint={self.fingerprint[:12]})")

    def to_arrays(self) -> dict[str, np.ndarray]:
        out = {"Y": self.Y, "bandwidth": np.array(self.bandwidth), "shift": self.shift}
        if self.components is not None:
            out["components"] = self.components.astype(np.int8)
        return out

    @classmethod
    def from_arrays(cls, arrays: dict[str, np.ndarray], kernel_name: str) -> NystromBasis:
        comp = arrays.get("components")
        return cls(arrays["Y"], float(arrays["bandwidth"]), kernel_name, arrays["shift"],
                   None if comp is None else np.asarray(comp).astype(bool))
