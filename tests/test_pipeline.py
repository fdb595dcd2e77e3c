"""Pipelines: specs, the statistics store (incremental/window/forgetting refits), versions, scoring, faults."""

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml
from click.testing import CliRunner

import tgpflow
from tests.conftest import write_parquet
from tests.faults import run_cli
from tests.oracles import tree_hash
from tgpflow.cli import main
from tgpflow.pipeline.runner import run_pipeline
from tgpflow.pipeline.spec import PipelineSpec, SpecError, load_spec
from tgpflow.pipeline.store import StatsStore
from tgpflow.pipeline.versions import ModelVersions


def _partition(path: Path, seed: int, n: int = 1500) -> np.ndarray:
    X = np.random.default_rng(seed).normal(size=(n, 3)) * [1.0, 2.0, 0.5] + [3.0, -1.0, 0.0]
    write_parquet(path, X, ["a", "b", "c"], row_group_size=600)
    return X


def _spec(tmp: Path, **over) -> Path:
    raw = {"name": "t", "source": {"path": str(tmp / "data" / "*.parquet")},
           "preprocess": {"center": True, "scale": True},
           "models": [{"name": "fd", "estimator": "GPTiltedDensity", "params": {"method": "fd", "n_features": 48, "lam": 0.1}},
                      {"name": "kef", "estimator": "NystromKEF", "params": {"n_basis": 12, "base": "gaussian"}}],
           "outputs": {"store": str(tmp / "store.zarr"), "models": str(tmp / "models"),
                       "scores": {"path": str(tmp / "scores"), "model": "fd", "threshold_quantile": 0.05}},
           "refit": {"policy": "incremental"}}
    raw.update(over)
    path = tmp / "spec.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def _data(tmp: Path, seeds) -> dict[str, np.ndarray]:
    (tmp / "data").mkdir(exist_ok=True)
    return {f"p{s:03d}": _partition(tmp / "data" / f"p{s:03d}.parquet", s) for s in seeds}


def _oracle(tmp: Path, parts: list[np.ndarray], model: str = "fd"):
    """A full fit over the given partitions' rows with the store's frozen preprocessing and draw."""
    est = tgpflow.load(tmp / "models" / model)
    manifest = StatsStore(tmp / "store.zarr").read_manifest()
    pre = manifest["preprocess"]
    X = (np.concatenate(parts) - pre["center"]) / np.asarray(pre["scale"])
    if model == "fd":
        ref = tgpflow.GPTiltedDensity(method="fd", n_features=48, lam=0.1).fit(X, features=est.features_)
        return est.theta_, ref.theta_
    ref = tgpflow.NystromKEF(n_basis=12, base="gaussian").fit(X, basis=est.basis_)
    return est.beta_, ref.beta_


def _rel(a, b):
    return np.linalg.norm(a - b) / np.linalg.norm(b)


def test_incremental_refit_equals_a_full_refit_and_a_rerun_changes_nothing(tmp_path):
    data = _data(tmp_path, range(3))
    spec = load_spec(_spec(tmp_path))
    first = run_pipeline(spec)
    assert first["changed"] and len(first["added"]) == 3
    data.update(_data(tmp_path, [3, 4]))
    second = run_pipeline(spec)
    assert sorted(Path(p).stem for p in second["added"]) == ["p003", "p004"] and second["removed"] == []
    for model in ("fd", "kef"):
        got, ref = _oracle(tmp_path, [data[k] for k in sorted(data)], model)
        assert _rel(got, ref) <= 1e-10
    again = run_pipeline(spec)
    assert not again["changed"] and "nothing to do" in again["message"]
    assert ModelVersions(tmp_path / "models" / "fd").list() == ["v000001", "v000002"]
    assert ModelVersions(tmp_path / "models" / "fd").current() == "v000002"


