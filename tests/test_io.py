"""Bad input: each case names the file/chunk, the column and the count, and writes nothing."""

import numpy as np
import pandas as pd
import pytest
import pyarrow as pa
import pyarrow.parquet as pq
import zarr

import dask
import dask.array as da
import dask.dataframe as dd

import tgpflow.io.parquet as parquet_mod
from tgpflow import GPTiltedDensity
from tgpflow.errors import SourceError
from tgpflow.io.atomic import atomic_path
from tgpflow.io.pilot import pilot_sample
from tgpflow.io.sources import as_source
from tests.conftest import write_parquet


@pytest.fixture
def parts(tmp_path, rng):
    X = rng.normal(size=(1200, 3))
    for i in range(3):
        write_parquet(tmp_path / f"part-{i}.parquet", X[i * 400:(i + 1) * 400], ["a", "b", "c"], row_group_size=100)
    return tmp_path, X


def _fit(src, **kw):
    return GPTiltedDensity(n_features=8, **kw).fit(src)


def test_nan_in_parquet_names_file_row_group_column_and_count(parts):
    tmp, X = parts
    bad = X[:400].copy()
    bad[[5, 17, 50], 1] = np.nan
    bad[17, 2] = np.inf
    write_parquet(tmp / "part-1.parquet", bad, ["a", "b", "c"], row_group_size=100)
    with pytest.raises(SourceError) as err:
        _fit(str(tmp / "*.parquet"))
    msg = str(err.value)
    assert "part-1.parquet row group 0" in msg and "3 of 100 rows" in msg
    assert "column 'b': 3" in msg and "column 'c': 1" in msg and "on_bad_rows='drop'" in msg


def test_drop_mode_drops_and_reports(parts):
    tmp, X = parts
    bad = X[:400].copy()
    bad[[5, 17, 150], 1] = np.nan
    write_parquet(tmp / "part-1.parquet", bad, ["a", "b", "c"], row_group_size=100)
    est = _fit(str(tmp / "*.parquet"), on_bad_rows="drop", lam=0.1)  # a fixed λ: no split to compare
    assert est.n_rows_dropped_ == 3 and est.n_samples_seen_ == 1197
    clean = np.delete(np.concatenate([X[:400], bad, X[800:]]), [405, 417, 550], axis=0)
    ref = GPTiltedDensity(n_features=8, lam=0.1).fit(clean, features=est.features_)
    np.testing.assert_allclose(est.theta_, ref.theta_, rtol=1e-10, atol=1e-12)


def test_null_values_count_as_missing(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"a": [1.0, 2.0, None, 4.0], "b": pa.array([1, None, 3, 4], pa.int64())}), tmp_path / "n.parquet")
    with pytest.raises(SourceError, match=r"n.parquet row group 0: 2 of 4 rows .*column 'a': 1, column 'b': 1"):
        _fit(str(tmp_path / "n.parquet"))


def test_non_numeric_and_missing_columns(tmp_path, rng):
    frame = pd.DataFrame({"a": rng.normal(size=10), "label": ["x"] * 10})
    frame.to_parquet(tmp_path / "f.parquet")
    with pytest.raises(SourceError, match=r"f.parquet: column 'label' is not numeric .*columns=\["):
        as_source(str(tmp_path / "f.parquet"))
    with pytest.raises(SourceError, match=r"f.parquet: missing column\(s\) \['zz'\]"):
        as_source(str(tmp_path / "f.parquet"), columns=["a", "zz"])
    with pytest.raises(SourceError, match="column 'label' has non-numeric dtype"):
        as_source(dd.from_pandas(frame, npartitions=2))


def test_parquet_row_filters_keep_the_rows_where_every_filter_holds(tmp_path, rng):
    """Filters (pyarrow's filters_to_expression) against a pandas oracle: a null never passes, a
    string column can filter without being selected, and the chunk sizes become unknown."""
    frame = pd.DataFrame({"a": rng.normal(size=300), "b": rng.normal(size=300), "c": rng.normal(size=300),
                          "tag": rng.choice(["x", "y"], size=300)})
    frame.loc[[3, 40, 200], "c"] = None
    pq.write_table(pa.Table.from_pandas(frame, preserve_index=False), tmp_path / "f.parquet", row_group_size=70)
    filters = [("c", ">", -0.5), ("tag", "==", "x"), ("a", "<=", 1)]
    src = as_source(str(tmp_path / "f.parquet"), columns=["a", "b"], filters=filters)
    assert src.n_chunks == 5 and src.n_rows is None
    keep = (frame.c > -0.5) & (frame.tag == "x") & (frame.a <= 1)  # NaN > -0.5 is False: nulls go
    np.testing.assert_array_equal(src.to_dask_array().compute(), frame.loc[keep, ["a", "b"]].to_numpy())
    assert 0 < keep.sum() < 300
    with pytest.raises(SourceError, match=r"f.parquet: row filters .* are not valid .*op one of"):
        as_source(str(tmp_path / "f.parquet"), columns=["a"], filters=[("c", "~", 0)])
    with pytest.raises(SourceError, match=r"f.parquet row group \d: filter column 'zz' is missing; it has \['a'\]"):
        as_source(str(tmp_path / "f.parquet"), columns=["a"], filters=[("zz", ">", 0)]).to_dask_array().compute()


