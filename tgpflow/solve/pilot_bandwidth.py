"""``bandwidth="auto"``: the RFF bandwidth γ chosen by a held-out criterion on the pilot sample, before the pass
(docs/gp_tilted.md). Each γ of a grid of multiples of Scott's is fitted by FD on the pilot rows of all folds but
one and scored on that one by its held-out log-likelihood (:mod:`tgpflow.solve.select`), the folds' scores averaged.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from tgpflow.core.engine import Progress
from tgpflow.core.proposal import DRAW_BLOCK
from tgpflow.features.rff import RandomFourierFeatures
from tgpflow.solve.select import RidgePath, choose, score_fold_tilts, score_tilts
from tgpflow.solve.tgp import fd_system
from tgpflow.stats.support import SupportBox
from tgpflow.stats.tgp import mixture_terms

__all__ = ["AUTO_BANDWIDTH_FACTORS", "AUTO_BANDWIDTH_ROWS", "AUTO_BANDWIDTH_FOLDS", "pilot_bandwidth", "fold_average",
           "TooFewRowsError"]


class TooFewRowsError(ValueError):
    """A selection has too few rows to hold any out."""


#: Multiples of Scott's γ (for the pilot's size) that ``bandwidth="auto"`` tries on the pilot sample.
#: Measured on the demo mixture (3-D, S = 1000): the held-out log-likelihood peaks at 2–3× Scott's γ
#: at 200k rows and still at 0.45 (3× Scott's 0.15) at 2M rows, where Scott's own γ is 0.11 nats worse.
AUTO_BANDWIDTH_FACTORS = (0.5, 0.71, 1.0, 1.41, 2.0, 2.83, 4.0, 5.66)
#: Pilot rows that ``bandwidth="auto"`` fits on (each γ costs an FD pass over them).
AUTO_BANDWIDTH_ROWS = 30_000
#: Cross-validation folds of those rows (:func:`pilot_bandwidth` says why more than one split).
AUTO_BANDWIDTH_FOLDS = 3


def pilot_bandwidth(rows: np.ndarray, folds: np.ndarray, features: RandomFourierFeatures, gammas: list[float],
                    lams: list[float], *, n_draws: int, random_state: Any, block_bytes: int,
                    data_units: Callable[[np.ndarray], np.ndarray] | None = None,
                    progress: Progress | None = None, mixture: Any = None) -> tuple[float, list[dict[str, float]]]:
    """The γ of ``gammas`` whose best FD fit (over ``lams``) has the best held-out log-likelihood among the healthy
    candidates (:func:`~tgpflow.solve.select.choose`), cross-validated over the pilot rows' ``folds``
    (an integer fold per row, :func:`~tgpflow.stats.split.fold_index`). Every γ shares the draw (Z, c);
    the normalisers' proposal draws come from ``random_state`` in the order (γ, fold) — a SeedSequence
    spawns new children for each (:func:`_serial_seeds`); under a mixture base, whose folds share one base, every
    fold of a γ takes its first fold's draws (:func:`~tgpflow.solve.select.score_fold_tilts`). Returns γ and, per
    γ, its best row (scores averaged over folds). ``progress`` is called with the futures of its one distributed compute
    (:data:`tgpflow.core.engine.Progress`). ``mixture``: the mixture base of every fold's fit (else each fold's
    training rows' N(μ, Σ); a column constant within one fold's training rows takes the Gaussian of all the
    pilot rows instead, which the pilot check has seen to vary).

    Why folds: the held-out log-likelihood is flat in γ near its peak, so one split's choice moves
    with the split (measured on the demo mixture, 3 feature draws × 2 sizes: one 20 % split picked
    γ from 0.55 to 1.10; three folds picked the same γ at 200k and 2M rows for two of the three
    draws). Each fold's statistics are computed once per γ; a fold's training statistics are the
    sum of the others' (the statistics are additive), so K folds cost one pass over the pilot rows
    per γ and K solves.

    Each γ is one task (:func:`_bandwidth_rows`: its folds' statistics, solves and scores), so the
    candidates run in parallel on the workers, their S×S statistics stay there, and BLAS runs with one
    thread as in every task: the curve does not depend on the client's core count.
    """
    import dask

    from tgpflow.core.engine import compute

    n_folds = int(folds.max()) + 1 if folds.size else 0
    sizes = np.bincount(folds, minlength=n_folds) if folds.size else np.zeros(0, dtype=np.int64)
    if n_folds < 2 or sizes.min() < 2:
        raise TooFewRowsError(f"bandwidth='auto' needs at least 2 rows in each of at least 2 folds of the pilot "
                              f"sample; got fold sizes {sizes.tolist()}: give a bandwidth")
    parts_rows = [rows[folds == k] for k in range(n_folds)]
    terms = None if mixture is None else [mixture_terms(mixture, part) for part in parts_rows]  # γ-free too
    boxes = []
    for k in range(n_folds):
        train_rows = np.concatenate([parts_rows[j] for j in range(n_folds) if j != k])
        boxes.append(SupportBox.from_rows(data_units(train_rows) if data_units is not None else train_rows))
    # one task per γ: its folds' statistics and their scores stay on the worker (only the curve comes back)
    task = dask.delayed(_bandwidth_rows, pure=True)
    shared = [dask.delayed(a, pure=True) for a in (parts_rows, boxes, features, lams)]
    seeds = _serial_seeds(random_state, len(gammas) * n_folds, n_draws)
    curves = compute(*[task(*shared, g, n_draws=n_draws, random_states=seeds[i * n_folds:(i + 1) * n_folds],
                            block_bytes=block_bytes, data_units=data_units, mixture=mixture,
                            terms=None if terms is None else dask.delayed(terms, pure=True))
                       for i, g in enumerate(gammas)], progress=progress)
    best_rows = [rows_g[choose(rows_g, "loglik")] for rows_g in curves]
    chosen = best_rows[choose(best_rows, "loglik")]
    return float(chosen["bandwidth"]), best_rows


def _serial_seeds(random_state: Any, n_calls: int, n_draws: int) -> list[Any]:
    """The ``random_state`` that each of ``n_calls`` successive normaliser estimates of ``n_draws`` draws would
    see, as values: a SeedSequence's ``spawn`` and a Generator's draws are stateful, so calls made one after
    another on the client drew from successive children; a task gets a copy of its argument, so each gets
    the state at its place in that order (a copy advanced here; the caller's is left as it was)."""
    if isinstance(random_state, np.random.SeedSequence):
        seq = _copy_seed(random_state)
        out = []
        for _ in range(n_calls):
            out.append(_copy_seed(seq))
            seq.spawn(-(-int(n_draws) // DRAW_BLOCK))  # what proposal_blocks spawns per estimate
        return out
    if isinstance(random_state, np.random.Generator):
        return [np.random.SeedSequence(int(random_state.integers(2**63))) for _ in range(n_calls)]
    return [random_state] * n_calls


def _copy_seed(seq: np.random.SeedSequence) -> np.random.SeedSequence:
    return np.random.SeedSequence(seq.entropy, spawn_key=seq.spawn_key, pool_size=seq.pool_size,
                                  n_children_spawned=seq.n_children_spawned)


def _bandwidth_rows(parts_rows: list[np.ndarray], boxes: list[SupportBox], features: RandomFourierFeatures,
                    lams: list[float], gamma: float, *,
                    n_draws: int, random_states: list[Any], block_bytes: int,
                    data_units: Callable[[np.ndarray], np.ndarray] | None,
                    mixture: Any = None, terms: list[Any] | None = None) -> list[dict[str, float]]:
    """The fold-averaged scores of every λ at one γ of :func:`pilot_bandwidth` (a task: the folds' S×S
    statistics never leave it). Each fold's statistics are computed once; a fold's training statistics
    are the sum of the others'. ``terms``: each fold's :func:`~tgpflow.stats.tgp.mixture_terms` under a mixture
    base, also the same for every γ."""
    from tgpflow.core.gaussian_base import base_from_moments, mixture_base
    from tgpflow.stats.tgp import tgp_chunk_stats

    n_folds = len(parts_rows)
    feats = features.with_bandwidth(gamma)
    fold_terms = terms if terms is not None else [None] * len(parts_rows)
    fold_stats = [tgp_chunk_stats(part, feats, block_bytes, "float64", False, mixture, t)
                  for part, t in zip(parts_rows, fold_terms, strict=True)]
    shared = None if mixture is None else mixture_base(mixture)
    bases, thetas = [], []
    for k in range(n_folds):
        train = sum(fold_stats[j] for j in range(n_folds) if j != k)
        if shared is not None:
            base = shared
        else:
            try:
                base = base_from_moments(train.moments)
            except ValueError:  # a column constant in these folds' rows (mnist's pixels): all the pilot's rows
                base = base_from_moments(sum(fold_stats).moments)
        A0, b = fd_system(train, feats, base, 0.0)
        bases.append(base)
        thetas.append(RidgePath(A0, b).thetas([lam * gamma * gamma for lam in lams]))  # θ only: no eigenvectors
    if shared is not None:  # one base for every fold: one set of draws, fold 0's (score_fold_tilts)
        per_fold = score_fold_tilts(fold_stats, feats, shared, thetas, n_draws=n_draws,
                                    random_state=random_states[0], boxes=boxes, data_units=data_units)
    else:
        per_fold = [score_tilts(fold_stats[k], feats, bases[k], thetas[k], n_draws=n_draws,
                                random_state=random_states[k], box=boxes[k], data_units=data_units)
                    for k in range(n_folds)]
    return [dict(bandwidth=gamma, lam=lam, **fold_average([pf[j] for pf in per_fold])) for j, lam in enumerate(lams)]


def fold_average(scores: list[dict[str, float]]) -> dict[str, float]:
    """One candidate's scores over the folds: the mean of each score, but the worst fold's health (the
    least ESS, the most mass outside, the tightest limit) — a candidate is healthy only if it is in every fold."""
    # (the mean of the folds' KS noise, not that over √folds: the folds share the seeded proposal draws)
    out = {key: float(np.mean([sc[key] for sc in scores])) for key in scores[0]}
    out["ess_fraction"] = min(sc["ess_fraction"] for sc in scores)
    if "mass_outside" in out:
        out["mass_outside"] = max(sc["mass_outside"] for sc in scores)
    if "mass_outside_limit" in out:
        out["mass_outside_limit"] = min(sc["mass_outside_limit"] for sc in scores)
    return out
