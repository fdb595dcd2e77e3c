"""A published model means what the pipeline meant (issue 39): a spec with preprocessing, bounds and filters on
lognormal and gamma columns; its model loaded in Python and through the CLI takes raw rows and gives the
pipeline's scores, samples in the data's units; rows dropped are counted and too many fail the run; a partition
flagged far beyond its threshold quantile is warned about; a version written before models carried their
standardization is read with the run's preprocessing."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml
from click.testing import CliRunner

import tgpflow
from tgpflow.cli import main
from tgpflow.cli.human import run_lines
from tgpflow.errors import TgpflowError
from tgpflow.pipeline.runner import run_pipeline
from tgpflow.pipeline.spec import load_spec
from tgpflow.pipeline.store import StatsStore
from tgpflow.pipeline.versions import ModelVersions

from conftest import write_parquet

COLUMNS = ["latency_ms", "bytes_in", "n_requests"]


def _day(path: Path, seed: int, n: int = 2000, shift: float = 1.0, nan_rows: int = 0) -> pd.DataFrame:
    """One day of events: lognormal latency (ms), gamma bytes, integer request counts (some 0: filtered out)."""
    rng = np.random.default_rng(seed)
    X = np.c_[rng.lognormal(5.0, 0.5, n) * shift, rng.gamma(3.0, 400.0, n), rng.poisson(3.0, n)]
    X[:nan_rows, 0] = np.nan
    path.parent.mkdir(parents=True, exist_ok=True)
    frame = pd.DataFrame(X, columns=COLUMNS).assign(id=[f"{path.stem}-{i}" for i in range(n)])
    pq.write_table(pa.Table.from_pandas(frame, preserve_index=False), path, row_group_size=700)
    return frame


def _spec(tmp: Path, **over) -> Path:
    raw = {"name": "events", "source": {"path": str(tmp / "data" / "*.parquet"), "columns": COLUMNS[:2],
                                        "filters": [["n_requests", ">", 0]], "on_bad_rows": "raise"},
           "preprocess": {"center": True, "scale": True},
           "models": [{"name": "density", "estimator": "GPTiltedDensity",
                       "params": {"method": "fd", "n_features": 64, "lam": 1.0, "bandwidth": 1.0,
                                  "bounds": {"latency_ms": [0, None], "bytes_in": [0, None]}}}],
           "outputs": {"store": str(tmp / "store.zarr"), "models": str(tmp / "models"),
                       "scores": {"path": str(tmp / "scores"), "model": "density", "threshold_quantile": 0.01,
                                  "keep_columns": ["id", "n_requests"]}}}
    for key, value in over.items():
        raw[key] = {**raw[key], **value} if isinstance(value, dict) else value
    path = tmp / "spec.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def _kept(frame: pd.DataFrame) -> pd.DataFrame:
    return frame[frame.n_requests > 0][COLUMNS[:2]].reset_index(drop=True)


def _read(path: Path) -> pd.DataFrame:
    return pq.read_table(path).to_pandas()


def test_the_published_model_takes_raw_rows_everywhere(tmp_path):
    """Bounds in the data's units (every raw value > 0; most standardized ones < 0) under on_bad_rows: raise: the
    run succeeds and drops nothing; the loaded model, `tgpflow score` and the pipeline's scores agree to 1e-9;
    `tgpflow sample` writes rows in the data's units; the report's sliced KS is small; `info` names the scaling."""
    days = {f"d{k}": _day(tmp_path / "data" / f"d{k}.parquet", k) for k in range(3)}
    result = run_pipeline(load_spec(_spec(tmp_path)))
    assert result["rows_dropped"] == {"density": 0}
    kept = _kept(days["d0"])
    assert (kept.latency_ms > 0).all() and ((kept.latency_ms - kept.latency_ms.mean()) < 0).mean() > 0.5
    pipeline = _read(tmp_path / "scores" / "d0.parquet")
    assert len(pipeline) == len(kept)
    # each score joins back: its row in the partition (filtered rows have none) and the kept columns
    positions = np.flatnonzero(days["d0"].n_requests > 0)
    assert list(pipeline.columns[:3]) == ["row", "id", "n_requests"]
    np.testing.assert_array_equal(pipeline["row"], positions)
    assert pipeline["id"].tolist() == days["d0"].id.iloc[positions].tolist()
    assert (pipeline["n_requests"] > 0).all()
    est = tgpflow.load(tmp_path / "models" / "density")
    np.testing.assert_allclose(est.log_density(kept, normalized=True), pipeline["log_density"], rtol=1e-9)
    assert est.bounds_.to_dict() == {"latency_ms": [0.0, None], "bytes_in": [0.0, None]}

    runner = CliRunner()
    write_parquet(tmp_path / "kept.parquet", kept.to_numpy(), COLUMNS[:2])
    r = runner.invoke(main, ["--json", "score", str(tmp_path / "models" / "density"), str(tmp_path / "kept.parquet"),
                             "--out", str(tmp_path / "cli-scores"), "--progress", "none"])
    assert r.exit_code == 1 and "has no column 'n_requests'" in r.output and "--no-filters" in r.output
    r = runner.invoke(main, ["--json", "score", str(tmp_path / "models" / "density"), str(tmp_path / "kept.parquet"),
                             "--no-filters", "--out", str(tmp_path / "cli-scores"), "--progress", "none"])
    assert r.exit_code == 0, r.output
    cli = pd.read_parquet(tmp_path / "cli-scores")
    np.testing.assert_allclose(cli["log_density"], pipeline["log_density"], rtol=1e-9)
    np.testing.assert_array_equal(cli["anomaly"], pipeline["anomaly"])
    # the partition itself: the model directory's version applies the spec's filters, as the pipeline did, so
    # the file is the pipeline's own, ids and positions included
    r = runner.invoke(main, ["--json", "score", str(tmp_path / "models" / "density"),
                             str(tmp_path / "data" / "d0.parquet"),
                             "--keep-columns", "id,n_requests", "--out", str(tmp_path / "day-scores"),
                             "--progress", "none"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["filters"] == [["n_requests", ">", 0]]
    day = pd.read_parquet(tmp_path / "day-scores")
    pd.testing.assert_frame_equal(day, pipeline, check_exact=False, rtol=1e-9)
    r = runner.invoke(main, ["--json", "score", str(tmp_path / "models" / "density"),
                             str(tmp_path / "data" / "d0.parquet"),
                             "--no-filters", "--out", str(tmp_path / "every-row"), "--progress", "none"])
    assert r.exit_code == 0, r.output
    assert len(pd.read_parquet(tmp_path / "every-row")) == len(days["d0"])

    r = runner.invoke(main, ["--json", "sample", str(tmp_path / "models" / "density"), "-n", "4000",
                             "--out", str(tmp_path / "s.parquet")])
    assert r.exit_code == 0, r.output
    samples = pd.read_parquet(tmp_path / "s.parquet")
    rows = pd.concat([_kept(d) for d in days.values()])
    assert (samples > 0).all().all()  # in the data's units, inside the bounds
    np.testing.assert_allclose(samples.median(), rows.median(), rtol=0.1)

    r = runner.invoke(main, ["--json", "report", str(tmp_path / "models" / "density"), str(tmp_path / "kept.parquet"),
                             "--out", str(tmp_path / "report")])
    assert r.exit_code == 0, r.output
    metrics = json.loads((tmp_path / "report" / "metrics.json").read_text())
    assert metrics["sliced"]["ks_median"] < 0.1

    info = json.loads(runner.invoke(main, ["--json", "info", str(tmp_path / "models" / "density")]).stdout)
    pre = StatsStore(tmp_path / "store.zarr").read_manifest()["preprocess"]
    assert info["preprocessing"]["standardized"] and info["preprocessing"]["scale"] == pre["scale"]


def test_too_many_dropped_rows_fail_the_run_and_are_counted(tmp_path):
    _day(tmp_path / "data" / "d0.parquet", 0)
    _day(tmp_path / "data" / "d1.parquet", 1, nan_rows=100)  # 5 % of the day's rows (4.9 % of those kept)
    spec = _spec(tmp_path, source={"on_bad_rows": "drop"})
    with pytest.raises(TgpflowError, match=r"d1\.parquet: model 'density' would drop \d+ of its \d+ rows .*"
                                           r"max_dropped_fraction = 0\.01.*column 'latency_ms'"):
        run_pipeline(load_spec(spec))
    assert StatsStore(tmp_path / "store.zarr").read_manifest() is None  # nothing committed
    result = run_pipeline(load_spec(spec, overrides=["source.max_dropped_fraction=0.1"]))
    frame = pd.read_parquet(tmp_path / "data" / "d1.parquet")
    nan_kept = int(((frame.n_requests > 0) & frame.latency_ms.isna()).sum())
    assert result["rows_dropped"] == {"density": nan_kept}
    assert f"({nan_kept} bad rows dropped: source.on_bad_rows)" in "\n".join(run_lines(result))  # said in the summary
    manifest = StatsStore(tmp_path / "store.zarr").read_manifest()
    assert manifest["partitions"]["d1.parquet"]["rows_dropped"] == {"density": nan_kept}


def test_a_bad_partition_names_the_spec_key_that_drops_its_rows(tmp_path):
    """A run reads data through its spec: the error of a partition with missing values names the spec's key (the
    `tgpflow run` command has no --on-bad-rows), and nothing is committed."""
    _day(tmp_path / "data" / "d0.parquet", 0, nan_rows=3)
    with pytest.raises(TgpflowError, match=r"d0\.parquet row group 0: 3 of \d+ rows .*column 'latency_ms': 3.*"
                                           r"a pipeline spec: source\.on_bad_rows: drop"):
        run_pipeline(load_spec(_spec(tmp_path)))
    assert StatsStore(tmp_path / "store.zarr").read_manifest() is None


def test_a_partition_flagged_far_beyond_its_quantile_is_warned_about(tmp_path):
    for k in range(3):
        _day(tmp_path / "data" / f"d{k}.parquet", k)
    spec = load_spec(_spec(tmp_path))
    assert run_pipeline(spec)["warnings"] == []
    _day(tmp_path / "data" / "d3.parquet", 3, shift=4.0)  # latencies four times longer
    result = run_pipeline(spec)
    # scored by the version fitted before the day (scores.version: previous, the default), which has not seen it
    assert result["scored_with"] == {"model": "density", "version": "v000001", "scored_with": "previous"}
    assert len(result["warnings"]) == 2 and result["warnings"][0].startswith("d3.parquet: ")
    # and the drift verdict names the column that moved (the other columns of _day did not)
    assert result["warnings"][1].startswith("partition d3.parquet drifted") and "latency_ms" in result["warnings"][1]
    assert result["drift"]["d3.parquet"]["drifted"] and result["drift"]["d3.parquet"]["moved_most"] == "latency_ms"
    flagged = _read(tmp_path / "scores" / "d3.parquet")["anomaly"].mean()
    assert f"{flagged:.2%} of its" in result["warnings"][0] and flagged > 0.05
    # scored by the version fitted on it, the day looks less anomalous
    _day(tmp_path / "data" / "d4.parquet", 4, shift=4.0)
    current = run_pipeline(load_spec(_spec(tmp_path), overrides=["outputs.scores.version=current"]))
    assert current["scored_with"]["version"] == "v000003"
    assert _read(tmp_path / "scores" / "d4.parquet")["anomaly"].mean() < flagged


def test_a_version_written_before_models_carried_their_scaling_reads_raw_rows(tmp_path):
    """Such a version was fitted to the pipeline's preprocessed rows, with its bounds and support box in those
    units; loaded from the model directory it gets the run's preprocessing and takes raw rows."""
    rng = np.random.default_rng(0)
    raw = pd.DataFrame({"a": rng.lognormal(3, 0.5, 3000), "b": rng.normal(50, 10, 3000)})
    pre = {"center": raw.mean().tolist(), "scale": raw.std(ddof=0).tolist()}
    z = (raw - pre["center"]) / np.asarray(pre["scale"])
    zero = (0 - pre["center"][0]) / pre["scale"][0]
    old = tgpflow.GPTiltedDensity(method="fd", n_features=32, lam=1.0, bandwidth=1.0,
                                  bounds={"a": [zero, None]}).fit(z)
    vers = ModelVersions(tmp_path / "models" / "density")
    name = vers.write(old)
    vers.publish(name, {"run": 1, "preprocess": pre, "columns": ["a", "b"], "anomaly_threshold": 9.5,
                        "threshold_of": "anomaly_score"})
    loaded = vers.load()
    assert loaded.anomaly_threshold_ == 9.5  # the run's, learned on raw rows (the model's own was on standardized)
    expected = old.log_density(z.iloc[:20]) - np.log(pre["scale"]).sum()
    np.testing.assert_allclose(loaded.log_density(raw.iloc[:20]), expected, rtol=1e-12)
    assert loaded.bounds_.to_dict()["a"][0] == pytest.approx(0.0, abs=1e-12)
    np.testing.assert_allclose(loaded.support_.lower, old.support_.lower * pre["scale"] + pre["center"], rtol=1e-12)