def test_default_selection_reselects_from_the_stores_held_out_parts(tmp_path):
    """Default params (λ and γ selected) and a bounded column: the store keeps each partition's train
    and held-out parts, a run re-selects λ from the running totals, and the final model is the solve
    of every stored row at the chosen λ — the same as a direct fit of all rows with that λ and draw."""
    data = _data(tmp_path, range(3))
    models = [{"name": "fd", "estimator": "GPTiltedDensity",
               "params": {"method": "fd", "n_features": 32, "bounds": {"c": [-10.0, None]}, "base": "empirical"}}]
    spec = load_spec(_spec(tmp_path, models=models, preprocess={"center": False, "scale": False}))
    run_pipeline(spec)
    data.update(_data(tmp_path, [3, 4]))
    run_pipeline(spec)
    est = tgpflow.load(tmp_path / "models" / "fd")
    curve = est.selection_["curve"]
    assert len(curve) == 22 and est.selection_["n_validation"] + est.selection_["n_train"] == 5 * 1500
    chosen = est.selection_["chosen"]
    trusted = [r for r in curve if r["ess_fraction"] >= 0.01]
    best = min(trusted, key=lambda r: r["sliced_ks"])
    tied = [r for r in trusted if r["sliced_ks"] <= best["sliced_ks"] + best["sliced_ks_noise"]]
    assert chosen["loglik"] == max(r["loglik"] for r in tied)
    X = pd.DataFrame(np.concatenate([data[k] for k in sorted(data)]), columns=["a", "b", "c"])
    ref = tgpflow.GPTiltedDensity(method="fd", n_features=32, lam=est.lam_, bounds={"c": [-10.0, None]}).fit(
        X, features=est.features_)
    # the store sums train and held-out parts: another summation order than one pass, hence the atol
    np.testing.assert_allclose(est.theta_, ref.theta_, rtol=1e-9, atol=1e-9 * np.abs(ref.theta_).max())
    assert est.bounds_.to_dict() == {"c": [-10.0, None]} and est.fit_diagnostics_["warnings"] == []


def test_changed_partition_is_detected_and_replaced(tmp_path):
    data = _data(tmp_path, range(3))
    spec = load_spec(_spec(tmp_path))
    run_pipeline(spec)
    time.sleep(0.01)
    data["p001"] = _partition(tmp_path / "data" / "p001.parquet", 99, n=1700)
    result = run_pipeline(spec)
    assert [Path(p).stem for p in result["added"]] == ["p001"] and [Path(p).stem for p in result["removed"]] == ["p001"]
    got, ref = _oracle(tmp_path, [data[k] for k in sorted(data)])
    assert _rel(got, ref) <= 1e-10
    assert result["rows"]["fd"] == 1500 * 2 + 1700


def test_window_drops_old_partitions(tmp_path):
    data = _data(tmp_path, range(4))
    spec = load_spec(_spec(tmp_path, refit={"policy": "window", "partitions": 3}))
    run_pipeline(spec)
    data.update(_data(tmp_path, [4, 5]))
    result = run_pipeline(spec)
    assert sorted(Path(p).stem for p in result["removed"]) == ["p001", "p002"]
    got, ref = _oracle(tmp_path, [data[k] for k in ("p003", "p004", "p005")])
    assert _rel(got, ref) <= 1e-10


def test_forgetting_weights_earlier_partitions_by_the_factor(tmp_path):
    data = _data(tmp_path, range(2))
    spec = load_spec(_spec(tmp_path, refit={"policy": "forgetting", "factor": 0.5}))
    run_pipeline(spec)
    data.update(_data(tmp_path, [2]))
    run_pipeline(spec)
    store = StatsStore(tmp_path / "store.zarr")
    manifest = store.read_manifest()
    total = store.load(manifest["models"]["fd"]["total"])
    parts = {Path(k).stem: store.load(v["stats"]["fd"]) for k, v in manifest["partitions"].items()}
    expected = parts["p000"].scaled(0.5) + parts["p001"].scaled(0.5) + parts["p002"]
    assert total.n == pytest.approx(1500 * 2 * 0.5 + 1500)
    np.testing.assert_allclose(total.gram, expected.gram, rtol=1e-12)
    np.testing.assert_allclose(total.moments.m2, expected.moments.m2, rtol=1e-10)


