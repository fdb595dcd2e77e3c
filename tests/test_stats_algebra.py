"""The statistics algebra of every family (issue 16: one base, :class:`tgpflow.core.summable.AdditiveStats`).

For each statistics class, against oracles that do not use the algebra under test:

(a) stats(A) + stats(B) equals stats(A ∪ B) computed directly from the rows;
(b) (A + B) − B equals A;
(c) ``scaled(3)`` equals the stats of the rows repeated three times (every row of weight 3), and ``scaled(f)``
    multiplies every sum by f (the mean of the moments, the draw, its fingerprint and the noise levels stay);
(d) a part of another draw is refused with :class:`~tgpflow.errors.FeaturesMismatchError`;
(e) save/load to ``.npz`` and to a Zarr directory is bit-identical;

and artifacts in the layout written before the base existed (commit f98e7ed; written at test time by
``tests/legacy_stats.py``, whose layout is pinned against those files) load bit for bit — without the draw, which
they do not hold — and are written again bit for bit, with the same array names, dtypes and metadata.
Fields are compared through ``dataclasses.fields``, not through the classes' own ``to_arrays``.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from dask.sizeof import sizeof

from tgpflow.core.moments import Moments
from tgpflow.errors import FeaturesMismatchError
from tgpflow.features.nystrom import NystromBasis
from tgpflow.features.rff import RandomFourierFeatures
from tgpflow.pipeline.store import StatsStore
from tgpflow.stats.kde_sdo import KDESDOStats, kde_sdo_chunk_stats
from tgpflow.stats.kef import DiagStats, KEFStats, LiteStats, diag_chunk_stats, kef_chunk_stats, lite_chunk_stats
from tgpflow.stats.ncfd import NCFDStats, ncfd_chunk_stats
from tgpflow.stats.projections import ProjectionCounts, ProjectionGrid, projection_counts
from tgpflow.stats.split import HeldOut
from tgpflow.stats.tgp import TGPStats, tgp_chunk_stats
from tests.legacy_stats import V1_DIGESTS, layout_digest, layout_document, stats_v1

D = 2
SIGMAS = np.array([0.0, 0.4, 0.8])
#: Fields that are not sums: equal in every part and unchanged by scaling.
NOT_SUMS = ("fingerprint", "draw", "sigmas")


@cache
def features(seed: int = 0) -> RandomFourierFeatures:
    return RandomFourierFeatures.draw(16, bandwidth=0.9, n_dims=D, shift=np.array([1.0, -0.5]), random_state=seed)


@cache
def basis(seed: int = 0) -> NystromBasis:
    Y = np.random.default_rng(100 + seed).normal(size=(5, D)) + [1.0, -0.5]
    return NystromBasis(Y, 1.2, "gaussian", np.array([1.0, -0.5]))


@cache
def grid(seed: int = 0) -> ProjectionGrid:
    pilot = np.random.default_rng(200).normal(size=(100, D)) + [1.0, -0.5]
    return ProjectionGrid.from_rows(pilot, n_directions=6, n_bins=32, random_state=seed)


#: Class name → the statistics of some rows with the draw of ``seed`` (another seed: another fingerprint).
MAKERS: dict[str, Callable[[np.ndarray, int], Any]] = {
    "TGPStats": lambda x, seed: tgp_chunk_stats(x, features(seed), with_phi_gram=True),
    "NCFDStats": lambda x, seed: ncfd_chunk_stats(x, features(seed), SIGMAS),
    "KDESDOStats": lambda x, seed: kde_sdo_chunk_stats(x, features(seed)),
    "KEFStats": lambda x, seed: kef_chunk_stats(x, basis(seed)),
    "LiteStats": lambda x, seed: lite_chunk_stats(x, basis(seed)),
    "DiagStats": lambda x, seed: diag_chunk_stats(x, basis(seed)),
    "ProjectionCounts": lambda x, seed: projection_counts(x, grid(seed)),
    "HeldOut": lambda x, seed: HeldOut(tgp_chunk_stats(x, features(seed)), projection_counts(x, grid(seed))),
}
KINDS = {"TGPStats": TGPStats, "NCFDStats": NCFDStats, "KDESDOStats": KDESDOStats, "KEFStats": KEFStats,
         "LiteStats": LiteStats, "DiagStats": DiagStats, "ProjectionCounts": ProjectionCounts, "HeldOut": HeldOut}
STORED = [k for k in MAKERS if k != "HeldOut"]  # HeldOut is stored inside a StatsBundle (test below)


def rows(n: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).normal(size=(n, D)) * [1.0, 0.7] + [1.0, -0.5]


A, B = rows(300, 1), rows(200, 2)


def assert_close(got: Any, want: Any, rtol: float, path: str = "") -> None:
    """Field by field, arrays within ``rtol`` of their largest entry; strings, None and the levels exactly."""
    assert type(got) is type(want), path
    for f in dataclasses.fields(want):
        x, y, where = getattr(got, f.name), getattr(want, f.name), f"{path}{f.name}"
        if y is None or isinstance(y, str):
            assert x == y, where
        elif dataclasses.is_dataclass(y):  # Moments, or the parts of a HeldOut
            assert_close(x, y, rtol, f"{where}.")
        elif isinstance(y, np.ndarray):
            assert x.shape == y.shape, where
            scale = float(np.abs(y).max(initial=0.0)) or 1.0
            np.testing.assert_allclose(x, y, rtol=0, atol=rtol * scale, err_msg=where)
        else:  # a row count
            assert x == pytest.approx(y, rel=rtol), where


def assert_identical(got: Any, want: Any, path: str = "") -> None:
    """Bit for bit: the same types, dtypes, shapes and bytes."""
    assert type(got) is type(want), path
    for f in dataclasses.fields(want):
        x, y, where = getattr(got, f.name), getattr(want, f.name), f"{path}{f.name}"
        if dataclasses.is_dataclass(y):
            assert_identical(x, y, f"{where}.")
        elif isinstance(y, np.ndarray):
            assert isinstance(x, np.ndarray) and x.dtype == y.dtype and x.shape == y.shape, where
            assert x.tobytes() == y.tobytes(), where
        else:
            assert type(x) is type(y) and x == y, where


@pytest.mark.parametrize("kind", MAKERS)
def test_sum_of_parts_is_the_statistics_of_the_union(kind):
    make = MAKERS[kind]
    a, b = make(A, 0), make(B, 0)
    union = make(np.concatenate([A, B]), 0)
    assert_close(a + b, union, 1e-12)
    assert_close(sum([a, b]), union, 1e-12)  # 0 + a: sum() needs no start value
    assert (a + b).n == 500


@pytest.mark.parametrize("kind", MAKERS)
def test_removing_a_part_gives_back_the_other(kind):
    make = MAKERS[kind]
    a, b = make(A, 0), make(B, 0)
    assert_close((a + b) - b, a, 1e-12)
    assert ((a + b) - b).n == 300


@pytest.mark.parametrize("kind", MAKERS)
def test_scaled_is_a_row_weight(kind):
    make = MAKERS[kind]
    a = make(A, 0)
    assert_close(a.scaled(3), make(np.concatenate([A, A, A]), 0), 1e-12)  # weight 3 = each row three times
    assert a.scaled(1.0) is a

    def check(got: Any, want: Any, f: float) -> None:
        for fld in dataclasses.fields(want):
            x, y = getattr(got, fld.name), getattr(want, fld.name)
            if fld.name in NOT_SUMS or y is None:
                assert x is y or np.array_equal(x, y), fld.name
            elif isinstance(y, Moments):
                assert x.n == y.n * f and np.array_equal(x.mean, y.mean), fld.name
                np.testing.assert_allclose(x.m2, y.m2 * f, rtol=1e-15)
            elif dataclasses.is_dataclass(y):
                check(x, y, f)
            else:
                np.testing.assert_allclose(x, y * f, rtol=1e-15, err_msg=fld.name)

    check(a.scaled(0.3), a, 0.3)


@pytest.mark.parametrize("kind", MAKERS)
def test_another_draw_is_refused(kind):
    make = MAKERS[kind]
    a, other = make(A, 0), make(B, 1)
    with pytest.raises(FeaturesMismatchError, match="cannot combine"):
        a + other
    with pytest.raises(FeaturesMismatchError, match="cannot combine"):
        a - other


@pytest.mark.parametrize("draw", ["features", "grid"])
def test_a_held_out_part_checks_both_draws(draw):
    a = MAKERS["HeldOut"](A, 0)
    other = HeldOut(tgp_chunk_stats(B, features(1 if draw == "features" else 0)),
                    projection_counts(B, grid(1 if draw == "grid" else 0)))
    with pytest.raises(FeaturesMismatchError, match="feature draws" if draw == "features" else "projection grids"):
        a + other


@pytest.mark.parametrize("suffix", [".npz", ".zarr"])
@pytest.mark.parametrize("kind", STORED)
def test_save_load_round_trip_is_bit_identical(kind, suffix, tmp_path):
    a = MAKERS[kind](A, 0)
    back = KINDS[kind].load(a.save(tmp_path / f"stats{suffix}"))
    assert_identical(back, a)
    weighted = a.scaled(0.301)  # a float row count (90.3; a whole number is stored as an int)
    assert_identical(KINDS[kind].load(weighted.save(tmp_path / f"weighted{suffix}")), weighted)


@pytest.mark.parametrize("suffix", [".npz", ".zarr"])
def test_a_bundle_with_held_out_parts_round_trips_through_the_store(suffix, tmp_path):
    from tgpflow.stats.split import split_chunk_stats

    bundle = split_chunk_stats(A, np.arange(len(A)), 0.3, 7, tgp_chunk_stats, {0: (features(0),)}, grid=grid(0))
    assert isinstance(bundle[("val", 0)], HeldOut)
    store = StatsStore(tmp_path / "store")
    back = store.load(store.save(bundle, f"bundle{suffix}"))
    assert set(back) == set(bundle)
    for key in bundle:
        assert_identical(back[key], bundle[key])


def test_an_optional_sum_is_kept_only_when_both_parts_have_it():
    with_, without = tgp_chunk_stats(A, features(0), with_phi_gram=True), tgp_chunk_stats(B, features(0))
    assert (with_ + without).phi_gram is None and (without + with_).phi_gram is None
    assert (with_ - with_).phi_gram is not None
    assert with_.scaled(0.5).phi_gram is not None and without.scaled(0.5).phi_gram is None


def test_carried_fields_must_agree():
    a = ncfd_chunk_stats(A, features(0), SIGMAS)
    with pytest.raises(ValueError, match="noise levels"):
        a + ncfd_chunk_stats(B, features(0), SIGMAS[:2])
    with pytest.raises(ValueError, match="cannot remove 500 rows from 300"):
        kde_sdo_chunk_stats(A, features(0)) - kde_sdo_chunk_stats(np.concatenate([A, B]), features(0))
    with pytest.raises(ValueError, match="cannot combine TGPStats with KDESDOStats: statistics of different kinds"):
        tgp_chunk_stats(A, features(0)) + kde_sdo_chunk_stats(A, features(0))


def test_stats_merge_names_the_file_of_another_kind_and_writes_nothing(tmp_path):
    """`tgpflow stats merge` of FD and NCFD statistics (one draw): one line naming the file and both kinds, exit 1
    and no output (it was Python's TypeError, an "internal error"); of one kind, their sum."""
    from click.testing import CliRunner

    from tgpflow.cli import main

    paths = [str(tmp_path / name) for name in ("a.stats.npz", "b.stats.npz", "c.stats.npz")]
    tgp_chunk_stats(A, features(0)).save(paths[0])
    tgp_chunk_stats(B, features(0)).save(paths[1])
    ncfd_chunk_stats(B, features(0), SIGMAS).save(paths[2])
    out = tmp_path / "merged.npz"
    bad = CliRunner().invoke(main, ["stats", "merge", *paths, "--out", str(out)])
    assert bad.exit_code == 1 and not out.exists()
    assert (f"Error: {paths[2]} does not add to {paths[0]}, {paths[1]}: cannot combine TGPStats with NCFDStats"
            in bad.output), bad.output
    good = CliRunner().invoke(main, ["--json", "stats", "merge", *paths[:2], "--out", str(out)])
    assert good.exit_code == 0 and json.loads(good.output)["rows"] == A.shape[0] + B.shape[0]


@pytest.mark.parametrize("kind", MAKERS)
def test_dask_sees_the_bytes_of_the_arrays(kind):
    a = MAKERS[kind](A, 0)
    arrays = sum(np.asarray(v).nbytes for v in a.to_arrays().values())
    assert arrays > 0 and arrays <= sizeof(a) <= arrays + 4096


# -- artifacts written before the base -------------------------------------------------------------------------
V1_NAMES = ["tgp.npz", "tgp_weighted.npz", "ncfd.npz", "kde_sdo.npz", "kde_sdo_weighted.npz", "kef.npz", "lite.npz",
            "diag.npz", "bundle.npz"]


def without_draw(stats: Any) -> Any:
    """``stats`` as a file written before statistics carried their draw holds them: the draw's fingerprint only."""
    if isinstance(stats, HeldOut):
        return HeldOut(without_draw(stats.stats), without_draw(stats.projections))
    return dataclasses.replace(stats, draw=None)


def _npz_layout(path: Path) -> tuple[dict[str, tuple[str, tuple[int, ...]]], dict[str, Any]]:
    """Array names with dtype and shape, and the header's kind and metadata, of an artifact ``.npz``."""
    with np.load(path, allow_pickle=False) as z:
        header = json.loads(str(z["__tgpflow_meta__"]))
        layout = {k: (z[k].dtype.str, z[k].shape) for k in z.files if k != "__tgpflow_meta__"}
    return layout, {"kind": header["kind"], "meta": header["meta"]}


@pytest.mark.parametrize("name", V1_NAMES)
def test_the_legacy_writer_reproduces_the_files_f98e7ed_wrote(name, v1_dir):
    """Kind, schema, metadata (fingerprints included) and array names, dtypes and shapes equal those of the files
    f98e7ed wrote, pinned as digests (tests/legacy_stats.py): what the tests below load is that layout."""
    assert layout_digest(v1_dir / name) == V1_DIGESTS[name], layout_document(v1_dir / name)


@pytest.mark.parametrize("name", V1_NAMES)
def test_artifacts_written_before_the_base_load_bit_for_bit(name, v1_dir, tmp_path):
    from tgpflow.pipeline.store import load_stats

    want = stats_v1()[name]  # the same rows and draws, computed by this tgpflow
    got = load_stats(v1_dir / name)
    if name == "bundle.npz":
        assert set(got) == set(want)
        for key in want:
            assert_identical(got[key], without_draw(want[key]))
        again = tmp_path / StatsStore(tmp_path).save(got, name)  # a bundle is saved by the store
    else:
        assert_identical(got, without_draw(want))
        again = got.save(tmp_path / name)
    # written again: the same array names, dtypes and shapes, kind and metadata, and every array bit for bit
    assert _npz_layout(again) == _npz_layout(v1_dir / name)
    with np.load(again, allow_pickle=False) as a, np.load(v1_dir / name, allow_pickle=False) as b:
        assert all(a[k].tobytes() == b[k].tobytes() for k in b.files if k != "__tgpflow_meta__")
