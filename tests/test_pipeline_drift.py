"""A pipeline's drift verdicts and health, run by run (tgpflow.pipeline.drift_step, health), checked against the rows:
the store's reference is the binning of the kept rows, the held-out log-likelihood is the previous version's on the
new rows, and `tgpflow run --fail-on-warning/--fail-on-drift` exit 1 after committing."""

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml
from click.testing import CliRunner

from tests.conftest import TEST_DATA, write_parquet
from tests.test_drift import COLUMNS, _day
from tgpflow.cli import main
from tgpflow.pipeline.drift_step import SUMS_KIND
from tgpflow.pipeline.drift_sums import DriftFrame, DriftSums
from tgpflow.pipeline.journal import collect_pipeline
from tgpflow.pipeline.runner import run_pipeline
from tgpflow.pipeline.spec import load_spec
from tgpflow.pipeline.store import StatsStore
from tgpflow.pipeline.versions import ModelVersions


def _spec(tmp: Path, params=None, **over) -> Path:
    raw = {"name": "daily", "source": {"path": str(tmp / "data" / "*.parquet")},
           "preprocess": {"center": True, "scale": True},
           "models": [{"name": "fd", "estimator": "GPTiltedDensity",
                       "params": params or {"method": "fd", "n_features": 32, "lam": 0.1}}],
           "outputs": {"store": str(tmp / "store.zarr"), "models": str(tmp / "models"),
                       "scores": {"path": str(tmp / "scores"), "model": "fd"}}}
    raw.update(over)
    (tmp / "spec.yaml").write_text(yaml.safe_dump(raw))
    return tmp / "spec.yaml"


def _write_day(tmp: Path, t: int, rng, shift=0.0) -> np.ndarray:
    (tmp / "data").mkdir(parents=True, exist_ok=True)
    X = _day(rng, 2000, shift)
    write_parquet(tmp / "data" / f"d{t:03d}.parquet", X, COLUMNS, row_group_size=700)
    return X


def _reference(tmp: Path) -> tuple[DriftSums, DriftFrame]:
    store = StatsStore(tmp / "store.zarr")
    entry = store.read_manifest()["drift"]
    return (DriftSums.from_arrays(*store.load_arrays(entry["reference"], SUMS_KIND)),
            DriftFrame.from_arrays(*store.load_arrays(entry["frame"], "DriftFrame")))


def _binned(rows: np.ndarray, frame: DriftFrame) -> np.ndarray:
    """numpy's own binning of ``rows`` at the frame's column cuts."""
    out = []
    for j in range(rows.shape[1]):
        cuts = frame.column_cuts[j][np.isfinite(frame.column_cuts[j])]
        out.append(np.histogram(rows[:, j], np.r_[-np.inf, cuts, np.inf])[0])
    return np.array(out)


def test_a_daily_stream_flags_the_day_a_column_shifted_and_names_it(tmp_path):
    """21 daily runs: 20 stationary days, then column c shifted by 0.3 sd on day 21 (index 20)."""
    rng = np.random.default_rng(7)
    spec = load_spec(_spec(tmp_path))
    rows, results = [], []
    for t in range(21):
        rows.append(_write_day(tmp_path, t, rng, 0.3 if t == 20 else 0.0))
        results.append(run_pipeline(spec, date=f"2026-03-{t + 1:02d}"))
    assert results[0]["drift"] == {}  # the first run has no earlier rows to differ from
    stationary = [r["drift"][f"d{t:03d}.parquet"] for t, r in enumerate(results[1:20], 1)]
    assert sum(v["drifted"] for v in stationary) <= 1
    assert all(v["z"] is not None for v in stationary[1:])  # from the third run on, z has held-out history
    day21 = results[20]["drift"]["d020.parquet"]
    assert day21["drifted"] and day21["columns"][0] == "c" and day21["moved_most"] == "c"
    assert day21["column_shift"]["c"]["shift"] == pytest.approx(0.3, abs=0.1)
    assert any(line.startswith("partition d020.parquet drifted") and " c (KS" in line
               for line in results[20]["warnings"])

    # the store's reference after the last run: numpy's binning of every row kept
    reference, frame = _reference(tmp_path)
    np.testing.assert_array_equal(reference.column_counts[:, :_binned(rows[0], frame).shape[1]],
                                  _binned(np.concatenate(rows), frame))
    assert reference.rows == 21 * 2000

    # health and held-out log-likelihood: the previous version's normalised log density of the new rows, floored
    vers = ModelVersions(tmp_path / "models" / "fd")
    info = vers.info("v000021")
    assert info["drift"]["d020.parquet"]["drifted"] and info["health"] == results[20]["health"]["fd"]
    previous = vers.load("v000020")
    rows = [pd.DataFrame(r, columns=COLUMNS) for r in rows]
    values = previous.log_density(rows[20]) - previous.normalizer_.log_z  # log_density is unnormalised
    floor = vers.info("v000020")["loglik_floor"]
    heldout = info["health"]["heldout_loglik"]
    assert heldout["version"] == "v000020" and heldout["rows"] == 2000
    assert heldout["mean"] == pytest.approx(np.maximum(values, floor).mean(), rel=1e-9)
    assert info["health"]["warnings"] == [] and info["health"]["ess_fraction"] > 0.01
    assert info["health"]["pilot_loglik"] > heldout["mean"] - 0.5  # in-sample, on the same law
    assert results[20]["anomaly_rates"][0]["partition"] == "d020.parquet"
    assert results[20]["anomaly_rates"][0]["rows"] == 2000
    # every drift file the runs wrote is referenced by the manifest: nothing for gc to collect
    assert collect_pipeline(spec, dry_run=True) == []