def test_validate_and_dry_run_check_columns_and_bounds_against_the_newest_footer(tmp_path):
    runner = CliRunner()
    spec = _spec(tmp_path)
    r = runner.invoke(main, ["--json", "validate", str(spec)])  # no partition yet: a new deployment validates first
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["source"]["checked"] is None
    _day(tmp_path / "data" / "d0.parquet", 0)
    r = runner.invoke(main, ["--json", "validate", str(spec)])
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["source"] == {"checked": "d0.parquet", "format": "parquet",
                                              "columns": ["latency_ms", "bytes_in"], "warnings": []}
    misspelt = _spec(tmp_path, source={"columns": ["latency", "bytes_in"]})
    for command in (["validate", str(misspelt)], ["run", str(misspelt), "--dry-run"]):
        r = runner.invoke(main, command)
        assert r.exit_code == 1, r.output
        assert ("missing column(s) ['latency'] ('latency_ms' is close: misspelt in the selection, or renamed in the "
                "file?)") in r.output, r.output
    outputs = {"store": str(tmp_path / "store.zarr"), "models": str(tmp_path / "models"),
               "scores": {"path": "s", "keep_columns": ["idd"]}}
    r = runner.invoke(main, ["--json", "validate", str(_spec(tmp_path, outputs=outputs))])
    assert r.exit_code == 1
    assert "keep_columns names column 'idd', which it does not have; did you mean 'id'?" in r.output
    # a bound the footer's minimum crosses: refused under raise without filters, a warning under drop
    crossing = {"name": "density", "estimator": "GPTiltedDensity", "params": {"bounds": {"bytes_in": [500, None]}}}
    r = runner.invoke(main, ["--json", "validate", str(_spec(tmp_path, models=[crossing], source={"filters": None}))])
    assert r.exit_code == 1 and "column 'bytes_in' crosses model 'density''s bounds (its minimum" in r.output
    r = runner.invoke(main, ["--json", "validate", str(_spec(tmp_path, models=[crossing],
                             source={"on_bad_rows": "drop"}))])
    assert r.exit_code == 0 and "will be dropped and counted" in json.loads(r.stdout)["source"]["warnings"][0]


