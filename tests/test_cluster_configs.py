"""cluster/: every configuration parses and loads into the object it configures (even where it cannot start)."""

import inspect
from pathlib import Path

import pytest
import yaml

from tgpflow.cluster import load_cluster_file

ROOT = Path(__file__).resolve().parents[1] / "cluster"


def test_local_cluster_file_binds_to_localcluster():
    from distributed import LocalCluster

    kind, kw = load_cluster_file(ROOT / "local.yaml")
    assert kind == "local"
    inspect.signature(LocalCluster).bind(**kw)


def test_slurm_file_builds_a_job_script():
    dask_jobqueue = pytest.importorskip("dask_jobqueue", reason="dask-jobqueue is a test dependency")
    kind, kw = load_cluster_file(ROOT / "slurm.yaml")
    assert kind == "slurm"
    jobs = kw.pop("jobs")
    with dask_jobqueue.SLURMCluster(**kw, scheduler_options={"dashboard_address": ":0"}) as cluster:
        script = cluster.job_script()
    assert jobs == 10 and "#SBATCH -p compute" in script and "#SBATCH --exclusive" in script
    assert "source /opt/venvs/tgpflow/bin/activate" in script and "--nthreads 8" in script


def test_cuda_file_names_localcudacluster_arguments():
    kind, kw = load_cluster_file(ROOT / "cuda.yaml")
    assert kind == "cuda"
    # dask-cuda is a GPU extra; its documented keyword arguments
    assert set(kw) <= {"CUDA_VISIBLE_DEVICES", "threads_per_worker", "rmm_pool_size", "device_memory_limit",
                       "n_workers", "memory_limit", "protocol", "enable_tcp_over_ucx"}


def test_tls_file_loads_into_a_security_object():
    from distributed.security import Security

    kind, kw = load_cluster_file(ROOT / "scheduler-tls.yaml")
    assert kind == "scheduler" and kw["address"].startswith("tls://")
    sec = Security(**kw["security"])
    assert sec.require_encryption and sec.tls_ca_file.endswith("ca.pem")


def test_kubernetes_manifests_have_the_operator_kinds_and_run_tgpflow():
    docs = {p.name: yaml.safe_load(p.read_text()) for p in (ROOT / "k8s").glob("*.yaml")}
    assert docs["daskcluster.yaml"]["apiVersion"] == "kubernetes.dask.org/v1"
    assert docs["daskcluster.yaml"]["kind"] == "DaskCluster"
    assert docs["daskcluster.yaml"]["spec"]["worker"]["replicas"] >= 1
    cron = docs["cronjob.yaml"]
    assert cron["kind"] == "CronJob" and cron["spec"]["concurrencyPolicy"] == "Forbid"
    command = cron["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"][0]["command"]
    assert command[:2] == ["tgpflow", "run"]
    job = docs["daskjob.yaml"]
    assert job["kind"] == "DaskJob" and job["spec"]["job"]["spec"]["containers"][0]["args"][:2] == ["tgpflow", "run"]


def test_a_bad_cluster_file_is_refused(tmp_path):
    bad = tmp_path / "c.yaml"
    bad.write_text("type: mesos\n")
    with pytest.raises(ValueError, match="type: local | cuda | slurm | scheduler"):
        load_cluster_file(bad)
