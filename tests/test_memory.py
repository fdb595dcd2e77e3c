"""The memory planner (issue 16, "Memory"): declared costs against measured peaks, refusals with
both numbers, the workers' limits as the budget, and Dask's view of a statistics object's size."""

from __future__ import annotations

import logging
import re

import dask
import numpy as np
import pytest
from dask.sizeof import sizeof

import tgpflow
from tgpflow.core.memory import local_budget, pass_budget, plan_blocks, plan_pass, traced_peak
from tgpflow.features.noise import noise_levels
from tgpflow.features.sincos import MAX_ANGLE
from tgpflow.features.nystrom import NystromBasis
from tgpflow.features.rff import RandomFourierFeatures
from tgpflow.stats.kef import diag_chunk_stats, diag_memory, kef_chunk_stats, kef_memory, lite_chunk_stats, lite_memory
from tgpflow.stats.ncfd import ncfd_chunk_stats, ncfd_memory
from tgpflow.stats.split import split_chunk_stats
from tgpflow.stats.tgp import tgp_chunk_stats, tgp_memory

S, D = 128, 3
BLOCK = 256 * 2**10  # a small budget for the per-row part: 16 blocks of the chunk below


def _feats() -> RandomFourierFeatures:
    return RandomFourierFeatures.draw(S, bandwidth=1.0, n_dims=D, random_state=0)


def _basis(m: int = 40, d: int = 4) -> NystromBasis:
    return NystromBasis(np.random.default_rng(3).normal(size=(m, d)), bandwidth=2.0 * d)


def _subsampled(b: NystromBasis, n_components: int = 2) -> NystromBasis:
    rng = np.random.default_rng(5)
    mask = np.zeros(b.Y.shape, dtype=bool)
    for row in mask:
        row[rng.choice(b.n_dims, n_components, replace=False)] = True
    return NystromBasis(b.Y, b.bandwidth, b.kernel_name, b.shift, mask)


def _cases():
    f = _feats()
    b = _basis()
    sub = _subsampled(b)  # |I| = 80 of md = 160: the columns on I, not the m·d² blocks
    return {
        "fd": (tgp_chunk_stats, tgp_memory(f), (f,), D),
        "fd-mixed": (tgp_chunk_stats, tgp_memory(f, "mixed"), (f,), D),
        "ncfd-h4": (ncfd_chunk_stats, ncfd_memory(f, 4), (f, noise_levels(1.0, 4)), D),
        "nkef": (kef_chunk_stats, kef_memory(b), (b,), b.n_dims),
        "nkef-subsampled": (kef_chunk_stats, kef_memory(sub), (sub,), sub.n_dims),
        "diag": (diag_chunk_stats, diag_memory(b), (b,), b.n_dims),
        "lite": (lite_chunk_stats, lite_memory(b), (b,), b.n_dims),
    }


@pytest.mark.parametrize("kind", ["fd", "fd-mixed", "ncfd-h4", "nkef", "nkef-subsampled", "diag", "lite"])
def test_a_chunks_peak_memory_is_its_plan_within_one_and_a_half(kind):
    fn, cost, args, d = _cases()[kind]
    kwargs = {"precision": "mixed"} if kind == "fd-mixed" else {}
    rows = plan_blocks(cost, BLOCK).rows
    x = np.random.default_rng(0).normal(size=(16 * rows, d))
    fn(x[:5], *args, block_bytes=BLOCK, **kwargs)  # compiled kernels and cached frequencies, not the chunk's cost
    plan = plan_blocks(cost, BLOCK, chunk_rows=x.shape[0])
    _, peak = traced_peak(fn, x, *args, block_bytes=BLOCK, **kwargs)
    assert plan.rows == rows and x.shape[0] // rows == 16
    assert peak <= 1.5 * plan.planned, (peak, plan.planned)
    assert plan.planned <= 1.5 * peak, (peak, plan.planned)