def test_a_window_drops_the_rows_that_left_it_from_the_reference(tmp_path):
    rng = np.random.default_rng(8)
    spec = load_spec(_spec(tmp_path, refit={"policy": "window", "partitions": 3}))
    rows = []
    for t in range(5):
        rows.append(_write_day(tmp_path, t, rng))
        run_pipeline(spec, date=f"2026-03-{t + 1:02d}")
    reference, frame = _reference(tmp_path)
    kept = np.concatenate(rows[-3:])
    assert reference.rows == kept.shape[0]
    np.testing.assert_allclose(reference.column_sum, (kept - frame.center).sum(axis=0), rtol=1e-10)  # about the centre
    np.testing.assert_array_equal(reference.column_counts[:, :_binned(kept, frame).shape[1]], _binned(kept, frame))
    # a full refit re-reads every partition: those of the previous version keep their verdicts; the two that had
    # left the window are new to it, and tested
    before = StatsStore(tmp_path / "store.zarr").read_manifest()["partitions"]
    full = run_pipeline(load_spec(_spec(tmp_path, refit={"policy": "full"})), date="2026-03-06")
    after = StatsStore(tmp_path / "store.zarr").read_manifest()["partitions"]
    assert sorted(full["drift"]) == ["d000.parquet", "d001.parquet"] and sorted(before) == [f"d00{t}.parquet"
                                                                                          for t in (2, 3, 4)]
    assert all(after[f]["drift"]["verdict"] == before[f]["drift"]["verdict"] for f in before if f in after)


def _cli_run(spec: Path, *flags: str):
    return CliRunner().invoke(main, ["--json", "run", str(spec), "--progress", "none", *flags])


def _hours(tmp: Path, t: int, rng) -> None:
    """A day of integer hours and gamma loads."""
    (tmp / "data").mkdir(parents=True, exist_ok=True)
    pd.DataFrame({"hour": rng.integers(0, 24, 4000).astype(float),
                  "load": rng.gamma(3, 2, 4000)}).to_parquet(tmp / "data" / f"d{t:03d}.parquet")


