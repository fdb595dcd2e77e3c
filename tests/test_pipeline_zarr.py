"""Pipelines over Zarr partitions, partition keys relative to the source's root, and `tgpflow run --dry-run`."""

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import yaml
import zarr
from click.testing import CliRunner

from tests.conftest import write_parquet
from tests.oracles import tree_hash
from tests.test_pipeline import _oracle, _rel
from tgpflow import GPTiltedDensity
from tgpflow.cli import main
from tgpflow.errors import SourceError
from tgpflow.io.sources import as_source
from tgpflow.pipeline.discover import fingerprint, discover
from tgpflow.pipeline.runner import run_pipeline
from tgpflow.pipeline.spec import load_spec
from tgpflow.pipeline.store import StatsStore
from tgpflow.pipeline.versions import ModelVersions

MODELS = [{"name": "fd", "estimator": "GPTiltedDensity", "params": {"method": "fd", "n_features": 48, "lam": 0.1}},
          {"name": "kef", "estimator": "NystromKEF", "params": {"n_basis": 12, "base": "gaussian"}}]


def _rows(seed: int, n: int = 1500) -> np.ndarray:
    return np.random.default_rng(seed).normal(size=(n, 3)) * [1.0, 2.0, 0.5] + [3.0, -1.0, 0.0]


def _zarr_columns(path: Path, X: np.ndarray) -> None:
    """A partition as a Zarr group of 1-D arrays, one per column (the layout xarray writes)."""
    group = zarr.open_group(str(path), mode="w")
    for j, name in enumerate("abc"):
        group.create_array(name, data=X[:, j], chunks=(600,))


def _zarr_array(path: Path, X: np.ndarray) -> None:
    """A partition as a Zarr group holding a 2-D array ``x`` (named columns) and a 1-D row index."""
    group = zarr.open_group(str(path), mode="w")
    x = group.create_array("x", data=X, chunks=(600, 3))
    x.attrs["columns"] = ["a", "b", "c"]
    group.create_array("row", data=np.arange(len(X)), chunks=(600,))


LAYOUTS = {  # name: (write a partition, its path under data/ by day, the spec's source)
    "columns": (_zarr_columns, "date=2026-11-{:02d}.zarr", lambda d: {"path": f"{d}/date=*.zarr"}),
    "array": (_zarr_array, "2026-11-{:02d}", lambda d: {"path": d, "array": "x"}),
}


def _spec(tmp: Path, source: dict, **over) -> Path:
    raw = {"name": "z", "source": source, "preprocess": {"center": True, "scale": True}, "models": MODELS,
           "outputs": {"store": str(tmp / "store.zarr"), "models": str(tmp / "models"),
                       "scores": {"path": str(tmp / "scores"), "model": "fd", "threshold_quantile": 0.05}},
           "refit": {"policy": "incremental"}, **over}
    path = tmp / "spec.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def _write(tmp: Path, layout: str, days, seed_of=lambda d: d, n: int = 1500) -> dict[str, np.ndarray]:
    writer, name, _ = LAYOUTS[layout]
    (tmp / "data").mkdir(exist_ok=True)
    out = {}
    for day in days:
        X = _rows(seed_of(day), n)
        writer(tmp / "data" / name.format(day), X)
        out[name.format(day)] = X
    return out


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_zarr_partitions_incremental_refit_equals_a_full_refit(tmp_path, layout):
    """Add partitions, rerun: only they are read, and both models equal a fit of every row with the store's
    draw; a rewritten partition is detected and replaced; a rerun with nothing new changes nothing."""
    data = _write(tmp_path, layout, [1, 2, 3])
    spec = load_spec(_spec(tmp_path, LAYOUTS[layout][2](str(tmp_path / "data"))))
    first = run_pipeline(spec)
    assert sorted(first["added"]) == sorted(data)
    data.update(_write(tmp_path, layout, [4, 5]))
    second = run_pipeline(spec)
    assert sorted(second["added"]) == [LAYOUTS[layout][1].format(d) for d in (4, 5)] and second["removed"] == []
    for model in ("fd", "kef"):
        got, ref = _oracle(tmp_path, [data[k] for k in sorted(data)], model)
        # as the Parquet pipeline's test (the KEF solve's conditioning: 1.6e-10 with this draw and today's BLAS);
        # elementwise, that conditioning:
        assert _rel(got, ref) <= (1e-10 if model == "fd" else 1e-9)
        np.testing.assert_allclose(got, ref, rtol=1e-9, atol=(1e-10 if model == "fd" else 1e-9) * np.abs(ref).max())
    rewritten = LAYOUTS[layout][1].format(2)
    data.update(_write(tmp_path, layout, [2], seed_of=lambda d: 99, n=1700))
    third = run_pipeline(spec)
    assert third["added"] == [rewritten] and third["removed"] == [rewritten]
    assert third["rows"]["fd"] == 4 * 1500 + 1700
    got, ref = _oracle(tmp_path, [data[k] for k in sorted(data)])
    assert _rel(got, ref) <= 1e-10
    assert len(list((tmp_path / "scores").glob("*.parquet"))) == 5
    assert not run_pipeline(spec)["changed"]
    assert set(StatsStore(tmp_path / "store.zarr").read_manifest()["partitions"]) == set(data)


