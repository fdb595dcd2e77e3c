"""CF-encoded time coordinates: what ``xarray.Dataset.to_zarr`` writes for a datetime64 coordinate.

xarray does not store datetime64 as such: it writes integers counted in a unit since a reference date, with
the attributes ``units: "days since 2026-11-01 00:00:00"`` and ``calendar: "proleptic_gregorian"`` (the CF
conventions, section 4.4), and keeps those units when it appends (``append_dim``). A date dimension read
without them would label its partitions by the counts (``date=0``, ``date=1``, …), names that mean nothing
and change with the reference date. :func:`decode_cf_time` turns them back into the datetime64 values they
encode, for the calendars in which a day is a day of the proleptic Gregorian calendar (NumPy's); other
calendars (``noleap``, ``360_day``, …) keep their counts, which are still sorted and stable.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import numpy as np

from tgpflow.errors import SourceError

__all__ = ["decode_cf_time", "GREGORIAN_CALENDARS"]

#: CF calendars whose dates NumPy's datetime64 (the proleptic Gregorian calendar) represents as they are.
#: "standard"/"gregorian" switch to the Julian calendar before 1582-10-15: decoded only from a reference
#: on or after that day (a count may not step back before it: checked).
GREGORIAN_CALENDARS = frozenset({"standard", "gregorian", "proleptic_gregorian"})
_JULIAN_BEFORE = np.datetime64("1582-10-15", "D")
_UNITS = {"days": "D", "day": "D", "d": "D", "hours": "h", "hour": "h", "hr": "h", "h": "h",
          "minutes": "m", "minute": "m", "min": "m", "seconds": "s", "second": "s", "sec": "s", "s": "s",
          "milliseconds": "ms", "millisecond": "ms", "msec": "ms", "ms": "ms",
          "microseconds": "us", "microsecond": "us", "usec": "us", "us": "us",
          "nanoseconds": "ns", "nanosecond": "ns", "ns": "ns"}
_SINCE = re.compile(r"^\s*(\w+)\s+since\s+(.+?)\s*$", re.IGNORECASE)
_REFERENCE = re.compile(r"^(-?\d{1,4})-(\d{1,2})-(\d{1,2})"
                        r"(?:[ T](\d{1,2}):(\d{1,2})(?::(\d{1,2})(?:\.(\d{1,9}))?)?)?"
                        r"\s*(?:Z|UTC|([+-])(\d{1,2})(?::?(\d{2}))?)?$", re.IGNORECASE)
#: The count xarray writes for NaT in an integer time coordinate (without a ``_FillValue`` attribute).
_NAT_COUNT = np.iinfo(np.int64).min


def decode_cf_time(values: np.ndarray, attrs: Mapping[str, Any], where: str) -> np.ndarray:
    """``values`` as the datetime64 they encode when ``attrs`` give CF time units (``"<unit> since <date>"``)
    in a Gregorian calendar; otherwise ``values`` as they are. The result's unit is the finer of the count's
    and the reference's (``days since 2026-11-01 00:00:00`` gives datetime64[D]). ``_FillValue`` counts are
    NaT. Refuses, naming ``where``, units it cannot read, counts that are not whole numbers and dates that
    datetime64 at that unit cannot hold."""
    units = attrs.get("units")
    if not isinstance(units, str) or values.dtype.kind not in "iuf":
        return values
    match = _SINCE.match(units)
    if match is None or match.group(1).lower() not in _UNITS:
        return values  # not a time (e.g. "m", "degrees_north"): a count's units of its own
    calendar = str(attrs.get("calendar", "standard")).lower()
    if calendar not in GREGORIAN_CALENDARS:
        return values
    step = _UNITS[match.group(1).lower()]
    reference = _reference(match.group(2), units, where)
    missing = values == _NAT_COUNT if values.dtype.kind == "i" else np.zeros(values.shape, dtype=bool)
    fill = attrs.get("_FillValue")
    if isinstance(fill, (int, float)) and not isinstance(fill, bool):
        missing |= values == fill
    if values.dtype.kind == "f":
        missing |= np.isnan(values)
        whole = values[~missing]
        if not np.all(whole == np.round(whole)):
            raise SourceError(f"{where}: the time coordinate ({units!r}) holds counts that are not whole "
                              f"{match.group(1)}; write it in a finer unit")
    counts = np.where(missing, 0, values).astype(np.int64)
    # datetime64 arithmetic wraps silently: check the span in float64 first (nanoseconds since 1600 do not fit),
    # each term in its own unit (the reference converted to a finer one would wrap too)
    ref_unit = np.datetime_data(reference.dtype)[0]
    unit = np.datetime_data(np.result_type(reference.dtype, np.dtype(f"m8[{step}]")))[0]
    origin = float((reference - np.datetime64(0, ref_unit)) / np.timedelta64(1, ref_unit))
    origin *= float(np.timedelta64(1, ref_unit) / np.timedelta64(1, unit))
    per_step = float(np.timedelta64(1, step) / np.timedelta64(1, unit))
    if np.any(np.abs(origin + counts.astype(np.float64) * per_step) >= 2.0**63):
        raise SourceError(f"{where}: the time coordinate ({units!r}) reaches beyond what datetime64[{unit}] holds "
                          f"(±2⁶³ {unit} about 1970); write it in a coarser unit")
    out = reference + counts.astype(f"timedelta64[{step}]")
    out[missing] = np.datetime64("NaT")
    present = out[~missing]  # the reference too: counts from a Julian-era reference span the switch
    if calendar != "proleptic_gregorian" and present.min(initial=reference) < _JULIAN_BEFORE:
        raise SourceError(f"{where}: the time coordinate ({units!r}, calendar {calendar!r}) reaches before "
                          f"1582-10-15, where that calendar is Julian; write it with calendar 'proleptic_gregorian'")
    return out


def _reference(text: str, units: str, where: str) -> np.datetime64:
    """The reference date of CF units, as a datetime64 at the coarsest unit that holds it exactly, in UTC."""
    m = _REFERENCE.match(text.strip())
    if m is None:
        raise SourceError(f"{where}: cannot read the reference date of the time units {units!r}; write them as "
                          f"'<unit> since YYYY-MM-DD[ hh:mm:ss]'")
    year, month, day, hour, minute, second, fraction, sign, zone_hours, zone_minutes = m.groups()
    try:
        out = np.datetime64(f"{int(year):04d}-{int(month):02d}-{int(day):02d}", "D")
    except ValueError as exc:
        raise SourceError(f"{where}: the reference date of the time units {units!r} is not a date ({exc})") from None
    offset = (np.timedelta64(int(hour or 0), "h") + np.timedelta64(int(minute or 0), "m")
              + np.timedelta64(int(second or 0), "s") + np.timedelta64(int((fraction or "0").ljust(9, "0")), "ns"))
    if sign:  # a local time: UTC is that time less its offset
        zone = np.timedelta64(int(zone_hours), "h") + np.timedelta64(int(zone_minutes or 0), "m")
        offset = offset - zone if sign == "+" else offset + zone
    if offset == np.timedelta64(0, "ns"):
        return out
    # the coarsest unit that holds the offset exactly, so that labels carry no spurious digits
    for unit in ("h", "m", "s", "ms", "us", "ns"):
        if offset % np.timedelta64(1, unit) == np.timedelta64(0, "ns"):
            return out + offset.astype(f"timedelta64[{unit}]")
    return out + offset
