"""bandwidth="auto": the pilot's cross-validation folds and the fold-averaged curve (MATH.md §5, log Z)."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import integrate

from tgpflow.core.gaussian_base import Base
from tgpflow.features.rff import RandomFourierFeatures
from tgpflow.solve.select import TooFewRowsError, pilot_bandwidth
from tgpflow.solve.tgp import solve_fd
from tgpflow.stats.projections import ProjectionGrid
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
    gamma, curve = pilot_bandwidth(rows, folds, feats, gammas, lams, criterion="loglik", n_draws=400_000,
                                   random_state=1, grid=ProjectionGrid.from_rows(rows), block_bytes=1 << 24)
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
        pilot_bandwidth(rows, np.array([0, 0, 0, 1]), feats, [1.0], [1.0], criterion="loglik", n_draws=100,
                        random_state=0, grid=ProjectionGrid.from_rows(rows), block_bytes=1 << 20)
