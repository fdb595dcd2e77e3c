"""The kernel models evaluated on a device (docs/gpu.md, "Evaluation and scoring").

:class:`~tgpflow.models.kernel_fitted.KernelFitted` given a :class:`~tgpflow.core.backend.DeviceTarget` computes
``log_density`` and ``grad_log_density`` here, per block of rows on the device in float64, from the differences
``r_a = x − Y_a`` (rows, m, d) as the host does (no expanded ‖x‖² − 2xᵀY + ‖Y‖², which loses digits far from the
basis' shift) and GEMMs with the coefficients (docs/mathematics.md, "Nyström kernel exponential family" and "Score
estimators on a Nyström basis"):

* curl-free: ``f = Σ_a α_a r_aᵀc_a`` and ``∇f = Σ_a α_a c_a + Σ_a κ_a (r_aᵀc_a) r_a``;
* lite: ``f = Σ_a k_a α_a`` and ``∇f = Σ_a 2ψ'(u_a) α_a r_a``;
* diagonal: the score ``Σ_a k_a c_a``;

plus the Gaussian base's ``−½(x−μ)ᵀP(x−μ)`` and ``−P(x−μ)``. Slabs and transfers as :mod:`tgpflow.models.on_device`.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

import numpy as np

from tgpflow.core.backend import DeviceTarget, namespace, put_arrays
from tgpflow.models.on_device import rows_on_device

if TYPE_CHECKING:
    from tgpflow.models.kernel_fitted import KernelFitted

__all__ = ["kernel_log_density_on_device", "kernel_score_on_device"]


def _per_row_bytes(fitted: KernelFitted) -> int:
    """A block's work arrays per row: the differences r and one product with them (m·d each), the profile (8·m)."""
    m, d = fitted.basis.n_basis, fitted.basis.n_dims
    return 8 * (2 * m * d + 8 * m)


def kernel_log_density_on_device(fitted: KernelFitted, target: DeviceTarget, x: np.ndarray) -> np.ndarray:
    """``fitted.log_density`` at the host rows ``x``, computed on ``target``; host float64 (n,)."""
    return rows_on_device(x, target, _per_row_bytes(fitted), functools.partial(_constants, fitted),
                          functools.partial(_log_density_block, fitted))


def kernel_score_on_device(fitted: KernelFitted, target: DeviceTarget, x: np.ndarray) -> np.ndarray:
    """``fitted.grad_log_density`` at the host rows ``x``, computed on ``target``; host float64 (n, d)."""
    return rows_on_device(x, target, _per_row_bytes(fitted), functools.partial(_constants, fitted),
                          functools.partial(_score_block, fitted), width=fitted.basis.n_dims)


def _constants(fitted: KernelFitted, xp: Any, dev: Any) -> dict[str, Any]:
    basis = fitted.basis
    arrays = {"shift": basis.shift, "Ys": basis.Y - basis.shift, "coef": fitted.coef}
    if fitted.base is not None:
        arrays.update(mean=fitted.base.mean, precision=fitted.base.precision)
    return put_arrays(arrays, xp, dev)


def _parts(fitted: KernelFitted, xb: Any, c: dict[str, Any]) -> tuple[Any, ...]:
    """r_a = x − Y_a (rows, m, d), ψ, ψ', ψ'' at u = ‖r_a‖² and, for the curl-free model, r_aᵀc_a (rows, m)."""
    xp = namespace(xb)
    r = (xb - c["shift"])[:, None, :] - c["Ys"][None, :, :]
    k, d1, d2, _ = fitted.basis.kernel.profile(xp.sum(r * r, axis=2))
    rc = xp.sum(r * c["coef"][None, :, :], axis=2) if fitted.model == "curl_free" else None
    return r, k, d1, d2, rc


def _log_density_block(fitted: KernelFitted, xb: Any, c: dict[str, Any]) -> Any:
    xp = namespace(xb)
    _, k, d1, _, rc = _parts(fitted, xb, c)
    f = k @ c["coef"] if fitted.model == "lite" else xp.sum(-2.0 * d1 * rc, axis=1)  # curl-free: α = −2ψ'
    if fitted.base is None:
        return f
    q = xb - c["mean"]
    return f - 0.5 * xp.sum(q * (q @ c["precision"]), axis=1)


def _score_block(fitted: KernelFitted, xb: Any, c: dict[str, Any]) -> Any:
    xp = namespace(xb)
    r, k, d1, d2, rc = _parts(fitted, xb, c)
    if fitted.model == "diagonal":
        score = k @ c["coef"]
    elif fitted.model == "lite":
        score = xp.sum((2.0 * d1 * c["coef"][None, :])[:, :, None] * r, axis=1)
    else:  # curl-free: α = −2ψ', κ = −4ψ''
        score = (-2.0 * d1) @ c["coef"] + xp.sum((-4.0 * d2 * rc)[:, :, None] * r, axis=1)
    if fitted.base is None:
        return score
    return score - (xb - c["mean"]) @ c["precision"]
