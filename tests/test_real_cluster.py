"""A real multi-process cluster (issue 19.4): ``dask scheduler`` and two ``dask worker`` processes started
from their command lines, ``tgpflow fit --scheduler`` and ``tgpflow run`` run as subprocesses against them
(plain TCP, and once over mutual TLS with certificates made here by ``openssl``), one worker SIGKILLed
mid-pass — and every model is the threaded one, bit for bit (docs/architecture.md, "Determinism": the statistics are
a tree reduction whose shape depends only on the number of chunks, so which worker computed a chunk, or
computed it twice, changes nothing).

Workers run under a nanny, as ``dask worker`` does by default: it is how clusters are deployed, it starts
every worker with single-threaded BLAS (``distributed.nanny.pre-spawn-environ``), and it restarts a killed
worker — the kill below is of the worker process, as an OOM kill or a segfault would be, not of the nanny.

Everything binds to 127.0.0.1 on ports the OS picks (``--port 0``; the address is read back from the
scheduler file) and lives in ``tmp_path``, so xdist workers can run these side by side.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import yaml
from click.testing import CliRunner

from tgpflow.cli import main
from tgpflow.io.artifact import read_artifact
from tgpflow.pipeline.versions import ModelVersions
from tests.conftest import write_parquet

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[1]
ROWS, ROW_GROUP = 20_000, 250  # 80 chunks: a pass long enough to kill a worker in, short on 2 cores
FIT = ["--model", "fd", "--n-features", "64", "--lam", "0.1", "--bandwidth", "1.0", "--progress", "none"]
START_TIMEOUT = 60.0  # seconds for the scheduler file and both workers, on a loaded 2-core machine


def _env(**extra: str) -> dict[str, str]:
    """The subprocesses' environment: this checkout's tgpflow first (workers unpickle its functions)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("DASK_")}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p)
    return {**env, **extra}


# -- the cluster -----------------------------------------------------------------------------------------


@dataclasses.dataclass
class Cluster:
    """A scheduler and two workers, each a process group of its own; ``logs`` holds their output."""

    scheduler_file: Path
    address: str
    logs: Path
    procs: dict[str, subprocess.Popen]
    security: object | None = None

    def client(self):
        from distributed import Client

        return Client(self.address, security=self.security, timeout=30)

    def output(self) -> str:
        """Every process's exit status and the tail of its log, for a failure message."""
        parts = []
        for name, proc in self.procs.items():
            text = (self.logs / f"{name}.log").read_text(errors="replace")
            parts.append(f"--- {name} (pid {proc.pid}, exit {proc.poll()}) ---\n{text[-3000:]}")
        return "\n".join(parts)


def _start(name: str, args: list[str], logs: Path, env: dict[str, str]) -> subprocess.Popen:
    log = open(logs / f"{name}.log", "w")  # noqa: SIM115 - the child keeps writing to it
    try:
        return subprocess.Popen([sys.executable, "-m", *args], stdout=log, stderr=subprocess.STDOUT, env=env,
                                cwd=logs, start_new_session=True)  # its own process group: killed as one
    finally:
        log.close()


def _stop(procs: dict[str, subprocess.Popen]) -> None:
    """SIGKILL every process group (a nanny's worker is in its group), then reap the leaders."""
    for proc in procs.values():
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
    for proc in procs.values():
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=10)


