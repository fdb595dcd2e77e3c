"""CF missing values and packing of Zarr column arrays: what ``xarray.Dataset.to_zarr`` writes for a variable
encoded with ``_FillValue``, ``scale_factor`` or ``add_offset``.

xarray stores such a variable as its encoded values: ``{"dtype": "int16", "scale_factor": 0.1, "_FillValue":
-9999}`` writes 23 for 2.3 and −9999 for a missing value, and ``{"_FillValue": -9999.0}`` writes −9999 where the
data were NaN. Read as they are stored, a missing value is an ordinary row at −9999 and every packed value is
off by its scale: a fitted density quietly wrong. :func:`cf_decoder` gives the decoding xarray applies on
reading (``decoded = stored · scale_factor + add_offset``, stored values equal to a missing-value marker →
NaN, which the source's validation then reports or drops like any other missing value).

Where the markers are, as xarray reads them:

* Zarr v3: the ``_FillValue`` attribute (an integer for integer arrays; for floating arrays base64 of the
  little-endian float64, e.g. ``"AAAAAICHw8A="`` for −9999.0). Zarr's own ``fill_value`` is not a marker.
* Zarr v2, arrays xarray wrote (they carry ``_ARRAY_DIMENSIONS``): the array's ``fill_value``, which xarray
  reads as ``_FillValue``. Other v2 arrays keep their values: Zarr's ``fill_value`` (often 0) is what a chunk
  never written reads as, not a missing value.
* Either format: ``missing_value`` (CF; a number or a list of numbers).
"""

from __future__ import annotations

import base64
import binascii
import functools
import numbers
import struct
from collections.abc import Callable
from typing import Any

import numpy as np

from tgpflow.errors import SourceError

__all__ = ["cf_decoder", "cf_missing_markers", "is_dimension_coordinate"]


def _dimension_names(array: Any) -> tuple[str, ...] | None:
    """The names of a Zarr array's dimensions (v3 ``dimension_names``, v2 xarray's ``_ARRAY_DIMENSIONS``), or None."""
    names = getattr(getattr(array, "metadata", None), "dimension_names", None)
    if names is None:
        names = array.attrs.get("_ARRAY_DIMENSIONS")
    return tuple(str(n) for n in names) if isinstance(names, (list, tuple)) else None


def is_dimension_coordinate(name: str, array: Any) -> bool:
    """Whether the Zarr array ``name`` is a dimension coordinate: 1-D along a dimension of its own name, as xarray
    writes the index of a dimension (``date`` along ``date``) — the rows' labels, not a column of data."""
    return _dimension_names(array) == (name,)


def cf_missing_markers(array: Any, where: str) -> tuple[float, ...]:
    """The values that mark a missing value in ``array`` (see the module's list), NaN left out (it needs no mask)."""
    attrs = array.attrs
    markers: list[Any] = []
    if getattr(getattr(array, "metadata", None), "zarr_format", 2) == 3:
        if "_FillValue" in attrs:
            markers.append(_v3_fill(attrs["_FillValue"], array.dtype, where))
    elif "_ARRAY_DIMENSIONS" in attrs and array.fill_value is not None:
        markers.append(array.fill_value)
    missing = attrs.get("missing_value")
    markers.extend(missing if isinstance(missing, list) else [] if missing is None else [missing])
    out = []
    for m in markers:
        if isinstance(m, (bool, np.bool_)) or not isinstance(m, (numbers.Real, np.number)):
            raise SourceError(f"{where}: its missing-value marker {m!r} is not a number")
        if not np.isnan(m):
            out.append(m)
    return tuple(out)


def _v3_fill(value: Any, dtype: np.dtype, where: str) -> Any:
    """A v3 ``_FillValue`` attribute as the number it encodes (xarray's encoding: base64 for floating arrays)."""
    if dtype.kind != "f" or not isinstance(value, str):
        return value
    try:
        return struct.unpack("<d", base64.standard_b64decode(value))[0]
    except (binascii.Error, struct.error) as exc:
        raise SourceError(f"{where}: its _FillValue {value!r} is not the base64 of a float64, as xarray writes "
                          f"it for a floating array") from exc


def cf_decoder(array: Any, where: str) -> Callable[[np.ndarray], np.ndarray] | None:
    """The function that decodes a block of ``array``'s stored values to float64 (missing markers → NaN, then
    ``· scale_factor + add_offset``), or None when it has no such encoding. Refuses, naming ``where``, a scale or
    offset that is not a number and ``_Unsigned`` (netCDF-3's unsigned-as-signed convention, not decoded here)."""
    if array.dtype.kind not in "iuf":
        return None
    attrs = array.attrs
    if "_Unsigned" in attrs:
        raise SourceError(f"{where}: it is encoded with _Unsigned={attrs['_Unsigned']!r} (signed integers holding "
                          f"unsigned values), which tgpflow does not decode; write it with an unsigned dtype")
    scale, offset = attrs.get("scale_factor"), attrs.get("add_offset")
    for key, value in (("scale_factor", scale), ("add_offset", offset)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, numbers.Real)
                                  or not np.isfinite(value)):
            raise SourceError(f"{where}: its {key} {value!r} is not a finite number")
    markers = cf_missing_markers(array, where)
    if not markers and scale is None and offset is None:
        return None
    return functools.partial(_decode, markers=markers, scale=scale, offset=offset)


def _decode(block: np.ndarray, markers: tuple[float, ...], scale: float | None, offset: float | None) -> np.ndarray:
    # float64 throughout: int16 counts times a float32 scale would round where xarray's float64 result does not
    out = block.astype(np.float64)
    missing = np.isin(block, markers) if markers else None
    if scale is not None:
        out *= scale
    if offset is not None:
        out += offset
    if missing is not None:
        out[missing] = np.nan
    return out