def test_schema_that_differs_between_files(parts, rng):
    tmp, _ = parts
    write_parquet(tmp / "part-9.parquet", rng.normal(size=(10, 4)), ["a", "b", "c", "d"])
    with pytest.raises(SourceError, match=r"part-9.parquet: schema differs from .*part-0.parquet \(4 vs 3 columns"):
        as_source(str(tmp / "*.parquet"), columns=["a", "b", "c"])


def test_zero_rows(tmp_path):
    write_parquet(tmp_path / "empty.parquet", np.empty((0, 2)))
    with pytest.raises(SourceError, match="empty.parquet: the source has zero rows"):
        as_source(str(tmp_path / "empty.parquet"))
    with pytest.raises(ValueError, match="0 sample"):
        GPTiltedDensity().fit(np.empty((0, 2)))


def test_corrupt_files(parts):
    tmp, _ = parts
    (tmp / "part-1.parquet").write_bytes(b"not parquet at all")
    with pytest.raises(SourceError, match=r"part-1.parquet: not a readable Parquet file"):
        as_source(str(tmp / "*.parquet"))


def test_corrupt_data_pages_are_reported_when_read(parts):
    tmp, _ = parts
    path = tmp / "part-2.parquet"
    raw = bytearray(path.read_bytes())
    raw[100:1500] = bytes(1400)  # zero the data pages, keep the footer
    path.write_bytes(bytes(raw))
    src = as_source(str(tmp / "*.parquet"))
    with pytest.raises(SourceError, match=r"part-2.parquet row group \d: cannot be read"):
        _fit(src)


def test_zarr_and_dask_messages(tmp_path, rng):
    X = rng.normal(size=(100, 2))
    X[42, 1] = np.nan
    z = zarr.create_array(str(tmp_path / "x.zarr"), shape=X.shape, chunks=(30, 2), dtype="f8")
    z[...] = X
    with pytest.raises(SourceError, match=r"x.zarr chunk 1 \(rows 30–59\): 1 of 30 rows .*column '1': 1"):
        _fit(str(tmp_path / "x.zarr"))
    with pytest.raises(SourceError, match=r"X.rechunk\(\{1: -1\}\)"):
        as_source(da.from_array(rng.normal(size=(10, 4)), chunks=(5, 2)))
    g = zarr.open_group(str(tmp_path / "g.zarr"), mode="w")
    g.create_array("data", data=rng.normal(size=(5, 2)))
    with pytest.raises(SourceError, match="is a Zarr group, not an array; pass the array's path"):
        as_source(str(tmp_path / "g.zarr"))


def test_each_row_group_is_read_once_per_pass_and_the_pilot_is_bounded(parts, monkeypatch):
    tmp, _ = parts
    reads = []
    original = parquet_mod.read_row_group
    monkeypatch.setattr(parquet_mod, "read_row_group", lambda fs, p, i, c: reads.append((p, i)) or original(fs, p, i, c))
    src = as_source(str(tmp / "*.parquet"))
    est = GPTiltedDensity(n_features=8, bandwidth=0.5, kernel_cov="identity")
    pilot = pilot_sample(src, rows=50, max_chunks=4, random_state=0)
    assert pilot.chunks_read <= 4 and len(reads) == pilot.chunks_read and pilot.rows.shape == (48, 3)
    reads.clear()
    est.fit(src, features=None)
    counts = pd.Series([f"{p}:{i}" for p, i in reads]).value_counts()
    # 12 row groups: the pass reads each once; the pilot (≤ 16 chunks) reads each at most once more
    assert len(counts) == 12 and counts.max() <= 2 and (counts == 2).sum() == est.pilot_["chunks_read"]


