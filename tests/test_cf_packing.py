"""Zarr stores written by xarray: CF missing values and packing decoded as xarray decodes them, and the dimension
coordinate left out of the columns."""

import numpy as np
import pandas as pd
import pytest
import xarray as xr
import zarr

from tgpflow.errors import SourceError
from tgpflow.io.cf_packing import cf_encoding
from tgpflow.io.backends.zarr import zarr_row_runs
from tgpflow.io.sources import as_source
from tgpflow.pipeline.discover import discover

ENCODING = {"packed": {"dtype": "int16", "scale_factor": 0.1, "add_offset": 1.0, "_FillValue": -9999},
            "filled": {"_FillValue": -9999.0},
            "listed": {"dtype": "int32"}}


def _dataset(rng, n=500):
    packed = np.round(rng.normal(size=n), 1)
    filled = rng.normal(size=n)
    packed[[3, 200]] = np.nan  # written as the fill markers −9999 (int16) and −9999.0
    filled[[3, 450]] = np.nan
    listed = rng.integers(0, 50, size=n)
    return xr.Dataset({"packed": ("date", packed), "filled": ("date", filled), "listed": ("date", listed)},
                      coords={"date": pd.date_range("2026-11-01", periods=n, freq="h")})


@pytest.mark.parametrize("zarr_format", [3, 2])
def test_a_store_written_by_xarray_reads_as_xarray_decodes_it(tmp_path, rng, zarr_format):
    path = str(tmp_path / "x.zarr")
    _dataset(rng).to_zarr(path, zarr_format=zarr_format, consolidated=False, encoding=ENCODING)
    stored = zarr.open_group(path, mode="r")
    assert stored["packed"].dtype == np.int16 and (stored["filled"][:] == -9999.0).sum() == 2  # encoded on disk
    zarr.open_group(path, mode="r+")["listed"].attrs["missing_value"] = 7  # CF's other marker
    expected = xr.open_zarr(path, consolidated=False).to_dataframe()  # xarray's own decoding, indexed by date
    assert np.isnan(expected["listed"]).sum() == (stored["listed"][:] == 7).sum() > 0

    source = as_source(path, on_bad_rows="drop")
    assert list(source.columns) == ["filled", "listed", "packed"]  # the date coordinate is the rows' label
    got = source.to_dask_array().compute()
    want = expected[["filled", "listed", "packed"]].dropna().to_numpy()
    np.testing.assert_array_equal(got, want)  # xarray unpacks in float64 too: stored · 0.1 + 1.0, the same bits

    counts = expected.isna().sum()
    bad = rf"{expected.isna().any(axis=1).sum()} of 500 rows .*'filled': 2, column 'listed': {counts['listed']}, "
    with pytest.raises(SourceError, match=r"x\.zarr chunk 0 \(rows 0–499\): " + bad + "column 'packed': 2"):
        as_source(path).to_dask_array().compute()  # missing values are bad rows, named by column

    named = as_source(path, columns=["date", "packed"], on_bad_rows="drop")  # the coordinate only when named
    assert list(named.columns) == ["date", "packed"]
    kept = ~np.isnan(expected["packed"].to_numpy())
    np.testing.assert_array_equal(named.to_dask_array().compute()[:, 0], stored["date"][:][kept])  # its counts


def test_zarr_fill_values_are_not_missing_values_but_on_xarrays_v2_arrays(tmp_path):
    """Zarr's own fill_value is what an unwritten chunk reads as, not a missing value: only xarray's v2 arrays (with
    _ARRAY_DIMENSIONS) read it as _FillValue; in v3 xarray writes the attribute _FillValue."""
    group = zarr.open_group(str(tmp_path / "v3.zarr"), mode="w", zarr_format=3)
    group.create_array("a", shape=(6,), chunks=(3,), dtype="float64", fill_value=0.0,
                       dimension_names=["row"])[:] = [0, 1, 2, 0, 4, 5]
    np.testing.assert_array_equal(as_source(str(tmp_path / "v3.zarr")).to_dask_array().compute()[:, 0],
                                  [0, 1, 2, 0, 4, 5])
    group = zarr.open_group(str(tmp_path / "v2.zarr"), mode="w", zarr_format=2)
    for name in ("a", "b"):
        group.create_array(name, shape=(6,), chunks=(3,), dtype="float64", fill_value=0.0)[:] = [0, 1, 2, 0, 4, 5]
    got = as_source(str(tmp_path / "v2.zarr")).to_dask_array().compute()
    np.testing.assert_array_equal(got[:, 0], [0, 1, 2, 0, 4, 5])
    group["a"].attrs["_ARRAY_DIMENSIONS"] = ["row"]  # now xarray's: its fill value marks a missing value
    got = as_source(str(tmp_path / "v2.zarr"), on_bad_rows="drop").to_dask_array().compute()
    np.testing.assert_array_equal(got[:, 0], [1, 2, 4, 5])


@pytest.mark.parametrize("attrs, message", [
    ({"scale_factor": "0.1"}, "scale_factor '0.1' is not a finite number"),
    ({"add_offset": float("inf")}, "add_offset inf is not a finite number"),
    ({"_Unsigned": "true"}, "_Unsigned='true'.*does not decode"),
    ({"missing_value": "n/a"}, "missing-value marker 'n/a' is not a number"),
    ({"_FillValue": "not base64!"}, "_FillValue 'not base64!' is not the base64 of a float64"),
])
def test_encodings_it_cannot_decode_are_refused_naming_the_array(tmp_path, attrs, message):
    group = zarr.open_group(str(tmp_path / "bad.zarr"), mode="w")
    group.create_array("a", shape=(4,), dtype="float64" if "_FillValue" in attrs else "int16")[:] = [1, 2, 3, 4]
    group["a"].attrs.update(attrs)
    with pytest.raises(SourceError, match=r"bad\.zarr: the array 'a': .*" + message):
        as_source(str(tmp_path / "bad.zarr"))


