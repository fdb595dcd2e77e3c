"""Array namespaces and device handling (docs/gpu.md).

Array code in tgpflow is written once against the array API standard
(``array_api_compat.array_namespace``) and runs on NumPy, CuPy or ``array_api_strict``.
This module owns the namespace lookup, the two host transfers and the choice of device:

* :func:`to_device` moves a host chunk onto the device once, inside the task that reads it;
* :func:`to_numpy` brings a result back to the host (statistics after a chunk's pass, a block of
  log densities). Nothing else on the device path converts a device array to NumPy: the tests run
  it on ``array_api_strict``'s second device, which refuses any other conversion.

NumPy arrays additionally take the fast CPU kernels of :mod:`tgpflow.features.sincos` and the BLAS
``dsyrk`` of :mod:`tgpflow.stats.tgp`; CuPy arrays take cuBLAS ``dsyrk`` (:mod:`tgpflow.stats.tgp_cupy`).
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import importlib.util
from typing import Any

import numpy as np
from array_api_compat import array_namespace, is_array_api_strict_namespace, is_cupy_namespace, is_numpy_namespace
from array_api_compat import device as array_device

__all__ = ["namespace", "on_a_device", "put_arrays", "is_numpy", "is_cupy", "device_of", "to_numpy", "to_device",
           "DeviceTarget", "on_device", "resolve_device", "device_target", "gpu_visible", "gpu_probe", "GPU_EXTRA"]

#: What to install for ``device="gpu"`` (the one sentence a missing CuPy gets).
GPU_EXTRA = 'pip install "tgpflow[gpu]" (CuPy and dask-cuda)'


def namespace(*arrays: Any) -> Any:
    """The array API namespace shared by ``arrays`` (NumPy, CuPy, array_api_strict, …)."""
    return array_namespace(*arrays)


def is_numpy(xp: Any) -> bool:
    """True when ``xp`` is NumPy (or its array-api-compat wrapper)."""
    return is_numpy_namespace(xp)


def is_cupy(xp: Any) -> bool:
    """True when ``xp`` is CuPy (or its array-api-compat wrapper)."""
    return is_cupy_namespace(xp)


def on_a_device(x: Any) -> bool:
    """True for an array of a namespace other than NumPy's (CuPy, array_api_strict): the device path takes it."""
    if isinstance(x, np.ndarray) or not hasattr(x, "shape"):
        return False
    try:  # CuPy's arrays have no __array_namespace__: array_api_compat knows them
        return not is_numpy(namespace(x))
    except TypeError:  # not an array of any namespace (a DataFrame)
        return False


def put_arrays(arrays: dict[str, np.ndarray], xp: Any, dev: Any) -> dict[str, Any]:
    """Host arrays as float64 arrays of namespace ``xp`` on device ``dev`` (a model's or a basis' constants)."""
    return {k: xp.asarray(np.ascontiguousarray(v, dtype=np.float64), device=dev) for k, v in arrays.items()}


def device_of(x: Any) -> Any:
    """The device ``x`` lives on; new arrays for it are made with ``device=device_of(x)``."""
    return array_device(x)


def to_numpy(x: Any) -> np.ndarray:
    """A host NumPy copy of any array-API array: the documented transfer back from a device."""
    if isinstance(x, np.ndarray):
        return x
    if hasattr(x, "get"):  # CuPy
        return np.asarray(x.get())
    if is_array_api_strict_namespace(array_namespace(x)):  # its other devices refuse np.asarray
        import array_api_strict

        return np.asarray(x.to_device(array_api_strict.Device("CPU_DEVICE")))
    return np.asarray(x)


@dataclasses.dataclass(frozen=True)
class DeviceTarget:
    """Where a task's arrays go: an array-API module by name (so the target pickles to any worker) and one of its
    devices (None: the module's current device, e.g. CuPy's current GPU)."""

    module: str
    device: str | None = None

    def available(self) -> bool:
        """Whether this process can put arrays there (a CPU worker of a mixed cluster cannot put them on a GPU)."""
        if self.module == "cupy":
            return gpu_visible()
        return importlib.util.find_spec(self.module) is not None

    def put(self, rows: np.ndarray) -> Any:
        """``rows`` (host float64) as an array on this device."""
        mod = importlib.import_module(self.module)
        if self.device is None:
            return mod.asarray(rows)
        return mod.asarray(rows, device=mod.Device(self.device))


