"""Rows evaluated on a device, in slabs and blocks (docs/gpu.md, "Evaluation and scoring").

The fitted models' device evaluators (:mod:`tgpflow.models.tgp_on_device`, :mod:`tgpflow.models.kernel_on_device`)
share this loop: the host rows go to the device in slabs of at most :data:`DEVICE_INPUT_BYTES`, each slab is
evaluated in blocks whose work arrays take at most :data:`DEVICE_EVAL_BYTES`, and the values come back once per
slab — two host transfers per slab (:func:`tgpflow.core.backend.to_device`, :func:`~tgpflow.core.backend.to_numpy`),
so no block waits for a transfer and the device holds one slab, not the whole input. float64 throughout.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from tgpflow.core.backend import DeviceTarget, device_of, namespace, to_device, to_numpy

__all__ = ["rows_on_device", "DEVICE_EVAL_BYTES", "DEVICE_INPUT_BYTES"]

#: Bytes of one evaluation block's work arrays on the device: 1 GiB (33 000 rows of a GP-tilted model at S = 1000).
DEVICE_EVAL_BYTES = 1 << 30
#: Bytes of the input rows moved to the device at once (and of their values' slab there).
DEVICE_INPUT_BYTES = 1 << 28


def rows_on_device(x: np.ndarray, target: DeviceTarget, per_row_bytes: int,
                   constants: Callable[[Any, Any], Any], block: Callable[[Any, Any], Any],
                   width: int | None = None) -> np.ndarray:
    """``block(rows on the device, constants)`` over the host rows ``x`` (n, d), computed on ``target``: host float64
    of shape (n,), or (n, width) with a ``width``. ``constants(xp, device)`` puts the model's arrays on the device
    once per call; ``per_row_bytes``: the block's work arrays per row."""
    n, d = x.shape[0], x.shape[1]
    out = np.empty((n,) if width is None else (n, width))
    if n == 0:
        return out
    rows = max(1, DEVICE_EVAL_BYTES // max(1, int(per_row_bytes)))
    slab = max(rows, DEVICE_INPUT_BYTES // (8 * max(d, 1)) // rows * rows)
    consts = None
    for lo in range(0, n, slab):
        xd = to_device(x[lo:lo + slab], target)
        xp = namespace(xd)
        consts = constants(xp, device_of(xd)) if consts is None else consts
        m = int(xd.shape[0])
        parts = [block(xd[start:min(start + rows, m), ...], consts) for start in range(0, m, rows)]
        out[lo:lo + m] = to_numpy(parts[0] if len(parts) == 1 else xp.concat(parts))
    return out