def _empty_day(path: Path) -> None:
    pq.write_table(pa.table({c: pa.array([], pa.float64()) for c in COLUMNS}).append_column(
        "id", pa.array([], pa.string())), path)


def test_an_empty_day_and_a_half_written_file_do_not_stop_the_pipeline(tmp_path):
    """An empty partition is committed with 0 rows; a file with no footer yet is left out with a warning and
    read once complete; one that stays unreadable is refused by name after source.max_retries runs."""
    for k in range(2):
        _day(tmp_path / "data" / f"d{k}.parquet", k)
    _empty_day(tmp_path / "data" / "d2.parquet")
    whole = tmp_path / "whole.parquet"
    _day(whole, 3)
    (tmp_path / "data" / "d3.parquet").write_bytes(whole.read_bytes()[:5000])  # still being written
    spec = load_spec(_spec(tmp_path))
    first = run_pipeline(spec)
    assert first["empty"] == ["d2.parquet"] and list(first["held_back"]) == ["d3.parquet"]
    assert "d3.parquet: left out of this run (not readable yet, run 1 of 3" in first["warnings"][0]
    assert sorted(Path(p).name for p in first["scored"]) == ["d0.parquet", "d1.parquet"]
    manifest = StatsStore(tmp_path / "store.zarr").read_manifest()
    empty = manifest["partitions"]["d2.parquet"]
    assert empty["rows"] == 0 and empty["stats"] == {} and empty["empty"]
    (tmp_path / "data" / "d3.parquet").write_bytes(whole.read_bytes())  # the writer finished
    second = run_pipeline(spec)
    assert second["added"] == ["d3.parquet"] and second["held_back"] == {}
    committed = StatsStore(tmp_path / "store.zarr").read_manifest()["partitions"]
    assert second["rows"]["density"] == sum(p["rows"] for p in committed.values())
    # the refit equals a full rebuild of the same partitions (the empty one adds nothing)
    full = run_pipeline(load_spec(_spec(tmp_path), overrides=["refit.policy=full"]))
    assert full["rows"] == second["rows"]
    (tmp_path / "data" / "d4.parquet").write_bytes(b"not parquet at all")
    for run in (1, 2):
        assert "not readable yet, run %d of 2" % run in run_pipeline(load_spec(
            _spec(tmp_path), overrides=["source.max_retries=2"]))["held_back"]["d4.parquet"]
    with pytest.raises(TgpflowError, match=r"d4\.parquet: still unreadable after 2 runs \(source.max_retries = 2\)"):
        run_pipeline(load_spec(_spec(tmp_path), overrides=["source.max_retries=2"]))


