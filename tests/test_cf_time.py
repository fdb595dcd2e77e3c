"""CF-encoded time coordinates (xarray's datetime64 on disk), decoded against xarray's own decoder."""

import numpy as np
import pytest
import xarray as xr
from xarray.coding.times import decode_cf_datetime

from tgpflow.errors import SourceError
from tgpflow.io.cf_time import decode_cf_time

NAT = np.iinfo(np.int64).min


@pytest.mark.parametrize("units, counts", [
    ("days since 2026-11-01 00:00:00", [0, 1, 54, -3]),
    ("days since 2026-11-01", [0, 365, 366]),  # 2027 is not a leap year, 2028 is
    ("hours since 2026-11-01 06:00:00", [0, 30, 24 * 120]),
    ("minutes since 1970-01-01T00:00:00", [0, 29_000_000]),
    ("seconds since 2026-11-01 06:30:00.25", [0, 1, 86_400]),
    ("milliseconds since 2000-02-29", [0, 86_400_000]),
    ("seconds since 2026-11-01 06:30:00 -02:00", [0, 7]),  # a local time: 08:30 UTC
    ("days since 1700-01-01", [0, 1, 100_000]),  # (xarray needs cftime before 1678)
])
@pytest.mark.parametrize("calendar", ["proleptic_gregorian", "standard"])
def test_cf_counts_decode_to_the_datetimes_xarray_decodes(units, counts, calendar):
    counts = np.array(counts, dtype=np.int64)
    got = decode_cf_time(counts, {"units": units, "calendar": calendar}, "store")
    want = decode_cf_datetime(counts, units, calendar)
    np.testing.assert_array_equal(got.astype("datetime64[ns]"), want.astype("datetime64[ns]"))


def test_labels_keep_the_units_resolution_and_missing_counts_are_nat():
    got = decode_cf_time(np.array([0, 1, NAT]), {"units": "days since 2026-11-01 00:00:00"}, "store")
    assert got.dtype == np.dtype("datetime64[D]")  # labels 2026-11-01, not 2026-11-01T00:00:00
    assert np.isnat(got[2]) and str(got[1]) == "2026-11-02"
    assert str(decode_cf_time(np.array([6]), {"units": "hours since 2026-11-01 06:00"}, "s")[0]) == "2026-11-01T12"
    floats = decode_cf_time(np.array([0.0, 2.0, np.nan]), {"units": "days since 2026-11-01"}, "store")
    assert str(floats[1]) == "2026-11-03" and np.isnat(floats[2])
    filled = decode_cf_time(np.array([0, -1]), {"units": "days since 2026-11-01", "_FillValue": -1}, "store")
    assert np.isnat(filled[1])


def test_counts_that_are_not_cf_time_in_a_gregorian_calendar_stay_counts():
    counts = np.array([0, 1, 2])
    for attrs in ({}, {"units": "m"}, {"units": "degrees since the start"},
                  {"units": "days since 2026-11-01", "calendar": "noleap"},
                  {"units": "days since 2026-11-01", "calendar": "360_day"}):
        assert decode_cf_time(counts, attrs, "store") is counts
    strings = np.array(["2026-11-01"])
    assert decode_cf_time(strings, {"units": "days since 2026-11-01"}, "store") is strings


@pytest.mark.parametrize("values, attrs, message", [
    (np.array([0.0, 0.5]), {"units": "days since 2026-11-01"}, "not whole days"),
    (np.array([0]), {"units": "days since yesterday"}, "cannot read the reference date"),
    (np.array([0]), {"units": "days since 2026-13-01"}, "is not a date"),
    (np.array([0, -1]), {"units": "days since 1582-10-15"}, "before 1582-10-15"),
    (np.array([0]), {"units": "days since 1500-01-01", "calendar": "gregorian"}, "before 1582-10-15"),
    (np.array([0]), {"units": "nanoseconds since 1600-01-01"}, "beyond what datetime64"),  # ±292 years about 1970
    (np.array([0, 2**63 - 10]), {"units": "seconds since 2026-11-01"}, "beyond what datetime64"),
])
def test_time_units_it_cannot_decode_are_refused_naming_the_store(values, attrs, message):
    with pytest.raises(SourceError, match=message) as err:
        decode_cf_time(values, attrs, "data.zarr: the coordinate array 'date'")
    assert "data.zarr" in str(err.value)


def test_the_proleptic_calendar_decodes_the_counts_refused_before_the_julian_switch():
    """proleptic_gregorian has no switch: the dates before 1582-10-15 refused above are its Gregorian dates."""
    got = decode_cf_time(np.array([0, -1]), {"units": "days since 1582-10-15", "calendar": "proleptic_gregorian"}, "s")
    np.testing.assert_array_equal(got, np.array(["1582-10-15", "1582-10-14"], dtype="datetime64[D]"))
    got = decode_cf_time(np.array([0]), {"units": "days since 1500-01-01", "calendar": "proleptic_gregorian"}, "s")
    np.testing.assert_array_equal(got, np.array(["1500-01-01"], dtype="datetime64[D]"))


def test_a_store_written_by_xarray_reads_its_dates_back(tmp_path):
    """The attributes on disk are xarray's (zarr v3 and v2): the decoded coordinate equals the one written."""
    import zarr

    dates = np.repeat(np.array(["2026-11-01", "2026-11-02", "2026-11-04"], dtype="datetime64[D]"), 2)
    ds = xr.Dataset({"a": ("date", np.arange(6.0))}, coords={"date": dates})
    for fmt in (3, 2):
        path = tmp_path / f"v{fmt}.zarr"
        ds.to_zarr(path, zarr_format=fmt, mode="w", consolidated=False)
        coord = zarr.open_group(str(path), mode="r")["date"]
        assert coord.dtype.kind == "i"  # xarray writes counts, not datetime64
        np.testing.assert_array_equal(decode_cf_time(coord[...], coord.attrs, str(path)), dates)