@contextlib.contextmanager
def real_cluster(root: Path, tls: dict[str, str] | None = None) -> Iterator[Cluster]:
    """``dask scheduler`` + two ``dask worker --nworkers 1 --nthreads 1``; torn down whatever happens."""
    logs = root / "logs"
    logs.mkdir(parents=True)
    scheduler_file = root / "scheduler.json"
    flags = []
    security = None
    if tls:
        from distributed.security import Security

        flags = ["--tls-ca-file", tls["ca"], "--tls-cert", tls["cert"], "--tls-key", tls["key"]]
        security = Security(tls_ca_file=tls["ca"], tls_client_cert=tls["cert"], tls_client_key=tls["key"],
                            require_encryption=True)
    env = _env()
    procs: dict[str, subprocess.Popen] = {}
    cluster = Cluster(scheduler_file, "", logs, procs, security)
    try:
        procs["scheduler"] = _start("scheduler", [
            "distributed.cli.dask_scheduler", "--host", "127.0.0.1", "--port", "0", "--no-dashboard",
            "--scheduler-file", str(scheduler_file), *(["--protocol", "tls"] if tls else []), *flags], logs, env)
        deadline = time.monotonic() + START_TIMEOUT
        while not scheduler_file.exists() or not scheduler_file.read_text().strip().endswith("}"):
            if procs["scheduler"].poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"the scheduler wrote no scheduler file within {START_TIMEOUT:g} s\n{cluster.output()}")
            time.sleep(0.1)
        cluster.address = json.loads(scheduler_file.read_text())["address"]
        for i in range(2):
            procs[f"worker-{i}"] = _start(f"worker-{i}", [
                "distributed.cli.dask_worker", "--scheduler-file", str(scheduler_file), "--host", "127.0.0.1",
                "--nworkers", "1", "--nthreads", "1", "--no-dashboard", "--name", f"w{i}",
                "--local-directory", str(root / f"w{i}"), *flags], logs, env)
        with cluster.client() as client:
            try:
                client.wait_for_workers(2, timeout=max(1.0, deadline - time.monotonic()))
            except TimeoutError:
                pytest.fail(f"{len(client.scheduler_info()['workers'])} of 2 workers joined within "
                            f"{START_TIMEOUT:g} s\n{cluster.output()}")
        yield cluster
    finally:
        _stop(procs)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory) -> Iterator[Cluster]:
    with real_cluster(tmp_path_factory.mktemp("cluster")) as c:
        yield c


