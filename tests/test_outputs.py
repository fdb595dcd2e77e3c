"""--out never destroys what tgpflow did not write (issue 15, item 1): a user's directory or file, the
input model and a tgpflow output of another kind are refused with exit 2 and left byte-identical; an
output of the same kind is replaced only with --overwrite."""

import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

import tgpflow
from tgpflow import GPTiltedDensity
from tgpflow.cli import main
from tgpflow.errors import OutputExistsError
from tgpflow.io.outputs import check_replace, output_kind
from tests.conftest import write_parquet
from tests.oracles import tree_hash

FAST_FIT = ["--model", "fd", "--n-features", "16", "--lam", "0.1", "--bandwidth", "0.5", "--progress", "none"]


@pytest.fixture(scope="module")
def workspace(tmp_path_factory):
    """Data and a fitted model, written once through the CLI."""
    root = tmp_path_factory.mktemp("outputs")
    X = np.random.default_rng(0).normal(size=(600, 2))
    write_parquet(root / "data.parquet", X, ["u", "v"])
    r = CliRunner().invoke(main, ["fit", str(root / "data.parquet"), "--out", str(root / "m.zarr"), *FAST_FIT])
    assert r.exit_code == 0, r.output
    return root


def command(kind: str, root: Path, out: Path) -> list[str]:
    data, model = str(root / "data.parquet"), str(root / "m.zarr")
    return {"fit": ["fit", data, "--out", str(out), *FAST_FIT],
            "score": ["score", model, data, "--out", str(out), "--progress", "none"],
            "sample": ["sample", model, "-n", "50", "--out", str(out)],
            "report": ["report", model, data, "--out", str(out), "--directions", "8", "--model-samples", "2000"],
            }[kind]


COMMANDS = ["fit", "score", "sample", "report"]


@pytest.mark.parametrize("cmd", COMMANDS)
def test_a_users_directory_is_refused_and_untouched(workspace, tmp_path, cmd):
    user = tmp_path / "results"
    (user / "sub").mkdir(parents=True)
    (user / "notes.txt").write_text("a week of work")
    (user / "sub" / "table.csv").write_text("a,b\n1,2\n")
    before = tree_hash(user)
    r = CliRunner().invoke(main, command(cmd, workspace, user) + ["--overwrite"])
    assert r.exit_code == 2, r.output
    assert "did not write" in r.output and str(user) in r.output and "Traceback" not in r.output
    assert tree_hash(user) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["results"]  # no temporary left beside it


@pytest.mark.parametrize("cmd", COMMANDS)
def test_a_users_file_is_refused_and_untouched(workspace, tmp_path, cmd):
    user = tmp_path / "data-copy.parquet"
    user.write_bytes((workspace / "data.parquet").read_bytes())
    before = tree_hash(user)
    r = CliRunner().invoke(main, command(cmd, workspace, user) + ["--overwrite"])
    assert r.exit_code == 2, r.output
    assert tree_hash(user) == before


@pytest.mark.parametrize("cmd", ["score", "sample", "report"])
def test_the_input_model_is_never_the_output(workspace, cmd):
    model = workspace / "m.zarr"
    before = tree_hash(model)
    r = CliRunner().invoke(main, command(cmd, workspace, model) + ["--overwrite"])
    assert r.exit_code == 2, r.output
    assert "holds a tgpflow model" in r.output
    assert tree_hash(model) == before
    assert tgpflow.load(model).n_samples_seen_ == 600


@pytest.mark.parametrize("cmd", COMMANDS)
def test_same_kind_is_replaced_only_with_overwrite(workspace, tmp_path, cmd):
    out = tmp_path / ("o.zarr" if cmd == "fit" else "o.parquet" if cmd != "report" else "rep")
    runner = CliRunner()
    r = runner.invoke(main, command(cmd, workspace, out))
    assert r.exit_code == 0, r.output
    kind = {"fit": "model", "score": "scores", "sample": "samples", "report": "report"}[cmd]
    assert output_kind(out) == kind
    before = tree_hash(out)
    r = runner.invoke(main, command(cmd, workspace, out))
    assert r.exit_code == 2 and "--overwrite" in r.output, r.output
    assert tree_hash(out) == before
    r = runner.invoke(main, command(cmd, workspace, out) + ["--overwrite"])
    assert r.exit_code == 0, r.output
    assert output_kind(out) == kind
    assert sorted(p.name for p in tmp_path.iterdir()) == [out.name]


def test_outputs_of_another_kind_are_refused(workspace, tmp_path):
    samples = tmp_path / "s.parquet"
    assert CliRunner().invoke(main, command("sample", workspace, samples)).exit_code == 0
    before = tree_hash(samples)
    r = CliRunner().invoke(main, command("score", workspace, samples) + ["--overwrite"])
    assert r.exit_code == 2 and "holds a tgpflow samples" in r.output, r.output
    assert tree_hash(samples) == before


def test_python_save_refuses_a_users_directory_and_replaces_a_model(tmp_path):
    X = np.random.default_rng(1).normal(size=(400, 2))
    est = GPTiltedDensity(n_features=8, lam=0.1, bandwidth=0.5).fit(X)
    user = tmp_path / "mine"
    user.mkdir()
    (user / "keep.txt").write_text("keep")
    with pytest.raises(OutputExistsError, match="did not write"):
        est.save(user)
    assert (user / "keep.txt").read_text() == "keep" and len(list(user.iterdir())) == 1
    path = tmp_path / "m.zarr"
    est.save(path)
    est.save(path)  # the Python API replaces its own model by default, atomically
    with pytest.raises(OutputExistsError, match="--overwrite"):
        est.save(path, overwrite=False)
    stats = tmp_path / "stats.npz"
    est.stats_.save(stats)
    assert output_kind(stats) == "statistics"
    with pytest.raises(OutputExistsError, match="holds a tgpflow statistics"):
        est.save(stats)
    np.testing.assert_allclose(tgpflow.load(path).score_samples(X[:5]), est.score_samples(X[:5]), rtol=1e-12)


def test_output_kind_reads_only_what_tgpflow_wrote(tmp_path):
    (tmp_path / "d").mkdir()
    (tmp_path / "f.txt").write_text("x")
    (tmp_path / "fake.zarr").mkdir()
    (tmp_path / "fake.zarr" / "zarr.json").write_text(json.dumps({"attributes": {}}))
    (tmp_path / "bad.zarr").mkdir()
    (tmp_path / "bad.zarr" / "zarr.json").write_text("{not json")
    for name in ("d", "f.txt", "fake.zarr", "bad.zarr", "missing"):
        assert output_kind(tmp_path / name) is None
    (tmp_path / "link").symlink_to(tmp_path / "d")
    assert output_kind(tmp_path / "link") is None
    with pytest.raises(OutputExistsError):
        check_replace(tmp_path / "link", "report", overwrite=True)
    check_replace(tmp_path / "missing", "model", overwrite=False)  # a new path is always fine