@pytest.mark.parametrize("precision", ["float64", "mixed"])
def test_the_pass_beyond_the_kernels_angle_range_stays_within_its_plan(precision):
    """Rows whose angles leave the compiled sincos range go through NumPy's libm in float64 (an eighth of a
    block at a time): the same plan holds."""
    f = RandomFourierFeatures.draw(S, bandwidth=1e-7, n_dims=D, shift=np.zeros(D), random_state=0)
    cost = tgp_memory(f, precision)
    rows = plan_blocks(cost, BLOCK).rows
    x = np.random.default_rng(0).normal(size=(16 * rows, D))
    assert np.abs(x @ f.frequencies.T).max() > MAX_ANGLE  # the fallback is what runs
    tgp_chunk_stats(x[:5], f, block_bytes=BLOCK, precision=precision)
    plan = plan_blocks(cost, BLOCK, chunk_rows=x.shape[0])
    _, peak = traced_peak(tgp_chunk_stats, x, f, block_bytes=BLOCK, precision=precision)
    assert peak <= 1.5 * plan.planned, (peak, plan.planned)


def test_the_fixed_part_counts_the_s_squared_accumulators():
    """The fault the planner fixes: at a 1 MiB budget an FD chunk used to be planned as 1 MiB."""
    f = RandomFourierFeatures.draw(1000, bandwidth=1.0, n_dims=2, random_state=0)
    assert tgp_memory(f).fixed >= 2 * 8 * 1000**2  # Σφ'φ'ᵀ and the SYRK product
    assert ncfd_memory(f, 4).fixed >= 7 * 8 * 1000**2  # Ā, Σφ'φ'ᵀ at σ=0, both products, W± being built
    assert plan_blocks(tgp_memory(f), 2**20).planned > 16 * 2**20


def test_the_planner_refuses_with_both_numbers_and_the_fix():
    cost = ncfd_memory(_feats(), 4)
    budget = cost.fixed // 2
    with pytest.raises(MemoryError) as err:
        plan_blocks(cost, BLOCK, budget=budget, budget_source="a test budget")
    msg = str(err.value)
    need = cost.fixed + cost.per_row
    assert f"needs {need} bytes" in msg and f"has {budget} bytes" in msg and "a test budget" in msg
    assert "fewer features (n_features)" in msg and "fewer noise levels" in msg and "more memory" in msg
    # one row more than the budget's room: still refused; exactly one row: one row per block
    with pytest.raises(MemoryError):
        plan_blocks(cost, BLOCK, budget=need - 1)
    assert plan_blocks(cost, BLOCK, budget=need).rows == 1
    # the cap on the per-row part keeps its meaning and its message
    with pytest.raises(MemoryError, match="bytes per row"):
        plan_blocks(cost, cost.per_row - 1)


def test_a_tight_budget_shrinks_the_blocks_not_the_results(rng):
    f = _feats()
    X = rng.normal(size=(400, D))
    cost = tgp_memory(f)
    tight = plan_blocks(cost, BLOCK, budget=cost.fixed + 7 * cost.per_row)
    assert tight.rows == 7 and tight.planned <= cost.fixed + 7 * cost.per_row
    a = tgp_chunk_stats(X, f, block_bytes=7 * cost.per_row)
    b = tgp_chunk_stats(X, f, block_bytes=BLOCK)
    np.testing.assert_allclose(a.gram, b.gram, rtol=1e-12, atol=1e-12)


def test_a_pass_is_planned_and_logged_before_it_starts(caplog):
    f = _feats()
    with caplog.at_level(logging.INFO, logger="tgpflow"):
        plan = plan_pass(tgp_chunk_stats, (f, BLOCK, "float64"), D)
    assert plan is not None and plan.budget is not None
    line = next(r.getMessage() for r in caplog.records if r.getMessage().startswith("memory plan"))
    for fact in ("budget", "fixed", "bytes per row", "rows per block", f"S={S}"):
        assert fact in line
    # a held-out split plans its parts together: more fixed memory than one part, the same rows
    parts = {1.0: (f, BLOCK), 2.0: (f.with_bandwidth(2.0), BLOCK)}
    split = plan_pass(split_chunk_stats, (0.2, 0, tgp_chunk_stats, parts, None, None), D)
    assert split.cost.fixed > plan.cost.fixed and split.rows == plan.rows
    assert plan_pass(np.sum, (), D) is None  # nothing declared: nothing planned