def test_bad_zarr_partitions_are_named_with_their_chunk_and_column(tmp_path):
    _write(tmp_path, "columns", [1, 2])
    X = _rows(3)
    X[700, 1] = np.nan
    _zarr_columns(tmp_path / "data" / "date=2026-11-03.zarr", X)
    spec = load_spec(_spec(tmp_path, {"path": str(tmp_path / "data" / "date=*.zarr")}))
    with pytest.raises(SourceError, match=r"date=2026-11-03\.zarr chunk 1 \(rows 600–1199\): 1 of 600 rows .*"
                                          r"column 'b': 1"):
        run_pipeline(spec)
    assert not (tmp_path / "models").exists() and StatsStore(tmp_path / "store.zarr").read_manifest() is None
    group = zarr.open_group(str(tmp_path / "data" / "date=2026-11-03.zarr"), mode="w")
    for name in "ab":
        group.create_array(name, data=_rows(3)[:, 0], chunks=(600,))
    with pytest.raises(SourceError, match=r"date=2026-11-03\.zarr: missing column 'c'; it has \['a', 'b'\]"):
        run_pipeline(spec)
    (tmp_path / "data" / "stray.parquet").write_bytes(b"")
    mixed = load_spec(_spec(tmp_path, {"path": str(tmp_path / "data" / "*")}))
    with pytest.raises(SourceError, match="matches both Zarr stores"):
        run_pipeline(mixed)


def _project(root: Path, days) -> dict[str, np.ndarray]:
    (root / "data").mkdir(parents=True, exist_ok=True)
    out = {}
    for d in days:
        X = _rows(d)
        write_parquet(root / "data" / f"p{d:03d}.parquet", X, ["a", "b", "c"], row_group_size=600)
        out[f"p{d:03d}.parquet"] = X
    return out


def _relative_spec(root: Path) -> Path:
    """A project's spec with paths relative to the project directory (the run's working directory)."""
    raw = {"name": "moved", "source": {"path": "data/*.parquet"}, "preprocess": {"center": True, "scale": True},
           "models": MODELS, "outputs": {"store": "store.zarr", "models": "models", "scores": {"path": "scores"}}}
    path = root / "spec.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def test_a_moved_project_accumulates_only_its_new_partition(tmp_path, monkeypatch):
    """Run in one directory, copy the whole project elsewhere, add a partition and run there: only the new
    partition is read (the store's keys are relative to data/), and the model equals a full refit."""
    old, new = tmp_path / "here", tmp_path / "elsewhere" / "project"
    data = _project(old, range(3))
    monkeypatch.chdir(old)
    run_pipeline(load_spec(_relative_spec(old)))
    manifest = StatsStore(old / "store.zarr").read_manifest()
    assert sorted(manifest["partitions"]) == sorted(data)  # relative keys, no trace of `old`
    assert str(old) not in json.dumps(manifest["partitions"])
    shutil.copytree(old, new)  # keeps modification times, as cp -p and rsync -t do
    shutil.rmtree(old)
    monkeypatch.chdir(new)
    data.update(_project(new, [3]))
    result = run_pipeline(load_spec(new / "spec.yaml"))
    assert result["added"] == ["p003.parquet"] and result["removed"] == []
    info = ModelVersions(new / "models" / "fd").info()
    assert info["partitions"] == sorted(data) and info["rows"] == 4 * 1500
    assert sorted(p.name for p in (new / "scores").iterdir()) == sorted(data)
    for model in ("fd", "kef"):
        got, ref = _oracle(new, [data[k] for k in sorted(data)], model)
        assert _rel(got, ref) <= 1e-10


