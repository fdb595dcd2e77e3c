"""One-pass statistics of the kernel models on a Nyström basis (MATH.md §6, §7).

``KEFStats`` (curl-free kernel: Nyström KEF and the curl-free score estimators — the same
statistics, MATH.md §7), sums over rows x with ``r_a = x − Y_a``:

* ``C = Σ_x B(x)ᵀB(x)`` (md × md), ``B(x) = [K_cf(x, Y_1) … K_cf(x, Y_m)]`` (d × md) — per
  block of rows one SYRK of the stacked (rows·d × md) matrix;
* ``h_lap[a] = Σ_x ℓ_a(x)`` (m × d), the Laplacian part of h (all of h for a flat base);
* for a Gaussian base known only after the pass (MATH.md §6): ``E0[a] = Σ_x K_cf(x, Y_a)``
  (m × d × d) and ``F[a, :, :, l] = Σ_x K_cf(x, Y_a)(x − x₀)_l`` (m × d × d × d), about the
  basis shift x₀;
* the moments (N, mean, m2).

``DiagStats`` (diagonal kernel k I_d): ``Ck = Σ_x k_Y(x)k_Y(x)ᵀ`` (m × m),
``h_grad[a] = Σ_x ∇_x k(Y_a, x)`` (m × d), ``S0[a] = Σ_x k(Y_a, x)``, ``S1[a] = Σ_x k(Y_a, x)(x − x₀)``,
and the moments. Both are values: ``+``, ``−`` (refusing a basis mismatch), save/load.
Precision: float64 throughout.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, ClassVar

import numpy as np

from tgpflow.core.memory import DEFAULT_BLOCK_BYTES, F64, MemoryCost, declare, plan_blocks, task_budget
from tgpflow.core.moments import Moments
from tgpflow.features.kernels import curl_free_blocks
from tgpflow.features.nystrom import NystromBasis
from tgpflow.stats.stored import StoredStats

__all__ = ["KEFStats", "DiagStats", "LiteStats", "kef_chunk_stats", "diag_chunk_stats", "lite_chunk_stats",
           "kef_block_rows", "kef_memory", "diag_memory", "lite_memory"]


class _ArrayStats(StoredStats):
    """What the statistics on a Nyström basis share: the basis they carry (its fingerprint theirs), moments and
    summed arrays (the algebra is :class:`~tgpflow.core.summable.AdditiveStats`), the errors of a basis mismatch,
    and the basis saved as its arrays (``draw.Y``, ``draw.bandwidth``, ``draw.shift``, ``draw.components``) and
    its kernel's name."""

    MISMATCH: ClassVar[str] = "cannot combine statistics of different Nyström bases ({a}… and {b}…)"
    DRAW_MISMATCH: ClassVar[str] = ("the statistics were accumulated with another Nyström basis (fingerprints "
                                    "{a}… and {b}…); pass basis=est.basis_ to accumulate/fit")

    draw: NystromBasis | None
    moments: Moments

    @property
    def n(self) -> int:
        return self.moments.n

    @classmethod
    def _draw_meta(cls, draw: NystromBasis) -> dict[str, Any]:
        return {"kernel": draw.kernel_name}

    @classmethod
    def _draw_from_arrays(cls, arrays: dict[str, np.ndarray], meta: Mapping[str, Any]) -> NystromBasis:
        return NystromBasis.from_arrays(arrays, meta["kernel"])

    def check_basis(self, basis: NystromBasis) -> None:
        """Raise unless these statistics were accumulated on ``basis``."""
        self.check_draw(basis)


@dataclasses.dataclass(frozen=True, eq=False)
class KEFStats(_ArrayStats):
    """Curl-free statistics on a Nyström basis (see module docstring)."""

    draw: NystromBasis | None
    moments: Moments
    C: np.ndarray
    h_lap: np.ndarray
    E0: np.ndarray
    F: np.ndarray
    fingerprint: str = dataclasses.field(default="", kw_only=True)

    @classmethod
    def zero(cls, basis: NystromBasis) -> KEFStats:
        m, d = basis.n_basis, basis.n_dims
        size = m * d if basis.index is None else basis.index.size  # C only over the index set I
        return cls(basis, Moments.zero(d), np.zeros((size, size)), np.zeros((m, d)),
                   np.zeros((m, d, d)), np.zeros((m, d, d, d)))


