"""bandwidth="auto": the pilot's cross-validation folds and the fold-averaged curve (docs/mathematics.md, "MAP,
baselines and sampling", log Z)."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import integrate

from tgpflow.core.gaussian_base import Base
from tgpflow.features.rff import RandomFourierFeatures
from tgpflow.solve.pilot_bandwidth import TooFewRowsError, pilot_bandwidth
from tgpflow.solve.tgp import solve_fd
from tgpflow.stats.split import SPLIT_SALT, fold_index, validation_mask
from tgpflow.stats.tgp import tgp_chunk_stats


def test_folds_are_the_validation_hash_cut_into_equal_shares():
    keys = np.arange(60_000, dtype=np.int64)
    folds = fold_index(keys, 3, SPLIT_SALT)
    assert np.array_equal(folds, fold_index(keys, 3, SPLIT_SALT))  # a fixed hash, no random state
    # rows below fold j are exactly those validation_mask holds out at fraction j/3
    for j in (1, 2):
        assert np.array_equal(folds < j, validation_mask(keys, j / 3, SPLIT_SALT))
    share = np.bincount(folds) / keys.size
    assert np.all(np.abs(share - 1 / 3) < 4 * np.sqrt(1 / 3 * 2 / 3 / keys.size))  # 4 binomial s.d.
    with pytest.raises(ValueError, match="at least 2"):
        fold_index(keys, 1)


def _oracle_loglik(train: np.ndarray, val: np.ndarray, feats: RandomFourierFeatures, lam: float) -> float:
    """Held-out log-likelihood of the FD fit on ``train`` (1-D), its log Z by adaptive quadrature."""
    mu, var = float(train.mean()), float(train.var())
    base = Base(np.array([mu]), np.array([[var]]), np.array([[1.0 / var]]))
    theta, _, _ = solve_fd(tgp_chunk_stats(train[:, None], feats, 1 << 24), feats, base, lam)

    def log_q(x: np.ndarray) -> np.ndarray:
        return feats.transform(np.atleast_2d(x).reshape(-1, 1))[0] @ theta - 0.5 * (x - mu) ** 2 / var \
            - 0.5 * np.log(2 * np.pi * var)

    sd = np.sqrt(var)
    z, _ = integrate.quad(lambda x: float(np.exp(log_q(np.array([x]))[0])), mu - 12 * sd, mu + 12 * sd, limit=400)
    return float(np.mean(log_q(val)) - np.log(z))


def test_the_pilot_curve_is_the_fold_average_of_each_folds_held_out_loglik():
    rng = np.random.default_rng(3)
    rows = np.concatenate([rng.normal(-1.5, 0.5, 1500), rng.normal(1.0, 0.8, 1500)])[:, None]
    folds = fold_index(np.arange(rows.shape[0]), 3, SPLIT_SALT)
    feats = RandomFourierFeatures.draw(40, bandwidth=1.0, n_dims=1, shift=rows.mean(axis=0), random_state=0)
    gammas, lams = [0.3, 0.6], [0.1, 10.0]
    gamma, curve = pilot_bandwidth(rows, folds, feats, gammas, lams, n_draws=400_000, random_state=1,
                                   block_bytes=1 << 24)
    assert gamma in gammas and len(curve) == 2
    for row in curve:
        g_feats = feats.with_bandwidth(row["bandwidth"])
        want = np.mean([_oracle_loglik(rows[folds != k, 0], rows[folds == k, 0], g_feats, row["lam"])
                        for k in range(3)])
        # log Z by importance sampling vs quadrature: 1e-3 apart; one fold alone is 3e-3 to 3e-2 off the mean
        assert row["loglik"] == pytest.approx(want, abs=2e-3)
    # the chosen γ is the better of the two curves' (healthy) log-likelihoods
    assert gamma == max(curve, key=lambda r: r["loglik"])["bandwidth"]


def test_a_pilot_too_small_for_the_folds_is_refused():
    rows = np.arange(4.0)[:, None]
    feats = RandomFourierFeatures.draw(8, bandwidth=1.0, n_dims=1, shift=np.zeros(1), random_state=0)
    with pytest.raises(TooFewRowsError, match="fold"):
        pilot_bandwidth(rows, np.array([0, 0, 0, 1]), feats, [1.0], [1.0], n_draws=100, random_state=0,
                        block_bytes=1 << 20)


def _serial_curve(rows, folds, feats, gammas, lams, n_draws, random_state):
    """pilot_bandwidth's curve computed one (γ, fold) after another in this process, BLAS on one thread: the
    loop it ran on the client before each γ became a task (the reference its tasks must equal bit for bit)."""
    from threadpoolctl import threadpool_limits

    from tgpflow.core.gaussian_base import base_from_moments
    from tgpflow.solve.pilot_bandwidth import fold_average
    from tgpflow.solve.select import RidgePath, choose, score_tilts
    from tgpflow.solve.tgp import fd_system
    from tgpflow.stats.support import SupportBox

    parts_rows = [rows[folds == k] for k in range(3)]
    best = []
    with threadpool_limits(1, "blas"):
        for g in gammas:
            f = feats.with_bandwidth(g)
            stats = [tgp_chunk_stats(p, f, 1 << 24) for p in parts_rows]
            per_fold = []
            for k in range(3):
                train = sum(stats[j] for j in range(3) if j != k)
                base = base_from_moments(train.moments)
                A0, b = fd_system(train, f, base, 0.0)
                thetas = RidgePath(A0, b).thetas([lam * g * g for lam in lams])
                box = SupportBox.from_rows(np.concatenate([parts_rows[j] for j in range(3) if j != k]))
                per_fold.append(score_tilts(stats[k], f, base, thetas, n_draws=n_draws, random_state=random_state,
                                            box=box))
            rows_g = [dict(bandwidth=g, lam=lam, **fold_average([pf[j] for pf in per_fold]))
                      for j, lam in enumerate(lams)]
            best.append(rows_g[choose(rows_g, "loglik")])
    return best


@pytest.mark.parametrize("seed", [np.random.SeedSequence(5).spawn(2)[1], 7])
def test_the_per_gamma_tasks_equal_the_serial_loop_bit_for_bit(seed):
    """Each γ is a task (on the workers, in parallel); the curve is the serial loop's, bit for bit, on the threaded
    scheduler and on a distributed cluster — the normalisers' draws included (a SeedSequence's spawn is stateful:
    the serial loop's (γ, fold) calls drew successive children, and each task is given its place in that order)."""
    from distributed import Client, LocalCluster

    rng = np.random.default_rng(4)
    rows = rng.normal(size=(1200, 2)) * [1.0, 0.5]
    folds = fold_index(np.arange(rows.shape[0]), 3, SPLIT_SALT)
    feats = RandomFourierFeatures.draw(32, bandwidth=1.0, n_dims=2, shift=rows.mean(axis=0), random_state=0)
    gammas, lams = [0.4, 0.8, 1.6], [0.01, 1.0, 100.0]

    def copy(s):
        return s if not isinstance(s, np.random.SeedSequence) else np.random.SeedSequence(
            s.entropy, spawn_key=s.spawn_key, n_children_spawned=s.n_children_spawned)

    want = _serial_curve(rows, folds, feats, gammas, lams, 3000, copy(seed))
    kwargs = dict(n_draws=3000, block_bytes=1 << 24)
    _, threads = pilot_bandwidth(rows, folds, feats, gammas, lams, random_state=copy(seed), **kwargs)
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=False, dashboard_address=None) as cluster, \
            Client(cluster):
        _, dist = pilot_bandwidth(rows, folds, feats, gammas, lams, random_state=copy(seed), **kwargs)
    assert threads == want and dist == want


