"""Precision modes (issue 6): float32 S×S products accumulated in float64, on NumPy and through the array API."""

import array_api_strict as xps
import numpy as np
import pytest

from tgpflow import GPTiltedDensity, RandomFourierFeatures
from tgpflow.features.noise import noise_levels
from tgpflow.stats.ncfd import ncfd_chunk_stats
from tgpflow.features.sincos import MAX_ANGLE, PASS_TILE, sin_sums_rows, sincos_rows
from tgpflow.stats.tgp import level_products, tgp_chunk_stats


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


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("d", [1, 2, 3, 4, 5, 6, 7, 8])  # every sweep pattern of the angles (1 or 2, then 4s, then 2)
@pytest.mark.parametrize("S", [40, 41])  # the sine's sums go by pairs of features: an odd S leaves one on its own
def test_the_pass_kernel_writes_the_float64_sines_rounded_and_sums_in_float64(rng, dtype, d, S):
    n = 2 * PASS_TILE + 331  # two whole tiles and a partial one
    xt = rng.normal(size=(d, n))
    W, phase = rng.normal(size=(S, d)) * 3, rng.uniform(0, 2 * np.pi, S)
    sin, cos = np.empty((S, n)), np.empty((S, n))
    sincos_rows(W @ xt, phase, sin, cos)  # the float64 kernel on NumPy's angles
    sin_out, cos_out = np.empty((S, n), dtype), np.empty((S, n), dtype)
    u, U, psi = np.ones(S), np.ones((S, d)), np.ones(S)  # added to, not overwritten
    sin_sums_rows(xt, W, phase, sin_out, cos_out, psi, u, U)
    # the kernel's angles are its own FMA sums, NumPy's a GEMM: each within d·ε·Σ|w||x| of the exact dot
    # product, so sin and cos differ by at most twice that, plus their own ~1e-16 errors (and float32's rounding)
    tol = 2 * d * np.finfo(float).eps * (np.abs(W) @ np.abs(xt)) + 1e-15 + (2.0 ** -24 if dtype == np.float32 else 0)
    assert np.all(np.abs(sin_out - sin) <= tol) and np.all(np.abs(cos_out - cos) <= tol)
    np.testing.assert_allclose(u - 1, sin.sum(axis=1), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(U - 1, sin @ xt.T, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(psi - 1, cos.sum(axis=1), rtol=1e-12, atol=1e-12)
    first = sin_out.copy()
    sin_out[:] = np.nan
    sin_sums_rows(xt, W, phase, sin_out, None, psi)  # without the cosine block and the sine's sums
    np.testing.assert_array_equal(sin_out, first)  # stored straight into the block: the same values
    with pytest.raises(ValueError, match="both of the sine's sums"):  # the kernel would write U out of bounds
        sin_sums_rows(xt, W, phase, sin_out, None, psi, u)
    np.testing.assert_allclose(psi - 1, 2 * cos.sum(axis=1), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(u - 1, sin.sum(axis=1), rtol=1e-12, atol=1e-12)
    sin_out[:] = np.nan
    sin_sums_rows(xt, W, phase, sin_out, None, psi, u, U)  # the sine's sums without the cosine block (the pass's case)
    np.testing.assert_array_equal(sin_out, first)
    np.testing.assert_allclose(u - 1, 2 * sin.sum(axis=1), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(U - 1, 2 * (sin @ xt.T), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(psi - 1, 3 * cos.sum(axis=1), rtol=1e-12, atol=1e-12)


def test_the_pass_kernels_sines_are_the_float64_kernels_bit_for_bit_at_large_angles(rng):
    """With W = 1 the kernel's angle is the row itself, so its sines and cosines must be sincos_rows' exactly: the
    sums' reassociation (fastmath) must not reach the Cody–Waite reduction, whose error would grow with the angle."""
    xt = rng.uniform(-0.5 * MAX_ANGLE, 0.5 * MAX_ANGLE, size=(1, 4099))
    W, phase = np.ones((3, 1)), rng.uniform(0, 2 * np.pi, 3)
    sin, cos = np.empty((3, xt.shape[1])), np.empty((3, xt.shape[1]))
    sincos_rows(np.repeat(xt, 3, axis=0), phase, sin, cos)
    for sums in ((), (np.zeros(3), np.zeros((3, 1)))):  # straight into the block; by pairs with the sine's sums
        sin_out, cos_out = np.empty_like(sin), np.empty_like(cos)
        sin_sums_rows(xt, W, phase, sin_out, cos_out, np.zeros(3), *sums)
        np.testing.assert_array_equal(sin_out, sin)
        np.testing.assert_array_equal(cos_out, cos)


@pytest.mark.parametrize("scale", [1.0, 2 * MAX_ANGLE])  # in the compiled kernel's range; beyond it (NumPy's libm)
def test_mixed_level_products_keep_the_float64_sums(rng, scale):
    x = rng.normal(size=(3000, 4))
    f = RandomFourierFeatures.draw(50, bandwidth=1.0 / scale, n_dims=4, shift=np.zeros(4), random_state=2)
    ref = level_products(x, f, 700, cos_gram=True, precision="float64")
    mix = level_products(x, f, 700, cos_gram=True, precision="mixed")
    for a, b in zip(ref[:2], mix[:2]):  # sin sinᵀ and cos cosᵀ: float32 products
        assert 1e-10 < np.abs(a - b).max() / np.abs(a).max() < 1e-6
    for a, b in zip(ref[2:5], mix[2:5]):  # Σ sin, Σ sin (x − x₀)ᵀ, Σ cos: float64
        np.testing.assert_allclose(b, a, rtol=1e-12, atol=1e-12 * np.abs(a).max())


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
