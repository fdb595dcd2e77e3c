"""The GP-tilted density evaluated on a device (docs/gpu.md, "Evaluation and scoring").

:meth:`TGPFitted.log_density <tgpflow.models.tgp_fitted.TGPFitted.log_density>` of a model given a
:class:`~tgpflow.core.backend.DeviceTarget` comes here. Per block of rows, on the device and in float64:
the angles ``W (x − x₀)ᵀ + c'`` by one GEMM, ``φ = √(2/S) cos`` (S, rows), and the tilt from it — ``θᵀφ`` (FD,
NCFD, MAP), ``½‖L⁻¹φ‖² − vᵀφ`` with the model's L⁻¹ (FVPD: one GEMM, where the CPU uses ``dtrmm``), or
``log(φᵀψ/N)`` (KDE-RFF) — and the base's ``log m(x)``: ``−½(x−μ)ᵀP(x−μ)`` for the Gaussian, the log-sum-exp of
the components ``log π_k N(x | μ_k, Σ_k)`` (one GEMM with the stacked whitening factors) for a mixture. The
blocks' four (S, rows) arrays take at most 1 GiB; slabs and transfers as :mod:`tgpflow.models.on_device`.
"""

from __future__ import annotations

import functools
import math
from typing import Any

import numpy as np

from tgpflow.core.backend import DeviceTarget, namespace, put_arrays
from tgpflow.models.on_device import rows_on_device

__all__ = ["log_density_on_device"]


def log_density_on_device(fitted: Any, target: DeviceTarget, x: np.ndarray) -> np.ndarray:
    """:meth:`TGPFitted.log_density <tgpflow.models.tgp_fitted.TGPFitted.log_density>` of ``fitted`` at the host rows
    ``x``, computed on ``target``; host float64 (n,), in slabs and blocks
    (:func:`~tgpflow.models.on_device.rows_on_device`: 10M rows of d = 3 go in one slab)."""
    return rows_on_device(x, target, 4 * 8 * fitted.features.n_features, functools.partial(_constants, fitted),
                          functools.partial(_block, fitted))


def _block(fitted: Any, xb: Any, consts: dict[str, Any]) -> Any:
    tilt = _tilt_block(fitted, xb, consts)
    return tilt if fitted.kde_weights is not None else tilt + _base_log(fitted.base, xb, consts)


def _constants(fitted: Any, xp: Any, dev: Any) -> dict[str, Any]:
    """The model's arrays on the device, once per call."""
    f = fitted.features
    arrays = {"W": f.frequencies, "phase": f.phase, "shift": f.shift}
    if fitted.M_chol is None:
        arrays["weights"] = fitted.theta if fitted.theta is not None else fitted.kde_weights
    else:
        arrays.update(chol_inv=fitted.chol_inv, v=fitted.v)
    base = fitted.base
    if base.mixture is None:
        arrays.update(mean=base.mean, precision=base.precision)
    else:
        arrays.update(zip(("u_cat", "u_mean", "log_const"), base.mixture.component_arrays(), strict=True))
    return put_arrays(arrays, xp, dev)


def _base_log(base: Any, xb: Any, c: dict[str, Any]) -> Any:
    """The base's log, as :meth:`~tgpflow.core.gaussian_base.Base.neg_log` defines it (with the opposite sign)."""
    xp = namespace(xb)
    if base.mixture is None:
        r = xb - c["mean"]
        return -0.5 * xp.sum(r * (r @ c["precision"]), axis=1)
    K, d = base.mixture.n_components, base.mixture.n_dims
    y = xp.reshape(xb @ c["u_cat"] - c["u_mean"], (xb.shape[0], K, d))
    log_comp = c["log_const"] - 0.5 * xp.sum(y * y, axis=2)  # (rows, K)
    top = xp.max(log_comp, axis=1)
    return top + xp.log(xp.sum(xp.exp(log_comp - top[:, None]), axis=1)) + float(base.log_norm)


def _tilt_block(fitted: Any, xd: Any, c: dict[str, Any]) -> Any:
    xp = namespace(xd)
    S = fitted.features.n_features
    angle = c["W"] @ xp.matrix_transpose(xd - c["shift"]) + c["phase"][:, None]
    phi_t = math.sqrt(2.0 / S) * xp.cos(angle)  # φᵀ (S, rows)
    if fitted.M_chol is not None:
        h = c["chol_inv"] @ phi_t
        return 0.5 * xp.sum(h * h, axis=0) - c["v"] @ phi_t
    f = c["weights"] @ phi_t
    if fitted.kde_weights is None:
        return f
    positive = f > 0
    return xp.where(positive, xp.log(xp.where(positive, f, xp.ones_like(f))), xp.full_like(f, -math.inf))