@pytest.mark.filterwarnings("ignore::tgpflow.errors.DiagnosticWarning")
def test_a_column_constant_in_some_folds_does_not_stop_the_bandwidth_search():
    """A pixel that is 0 on every row but a few, all in one cross-validation fold (ADBench's mnist): the folds
    whose training rows hold it constant take the Gaussian of all the pilot rows instead of refusing the table."""
    from tgpflow import GPTiltedDensity

    n = 3000
    X = np.random.default_rng(0).normal(size=(n, 3))
    X[:, 2] = 0.0
    folds = fold_index(np.arange(n, dtype=np.int64), 3, SPLIT_SALT)
    train = ~validation_mask(np.arange(n, dtype=np.int64), 0.1, SPLIT_SALT)
    rare = np.flatnonzero((folds == 0) & train)[:5]
    X[rare, 2] = 1.0
    est = GPTiltedDensity(method="fd", n_features=64, random_state=0).fit(X)
    assert est.bandwidth_selection_["chosen"] == est.bandwidth_
    assert np.isfinite(est.log_density(X)).all()


def test_folds_that_share_a_mixture_base_share_its_draws_and_each_scores_as_if_scored_alone():
    """Under a mixture base every fold's tilts are scored on one set of proposal draws (score_fold_tilts, the
    features of a block formed once): each fold's held-out log-likelihood, normaliser, ESS and mass outside its own
    box are those of scoring that fold alone on the same seeded draws."""
    from tgpflow.core.gaussian_base import mixture_base
    from tgpflow.features.mixture_base import GaussianMixtureBase
    from tgpflow.solve.select import score_fold_tilts, score_tilts
    from tgpflow.stats.support import SupportBox
    from tgpflow.stats.tgp import mixture_terms

    rng = np.random.default_rng(3)
    rows = np.concatenate([rng.normal(size=(600, 2)), rng.normal(2.5, 0.4, size=(300, 2))])
    mixture = GaussianMixtureBase(np.array([0.6, 0.4]), np.array([[0.0, 0.0], [2.5, 2.5]]),
                                  np.stack([np.eye(2), 0.16 * np.eye(2)]))
    feats = RandomFourierFeatures.draw(24, bandwidth=0.8, n_dims=2, shift=rows.mean(axis=0), random_state=1)
    parts = np.array_split(rows[rng.permutation(rows.shape[0])], 3)
    vals = [tgp_chunk_stats(p, feats, 1 << 20, "float64", False, mixture, mixture_terms(mixture, p)) for p in parts]
    thetas = [rng.normal(scale=0.3, size=(4, 24)) for _ in parts]
    boxes = [SupportBox.from_rows(np.concatenate([q for j, q in enumerate(parts) if j != k])) for k in range(3)]
    base = mixture_base(mixture)
    shared = score_fold_tilts(vals, feats, base, thetas, n_draws=5000, random_state=11, boxes=boxes)
    for k in range(3):
        alone = score_tilts(vals[k], feats, base, thetas[k], n_draws=5000, random_state=11, box=boxes[k])
        assert [sorted(r) for r in shared[k]] == [sorted(r) for r in alone]
        for got, want in zip(shared[k], alone, strict=True):
            for key in want:
                assert got[key] == pytest.approx(want[key], rel=1e-12, abs=1e-15), (k, key)
    # the folds' thetas and boxes differ, so their scores do too: the loop did not score one fold three times
    assert len({round(shared[k][0]["loglik"], 9) for k in range(3)}) == 3
    with pytest.raises(ValueError, match="one fold"):
        score_fold_tilts(vals, feats, base, thetas, n_draws=100, random_state=0, boxes=boxes,
                         projections=object(), grid=None)
