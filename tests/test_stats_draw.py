"""Statistics carry the draw they were computed with (issue 16, "Values").

For every estimator family (GP-tilted FD, NCFD, FVPD, MAP and a selecting FD; the kernel score models
curl-free, lite and diagonal, and a selecting one; KDE-SDO):

(a) the statistics of ``accumulate`` carry a draw equal to the estimator's;
(b) saving and loading them (a statistics artifact, the pipeline's statistics store, a model file) keeps it;
(c) a fresh estimator — one that never ran ``fit`` or ``accumulate`` — solves the loaded statistics from their
    own draw to the log density of the estimator that accumulated them;
(d) statistics files written before statistics carried their draw (their layout, written by ``tests/legacy_stats.py``) load without it, and
    solve once it is given (``with_draw``, or ``features=``/``basis=``);
(e) statistics of two different draws do not add up, and an estimator with another draw refuses them.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache
from typing import Any

import numpy as np
import pytest

import tgpflow
from tgpflow import GPTiltedDensity, NystromKEF, RootSobolevDensity, ScoreEstimator
from tgpflow.errors import FeaturesMismatchError
from tgpflow.pipeline.store import StatsStore, load_stats
from tgpflow.stats.kef import DiagStats, KEFStats, LiteStats
from tgpflow.stats.projections import ProjectionCounts
from tgpflow.stats.split import HeldOut, StatsBundle
from tests.legacy_stats import inputs

# a few hundred rows: the fits' quality checks may warn (not what these tests check)
pytestmark = pytest.mark.filterwarnings("ignore::tgpflow.errors.DiagnosticWarning")

COMMON = dict(n_features=16, lam=0.5, bandwidth=0.8, normalizer_draws=2000)

#: Family → a fresh estimator (the same parameters every call).
FAMILIES: dict[str, Callable[[], Any]] = {
    "fd": lambda: GPTiltedDensity(method="fd", **COMMON),
    "ncfd": lambda: GPTiltedDensity(method="ncfd", noise_levels=3, **COMMON),
    "fvpd": lambda: GPTiltedDensity(method="fvpd", **COMMON),
    "map": lambda: GPTiltedDensity(method="map", map_draws=3000, **COMMON),
    "fd_selected": lambda: GPTiltedDensity(method="fd", n_features=16, lam="auto", lam_grid=[0.3, 3.0],
                                           bandwidth=[0.6, 1.0], normalizer_draws=2000),
    # bounded columns: the statistics are sums in the fitting space (log of x₀ + 6); the fresh estimator's
    # bounds= maps them back
    "fd_bounded": lambda: GPTiltedDensity(method="fd", bounds=[(-6.0, None), (None, None)], **COMMON),
    "nkef": lambda: NystromKEF(n_basis=10, base="gaussian", lam=1e-2),
    "nkef_lite": lambda: NystromKEF(n_basis=10, lite=True, base="gaussian", lam=1e-2),
    "stein": lambda: ScoreEstimator.preset("stein", n_basis=10, lam=1e-2),
    "kernel_selected": lambda: NystromKEF(n_basis=10, lam="auto", lam_grid=[1e-3, 1e-1], bandwidth=[0.5, 1.0]),
    "kde_sdo": lambda: RootSobolevDensity(method="kde_sdo", n_features=40),
}


def rows(n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return np.concatenate([rng.normal(size=(n - n // 3, 2)), rng.normal(size=(n // 3, 2)) * 0.5 + [2.0, -1.0]])


X = rows(300, 1)


def estimator_draw(est: Any) -> Any:
    """The draw an estimator accumulates with: its features, its basis, or its SDO draw at the smoothness."""
    if isinstance(est, RootSobolevDensity):
        return est.draw_.at(float(est.smoothness))
    return est.features_ if isinstance(est, GPTiltedDensity) else est.basis_


def evaluate(est: Any, x: np.ndarray) -> np.ndarray:
    """The log density, or the score of a model that has none (a diagonal kernel's)."""
    return est.log_density(x) if hasattr(est, "log_density") else est.grad_log_density(x)


def parts(stats: Any) -> list[tuple[Any, Any]]:
    """(key, statistics with a draw) of a value: itself, or every part of a bundle (a held-out part's two)."""
    if not isinstance(stats, StatsBundle):
        return [(None, stats)]
    out = []
    for key in sorted(stats, key=repr):  # a loaded bundle's parts come in the order they are stored
        part = stats[key]
        out += [(key, part.stats), (key, part.projections)] if isinstance(part, HeldOut) else [(key, part)]
    return out


def assert_same_draw(got: Any, want: Any) -> None:
    """Two draws with the same fingerprint and the same arrays, bit for bit."""
    assert got is not None and got.fingerprint == want.fingerprint
    a, b = got.to_arrays(), want.to_arrays()
    assert set(a) == set(b)
    for k in b:
        np.testing.assert_array_equal(np.asarray(a[k]), np.asarray(b[k]), err_msg=k)


@cache
def accumulated(family: str) -> tuple[Any, Any]:
    """An estimator that accumulated the statistics of ``X`` and then solved them, and those statistics."""
    est = FAMILIES[family]()
    stats = est.accumulate(X)
    return est.fit_from_stats(stats), stats


@pytest.mark.parametrize("family", FAMILIES)
def test_accumulated_statistics_carry_the_estimators_draw(family):
    est, stats = accumulated(family)
    draw = estimator_draw(est)
    for key, part in parts(stats):
        if key is None:
            assert_same_draw(part.draw, draw)
        elif isinstance(part, ProjectionCounts):  # a held-out part's projection grid
            assert_same_draw(part.draw, est.heldout_grid_)
        else:  # a bandwidth of the grid: the same draw at that bandwidth
            assert_same_draw(part.draw, draw.with_bandwidth(key[1]))
        assert part.fingerprint == part.draw.fingerprint


@pytest.mark.parametrize("family", FAMILIES)
def test_a_fresh_estimator_solves_loaded_statistics_from_their_own_draw(family, tmp_path):
    est, stats = accumulated(family)
    want = evaluate(est, X)
    store = StatsStore(tmp_path / "store")
    loaded = {"store": store.load(store.save(stats, "stats.npz"))}
    if not isinstance(stats, StatsBundle):
        loaded["artifact"] = type(stats).load(stats.save(tmp_path / "stats.zarr"))
    for where, back in loaded.items():
        assert type(back) is type(stats), where
        for (key, part), (_, orig) in zip(parts(back), parts(stats), strict=True):
            assert_same_draw(part.draw, orig.draw)
            assert part.fingerprint == orig.fingerprint, (where, key)
        fresh = FAMILIES[family]().fit_from_stats(back)
        np.testing.assert_allclose(evaluate(fresh, X), want, rtol=1e-12, err_msg=where)


def test_a_fresh_estimator_refuses_bounds_by_column_name_it_cannot_resolve():
    _, stats = accumulated("fd_bounded")
    with pytest.raises(ValueError, match="bounds= names columns"):
        GPTiltedDensity(method="fd", bounds={"x0": (-6.0, None)}, **COMMON).fit_from_stats(stats)


def test_a_failed_fresh_solve_leaves_no_bounds_behind():
    est, stats = accumulated("fd_bounded")
    fresh = GPTiltedDensity(method="fd", **COMMON)
    with pytest.raises(FeaturesMismatchError):  # another draw: refused before anything is solved
        fresh.fit_from_stats(stats, features=accumulated("fd")[0].features_)
    fresh.set_params(bounds=[(-6.0, None), (None, None)]).fit_from_stats(stats)
    np.testing.assert_allclose(fresh.log_density(X), est.log_density(X), rtol=1e-12)


@pytest.mark.parametrize("family, other", [("fd_selected", "fd"), ("kernel_selected", "nkef")])
def test_a_selection_bundle_with_another_draw_is_refused_before_any_candidate_is_scored(family, other, monkeypatch):
    _, bundle = accumulated(family)
    fresh = FAMILIES[family]()
    scored = []
    selector = type(fresh._selector())  # the family's candidates
    monkeypatch.setattr(selector, "candidates", lambda self, *a, **k: scored.append(a) or [])
    with pytest.raises(FeaturesMismatchError):  # each family's own words (features, Nyström basis)
        fresh.fit_from_stats(bundle, estimator_draw(FAMILIES[other]().set_params(random_state=7).fit(X)))
    assert scored == []  # refused first: no held-out scoring with the wrong draw
    assert not hasattr(fresh, "selection_")


@pytest.mark.parametrize("family", ["fd", "ncfd", "nkef", "kde_sdo"])
def test_a_model_files_statistics_carry_its_draw(family, tmp_path):
    est = FAMILIES[family]().fit(X)
    back = tgpflow.load(est.save(tmp_path / "model.npz"))
    assert_same_draw(back.stats_.draw, est.stats_.draw)
    fresh = FAMILIES[family]().fit_from_stats(back.stats_)
    np.testing.assert_allclose(fresh.log_density(X), est.log_density(X), rtol=1e-12)


@pytest.mark.parametrize("family", FAMILIES)
def test_statistics_of_another_draw_are_refused(family):
    _, stats = accumulated(family)
    other_est = FAMILIES[family]().set_params(random_state=7)
    other = other_est.accumulate(rows(200, 2))
    with pytest.raises(FeaturesMismatchError, match="cannot combine"):
        stats + other
    # an estimator that already has its own (other) draw solves nothing of another
    with pytest.raises(FeaturesMismatchError, match="another|different"):
        other_est.fit_from_stats(stats)


# -- files written before statistics carried their draw ------------------------------------------------------
#: v1 file → a fresh estimator for its statistics, and which of the v1 draws they were computed with.
V1_FAMILIES: dict[str, tuple[Callable[[], Any], str]] = {
    "tgp.npz": (lambda: GPTiltedDensity(method="fd", n_features=8, lam=0.5, bandwidth=0.9, normalizer_draws=2000),
                "features"),
    "ncfd.npz": (lambda: GPTiltedDensity(method="ncfd", n_features=8, noise_levels=3, lam=0.5, bandwidth=0.9,
                                         normalizer_draws=2000), "features"),
    "kde_sdo.npz": (lambda: RootSobolevDensity(method="kde_sdo", n_features=8), "features"),
    "kef.npz": (lambda: NystromKEF(n_basis=4, bandwidth=1.2, base="gaussian", lam=1e-2), "basis"),
    "lite.npz": (lambda: NystromKEF(n_basis=4, bandwidth=1.2, lite=True, base="gaussian", lam=1e-2), "basis"),
    "diag.npz": (lambda: ScoreEstimator.preset("stein", n_basis=4, bandwidth=1.2, lam=1e-2), "basis"),
}


@pytest.mark.parametrize("name", [*V1_FAMILIES, "bundle.npz"])
def test_files_written_before_load_without_their_draw(name, v1_dir):
    X1, features, basis, grid = inputs()
    stats = load_stats(v1_dir / name)
    for key, part in parts(stats):
        assert part.draw is None
        want = (grid if isinstance(part, ProjectionCounts) else
                basis if isinstance(part, KEFStats | LiteStats | DiagStats) else features)
        assert part.fingerprint == want.fingerprint, key


@pytest.mark.parametrize("name", V1_FAMILIES)
def test_files_written_before_solve_with_the_draw_given(name, v1_dir):
    X1, features, basis, _ = inputs()
    make, which = V1_FAMILIES[name]
    draw = features if which == "features" else basis
    stats = load_stats(v1_dir / name)
    with pytest.raises(ValueError, match="do not carry"):
        make().fit_from_stats(stats)  # a fresh estimator: nothing to solve with
    given = make().fit_from_stats(stats, draw)  # the draw passed, as before
    carried = make().fit_from_stats(stats.with_draw(draw))
    np.testing.assert_allclose(evaluate(carried, X1), evaluate(given, X1), rtol=1e-12)
    other = features if which == "basis" else basis
    with pytest.raises(FeaturesMismatchError):
        stats.with_draw(other)