def test_settling_files_and_missing_markers_wait_for_a_later_run(tmp_path):
    import os

    _day(tmp_path / "data" / "d0.parquet", 0)
    (tmp_path / "data" / "_SUCCESS").write_text("")
    fresh = tmp_path / "data" / "d1.parquet"
    _day(fresh, 1)
    old = fresh.stat().st_mtime - 3600
    os.utime(tmp_path / "data" / "d0.parquet", (old, old))
    first = run_pipeline(load_spec(_spec(tmp_path, source={"settle_seconds": 600})))
    assert first["added"] == ["d0.parquet"] and "settle_seconds" in first["held_back"]["d1.parquet"]
    os.utime(fresh, (old, old))
    second = run_pipeline(load_spec(_spec(tmp_path, source={"settle_seconds": 600})))
    assert second["added"] == ["d1.parquet"]
    # a marker per directory: the day directory without it waits
    (tmp_path / "data" / "day=2").mkdir()
    _day(tmp_path / "data" / "day=2" / "part-0.parquet", 2)
    spec = _spec(tmp_path, source={"path": str(tmp_path / "data" / "**" / "*.parquet"), "marker": "_SUCCESS"})
    dry = run_pipeline(load_spec(spec), dry_run=True)
    assert "day=2/part-0.parquet" in dry["held_back"]