@dataclasses.dataclass(frozen=True, eq=False)
class LiteStats(_ArrayStats):
    """Statistics of the lite model f = Σ_a α_a k(Y_a, ·) (MATH.md §6): ``Cl = Σ_x D(x)ᵀD(x)`` (m × m),
    ``D(x) = [∇_x k(Y_a, x)]_a``; ``lap[a] = Σ_x Δ_x k(Y_a, x)``; for a Gaussian base
    ``L1[a] = Σ_x ∇_x k(Y_a, x)`` and ``L2[a] = Σ_x ∇_x k(Y_a, x)(x − x₀)ᵀ``."""

    draw: NystromBasis | None
    moments: Moments
    Cl: np.ndarray
    lap: np.ndarray
    L1: np.ndarray
    L2: np.ndarray
    fingerprint: str = dataclasses.field(default="", kw_only=True)

    @classmethod
    def zero(cls, basis: NystromBasis) -> LiteStats:
        m, d = basis.n_basis, basis.n_dims
        return cls(basis, Moments.zero(d), np.zeros((m, m)), np.zeros(m), np.zeros((m, d)),
                   np.zeros((m, d, d)))


@dataclasses.dataclass(frozen=True, eq=False)
class DiagStats(_ArrayStats):
    """Diagonal-kernel statistics on a Nyström basis (see module docstring)."""

    draw: NystromBasis | None
    moments: Moments
    Ck: np.ndarray
    h_grad: np.ndarray
    S0: np.ndarray
    S1: np.ndarray
    fingerprint: str = dataclasses.field(default="", kw_only=True)

    @classmethod
    def zero(cls, basis: NystromBasis) -> DiagStats:
        m, d = basis.n_basis, basis.n_dims
        return cls(basis, Moments.zero(d), np.zeros((m, m)), np.zeros((m, d)), np.zeros(m), np.zeros((m, d)))


def kef_memory(basis: NystromBasis) -> MemoryCost:
    """The bytes of one :func:`kef_chunk_stats` task (see :mod:`tgpflow.core.memory`).

    Fixed: the accumulator ``C`` and the SYRK product buffer (2·(md)², or 2·|I|² with dimension
    subsampling), ``h_lap``, ``E0``, ``F`` (m·d·(1 + d + d²)) and their per-block sums. Per block row:
    the curl-free blocks (m·d² floats), their copy in the contraction for ``F`` (m·d²), the two
    m·d products that form them, the differences r (m·d), the kernel profile and its derivatives
    (about 10·m) and, with subsampling, the gathered columns (d·|I|). Per chunk row: the moments (d).
    """
    m, d = basis.n_basis, basis.n_dims
    size = m * d if basis.index is None else basis.index.size
    fixed = F64 * (2 * size * size + 2 * m * d * (1 + d + d * d) + m * d)
    per_row = F64 * (2 * m * d * d + 3 * m * d + 10 * m + 2 * d + (d * size if basis.index is not None else 0))
    return MemoryCost(f"curl-free KEF statistics (m={m}, d={d}, |C|={size}²)", fixed, per_row, F64 * d,
                      "use a smaller basis (n_basis) or dimension subsampling",
                      F64 * (size * size + m * d * (1 + d + d * d) + d * d + d))


def diag_memory(basis: NystromBasis) -> MemoryCost:
    """The bytes of one :func:`diag_chunk_stats` task: ``Ck`` and its block product (2·m²) and the
    m·d sums fixed; per block row the differences r (m·d), the kernel profile (about 8·m) and the row."""
    m, d = basis.n_basis, basis.n_dims
    fixed = F64 * (2 * m * m + 4 * m * d + 2 * m)
    per_row = F64 * (m * d + 8 * m + 2 * d)
    return MemoryCost(f"diagonal score statistics (m={m}, d={d})", fixed, per_row, F64 * d,
                      "use a smaller basis (n_basis)", F64 * (m * m + 2 * m * d + m + d * d + d))


def lite_memory(basis: NystromBasis) -> MemoryCost:
    """The bytes of one :func:`lite_chunk_stats` task: ``Cl`` and its block product (2·m²) and the sums
    (m·d·(d + 2)) fixed; per block row r, D and its transposed copy (3·m·d), the profile (about 10·m)."""
    m, d = basis.n_basis, basis.n_dims
    fixed = F64 * (2 * m * m + 2 * m * d * (d + 2) + 2 * m)
    per_row = F64 * (3 * m * d + 10 * m + 2 * d)
    return MemoryCost(f"lite KEF statistics (m={m}, d={d})", fixed, per_row, F64 * d, "use a smaller basis (n_basis)",
                      F64 * (m * m + m + m * d * (d + 1) + d * d + d))


def kef_block_rows(basis: NystromBasis, block_bytes: int) -> int:
    """Rows per block of the curl-free statistics within ``block_bytes`` (the per-row part, :func:`kef_memory`)."""
    return plan_blocks(kef_memory(basis), block_bytes).rows


def _check(x: Any, basis: NystromBasis) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    if x.ndim != 2 or x.shape[1] != basis.n_dims:
        raise ValueError(f"chunk has shape {x.shape} but the basis is in d={basis.n_dims}")
    return x


