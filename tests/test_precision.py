"""Precision modes (issue 6): float32 S×S products accumulated in float64, on NumPy and through the array API."""

import array_api_strict as xps
import numpy as np
import pytest

from tgpflow import GPTiltedDensity, RandomFourierFeatures
from tgpflow.features.noise import noise_levels
from tgpflow.stats.ncfd import ncfd_chunk_stats
from tgpflow.stats.tgp import tgp_chunk_stats


@pytest.fixture
def draw(gaussian_mix):
    return RandomFourierFeatures.draw(64, bandwidth=0.5, n_dims=2, shift=gaussian_mix.mean(0), random_state=1)


def test_mixed_products_are_float32_accurate_and_accumulated_in_float64(gaussian_mix, draw):
    full = tgp_chunk_stats(gaussian_mix, draw)
    mixed = tgp_chunk_stats(gaussian_mix, draw, block_bytes=8 * 4 * 64 * 50, precision="mixed")
    assert mixed.gram.dtype == np.float64
    err = np.abs(mixed.gram - full.gram).max() / np.abs(full.gram).max()
    assert 1e-9 < err < 1e-6  # float32 rounding per product: not float64-exact, not worse than float32
    np.testing.assert_allclose(mixed.psi, full.psi, rtol=1e-13, atol=1e-12)  # the O(S) sums stay float64
    strict = tgp_chunk_stats(xps.asarray(gaussian_mix), draw, block_bytes=8 * 4 * 64 * 50, precision="mixed")
    np.testing.assert_allclose(strict.gram, mixed.gram, rtol=1e-6, atol=1e-6 * np.abs(full.gram).max())


def test_mixed_ncfd_and_fits_agree_with_float64(gaussian_mix, draw):
    sig = noise_levels(0.6, 3)
    a = ncfd_chunk_stats(gaussian_mix, draw, sig)
    b = ncfd_chunk_stats(gaussian_mix, draw, sig, precision="mixed")
    assert np.abs(a.abar - b.abar).max() < 1e-6 * np.abs(a.abar).max()
    for method in ("fd", "fvpd"):
        f64 = GPTiltedDensity(method=method, n_features=64).fit(gaussian_mix, features=draw)
        f32 = GPTiltedDensity(method=method, n_features=64, precision="mixed").fit(gaussian_mix, features=draw)
        x = gaussian_mix[:50]
        np.testing.assert_allclose(f32.log_density(x), f64.log_density(x), rtol=1e-3, atol=1e-3)
    with pytest.raises(ValueError, match="precision"):
        GPTiltedDensity(precision="float16").fit(gaussian_mix)


@pytest.mark.gpu
def test_gpu_and_cpu_statistics_agree(gaussian_mix, draw):
    import cupy

    cpu = tgp_chunk_stats(gaussian_mix, draw)
    gpu = tgp_chunk_stats(cupy.asarray(gaussian_mix), draw)
    np.testing.assert_allclose(gpu.gram, cpu.gram, rtol=1e-10, atol=1e-10)
    mixed = tgp_chunk_stats(cupy.asarray(gaussian_mix), draw, precision="mixed")
    assert np.abs(mixed.gram - cpu.gram).max() < 1e-6 * np.abs(cpu.gram).max()
