"""Pipelines over mixed, remote, Zarr v2 and nested layouts; stores written by earlier releases (issue 19 review).

* a directory holding Parquet files and a Zarr store is refused, naming both (it is not read as Zarr only);
* a Zarr partition is read as Zarr wherever discovery found it (``memory://``, Zarr v2 without ``.zarr``);
* a store whose kernel model was built with ``eps`` (now ``ridge``/``rank_tol``, solve-only) is refitted
  incrementally from its statistics;
* the first run after the key migration does not score the last run's partitions again;
* nested keys (``day=1/part-0.parquet``) get one score file each.
"""

from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest
import yaml
import zarr

import tgpflow
from tests.conftest import write_parquet
from tests.oracles import tree_hash
from tgpflow.errors import SourceError
from tgpflow.io.sources import as_source
from tgpflow.pipeline.discover import discover, fingerprint
from tgpflow.pipeline.runner import run_pipeline
from tgpflow.pipeline.spec import load_spec
from tgpflow.pipeline.store import StatsStore

FD = {"name": "fd", "estimator": "GPTiltedDensity", "params": {"method": "fd", "n_features": 48, "lam": 0.1}}


def _rows(seed: int, n: int = 1500) -> np.ndarray:
    return np.random.default_rng(seed).normal(size=(n, 3)) * [1.0, 2.0, 0.5] + [3.0, -1.0, 0.0]


def _parquet(path: Path, seed: int, n: int = 1500) -> np.ndarray:
    path.parent.mkdir(parents=True, exist_ok=True)
    X = _rows(seed, n)
    write_parquet(path, X, ["a", "b", "c"], row_group_size=600)
    return X


