"""A pipeline over CSV partitions (docs/data.md, "CSV"): the same refits and scores as over Parquet ones."""

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

import tgpflow
from tgpflow.errors import SourceError
from tgpflow.pipeline.runner import run_pipeline
from tgpflow.pipeline.spec import load_spec
from tgpflow.pipeline.store import StatsStore


def _partition(path: Path, seed: int, n: int = 1200) -> np.ndarray:
    X = np.random.default_rng(seed).normal(size=(n, 3)) * [1.0, 2.0, 0.5] + [3.0, -1.0, 0.0]
    frame = pd.DataFrame(X, columns=["a", "b", "c"])
    frame.insert(0, "id", [f"{path.stem}-{i}" for i in range(n)])  # text, kept beside the scores
    frame.to_csv(path, index=False)
    return X


def _spec(tmp: Path) -> Path:
    raw = {"name": "t", "source": {"path": str(tmp / "data" / "*.csv"), "columns": ["a", "b", "c"]},
           "preprocess": {"center": True, "scale": True},
           "models": [{"name": "fd", "estimator": "GPTiltedDensity",
                       "params": {"method": "fd", "n_features": 48, "lam": 0.1}}],
           "outputs": {"store": str(tmp / "store.zarr"), "models": str(tmp / "models"),
                       "scores": {"path": str(tmp / "scores"), "model": "fd", "threshold_quantile": 0.05,
                                  "keep_columns": ["id"]}},
           "refit": {"policy": "incremental"}}
    path = tmp / "spec.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def test_csv_partitions_refit_incrementally_and_score_with_their_ids(tmp_path):
    (tmp_path / "data").mkdir()
    data = {s: _partition(tmp_path / "data" / f"p{s:03d}.csv", s) for s in range(2)}
    spec = load_spec(_spec(tmp_path))
    first = run_pipeline(spec)
    assert first["changed"] and len(first["added"]) == 2
    data[2] = _partition(tmp_path / "data" / "p002.csv", 2)
    second = run_pipeline(spec)
    assert [Path(p).name for p in second["added"]] == ["p002.csv"]
    # the incremental model is the solve of every row's sums: a direct fit with the store's preprocessing and draw
    est = tgpflow.load(tmp_path / "models" / "fd")
    pre = StatsStore(tmp_path / "store.zarr").read_manifest()["preprocess"]
    X = (np.concatenate([data[k] for k in sorted(data)]) - pre["center"]) / np.asarray(pre["scale"])
    ref = tgpflow.GPTiltedDensity(method="fd", n_features=48, lam=0.1).fit(X, features=est.features_)
    assert np.linalg.norm(est.theta_ - ref.theta_) <= 1e-10 * np.linalg.norm(ref.theta_)
    scores = pd.read_parquet(tmp_path / "scores" / "p002.parquet")
    assert list(scores.columns) == ["row", "id", "log_density", "anomaly_score", "anomaly"]
    np.testing.assert_array_equal(scores["row"], np.arange(1200))
    assert scores["id"].tolist() == [f"p002-{i}" for i in range(1200)]
    before = tgpflow.load(tmp_path / "models" / "fd" / "v000001.zarr")  # new rows: the version before they came
    np.testing.assert_allclose(scores["log_density"], before.log_density(pd.DataFrame(data[2], columns=["a", "b", "c"]),
                                                                         normalized=True), rtol=1e-10)
    assert not run_pipeline(spec)["changed"]


def test_a_csv_file_beside_a_parquet_file_is_refused_naming_both(tmp_path):
    (tmp_path / "data").mkdir()
    _partition(tmp_path / "data" / "p000.csv", 0)
    (tmp_path / "data" / "p001.parquet").write_bytes(b"PAR1")
    spec = yaml.safe_load(_spec(tmp_path).read_text())
    spec["source"]["path"] = str(tmp_path / "data" / "p*")
    (tmp_path / "spec.yaml").write_text(yaml.safe_dump(spec))
    with pytest.raises(SourceError, match=r"both CSV files \(.*p000.csv\) and other files \(.*p001.parquet\)"):
        run_pipeline(load_spec(tmp_path / "spec.yaml"))