def test_scores_are_raw_row_densities_with_a_calibrated_flag_and_resume(tmp_path):
    data = _data(tmp_path, range(2))
    spec = load_spec(_spec(tmp_path), overrides=[f"outputs.report={tmp_path / 'reports'}"])
    result = run_pipeline(spec)
    assert len(result["scored"]) == 2
    assert result["reports"] == [str(tmp_path / "reports" / "fd" / "v000001")]  # the kernel model has no report
    metrics = json.loads((tmp_path / "reports" / "fd" / "v000001" / "metrics.json").read_text())
    assert "projected_cdfs.png" in metrics["figures"] and 0 < metrics["sliced"]["ks_median"] < 0.2
    est = tgpflow.load(tmp_path / "models" / "fd")
    manifest = StatsStore(tmp_path / "store.zarr").read_manifest()
    pre = manifest["preprocess"]
    scores = pd.read_parquet(tmp_path / "scores" / "p000.parquet")
    X = data["p000"]
    # the published model takes raw rows, as the pipeline scored them ...
    np.testing.assert_allclose(scores["log_density"], est.log_density(pd.DataFrame(X, columns=["a", "b", "c"]),
                                                                      normalized=True), rtol=1e-10)
    # ... and that is the density of the standardized rows with the standardization's Jacobian
    Y = (X - pre["center"]) / np.asarray(pre["scale"])
    expected = est.fitted().inner.log_density(Y) - np.log(pre["scale"]).sum() - est.normalizer_.log_z
    np.testing.assert_allclose(scores["log_density"], expected, rtol=1e-10)
    assert list(scores.columns) == ["row", "log_density", "anomaly_score", "anomaly"]  # `tgpflow score`'s columns
    np.testing.assert_array_equal(scores["row"], np.arange(len(X)))
    np.testing.assert_array_equal(scores["anomaly_score"], -scores["log_density"])
    both = pd.concat([pd.read_parquet(p) for p in result["scored"]])
    assert 0.02 < both["anomaly"].mean() < 0.09  # threshold at the 5% quantile of training densities
    mtime = (tmp_path / "scores" / "p000.parquet").stat().st_mtime_ns
    _data(tmp_path, [2])
    # the same pipeline without the report: v000002's (250 000 model draws, the figures: half this test's time)
    # is no part of which partitions a later run scores
    result = run_pipeline(load_spec(_spec(tmp_path)))
    assert result["reports"] == []
    assert [Path(p).stem for p in result["scored"]] == ["p002"]  # the others are not rewritten
    assert (tmp_path / "scores" / "p000.parquet").stat().st_mtime_ns == mtime


def test_spec_errors_name_the_field(tmp_path):
    path = _spec(tmp_path, refit={"policy": "window"})
    with pytest.raises(SpecError, match=r"refit\.window\.partitions"):
        load_spec(path)
    path = _spec(tmp_path, colour="blue")
    with pytest.raises(SpecError, match="colour: not a known key"):
        load_spec(path)
    raw = yaml.safe_load(_spec(tmp_path).read_text())
    raw["models"][0]["params"]["n_features"] = -3
    path.write_text(yaml.safe_dump(raw))
    with pytest.raises(SpecError, match=r"models\.0.*n_features must be a positive integer"):
        load_spec(path)
    spec = load_spec(_spec(tmp_path), overrides=["refit.policy=full", "models.0.params.lam=0.5"], date="2026-01-02")
    assert spec.refit.policy == "full" and spec.models[0].params["lam"] == 0.5
    dated = _spec(tmp_path, outputs={"store": str(tmp_path / "s-{date}"), "models": str(tmp_path / "m")})
    assert load_spec(dated, date="2026-01-02").outputs.store.endswith("s-2026-01-02")
    assert "refit" in PipelineSpec.model_json_schema()["properties"]


