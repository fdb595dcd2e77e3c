"""cluster/: every configuration parses and loads into the object it configures (even where it cannot start).

The keys a cluster file accepts (tgpflow.cluster_files) are checked against the real signatures of
the classes they are passed to — named parameters only: ``LocalCluster(**worker_kwargs)``,
``SLURMCluster(**job_kwargs)``, ``Client(**kwargs)`` would bind any key.
"""

import inspect
import re
from pathlib import Path

import pytest
import yaml

from tgpflow.cluster import cluster_from_file, load_cluster_file
from tgpflow.cluster_files import CLUSTER_FILES, ClusterFileError, SecurityFile

ROOT = Path(__file__).resolve().parents[1] / "cluster"


def _named(*classes):
    """The keyword arguments each of ``classes`` names (not those a ``**kwargs`` would swallow)."""
    skip = (inspect.Parameter.VAR_KEYWORD, inspect.Parameter.VAR_POSITIONAL)
    return set().union(*({n for n, p in inspect.signature(c).parameters.items() if p.kind not in skip}
                         for c in classes))


def _accepted(kind):
    """Every key the real class takes for a cluster file of ``kind`` (following its ``**kwargs``)."""
    from distributed import Client, LocalCluster, Nanny, Worker

    if kind == "local":  # LocalCluster(**worker_kwargs) → Nanny or Worker (processes=False): both must take it
        return _named(LocalCluster) | (_named(Nanny) & _named(Worker))
    if kind == "cuda":  # LocalCUDACluster(**kwargs) → LocalCluster
        dask_cuda = pytest.importorskip("dask_cuda", reason="dask-cuda is the GPU extra")
        return _named(dask_cuda.LocalCUDACluster, LocalCluster)
    if kind == "slurm":  # SLURMCluster(**job_kwargs) → SLURMJob(**base_class_kwargs) → Job; jobs is tgpflow's
        from dask_jobqueue import SLURMCluster
        from dask_jobqueue.core import Job
        from dask_jobqueue.slurm import SLURMJob

        return _named(SLURMCluster, SLURMJob, Job) | {"jobs"}
    return _named(Client)  # scheduler: address, security, timeout, … are Client's


@pytest.mark.parametrize("kind", sorted(CLUSTER_FILES))
def test_every_key_a_cluster_file_accepts_is_a_named_argument_of_its_class(kind):
    accepted = _accepted(kind)
    fields = set(CLUSTER_FILES[kind].model_fields) - {"type"}
    assert fields <= accepted, sorted(fields - accepted)
    assert "n_worker" not in accepted and "tls_ca_fil" not in accepted  # the check can refuse a key
    if kind == "scheduler":
        from distributed.security import Security

        assert set(SecurityFile.model_fields) <= set(Security.__slots__)  # what Security(**kw) itself checks


@pytest.mark.parametrize("name", ["local.yaml", "cuda.yaml", "slurm.yaml", "scheduler-tls.yaml"])
def test_every_shipped_file_sets_only_named_arguments(name):
    kind, kw = load_cluster_file(ROOT / name)
    assert set(kw) <= _accepted(kind)


@pytest.mark.parametrize("text, message", [
    ("type: local\nn_worker: 2\n",
     r"the local cluster file is not valid \(1 error\):\n  n_worker: not a known key \(did you mean 'n_workers'\?\)"),
    ("type: local\nthreads_per_worker: many\n", r"\n  threads_per_worker: Input should be a valid integer"),
    ("type: slurm\njobs: 0\nqueue: [a]\n", r"\(2 errors\):\n  jobs: .*greater than or equal to 1\n  queue: "),
    ("type: scheduler\nsecurity: {tls_ca_fil: ca.pem}\n",
     r"\n  address: Field required\n  security.tls_ca_fil: not a known key \(did you mean 'tls_ca_file'\?\)"),
    ("- type: local\n", r"a cluster file needs type: local \| cuda \| slurm \| scheduler; got a list"),
    ("type: local\n  bad: [\n", r"not valid YAML"),
])
def test_an_unknown_or_mistyped_key_is_refused_naming_the_file_and_the_key(tmp_path, text, message):
    bad = tmp_path / "c.yaml"
    bad.write_text(text)
    with pytest.raises(ClusterFileError, match=f"^{re.escape(str(bad))}: (.|\n)*{message}"):
        load_cluster_file(bad)


def test_a_local_cluster_file_starts_that_cluster(tmp_path):
    spec = tmp_path / "one.yaml"
    spec.write_text("type: local\nn_workers: 1\nthreads_per_worker: 2\nprocesses: false\ndashboard_address: ':0'\n")
    with cluster_from_file(spec) as client:
        assert list(client.nthreads().values()) == [2]


def _malloc_env():
    import os

    return os.environ.get("MALLOC_MMAP_THRESHOLD_"), os.environ.get("MALLOC_TRIM_THRESHOLD_")