def test_the_decoder_masks_on_the_stored_values_then_scales():
    """A stored value equal to a marker is missing even where its scaled value is not; NaN needs no marker."""
    group = zarr.open_group(zarr.storage.MemoryStore(), mode="w")
    arr = group.create_array("a", shape=(4,), dtype="int16")
    arr.attrs.update({"scale_factor": 2.0, "add_offset": -1.0, "_FillValue": 3, "missing_value": [0, 4]})
    decode = cf_encoding(arr, "m")
    got = decode(np.array([0, 1, 3, 5, 4], dtype=np.int16))
    np.testing.assert_array_equal(got, [np.nan, 1.0, np.nan, 9.0, np.nan])
    plain = group.create_array("p", shape=(4,), dtype="float64")
    plain.attrs["_FillValue"] = "AAAAAAAA+H8="  # NaN, as xarray writes a float array's default
    assert cf_encoding(plain, "m") is None  # nothing to decode: the block is read as it is
    arr.attrs.update({"_FillValue": 2**64, "missing_value": 3.5, "scale_factor": [2.0]})  # int16 cannot hold them
    assert cf_encoding(arr, "m").markers == () and cf_encoding(arr, "m").scale == 2.0  # netCDF's one-element list
    arr.attrs["_FillValue"] = 3.7  # xarray truncates a v3 integer array's fill value
    assert cf_encoding(arr, "m").markers == (3,)
    arr.attrs["_FillValue"] = float("nan")  # no integer to truncate it to: it matches nothing
    assert cf_encoding(arr, "m").markers == ()


def test_a_2d_array_and_the_rows_of_one_date_are_decoded_too(tmp_path, rng):
    """The layouts beside a group of columns: a group's 2-D array (source.array) and one date of a store with a date
    dimension (partition_by), each against xarray's decoding of the same rows."""
    path = str(tmp_path / "grid.zarr")
    values = np.round(rng.normal(size=(40, 3)), 2)
    values[5, 1] = np.nan
    ds = xr.Dataset({"x": (("date", "feature"), values)},
                    coords={"date": np.repeat(pd.date_range("2026-11-01", periods=4), 10)})
    ds.to_zarr(path, consolidated=False, encoding={"x": {"dtype": "int16", "scale_factor": 0.01, "_FillValue": -1}})
    want = xr.open_zarr(path, consolidated=False)["x"].values
    got = as_source(path, array="x", on_bad_rows="drop").to_dask_array().compute()
    np.testing.assert_array_equal(got, np.delete(want, 5, axis=0))
    runs = zarr_row_runs(path, "date", "x")
    assert runs["2026-11-01"] == (0, 10)
    with pytest.raises(SourceError, match=r"grid\.zarr#date=2026-11-01 chunk 0 \(rows 0–9\): 1 of 10 rows"):
        as_source(path, array="x", rows=runs["2026-11-01"], coordinate="date").to_dask_array().compute()
    second = as_source(path, array="x", rows=runs["2026-11-02"], coordinate="date").to_dask_array().compute()
    np.testing.assert_array_equal(second, want[10:20])


def test_integers_beyond_2_53_are_refused_before_a_conversion_to_float64(tmp_path):
    """Decoded (a missing-value marker) or stacked beside a floating column, an int64 column becomes float64 before
    validation sees it: its integers beyond ±2**53 are refused by name first, not rounded."""
    group = zarr.open_group(str(tmp_path / "ids.zarr"), mode="w")
    group.create_array("id", shape=(3,), dtype="int64")[:] = [2**53 + 1, 5, 7]
    group.create_array("y", shape=(3,), dtype="float64")[:] = [1.0, 2.0, 3.0]
    with pytest.raises(SourceError, match=r"ids\.zarr rows 0–2: column 'id' holds 1 integer"):
        as_source(str(tmp_path / "ids.zarr")).to_dask_array().compute()  # beside a float column
    group["id"].attrs["missing_value"] = -1
    with pytest.raises(SourceError, match=r"ids\.zarr rows 0–2: column 'id' holds 1 integer"):
        as_source(str(tmp_path / "ids.zarr"), columns=["id"]).to_dask_array().compute()  # decoded


def test_a_changed_encoding_changes_the_fingerprint_of_every_date(tmp_path, rng):
    """A date's fingerprint covers its chunk files, not the arrays' metadata; the attributes that decide the values
    read are the exception, and a store without them keeps the fingerprints it had."""
    path = tmp_path / "data.zarr"
    ds = xr.Dataset({"a": ("date", rng.normal(size=20))},
                    coords={"date": np.repeat(pd.date_range("2026-11-01", periods=2), 10)})
    ds.to_zarr(str(path), consolidated=False)
    parts = discover(str(path), partition_by="date")
    before = {k: parts.fingerprint(k) for k in parts.keys}
    assert len(before) == 2
    zarr.open_group(str(path), mode="r+")["a"].attrs["title"] = "not an encoding"
    assert {k: parts.fingerprint(k) for k in parts.keys} == before
    zarr.open_group(str(path), mode="r+")["a"].attrs["scale_factor"] = 2.0
    after = {k: parts.fingerprint(k) for k in parts.keys}
    assert all(after[k] != before[k] for k in before)
