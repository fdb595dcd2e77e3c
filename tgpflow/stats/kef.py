"""One-pass statistics of the kernel models on a Nyström basis (docs/mathematics.md, "Nyström kernel exponential family"
and "Score estimators on a Nyström basis").

``KEFStats`` (curl-free kernel: Nyström KEF and the curl-free score estimators — the same
statistics, docs/mathematics.md, "Score estimators on a Nyström basis"), sums over rows x with ``r_a = x − Y_a``:

* ``C = Σ_x B(x)ᵀB(x)`` (md × md), ``B(x) = [K_cf(x, Y_1) … K_cf(x, Y_m)]`` (d × md) — per
  block of rows one SYRK of the stacked (rows·d × md) matrix;
* ``h_lap[a] = Σ_x ℓ_a(x)`` (m × d), the Laplacian part of h (all of h for a flat base);
* for a Gaussian base known only after the pass (docs/mathematics.md, "Nyström kernel exponential family"): ``E0[a] =
  Σ_x K_cf(x, Y_a)`` (m × d × d) and ``F[a, :, :, l] = Σ_x K_cf(x, Y_a)(x − x₀)_l`` (m × d × d × d), about the
  basis shift x₀;
* the moments (N, mean, m2).

``DiagStats`` (diagonal kernel k I_d): ``Ck = Σ_x k_Y(x)k_Y(x)ᵀ`` (m × m),
``h_grad[a] = Σ_x ∇_x k(Y_a, x)`` (m × d), ``S0[a] = Σ_x k(Y_a, x)``, ``S1[a] = Σ_x k(Y_a, x)(x − x₀)``,
and the moments. Both are values: ``+``, ``−`` (refusing a basis mismatch), save/load.
Precision: float64 throughout.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any, ClassVar

import numpy as np

from tgpflow.core.backend import namespace, on_a_device
from tgpflow.core.memory import DEFAULT_BLOCK_BYTES, F64, MemoryCost, declare, plan_blocks, task_budget
from tgpflow.core.moments import Moments
from tgpflow.features.kernels import curl_free_blocks, curl_free_columns, sq_dist
from tgpflow.features.nystrom import NystromBasis
from tgpflow.stats.kef_on_device import diag_sums_on_device, kef_sums_on_device, lite_sums_on_device
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
    """Curl-free statistics on a Nyström basis (see module docstring).

    With dimension subsampling (``draw.components``) ``C`` is |I| × |I| and ``E0[a, i]``, ``F[a, i]`` are
    accumulated only for (a, i) ∈ I — zero elsewhere: h enters the solve and the held-out loss only on I.
    """

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
    """Statistics of the lite model f = Σ_a α_a k(Y_a, ·) (docs/mathematics.md, "Nyström kernel exponential family"):
    ``Cl = Σ_x D(x)ᵀD(x)`` (m × m), ``D(x) = [∇_x k(Y_a, x)]_a``; ``lap[a] = Σ_x Δ_x k(Y_a, x)``; for a Gaussian base
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
    subsampling), ``h_lap``, ``E0``, ``F`` (m·d·(1 + d + d²)) and their per-block sums (with subsampling
    the sums on I, |I|·d·(1 + d), twice). Per chunk row: the moments (d). Per block row, all m·d
    components: the curl-free blocks (m·d² floats), their copy in the contraction for ``F`` (m·d²), the
    two m·d products that form them, the differences r (m·d), the kernel profile and its derivatives
    (about 10·m); with subsampling only the |I| columns (d·|I|), four |I| gathers and the squared
    distances with the profile and weights (about 14·m) — neither r (m·d) nor anything of size m·d².
    """
    m, d = basis.n_basis, basis.n_dims
    if basis.index is None:
        size = m * d
        fixed = F64 * (2 * size * size + 2 * m * d * (1 + d + d * d) + m * d)
        per_row = F64 * (2 * m * d * d + 3 * m * d + 10 * m + 2 * d)
    else:
        size = basis.index.size
        fixed = F64 * (2 * size * size + m * d * (2 + d + d * d) + 2 * size * d * (1 + d))
        per_row = F64 * (d * size + 4 * size + 14 * m + 2 * d)
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
    """Curl-free statistics of one chunk of rows (docs/mathematics.md, "Nyström kernel exponential family"), in row
    blocks; float64.

    With dimension subsampling only the |I| columns of the index set are formed (not all m·d, then
    sliced) and ``E0``, ``F`` only on the rows (a, i) ∈ I that h is used on (:class:`KEFStats`).
    ``block_bytes`` caps the per-row part of the task's memory; the whole task is planned by
    :func:`kef_memory` (:mod:`tgpflow.core.memory`). A chunk on a device is summed there
    (:mod:`tgpflow.stats.kef_on_device`)."""
    if on_a_device(x):
        return _from_device(KEFStats, kef_sums_on_device, x, basis, kef_memory, block_bytes)
    x = _check(x, basis)
    out = KEFStats.zero(basis)
    rows = plan_blocks(kef_memory(basis), block_bytes, chunk_rows=x.shape[0], budget=task_budget()[0]).rows
    if basis.index is None:
        prod = np.empty_like(out.C)
        for start in range(0, x.shape[0], rows):
            _add_full_block(x[start:start + rows], basis, out, prod)
    else:
        _add_subsampled(x, basis, rows, out)
    return dataclasses.replace(out, moments=Moments.from_rows(x))


def _add_subsampled(x: np.ndarray, basis: NystromBasis, rows: int, out: KEFStats) -> None:
    """Fill ``out`` (zero) with the chunk's statistics on the index set I (docs/mathematics.md, "Nyström kernel
    exponential family", dimension subsampling).

    The columns are built grouped by component (:func:`curl_free_columns`), so C, E0 and F are summed in
    that order and put back in the flat order a·d + i once per chunk (an |I|² gather, not per block)."""
    d, index = basis.n_dims, basis.index
    order = np.argsort(index % d, kind="stable")
    grouped = index[order]
    Ys = basis.Y - basis.shift  # rows and basis about x₀: the expanded squared distances stay accurate
    prod = np.empty_like(out.C)
    E0, F = np.zeros((index.size, d)), np.zeros((index.size, d, d))
    for start in range(0, x.shape[0], rows):
        xs = x[start:start + rows] - basis.shift
        alpha, kappa, omega = basis.kernel.curl_free_weights(sq_dist(xs, Ys), d)
        cols = curl_free_columns(xs, Ys, alpha, kappa, grouped)  # (nb, d, |I|)
        stacked = cols.reshape(-1, index.size)
        np.matmul(stacked.T, stacked, out=prod)  # the SYRK shrinks with |I|²
        out.C[...] += prod  # in the grouped order until the end of the chunk
        out.h_lap[...] += omega.T @ xs - omega.sum(axis=0)[:, None] * Ys  # Σ_x ω_a r_a
        # K_cf is symmetric, so column (a, i) summed over the rows j is E0[a, i, :] (and F[a, i] likewise)
        E0 += cols.sum(axis=0).T
        F += np.einsum("njc,nl->cjl", cols, xs, optimize=True)
    del prod
    back = np.argsort(order)
    out.C[...] = out.C[np.ix_(back, back)]
    out.E0.reshape(-1, d)[grouped] = E0  # zero-filled (m, d, d) and (m, d, d, d): the reshapes are views
    out.F.reshape(-1, d, d)[grouped] = F


def _add_full_block(xb: np.ndarray, basis: NystromBasis, out: KEFStats, prod: np.ndarray) -> None:
    """Add one block's C, h_lap, E0, F on all m·d components to ``out`` (docs/mathematics.md, "Nyström kernel
    exponential family")."""
    m, d = basis.n_basis, basis.n_dims
    r, alpha, kappa, omega = basis.kernel.curl_free_parts(xb, basis.Y)
    blocks = curl_free_blocks(r, alpha, kappa)  # (nb, d, m, d)
    stacked = blocks.reshape(xb.shape[0] * d, m * d)
    np.matmul(stacked.T, stacked, out=prod)  # SYRK inside NumPy's matmul (GIL released)
    out.C[...] += prod
    out.h_lap[...] += np.einsum("nm,nmd->md", omega, r)
    out.E0[...] += blocks.sum(axis=0).transpose(1, 0, 2)
    out.F[...] += np.einsum("niaj,nl->aijl", blocks, xb - basis.shift, optimize=True)


