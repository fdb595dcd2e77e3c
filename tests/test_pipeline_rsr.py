"""Root-Sobolev models in pipelines: RSR refitted on the rows of every partition kept, KDE-SDO from the store."""

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml
from click.testing import CliRunner

import tgpflow
from tgpflow import RootSobolevDensity
from tgpflow.cli import main
from tgpflow.features.sdo import SDODraw
from tgpflow.pipeline.runner import run_pipeline
from tgpflow.pipeline.spec import SpecError, load_spec
from tgpflow.pipeline.store import StatsStore
from tgpflow.pipeline.versions import ModelVersions
from tests.conftest import write_parquet
from tests.faults import run_cli

RSR = {"n_features": 64, "smoothness": 0.5, "tol": 1e-10, "max_iter": 300}
KDE = {"method": "kde_sdo", "n_features": 48}


def _partition(tmp: Path, i: int, n: int = 800) -> np.ndarray:
    (tmp / "data").mkdir(exist_ok=True)
    rng = np.random.default_rng(i)
    X = rng.normal(size=(n, 2)) @ np.array([[1.0, 0.3], [0.0, 0.5]]) + [2.0, -1.0]
    write_parquet(tmp / "data" / f"p{i:03d}.parquet", X, ["a", "b"], row_group_size=300)
    return X


def _spec(tmp: Path, **over) -> Path:
    raw = {"name": "rsr", "source": {"path": str(tmp / "data" / "*.parquet")},
           "models": [{"name": "rsr", "estimator": "RootSobolevDensity", "params": RSR},
                      {"name": "kde", "estimator": "RootSobolevDensity", "params": KDE}],
           "outputs": {"store": str(tmp / "store.zarr"), "models": str(tmp / "models"),
                       "scores": {"path": str(tmp / "scores"), "model": "rsr", "threshold_quantile": 0.05}}}
    raw.update(over)
    path = tmp / "spec.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def _frozen_draw(tmp: Path, model: str) -> SDODraw:
    store = StatsStore(tmp / "store.zarr")
    arrays, meta = store.load_draw(store.read_manifest()["models"][model]["draw"])
    return SDODraw.from_arrays(arrays, seed=meta["seed"])


def test_rsr_is_refitted_on_old_and_new_rows_and_equals_the_batch_fit(tmp_path):
    data = {i: _partition(tmp_path, i) for i in range(2)}
    spec = load_spec(_spec(tmp_path))
    first = run_pipeline(spec)
    assert first["rows"] == {"rsr": 1600, "kde": 1600}
    v1 = tgpflow.load(tmp_path / "models" / "rsr")
    # the first run froze the draw of the same seed and pilot: the version is fit() of the same files
    same_seed = RootSobolevDensity(**RSR).fit(str(tmp_path / "data" / "*.parquet"))
    assert same_seed.draw_.fingerprint == _frozen_draw(tmp_path, "rsr").fingerprint
    np.testing.assert_allclose(v1.coef_, same_seed.coef_, rtol=1e-9, atol=1e-12)
    data[2] = _partition(tmp_path, 2)
    second = run_pipeline(spec)
    assert [Path(p).stem for p in second["added"]] == ["p002"] and second["removed"] == []
    X = np.concatenate([data[i] for i in range(3)])
    draw = _frozen_draw(tmp_path, "rsr")
    v2, info = tgpflow.load(tmp_path / "models" / "rsr"), ModelVersions(tmp_path / "models" / "rsr").info()
    ref = RootSobolevDensity(**RSR).fit(X, features=draw)  # every row, old and new, from the KDE start
    np.testing.assert_allclose(v2.coef_, ref.coef_, rtol=1e-9, atol=1e-12)
    assert v2.features_ == ref.features_ and v2.n_samples_seen_ == 2400 and v2.fit_info_["converged"]
    assert info["rows"] == 2400 and [Path(p).stem for p in info["partitions"]] == ["p000", "p001", "p002"]
    # the threshold is the 95% quantile of −log p over the run's pilot rows (all 2400 here)
    frame = pd.DataFrame(X, columns=["a", "b"])
    assert info["anomaly_threshold"] == np.quantile(-v2.log_density(frame), 0.95, method="higher")
    # the new partition is scored by the version current before the run (scores.version: previous), which has
    # no normaliser (RSR): the unnormalised log density
    assert second["scored_with"] == {"model": "rsr", "version": "v000001", "scored_with": "previous"}
    scores = pd.read_parquet(tmp_path / "scores" / "p002.parquet")
    np.testing.assert_allclose(scores["log_density"], v1.log_density(frame[1600:]), rtol=1e-12)
    np.testing.assert_array_equal(scores["row"], np.arange(800))
    # KDE-SDO's statistics live in the store and add up to the fit of every row
    kde = tgpflow.load(tmp_path / "models" / "kde")
    kref = RootSobolevDensity(**KDE).fit(X, features=_frozen_draw(tmp_path, "kde"))
    np.testing.assert_allclose(kde.coef_, kref.coef_, rtol=1e-12, atol=1e-15)
    manifest = StatsStore(tmp_path / "store.zarr").read_manifest()
    assert "total" not in manifest["models"]["rsr"] and "total" in manifest["models"]["kde"]
    assert all(set(p["stats"]) == {"kde"} for p in manifest["partitions"].values())
    assert not list((tmp_path / "store.zarr" / "parts").glob("*/rsr.zarr"))
    r = CliRunner().invoke(main, ["--json", "stats", "info", str(tmp_path / "store.zarr")])
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["models"]["rsr"] == {"rows": None, "version": "v000002"}
    again = run_pipeline(spec)
    assert not again["changed"] and "nothing to do" in again["message"]


