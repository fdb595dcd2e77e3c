import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tgpflow.features.rff import RandomFourierFeatures, paper_kernel_cov, scott_bandwidth
from tgpflow.features.sincos import MAX_ANGLE, sincos_rows


def _kernel_out(angle, phase):
    s = np.empty_like(angle)
    c = np.empty_like(angle)
    sincos_rows(angle, phase, s, c)
    return s, c


@pytest.mark.parametrize("scale", [1.0, 50.0, 1e3, 1e5, 0.9 * MAX_ANGLE])
def test_sincos_kernel_matches_libm(rng, scale):
    angle = rng.uniform(-scale, scale, size=(37, 501))
    phase = rng.uniform(0, 2 * np.pi, size=37)
    s, c = _kernel_out(angle, phase)
    x = angle + phase[:, None]  # the kernel forms the same float64 sum
    # float64 accuracy at every scale: the three-part π/2 keeps the reduction exact.
    assert np.abs(s - np.sin(x)).max() <= 5e-16
    assert np.abs(c - np.cos(x)).max() <= 5e-16


def test_sincos_kernel_at_the_quadrant_boundaries(rng):
    """Angles within a few ulps of kπ/4 (where the rounding of x·2/π picks the quadrant) and of kπ/2 (where sin or
    cos is ~0, so only an absolute error is meaningful), k from −2·10⁵ to 2·10⁵, both signs: every quadrant and
    both of its sign flips."""
    k = np.concatenate([np.arange(-40, 41), rng.integers(-200_000, 200_000, size=2000)]).astype(np.float64)
    centres = np.concatenate([k * (np.pi / 4), k * (np.pi / 2)])
    x = np.concatenate([np.nextafter(centres, np.inf), centres, np.nextafter(centres, -np.inf),
                        centres * (1 + 4e-16), centres * (1 - 4e-16)])
    s, c = _kernel_out(x[None, :], np.zeros(1))
    assert np.abs(s[0] - np.sin(x)).max() <= 5e-16
    assert np.abs(c[0] - np.cos(x)).max() <= 5e-16


@given(st.lists(st.floats(-1e4, 1e4, allow_nan=False), min_size=1, max_size=64))
@settings(max_examples=200, deadline=None)
def test_sincos_kernel_property(values):
    angle = np.array(values, dtype=np.float64)[None, :]
    s, c = _kernel_out(angle, np.zeros(1))
    assert np.abs(s - np.sin(angle)).max() <= 5e-16
    assert np.abs(c - np.cos(angle)).max() <= 5e-16


def test_features_match_raw_formula_with_shift(rng):
    d = 3
    X = rng.normal(size=(200, d)) + 5.0
    f = RandomFourierFeatures.draw(64, bandwidth=0.7, n_dims=d, shift=np.full(d, 5.0), random_state=3)
    phi, dphi = f.transform(X)
    ang = X @ f.Z.T / f.gamma + f.c
    np.testing.assert_allclose(phi, np.sqrt(2 / 64) * np.cos(ang), atol=1e-13)
    np.testing.assert_allclose(dphi, -np.sqrt(2 / 64) * np.sin(ang), atol=1e-13)


def test_large_angles_fall_back_to_numpy(rng):
    f = RandomFourierFeatures(Z=np.array([[1.0]]), c=np.array([0.3]), gamma=1e-3)
    X = np.array([[2e3], [-5e3]])  # angles ~ 5e6 > MAX_ANGLE
    phi, _ = f.transform(X)
    np.testing.assert_allclose(phi[:, 0], np.sqrt(2) * np.cos(X[:, 0] / 1e-3 + 0.3 - 0.0), atol=1e-9)


@pytest.mark.slow  # S = 40 000 (usual: S ≤ 128): a Monte-Carlo tolerance 5/√S, 3 rows, no S×S gram (0.3 s)
def test_rff_kernel_monte_carlo(rng):
    """E φ(x)ᵀφ(x') = exp(−δᵀΣ_zδ/2γ²) (docs/mathematics.md, "Features and the pilot pass"), Monte-Carlo with S = 40
    000."""
    cov = np.array([[2.0, 0.5], [0.5, 1.0]])
    kc = paper_kernel_cov(cov)
    f = RandomFourierFeatures.draw(40_000, bandwidth=0.8, kernel_cov=kc, random_state=0)
    x = np.array([[0.1, -0.2], [0.5, 0.3], [-0.4, 0.9]])
    phi, _ = f.transform(x)
    for i in range(3):
        for j in range(3):
            delta = x[i] - x[j]
            exact = math.exp(-delta @ kc @ delta / (2 * 0.8**2))
            assert abs(phi[i] @ phi[j] - exact) < 5 / math.sqrt(40_000)


def test_draw_is_seeded_and_fingerprinted():
    a = RandomFourierFeatures.draw(16, bandwidth=1.0, n_dims=2, random_state=7)
    b = RandomFourierFeatures.draw(16, bandwidth=1.0, n_dims=2, random_state=7)
    c = RandomFourierFeatures.draw(16, bandwidth=1.0, n_dims=2, random_state=8)
    assert a == b and a.fingerprint == b.fingerprint
    assert a != c
    shifted = RandomFourierFeatures(a.Z, a.c, a.gamma, shift=np.ones(2))
    assert shifted.fingerprint != a.fingerprint
    with pytest.raises(ValueError, match="gamma"):
        RandomFourierFeatures(a.Z, a.c, -1.0)


def test_scott_bandwidth_formula():
    cov = np.diag([4.0, 1.0, 1.0])
    assert scott_bandwidth(1000, cov) == pytest.approx(1000 ** (-1 / 7) * math.sqrt(2.0))