def test_worker_processes_started_here_keep_glibcs_heap_for_large_blocks(tmp_path, monkeypatch):
    """The nanny's MALLOC_TRIM_THRESHOLD_ would leave every block above 128 KiB a fresh mmap (cluster.worker_malloc);
    worker processes tgpflow starts get MALLOC_MMAP_THRESHOLD_ beside it; a value in the Dask config or in the
    environment (distributed lets the environment win) is kept."""
    import dask
    import distributed  # noqa: F401 - its defaults in the Dask config

    from tgpflow.cluster import WORKER_MMAP_THRESHOLD, dask_client

    spec = tmp_path / "procs.yaml"
    spec.write_text("type: local\nn_workers: 1\nthreads_per_worker: 1\nprocesses: true\ndashboard_address: null\n")
    trim = str(dask.config.get("distributed.nanny.pre-spawn-environ.MALLOC_TRIM_THRESHOLD_"))
    # the nanny writes its variables into this process's environment (distributed's "poisoning"): start clean
    monkeypatch.delenv("MALLOC_MMAP_THRESHOLD_", raising=False)
    with cluster_from_file(spec) as client:
        assert list(client.run(_malloc_env).values()) == [(str(WORKER_MMAP_THRESHOLD), trim)]
    monkeypatch.delenv("MALLOC_MMAP_THRESHOLD_", raising=False)
    with dask.config.set({"distributed.nanny.pre-spawn-environ.MALLOC_MMAP_THRESHOLD_": 1 << 20}), \
            dask_client(local="cluster", n_workers=1) as client:
        assert list(client.run(_malloc_env).values()) == [(str(1 << 20), trim)]
    assert dask.config.get("distributed.nanny.pre-spawn-environ.MALLOC_MMAP_THRESHOLD_", None) is None  # restored
    monkeypatch.setenv("MALLOC_MMAP_THRESHOLD_", str(1 << 21))
    with dask_client(local="cluster", n_workers=1) as client:
        assert list(client.run(_malloc_env).values()) == [(str(1 << 21), trim)]


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
    # dask-cuda is a GPU extra; its documented keyword arguments (the real signature: above, where installed)
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


def _schema_errors(value, schema, where=""):
    """Where ``value`` breaks a CRD's structural openAPIV3Schema: unknown keys (Kubernetes rejects or prunes
    them), wrong types, missing required keys. The subset of OpenAPI that CRDs use; enough to refuse a typo."""
    if "anyOf" in schema or schema.get("x-kubernetes-int-or-string"):
        ok = isinstance(value, (int, str)) if schema.get("x-kubernetes-int-or-string") else any(
            not _schema_errors(value, s, where) for s in schema["anyOf"])
        return [] if ok else [f"{where}: {value!r} fits none of {schema.get('anyOf')}"]
    kind = schema.get("type")
    types = {"object": dict, "array": list, "string": str, "integer": int, "boolean": bool, "number": (int, float)}
    if kind in types and (not isinstance(value, types[kind]) or (kind == "integer" and isinstance(value, bool))):
        return [f"{where}: {value!r} is not a {kind}"]
    errors = []
    if kind == "object" and isinstance(value, dict):
        props, extra = schema.get("properties", {}), schema.get("additionalProperties")
        errors += [f"{where}.{k}: required" for k in schema.get("required", []) if k not in value]
        for k, v in value.items():
            if k in props:
                errors += _schema_errors(v, props[k], f"{where}.{k}")
            elif isinstance(extra, dict):
                errors += _schema_errors(v, extra, f"{where}.{k}")
            elif not schema.get("x-kubernetes-preserve-unknown-fields") and (props or extra is False):
                errors.append(f"{where}.{k}: unknown field")
    if kind == "array" and "items" in schema:
        for i, v in enumerate(value):
            errors += _schema_errors(v, schema["items"], f"{where}[{i}]")
    return errors


@pytest.mark.parametrize("name", ["daskcluster.yaml", "daskjob.yaml"])
def test_kubernetes_manifests_fit_the_operators_resource_schemas(name):
    """The DaskCluster/DaskJob manifests against the CRDs dask-kubernetes ships (what its operator, and
    ``KubeCluster(custom_cluster_spec=...)``, accept): every key a field of the resource, of its type."""
    pytest.importorskip("dask_kubernetes", reason="dask-kubernetes is the cluster extra: pip install 'tgpflow[cluster]'")
    from importlib.resources import files

    from dask_kubernetes.operator import KubeCluster

    doc = yaml.safe_load((ROOT / "k8s" / name).read_text())
    crds = files("dask_kubernetes.operator") / "deployment" / "helm" / "dask-kubernetes-operator" / "crds"
    crd = yaml.safe_load((crds / name).read_text())
    assert crd["spec"]["names"]["kind"] == doc["kind"] and doc["apiVersion"] == f"{crd['spec']['group']}/v1"
    schema = next(v for v in crd["spec"]["versions"] if v["name"] == "v1")["schema"]["openAPIV3Schema"]
    assert _schema_errors({"spec": doc["spec"]}, schema) == []
    misspelt = yaml.safe_load((ROOT / "k8s" / name).read_text())
    (misspelt["spec"].get("cluster", misspelt)["spec"]["worker"]).update(replica=2)
    assert _schema_errors({"spec": misspelt["spec"]}, schema)  # the check can refuse a key
    if name == "daskcluster.yaml":
        inspect.signature(KubeCluster).bind(custom_cluster_spec=doc, namespace=doc["metadata"]["namespace"])


def test_a_bad_cluster_file_is_refused(tmp_path):
    bad = tmp_path / "c.yaml"
    bad.write_text("type: mesos\n")
    with pytest.raises(ValueError, match="type: local | cuda | slurm | scheduler"):
        load_cluster_file(bad)