def test_a_store_with_absolute_keys_is_migrated_and_keeps_its_partitions(tmp_path):
    """A manifest as tgpflow wrote it before keys were relative (schema 1: absolute keys, fingerprints of the
    absolute paths) is migrated by the next run: unchanged partitions are not read again."""
    data = _project(tmp_path, range(3))
    spec = load_spec(_spec(tmp_path, {"path": str(tmp_path / "data" / "*.parquet")}))
    run_pipeline(spec)
    store = StatsStore(tmp_path / "store.zarr")
    manifest = store.read_manifest()
    parts = discover(spec.source.path)
    legacy = {parts.path(k): {**v, "fingerprint": fingerprint(parts.fs, parts.path(k), parts.path(k))}
              for k, v in manifest["partitions"].items()}
    assert all(v["fingerprint"] != manifest["partitions"][Path(k).name]["fingerprint"] for k, v in legacy.items())
    store.write_manifest({**manifest, "schema": 1, "partitions": legacy})
    data.update(_project(tmp_path, [3]))
    dry = run_pipeline(spec, dry_run=True)
    assert dry["migrate_keys"] and dry["partitions"] == {"new": ["p003.parquet"], "changed": [], "removed": [],
                                                         "unchanged": 3}
    result = run_pipeline(spec)
    assert result["added"] == ["p003.parquet"] and result["removed"] == []
    migrated = store.read_manifest()
    assert migrated["schema"] == 2 and sorted(migrated["partitions"]) == sorted(data)
    got, ref = _oracle(tmp_path, [data[k] for k in sorted(data)])
    assert _rel(got, ref) <= 1e-10


def _snapshot(root: Path) -> tuple[str, dict[str, int]]:
    """Every path and file's bytes (hashed), and every path's modification time."""
    return tree_hash(root), {str(p): p.stat().st_mtime_ns for p in sorted(root.rglob("*"))}


def test_dry_run_names_the_new_partition_and_writes_nothing(tmp_path):
    _write(tmp_path, "columns", [1])
    spec_path = _spec(tmp_path, {"path": str(tmp_path / "data" / "date=*.zarr")})
    before = _snapshot(tmp_path)
    r = CliRunner().invoke(main, ["--json", "run", str(spec_path), "--dry-run"])
    assert r.exit_code == 0, r.output
    plan = json.loads(r.stdout)
    assert plan["dry_run"] and plan["rebuild"] and plan["partitions"]["new"] == ["date=2026-11-01.zarr"]
    assert _snapshot(tmp_path) == before and not (tmp_path / "store.zarr").exists()  # no store, not even a lock
    assert CliRunner().invoke(main, ["--json", "run", str(spec_path), "--progress", "none"]).exit_code == 0
    _write(tmp_path, "columns", [2])
    before = _snapshot(tmp_path)
    r = CliRunner().invoke(main, ["--json", "run", str(spec_path), "--dry-run"])
    assert r.exit_code == 0, r.output
    plan = json.loads(r.stdout)
    assert _snapshot(tmp_path) == before
    assert plan["partitions"] == {"new": ["date=2026-11-02.zarr"], "changed": [], "removed": [], "unchanged": 1}
    assert not plan["rebuild"] and plan["run"] == 2 and plan["format"] == "zarr"
    assert plan["refit"]["fd"]["refit"].startswith("incremental") and plan["refit"]["kef"]["refit"].startswith("incr")
    assert plan["score"] == {"path": str(tmp_path / "scores"), "model": "fd", "partitions": ["date=2026-11-02.zarr"]}
    done = CliRunner().invoke(main, ["--json", "run", str(spec_path), "--progress", "none"])
    assert done.exit_code == 0 and json.loads(done.stdout)["added"] == plan["partitions"]["new"], done.output
    _write(tmp_path, "columns", [1], seed_of=lambda d: 7, n=900)  # rewritten
    shutil.rmtree(tmp_path / "data" / "date=2026-11-02.zarr")  # gone
    plan = run_pipeline(load_spec(spec_path), dry_run=True)
    assert plan["partitions"] == {"new": [], "changed": ["date=2026-11-01.zarr"], "removed": ["date=2026-11-02.zarr"],
                                  "unchanged": 0}
    assert plan["refit"]["fd"]["refit"].endswith("+ 1 partition(s) − 2")  # the rewritten one's old statistics too