def _spec(tmp: Path, source: dict, models=(FD,), scores: bool = True) -> Path:
    outputs = {"store": str(tmp / "store.zarr"), "models": str(tmp / "models")}
    if scores:
        outputs["scores"] = {"path": str(tmp / "scores"), "model": "fd", "threshold_quantile": 0.05}
    raw = {"name": "t", "source": source, "preprocess": {"center": True, "scale": True}, "models": list(models),
           "outputs": outputs, "refit": {"policy": "incremental"}}
    path = tmp / "spec.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def _fd_oracle(tmp: Path, parts: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """The stored fd model's θ, and a full fit of every row with the store's preprocessing and draw."""
    est = tgpflow.load(tmp / "models" / "fd")
    pre = StatsStore(tmp / "store.zarr").read_manifest()["preprocess"]
    X = (np.concatenate(parts) - pre["center"]) / np.asarray(pre["scale"])
    ref = tgpflow.GPTiltedDensity(method="fd", n_features=48, lam=0.1).fit(X, features=est.features_)
    return est.theta_, ref.theta_


def _rel(a, b) -> float:
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


# -- 1. a directory mixing Parquet files and a Zarr store -------------------------------------------------

def test_a_zarr_store_beside_parquet_files_is_refused_naming_both(tmp_path):
    _parquet(tmp_path / "mix" / "day1.parquet", 1)
    _parquet(tmp_path / "mix" / "day2.parquet", 2)
    assert discover(str(tmp_path / "mix")).keys == ("day1.parquet", "day2.parquet")
    zarr.open_group(str(tmp_path / "mix" / "cache.zarr"), mode="w").create_array("a", data=np.arange(3.0))
    with pytest.raises(SourceError, match=r"Zarr stores \(.*cache\.zarr\) and other files \(.*day1\.parquet\)"):
        discover(str(tmp_path / "mix"))


def test_a_stray_zarr_store_does_not_drop_a_parquet_pipelines_partitions(tmp_path):
    """A Parquet pipeline whose data directory gains a Zarr store stops with the one-format error and leaves its
    store as it was (it does not take every partition for removed)."""
    _parquet(tmp_path / "data" / "day1.parquet", 1)
    _parquet(tmp_path / "data" / "day2.parquet", 2)
    spec = load_spec(_spec(tmp_path, {"path": str(tmp_path / "data")}, scores=False))
    assert sorted(run_pipeline(spec)["added"]) == ["day1.parquet", "day2.parquet"]
    before = tree_hash(tmp_path / "store.zarr")
    zarr.open_group(str(tmp_path / "data" / "cache.zarr"), mode="w").create_array("a", data=np.arange(3.0))
    with pytest.raises(SourceError, match="one format"):
        run_pipeline(spec)
    with pytest.raises(SourceError, match="one format"):
        run_pipeline(spec, dry_run=True)
    assert tree_hash(tmp_path / "store.zarr") == before


# -- 2. Zarr partitions that have no .zarr suffix: remote, or Zarr v2 --------------------------------------

def _zarr_columns(url: str, X: np.ndarray, **kw) -> None:
    group = zarr.open_group(url, mode="w", **kw)
    for j, name in enumerate("abc"):
        group.create_array(name, data=X[:, j], chunks=(600,))


def test_zarr_groups_on_memory_are_read_as_zarr(tmp_path, mem):
    from tgpflow.io.backends.zarr import is_zarr_store

    data = {}
    for day in (1, 2):
        data[f"2026-11-0{day}"] = X = _rows(day)
        _zarr_columns(f"memory://zd/2026-11-0{day}", X)
    assert is_zarr_store("memory://zd/2026-11-01") and not is_zarr_store("memory://zd")
    src = as_source("memory://zd/2026-11-01")
    assert src.columns == ("a", "b", "c") and src.n_rows == 1500
    parts = discover("memory://zd")
    assert parts.format == "zarr" and parts.keys == ("2026-11-01", "2026-11-02")
    spec = load_spec(_spec(tmp_path, {"path": "memory://zd"}))
    assert run_pipeline(spec)["added"] == ["2026-11-01", "2026-11-02"]
    got, ref = _fd_oracle(tmp_path, [data[k] for k in sorted(data)])
    assert _rel(got, ref) <= 1e-10
    scores = pd.read_parquet(tmp_path / "scores" / "2026-11-02.parquet")
    assert len(scores) == 1500


def test_zarr_v2_groups_are_read_as_zarr(tmp_path):
    from tgpflow.io.backends.zarr import is_zarr_store

    data = {}
    for day in (1, 2, 3):
        data[f"2026-11-0{day}"] = X = _rows(day)
        _zarr_columns(str(tmp_path / "data" / f"2026-11-0{day}"), X, zarr_format=2)
    assert not (tmp_path / "data" / "2026-11-01" / "zarr.json").exists()
    assert is_zarr_store(str(tmp_path / "data" / "2026-11-01"))
    assert as_source(str(tmp_path / "data" / "2026-11-01")).n_rows == 1500
    with pytest.raises(SourceError, match="not a readable Parquet file"):  # the format, when given, is obeyed
        as_source(str(tmp_path / "data" / "2026-11-01"), format="parquet")
    spec = load_spec(_spec(tmp_path, {"path": str(tmp_path / "data")}))
    assert run_pipeline(spec)["added"] == sorted(data)
    got, ref = _fd_oracle(tmp_path, [data[k] for k in sorted(data)])
    assert _rel(got, ref) <= 1e-10


# -- 3. a kernel model's eps (now ridge and rank_tol) in a store's manifest -------------------------------

def test_a_store_built_with_eps_refits_incrementally_after_the_rename(tmp_path):
    """eps, ridge and rank_tol change only the solve: a store whose manifest records eps (as releases before the
    rename wrote it) is refitted from its statistics plus the new partition, and equals a full refit with the
    spec's ridge and rank_tol."""
    kef = {"name": "kef", "estimator": "NystromKEF", "params": {"n_basis": 12, "base": "gaussian", "ridge": 1e-5}}
    data = {f"p{d}.parquet": _parquet(tmp_path / "data" / f"p{d}.parquet", d) for d in (0, 1)}
    spec_path = _spec(tmp_path, {"path": str(tmp_path / "data" / "*.parquet")}, models=(FD, kef), scores=False)
    run_pipeline(load_spec(spec_path))
    store = StatsStore(tmp_path / "store.zarr")
    manifest = store.read_manifest()
    manifest["models"]["kef"]["params"] = {"n_basis": 12, "base": "gaussian", "eps": 1e-5}  # as it was written
    store.write_manifest(manifest)
    data["p2.parquet"] = _parquet(tmp_path / "data" / "p2.parquet", 2)
    raw = yaml.safe_load(spec_path.read_text())
    raw["models"][1]["params"]["rank_tol"] = 1e-8  # solve-only too
    spec_path.write_text(yaml.safe_dump(raw))
    spec = load_spec(spec_path)
    dry = run_pipeline(spec, dry_run=True)
    assert not dry["rebuild"] and dry["refit"]["kef"]["refit"].startswith("incremental")
    result = run_pipeline(spec)
    assert result["added"] == ["p2.parquet"] and result["removed"] == []  # not a full re-read
    est = tgpflow.load(tmp_path / "models" / "kef")
    assert est.ridge == 1e-5 and est.rank_tol == 1e-8
    pre = store.read_manifest()["preprocess"]
    X = (np.concatenate([data[k] for k in sorted(data)]) - pre["center"]) / np.asarray(pre["scale"])
    ref = tgpflow.NystromKEF(n_basis=12, base="gaussian", ridge=1e-5, rank_tol=1e-8).fit(X, basis=est.basis_)
    assert _rel(est.beta_, ref.beta_) <= 1e-10
    assert store.read_manifest()["models"]["kef"]["params"] == raw["models"][1]["params"]  # the spec's, from now on


