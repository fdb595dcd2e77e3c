"""CF missing values and packing of Zarr column arrays: what ``xarray.Dataset.to_zarr`` writes for a variable
encoded with ``_FillValue``, ``scale_factor`` or ``add_offset``.

xarray stores such a variable as its encoded values: ``{"dtype": "int16", "scale_factor": 0.1, "_FillValue":
-9999}`` writes 23 for 2.3 and −9999 for a missing value, and ``{"_FillValue": -9999.0}`` writes −9999 where the
data were NaN. Read as they are stored, a missing value is an ordinary row at −9999 and every packed value is
off by its scale: a fitted density quietly wrong. :func:`cf_encoding` gives the decoding xarray applies on
reading (``decoded = stored · scale_factor + add_offset``, stored values equal to a missing-value marker →
NaN, which the source's validation then reports or drops like any other missing value).

Where the markers are, as xarray reads them:

* Zarr v3: the ``_FillValue`` attribute (an integer for integer arrays; for floating arrays base64 of the
  little-endian float64, e.g. ``"AAAAAICHw8A="`` for −9999.0). Zarr's own ``fill_value`` is not a marker.
* Zarr v2, arrays xarray wrote (they carry ``_ARRAY_DIMENSIONS``): the array's ``fill_value``, which xarray
  reads as ``_FillValue``. Other v2 arrays keep their values: Zarr's ``fill_value`` (often 0) is what a chunk
  never written reads as, not a missing value. (A v2 array given ``_ARRAY_DIMENSIONS`` by hand, to make a store
  readable by xarray, has its ``fill_value`` read as a marker too — zeros, when that is 0 — as xarray reads it.)
* Either format: ``missing_value`` (CF; a number or a list of numbers).

Markers compare with the stored values exactly (xarray compares 64-bit integers after a float64 cast, so it also
masks neighbours of a marker beyond 2**53); a marker the array's dtype cannot hold matches nothing.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import math
import numbers
import struct
from typing import Any

import numpy as np

from tgpflow.errors import SourceError

__all__ = ["CFEncoding", "cf_encoding", "cf_missing_markers", "is_dimension_coordinate"]


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


@dataclasses.dataclass(frozen=True)
class CFEncoding:
    """How an array's stored values encode its data: a block decodes to float64 with its values equal to a
    ``marker`` missing (NaN), then ``· scale + offset``. Its repr is part of a date partition's fingerprint."""

    markers: tuple[int | float, ...]
    scale: float | None
    offset: float | None

    def __call__(self, block: np.ndarray) -> np.ndarray:
        # float64 throughout, as xarray unpacks with a float64 scale; the mask is taken on the stored values
        out = block.astype(np.float64)
        missing = np.isin(block, self.markers) if self.markers else None
        if self.scale is not None:
            out *= self.scale
        if self.offset is not None:
            out += self.offset
        if missing is not None:
            out[missing] = np.nan
        return out


def cf_missing_markers(array: Any, where: str) -> tuple[int | float, ...]:
    """The values that mark a missing value in ``array`` (see the module's list), less NaN (no mask needed) and
    markers its dtype cannot hold (they match nothing). Refuses, naming ``where``, a marker that is not a number."""
    attrs = array.attrs
    markers: list[Any] = []
    if getattr(getattr(array, "metadata", None), "zarr_format", 2) == 3:
        if "_FillValue" in attrs:
            markers.append(_v3_fill(attrs["_FillValue"], array.dtype, where))
    elif "_ARRAY_DIMENSIONS" in attrs and array.fill_value is not None:
        markers.append(array.fill_value)
    missing = attrs.get("missing_value")
    markers.extend(missing if isinstance(missing, list) else [] if missing is None else [missing])
    out: list[int | float] = []
    for m in markers:
        if isinstance(m, (bool, np.bool_)) or not isinstance(m, (numbers.Real, np.number)):
            raise SourceError(f"{where}: its missing-value marker {m!r} is not a number")
        if array.dtype.kind in "iu":
            info = np.iinfo(array.dtype)
            if float(m).is_integer() and info.min <= m <= info.max:
                out.append(int(m))
        elif not math.isnan(float(m)):
            out.append(float(m))
    return tuple(out)


def _v3_fill(value: Any, dtype: np.dtype, where: str) -> Any:
    """A v3 ``_FillValue`` attribute as the number it encodes, as xarray reads it: base64 of a float64 for a
    floating array, a number truncated to an integer for an integer array."""
    if dtype.kind in "iu" and isinstance(value, (numbers.Real, np.number)) and not isinstance(value, bool):
        return int(value) if math.isfinite(value) else value  # (a non-finite one then matches nothing)
    if dtype.kind != "f" or not isinstance(value, str):
        return value
    try:
        return struct.unpack("<d", base64.standard_b64decode(value))[0]
    except (binascii.Error, struct.error) as exc:
        raise SourceError(f"{where}: its _FillValue {value!r} is not the base64 of a float64, as xarray writes "
                          f"it for a floating array") from exc


def _number(attrs: Any, key: str, where: str) -> float | None:
    """A scale or offset attribute: a finite number, or a list holding one (as netCDF writes attributes)."""
    value = attrs.get(key)
    if isinstance(value, list) and len(value) == 1:
        value = value[0]
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (numbers.Real, np.number)) or not math.isfinite(value):
        raise SourceError(f"{where}: its {key} {attrs.get(key)!r} is not a finite number")
    return float(value)


def cf_encoding(array: Any, where: str) -> CFEncoding | None:
    """The encoding of ``array``'s stored values (missing-value markers, ``scale_factor``, ``add_offset``), or
    None when it has none. Refuses, naming ``where``, a scale or offset that is not a number and ``_Unsigned`` on
    an integer array (netCDF-3's signed integers holding unsigned values, not decoded here)."""
    if array.dtype.kind not in "iuf":
        return None
    attrs = array.attrs
    if "_Unsigned" in attrs and array.dtype.kind in "iu":
        raise SourceError(f"{where}: it is encoded with _Unsigned={attrs['_Unsigned']!r} (integers whose sign is "
                          f"to be read the other way), which tgpflow does not decode; write the values with "
                          f"their own dtype")
    scale, offset = _number(attrs, "scale_factor", where), _number(attrs, "add_offset", where)
    markers = cf_missing_markers(array, where)
    if not markers and scale is None and offset is None:
        return None
    return CFEncoding(markers, scale, offset)
