"""The kernel models evaluated on a device (docs/gpu.md, "Evaluation and scoring").

:class:`~tgpflow.models.kernel_fitted.KernelFitted` given a :class:`~tgpflow.core.backend.DeviceTarget` computes
``log_density`` and ``grad_log_density`` here, per block of rows on the device in float64, with GEMMs on
(rows × m) arrays and no (rows, m, d) differences (MATH.md §6, §7): about x₀, with ``u = ‖x‖² − 2xYᵀ + ‖Y‖²``
and ``r_aᵀc_a = xᵀc_a − Y_aᵀc_a``,

* curl-free: ``f = Σ_a α_a r_aᵀc_a`` and ``∇f = Σ_a α_a c_a + Σ_a w_a (x − Y_a)``, ``w_a = κ_a r_aᵀc_a``;
* lite: ``f = Σ_a k_a α_a`` and ``∇f = Σ_a g_a (x − Y_a)``, ``g_a = 2ψ'(u_a) α_a``;
* diagonal: the score ``Σ_a k_a c_a``;

plus the Gaussian base's ``−½(x−μ)ᵀP(x−μ)`` and ``−P(x−μ)``. Slabs and transfers as :mod:`tgpflow.models.on_device`.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

from tgpflow.core.backend import DeviceTarget, namespace
from tgpflow.models.on_device import put_arrays, rows_on_device

__all__ = ["kernel_log_density_on_device", "kernel_score_on_device"]

#: Work arrays of a block per row and basis point: u, the profile's values and the weights (about 8 (rows, m)).
_PER_ROW_AND_POINT = 8 * 8


def kernel_log_density_on_device(fitted: Any, target: DeviceTarget, x: np.ndarray) -> np.ndarray:
    """``fitted.log_density`` at the host rows ``x``, computed on ``target``; host float64 (n,)."""
    return rows_on_device(x, target, _PER_ROW_AND_POINT * fitted.basis.n_basis, functools.partial(_constants, fitted),
                          functools.partial(_log_density_block, fitted))


def kernel_score_on_device(fitted: Any, target: DeviceTarget, x: np.ndarray) -> np.ndarray:
    """``fitted.grad_log_density`` at the host rows ``x``, computed on ``target``; host float64 (n, d)."""
    return rows_on_device(x, target, _PER_ROW_AND_POINT * fitted.basis.n_basis, functools.partial(_constants, fitted),
                          functools.partial(_score_block, fitted), width=fitted.basis.n_dims)


def _constants(fitted: Any, xp: Any, dev: Any) -> dict[str, Any]:
    basis = fitted.basis
    Ys = basis.Y - basis.shift
    coef = np.asarray(fitted.coef, dtype=np.float64)
    arrays = {"shift": basis.shift, "Ys": Ys, "yy": np.sum(Ys * Ys, axis=1), "coef": coef}
    if fitted.model == "curl_free":
        arrays["yc"] = np.sum(Ys * coef, axis=1)  # Y_aᵀc_a about x₀
    if fitted.base is not None:
        arrays.update(mean=fitted.base.mean, precision=fitted.base.precision)
    return put_arrays(arrays, xp, dev)


def _parts(fitted: Any, xb: Any, c: dict[str, Any]) -> tuple[Any, ...]:
    """The rows about x₀, ψ, ψ', ψ'' at u = ‖x − Y_a‖² (expanded about x₀, clipped at 0) and, for the curl-free
    model, r_aᵀc_a = xᵀc_a − Y_aᵀc_a (rows × m)."""
    xp = namespace(xb)
    xs = xb - c["shift"]
    u = xp.sum(xs * xs, axis=1)[:, None] - 2.0 * (xs @ xp.matrix_transpose(c["Ys"])) + c["yy"][None, :]
    k, d1, d2, _ = fitted.basis.kernel.profile(xp.maximum(u, xp.zeros_like(u)))
    rc = xs @ xp.matrix_transpose(c["coef"]) - c["yc"][None, :] if fitted.model == "curl_free" else None
    return xs, k, d1, d2, rc


def _log_density_block(fitted: Any, xb: Any, c: dict[str, Any]) -> Any:
    xp = namespace(xb)
    _, k, d1, _, rc = _parts(fitted, xb, c)
    f = k @ c["coef"] if fitted.model == "lite" else xp.sum(-2.0 * d1 * rc, axis=1)  # curl-free: α = −2ψ'
    if fitted.base is None:
        return f
    r = xb - c["mean"]
    return f - 0.5 * xp.sum(r * (r @ c["precision"]), axis=1)


def _score_block(fitted: Any, xb: Any, c: dict[str, Any]) -> Any:
    xp = namespace(xb)
    xs, k, d1, d2, rc = _parts(fitted, xb, c)
    if fitted.model == "diagonal":
        score = k @ c["coef"]
    else:
        if fitted.model == "lite":
            score, w = 0.0, 2.0 * d1 * c["coef"][None, :]
        else:  # curl-free: α = −2ψ', κ = −4ψ''
            score, w = (-2.0 * d1) @ c["coef"], -4.0 * d2 * rc
        score = score + xp.sum(w, axis=1)[:, None] * xs - w @ c["Ys"]  # Σ_a w_a (x − Y_a)
    if fitted.base is None:
        return score
    return score - (xb - c["mean"]) @ c["precision"]