def diag_chunk_stats(x: Any, basis: NystromBasis, block_bytes: int = DEFAULT_BLOCK_BYTES) -> DiagStats:
    """Diagonal-kernel statistics of one chunk of rows (docs/mathematics.md, "Score estimators on a Nyström basis"), in
    row blocks; float64 (on the chunk's device, :mod:`tgpflow.stats.kef_on_device`)."""
    if on_a_device(x):
        return _from_device(DiagStats, diag_sums_on_device, x, basis, diag_memory, block_bytes)
    x = _check(x, basis)
    out = DiagStats.zero(basis)
    moments = Moments.from_rows(x)
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
    """Lite statistics of one chunk of rows (docs/mathematics.md, "Nyström kernel exponential family"), in row blocks;
    float64 (on the chunk's device, :mod:`tgpflow.stats.kef_on_device`)."""
    if on_a_device(x):
        return _from_device(LiteStats, lite_sums_on_device, x, basis, lite_memory, block_bytes)
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


def _from_device(kind: type, sums: Callable[..., dict[str, np.ndarray]], x: Any, basis: NystromBasis,
                 memory: Callable[[NystromBasis], MemoryCost], block_bytes: int) -> Any:
    """The statistics ``kind`` of a chunk on a device: its sums formed there in float64, its moments, the basis they
    carry."""
    if int(x.shape[1]) != basis.n_dims:
        raise ValueError(f"chunk has shape {tuple(x.shape)} but the basis is in d={basis.n_dims}")
    zero = kind.zero(basis)
    if int(x.shape[0]) == 0:
        return zero
    xp = namespace(x)
    x = xp.astype(x, xp.float64)  # a float32 chunk too: float64 sums, as the host path casts
    return dataclasses.replace(zero, moments=Moments.from_rows(x), **sums(x, basis, memory(basis).per_row, block_bytes))


def _basis_cost(memory: Any) -> Any:
    def cost(n_dims: int, basis: NystromBasis, block_bytes: int = DEFAULT_BLOCK_BYTES) -> tuple[MemoryCost, int]:
        return memory(basis), block_bytes
    return cost


declare(kef_chunk_stats, _basis_cost(kef_memory))
declare(diag_chunk_stats, _basis_cost(diag_memory))
declare(lite_chunk_stats, _basis_cost(lite_memory))