@pytest.mark.parametrize("name", ["nightly", "demo"])
def test_the_example_specs_validate(name):
    spec = load_spec(Path(__file__).resolve().parents[1] / "pipelines" / f"{name}.yaml")
    assert spec.outputs.scores.version == "previous" and spec.source.max_dropped_fraction == 0.01


# -- what the review of the change found -----------------------------------------------------------------------

def test_a_store_whose_bounds_were_standardized_is_refused_until_rebuilt(tmp_path):
    """A store built when bounds were applied after the preprocessing holds statistics of another transform: it is
    not extended (that mixed the two transforms: 3 nats/row off), the run asks for one rebuild."""
    for k in range(2):
        _day(tmp_path / "data" / f"d{k}.parquet", k)
    run_pipeline(load_spec(_spec(tmp_path)))
    store = StatsStore(tmp_path / "store.zarr")
    manifest = store.read_manifest()
    del manifest["bounds_in"]  # as that release wrote it
    store.write_manifest(manifest)
    _day(tmp_path / "data" / "d2.parquet", 2)
    with pytest.raises(TgpflowError, match="rebuild once with --set refit.policy=full"):
        run_pipeline(load_spec(_spec(tmp_path)))
    assert run_pipeline(load_spec(_spec(tmp_path), overrides=["refit.policy=full"]))["changed"]