def test_corrupted_store_entry_is_detected_and_named(tmp_path):
    _data(tmp_path, range(2))
    spec = load_spec(_spec(tmp_path))
    run_pipeline(spec)
    store = StatsStore(tmp_path / "store.zarr")
    key, entry = next(iter(store.read_manifest()["partitions"].items()))
    assert key == "p000.parquet"  # relative to the source's root, tmp_path/data
    source_file = tmp_path / "data" / key
    rel = entry["stats"]["fd"]
    chunk = next(p for p in (tmp_path / "store.zarr" / rel / "gram").rglob("*") if p.is_file() and p.name != "zarr.json")
    raw = bytearray(chunk.read_bytes())
    raw[len(raw) // 2] ^= 0xFF
    chunk.write_bytes(bytes(raw))
    with pytest.raises(tgpflow.errors.ModelFileError, match=rel.split("/")[1]):
        store.load(rel)
    os.remove(source_file)  # the next run must subtract that partition: it reads the corrupted entry
    with pytest.raises(tgpflow.errors.ModelFileError, match=rel.split("/")[1]):
        run_pipeline(spec)
    assert StatsStore(tmp_path / "store.zarr").read_manifest()["run"] == 1  # nothing committed


def _scores_of(directory: Path) -> dict[str, tuple[int, int]]:
    """name -> (inode, mtime) of every entry: a rewrite changes the inode (atomic replace)."""
    return {p.name: (p.stat().st_ino, p.stat().st_mtime_ns) for p in sorted(directory.iterdir())}


def test_a_run_killed_while_scoring_is_finished_by_the_rerun_exactly_once(tmp_path):
    """Issue 15.2: the rerun scores what the killed run did not, into the killed run's dated directory,
    rewrites nothing already scored and leaves no temporary; the run after that has nothing to do."""
    _data(tmp_path, range(3))
    spec_path = _spec(tmp_path, outputs={"store": str(tmp_path / "store.zarr"), "models": str(tmp_path / "models"),
                                         "scores": {"path": str(tmp_path / "scores" / "{date}"), "model": "fd"}})
    run = ["run", str(spec_path), "--progress", "none", "--date"]
    killed = run_cli([*run, "2026-01-02"], tmp_path, kill="p001.parquet")
    assert killed.killed
    day = tmp_path / "scores" / "2026-01-02"
    before = _scores_of(day)
    assert "p000.parquet" in before and "p001.parquet" not in before
    done = run_cli([*run, "2026-01-03"], tmp_path)  # the next day, no new partition
    assert done.code == 0, done.stderr
    result = json.loads(done.stdout)
    assert not result["changed"] and [Path(p).name for p in result["scored"]] == ["p001.parquet", "p002.parquet"]
    after = _scores_of(day)
    assert sorted(after) == ["p000.parquet", "p001.parquet", "p002.parquet"]  # no temporary, no duplicate
    assert after["p000.parquet"] == before["p000.parquet"]  # not rewritten
    assert not (tmp_path / "scores" / "2026-01-03").exists()  # nothing new to score that day
    again = run_cli([*run, "2026-01-03"], tmp_path)
    assert again.code == 0 and again.steps == [] and "nothing to do" in json.loads(again.stdout)["message"]


def test_an_unpublished_version_is_invisible_and_removed_by_gc_or_the_next_run(tmp_path):
    """Issue 15.3: a run killed after writing its model versions, before publishing them (the manifest
    swap): `info` does not list them, `gc --dry-run` names them and changes nothing, `gc` removes them
    (and the run's orphan statistics), and a rerun after the same crash publishes v000002, not v000003."""
    _data(tmp_path, range(2))
    spec_path = _spec(tmp_path)
    run = ["run", str(spec_path), "--progress", "none", "--date", "2026-01-02"]
    assert run_cli(run, tmp_path).code == 0
    published = tree_hash(tmp_path / "models")
    _data(tmp_path, [2])
    assert run_cli(run, tmp_path, kill="manifest.json").killed
    orphan = tmp_path / "models" / "fd" / "v000002.zarr"
    assert orphan.is_dir()
    for model in ("fd", "kef"):
        r = CliRunner().invoke(main, ["--json", "info", str(tmp_path / "models" / model)])
        assert r.exit_code == 0, r.output
        assert json.loads(r.stdout)["current"] == "v000001" and list(json.loads(r.stdout)["versions"]) == ["v000001"]
    assert ModelVersions(tmp_path / "models" / "fd").list() == ["v000001"]
    lock = (".lock", ".lock.holder")  # the store lock's own files (the killed run's holder note goes)
    everything = tree_hash(tmp_path, skip=lock)
    r = CliRunner().invoke(main, ["--json", "gc", str(spec_path), "--dry-run"])
    assert r.exit_code == 0, r.output
    plan = json.loads(r.stdout)
    assert plan["dry_run"] and str(orphan) in plan["removed"] and tree_hash(tmp_path, skip=lock) == everything
    r = CliRunner().invoke(main, ["--json", "gc", str(spec_path)])
    assert r.exit_code == 0 and json.loads(r.stdout)["removed"] == plan["removed"], r.output
    assert tree_hash(tmp_path / "models") == published  # exactly the unpublished versions went
    store = StatsStore(tmp_path / "store.zarr")
    referenced = {rel for p in store.read_manifest()["partitions"].values() for rel in p["stats"].values()}
    on_disk = {p.relative_to(store.root).as_posix() for p in (store.root / "parts").glob("*/*.zarr")}
    assert on_disk == referenced
    assert run_cli(run, tmp_path, kill="manifest.json").killed
    done = run_cli(run, tmp_path)
    assert done.code == 0, done.stderr
    for model in ("fd", "kef"):
        vers = ModelVersions(tmp_path / "models" / model)
        assert vers.list() == ["v000001", "v000002"] and vers.current() == "v000002"
        assert sorted(p.name for p in vers.root.iterdir()) == ["CURRENT", "v000001.json", "v000001.zarr",
                                                               "v000002.json", "v000002.zarr"]


REPO = Path(__file__).resolve().parents[1]
_ENV = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}