def test_pilot_is_uniform_over_rows(rng):
    X = np.arange(10_000, dtype=float)[:, None] * np.ones((1, 2))
    src = as_source(da.from_array(X, chunks=((100,) * 40 + (6000,), 2)))
    firsts = [pilot_sample(src, rows=400, random_state=s, max_chunks=8).rows[:, 0] for s in range(30)]
    values = np.concatenate(firsts)
    # each row has the same inclusion probability: the mean index is 4999.5 ± MC error
    assert abs(values.mean() - 4999.5) < 4 * 2887 / np.sqrt(len(values)) * 2
    assert abs((values >= 4000).mean() - 0.6) < 0.05


def test_atomic_path_leaves_the_target_alone_on_failure(tmp_path):
    target = tmp_path / "out.parquet"
    pq.write_table(pa.table({"x": [1.0]}).replace_schema_metadata({"tgpflow.output": "samples"}), target)
    good = target.read_bytes()
    with pytest.raises(RuntimeError), atomic_path(target, "samples") as tmp:
        tmp.write_text("half")
        raise RuntimeError("killed")
    assert target.read_bytes() == good
    assert [p.name for p in tmp_path.iterdir()] == ["out.parquet"]


def test_each_input_goes_to_one_backend_and_a_keyword_of_another_format_is_refused(parts, tmp_path, rng):
    from tgpflow.io.backends import arrays, backend_for, parquet, zarr as zarr_backend

    path, X = parts
    store = tmp_path / "x.zarr"
    zarr.create_array(str(store), shape=(50, 2), chunks=(10, 2), dtype="f8")[...] = rng.normal(size=(50, 2))
    assert backend_for(str(path / "*.parquet"), None) is parquet
    assert backend_for(str(store), None) is zarr_backend and backend_for(str(store), "parquet") is parquet
    assert backend_for(X, None) is arrays and backend_for(pd.DataFrame(X), None) is arrays
    with pytest.raises(SourceError, match="row filters apply to Parquet sources only"):
        as_source(X, filters=[("a", ">", 0)])
    with pytest.raises(SourceError, match=r"rows of a Zarr group; this is not a Zarr store \(got array=\)"):
        as_source(X, array="x")
    with pytest.raises(SourceError, match=r"x\.zarr: row filters apply to Parquet sources only"):
        as_source(str(store), filters=[("a", ">", 0)])


def test_sources_put_together_keep_their_chunks_and_the_keys_of_their_rows(parts):
    import dask

    from tgpflow.io.sources import concat_sources

    path, X = parts
    pieces = [as_source(str(path / f"part-{i}.parquet")) for i in range(3)]
    whole = concat_sources(pieces, description="all parts")
    assert whole.description == "all parts" and whole.n_chunks == 12 and whole.n_rows == 1200
    rows = np.concatenate(dask.compute(*whole.blocks()))
    keys = np.concatenate(dask.compute(*whole.row_keys()))
    np.testing.assert_array_equal(rows, X)  # parts in order, row groups in order
    np.testing.assert_array_equal(keys, np.arange(1200))  # a row's key is its position in the whole
    with pytest.raises(SourceError, match="columns .* differ"):
        concat_sources([pieces[0], as_source(X[:, :2])])


def test_the_parquet_and_csv_listings_skip_the_same_hidden_files(tmp_path):
    """One rule (tgpflow.io.hidden): a writer's _SUCCESS, _metadata and .crc files beside the data are not data."""
    from tgpflow.io.backends.csv import header_names
    from tgpflow.io.hidden import is_hidden
    from tgpflow.io.sources import as_source

    assert [is_hidden(p) for p in ("d/_SUCCESS", "s3://b/d/.a.crc", "d/_delta_log/", "d/a.parquet", "d/x_1.csv")] \
        == [True, True, True, False, False]
    pq_dir, csv_dir = tmp_path / "pq", tmp_path / "csv"
    pq_dir.mkdir()
    csv_dir.mkdir()
    pq.write_table(pa.table({"a": [1.0, 2.0]}), pq_dir / "part-0.parquet")
    pd.DataFrame({"a": [1.0, 2.0, 3.0]}).to_csv(csv_dir / "part-0.csv", index=False)
    for d in (pq_dir, csv_dir):
        (d / "_SUCCESS").write_text("")
        (d / ".part-0.crc").write_bytes(b"\x00\x01")
        (d / "_metadata.csv").write_text("not,data\n")
    _, files = parquet_mod.list_parquet_files(str(pq_dir))
    assert [f.rsplit("/", 1)[-1] for f in files] == ["part-0.parquet"]
    assert as_source(str(pq_dir)).n_rows == 2
    src = as_source(str(csv_dir))
    assert header_names(str(csv_dir)) == ["a"] and src.n_chunks == 1
    assert np.vstack(dask.compute(*src.blocks(), scheduler="sync")).shape == (3, 1)