def kef_chunk_stats(x: Any, basis: NystromBasis, block_bytes: int = DEFAULT_BLOCK_BYTES) -> KEFStats:
    """Curl-free statistics of one chunk of rows (MATH.md §6), in row blocks; float64.

    ``block_bytes`` caps the per-row part of the task's memory; the whole task is planned by
    :func:`kef_memory` (:mod:`tgpflow.core.memory`)."""
    x = _check(x, basis)
    out = KEFStats.zero(basis)
    moments = Moments.from_rows(x)
    m, d = basis.n_basis, basis.n_dims
    C, h, E0, F = out.C, out.h_lap, out.E0, out.F
    prod = np.empty_like(C)
    rows = plan_blocks(kef_memory(basis), block_bytes, chunk_rows=x.shape[0], budget=task_budget()[0]).rows
    for start in range(0, x.shape[0], rows):
        xb = x[start:start + rows]
        r, alpha, kappa, omega = basis.kernel.curl_free_parts(xb, basis.Y)
        blocks = curl_free_blocks(r, alpha, kappa)  # (nb, d, m, d)
        stacked = blocks.reshape(xb.shape[0] * d, m * d)
        if basis.index is not None:  # dimension subsampling: the SYRK shrinks with |I|²
            stacked = np.ascontiguousarray(stacked[:, basis.index])
        np.matmul(stacked.T, stacked, out=prod)  # SYRK inside NumPy's matmul (GIL released)
        C += prod
        h += np.einsum("nm,nmd->md", omega, r)
        E0 += blocks.sum(axis=0).transpose(1, 0, 2)
        F += np.einsum("niaj,nl->aijl", blocks, xb - basis.shift, optimize=True)
    return dataclasses.replace(out, moments=moments)


def diag_chunk_stats(x: Any, basis: NystromBasis, block_bytes: int = DEFAULT_BLOCK_BYTES) -> DiagStats:
    """Diagonal-kernel statistics of one chunk of rows (MATH.md §7), in row blocks; float64."""
    x = _check(x, basis)
    out = DiagStats.zero(basis)
    moments = Moments.from_rows(x)
    m, d = basis.n_basis, basis.n_dims
    rows = plan_blocks(diag_memory(basis), block_bytes, chunk_rows=x.shape[0], budget=task_budget()[0]).rows
    for start in range(0, x.shape[0], rows):
        xb = x[start:start + rows]
        r = xb[:, None, :] - basis.Y[None, :, :]
        k, d1, _, _ = basis.kernel.profile(np.einsum("nmd,nmd->nm", r, r))
        out.Ck[...] += k.T @ k
        out.h_grad[...] += np.einsum("nm,nmd->md", 2.0 * d1, r)
        out.S0[...] += k.sum(axis=0)
        out.S1[...] += k.T @ (xb - basis.shift)
    return dataclasses.replace(out, moments=moments)


def lite_chunk_stats(x: Any, basis: NystromBasis, block_bytes: int = DEFAULT_BLOCK_BYTES) -> LiteStats:
    """Lite statistics of one chunk of rows (MATH.md §6), in row blocks; float64."""
    x = _check(x, basis)
    out = LiteStats.zero(basis)
    moments = Moments.from_rows(x)
    m, d = basis.n_basis, basis.n_dims
    rows = plan_blocks(lite_memory(basis), block_bytes, chunk_rows=x.shape[0], budget=task_budget()[0]).rows
    for start in range(0, x.shape[0], rows):
        xb = x[start:start + rows]
        r = xb[:, None, :] - basis.Y[None, :, :]
        u = np.einsum("nmd,nmd->nm", r, r)
        _, d1, d2, _ = basis.kernel.profile(u)
        D = (2.0 * d1)[:, :, None] * r  # (nb, m, d): ∇_x k(Y_a, x) = 2ψ'(u) r
        stacked = np.ascontiguousarray(D.transpose(0, 2, 1)).reshape(xb.shape[0] * d, m)
        out.Cl[...] += stacked.T @ stacked
        out.lap[...] += np.sum(4.0 * d2 * u + 2.0 * d * d1, axis=0)
        out.L1[...] += D.sum(axis=0)
        out.L2[...] += np.einsum("nmj,nl->mjl", D, xb - basis.shift)
    return dataclasses.replace(out, moments=moments)


def _basis_cost(memory: Any) -> Any:
    def cost(n_dims: int, basis: NystromBasis, block_bytes: int = DEFAULT_BLOCK_BYTES) -> tuple[MemoryCost, int]:
        return memory(basis), block_bytes
    return cost


declare(kef_chunk_stats, _basis_cost(kef_memory))
declare(diag_chunk_stats, _basis_cost(diag_memory))
declare(lite_chunk_stats, _basis_cost(lite_memory))
