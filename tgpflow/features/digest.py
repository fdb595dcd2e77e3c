"""The identity hash of feature draws and grids: SHA-256 of a tag, integer sizes and float arrays."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from typing import Any

import numpy as np

__all__ = ["array_hash"]


def array_hash(tag: bytes, ints: Iterable[int], floats: Iterable[Any], prefix: bytes = b"") -> Any:
    """``sha256(tag ‖ prefix ‖ ints as <i8 ‖ each float array as contiguous <f8)``; returned open, so a
    caller can add more bytes before ``hexdigest()``. Platform-independent (little-endian)."""
    h = hashlib.sha256(tag)
    h.update(prefix)
    h.update(np.array(list(ints), dtype="<i8").tobytes())
    for a in floats:
        h.update(np.ascontiguousarray(a, dtype="<f8").tobytes())
    return h
