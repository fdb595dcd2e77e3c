"""Cluster files (``cluster/*.yaml``), validated by pydantic v2 like pipeline specs.

A file has ``type: local | cuda | slurm | scheduler`` and keyword arguments of the class it
configures: ``distributed.LocalCluster`` (with the worker keywords it passes on to each
``Nanny``/``Worker``), ``dask_cuda.LocalCUDACluster``, ``dask_jobqueue.SLURMCluster`` (plus
``jobs``: how many jobs to scale to) or ``distributed.Client`` (plus ``address`` and ``security``,
the arguments of ``distributed.security.Security``). Unknown keys are refused
(``extra="forbid"``) and every error names the file and the key; tests/test_cluster_configs.py
checks each field against the real signature of the class it is passed to. Kept apart from
:mod:`tgpflow.cluster` so that the CLI imports pydantic only when a cluster file is read.
"""

from __future__ import annotations

import os
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from tgpflow.errors import TgpflowError, model_keys, validation_message

__all__ = ["ClusterFileError", "LocalClusterFile", "CUDAClusterFile", "SLURMClusterFile", "SchedulerFile",
           "SecurityFile", "CLUSTER_FILES", "read_cluster_file"]

Bytes = int | float | str  # 8GiB, 0.5 (a fraction), 2**30 — as distributed parses memory limits


class ClusterFileError(TgpflowError, ValueError):
    """A cluster file that does not validate; the message names the file and each bad key."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class LocalClusterFile(_Strict):
    """``distributed.LocalCluster``; ``memory_limit`` and ``local_directory`` go on to every worker."""

    type: Literal["local"]
    n_workers: int | None = Field(default=None, ge=0)
    threads_per_worker: int | None = Field(default=None, ge=1)
    processes: bool | None = None
    memory_limit: Bytes | None = None
    local_directory: str | None = None
    dashboard_address: str | None = None
    host: str | None = None
    scheduler_port: int | None = Field(default=None, ge=0)
    protocol: str | None = None
    interface: str | None = None
    silence_logs: int | bool | None = None


class CUDAClusterFile(_Strict):
    """``dask_cuda.LocalCUDACluster`` (one worker per GPU); ``dashboard_address`` goes on to LocalCluster."""

    type: Literal["cuda"]
    CUDA_VISIBLE_DEVICES: str | list[int] | None = None
    n_workers: int | None = Field(default=None, ge=1)
    threads_per_worker: int | None = Field(default=None, ge=1)
    memory_limit: Bytes | None = None
    device_memory_limit: Bytes | None = None
    local_directory: str | None = None
    protocol: str | None = None
    enable_tcp_over_ucx: bool | None = None
    enable_infiniband: bool | None = None
    enable_nvlink: bool | None = None
    rmm_pool_size: Bytes | None = None
    rmm_maximum_pool_size: Bytes | None = None
    rmm_managed_memory: bool | None = None
    rmm_async: bool | None = None
    dashboard_address: str | None = None


class SLURMClusterFile(_Strict):
    """``dask_jobqueue.SLURMCluster`` (the job keywords go on to ``SLURMJob``/``Job``) and ``jobs``."""

    type: Literal["slurm"]
    jobs: int | None = Field(default=None, ge=1, description="Jobs to scale to once the cluster is up.")
    queue: str | None = None
    account: str | None = None
    walltime: str | None = None
    job_cpu: int | None = Field(default=None, ge=1)
    job_mem: str | None = None
    cores: int | None = Field(default=None, ge=1)
    memory: str | None = None
    processes: int | None = Field(default=None, ge=1)
    interface: str | None = None
    local_directory: str | None = None
    log_directory: str | None = None
    death_timeout: float | None = None
    job_name: str | None = None
    python: str | None = None
    shebang: str | None = None
    job_extra_directives: list[str] | None = None
    job_directives_skip: list[str] | None = None
    job_script_prologue: list[str] | None = None
    worker_extra_args: list[str] | None = None
    scheduler_options: dict[str, Any] | None = None


class SecurityFile(_Strict):
    """``distributed.security.Security``: certificate paths are read when the connection opens."""

    require_encryption: bool | None = None
    tls_ca_file: str | None = None
    tls_ciphers: str | None = None
    tls_client_cert: str | None = None
    tls_client_key: str | None = None
    tls_scheduler_cert: str | None = None
    tls_scheduler_key: str | None = None
    tls_worker_cert: str | None = None
    tls_worker_key: str | None = None


class SchedulerFile(_Strict):
    """An existing scheduler: ``distributed.Client`` at ``address`` (``timeout``: seconds to wait for it)."""

    type: Literal["scheduler"]
    address: str = Field(min_length=1, description="tcp://host:port, tls://host:port, …")
    security: SecurityFile | None = None
    timeout: float | None = Field(default=None, gt=0)
    name: str | None = None
    heartbeat_interval: float | None = Field(default=None, gt=0)
    direct_to_workers: bool | None = None
    connection_limit: int | None = Field(default=None, ge=1)


#: ``type`` → the model of the file.
CLUSTER_FILES: dict[str, type[_Strict]] = {"local": LocalClusterFile, "cuda": CUDAClusterFile,
                                           "slurm": SLURMClusterFile, "scheduler": SchedulerFile}


def read_cluster_file(path: str | os.PathLike[str]) -> LocalClusterFile | CUDAClusterFile | SLURMClusterFile | SchedulerFile:
    """Read and validate a cluster file; :class:`ClusterFileError` names the file and every bad key."""
    import yaml

    try:
        with open(path) as fh:
            raw = yaml.safe_load(fh)
    except OSError as exc:
        raise ClusterFileError(f"{path}: cannot read the cluster file ({exc.strerror or exc})") from None
    except yaml.YAMLError as exc:
        raise ClusterFileError(f"{path}: not valid YAML: {exc}") from None
    kind = raw.get("type") if isinstance(raw, dict) else None
    if not isinstance(kind, str) or kind not in CLUSTER_FILES:
        got = f"type: {kind!r}" if isinstance(raw, dict) else f"a {type(raw).__name__}"
        raise ClusterFileError(f"{path}: a cluster file needs type: {' | '.join(CLUSTER_FILES)}; got {got}")
    try:
        return CLUSTER_FILES[kind].model_validate(raw)
    except ValidationError as exc:
        raise ClusterFileError(validation_message(exc, str(path), f"the {kind} cluster file",
                                                  model_keys(CLUSTER_FILES[kind]))) from None
