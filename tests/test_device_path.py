"""The device path (docs/gpu.md) on the CPU: array_api_strict's second device stands in for a GPU.

``array_api_strict.Device("device1")`` refuses to combine its arrays with host ones and refuses ``np.asarray`` of
them, so these tests fail if the device path mixes a host array into a device computation or converts a device
array to NumPy anywhere but the documented transfer (:func:`tgpflow.core.backend.to_numpy`). Every result is
checked against the NumPy path on the same rows.
"""

import array_api_strict as xps
import dask.array as da
import numpy as np
import pytest

import tgpflow.core.backend as backend
import tgpflow.stats.kef as kef_module
from tgpflow import GPTiltedDensity, NystromKEF, ScoreEstimator
from tgpflow.core.backend import DeviceTarget, device_target, resolve_device, to_device, to_numpy
from tgpflow.features.mixture_base import GaussianMixtureBase
from tgpflow.features.noise import noise_levels
from tgpflow.features.nystrom import NystromBasis
from tgpflow.stats.kef import diag_chunk_stats, diag_memory, kef_chunk_stats, kef_memory, lite_chunk_stats, lite_memory
from tgpflow.stats.ncfd import ncfd_chunk_stats
from tgpflow.stats.tgp import tgp_chunk_stats

DEVICE1 = DeviceTarget("array_api_strict", "device1")
FIELDS = ("gram", "u", "U", "psi")


#: The rows and feature draw of the ``rows`` and ``draw`` fixtures (tests/conftest.py).
BLOBS = (1_000, 48)


def _close(a, b, rtol):
    np.testing.assert_allclose(a, b, rtol=0, atol=rtol * np.abs(b).max())


def test_the_guard_refuses_a_stray_conversion_and_mixing():
    """What makes the tests below able to fail: the stand-in device refuses both mistakes."""
    x = to_device(np.ones((3, 2)), DEVICE1)
    with pytest.raises(RuntimeError, match="NumPy"):
        np.asarray(x)
    with pytest.raises(ValueError, match="different devices"):
        x + xps.asarray(np.ones((3, 2)))
    np.testing.assert_array_equal(to_numpy(x), np.ones((3, 2)))  # the documented transfer


@pytest.mark.parametrize("precision", ["float64", "mixed"])
def test_chunk_statistics_on_a_device_equal_the_host_ones(rows, draw, precision):
    host = tgp_chunk_stats(rows, draw, precision=precision, with_phi_gram=True)
    dev = tgp_chunk_stats(to_device(rows, DEVICE1), draw, block_bytes=200_000, precision=precision,
                          with_phi_gram=True)
    rtol = 1e-12 if precision == "float64" else 1e-6  # mixed: float32 products rounded either way
    for name in (*FIELDS, "phi_gram"):
        _close(getattr(dev, name), getattr(host, name), rtol if name in ("gram", "phi_gram") else 1e-12)
    _close(dev.moments.m2, host.moments.m2, 1e-12)


def test_mixture_base_and_ncfd_statistics_on_a_device(rows, draw):
    mixture = GaussianMixtureBase(np.array([0.7, 0.3]), np.array([[0.0] * 3, [2.0] * 3]),
                                  np.stack([np.eye(3), 0.25 * np.eye(3)]))
    host = tgp_chunk_stats(rows, draw, mixture=mixture)
    dev = tgp_chunk_stats(to_device(rows, DEVICE1), draw, mixture=mixture)
    for name in (*FIELDS, "V", "base_sums"):
        _close(getattr(dev, name), getattr(host, name), 1e-12)
    sigmas = noise_levels(1.0, 3)
    for base in (None, mixture):  # a mixture base adds the noisy levels' Σ sin (s − g)ᵀ, formed on the device
        host_n = ncfd_chunk_stats(rows, draw, sigmas, mixture=base)
        dev_n = ncfd_chunk_stats(to_device(rows, DEVICE1), draw, sigmas, mixture=base)
        for name in ("abar", "gram0", "u", "U", "psi", *(() if base is None else ("V", "base_sums"))):
            _close(getattr(dev_n, name), getattr(host_n, name), 1e-12)