def test_the_previous_version_scores_with_its_own_columns(tmp_path):
    for k in range(2):
        _day(tmp_path / "data" / f"d{k}.parquet", k)
    run_pipeline(load_spec(_spec(tmp_path)))
    v1 = tgpflow.load(tmp_path / "models" / "density")
    _day(tmp_path / "data" / "d2.parquet", 2)
    swapped = _spec(tmp_path, source={"columns": ["bytes_in", "latency_ms"]})
    result = run_pipeline(load_spec(swapped, overrides=["refit.policy=full"]))
    assert result["scored_with"]["version"] == "v000001"
    scores = _read(tmp_path / "scores" / "d2.parquet")
    rows = _kept(pd.read_parquet(tmp_path / "data" / "d2.parquet"))
    np.testing.assert_allclose(scores["log_density"], v1.log_density(rows, normalized=True), rtol=1e-12)


def test_a_committed_partition_being_rewritten_keeps_its_statistics_meanwhile(tmp_path):
    import os

    days = [_day(tmp_path / "data" / f"d{k}.parquet", k) for k in range(2)]
    old = (tmp_path / "data" / "d0.parquet").stat().st_mtime - 3600
    for k in range(2):
        os.utime(tmp_path / "data" / f"d{k}.parquet", (old, old))
    spec = load_spec(_spec(tmp_path, source={"settle_seconds": 600}))
    first = run_pipeline(spec)
    assert first["rows"]["density"] == len(_kept(days[0])) + len(_kept(days[1]))
    rewritten = _day(tmp_path / "data" / "d1.parquet", 11, n=1500)  # rewritten just now
    second = run_pipeline(spec)
    assert not second["changed"] and "settle_seconds" in second["held_back"]["d1.parquet"]
    assert StatsStore(tmp_path / "store.zarr").read_manifest()["partitions"].keys() == {"d0.parquet", "d1.parquet"}
    os.utime(tmp_path / "data" / "d1.parquet", (old, old))
    third = run_pipeline(spec)
    assert third["added"] == ["d1.parquet"] and third["removed"] == ["d1.parquet"]
    assert third["rows"]["density"] == len(_kept(days[0])) + len(_kept(rewritten))