# -- one Zarr store with a date dimension (source.partition_by) ------------------------------------------------

DATES = ["2026-11-01", "2026-11-02", "2026-11-03", "2026-11-04"]


def _dated(path: Path, parts: dict[str, np.ndarray], layout: str = "array") -> None:
    """Append each date's rows to one Zarr group: a 2-D array ``x`` (or 1-D column arrays) and a 1-D
    coordinate ``date`` (datetime64[D]) aligned with the rows — created by the first call, appended to after."""
    rows = np.concatenate(list(parts.values()))
    dates = np.concatenate([np.full(len(X), d, dtype="datetime64[D]") for d, X in parts.items()])
    if not (path / "zarr.json").exists():
        group = zarr.open_group(str(path), mode="w")
        if layout == "array":
            x = group.create_array("x", shape=(0, 3), chunks=(500, 3), dtype="f8")
            x.attrs["columns"] = ["a", "b", "c"]
        else:
            for name in "abc":
                group.create_array(name, shape=(0,), chunks=(500,), dtype="f8")
        group.create_array("date", shape=(0,), chunks=(500,), dtype="datetime64[D]")
    group = zarr.open_group(str(path), mode="r+")
    if layout == "array":
        group["x"].append(rows)
    else:
        for j, name in enumerate("abc"):
            group[name].append(rows[:, j])
    group["date"].append(dates)


@pytest.mark.parametrize("layout", ["array", "columns"])
def test_a_date_dimension_incremental_refit_equals_a_full_refit(tmp_path, layout):
    """Three dates in one store, then a fourth appended: the second run reads the new date only (and the one
    whose last chunk the append rewrote), and both models equal a fit of every row with the store's draw."""
    store = tmp_path / "data.zarr"
    data = {d: _rows(i, 1000) for i, d in enumerate(DATES[:3])}  # chunks of 500: dates end on chunk boundaries
    _dated(store, data, layout)
    source = {"path": str(store), "partition_by": "date", **({"array": "x"} if layout == "array" else {})}
    spec = load_spec(_spec(tmp_path, source))
    first = run_pipeline(spec)
    assert first["added"] == [f"data.zarr#date={d}" for d in DATES[:3]]
    fps = StatsStore(tmp_path / "store.zarr").read_manifest()["partitions"]
    data[DATES[3]] = _rows(3, 1200)
    _dated(store, {DATES[3]: data[DATES[3]]}, layout)
    second = run_pipeline(spec)
    assert second["added"] == [f"data.zarr#date={DATES[3]}"] and second["removed"] == []
    after = StatsStore(tmp_path / "store.zarr").read_manifest()["partitions"]
    assert all(after[k]["fingerprint"] == fps[k]["fingerprint"] and after[k]["run"] == 1 for k in fps)
    assert second["rows"]["fd"] == 3 * 1000 + 1200
    for model in ("fd", "kef"):
        got, ref = _oracle(tmp_path, [data[d] for d in DATES], model)
        assert _rel(got, ref) <= 1e-10
        np.testing.assert_allclose(got, ref, rtol=1e-9, atol=(1e-10 if model == "fd" else 1e-9) * np.abs(ref).max())
    assert sorted(p.name for p in (tmp_path / "scores").iterdir()) == [f"data#date={d}.parquet" for d in DATES]
    assert not run_pipeline(spec)["changed"]