@pytest.mark.filterwarnings("ignore::tgpflow.errors.DiagnosticWarning")  # a fixed λ on two blobs: not the point
@pytest.mark.parametrize("method, base", [("fd", "empirical"), ("fd", "mixture"), ("fvpd", "empirical"),
                                          ("fvpd", "mixture"), ("ncfd", "mixture"), ("map", "empirical"),
                                          ("kde_rff", "empirical")])
def test_a_fit_on_a_device_equals_the_host_fit(rows, draw, method, base, monkeypatch):
    """The estimator's whole device path: each chunk moved inside its task (Dask's threads), its sums back on the
    host, and the fitted model's log density (tilt and base) evaluated on the device."""
    kw = dict(method=method, n_features=48, lam=1e-2, bandwidth=0.8, bounds=None, base=base)
    chunks = da.from_array(rows, chunks=(250, 3))  # four tasks
    probe = np.vstack([rows[:40], rows[:5] + 4.0])
    host = GPTiltedDensity(device="cpu", **kw).fit(chunks, features=draw)
    assert host._level(None).device is None
    assert (host._level(None).base.mixture is not None) == (base == "mixture")
    want = host.log_density(probe)
    monkeypatch.setattr(GPTiltedDensity, "_device_target", lambda self: DEVICE1)
    dev = GPTiltedDensity(device="cpu", **kw).fit(chunks, features=draw)
    assert dev._level(None).device == DEVICE1
    for name in ("abar", "u", "U", "psi") if method == "ncfd" else FIELDS:
        _close(getattr(dev.stats_, name), getattr(host.stats_, name), 1e-12)
    got = dev.log_density(probe)
    finite = np.isfinite(want)
    assert np.array_equal(np.isfinite(got), finite) and finite.sum() >= 30  # KDE-RFF: −inf where its sum is ≤ 0
    np.testing.assert_allclose(got[finite], want[finite], rtol=1e-10, atol=1e-10)


