"""A scheduler that cannot be used is one sentence naming the file or address (issue 15.5): a malformed
scheduler file (exit 1; was an AssertionError traceback), a missing one (exit 2; was "missing port
number"), an unreachable scheduler (exit 1 within --scheduler-timeout, default ≤ 10 s; was 30 s).
Nothing is written and every existing file is left as it was."""

import json
import socket
import time

import numpy as np
import pytest
import yaml
from click.testing import CliRunner

from tgpflow.cli import main
from tgpflow.cluster import DEFAULT_CONNECT_TIMEOUT, connect_timeout, dask_client
from tgpflow.errors import SchedulerAddressError, SchedulerError
from tests.conftest import write_parquet
from tests.oracles import tree_hash


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def workspace(tmp_path):
    write_parquet(tmp_path / "data.parquet", np.random.default_rng(0).normal(size=(200, 2)), ["u", "v"])
    return tmp_path


def _fit(ws, scheduler, *extra):
    return CliRunner().invoke(main, ["fit", str(ws / "data.parquet"), "--out", str(ws / "m.zarr"), "--n-features",
                                     "8", "--progress", "none", "--scheduler", scheduler, *extra])


def _one_sentence(r, *names):
    lines = r.output.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in r.output, r.output
    for name in names:
        assert name in lines[0], (name, r.output)


@pytest.mark.parametrize("content", ["{not json", '{"id": "Scheduler-1"}', '{"address": 5}', "[1, 2]"])
def test_a_malformed_scheduler_file_is_one_sentence_naming_it(workspace, content):
    path = workspace / "scheduler.json"
    path.write_text(content)
    before = tree_hash(workspace)
    r = _fit(workspace, str(path))
    assert r.exit_code == 1, r.output
    _one_sentence(r, str(path), "not a Dask scheduler file")
    assert tree_hash(workspace) == before


@pytest.mark.parametrize("name", ["missing/scheduler.json", "scheduler.json", "localhost"])
def test_a_missing_scheduler_file_is_a_usage_error_naming_it(workspace, name):
    before = tree_hash(workspace)
    r = _fit(workspace, name)
    assert r.exit_code == 2, r.output
    _one_sentence(r, name)
    assert "missing port number" not in r.output
    assert tree_hash(workspace) == before


def test_an_unreachable_scheduler_gives_up_within_the_timeout(workspace):
    address = f"tcp://127.0.0.1:{_free_port()}"
    path = workspace / "scheduler.json"
    path.write_text(json.dumps({"address": address, "type": "Scheduler"}))
    before = tree_hash(workspace)
    for scheduler, names in ((address, [address]), (str(path), [address, str(path)])):
        t0 = time.perf_counter()
        r = _fit(workspace, scheduler, "--scheduler-timeout", "1")
        assert time.perf_counter() - t0 < 8
        assert r.exit_code == 1, r.output
        _one_sentence(r, *names, "within 1 s")
    assert tree_hash(workspace) == before
    for command in (["score", "m.zarr", "d.parquet", "--out", "s"], ["sample", "m.zarr", "-n", "5", "--out", "s"],
                    ["report", "m.zarr", "d.parquet", "--out", "r"], ["run", "spec.yaml"]):
        assert "--scheduler-timeout" in CliRunner().invoke(main, [command[0], "--help"]).output


def test_the_default_timeout_is_at_most_ten_seconds(monkeypatch):
    import distributed

    seen = {}

    def fake(**kwargs):
        seen.update(kwargs)
        raise OSError("refused")

    monkeypatch.setattr(distributed, "Client", fake)
    assert DEFAULT_CONNECT_TIMEOUT <= 10 and connect_timeout.get() == DEFAULT_CONNECT_TIMEOUT
    with pytest.raises(SchedulerError, match=r"^tcp://127\.0\.0\.1:1: no Dask scheduler answered within 10 s"):
        with dask_client("tcp://127.0.0.1:1"):
            pass
    assert seen["timeout"] == DEFAULT_CONNECT_TIMEOUT
    with pytest.raises(SchedulerAddressError):
        with dask_client("nowhere.json"):
            pass


def test_a_pipelines_unreachable_scheduler_is_one_sentence(tmp_path):
    write_parquet(tmp_path / "p0.parquet", np.random.default_rng(0).normal(size=(200, 2)), ["u", "v"])
    address = f"tcp://127.0.0.1:{_free_port()}"
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text(yaml.safe_dump({"type": "scheduler", "address": address}))
    for section in ({"scheduler": address}, {"file": str(cluster)}):
        spec = {"name": "t", "source": {"path": str(tmp_path / "*.parquet")},
                "models": [{"name": "fd", "params": {"method": "fd", "n_features": 8, "lam": 0.1}}],
                "outputs": {"store": str(tmp_path / "store.zarr"), "models": str(tmp_path / "models")},
                "cluster": section}
        (tmp_path / "spec.yaml").write_text(yaml.safe_dump(spec))
        before = tree_hash(tmp_path)
        r = CliRunner().invoke(main, ["run", str(tmp_path / "spec.yaml"), "--progress", "none",
                                      "--scheduler-timeout", "1"])
        assert r.exit_code == 1, r.output
        _one_sentence(r, address, "within 1 s")
        assert tree_hash(tmp_path) == before


def test_a_tls_scheduler_without_certificates_is_one_sentence_saying_where_they_go(workspace):
    """A bare tls:// address (or a TLS scheduler's file) carries no certificates; was distributed's TypeError
    "TLS expects a `ssl_context` argument". tests/test_real_cluster.py fits over TLS with a cluster file."""
    before = tree_hash(workspace)
    r = _fit(workspace, "tls://127.0.0.1:1")
    assert r.exit_code == 1, r.output
    _one_sentence(r, "tls://127.0.0.1:1: a TLS scheduler, and no certificates", "cluster/scheduler-tls.yaml")
    assert tree_hash(workspace) == before


def test_scheduler_takes_only_a_scheduler_cluster_file(workspace):
    local, bad = workspace / "local.yaml", workspace / "bad.yaml"
    local.write_text("type: local\nn_workers: 1\n")
    bad.write_text("type: scheduler\nadress: tcp://127.0.0.1:1\n")
    before = tree_hash(workspace)
    r = _fit(workspace, str(local))
    assert r.exit_code == 2, r.output
    _one_sentence(r, f"{local}: a local cluster file; --scheduler takes", "type: scheduler")
    r = _fit(workspace, str(bad))
    assert r.exit_code == 1 and str(bad) in r.output and "adress: not a known key (did you mean 'address'?)" in r.output, r.output
    assert tree_hash(workspace) == before
