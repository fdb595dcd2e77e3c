"""A model's metadata is checksummed with its arrays (issue 15.4): an edited header — parameters, method,
anomaly threshold, selection — is refused with one sentence naming the file, by the library and by every
CLI command that reads a model (exit 1, no traceback, nothing written, every file untouched); files
written before the checksum existed load with a warning that their metadata is unverified."""

import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

import tgpflow
from tgpflow import GPTiltedDensity
from tgpflow.cli import main
from tgpflow.errors import ModelFileError, UnverifiedMetadataWarning
from tgpflow.pipeline.store import load_stats
from tests.conftest import write_parquet
from tests.oracles import tree_hash

EDITS = {
    "anomaly_threshold": lambda meta: meta.update(anomaly_threshold=-99.0),  # was accepted silently
    "lam": lambda meta: meta["params"].update(lam=5.0),
    "method": lambda meta: meta["params"].update(method="ncfd"),  # was a re-solve with the wrong method
    "params": lambda meta: meta.update(params="fd"),  # was a TypeError traceback
    "selection": lambda meta: meta.update(selection={"chosen": {"lam": 1.0}}),
}


@pytest.fixture(scope="module")
def saved(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("metadata")
    X = np.random.default_rng(0).normal(size=(600, 2))
    write_parquet(root / "data.parquet", X, ["u", "v"])
    GPTiltedDensity(n_features=16, lam=0.1, bandwidth=0.5).fit(X).save(root / "m.zarr")
    return root


def _edit_header(model: Path, fn) -> Path:
    path = model / "zarr.json"
    doc = json.loads(path.read_text())
    fn(doc["attributes"]["meta"])
    path.write_text(json.dumps(doc))
    return path


@pytest.mark.parametrize("edit", sorted(EDITS))
def test_an_edited_header_is_refused_naming_the_file(saved, tmp_path, edit):
    model = tmp_path / "m.zarr"
    model.mkdir()
    for p in (saved / "m.zarr").rglob("*"):  # a private copy to edit
        target = model / p.relative_to(saved / "m.zarr")
        target.mkdir(exist_ok=True) if p.is_dir() else target.write_bytes(p.read_bytes())
    header = _edit_header(model, EDITS[edit])
    with pytest.raises(ModelFileError, match=f"^{header}: the metadata does not match its checksum"):
        tgpflow.load(model)
    before = tree_hash(tmp_path)
    data = str(saved / "data.parquet")
    for args in (["info", str(model)], ["score", str(model), data, "--out", str(tmp_path / "s.parquet")],
                 ["sample", str(model), "-n", "10", "--out", str(tmp_path / "x.parquet")]):
        r = CliRunner().invoke(main, args)
        assert r.exit_code == 1, (args, r.output)
        lines = r.output.strip().splitlines()
        assert len(lines) == 1 and str(header) in lines[0] and "Traceback" not in r.output
    assert tree_hash(tmp_path) == before  # nothing written, nothing changed


def test_a_file_without_a_header_checksum_loads_with_a_warning(saved, tmp_path):
    model = tmp_path / "old.zarr"
    model.mkdir()
    for p in (saved / "m.zarr").rglob("*"):
        target = model / p.relative_to(saved / "m.zarr")
        target.mkdir(exist_ok=True) if p.is_dir() else target.write_bytes(p.read_bytes())
    doc = json.loads((model / "zarr.json").read_text())
    del doc["attributes"]["header_checksum"]  # as tgpflow wrote it before
    (model / "zarr.json").write_text(json.dumps(doc))
    with pytest.warns(UnverifiedMetadataWarning, match="metadata .* is not"):
        est = tgpflow.load(model)
    assert est.lam_ == 0.1


def test_statistics_metadata_is_covered_too(tmp_path):
    X = np.random.default_rng(1).normal(size=(300, 2))
    stats = GPTiltedDensity(n_features=8, lam=0.1, bandwidth=0.5).fit(X).stats_
    for path in (tmp_path / "s.npz", tmp_path / "s.zarr"):
        stats.save(path)
        assert load_stats(path).n == 300
    doc = json.loads((tmp_path / "s.zarr" / "zarr.json").read_text())
    doc["attributes"]["meta"]["fingerprint"] = "0" * 16
    (tmp_path / "s.zarr" / "zarr.json").write_text(json.dumps(doc))
    with pytest.raises(ModelFileError, match="zarr.json: the metadata does not match its checksum"):
        load_stats(tmp_path / "s.zarr")


def test_a_versions_run_info_is_checksummed(saved, tmp_path):
    """The run info beside a pipeline's model version (its anomaly threshold scores partitions) too."""
    from tgpflow.pipeline.versions import ModelVersions

    vers = ModelVersions(tmp_path / "models" / "fd")
    name = vers.write(tgpflow.load(saved / "m.zarr"))
    assert vers.list() == [] and vers.unpublished() == [name]  # written, not yet published
    vers.publish(name, {"run": 1, "anomaly_threshold": -3.5, "rows": 600.0})
    assert vers.list() == [name] and vers.info()["anomaly_threshold"] == -3.5
    path = vers.root / f"{name}.json"
    path.write_text(path.read_text().replace("-3.5", "-350.0"))
    with pytest.raises(ModelFileError, match=f"^{path}: the version's run info does not match its checksum"):
        vers.info(name)
    r = CliRunner().invoke(main, ["--json", "info", str(vers.root)])
    assert r.exit_code == 1 and str(path) in r.output and "Traceback" not in r.output