# -- data and references --------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    """20k rows, d = 2, in row groups of 250 (80 chunks), and the threaded model of it (``model.zarr``)."""
    ws = tmp_path_factory.mktemp("real-cluster-data")
    rng = np.random.default_rng(19)
    X = np.concatenate([rng.normal(size=(ROWS // 2, 2)), rng.normal([2.0, -1.0], 0.5, size=(ROWS // 2, 2))])
    write_parquet(ws / "data.parquet", X, ["u", "v"], row_group_size=ROW_GROUP)
    r = CliRunner().invoke(main, ["--json", "fit", str(ws / "data.parquet"), "--out", str(ws / "model.zarr"), *FIT,
                                  "--local", "threads"])
    assert r.exit_code == 0, r.output
    return ws


def _arrays(path: Path) -> dict[str, np.ndarray]:
    """A model's stored arrays, read by tgpflow's loader (checksums verified; never unpickled)."""
    return read_artifact(path)[1]


def _assert_bitwise(got: Path, expected: Path) -> None:
    a, b = _arrays(got), _arrays(expected)
    assert a.keys() == b.keys()
    differ = [k for k in a if not np.array_equal(a[k], b[k])]
    assert not differ, f"{got} differs from {expected} in {differ}"


def _command() -> list[str]:
    """``tgpflow`` in a fresh process of this interpreter: the console script when installed."""
    script = Path(sys.executable).with_name("tgpflow")
    return [str(script)] if script.exists() else [sys.executable, "-c", "from tgpflow.cli import main; main()"]


def _fit_on(cluster: Cluster, data: Path, out: Path, scheduler: Path | None = None) -> subprocess.Popen:
    """``tgpflow fit --scheduler`` (the cluster's scheduler file unless ``scheduler`` is given), started."""
    return subprocess.Popen([*_command(), "--json", "fit", str(data / "data.parquet"), "--out", str(out), *FIT,
                             "--scheduler", str(scheduler or cluster.scheduler_file)], env=_env(), cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _finish(proc: subprocess.Popen, cluster: Cluster, timeout: float = 120) -> dict:
    """The JSON line a finished ``tgpflow`` command printed (it must succeed)."""
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        pytest.fail(f"tgpflow did not finish in {timeout:g} s\n{err[-3000:]}\n{cluster.output()}")
    assert proc.returncode == 0, f"exit {proc.returncode}\n{err[-3000:]}\n{cluster.output()}"
    return json.loads(out.strip().splitlines()[-1])


# -- the tests -------------------------------------------------------------------------------------------


def _transitions(client) -> dict[str, int]:
    """Each worker's count of task state transitions so far (it grows with every task the worker runs)."""
    return client.run(lambda dask_worker: dask_worker.state.transition_counter)


def test_fit_on_a_real_cluster_equals_the_threaded_fit_bit_for_bit(cluster, data, tmp_path):
    with cluster.client() as client:
        before = _transitions(client)
        result = _finish(_fit_on(cluster, data, tmp_path / "m.zarr"), cluster)
        after = _transitions(client)
    assert result["rows"] == ROWS
    assert after.keys() == before.keys() and all(after[w] > before[w] for w in after)  # both workers ran tasks
    _assert_bitwise(tmp_path / "m.zarr", data / "model.zarr")


def test_a_worker_killed_mid_pass_changes_nothing(cluster, data, tmp_path):
    with cluster.client() as client:
        pids = client.run(os.getpid)  # worker address → its process (the nanny's child)
        proc = _fit_on(cluster, data, tmp_path / "m.zarr")
        victim = None
        deadline = time.monotonic() + 90
        while victim is None and proc.poll() is None and time.monotonic() < deadline:
            processing = client.processing()
            busy = {w: sum("tgp_chunk_stats" in str(k) for k in keys) for w, keys in processing.items()}
            if any(busy.values()):
                victim = max(busy, key=busy.get)
                held = len(client.has_what([victim])[victim])  # results it held, lost with it
                os.kill(pids[victim], signal.SIGKILL)
            else:
                time.sleep(0.005)
        assert victim is not None, "the pass ended before a worker could be killed"
        result = _finish(proc, cluster)
        assert victim not in client.scheduler_info()["workers"]  # it was lost (its nanny starts a new one)
        client.wait_for_workers(2, timeout=START_TIMEOUT)  # the cluster as it was, for the other tests
    print(f"killed {victim} while it computed {busy[victim]} chunk statistics and held {held} results")
    assert result["rows"] == ROWS
    _assert_bitwise(tmp_path / "m.zarr", data / "model.zarr")


# -- TLS -------------------------------------------------------------------------------------------------


def _certificates(directory: Path) -> dict[str, str]:
    """A CA and one certificate it signs for 127.0.0.1 (scheduler, workers and client alike), by ``openssl``."""
    openssl = shutil.which("openssl")
    if openssl is None:
        pytest.skip("no openssl binary to make test certificates with")
    directory.mkdir()
    ca, ca_key, cert, key, csr = (str(directory / n) for n in ("ca.pem", "ca-key.pem", "cert.pem", "key.pem", "req.csr"))
    ext = directory / "leaf.ext"
    ext.write_text("basicConstraints = critical, CA:FALSE\nkeyUsage = critical, digitalSignature, keyEncipherment\n"
                   "extendedKeyUsage = serverAuth, clientAuth\nsubjectAltName = IP:127.0.0.1, DNS:localhost\n"
                   "subjectKeyIdentifier = hash\nauthorityKeyIdentifier = keyid\n")
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    for cmd in ([openssl, "req", "-x509", *ec, "-keyout", ca_key, "-out", ca, "-days", "2", "-subj", "/CN=tgpflow test CA",
                 "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign"],
                [openssl, "req", *ec, "-keyout", key, "-out", csr, "-subj", "/CN=127.0.0.1"],
                [openssl, "x509", "-req", "-in", csr, "-CA", ca, "-CAkey", ca_key, "-CAcreateserial", "-out", cert,
                 "-days", "2", "-extfile", str(ext)]):
        done = subprocess.run(cmd, capture_output=True, text=True)
        assert done.returncode == 0, f"{' '.join(cmd)}\n{done.stderr}"
    return {"ca": ca, "cert": cert, "key": key}


def test_fit_over_mutual_tls_equals_the_threaded_fit_bit_for_bit(data, tmp_path):
    """The certificates reach ``fit`` in a cluster file of type: scheduler (the shape of
    cluster/scheduler-tls.yaml); the scheduler file alone carries none, and is refused saying so."""
    tls = _certificates(tmp_path / "tls")
    with real_cluster(tmp_path / "cluster", tls) as cluster:
        assert cluster.address.startswith("tls://")
        tls_file = tmp_path / "scheduler-tls.yaml"
        tls_file.write_text(yaml.safe_dump({"type": "scheduler", "address": cluster.address, "security": {
            "tls_ca_file": tls["ca"], "tls_client_cert": tls["cert"], "tls_client_key": tls["key"],
            "require_encryption": True}}))
        result = _finish(_fit_on(cluster, data, tmp_path / "m.zarr", scheduler=tls_file), cluster)
        bare = CliRunner().invoke(main, ["--json", "fit", str(data / "data.parquet"), "--out",
                                         str(tmp_path / "bare.zarr"),
                                         *FIT, "--scheduler", str(cluster.scheduler_file)])
    assert result["rows"] == ROWS
    _assert_bitwise(tmp_path / "m.zarr", data / "model.zarr")
    assert bare.exit_code == 1 and not (tmp_path / "bare.zarr").exists(), bare.output
    assert bare.output.strip().splitlines() == [
        f"Error: {cluster.address} (from {cluster.scheduler_file}): a TLS scheduler, and no certificates to connect "
        f"with; pass --scheduler a cluster file with its security (cluster/scheduler-tls.yaml), or set "
        f"distributed.comm.tls (ca-file, client.cert, client.key) in the Dask configuration"]


# -- a pipeline ------------------------------------------------------------------------------------------


def _spec(data: Path, out: Path, cluster: dict) -> Path:
    """A pipeline over the data's partition (one FD model, fixed bandwidth), writing under ``out``."""
    out.mkdir()
    spec = {"name": "real", "source": {"path": str(data / "*.parquet")},
            "models": [{"name": "fd", "params": {"method": "fd", "n_features": 64, "lam": 0.1, "bandwidth": 1.0}}],
            "outputs": {"store": str(out / "store.zarr"), "models": str(out / "models")}, "cluster": cluster}
    (out / "spec.yaml").write_text(yaml.safe_dump(spec))
    return out / "spec.yaml"


def _pipeline_arrays(out: Path) -> dict[str, dict[str, np.ndarray]]:
    """The arrays of every artifact a run wrote: its statistics store's and its current model's."""
    current = ModelVersions(out / "models" / "fd").current()
    paths = [*sorted((out / "store.zarr").glob("*/**/*.zarr")), out / "models" / "fd" / f"{current}.zarr"]
    return {p.relative_to(out).as_posix(): _arrays(p) for p in paths}


def test_a_pipeline_run_on_a_real_cluster_equals_the_threaded_run_bit_for_bit(cluster, data, tmp_path):
    threaded = _spec(data, tmp_path / "threads", {"kind": "threads"})
    r = CliRunner().invoke(main, ["--json", "run", str(threaded), "--progress", "none"])
    assert r.exit_code == 0, r.output
    spec = _spec(data, tmp_path / "cluster", {"scheduler": str(cluster.scheduler_file)})
    proc = subprocess.Popen([*_command(), "--json", "run", str(spec), "--progress", "none"], env=_env(), cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    result = _finish(proc, cluster)
    assert result["rows"] == {"fd": ROWS} and result["versions"] == {"fd": "v000001"}
    expected, got = _pipeline_arrays(tmp_path / "threads"), _pipeline_arrays(tmp_path / "cluster")
    assert got.keys() == expected.keys() and len(got) >= 4  # draws, parts, totals, the model
    differ = [(name, k) for name in got for k in got[name] if not np.array_equal(got[name][k], expected[name][k])]
    assert not differ, differ