@pytest.mark.filterwarnings("ignore::tgpflow.errors.DiagnosticWarning")
@pytest.mark.parametrize("base", ["empirical", "mixture"])
def test_a_fit_with_a_discrete_column_on_a_device_equals_the_host_fit(base, monkeypatch):
    """A binary flag beside a continuous column (discrete="auto"): the flag dequantized in each task, the sums on
    the device, the code frequencies calibrated after the solve from the model's reference draws; the calibrated
    weights and the log density at rows of both codes are the host fit's."""
    rng = np.random.default_rng(5)
    X = np.column_stack([rng.normal(size=1000), (rng.random(1000) < 0.04).astype(float)])
    kw = dict(method="fd", n_features=48, lam=1e-2, bandwidth=0.8, bounds=None, base=base, random_state=3)
    chunks = da.from_array(X, chunks=(250, 2))
    host = GPTiltedDensity(device="cpu", **kw).fit(chunks)
    assert host.fit_diagnostics_["code_calibration"]["matched"] and host.discrete_.calibrated
    monkeypatch.setattr(GPTiltedDensity, "_device_target", lambda self: DEVICE1)
    dev = GPTiltedDensity(device="cpu", **kw).fit(chunks)
    assert dev._level(None).device == DEVICE1 and dev.discrete_.columns == host.discrete_.columns
    _close(dev.stats_.gram, host.stats_.gram, 1e-12)
    np.testing.assert_allclose(dev.discrete_.code_weights, host.discrete_.code_weights, rtol=1e-9, atol=1e-12)
    probe = np.column_stack([np.linspace(-2.0, 2.0, 9).repeat(2), np.tile([0.0, 1.0], 9)])
    np.testing.assert_allclose(dev.log_density(probe), host.log_density(probe), rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("radial", ["gaussian", "imq"])
def test_kernel_statistics_on_a_device_equal_the_host_ones(rows, radial):
    """The curl-free, diagonal and lite sums of a chunk on the device, in blocks of 40 rows (the host path forms the
    (rows, m, d) differences and the d × d blocks; the device one sums them with GEMMs in another order)."""
    basis = NystromBasis(rows[::50] + 0.1, 2.0, radial, shift=rows.mean(axis=0))
    for fn in (kef_chunk_stats, diag_chunk_stats, lite_chunk_stats):
        host = fn(rows, basis)
        per_row = {kef_chunk_stats: kef_memory, diag_chunk_stats: diag_memory, lite_chunk_stats: lite_memory}[fn]
        dev = fn(to_device(rows, DEVICE1), basis, 40 * per_row(basis).per_row)
        assert dev.draw is basis and dev.n == host.n
        for name, value in vars(host).items():
            if isinstance(value, np.ndarray):
                _close(getattr(dev, name), value, 1e-12)
        _close(dev.moments.m2, host.moments.m2, 1e-12)
    with pytest.raises(ValueError, match="n_components"):  # dimension subsampling has no device form
        kef_chunk_stats(to_device(rows, DEVICE1), basis.with_components(1, np.random.default_rng(0)))


@pytest.mark.filterwarnings("ignore::tgpflow.errors.DiagnosticWarning")  # a fixed λ on two blobs: not the point
@pytest.mark.parametrize("make", [lambda d: NystromKEF(device=d, n_basis=30, base="gaussian", bandwidth=2.0),
                                  lambda d: NystromKEF(device=d, n_basis=30, lite=True, bandwidth=2.0),
                                  lambda d: ScoreEstimator(device=d, kernel="diagonal", n_basis=30, bandwidth=2.0),
                                  lambda d: NystromKEF(device=d, n_basis=30, lam="auto")],
                         ids=["nkef-gaussian", "lite", "diagonal", "nkef-selected"])
def test_a_kernel_fit_on_a_device_equals_the_host_fit(rows, make, monkeypatch):
    """A Nyström kernel model's whole device path: chunks moved inside their tasks (with a λ search, each chunk's
    train and validation parts), the sums back on the host, the log density and the score evaluated on the device."""
    chunks = da.from_array(rows, chunks=(250, 3))
    probe = np.vstack([rows[:40], rows[:5] + 4.0])
    host = make("cpu").fit(chunks)
    monkeypatch.setattr(type(host), "_device_target", lambda self: DEVICE1)
    summed_there = []
    real = kef_module._from_device
    monkeypatch.setattr(kef_module, "_from_device", lambda *a: summed_there.append(1) or real(*a))
    dev = make("cpu").fit(chunks)
    assert len(summed_there) >= 4  # every chunk (with a search: its two parts) summed on the device
    assert dev._on_device(dev._fitted).device == DEVICE1 and host._fitted.device is None
    np.testing.assert_allclose(dev.coef_, host.coef_, rtol=1e-8, atol=1e-8 * np.abs(host.coef_).max())
    np.testing.assert_allclose(dev.grad_log_density(probe), host.grad_log_density(probe), rtol=1e-9, atol=1e-9)
    if host._fitted.has_log_density:
        np.testing.assert_allclose(dev.log_density(probe), host.log_density(probe), rtol=1e-9, atol=1e-9)


@pytest.mark.filterwarnings("ignore::tgpflow.errors.DiagnosticWarning")
def test_kernel_evaluation_on_a_device_far_from_the_origin(rows, monkeypatch):
    """Two clusters 2 × 10⁴ apart: the device evaluates from the rows' differences to the basis points, as the host
    does, so nothing is lost to an expanded ‖x‖² − 2xᵀy + ‖y‖² (which would lose about 6e-8 here). The estimator
    pickles without its device copy."""
    import pickle

    far = np.vstack([rows[:500] - 1e4, rows[500:] + 1e4])
    probe = np.vstack([far[::20], far[:5] + 2.0])
    for make in (lambda: NystromKEF(device="cpu", n_basis=30, bandwidth=2.0, base="gaussian", ridge=1e-4),
                 lambda: NystromKEF(device="cpu", n_basis=30, bandwidth=2.0, lite=True, ridge=1e-4)):
        est = make().fit(far)
        want, want_score = est.log_density(probe), est.grad_log_density(probe)
        with monkeypatch.context() as patch:
            patch.setattr(NystromKEF, "_device_target", lambda self: DEVICE1)
            assert est._on_device(est._fitted).device == DEVICE1
            np.testing.assert_allclose(est.log_density(probe), want, rtol=1e-10, atol=1e-10 * np.abs(want).max())
            np.testing.assert_allclose(est.grad_log_density(probe), want_score, rtol=1e-10,
                                       atol=1e-10 * np.abs(want_score).max())
            assert "_device_copy" in vars(est) and "_device_copy" not in vars(pickle.loads(pickle.dumps(est)))


def test_a_given_subsampled_basis_keeps_auto_on_the_cpu(rows, monkeypatch):
    monkeypatch.setattr(backend, "gpu_visible", lambda: True)
    est = NystromKEF(device="auto", n_basis=10, bandwidth=2.0)
    est.basis_ = NystromBasis(rows[:10], 2.0).with_components(1, np.random.default_rng(0))
    assert est._device_target() is None  # "auto" computes it on the CPU; "gpu" is refused by the pass (above)


#: The workers whose tasks moved rows to the device (in-process workers share this module).
WORKERS_SEEN: list[str] = []


class Recording(DeviceTarget):
    """A device target that notes the worker of each chunk task (the fit's own evaluations run on the client), and
    that only the worker named "gpu" (and the client) can use."""

    def available(self):
        from distributed import get_worker

        try:
            return get_worker().name == "gpu"
        except ValueError:
            return True

    def put(self, rows):
        from distributed import get_worker

        try:
            WORKERS_SEEN.append(get_worker().name)
        except ValueError:
            pass
        return super().put(rows)


def test_device_choice(monkeypatch):
    monkeypatch.setattr(backend, "gpu_visible", lambda: False)
    assert resolve_device("auto") == "cpu" and device_target("auto") is None
    with pytest.raises(ValueError, match=r'pip install "tgpflow\[gpu\]"'):
        resolve_device("gpu")
    monkeypatch.setattr(backend, "gpu_visible", lambda: True)
    assert resolve_device("auto") == "gpu" and device_target("auto") == DeviceTarget("cupy")
    assert resolve_device("auto", supported=False) == "cpu"
    NystromKEF(device="gpu").check_params()  # the Nyström kernel models run there too
    with pytest.raises(ValueError, match="n_components"):  # but not with dimension subsampling
        NystromKEF(device="gpu", n_components=1).check_params()
    assert NystromKEF(device="auto", n_components=1)._device_target() is None
    with pytest.raises(ValueError, match="device must be"):
        resolve_device("tpu")


@pytest.mark.filterwarnings("ignore::tgpflow.errors.DiagnosticWarning")
def test_device_tasks_go_to_gpu_workers_of_a_mixed_cluster(rows, draw, monkeypatch):
    """A cluster of one CPU worker and one worker advertising a GPU resource: every chunk task on the device runs on
    the GPU worker; without such a worker the tasks carry no annotation (they would wait forever) and a pass task
    refuses, naming its worker. Scoring tasks go anywhere, and one on the CPU worker computes there. ``"auto"``
    follows the workers, not this machine."""
    from distributed import Client, Scheduler, SpecCluster, Worker

    from tgpflow.core.engine import cluster_has_gpus, task_resources

    seen = WORKERS_SEEN
    seen.clear()
    monkeypatch.setattr(GPTiltedDensity, "_device_target", lambda self: Recording("array_api_strict", "device1"))
    workers = {"cpu": {"cls": Worker, "options": {"nthreads": 2}},  # unannotated tasks would go there too
               "gpu": {"cls": Worker, "options": {"nthreads": 1, "resources": {"GPU": 1}}}}
    scheduler = {"cls": Scheduler, "options": {"dashboard_address": ":0"}}  # a free port: 8787 may be taken
    chunks = da.from_array(rows, chunks=(125, 3))  # eight tasks
    assert cluster_has_gpus() is None  # no cluster: this machine decides
    with SpecCluster(workers=workers, scheduler=scheduler) as cluster, Client(cluster):
        assert task_resources(True) == {"GPU": 1} and task_resources(False) is None and cluster_has_gpus()
        assert resolve_device("auto", cluster_gpus=cluster_has_gpus()) == "gpu"  # GPU workers, none here
        est = GPTiltedDensity(method="fd", n_features=48, lam=1e-2, bandwidth=0.8, bounds=None, device="cpu")
        est.fit(chunks, features=draw)
        assert len(seen) == 8 and set(seen) == {"gpu"}, seen
        seen.clear()
        got = est.log_density(chunks).compute()  # eight scoring tasks, wherever Dask puts them
        assert set(seen) <= {"gpu"}  # the CPU worker's tasks computed on its CPU
        monkeypatch.setattr(GPTiltedDensity, "_device_target", lambda self: None)
        np.testing.assert_allclose(got, est.log_density(rows), rtol=1e-10, atol=1e-10)
        monkeypatch.setattr(GPTiltedDensity, "_device_target", lambda self: Recording("array_api_strict", "device1"))
    seen.clear()
    workers.pop("gpu")
    with SpecCluster(workers=workers, scheduler=scheduler) as cluster, Client(cluster):
        assert task_resources(True) is None and cluster_has_gpus() is False
        with monkeypatch.context() as m:
            m.setattr(backend, "gpu_visible", lambda: True)  # a GPU here, but the workers have none
            assert resolve_device("auto", cluster_gpus=cluster_has_gpus()) == "cpu"
            assert resolve_device("gpu", cluster_gpus=cluster_has_gpus()) == "gpu"  # asked for: this machine's
        with pytest.raises(RuntimeError, match="worker tcp://.* has no GPU .*GPU resource"):  # no task waits forever
            GPTiltedDensity(method="fd", n_features=48, lam=1e-2, bandwidth=0.8, bounds=None, device="cpu").fit(
                chunks, features=draw)
    assert seen == []


@pytest.mark.filterwarnings("ignore::tgpflow.errors.DiagnosticWarning")
def test_a_model_fitted_on_a_device_loads_and_scores_on_the_host(rows, draw, tmp_path, monkeypatch):
    import tgpflow

    with monkeypatch.context() as m:
        m.setattr(backend, "gpu_visible", lambda: True)  # device="gpu" accepted …
        m.setattr(GPTiltedDensity, "_device_target", lambda self: DEVICE1)  # … and run on the stand-in
        est = GPTiltedDensity(method="fd", n_features=48, lam=1e-2, bandwidth=0.8, bounds=None, device="gpu")
        est.fit(rows, features=draw)
        want = est.log_density(rows[:30])
        est.save(tmp_path / "m.zarr")
    monkeypatch.setattr(backend, "gpu_visible", lambda: False)  # a machine without a GPU
    back = tgpflow.load(tmp_path / "m.zarr")  # the file does not ask for one
    assert back.device == "auto" and back._level(None).device is None
    np.testing.assert_allclose(back.log_density(rows[:30]), want, rtol=1e-10, atol=1e-10)


def test_a_pipeline_spec_asks_for_the_gpu_through_its_model_params(tmp_path, monkeypatch):
    """``params: {device: gpu}`` in a spec is checked when the spec loads: the extra to install without CuPy, the CPU
    for a family without a device path."""
    import yaml

    from tgpflow.pipeline.spec import load_spec

    def spec(estimator, params):
        raw = {"name": "t", "source": {"path": str(tmp_path / "*.parquet")},
               "models": [{"name": "m", "estimator": estimator, "params": params}],
               "outputs": {"store": str(tmp_path / "store.zarr"), "models": str(tmp_path / "models")}}
        (tmp_path / "spec.yaml").write_text(yaml.safe_dump(raw))
        return tmp_path / "spec.yaml"

    monkeypatch.setattr(backend, "gpu_visible", lambda: False)
    with pytest.raises(ValueError, match=r'pip install "tgpflow\[gpu\]"'):
        load_spec(spec("GPTiltedDensity", {"method": "fd", "device": "gpu"}))
    monkeypatch.setattr(backend, "gpu_visible", lambda: True)
    assert load_spec(spec("GPTiltedDensity", {"method": "fd", "device": "gpu"})).models[0].params["device"] == "gpu"
    with pytest.raises(ValueError, match="this model computes on the CPU"):
        load_spec(spec("RootSobolevDensity", {"device": "gpu"}))


@pytest.mark.filterwarnings("ignore::tgpflow.errors.DiagnosticWarning")
def test_where_a_model_computes_is_not_part_of_it(rows, draw, tmp_path):
    """``device`` changes no statistics (a pipeline store keeps its sums when only it changes), and a model file keeps
    an explicit ``device="cpu"``; only ``"gpu"`` is written as ``"auto"`` (the test above)."""
    import tgpflow
    from tgpflow.models.params import GPTiltedParams

    a = GPTiltedParams.statistics_params({"method": "fd", "n_features": 48, "device": "gpu"})
    assert a == GPTiltedParams.statistics_params({"method": "fd", "n_features": 48, "device": "cpu"})
    assert "device" not in a
    GPTiltedDensity(method="fd", n_features=48, lam=1e-2, bandwidth=0.8, bounds=None, device="cpu").fit(
        rows, features=draw).save(tmp_path / "m.zarr")
    assert tgpflow.load(tmp_path / "m.zarr").device == "cpu"


def test_a_wrapped_chunk_function_is_planned_as_the_one_it_wraps(draw):
    import functools

    from tgpflow.core.backend import on_device
    from tgpflow.core.memory import cost_of

    args = (draw, 1 << 20, "float64", False)
    plain = cost_of(tgp_chunk_stats, args, 3)
    assert plain is not None
    assert cost_of(functools.partial(on_device, DEVICE1, tgp_chunk_stats), args, 3) == plain


@pytest.mark.filterwarnings("ignore::tgpflow.errors.DiagnosticWarning")
@pytest.mark.parametrize("method", ["fd", "fvpd"])
def test_device_evaluation_in_slabs_and_blocks_equals_one_piece(rows, draw, method, monkeypatch):
    """The rows go to the device in slabs and are evaluated in blocks: 1 000 rows in slabs of 250, blocks of 100."""
    import tgpflow.models.on_device as on

    est = GPTiltedDensity(method=method, n_features=48, lam=1e-2, bandwidth=0.8, bounds=None, base="mixture",
                          device="cpu").fit(rows, features=draw)
    want = est.log_density(rows)
    monkeypatch.setattr(GPTiltedDensity, "_device_target", lambda self: DEVICE1)
    monkeypatch.setattr(on, "DEVICE_EVAL_BYTES", 4 * 8 * 48 * 100)
    monkeypatch.setattr(on, "DEVICE_INPUT_BYTES", 8 * 3 * 250)
    np.testing.assert_allclose(est.log_density(rows), want, rtol=1e-10, atol=1e-10)
