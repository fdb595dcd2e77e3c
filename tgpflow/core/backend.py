"""Array namespaces and device handling.

Array code in tgpflow is written once against the array API standard
(``array_api_compat.array_namespace``) and runs on NumPy, CuPy or ``array_api_strict``.
This module owns the namespace lookup, host transfers and the few choices that depend on
the backend. NumPy arrays additionally take the fast CPU kernels of
:mod:`tgpflow.features.sincos` and the BLAS ``dsyrk`` of :mod:`tgpflow.stats.tgp`.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from array_api_compat import array_namespace, is_numpy_namespace

__all__ = ["namespace", "is_numpy", "to_numpy", "resolve_device", "gpu_visible"]


def namespace(*arrays: Any) -> Any:
    """The array API namespace shared by ``arrays`` (NumPy, CuPy, array_api_strict, …)."""
    return array_namespace(*arrays)


def is_numpy(xp: Any) -> bool:
    """True when ``xp`` is NumPy (or its array-api-compat wrapper)."""
    return is_numpy_namespace(xp)


def to_numpy(x: Any) -> np.ndarray:
    """A host float64 NumPy copy of any array-API array (CuPy arrays leave the device here)."""
    if isinstance(x, np.ndarray):
        return x
    if hasattr(x, "get"):  # CuPy
        return np.asarray(x.get())
    return np.asarray(x)


def gpu_visible() -> bool:
    """Whether CuPy imports and sees at least one CUDA device."""
    try:
        import cupy

        return cupy.cuda.runtime.getDeviceCount() > 0
    except Exception:
        return False


def resolve_device(device: str) -> str:
    """Resolve ``device="auto"|"cpu"|"gpu"`` to the device this build runs on.

    The CPU path is complete. The GP-tilted statistics kernels are written against the array
    API and accept CuPy arrays, but that is tested only through ``array_api_strict`` (no GPU
    was available); GPU workers, chunk moves to the device, GPU solves and GPU evaluation are
    not part of this release. So ``"auto"`` resolves to the CPU and ``"gpu"`` raises with that
    message instead of silently computing on the CPU.
    """
    if device not in ("auto", "cpu", "gpu"):
        raise ValueError(f"device must be 'auto', 'cpu' or 'gpu'; got {device!r}")
    if device == "gpu":
        raise NotImplementedError(
            "device='gpu' is not available in this release of tgpflow (GPU workers and solves are not "
            "implemented yet); use device='cpu' (or 'auto', which resolves to the CPU)"
        )
    return "cpu"