def _wait_for(path: Path, proc: subprocess.Popen, timeout: float = 120.0) -> None:
    """Wait until ``path`` exists; fail with the process's output if it ends first or time runs out."""
    deadline = time.monotonic() + timeout
    while not path.exists():
        if proc.poll() is not None:
            out, err = proc.communicate()
            pytest.fail(f"{path.name} never appeared: the run exited with {proc.returncode}\n{out}\n{err}")
        if time.monotonic() > deadline:
            proc.kill()
            pytest.fail(f"{path.name} did not appear within {timeout:g} s")
        time.sleep(0.01)


def test_two_runs_at_once_never_lose_or_double_count_a_partition(tmp_path):
    """In lockstep (tests/lockstep.py): while one run holds the store lock, a second run is refused
    and a third waits (lock_timeout), then runs after the first and finds nothing left to add."""
    _data(tmp_path, range(6))
    spec_path = _spec(tmp_path)
    gate = tmp_path / "gate"
    gate.mkdir()
    run = ["run", str(spec_path), "--progress", "none"]

    def lockstep(role, *extra):
        return subprocess.Popen([sys.executable, "-m", "tests.lockstep", str(gate), role, *run, *extra], cwd=REPO,
                                env=_ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    holder = lockstep("holder")
    _wait_for(gate / "held", holder)
    refused = subprocess.run([sys.executable, "-m", "tgpflow.cli", *run], cwd=REPO, env=_ENV, capture_output=True,
                             text=True, timeout=240)
    waiter = lockstep("waiter", "--set", "lock_timeout=240")
    _wait_for(gate / "blocked", waiter)  # it found the lock taken, and waits
    (gate / "go").touch()
    stderr = {"holder": holder.communicate(timeout=240)[1], "waiter": waiter.communicate(timeout=240)[1],
              "refused": refused.stderr}
    # both outcomes of two runs at once, each for certain: one refused (exit 1), one that waited (exit 0)
    assert (holder.returncode, refused.returncode, waiter.returncode) == (0, 1, 0), stderr
    assert "another run holds the store lock" in refused.stderr
    manifest = StatsStore(tmp_path / "store.zarr").read_manifest()
    assert len(manifest["partitions"]) == 6
    assert tgpflow.load(tmp_path / "models" / "fd").n_samples_seen_ == 6 * 1500


def test_a_worker_killed_mid_pass_gives_bit_identical_statistics(tmp_path):
    """The victim's first chunk task signals that it runs (a file) and never returns: the kill lands
    in the middle of a task, every time; Dask reruns it elsewhere."""
    import threading

    from distributed import Client, LocalCluster

    from tgpflow.core.engine import accumulate
    from tgpflow.io.sources import as_source
    from tgpflow.stats.tgp import tgp_chunk_stats

    X = np.random.default_rng(0).normal(size=(12_000, 3))
    path = write_parquet(tmp_path / "big.parquet", X, row_group_size=1000)
    f = tgpflow.RandomFourierFeatures.draw(64, bandwidth=0.5, n_dims=3, random_state=0)
    running = tmp_path / "victim-is-running"
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0") as cluster, \
            Client(cluster) as client:
        clean, _ = accumulate(as_source(str(path)), tgp_chunk_stats, f)
        pids = client.run(os.getpid)
        victim_addr, victim = sorted(pids.items())[0]

        def chunk_stats(rows, features):  # pickled by value to the workers
            if os.getpid() == victim:
                running.touch()
                time.sleep(600)  # until it is killed
            return tgp_chunk_stats(rows, features)

        result = {}
        worker = threading.Thread(target=lambda: result.update(
            stats=accumulate(as_source(str(path)), chunk_stats, f)[0]))
        worker.start()
        deadline = time.time() + 60
        while not running.exists() and time.time() < deadline:
            time.sleep(0.01)
        assert running.exists(), "the victim never started a task"
        assert client.processing().get(victim_addr)
        os.kill(victim, 9)  # a task is running on it: this is mid-pass
        killed_mid_pass = worker.is_alive()
        worker.join(timeout=120)
        assert killed_mid_pass and not worker.is_alive()
        assert victim not in client.run(os.getpid).values()  # it really died (the nanny started a new one)
    disturbed = result["stats"]
    for name in ("gram", "u", "U", "psi"):
        assert np.array_equal(getattr(clean, name), getattr(disturbed, name))
    assert clean.n == disturbed.n == 12_000


def test_cli_validate_schema_stats_and_versions(tmp_path):
    """The commands' JSON in a process of their own: each is forked from the fault-injection server
    (tests/faults.py: ``tgpflow --json ARGS`` as ``python -m tgpflow.cli`` runs it), not a fresh interpreter
    that imports tgpflow again for each of the seven commands."""

    def cli(*args):
        return run_cli(args, tmp_path)

    _data(tmp_path, range(2))
    spec_path = _spec(tmp_path)
    assert json.loads(cli("validate", str(spec_path)).stdout)["valid"]
    assert "properties" in json.loads(cli("schema").stdout)
    bad = cli("validate", str(_spec(tmp_path, refit={"policy": "sometimes"})))
    assert bad.code == 1 and "refit" in bad.stderr
    spec_path = _spec(tmp_path)
    assert cli("run", str(spec_path), "--progress", "none").code == 0
    info = json.loads(cli("stats", "info", str(tmp_path / "store.zarr")).stdout)
    assert info["partitions"] == 2 and info["models"]["fd"]["rows"] == 3000
    manifest = StatsStore(tmp_path / "store.zarr").read_manifest()
    parts = [str(tmp_path / "store.zarr" / p["stats"]["fd"]) for p in manifest["partitions"].values()]
    merged = cli("stats", "merge", *parts, "--out", str(tmp_path / "merged.npz"))
    assert merged.code == 0 and json.loads(merged.stdout)["rows"] == 3000
    versions = json.loads(cli("info", str(tmp_path / "models" / "fd")).stdout)
    assert versions["current"] == "v000001" and versions["versions"]["v000001"]["rows"] == 3000


@pytest.mark.parametrize("key, value, code, expected", [
    ("file", "local.yaml", 0, "{dir}/local.yaml (local cluster file)"),
    ("file", "typo.yaml", 1, "{dir}/typo.yaml: the local cluster file is not valid .*n_wrkers: not a known key .did you mean .n_workers.."),
    ("file", "missing.yaml", 1, "{dir}/missing.yaml: cannot read the cluster file"),
    ("scheduler", "tcp://10.255.0.1:8786", 0, "tcp://10.255.0.1:8786"),  # parsed, not reached: unroutable is fine
    ("scheduler", "tcp://host-without-port", 2, "tcp://host-without-port: neither a scheduler file nor an address"),
    ("scheduler", "{dir}/scheduler.json", 1, "{dir}/scheduler.json: not a Dask scheduler file"),
])
def test_validate_checks_the_cluster_file_or_scheduler_without_reaching_it(tmp_path, key, value, code, expected):
    (tmp_path / "local.yaml").write_text("type: local\nn_workers: 2\nthreads_per_worker: 1\n")
    (tmp_path / "typo.yaml").write_text("type: local\nn_wrkers: 2\n")
    (tmp_path / "scheduler.json").write_text("{}")
    value = value.format(dir=tmp_path)
    section = {key: str(tmp_path / value) if key == "file" else value}
    t = time.perf_counter()
    r = CliRunner().invoke(main, ["--json", "validate", str(_spec(tmp_path, cluster=section))])
    assert time.perf_counter() - t < 10  # no cluster started, no connection tried
    assert r.exit_code == code, r.output
    pattern = expected.format(dir=tmp_path)
    if code == 0:
        assert json.loads(r.stdout)["cluster"] == pattern
    else:
        assert re.search(pattern, r.output, re.S), r.output


def test_example_specs_validate():
    root = Path(__file__).resolve().parents[1] / "pipelines"
    specs = sorted(root.glob("*.yaml"))
    assert specs, "the example specs are missing"
    for path in specs:
        load_spec(path, date="2026-01-01")