def test_a_parameter_that_changes_the_statistics_still_needs_a_rebuild(tmp_path):
    kef = {"name": "kef", "estimator": "NystromKEF", "params": {"n_basis": 12, "base": "gaussian"}}
    _parquet(tmp_path / "data" / "p0.parquet", 0)
    spec_path = _spec(tmp_path, {"path": str(tmp_path / "data" / "*.parquet")}, models=(kef,), scores=False)
    run_pipeline(load_spec(spec_path))
    _parquet(tmp_path / "data" / "p1.parquet", 1)
    raw = yaml.safe_load(spec_path.read_text())
    raw["models"][0]["params"]["n_basis"] = 14
    spec_path.write_text(yaml.safe_dump(raw))
    with pytest.raises(tgpflow.errors.TgpflowError, match="refit.policy=full"):
        run_pipeline(load_spec(spec_path))


# -- 4. the first run after the key migration ------------------------------------------------------------

def _legacy_store(tmp_path: Path, spec) -> None:
    """Rewrite a store (and its score files) as releases before relative keys wrote them: schema 1, absolute
    keys, fingerprints of the absolute paths, score files recording those fingerprints and keys."""
    store = StatsStore(tmp_path / "store.zarr")
    manifest = store.read_manifest()
    parts = discover(spec.source.path)
    absolute = {k: parts.path(k) for k in manifest["partitions"]}
    old_fps = {k: fingerprint(parts.fs, parts.path(k), parts.path(k)) for k in manifest["partitions"]}
    legacy = {absolute[k]: {**v, "fingerprint": old_fps[k]} for k, v in manifest["partitions"].items()}
    for model in manifest["models"].values():
        model["info"]["partitions"] = sorted(absolute[k] for k in model["info"]["partitions"])
    step = manifest["steps"]["scores"]
    for k in step["partitions"]:  # the score files as they were written: the old fingerprint and key
        path = tmp_path / "scores" / Path(k).with_suffix(".parquet").name
        table = pq.read_table(path)
        md = {**table.schema.metadata, b"tgpflow.partition": old_fps[k].encode(),
              b"tgpflow.source": absolute[k].encode()}
        pq.write_table(table.replace_schema_metadata(md), path)
    step["partitions"] = sorted(absolute[k] for k in step["partitions"])
    store.write_manifest({**manifest, "schema": 1, "partitions": legacy})