def test_a_first_run_with_nothing_ready_says_so_and_validate_passes_over_an_empty_newest_day(tmp_path):
    _day(tmp_path / "data" / "d0.parquet", 0)
    result = run_pipeline(load_spec(_spec(tmp_path, source={"settle_seconds": 600})))
    assert not result["changed"] and result["message"].startswith("no partition is ready")
    assert StatsStore(tmp_path / "store.zarr").read_manifest() is None
    _empty_day(tmp_path / "data" / "d1.parquet")
    r = CliRunner().invoke(main, ["--json", "validate", str(_spec(tmp_path))])
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["source"]["checked"] == "d0.parquet"
    # a path that matches nothing (a typo, or data not there yet) is valid, and says why nothing was checked
    typo = yaml.safe_load(_spec(tmp_path).read_text())
    typo["source"]["path"] = str(tmp_path / "dta" / "*.parquet")
    (tmp_path / "typo.yaml").write_text(yaml.safe_dump(typo))
    r = CliRunner().invoke(main, ["validate", str(tmp_path / "typo.yaml")])
    assert r.exit_code == 0, r.output
    assert "source: not checked: " in r.stdout and "dta" in r.stdout and "source.path" in r.stdout


def test_tgpflow_score_numbers_the_rows_of_a_zarr_store_without_the_suffix(tmp_path):
    import zarr

    rng = np.random.default_rng(0)
    X = rng.normal(size=(500, 2))
    est = tgpflow.GPTiltedDensity(method="fd", n_features=32, lam=1.0, bandwidth=1.0).fit(X)
    est.save(tmp_path / "m.zarr")
    store = zarr.create_array(str(tmp_path / "xstore"), shape=X.shape, chunks=(200, 2), dtype="f8")
    store[:] = X
    r = CliRunner().invoke(main, ["--json", "score", str(tmp_path / "m.zarr"), str(tmp_path / "xstore"), "--out",
                                  str(tmp_path / "s"), "--progress", "none"])
    assert r.exit_code == 0, r.output
    scores = pd.read_parquet(tmp_path / "s")
    np.testing.assert_array_equal(scores["row"], np.arange(500))
    np.testing.assert_allclose(scores["log_density"], est.log_density(X, normalized=True), rtol=1e-12)


def test_what_a_new_user_got_wrong_is_said_plainly(tmp_path):
    """Expected pipeline errors are one sentence (not "internal error"); a spec that changes the store's columns or a
    model's parameter is refused naming what changed; keep_columns a scores file cannot hold are refused by
    validate; the version that scored a day rescores it exactly, filters included."""
    for k in range(2):
        _day(tmp_path / "data" / f"d{k}.parquet", k)
    runner = CliRunner()
    assert runner.invoke(main, ["--json", "run", str(_spec(tmp_path)), "--progress", "none"]).exit_code == 0
    _day(tmp_path / "data" / "d2.parquet", 2)
    fewer = _spec(tmp_path, source={"columns": ["latency_ms"]})
    r = runner.invoke(main, ["--json", "run", str(fewer), "--progress", "none"])
    assert r.exit_code == 1 and "internal error" not in r.output
    assert "source.columns ['latency_ms'] differ from the columns the store was built with" in r.output
    other = _spec(tmp_path, models=[{"name": "density", "estimator": "GPTiltedDensity",
                                     "params": {"method": "fd", "n_features": 64, "lam": 1.0, "bandwidth": 1.0}}])
    r = runner.invoke(main, ["--json", "run", str(other), "--progress", "none"])
    assert r.exit_code == 1 and "density: bounds {'bytes_in': [0, None], 'latency_ms': [0, None]} → None" in r.output
    bad = _spec(tmp_path, outputs={"store": "s", "models": "m", "scores": {"path": "x", "keep_columns": ["row"]}})
    r = runner.invoke(main, ["--json", "validate", str(bad)])
    assert r.exit_code != 0 and "keep_columns cannot name 'row'" in r.output
    r = runner.invoke(main, ["--json", "score", str(tmp_path / "models" / "density" / "v000001.zarr"),
                             str(tmp_path / "data" / "d0.parquet"), "--keep-columns", "id,n_requests", "--out",
                             str(tmp_path / "again"), "--progress", "none"])
    assert r.exit_code == 0, r.output
    pd.testing.assert_frame_equal(pd.read_parquet(tmp_path / "again"), _read(tmp_path / "scores" / "d0.parquet"),
                                  check_exact=False, rtol=1e-12)