def test_a_fit_too_big_for_the_machine_is_refused_before_its_pass(gaussian_mix, monkeypatch):
    """Without a cluster the budget is this machine's available RAM (here made small)."""
    monkeypatch.setattr("tgpflow.core.memory.local_budget", lambda: (100_000, "a small machine"))
    est = tgpflow.GPTiltedDensity(method="fd", n_features=S, lam=0.1, bandwidth=1.0)
    with pytest.raises(MemoryError, match=r"needs \d+ bytes .* but a task has 100000 bytes .*a small machine"):
        est.fit(gaussian_mix)


def test_with_a_cluster_the_budget_is_the_workers_limit_per_thread():
    distributed = pytest.importorskip("distributed")
    limit = 3 * 2**30  # not this machine's RAM: the plan must come from the workers
    # no pausing or spilling: this in-process worker shares the test process's memory
    quiet = {"distributed.worker.memory.target": False, "distributed.worker.memory.spill": False,
             "distributed.worker.memory.pause": False, "distributed.worker.memory.terminate": False}
    with dask.config.set(quiet), distributed.LocalCluster(n_workers=1, threads_per_worker=2, processes=False,
                                                          memory_limit=limit, dashboard_address=None) as cluster, \
            distributed.Client(cluster) as client:
        budget, source, binding = pass_budget()
        assert (budget, binding) == (limit // 2, True) and "memory_limit" in source and "2 threads" in source
        assert budget != local_budget()[0]
        plan = plan_pass(tgp_chunk_stats, (_feats(), BLOCK, "float64"), D)
        assert plan.budget == limit // 2
        # a task reads the same budget from the worker it runs on, and plans within it
        from tgpflow.core.memory import task_budget

        assert client.submit(lambda: task_budget()[0], pure=False).result() == limit // 2
        f = _feats()
        X = np.random.default_rng(1).normal(size=(3000, D))
        remote = client.submit(tgp_chunk_stats, X, f, BLOCK).result()
        np.testing.assert_array_equal(remote.gram, tgp_chunk_stats(X, f, BLOCK).gram)


def test_with_a_small_worker_limit_the_fit_is_refused_with_the_workers_numbers(gaussian_mix):
    distributed = pytest.importorskip("distributed")
    quiet = {"distributed.worker.memory.target": False, "distributed.worker.memory.spill": False,
             "distributed.worker.memory.pause": False, "distributed.worker.memory.terminate": False}
    limit = 400_000  # two threads: 200 kB each, less than an FD task's fixed 2·S² float64 (262 kB)
    with dask.config.set(quiet), distributed.LocalCluster(n_workers=1, threads_per_worker=2, processes=False,
                                                          memory_limit=limit, dashboard_address=None) as cluster, \
            distributed.Client(cluster):
        est = tgpflow.GPTiltedDensity(method="fd", n_features=S, lam=0.1, bandwidth=1.0)
        with pytest.raises(MemoryError) as err:
            est.fit(gaussian_mix)
    msg = str(err.value)
    assert re.search(r"needs \d+ bytes", msg) and f"has {limit // 2} bytes" in msg
    assert "memory_limit" in msg and "fewer features" in msg


def test_dask_sees_the_bytes_of_a_statistics_object(gaussian_mix):
    f = RandomFourierFeatures.draw(S, bandwidth=1.0, n_dims=2, random_state=0)
    stats = tgp_chunk_stats(gaussian_mix, f)
    arrays = sum(a.nbytes for a in stats.to_arrays().values())
    assert arrays >= 8 * S * S
    assert arrays <= sizeof(stats) <= arrays + 4096
    nc = ncfd_chunk_stats(gaussian_mix, f, noise_levels(1.0, 4))
    assert sum(a.nbytes for a in nc.to_arrays().values()) <= sizeof(nc) <= sum(
        a.nbytes for a in nc.to_arrays().values()) + 4096
    both = stats + stats  # the merged value too
    assert abs(sizeof(both) - sizeof(stats)) <= 64


def test_a_solve_too_big_for_this_machine_is_refused_with_both_numbers():
    from tgpflow.solve.kef import check_memory

    with pytest.raises(MemoryError, match=r"needs 2\d+\.\d+ GiB, more than the \d+\.\d+ GiB of RAM available.*n_basis"):
        check_memory(3, 10**6, "Tikhonov solve")  # 24 TB
    check_memory(3, 100, "Tikhonov solve")