def test_appending_into_a_shared_chunk_reads_that_date_again_only(tmp_path):
    """A date that ends inside a chunk shares it with the appended date: the append rewrites the chunk, and that
    date (its rows unchanged) is read again; the dates before it are not. The models still equal a full refit."""
    store = tmp_path / "data.zarr"
    data = {d: _rows(i, 900) for i, d in enumerate(DATES[:3])}  # rows 1800–2699: chunk 5 (2500–2999) is shared
    _dated(store, data)
    spec = load_spec(_spec(tmp_path, {"path": str(store), "array": "x", "partition_by": "date"}))
    run_pipeline(spec)
    data[DATES[3]] = _rows(3, 700)
    _dated(store, {DATES[3]: data[DATES[3]]})
    dry = run_pipeline(spec, dry_run=True)
    assert dry["partitions"] == {"new": [f"data.zarr#date={DATES[3]}"], "changed": [f"data.zarr#date={DATES[2]}"],
                                 "removed": [], "unchanged": 2}
    result = run_pipeline(spec)
    assert sorted(result["added"]) == [f"data.zarr#date={d}" for d in DATES[2:]]
    assert result["removed"] == [f"data.zarr#date={DATES[2]}"] and result["rows"]["fd"] == 3 * 900 + 700
    got, ref = _oracle(tmp_path, [data[d] for d in DATES])
    assert _rel(got, ref) <= 1e-10


def test_a_date_whose_rows_changed_is_read_again_and_bad_rows_are_named_by_date(tmp_path):
    store = tmp_path / "data.zarr"
    data = {d: _rows(i, 1000) for i, d in enumerate(DATES[:3])}
    _dated(store, data)
    spec = load_spec(_spec(tmp_path, {"path": str(store), "array": "x", "partition_by": "date",
                                      "fingerprint": "content"}))
    run_pipeline(spec)
    x = zarr.open_array(str(store / "x"), mode="r+")
    x[1200] = np.nan
    with pytest.raises(SourceError, match=r"data\.zarr#date=2026-11-02 chunk 0 \(rows 1000–1499\): 1 of 500 rows"):
        run_pipeline(spec)
    x[1200] = 0.5
    result = run_pipeline(spec)
    assert result["added"] == ["data.zarr#date=2026-11-02"] == result["removed"]


@pytest.mark.parametrize("layout, chunk_file, array", [("array", "x/c/2/0", "x"), ("columns", "b/c/2", "b")])
def test_a_corrupt_zarr_chunk_is_named_by_date_array_rows_and_chunk_and_nothing_is_written(tmp_path, layout,
                                                                                          chunk_file, array):
    """A chunk file overwritten with garbage: the codec's own error names nothing; the run's names the partition
    (store and date), the array (the column, in the columns layout), the rows and the chunk, and writes nothing."""
    store = tmp_path / "data.zarr"
    _dated(store, {d: _rows(i, 1000) for i, d in enumerate(DATES[:3])}, layout)
    (store / chunk_file).write_bytes(b"not a zstd frame")  # rows 1000–1499: the second date's first chunk
    spec = load_spec(_spec(tmp_path, {"path": str(store), "partition_by": "date",
                                      **({"array": "x"} if layout == "array" else {})}))
    with pytest.raises(SourceError, match=rf"data\.zarr#date=2026-11-02: array '{array}' rows 1000–1499 \(Zarr "
                                          rf"chunk 2\) cannot be read \(.*decompression"):
        run_pipeline(spec)
    assert not (tmp_path / "models").exists() and StatsStore(tmp_path / "store.zarr").read_manifest() is None
    assert not (tmp_path / "scores").exists()


def test_a_corrupt_zarr_chunk_is_named_when_fitting_a_store(tmp_path):
    path = tmp_path / "rows.zarr"
    _zarr_array(path, _rows(0, 1500))
    (path / "x" / "c" / "1" / "0").write_bytes(b"garbage")
    with pytest.raises(SourceError, match=r"rows\.zarr: array 'x' rows 600–1199 \(Zarr chunk 1\) cannot be read"):
        GPTiltedDensity(method="fd", n_features=16, bandwidth=1.0, lam=1.0).fit(as_source(str(path), array="x"))


def _snapshot_of(tmp: Path) -> str:
    return tree_hash(tmp)