def to_device(rows: np.ndarray, target: DeviceTarget | None) -> Any:
    """``rows`` moved to ``target`` (unchanged without one): once per chunk, inside the task that reads it. Raises,
    naming the process, where the target is not available (a task of the pass sent to a worker without a GPU)."""
    if target is None:
        return rows
    if not target.available():
        where = _process_name()
        raise RuntimeError(f"device='gpu': {where} has no GPU ({gpu_probe()[1]}); give the cluster's GPU workers a "
                           f"GPU resource (dask-cuda's LocalCUDACluster and `type: cuda` cluster files do) so that "
                           f"device tasks go to them, or use device='cpu'")
    return target.put(np.ascontiguousarray(rows, dtype=np.float64))


def _process_name() -> str:
    """This process as a message names it: its Dask worker, or this machine."""
    try:
        from distributed import get_worker

        return f"worker {get_worker().address}"
    except (ImportError, ValueError):
        return "this machine"


def on_device(target: DeviceTarget, fn: Any, rows: np.ndarray, *args: Any) -> Any:
    """``fn(rows on target, *args)``: a chunk function run on the device (its result comes back to the host)."""
    return fn(to_device(rows, target), *args)


@functools.cache
def gpu_probe() -> tuple[bool, str]:
    """(whether CuPy imports and sees at least one CUDA device, why not), asked once per process."""
    try:
        import cupy

        count = cupy.cuda.runtime.getDeviceCount()
    except ImportError:
        return False, "CuPy is not installed"
    except Exception as exc:  # a driver or runtime error: the user needs its words, not an install hint
        return False, f"CuPy sees no GPU: {type(exc).__name__}: {exc}"
    return (count > 0), ("" if count > 0 else "CuPy sees no CUDA device")


def gpu_visible() -> bool:
    """Whether CuPy imports and sees at least one CUDA device on this machine."""
    return gpu_probe()[0]


def resolve_device(device: str, supported: bool = True, *, cluster_gpus: bool | None = None) -> str:
    """Resolve ``device="auto"|"cpu"|"gpu"`` to where this estimator computes (docs/gpu.md, "Choosing the device").

    ``cluster_gpus``: whether the active distributed cluster's workers advertise a ``GPU`` resource (None: no
    cluster; the chunks then run on this machine). ``"auto"`` is the GPU when the estimator's family runs there
    (``supported``) and the machines that run its tasks have one: the cluster's workers where there is a cluster,
    this machine otherwise; else the CPU. ``"gpu"`` needs a GPU on this machine or GPU workers: without it raises
    with the reason and the extra to install; for a family without a device path it raises naming
    ``device='cpu'``.
    """
    if device not in ("auto", "cpu", "gpu"):
        raise ValueError(f"device must be 'auto', 'cpu' or 'gpu'; got {device!r}")
    if device == "cpu":
        return "cpu"
    if device == "auto":
        here = gpu_visible() if cluster_gpus is None else cluster_gpus
        return "gpu" if supported and here else "cpu"
    if not supported:
        raise ValueError("device='gpu' runs GPTiltedDensity and the Nyström kernel models (NystromKEF, "
                         "ScoreEstimator; without n_components) in this release; this model computes on the CPU: "
                         "use device='cpu' (or 'auto')")
    if not (cluster_gpus or gpu_visible()):
        raise ValueError(f"device='gpu' needs CuPy and a visible CUDA GPU ({gpu_probe()[1]}): {GPU_EXTRA}, or use "
                         f"device='cpu'")
    return "gpu"


def device_target(device: str, supported: bool = True, *, cluster_gpus: bool | None = None) -> DeviceTarget | None:
    """The :class:`DeviceTarget` a resolved ``device`` sends chunks to: CuPy's current GPU, or None (the host)."""
    return DeviceTarget("cupy") if resolve_device(device, supported, cluster_gpus=cluster_gpus) == "gpu" else None