@pytest.mark.filterwarnings("default::tgpflow.errors.DiagnosticWarning")  # the unhealthy fit is the point
def test_fail_on_warning_exits_1_after_committing_an_unhealthy_version(tmp_path):
    rng = np.random.default_rng(9)
    _hours(tmp_path, 0, rng)
    # a tiny fixed λ, a narrow bandwidth, the integer hours left continuous: a tilt that leaves the data
    unhealthy = {"method": "fd", "n_features": 64, "lam": 1e-7, "bandwidth": 0.3, "discrete": None}
    spec = _spec(tmp_path, unhealthy, preprocess={"center": False, "scale": False})
    result = _cli_run(spec, "--fail-on-warning")
    assert result.exit_code == 1, result.output
    assert "failing (--fail-on-warning): the fits of fd warned; the run is committed" in result.output
    summary = json.loads(next(line for line in result.output.splitlines() if line.startswith("{")))
    assert summary["health"]["fd"]["warnings"] and summary["health"]["fd"]["ess_fraction"] < 0.01
    # each of the fit's warnings said once on stderr, after the commit, naming the version (not also at fit time)
    warned = [line for line in result.output.splitlines() if line.startswith("warning:")]
    assert warned == [f"warning: daily: model fd v000001: {w}" for w in summary["health"]["fd"]["warnings"]], warned
    assert ModelVersions(tmp_path / "models" / "fd").current() == "v000001"  # committed and published
    _hours(tmp_path, 1, rng)
    assert _cli_run(spec).exit_code == 0  # without the flag a warning is said, not failed on


def test_a_versions_fit_holds_back_only_the_warnings_its_health_lists():
    """Listed warnings wait for the commit (said there, naming the version); any other passes on, and a fit that
    fails passes on all it warned of before its error."""
    import warnings

    from tgpflow.errors import DiagnosticWarning
    from tgpflow.pipeline.health import held_fit_warnings

    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        listed: list[str] = []
        with held_fit_warnings(listed):
            warnings.warn("the FD fit:  mass  outside", DiagnosticWarning)
            warnings.warn("a fallback", UserWarning)
            listed.append("the FD fit: mass outside")  # as health lists it (spaces as the CLI prints them)
        with pytest.raises(RuntimeError), held_fit_warnings([]):
            warnings.warn("the FD fit: mass outside", DiagnosticWarning)
            raise RuntimeError("the solve failed")
    assert [(str(w.message), w.category) for w in seen] == [("a fallback", UserWarning),
                                                            ("the FD fit: mass outside", DiagnosticWarning)]


def test_fail_on_drift_exits_1_after_committing_a_drifted_partition(tmp_path):
    rng = np.random.default_rng(10)
    spec = _spec(tmp_path)
    for t in range(3):
        _write_day(tmp_path, t, rng)
        assert _cli_run(spec, "--fail-on-drift").exit_code == 0
    _write_day(tmp_path, 3, rng, shift=1.0)
    result = _cli_run(spec, "--fail-on-drift")
    assert result.exit_code == 1 and "1 partition(s) drifted: d003.parquet" in result.output
    assert ModelVersions(tmp_path / "models" / "fd").current() == "v000004"


def test_info_lists_each_versions_figures_and_diff_names_the_column_that_moved(tmp_path):
    rng = np.random.default_rng(11)
    spec = _spec(tmp_path)
    for t in range(6):  # three days, then three days with column c shifted by a standard deviation
        _write_day(tmp_path, t, rng, shift=1.0 if t >= 3 else 0.0)
        assert _cli_run(spec).exit_code == 0
    runner = CliRunner()
    info = json.loads(runner.invoke(main, ["--json", "info", str(tmp_path / "models" / "fd")]).stdout)
    rows = {h["version"]: h for h in info["history"]}
    assert [h["version"] for h in info["history"]] == [f"v00000{k}" for k in range(1, 7)]
    assert rows["v000004"]["drifted"] == ["d003.parquet"] and rows["v000002"]["drifted"] == []
    assert rows["v000006"]["rows"] == 6 * 2000 and rows["v000006"]["partitions"] == 6
    assert rows["v000004"]["heldout_loglik"] == info["versions"]["v000004"]["health"]["heldout_loglik"]["mean"]
    assert rows["v000001"]["tested"] == 0 and rows["v000002"]["tested"] == 1

    models = str(tmp_path / "models" / "fd")
    out = json.loads(runner.invoke(main, ["diff", models, "v000003", "v000006", "--json"]).stdout)
    assert out["moved"][0] == "c" and out["columns"]["c"]["shift"] == pytest.approx(0.5, abs=0.1)  # half the rows
    assert out["sliced_ks"] > 3 * out["floor"]["sliced_ks"]
    assert out["partitions"] == {"added": ["d003.parquet", "d004.parquet", "d005.parquet"], "removed": []}
    same = json.loads(runner.invoke(main, ["diff", models, "v000002", "v000003", "--json"]).stdout)
    assert same["moved"] == []  # a stationary day moves no column beyond sampling noise
    human = runner.invoke(main, ["diff", str(tmp_path / "models" / "fd"), "v000003", "v000006"])
    assert human.exit_code == 0 and "v000003 → v000006: rows 6,000 → 12,000; partitions +3 −0" in human.stdout
    assert "  c: KS" in human.stdout
    bad = runner.invoke(main, ["diff", str(tmp_path / "models" / "fd"), "v000003", "v000099"])
    assert bad.exit_code != 0 and "no published version 'v000099'" in bad.output