@pytest.mark.parametrize("dates, message", [
    (["2026-11-01", "2026-11-02", "2026-11-01"], r"the rows of date=2026-11-01 are not one contiguous run "
                                                  r"\(rows 0–499 and 1000–1499\)"),
    (["2026-11-02", "2026-11-01", "2026-11-03"], r"the coordinate array 'date' is not sorted: date=2026-11-01 "
                                                  r"\(rows 500–999\) follows 2026-11-02"),
])
def test_a_coordinate_out_of_order_is_refused_naming_the_store_and_the_date(tmp_path, dates, message):
    store = tmp_path / "data.zarr"
    group = zarr.open_group(str(store), mode="w")
    group.create_array("x", data=_rows(0, 1500), chunks=(500, 3))
    group.create_array("date", data=np.repeat(np.array(dates, dtype="datetime64[D]"), 500), chunks=(500,))
    spec = load_spec(_spec(tmp_path, {"path": str(store), "array": "x", "partition_by": "date"}))
    before = _snapshot_of(store)
    with pytest.raises(SourceError, match=rf"data\.zarr: {message}"):
        run_pipeline(spec)
    with pytest.raises(SourceError, match=message):
        run_pipeline(spec, dry_run=True)
    assert _snapshot_of(store) == before
    assert not (tmp_path / "models").exists() and not (tmp_path / "scores").exists()
    assert StatsStore(tmp_path / "store.zarr").read_manifest() is None


def test_partition_by_without_its_array_or_on_parquet_is_refused_in_one_sentence(tmp_path):
    store = tmp_path / "data.zarr"
    group = zarr.open_group(str(store), mode="w")
    group.create_array("x", data=_rows(0, 600), chunks=(300, 3))
    spec = load_spec(_spec(tmp_path, {"path": str(store), "array": "x", "partition_by": "day"}))
    with pytest.raises(SourceError) as err:
        run_pipeline(spec)
    assert str(err.value) == (f"{store}: partition_by names the coordinate array 'day', but the Zarr store has no "
                              f"such array (it has ['x']); name the 1-D array that labels the rows")
    assert StatsStore(tmp_path / "store.zarr").read_manifest() is None and not (tmp_path / "models").exists()
    _project(tmp_path, [0])
    parquet = load_spec(_spec(tmp_path, {"path": str(tmp_path / "data" / "*.parquet"), "partition_by": "date"}))
    with pytest.raises(SourceError, match=r"p000\.parquet: is a Parquet file, and source\.partition_by \('date'\) "
                                          r"splits a Zarr store by its coordinate array"):
        run_pipeline(parquet)


def test_a_date_dimension_written_by_xarray_is_keyed_by_its_dates(tmp_path):
    """xarray writes a datetime64 coordinate as CF counts ("days since …"), and ``append_dim`` appends in the same
    units: the partitions are keyed by the dates, not the counts, and the incremental refit equals a full one."""
    import xarray as xr

    store = tmp_path / "data.zarr"
    data = {d: _rows(i, 1000) for i, d in enumerate(DATES)}

    def write(dates: list[str], **kwargs) -> None:
        rows = np.concatenate([data[d] for d in dates])
        days = np.concatenate([np.full(len(data[d]), d, dtype="datetime64[ns]") for d in dates])
        ds = xr.Dataset({n: ("date", rows[:, j]) for j, n in enumerate("abc")}, coords={"date": days})
        ds.to_zarr(store, consolidated=False, **kwargs)

    write(DATES[:3], mode="w", encoding={n: {"chunks": (500,)} for n in ("a", "b", "c", "date")})
    assert zarr.open_group(str(store), mode="r")["date"].attrs["units"].startswith("days since")
    spec = load_spec(_spec(tmp_path, {"path": str(store), "partition_by": "date"}))
    assert run_pipeline(spec)["added"] == [f"data.zarr#date={d}" for d in DATES[:3]]
    write(DATES[3:], append_dim="date")
    second = run_pipeline(spec)
    assert second["added"] == [f"data.zarr#date={DATES[3]}"] and second["removed"] == []
    got, ref = _oracle(tmp_path, [data[d] for d in DATES])
    assert _rel(got, ref) <= 1e-10
    assert sorted(p.name for p in (tmp_path / "scores").iterdir()) == [f"data#date={d}.parquet" for d in DATES]