def test_a_window_refits_rsr_on_the_partitions_left_in_it(tmp_path):
    data = {i: _partition(tmp_path, i, n=500) for i in range(2)}
    spec = load_spec(_spec(tmp_path, refit={"policy": "window", "partitions": 2}))
    run_pipeline(spec)
    data[2] = _partition(tmp_path, 2, n=500)
    result = run_pipeline(spec)
    assert [Path(p).stem for p in result["removed"]] == ["p000"]
    v2 = tgpflow.load(tmp_path / "models" / "rsr")
    ref = RootSobolevDensity(**RSR).fit(np.concatenate([data[1], data[2]]),
                                                features=_frozen_draw(tmp_path, "rsr"))
    np.testing.assert_allclose(v2.coef_, ref.coef_, rtol=1e-9, atol=1e-12)
    assert v2.n_samples_seen_ == 1000


def test_forgetting_is_refused_for_rsr_and_accepted_for_kde_sdo(tmp_path):
    with pytest.raises(SpecError, match=r"'forgetting' down-weights stored statistics, and \['rsr'\] have none.*"
                                        r"'window'.*kde_sdo"):
        load_spec(_spec(tmp_path, refit={"policy": "forgetting", "factor": 0.5}))
    kde_only = _spec(tmp_path, refit={"policy": "forgetting", "factor": 0.5},
                     models=[{"name": "kde", "estimator": "RootSobolevDensity", "params": KDE}],
                     outputs={"store": str(tmp_path / "s"), "models": str(tmp_path / "m")})
    assert load_spec(kde_only).models[0].refits_from_rows() is False
    assert load_spec(_spec(tmp_path)).models[0].refits_from_rows() is True  # method "rsr" by default


def test_the_cli_validates_and_runs_an_rsr_spec_and_a_killed_run_commits_nothing(tmp_path):
    data = {i: _partition(tmp_path, i, n=400) for i in range(2)}
    path = str(_spec(tmp_path, models=[{"name": "rsr", "estimator": "RootSobolevDensity", "params": RSR}]))
    r = CliRunner().invoke(main, ["--json", "validate", path])
    assert r.exit_code == 0 and json.loads(r.stdout)["models"] == ["rsr"], r.output
    r = CliRunner().invoke(main, ["--json", "run", path, "--progress", "none"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["rows"] == {"rsr": 800}
    data[2] = _partition(tmp_path, 2, n=400)
    run = ["run", path, "--progress", "none"]
    assert run_cli(run, tmp_path, kill="manifest.json").killed  # after the refit, before the commit
    assert StatsStore(tmp_path / "store.zarr").read_manifest()["run"] == 1
    assert ModelVersions(tmp_path / "models" / "rsr").list() == ["v000001"]
    done = run_cli(run, tmp_path)
    assert done.code == 0, done.stderr
    assert json.loads(done.stdout)["versions"] == {"rsr": "v000002"}  # the orphan was collected, not published
    ref = RootSobolevDensity(**RSR).fit(np.concatenate([data[i] for i in range(3)]),
                                                features=_frozen_draw(tmp_path, "rsr"))
    np.testing.assert_allclose(tgpflow.load(tmp_path / "models" / "rsr").coef_, ref.coef_, rtol=1e-9, atol=1e-12)
