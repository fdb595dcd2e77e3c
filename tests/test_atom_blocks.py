"""An atom on nearly every row places its rows far beyond its edge (tgpflow.features.atom_blocks; docs/gp_tilted.md,
"Atoms on nearly every row"): the depth law against scipy's truncated normal and finite differences, the rows a
chunk's dequantizing places against that law, the block's probability against a brute-force integral over the
block, the atom's share in the samples against the data's (and against the uniform law's spill), and the law's
round trip through the cells' JSON, arrays and digest."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from scipy import stats as sstats
from scipy.special import logsumexp

import tgpflow
from tgpflow.features import atom_blocks
from tgpflow.features.atom_blocks import ATOM_FAR_DEPTH, atom_depth, block_shares, far_depths
from tgpflow.features.lattice import LatticeCells, keyed_uniform
from tgpflow.features.lattice_choice import choose_discrete
from tgpflow.io.column_kinds import column_kinds


@pytest.mark.parametrize(("depth", "spread"), [(8.0, 1.0), (8.0, 3.0), (0.5, 1.0)])
def test_the_far_law_is_a_truncated_normals_quantile_function_with_its_derivative(depth, spread):
    u = np.r_[0.0, np.linspace(1e-6, 1 - 1e-6, 401), 1 - 1e-12]
    e, log_de = far_depths(u, np.array(depth), spread)
    law = sstats.truncnorm(-depth / spread, np.inf, loc=depth, scale=spread)  # E > 0
    np.testing.assert_allclose(e[:-1], law.ppf(u[:-1]), rtol=1e-9, atol=1e-9)
    assert e[0] == 0.0 and e[-1] == pytest.approx(law.isf(1e-12), rel=1e-9)  # (the far end from the upper tail)
    inner = slice(1, -1)
    h = 1e-4 * np.minimum(u[inner], 1 - u[inner])
    numeric = (far_depths(u[inner] + h, np.array(depth), spread)[0]
               - far_depths(u[inner] - h, np.array(depth), spread)[0]) / (2 * h)
    np.testing.assert_allclose(np.exp(log_de[inner]), numeric, rtol=1e-6)


def test_an_atoms_depth_law_follows_its_share_and_a_chunks_rows_follow_the_law():
    assert atom_depth(0.995) == ATOM_FAR_DEPTH and atom_depth(0.7) == 0.0
    rng = np.random.default_rng(0)
    n = 20_000
    X = np.round(np.c_[rng.lognormal(0, 0.5, n), np.where(rng.random(n) < 0.005, rng.lognormal(1.5, 0.3, n), 0.0),
                       np.where(rng.random(n) < 0.3, rng.lognormal(1.0, 0.3, n), 0.0)], 3)
    names = ["load", "rare", "common"]
    cells = choose_discrete("auto", column_kinds(X, names), X, [], seed=0)
    assert cells.atom_columns == ("rare", "common")
    assert cells.atom_depth.tolist() == [ATOM_FAR_DEPTH, 0.0]
    keys = np.arange(n, dtype=np.int64)
    moved = cells.dequantize(X, keys)
    w = cells.atom_width
    share = -moved[:, 1:] / w  # each row's share of its block's width (the atoms are at 0, below the rest)
    rare, common = X[:, 1] == 0, X[:, 2] == 0
    assert np.all((share[rare, 0] > 0) & (share[rare, 0] < 1)) and np.all(moved[~rare, 1] == X[~rare, 1])
    # the rare atom's rows at depths −log(1 − s) of N(8, 1) truncated to > 0; the common one's shares uniform
    depth = -np.log1p(-share[rare, 0])
    assert sstats.kstest(depth, sstats.truncnorm(-ATOM_FAR_DEPTH, np.inf, loc=ATOM_FAR_DEPTH).cdf).pvalue > 1e-3
    assert sstats.kstest(share[common, 1], "uniform").pvalue > 1e-3
    # the uniform law is the noise itself, bit for bit (atoms fitted before the far law place their rows as then)
    u = keyed_uniform(keys, cells.atom_positions + (1 << 20) * (2 + cells.atom_side.astype(np.int64)), cells.seed, 0)
    np.testing.assert_array_equal(block_shares(u, np.zeros(2)), u)
    np.testing.assert_allclose(share[common, 1], u[common, 1], rtol=1e-12)


def _rare_meter(n: int, seed: int) -> np.ndarray:
    """A load, and a meter that reads exactly 0 but on 0.4 % of the rows, where it reads 4–7 (3 decimals)."""
    rng = np.random.default_rng(seed)
    load = rng.lognormal(0, 0.5, n)
    return np.round(np.c_[load, np.where(rng.random(n) < 0.004, rng.lognormal(1.5, 0.3, n) + load, 0.0)], 3)


def test_a_far_atom_keeps_its_share_its_block_integral_matches_brute_force_and_the_uniform_law_spills(monkeypatch,
                                                                                                   tmp_path):
    X = _rare_meter(20_000, 0)
    est = tgpflow.GPTiltedDensity(random_state=0).fit(X)
    cells = est.discrete_
    assert cells.atom_columns == ("1",) and cells.atom_depth.tolist() == [ATOM_FAR_DEPTH]
    assert est.fit_diagnostics_["warnings"] == []
    est.save(tmp_path / "m.zarr")  # a model file keeps the law: the same densities and samples where it is loaded
    back = tgpflow.load(tmp_path / "m.zarr")
    assert back.discrete_.atom_depth.tolist() == [ATOM_FAR_DEPTH]
    np.testing.assert_array_equal(back.log_density(X[:50]), est.log_density(X[:50]))
    np.testing.assert_array_equal(back.sample(20, random_state=1), est.sample(20, random_state=1))
    sample = est.sample(50_000, random_state=1)
    off = (X[:, 1] > 0).mean()  # 0.405 %
    # measured: 0.43 % of the samples off the atom and none in (0, 2), where the data have none either; the
    # uniform law below: 2.1 %, 1.7 % of them in (0, 2)
    assert (sample[:, 1] > 0).mean() == pytest.approx(off, abs=0.002)
    assert ((sample[:, 1] > 0) & (sample[:, 1] < 2)).mean() < 0.002
    # a row's probability at the atom against brute force over the block, in its depth E: x = −w·(1 − e^(−E))
    inner, w = est.fitted().inner, cells.atom_width[0]
    depth = np.linspace(0.0, 30.0, 300_001)
    for load, got in zip((0.5, 1.0, 2.0), est.log_density(np.array([[0.5, 0.0], [1.0, 0.0], [2.0, 0.0]])),
                         strict=True):
        log_p = inner.log_density(np.c_[np.full(depth.size, load), -w * -np.expm1(-depth)]) + np.log(w) - depth
        log_p = np.where(np.isnan(log_p), -np.inf, log_p)  # (none: the bound is 30 depths further out)
        brute = logsumexp(log_p, b=np.r_[0.5, np.ones(depth.size - 2), 0.5]) + np.log(depth[1])
        assert got + np.log(cells.atom_unit[0]) == pytest.approx(brute, abs=2e-3)
    monkeypatch.setattr(atom_blocks, "ATOM_FAR_SHARE", 1.01)  # every atom on the uniform law, as before
    uniform = tgpflow.GPTiltedDensity(random_state=0).fit(X)
    assert uniform.discrete_.atom_depth.tolist() == [0.0]
    spilled = uniform.sample(50_000, random_state=1)
    assert (spilled[:, 1] > 0).mean() > 3 * off  # a component a block's width wide spills over the edge


def test_the_depth_law_travels_with_the_cells_and_older_cells_keep_the_uniform_law():
    rng = np.random.default_rng(1)
    X = _rare_meter(5_000, 1)
    X = np.c_[X, np.round(np.where(rng.random(X.shape[0]) < 0.3, rng.lognormal(1.0, 0.3, X.shape[0]), 0.0), 3)]
    cells = choose_discrete("auto", column_kinds(X, ["a", "b", "c"]), X, [], seed=0)
    assert cells.atom_depth.tolist() == [ATOM_FAR_DEPTH, 0.0]
    back = LatticeCells.from_dict(cells.to_dict())
    assert back.atom_depth.tolist() == [ATOM_FAR_DEPTH, 0.0] and back.fingerprint == cells.fingerprint
    assert LatticeCells.from_arrays(cells.to_arrays()).fingerprint == cells.fingerprint
    stored = cells.to_dict()
    for atom in stored["atoms"]:
        del atom["depth"]
    old = LatticeCells.from_dict(stored)
    assert old.atom_depth.tolist() == [0.0, 0.0] and old.fingerprint != cells.fingerprint
    assert old.fingerprint == dataclasses.replace(cells, atom_depth=np.zeros(2)).fingerprint
    arrays = cells.to_arrays()
    del arrays["atom_depth"]
    assert LatticeCells.from_arrays(arrays).atom_depth.tolist() == [0.0, 0.0]
