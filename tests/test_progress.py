"""Progress is a parameter of the engine (issue 16, item 4): ``compute``/``accumulate`` hand the futures of a
distributed compute to the ``progress`` callback they are given, and the calls that run passes — the
estimators' ``fit``, ``pilot_sample``, ``run_pipeline``, the CLI — pass theirs down, so that every compute of
a fit is reported (counted against the client's own ``compute`` calls). Nothing is looked up in a global."""

import dask
import dask.array as da
import numpy as np
import pytest
from click.testing import CliRunner

from tests.conftest import write_parquet
from tgpflow import GPTiltedDensity, NystromKEF, RootSobolevDensity
from tgpflow.core.engine import accumulate, compute
from tgpflow.core.moments import Moments
from tgpflow.io.sources import as_source


class Recorder:
    """A progress callback that keeps the futures it was given, one list per compute."""

    def __init__(self):
        self.calls: list[list] = []

    def __call__(self, futures):
        self.calls.append(list(futures))


def test_local_schedulers_have_no_futures_to_report():
    """Runs before the module's client exists (a dask callback shows local progress, see tgpflow.cli)."""
    from distributed import default_client

    with pytest.raises(ValueError):
        default_client()
    seen = Recorder()
    assert compute(dask.delayed(sum)([1, 2]), progress=seen) == (3,)
    assert seen.calls == []


@pytest.fixture(scope="module")
def client():
    from distributed import Client, LocalCluster

    with LocalCluster(n_workers=1, threads_per_worker=2, processes=False, dashboard_address=None) as cluster, \
            Client(cluster) as c:
        yield c


@pytest.fixture
def counted(client, monkeypatch):
    """The number of computes the client is asked for (the engine's, and any other)."""
    calls = []
    real = client.compute

    def compute_and_count(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(client, "compute", compute_and_count)
    return calls


def test_compute_hands_the_futures_to_progress_before_gathering(client):
    from distributed import Future

    seen = Recorder()
    assert compute(dask.delayed(sum)([1, 2, 3]), dask.delayed(max)([4, 5]), progress=seen) == (6, 5)
    assert len(seen.calls) == 1 and len(seen.calls[0]) == 2
    assert all(isinstance(f, Future) for f in seen.calls[0])


def test_accumulate_reports_its_compute(client, rng):
    X = rng.normal(size=(900, 3))
    seen = Recorder()
    moments, dropped = accumulate(as_source(da.from_array(X, chunks=(300, 3))), Moments.from_rows, progress=seen)
    assert dropped == 0 and len(seen.calls) == 1
    np.testing.assert_allclose(moments.mean, X.mean(axis=0), rtol=1e-12)


@pytest.mark.parametrize("make", [
    lambda: GPTiltedDensity(method="fd", n_features=16, lam=0.1, bandwidth=0.5),
    lambda: GPTiltedDensity(method="fd", n_features=16, lam=0.1, bandwidth=0.5, pilot="exact"),
    lambda: GPTiltedDensity(method="fd", n_features=16, lam=0.1, bandwidth="auto"),  # γ selected on the pilot
    lambda: NystromKEF(n_basis=8, lam=1e-3, bandwidth=1.0),
    lambda: RootSobolevDensity(n_features=32, smoothness=1.0, max_iter=3),
], ids=["gp-tilted", "gp-tilted-exact-pilot", "gp-tilted-auto-bandwidth", "nkef", "rsr"])
def test_fit_reports_every_compute_it_runs(make, client, counted, rng):
    X = da.from_array(rng.normal(size=(1200, 2)), chunks=(400, 2))
    seen = Recorder()
    est = make().fit(X, progress=seen)
    assert len(counted) >= 2  # the pilot and at least one pass
    assert len(seen.calls) == len(counted)
    quiet = make().fit(X)  # reporting changes nothing in the model
    rows = rng.normal(size=(5, 2))
    np.testing.assert_array_equal(est.grad_log_density(rows), quiet.grad_log_density(rows))


def test_partial_fit_reports_its_pass(client, counted, rng):
    X = rng.normal(size=(1200, 2))
    est = GPTiltedDensity(method="fd", n_features=16, lam=0.1, bandwidth=0.5).fit(X[:600])
    counted.clear()
    seen = Recorder()
    est.partial_fit(da.from_array(X[600:], chunks=(300, 2)), progress=seen)
    assert len(counted) == len(seen.calls) >= 1


def test_the_cli_gives_its_progress_to_the_fit(client, tmp_path, rng, monkeypatch):
    import tgpflow.cli as cli
    import tgpflow.cluster as cluster

    seen = Recorder()
    monkeypatch.setattr(cluster, "_distributed_log", seen)  # what --progress log shows with a scheduler
    src = write_parquet(tmp_path / "x.parquet", rng.normal(size=(800, 2)), ["u", "v"], row_group_size=200)
    r = CliRunner().invoke(cli.main, ["fit", str(src), "--out", str(tmp_path / "m.zarr"), "--n-features", "8",
                                      "--scheduler", client.scheduler.address, "--progress", "log"])
    assert r.exit_code == 0, r.output
    assert len(seen.calls) >= 2  # the pilot and the pass
    r = CliRunner().invoke(cli.main, ["score", str(tmp_path / "m.zarr"), str(src), "--out", str(tmp_path / "s.parquet"),
                                      "--scheduler", client.scheduler.address, "--progress", "log"])
    assert r.exit_code == 0, r.output
    assert len(seen.calls) >= 3
