import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import dask.array as da

from tests.oracles import phi_raw
from tgpflow.core.engine import accumulate
from tgpflow.core.moments import Moments
from tgpflow.errors import FeaturesMismatchError, ModelFileError
from tgpflow.features.rff import RandomFourierFeatures
from tgpflow.io.sources import as_source
from tgpflow.stats.tgp import TGPStats, block_rows_for, tgp_chunk_stats, tgp_memory

FIELDS = ("gram", "u", "U", "psi")


def _features(d=3, S=24, seed=0, shift=None):
    return RandomFourierFeatures.draw(S, bandwidth=0.9, n_dims=d, shift=shift, random_state=seed)


def assert_stats_close(a: TGPStats, b: TGPStats, rtol=1e-12):
    assert a.n == b.n and a.fingerprint == b.fingerprint
    for name in FIELDS:
        x, y = getattr(a, name), getattr(b, name)
        np.testing.assert_allclose(x, y, rtol=0, atol=rtol * np.abs(y).max(), err_msg=name)
    np.testing.assert_allclose(a.moments.mean, b.moments.mean, rtol=rtol, atol=rtol)
    np.testing.assert_allclose(a.moments.m2, b.moments.m2, rtol=rtol, atol=rtol * np.abs(b.moments.m2).max())


def test_chunk_stats_equal_brute_force_sums(rng):
    X = rng.normal(size=(300, 3)) + 2.0
    f = _features(shift=X.mean(axis=0))
    st_ = tgp_chunk_stats(X, f)
    phi, dphi = phi_raw(X, f.Z, f.c, f.gamma)
    np.testing.assert_allclose(st_.gram, dphi.T @ dphi, atol=1e-12)
    np.testing.assert_allclose(st_.u, dphi.sum(0), atol=1e-12)
    np.testing.assert_allclose(st_.psi, phi.sum(0), atol=1e-12)
    np.testing.assert_allclose(st_.U, dphi.T @ (X - f.shift), atol=1e-11)
    np.testing.assert_allclose(st_.moments.mean, X.mean(0), rtol=1e-14)
    np.testing.assert_allclose(st_.moments.covariance, np.cov(X.T, bias=True), rtol=1e-12)


def test_array_api_strict_path_equals_numpy_path(rng):
    xps = pytest.importorskip("array_api_strict")
    X = rng.normal(size=(257, 4))
    f = _features(d=4, S=40, shift=X.mean(0))
    fast = tgp_chunk_stats(X, f, block_bytes=40_000)
    strict = tgp_chunk_stats(xps.asarray(X), f, block_bytes=40_000)
    assert_stats_close(strict, fast, rtol=1e-13)


def test_block_budget_gives_identical_results_and_refuses_too_small(rng):
    X = rng.normal(size=(500, 3))
    f = _features()
    per_row = 8 * (3 * 24 + 2 * 3)
    assert block_rows_for(24, 3, per_row * 7) == 7  # 72 blocks
    one_block = tgp_chunk_stats(X, f, block_bytes=10**8)
    many = tgp_chunk_stats(X, f, block_bytes=per_row * 7)
    assert_stats_close(many, one_block, rtol=1e-13)
    with pytest.raises(MemoryError, match="bytes per row"):  # the pass's own per-row plan (not evaluation's)
        tgp_chunk_stats(X, f, block_bytes=tgp_memory(f).per_row - 1)


@given(cuts=st.lists(st.integers(1, 399), max_size=12, unique=True), split_every=st.integers(2, 9))
@settings(max_examples=25, deadline=None)
def test_statistics_do_not_depend_on_chunk_boundaries(cuts, split_every):
    X = np.random.default_rng(1).normal(size=(400, 3)) * [1.0, 3.0, 0.2] + 1e3
    f = _features(shift=np.full(3, 1e3))
    bounds = [0, *sorted(cuts), 400]
    chunks = tuple(b - a for a, b in zip(bounds[:-1], bounds[1:], strict=True))
    ref, _ = accumulate(as_source(da.from_array(X, chunks=(400, 3))), tgp_chunk_stats, f)
    got, _ = accumulate(as_source(da.from_array(X, chunks=(chunks, 3))), tgp_chunk_stats, f, split_every=split_every)
    assert_stats_close(got, ref, rtol=1e-12)


@pytest.mark.parametrize("n_chunks", [1, 7, 64])
def test_1_7_64_chunks_agree(n_chunks, rng):
    X = rng.normal(size=(640, 2))
    f = _features(d=2)
    ref = tgp_chunk_stats(X, f)
    got, _ = accumulate(as_source(da.from_array(X, chunks=(-(-640 // n_chunks), 2))), tgp_chunk_stats, f)
    assert_stats_close(got, ref, rtol=1e-12)


def test_algebra(rng):
    f = _features()
    a, b, c = (tgp_chunk_stats(rng.normal(size=(n, 3)), f) for n in (50, 80, 33))
    assert_stats_close((a + b) + c, a + (b + c), rtol=1e-14)
    assert_stats_close((a + b) - b, a, rtol=1e-12)
    assert_stats_close(TGPStats.zero(f) + a, a, rtol=0)
    assert_stats_close(sum([a, b, c]), a + b + c, rtol=1e-14)


def test_merging_different_features_raises_with_the_fix(rng):
    X = rng.normal(size=(40, 3))
    a = tgp_chunk_stats(X, _features(seed=0))
    b = tgp_chunk_stats(X, _features(seed=1))
    with pytest.raises(FeaturesMismatchError, match="features=est.features_"):
        a + b
    with pytest.raises(FeaturesMismatchError):
        a - b


def test_moments_are_stable_at_large_offset(rng):
    X = rng.normal(size=(1000, 2)) + 1e6
    parts = [Moments.from_rows(X[i:i + 137]) for i in range(0, 1000, 137)]
    total = sum(parts)
    np.testing.assert_allclose(total.covariance, np.cov((X - 1e6).T, bias=True), rtol=1e-9)
    rest = total - parts[0]
    np.testing.assert_allclose(rest.covariance, np.cov((X[137:] - 1e6).T, bias=True), rtol=1e-8)


@pytest.mark.parametrize("suffix", [".zarr", ".npz"])
def test_save_load_round_trip(tmp_path, rng, suffix):
    s = tgp_chunk_stats(rng.normal(size=(60, 3)), _features())
    path = s.save(tmp_path / f"stats{suffix}")
    back = TGPStats.load(path)
    assert_stats_close(back, s, rtol=0)


def test_tampered_stats_file_is_refused(tmp_path, rng):
    s = tgp_chunk_stats(rng.normal(size=(60, 3)), _features())
    path = s.save(tmp_path / "stats.npz")
    other = tgp_chunk_stats(rng.normal(size=(60, 3)), _features())
    arrays = dict(np.load(path, allow_pickle=False))
    arrays["psi"] = other.psi  # swap one array, keep the header
    np.savez(path, **arrays)
    with pytest.raises(ModelFileError, match="checksum mismatch in array 'psi'"):
        TGPStats.load(path)