@pytest.mark.filterwarnings("ignore::tgpflow.errors.DiagnosticWarning")  # the default fit of Thyroid's skewed, bounded
# columns leaks mass past their edges (it says so in its health); the drift verdicts are the point here
def test_real_thyroid_days_flag_the_day_the_anomalies_arrive(tmp_path):
    """ADBench's Thyroid (tests/data): its normal rows shuffled and cut into ten days, its 93 labelled anomalies
    added to day 7. Only day 7 is flagged, with a log-likelihood far below the earlier days'."""
    data = np.load(TEST_DATA / "38_thyroid.npz")
    X, y = data["X"].astype(np.float64), data["y"].astype(int)
    normal = X[y == 0][np.random.default_rng(0).permutation(int((y == 0).sum()))]
    columns = [f"x{j}" for j in range(X.shape[1])]
    # discrete=None: the first day shows age/100 on a lattice that later days leave (the run would refuse them)
    spec = load_spec(_spec(tmp_path, {"method": "fd", "n_features": 200, "discrete": None}))
    (tmp_path / "data").mkdir()
    verdicts = {}
    for t, rows in enumerate(np.array_split(normal, 10)):
        rows = np.concatenate([rows, X[y == 1]]) if t == 7 else rows
        write_parquet(tmp_path / "data" / f"d{t:03d}.parquet", rows, columns)
        verdicts[t] = run_pipeline(spec, date=f"2026-05-{t + 1:02d}")["drift"].get(f"d{t:03d}.parquet")
    assert verdicts[0] is None
    assert [t for t, v in verdicts.items() if v and v["drifted"]] == [7]
    assert verdicts[7]["z"] < -3 and verdicts[7]["anomaly_rate"] > 3 * max(v["anomaly_rate"] for t, v in
                                                                          verdicts.items() if v and t != 7)


def test_a_rebuild_with_other_statistics_parameters_starts_the_z_history_again(tmp_path):
    """Gaps compare within one generation (columns, estimator, statistics parameters): after a full refit with
    another n_features, z waits for a gap scored by a version of the new generation."""
    rng = np.random.default_rng(13)
    spec = load_spec(_spec(tmp_path))
    zs = []
    for t in range(4):
        _write_day(tmp_path, t, rng)
        zs.append(run_pipeline(spec, date=f"2026-06-{t + 1:02d}")["drift"].get(f"d{t:03d}.parquet"))
    assert zs[0] is None and zs[1]["z"] is None and zs[2]["z"] is not None and zs[3]["z"] is not None
    other = {"method": "fd", "n_features": 48, "lam": 0.1}
    _write_day(tmp_path, 4, rng)
    rebuilt = run_pipeline(load_spec(_spec(tmp_path, other, refit={"policy": "full"})), date="2026-06-05")
    assert rebuilt["drift"]["d004.parquet"]["z"] is None  # scored by the old generation's version: no history
    for t in (5, 6):
        _write_day(tmp_path, t, rng)
        zs.append(run_pipeline(load_spec(_spec(tmp_path, other)), date=f"2026-06-{t + 1:02d}")["drift"][
            f"d{t:03d}.parquet"])
    assert zs[4]["z"] is None  # its one earlier gap (d004's) was scored by a version of the old generation
    assert zs[5]["z"] is not None  # d005's gap, scored by the rebuilt version, is the new history
    records = StatsStore(tmp_path / "store.zarr").read_manifest()["partitions"]
    generations = {records[f"d00{t}.parquet"]["drift"]["loglik"]["fd"]["generation"] for t in (1, 2, 3, 4)}
    assert len(generations) == 1 and records["d005.parquet"]["drift"]["loglik"]["fd"]["generation"] not in generations