def test_the_first_run_after_the_key_migration_scores_nothing_again(tmp_path):
    data = {f"p{d}.parquet": _parquet(tmp_path / "data" / f"p{d}.parquet", d) for d in (0, 1)}
    spec = load_spec(_spec(tmp_path, {"path": str(tmp_path / "data" / "*.parquet")}))
    assert len(run_pipeline(spec)["scored"]) == 2
    _legacy_store(tmp_path, spec)
    scores = tree_hash(tmp_path / "scores")
    mtimes = {p.name: p.stat().st_mtime_ns for p in (tmp_path / "scores").iterdir()}
    result = run_pipeline(spec)
    assert not result["changed"] and result["scored"] == [] and "scored" not in result["message"], result
    assert result["message"] == "no new or changed partitions; nothing to do"
    assert tree_hash(tmp_path / "scores") == scores
    assert {p.name: p.stat().st_mtime_ns for p in (tmp_path / "scores").iterdir()} == mtimes
    manifest = StatsStore(tmp_path / "store.zarr").read_manifest()
    assert manifest["schema"] == 2 and sorted(manifest["partitions"]) == sorted(data)
    data["p2.parquet"] = _parquet(tmp_path / "data" / "p2.parquet", 2)  # and the next run scores only the new one
    result = run_pipeline(spec)
    assert result["added"] == ["p2.parquet"] and result["scored"] == [str(tmp_path / "scores" / "p2.parquet")]
    assert {p.name: p.stat().st_mtime_ns for p in (tmp_path / "scores").iterdir() if p.name in mtimes} == mtimes
    got, ref = _fd_oracle(tmp_path, [data[k] for k in sorted(data)])
    assert _rel(got, ref) <= 1e-10


# -- 5. nested keys: one score file each -----------------------------------------------------------------

@pytest.mark.parametrize("source", ["data/day=*/part-0.parquet", "data"])
def test_nested_partitions_get_one_score_file_each(tmp_path, source):
    data = {f"day={d}/part-0.parquet": _parquet(tmp_path / "data" / f"day={d}" / "part-0.parquet", d, 1000 + d)
            for d in (1, 2)}
    spec = load_spec(_spec(tmp_path, {"path": str(tmp_path / source)}))
    result = run_pipeline(spec)
    assert sorted(result["added"]) == sorted(data)
    names = {"day=1/part-0.parquet": "day=1__part-0.parquet", "day=2/part-0.parquet": "day=2__part-0.parquet"}
    assert sorted(p.name for p in (tmp_path / "scores").iterdir()) == sorted(names.values())
    assert sorted(result["scored"]) == sorted(str(tmp_path / "scores" / n) for n in names.values())
    est = tgpflow.load(tmp_path / "models" / "fd")
    pre = StatsStore(tmp_path / "store.zarr").read_manifest()["preprocess"]
    for key, name in names.items():
        table = pq.read_table(tmp_path / "scores" / name)
        assert table.schema.metadata[b"tgpflow.source"] == key.encode()
        # the published model takes raw rows; its density is the standardized rows' with the Jacobian
        got = table.column("log_density").to_numpy()
        np.testing.assert_allclose(got, est.log_density(pd.DataFrame(data[key], columns=["a", "b", "c"]),
                                                        normalized=True), rtol=1e-10)
        X = (data[key] - pre["center"]) / np.asarray(pre["scale"])
        np.testing.assert_allclose(got, est.fitted().inner.log_density(X) - np.log(pre["scale"]).sum()
                                   - est.normalizer_.log_z, rtol=1e-10)
