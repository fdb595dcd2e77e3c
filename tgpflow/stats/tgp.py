"""Sufficient statistics of the GP-tilted density, FD and FVPD (docs/mathematics.md, "Fisher divergence and base-measure
learning" and "The Fisher variational predictive distribution").

One pass accumulates, as sums over rows:

* the moments ``N, mean, m2`` (:class:`~tgpflow.core.moments.Moments`);
* ``gram = Φ' = Σ φ'(x) φ'(x)ᵀ`` (S×S), ``u = Σ φ'(x)``, ``psi = ψ = Σ φ(x)``;
* ``U = Σ φ'(x) (x − x₀)ᵀ`` (S×d) about the pilot shift x₀ of the features (docs/mathematics.md, "Features and the pilot
  pass"), so that ``U − u μᵀ`` is formed as ``U − u (μ − x₀)ᵀ`` without cancellation;
* optionally ``phi_gram = Σ φ(x) φ(x)ᵀ`` (S×S): only for held-out rows of an FVPD selection,
  whose log-likelihood needs the mean of ``φᵀM⁻¹φ`` (docs/mathematics.md, "The Fisher variational predictive
  distribution");
* under a mixture base m fixed before the pass (:mod:`tgpflow.features.mixture_base`; docs/gp_tilted.md,
  "A mixture base"): ``V = Σ φ'(x) s₀(x)ᵀ`` (S×d) with the base's score s₀ = ∇ log m, which takes the place of
  ``U − u μᵀ`` in ψ' (ψ' = −rowsum(V ⊙ Z)), and ``base_sums = (Σ log m(x), Σ ½‖s₀(x)‖² + Δ log m(x))``, the
  held-out log-likelihood's and Hyvärinen loss's base terms. The statistics carry that mixture.

μ and Σ of the base are not needed during the pass: they are combined afterwards
(``tgpflow.solve.tgp``, ``tgpflow.core.gaussian_base``). Per chunk, rows are processed in blocks sized from a byte
budget; each block costs one GEMM for the angles, the compiled sincos, one ``sin sinᵀ`` (SYRK inside
NumPy's matmul) and two small GEMVs/GEMMs — never a loop over rows.
Precision: float64 everywhere (features, products, accumulators).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any, ClassVar

import numpy as np

from tgpflow.core.backend import device_of, is_cupy, is_numpy, namespace, to_numpy
from tgpflow.core.choices import PRECISIONS
from tgpflow.core.memory import DEFAULT_BLOCK_BYTES, F32, F64, MemoryCost, declare, plan_blocks, task_budget
from tgpflow.core.moments import Moments
from tgpflow.errors import FeaturesMismatchError
from tgpflow.features.bounds import ColumnBounds
from tgpflow.features.lattice import LatticeCells
from tgpflow.features.mixture_base import GaussianMixtureBase
from tgpflow.features.rff import RandomFourierFeatures
from tgpflow.stats.stored import StoredStats

__all__ = ["TGPStats", "RFFStats", "tgp_chunk_stats", "mixture_terms", "tgp_memory", "level_products", "block_rows_for",
           "PRECISIONS"]


def block_rows_for(n_features: int, n_dims: int, block_bytes: int) -> int:
    """Rows per block so that the angle, sin and cos blocks and the shifted rows
    (8·(3S + 2d) bytes a row) fit ``block_bytes`` — the per-row part only, for the
    evaluation of a fitted model; a chunk of statistics plans with :func:`tgp_memory`.

    Raises ``MemoryError`` with the numbers when not even one row fits.
    """
    cost = MemoryCost(f"a feature block (S={n_features}, d={n_dims})", 0, F64 * (3 * n_features + 2 * n_dims))
    return plan_blocks(cost, block_bytes).rows


def tgp_memory(features: RandomFourierFeatures, precision: str = "float64", with_phi_gram: bool = False,
               mixture: Any = None) -> MemoryCost:
    """The bytes of one :func:`tgp_chunk_stats` task (NumPy chunks; see :mod:`tgpflow.core.memory`).

    Fixed: the S×S accumulator ``gram`` (and ``gram_cos`` for Σφφᵀ) and the product buffers (float32
    under ``precision="mixed"``; float64: (S + d + 1)², the augmented product of :func:`_products_numpy`);
    the S×d sums ``U``, its block product and the frequencies ``W``, ``|W|``; a few S-vectors. Per block
    row: the sin block A (S, and the d + 1 augmented rows in float64) and, for Σφφᵀ, the cos block (S), in the
    products' precision; the kernel's three float64 rows; the transposed and the shifted row with its absolute
    value (3·d); two float64 rows for an eighth of the block where angles leave the compiled kernel's range
    (:func:`_libm_block`). Per chunk row: the centred copy of the moments (d). Other array namespaces
    (array_api_strict) form each product as a new S×S array: one more S². CuPy chunks plan their blocks for the
    device (:mod:`tgpflow.stats.tgp_cupy`). A ``mixture`` base adds its sum ``V``,
    its evaluation's blocks (about 32 MB) and, per chunk row, its score (d).
    """
    S, d = features.n_features, features.n_dims
    mixed = precision == "mixed"
    aug = 0 if mixed else d + 1
    products = (S + aug) ** 2 + (S * S if with_phi_gram else 0)
    squares = F64 * S * S * (2 if with_phi_gram else 1) + (F32 if mixed else F64) * products
    fixed = squares + F64 * (4 * S * d + 8 * S + 2 * d * d)
    # the sin block A (and the cos block), in the products' precision; the transposed and the shifted row with its
    # absolute value (3·d) and the kernel's 3 rows, float64; the libm fallback's share (:func:`_libm_block`)
    per_row = ((F32 if mixed else F64) * (S * (2 if with_phi_gram else 1) + aug) + F64 * (3 * d + 3)
               + 2 * F64 * S // LIBM_PARTS)
    if mixture is not None:
        fixed += F64 * (S * d + 4 * (1 << 22))  # V, and the mixture's blocks (GaussianMixtureBase)
    chunk_row = F64 * d * (2 if mixture is not None else 1)
    what = f"FD/FVPD statistics (S={S}, d={d}, {precision}{', with Σφφᵀ' if with_phi_gram else ''})"
    result = F64 * (S * S * (2 if with_phi_gram else 1) + S * d + 2 * S + d * d + d)
    return MemoryCost(what, fixed, per_row, chunk_row, "use fewer features (n_features)", result)


# Shared with NCFDStats, which says it in the same words.
_FEATURES_MISMATCH = ("cannot combine {what}: they were computed with different feature draws (fingerprints {a}… "
                      "and {b}…). Accumulate every part with the same draw — pass features=est.features_ (or the "
                      "stored RandomFourierFeatures) to accumulate/fit — or refit from the data")


class RFFStats(StoredStats):
    """What the statistics on random Fourier features share (FD/FVPD, NCFD): the errors of a draw mismatch, and
    the draw saved as its arrays (``draw.Z``, ``draw.c``, ``draw.gamma``, ``draw.shift``) and its seed."""

    MISMATCH: ClassVar[str] = _FEATURES_MISMATCH.replace("{what}", "statistics")
    DRAW_MISMATCH: ClassVar[str] = _FEATURES_MISMATCH.replace("{what}", "statistics and features")

    @classmethod
    def _draw_meta(cls, draw: RandomFourierFeatures) -> dict[str, Any]:
        return {"seed": draw.seed}

    @classmethod
    def _draw_from_arrays(cls, arrays: dict[str, np.ndarray], meta: Mapping[str, Any]) -> RandomFourierFeatures:
        return RandomFourierFeatures.from_arrays(arrays, seed=meta.get("seed"))

    MIXTURE_MISMATCH: ClassVar[str] = ("cannot combine statistics summed under different mixture bases ({a} and {b}); "
                                       "accumulate every part with the estimator's base_mixture_, or refit")

    def check_features(self, features: RandomFourierFeatures) -> None:
        """Raise unless these statistics were accumulated with ``features``."""
        self.check_draw(features)

    CELLS_MISMATCH: ClassVar[str] = ("cannot combine statistics of rows dequantized over other lattices ({a} and {b}; "
                                     "discrete=): accumulate every part with the estimator's discrete_, or refit")

    def _check_combinable(self, other: Any, sign: float) -> None:
        super()._check_combinable(other, sign)
        self.check_mixture(getattr(other, "mixture", None))
        self.check_cells(getattr(other, "cells", None))
        if getattr(self, "bounds", None) is not None and getattr(other, "bounds", None) is not None:
            self.check_bounds(other.bounds)  # (a part read from a file written before statistics carried them has none)

    def check_mixture(self, mixture: GaussianMixtureBase | None) -> None:
        """Raise unless these statistics were summed under the mixture base ``mixture`` (None: a Gaussian base;
        docs/gp_tilted.md, "A mixture base")."""
        self._check_carried("mixture", mixture, self.MIXTURE_MISMATCH, "a Gaussian base")

    def check_cells(self, cells: LatticeCells | None) -> None:
        """Raise unless these statistics are of rows whose discrete columns were dequantized over ``cells`` (None:
        none; :mod:`tgpflow.features.lattice`)."""
        self._check_carried("cells", cells, self.CELLS_MISMATCH, "no discrete columns")

    BOUNDS_MISMATCH: ClassVar[str] = ("cannot combine statistics of rows read within other bounds ({a} and {b}; "
                                      "bounds=): accumulate every part with the estimator's bounds_, or refit")

    def check_bounds(self, bounds: ColumnBounds | None) -> None:
        """Raise unless these statistics are of rows transformed by ``bounds`` (None: none;
        :mod:`tgpflow.features.bounds`)."""
        self._check_carried("bounds", bounds, self.BOUNDS_MISMATCH, "no bounds")

    def _check_carried(self, name: str, value: Any, message: str, none: str) -> None:
        """Raise ``message`` unless the carried field ``name`` and ``value`` have the same fingerprint (or are both
        None, said as ``none``)."""
        own = getattr(self, name, None)
        mine = None if own is None else own.fingerprint[:12]
        theirs = None if value is None else value.fingerprint[:12]
        if mine != theirs:
            raise FeaturesMismatchError(message.format(a=mine or none, b=theirs or none))


@dataclasses.dataclass(frozen=True, eq=False)
class TGPStats(RFFStats):
    """The one-pass statistics of FD/FVPD for one feature draw, which they carry (a value: +, −, ``scaled``,
    save/load, field by field — :class:`~tgpflow.core.summable.AdditiveStats`; ``phi_gram`` is kept only when
    both parts have it)."""

    draw: RandomFourierFeatures | None
    moments: Moments
    gram: np.ndarray
    u: np.ndarray
    U: np.ndarray
    psi: np.ndarray
    phi_gram: np.ndarray | None = None
    V: np.ndarray | None = None
    base_sums: np.ndarray | None = None
    mixture: GaussianMixtureBase | None = None
    cells: LatticeCells | None = None
    bounds: ColumnBounds | None = None
    code_counts: np.ndarray | None = None  # (m, K): rows per code of each discrete column (code_calibration)
    fingerprint: str = dataclasses.field(default="", kw_only=True)

    CARRIED: ClassVar[tuple[str, ...]] = ("fingerprint", "draw", "mixture", "cells", "bounds")

    @property
    def n(self) -> int:
        return self.moments.n

    @property
    def n_features(self) -> int:
        return int(self.psi.shape[0])

    @classmethod
    def zero(cls, features: RandomFourierFeatures) -> TGPStats:
        S, d = features.n_features, features.n_dims
        return cls(features, Moments.zero(d), np.zeros((S, S)), np.zeros(S), np.zeros((S, d)), np.zeros(S))

    def without_phi_gram(self) -> TGPStats:
        """The same statistics without the optional held-out Σφφᵀ."""
        return self if self.phi_gram is None else dataclasses.replace(self, phi_gram=None)


def tgp_chunk_stats(x: Any, features: RandomFourierFeatures, block_bytes: int = DEFAULT_BLOCK_BYTES,
                    precision: str = "float64", with_phi_gram: bool = False,
                    mixture: GaussianMixtureBase | None = None,
                    terms: tuple[np.ndarray, np.ndarray] | None = None) -> TGPStats:
    """TGP statistics of one chunk of rows ``x`` (n, d), in blocks of rows (docs/mathematics.md, "Fisher divergence and
    base-measure learning").

    ``precision="mixed"``: the S×S products are float32 (angles and sin/cos still formed in
    float64 from the shifted phase, docs/mathematics.md, "Features and the pilot pass", then rounded), each block's
    product added to a float64 accumulator; the O(S) sums stay float64.

    NumPy chunks use the compiled sincos and SYRK (through NumPy's matmul) into reused buffers; any other
    array-API namespace (CuPy, array_api_strict) runs the same formulas with ``xp`` calls.
    Results are host float64.

    ``block_bytes`` caps the per-row part of the task's memory (its feature blocks); the
    accumulators and S² temporaries come on top (:func:`tgp_memory`). Inside a distributed
    worker, rows per block also keep the whole task within the worker's memory limit per thread
    (:func:`tgpflow.core.memory.plan_blocks`).

    ``mixture``: the mixture base the pass sums ``V`` and ``base_sums`` under (module docstring; its score is
    evaluated on the host, in float64). ``terms``: :func:`mixture_terms` of these rows, when the caller has them
    (the bandwidth search sums the same rows for every γ).
    """
    n, d = int(x.shape[0]), int(x.shape[1])
    if d != features.n_dims:
        raise ValueError(f"chunk has {d} columns but the features were drawn for d={features.n_dims}")
    S = features.n_features
    moments = Moments.from_rows(x)
    if mixture is not None and terms is None:
        terms = mixture_terms(mixture, to_numpy(x).astype(np.float64))
    score, base_sums = (None, None) if mixture is None else terms
    if n == 0:
        zero = TGPStats.zero(features)
        return dataclasses.replace(zero, moments=moments, phi_gram=np.zeros_like(zero.gram) if with_phi_gram else None,
                                   V=None if mixture is None else np.zeros((S, d)), base_sums=base_sums,
                                   mixture=mixture)
    rows = plan_blocks(tgp_memory(features, precision, with_phi_gram, mixture), block_bytes, chunk_rows=n,
                       budget=task_budget()[0]).rows
    gram, gram_cos, u, U, psi, V = level_products(x, features, rows, cos_gram=with_phi_gram, precision=precision,
                                                  score=score)
    scale = math.sqrt(2.0 / S)
    # φ = scale·cos, φ' = −scale·sin: fold the constants in once per chunk (in place: no second S²).
    gram *= scale * scale
    if gram_cos is not None:
        gram_cos *= scale * scale
    return TGPStats(features, moments, gram, u * (-scale), U * (-scale), psi * scale, gram_cos,
                    None if V is None else V * (-scale), base_sums, mixture)


def mixture_terms(mixture: GaussianMixtureBase, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The mixture base's score s₀ at the rows of ``x`` (host float64) and the pass's ``base_sums``,
    (Σ log m(x), Σ ½‖s₀(x)‖² + Δ log m(x)) (module docstring)."""
    log_m, score, lap, _ = mixture.derivatives(x)
    return score, np.array([log_m.sum(), 0.5 * np.einsum("nd,nd->", score, score) + lap.sum()])


def level_products(x: Any, features: RandomFourierFeatures, rows: int, cos_gram: bool,
                   precision: str = "float64", score: np.ndarray | None = None) -> tuple[Any, ...]:
    """Unscaled sums over the rows of ``x`` for one width: ``sin sinᵀ``, ``cos cosᵀ`` (or None),
    ``Σ sin``, ``Σ sin (x − x₀)ᵀ``, ``Σ cos`` and, with ``score`` (n, d), ``Σ sin scoreᵀ`` (else None) — host
    float64, in blocks of ``rows`` rows.

    ``sin``/``cos`` are of ``Z(x − x₀)/γ + c'`` (S × rows). NumPy chunks use the compiled
    sincos and NumPy's matmul (SYRK, GIL released) into reused buffers; any other array-API
    namespace (CuPy, array_api_strict) runs the same formulas with ``xp`` calls.
    """
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {PRECISIONS}; got {precision!r}")
    xp = namespace(x)
    if is_numpy(xp):
        return _products_numpy(np.asarray(x, dtype=np.float64), features, rows, cos_gram, precision == "mixed", score)
    if is_cupy(xp):  # cuBLAS SYRK into device accumulators, in blocks sized for the device (docs/gpu.md)
        from tgpflow.stats.tgp_cupy import products_cupy

        return products_cupy(x, features, cos_gram, precision == "mixed", score)
    return _products_xp(x, features, rows, cos_gram, xp, precision == "mixed", score)


def _products_numpy(x: np.ndarray, features: RandomFourierFeatures, rows: int, cos_gram: bool,
                    mixed: bool = False, score: np.ndarray | None = None) -> tuple[Any, ...]:
    S, d = features.n_features, features.n_dims
    gram = np.zeros((S, S))
    gram_cos = np.zeros((S, S)) if cos_gram else None
    u = np.zeros(S)
    U = np.zeros((S, d))
    psi = np.zeros(S)
    V = None if score is None else np.zeros((S, d))
    W, phase = features.frequencies, features.phase
    from tgpflow.features.sincos import sin_sums_rows

    # float64: the sin block is the top of A = [sin; (x − x₀)ᵀ; 1] (S + d + 1 rows), so that one product AAᵀ
    # also gives Σ sin (x − x₀)ᵀ and Σ sin (1.6 % more flops at S = 1000, d = 7, where the skinny GEMM and the
    # row sums they replace cost 7 % of the block: both read the 22 MB sin block once more from memory).
    # mixed: A is the float32 sin block alone, and those sums stay float64, formed with it by the kernel.
    # Either way Σ cos comes from the kernel, and the cos block is formed only for the held-out Σφφᵀ.
    aug = 0 if mixed else d + 1
    low = np.float32 if mixed else np.float64
    sums = (u, U) if mixed else (None, None)
    prod = np.empty((S + aug, S + aug), dtype=low)
    prod_cos = np.empty((S, S), dtype=low) if cos_gram else None
    # Buffers reused across blocks: fresh 30 MB arrays cost more in page faults than the kernel.
    sin_buf = np.empty((S + aug) * rows, dtype=low)
    cos_buf = np.empty(S * rows, dtype=low) if cos_gram else None
    for start in range(0, x.shape[0], rows):
        xs = x[start:start + rows] - features.shift  # per block: no shifted copy of the whole chunk
        nb = xs.shape[0]
        A = sin_buf[: (S + aug) * nb].reshape(S + aug, nb)
        cos = None if cos_buf is None else cos_buf[: S * nb].reshape(S, nb)
        if features.in_kernel_range(xs):
            sin_sums_rows(np.ascontiguousarray(xs.T), W, phase, A[:S], cos, psi, *sums)
        else:  # angles beyond the kernel's exact reduction range: NumPy's libm
            _libm_block(xs, W, phase, A[:S], cos, psi, *sums)
        if aug:
            A[S:S + d] = xs.T
            A[S + d] = 1.0
        # NumPy's matmul releases the GIL (SciPy's dsyrk wrapper does not: two Dask threads
        # serialised on it, measured 0.53 of the SYRK bound vs 0.82 with processes) and
        # dispatches ``a @ a.T`` to SYRK itself; a float32 product is added to the float64 accumulator.
        gram += np.matmul(A, A.T, out=prod)[:S, :S]
        if aug:
            U += prod[:S, S:S + d]
            u += prod[:S, S + d]
        if gram_cos is not None:
            gram_cos += np.matmul(cos, cos.T, out=prod_cos)
        if V is not None:  # Σ sin s₀ᵀ: the sin block read once more (mixture bases only), in its precision
            V += A[:S] @ score[start:start + nb].astype(low)
    return gram, gram_cos, u, U, psi, V


#: The libm fallback of the pass works on 1/this of a block at a time (:func:`_libm_block`).
LIBM_PARTS = 8


def _libm_block(xs: np.ndarray, W: np.ndarray, phase: np.ndarray, sin_out: np.ndarray, cos_out: np.ndarray | None,
                psi: np.ndarray, u: np.ndarray | None, U: np.ndarray | None) -> None:
    """:func:`~tgpflow.features.sincos.sin_sums_rows` by NumPy's libm, for angles beyond the kernel's exact
    range: an eighth of the block at a time, so that its two float64 (S, rows/8) temporaries stay within the
    2·S bytes a block row that :func:`tgp_memory` plans for them."""
    step = -(-xs.shape[0] // LIBM_PARTS)
    for i in range(0, xs.shape[0], step):
        part = xs[i:i + step]
        angle = W @ part.T + phase[:, None]
        trig = np.sin(angle)
        sin_out[:, i:i + step] = trig
        if u is not None and U is not None:
            u += trig.sum(axis=1)
            U += trig @ part
        np.cos(angle, out=trig)
        psi += trig.sum(axis=1)
        if cos_out is not None:
            cos_out[:, i:i + step] = trig


def _products_xp(x: Any, features: RandomFourierFeatures, rows: int, cos_gram: bool, xp: Any,
                 mixed: bool = False, score: np.ndarray | None = None) -> tuple[Any, ...]:
    S, d = features.n_features, features.n_dims
    dev = device_of(x)  # every array on the chunk's device: a strict namespace refuses to mix two

    def zeros(*shape: int) -> Any:
        return xp.zeros(shape, dtype=xp.float64, device=dev)

    gram = zeros(S, S)
    gram_cos = zeros(S, S) if cos_gram else None
    u, U, psi = zeros(S), zeros(S, d), zeros(S)
    V = None if score is None else zeros(S, d)
    score_x = None if score is None else xp.asarray(score, device=dev)
    xs_all = x - xp.asarray(features.shift, device=dev)
    n = int(x.shape[0])
    for start in range(0, n, rows):
        xs = xs_all[start:min(start + rows, n), ...]  # in-range stops: the standard leaves others undefined
        sin, cos = features.sincos(xs)
        gram = gram + _product(sin, xp, mixed)
        if gram_cos is not None:
            gram_cos = gram_cos + _product(cos, xp, mixed)
        u = u + xp.sum(sin, axis=1)
        psi = psi + xp.sum(cos, axis=1)
        U = U + sin @ xs
        if V is not None:
            V = V + sin @ score_x[start:min(start + rows, n), ...]
    return tuple(None if a is None else to_numpy(a).astype(np.float64) for a in (gram, gram_cos, u, U, psi, V))


def _product(a: Any, xp: Any, mixed: bool) -> Any:
    """a aᵀ in float64, or in float32 rounded back to float64 for accumulation (mixed)."""
    if not mixed:
        return a @ xp.matrix_transpose(a)
    low = xp.astype(a, xp.float32)
    return xp.astype(low @ xp.matrix_transpose(low), xp.float64)


def _tgp_cost(n_dims: int, features: RandomFourierFeatures, block_bytes: int = DEFAULT_BLOCK_BYTES,
              precision: str = "float64", with_phi_gram: bool = False,
              mixture: GaussianMixtureBase | None = None) -> tuple[MemoryCost, int]:
    return tgp_memory(features, precision, with_phi_gram, mixture), block_bytes


declare(tgp_chunk_stats, _tgp_cost)
