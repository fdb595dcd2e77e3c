"""Discrete columns' code frequencies matched to the data's sums (docs/gp_tilted.md, "Calibrated code frequencies").

A density q fitted to dequantized rows gets a discrete column's code frequencies only as well as a smooth model
of a step function can: a mixture base spills mass across cells, and a tilt of bounded size cannot take it all
back (on the rental table a 3 % holiday flag came out at 9 %). The pass counts the rows at each code
(:func:`count_codes`). A row at code k of column j adds to a fitting-space column's mean and mean square, on
average over its noise, ``f₁(k) = E_u[z(k, u)]`` and ``f₂(k) = E_u[z(k, u)²]``, where z is the row's
fitting-space value (the column's transform onto ℝ, then its standardization) and u the noise over the cell
(:func:`code_tables`). The data's sums ``Σ_k (count_k / n)·f(k)`` are linear in the code frequencies (statistics
summed before the pass counted codes give them as their moments, with the dequantizing noise's own sampling
error), and the model is changed by the least (in Kullback–Leibler divergence from q) that matches them:

    ``p(x) = q(x) · exp(Σ_j η_j(k_j(x))) / Z``,  ``η_j(k) = a_j·f₁_j(k) + b_j·f₂_j(k)``,

with k_j(x) the code of x's cell. The parameters solve the convex dual ``log E_q[e^{θᵀg}] − θᵀT`` (g the
tables at a draw's codes, standardized; T the sums) by Newton's method on weighted draws of q
(:func:`calibrate_codes`); Z is the same draws' average of ``e^η``. A two-code column (a binary flag) has only a_j
(f₂ is affine in f₁ on two points) and its frequency is then matched exactly; a column of more codes has its
mean and spread matched in the fitting space. η is constant on each cell, so the cell densities, the tails and
the scoring rule are untouched, and p integrates to one when q does. float64 throughout.

Not every calibration is within reach: each column's reweighting costs a share of the draws' effective size, and
over many columns the shares multiply; and where the data sit at one code but for a few rows far off, their
spread is met only by a weight that grows quadratically towards codes q barely draws (optdigits, 62 code columns:
1.3 % of the effective size kept, |η| up to 2·10⁷). Then each column's mean alone is matched (η_j linear in f₁:
on optdigits 23 % kept, |η| ≤ 16), and if that too is out of reach, the columns' means are matched worst first,
by how much of q's mass sits at codes the data rarely hold (the Kullback–Leibler divergence of the data's code
frequencies from q's, :func:`worst_first`), for the longest run of them that can be (:func:`calibrate_worst_first`);
the others keep q's frequencies. A reweighting is solved on one set of draws and its effective size checked on
another (``check``: a fit's normaliser's), and η at a code the draws never visit is held within the visited codes'
range.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import numpy as np
from scipy.special import logsumexp

from tgpflow.core.logs import phase
from tgpflow.core.moments import Moments
from tgpflow.features.lattice import NOISE_WIDTH, LatticeCells

__all__ = ["CodeCalibration", "code_tables", "count_codes", "calibrate_codes", "calibrate_cells", "worst_first",
           "calibrate_worst_first", "MAX_RESIDUAL", "MIN_ESS_RATIO"]

#: Points per cell of the averages f₁, f₂, midpoints in u: on an extreme cell (its outer half a log tail, whose
#: log singularity they average) within 1e-3 of a fitting-space unit; on an inner cell z is affine in u, where
#: the midpoints' mean is exact and their mean square off by (slope/points)²/12.
_EXTREME_POINTS = 4096
_INNER_POINTS = 64
#: Newton's stopping rule on the dual's gradient, in the draws' standard deviations of each table (it converges
#: quadratically to about 1e-9, where float64 sums over the draws stall).
_TOLERANCE = 1e-8
_MAX_ITER = 100
#: The Newton decrement (gradient · step, in the dual's units) below which the full step is taken without a line
#: search: the predicted decrease is then below float64's resolution of the dual's value, and Armijo's test would
#: accept or refuse steps by rounding (a fit stalled there at a gradient of 2e-8 for all its iterations).
_FULL_STEP = 1e-12
#: A ridge on θ (standardized tables): keeps θ finite when a sum lies on the edge of what the draws can reach.
_RIDGE = 1e-9
#: The largest mismatch (in the draws' standard deviations) a calibration may leave: beyond it the sums lie where
#: the model's draws cannot reach (a code the data hold and the model never draws), and the model is left as fitted.
MAX_RESIDUAL = 1e-3
#: The smallest share of the draws' effective size a calibration may keep: below it the sums are met only by
#: piling the weight on a few draws (on optdigits, 62 code columns, matching their means and spreads kept 1.3 % of
#: it, the largest |η| was 2·10⁷, and 20 000 samples held one code in every column), and the calibration falls
#: back to less (module docstring).
MIN_ESS_RATIO = 0.1


@dataclasses.dataclass(frozen=True)
class CodeCalibration:
    """The result of :func:`calibrate_codes`: ``weights`` (m, K) η_j(k) (0 past a column's last code), ``log_z``
    (log Z), the largest remaining mismatch of the sums (``residual``, in the draws' standard deviations), the Kish
    effective share of the draws that the reweighting keeps (``ess_ratio``), Newton's ``iterations``, and whether
    the sums were matched (``matched``: residual ≤ :data:`MAX_RESIDUAL`, with at least :data:`MIN_ESS_RATIO` of the
    draws' effective size kept, on the draws it was solved on and on independent ones, ``check_ess_ratio``);
    ``spread``: whether the columns' spreads were matched beside their means. From :func:`calibrate_cells`'s
    fallbacks: the ``columns`` (m,) whose sums were matched (None: all) and the ``first`` attempt (mean and spread,
    every column), which was not matched."""

    weights: np.ndarray
    log_z: float
    residual: float
    ess_ratio: float
    iterations: int
    check_ess_ratio: float | None = None
    spread: bool = True
    columns: np.ndarray | None = None
    first: CodeCalibration | None = None

    @property
    def matched(self) -> bool:
        return bool(self.residual <= MAX_RESIDUAL and min(self.ess_ratio, self.check_ess_ratio or 1.0) >= MIN_ESS_RATIO)

    @property
    def n_matched(self) -> int:
        """The columns whose sums were matched: all of them, some (:func:`calibrate_worst_first`) or none."""
        return 0 if not self.matched else int(self.weights.shape[0] if self.columns is None else self.columns.sum())

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "residual": float(self.residual), "ess_ratio": round(float(self.ess_ratio), 4),
            "check_ess_ratio": None if self.check_ess_ratio is None else round(float(self.check_ess_ratio), 4),
            "iterations": int(self.iterations), "matched": self.matched,
            "max_abs_weight": round(float(np.max(np.abs(self.weights), initial=0.0)), 4),
            "columns_matched": self.n_matched, "columns": int(self.weights.shape[0]), "spread": self.spread}
        if self.first is not None:
            out["first_attempt"] = {k: v for k, v in self.first.to_dict().items()
                                    if k in ("residual", "ess_ratio", "check_ess_ratio")}
        return out


def code_tables(origin: np.ndarray, step: np.ndarray, n_steps: np.ndarray, positions: np.ndarray,
                noise_width: float, to_fitting: Callable[[np.ndarray], np.ndarray],
                reference_row: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(m, K) tables ``f₁_j(k)``, ``f₂_j(k)`` (NaN past a column's last code; K the most codes of a column): the
    mean of the fitting-space value z and of z² over code k's noise,
    ``x = origin + (k + (u − ½)·noise_width)·step`` for u uniform on (0, 1). ``to_fitting`` maps rows in the data's
    units to the fitting space column by column; ``reference_row`` (data units, inside every bound) holds the other
    columns."""
    m, K = positions.size, int(np.max(n_steps, initial=-1)) + 1
    f1, f2 = np.full((m, K), np.nan), np.full((m, K), np.nan)
    for j, p in enumerate(positions):
        n = int(n_steps[j]) + 1
        points = np.where((np.arange(n) == 0) | (np.arange(n) == n - 1), _EXTREME_POINTS, _INNER_POINTS)
        code = np.repeat(np.arange(n), points)
        place = np.arange(code.size) - np.repeat(np.cumsum(points) - points, points)  # a point's index in its cell
        u = (place + 0.5) / np.repeat(points, points)
        rows = np.repeat(np.asarray(reference_row, dtype=np.float64)[None], code.size, axis=0)
        rows[:, p] = origin[j] + (code + (u - 0.5) * noise_width) * step[j]
        z = to_fitting(rows)[:, p]
        f1[j, :n] = np.bincount(code, z, n) / points
        f2[j, :n] = np.bincount(code, z * z, n) / points
    return f1, f2


def count_codes(rows: np.ndarray, cells: LatticeCells, to_data: Callable[[np.ndarray], np.ndarray]) -> np.ndarray:
    """(m, K) float64: the rows of ``rows`` (the fitting space; ``to_data`` maps them to the data's units) at each
    code of each discrete column of ``cells`` (K the most codes of a column), the pass's sums that
    :func:`calibrate_cells` takes its targets from. A dequantized value lies strictly inside its cell, so the
    nearest lattice point of its value in the data's units is its code."""
    codes = cells.code_indices(to_data(np.asarray(rows, dtype=np.float64)))
    K = int(np.max(cells.n_steps, initial=-1)) + 1
    return np.stack([np.bincount(codes[:, j], minlength=K).astype(np.float64) for j in range(codes.shape[1])]) \
        if codes.shape[1] else np.zeros((0, K))


def calibrate_codes(codes: np.ndarray, weights: np.ndarray, f1: np.ndarray, f2: np.ndarray, mean: np.ndarray,
                    mean_square: np.ndarray,
                    check: tuple[np.ndarray, np.ndarray] | None = None, spread: bool = True) -> CodeCalibration:
    """η of the module docstring from draws of q: their ``codes`` (n, m) (within each column's range), normalised
    importance ``weights`` (n,), the tables of :func:`code_tables`, and the data's fitting-space ``mean`` and
    ``mean_square`` (m,) of each column. A column whose draws sit at one code cannot move: its weights stay 0, and
    its mismatch (in its table's range) counts in the residual. ``check``: the codes and weights of independent
    draws of q, on which the reweighting's effective share is measured again (η is solved where the draws are; a
    code they barely visit can take a weight that a fresh draw there turns into one draw carrying all the mass:
    on optdigits a reweighting with η up to +74 kept 16 % of the effective size of the draws it was solved on and
    29 % of another set's, and left the normaliser's draws one effective draw).
    ``spread=False``: the columns' means alone (η_j linear in f₁)."""
    n, m = codes.shape
    features, owner, targets = [], [], []
    for j in range(m):
        n_codes = int(np.sum(np.isfinite(f1[j])))
        for table, target in ((f1[j], mean[j]), (f2[j], mean_square[j]))[:1 if n_codes <= 2 or not spread else 2]:
            features.append(table[codes[:, j]])
            owner.append((j, table))
            targets.append(target)
    G = np.column_stack(features) if features else np.empty((n, 0))
    mu = weights @ G
    sd = np.sqrt(weights @ (G - mu) ** 2)
    keep = sd > 1e-12 * (1.0 + np.abs(mu))
    # draws at one code cannot move: the sums must already hold there (measured in the table's range)
    stuck = [abs(t - c) / max(float(np.nanmax(table) - np.nanmin(table)), 1e-300)
             for (_, table), t, c, k in zip(owner, targets, mu, keep, strict=True) if not k]
    G, mu, sd = G[:, keep], mu[keep], sd[keep]
    owner = [o for o, k in zip(owner, keep, strict=True) if k]
    Gs = (G - mu) / sd
    T = (np.asarray(targets)[keep] - mu) / sd
    log_w = np.log(np.where(weights > 0, weights, 1.0)) + np.where(weights > 0, 0.0, -np.inf)
    theta = np.zeros(Gs.shape[1])

    def dual(t: np.ndarray) -> tuple[float, np.ndarray]:
        logits = log_w + Gs @ t
        a = float(logsumexp(logits))
        return a - float(t @ T) + 0.5 * _RIDGE * float(t @ t), np.exp(logits - a)

    value, p = dual(theta)
    iterations = 0
    for iterations in range(1, _MAX_ITER + 1):
        centre = p @ Gs
        grad = centre - T + _RIDGE * theta
        if theta.size == 0 or np.max(np.abs(grad)) < _TOLERANCE:
            break
        hessian = (Gs * p[:, None]).T @ (Gs - centre) + _RIDGE * np.eye(theta.size)
        direction = np.linalg.solve(hessian, grad)
        if float(grad @ direction) <= _FULL_STEP:  # within Newton's quadratic reach: the dual's change is below
            theta = theta - direction              # float64's resolution, where Armijo's test reads rounding
            value, p = dual(theta)
            continue
        t = 1.0
        for _ in range(40):  # backtracking (Armijo) on the convex dual
            new_value, new_p = dual(theta - t * direction)
            if new_value <= value - 1e-4 * t * float(grad @ direction):
                break
            t /= 2
        else:
            break
        theta, value, p = theta - t * direction, new_value, new_p
    residual = float(np.max(np.r_[np.abs(p @ Gs - T), stuck], initial=0.0))
    eta = np.zeros(f1.shape)
    for (j, table), c, s, th in zip(owner, mu, sd, theta, strict=True):
        eta[j] += np.where(np.isfinite(table), th * (table - c) / s, 0.0)
    # η is determined at the codes the draws visit; at the others it is the quadratic's extrapolation, which can
    # grow without bound (on optdigits, +125 at a code where q's draws held no weight to four decimals): held
    # within the visited codes' range, where the draws' sums do not see it
    for j in range(m):
        seen = np.bincount(codes[:, j], weights > 0, f1.shape[1]) > 0
        unseen = ~seen & np.isfinite(f1[j])  # past a column's last code η stays 0
        if seen.any():
            eta[j, unseen] = np.clip(eta[j, unseen], eta[j, seen].min(), eta[j, seen].max())
    shift = np.sum(eta[np.arange(m)[None, :], codes], axis=1)
    log_z = float(logsumexp(log_w + shift))
    return CodeCalibration(eta, log_z, residual, _ess_ratio(eta, codes, weights), iterations,
                           None if check is None else _ess_ratio(eta, *check), spread)


def _ess_ratio(eta: np.ndarray, codes: np.ndarray, weights: np.ndarray) -> float:
    """The Kish effective size of draws (``codes``, ``weights``) reweighted by ``e^η`` of their codes, over theirs."""
    shift = np.sum(eta[np.arange(eta.shape[0])[None, :], codes], axis=1)
    log_w = np.log(np.where(weights > 0, weights, 1.0)) + np.where(weights > 0, shift, -np.inf)
    after = np.exp(log_w - logsumexp(log_w))
    return float((1.0 / np.sum(after ** 2)) / (np.sum(weights) ** 2 / np.sum(weights ** 2)))


def worst_first(codes: np.ndarray, weights: np.ndarray, counts: np.ndarray, n_steps: np.ndarray) -> np.ndarray:
    """The discrete columns, worst first: by ``KL(q ‖ data) = Σ_k q_k·log(q_k / d_k)`` of their code frequencies,
    q's from its weighted draws (``codes`` (n, m), normalised ``weights``), the data's from the pass's ``counts``
    (m, K) with half a row added at each of a column's ``n_steps + 1`` codes (so that a code the data never hold is
    finitely far). It weighs most the mass q puts where the data are not: a column at one code on 99.98 % of the
    rows that q draws elsewhere 12 % of the time comes before one whose frequencies are off by a third everywhere
    (on optdigits, 0.58 against 0.17)."""
    divergence = np.empty(codes.shape[1])
    for j in range(codes.shape[1]):
        n = int(n_steps[j]) + 1
        model = np.bincount(codes[:, j], weights, n)
        data = (counts[j, :n] + 0.5) / (counts[j, :n].sum() + 0.5 * n)
        divergence[j] = np.sum(model * np.log(np.where(model > 0, model, 1.0) / data))
    return np.argsort(-divergence, kind="stable")


def calibrate_worst_first(codes: np.ndarray, weights: np.ndarray, f1: np.ndarray, f2: np.ndarray, mean: np.ndarray,
                          mean_square: np.ndarray, order: np.ndarray, first: CodeCalibration,
                          check: tuple[np.ndarray, np.ndarray] | None = None, spread: bool = True) -> CodeCalibration:
    """The longest run of ``order`` (:func:`worst_first`) whose sums :func:`calibrate_codes` matches, found by
    bisection on its length (a column more costs effective size: a shorter run keeps more), the other columns'
    weights 0; ``first`` is the attempt on all of them, not matched; ``check`` and ``spread`` as in
    :func:`calibrate_codes`. ``first`` when not even the worst column can be matched."""
    m = codes.shape[1]
    best, short, long = None, 0, m
    while long - short > 1:
        middle = (short + long) // 2
        cols = np.sort(order[:middle])
        result = calibrate_codes(codes[:, cols], weights, f1[cols], f2[cols], mean[cols], mean_square[cols],
                                 None if check is None else (check[0][:, cols], check[1]), spread)
        if result.matched:
            best, short = (cols, result), middle
        else:
            long = middle
    if best is None:
        return first
    cols, result = best
    eta = np.zeros(f1.shape)
    eta[cols] = result.weights
    chosen = np.zeros(m, dtype=bool)
    chosen[cols] = True
    return dataclasses.replace(result, weights=eta, columns=chosen, first=first)


def calibrate_cells(cells: LatticeCells, moments: Moments, to_fitting: Callable[[np.ndarray], np.ndarray],
                    center: np.ndarray, reference: Callable[[], tuple[np.ndarray, np.ndarray]],
                    counts: np.ndarray | None = None,
                    check: tuple[np.ndarray, np.ndarray] | None = None) -> tuple[LatticeCells, CodeCalibration]:
    """A fitted model's discrete columns ``cells`` with code weights that match the data's fitting-space sums
    (module docstring), and what the calibration did; the cells uncalibrated when the sums cannot be matched
    (:attr:`CodeCalibration.matched`). The sums are the codes' tables averaged over the pass's ``counts`` of rows
    per code (:func:`count_codes`), or, for statistics summed before they counted codes, the ``moments`` (which
    carry the dequantizing noise's own sampling error). Sums out of reach fall back to the means alone, then
    (with counts) to the means of the longest run of the worst columns (module docstring). ``to_fitting``: rows in the
    data's units to the fitting space; ``center``: a row in the data's units the tables are formed around (the sums'
    mean); ``reference()``: weighted draws of the uncalibrated model (points in the data's units, weights) the
    calibration is solved on; ``check``: the codes (:meth:`~tgpflow.features.lattice.LatticeCells.code_indices`)
    and weights of independent draws it is checked on (a fit's: its normaliser's, so that the effective size the
    calibrated model's diagnostics report is the one checked)."""
    cells = cells.uncalibrated()
    p = cells.positions
    f1, f2 = code_tables(cells.origin, cells.step, cells.n_steps, p, NOISE_WIDTH, to_fitting, center)
    counted = counts is not None and counts.shape == f1.shape and bool(np.all(counts.sum(axis=1) > 0))
    if counted:
        share = counts / counts.sum(axis=1, keepdims=True)
        mean, mean_square = np.nansum(share * f1, axis=1), np.nansum(share * f2, axis=1)
    else:
        mean = moments.mean[p]
        mean_square = np.diag(moments.m2)[p] / moments.n + mean * mean
    with phase("calibrate codes", columns=len(cells.columns)) as info:
        points, weights = reference()
        codes = cells.code_indices(points)
        first = result = calibrate_codes(codes, weights, f1, f2, mean, mean_square, check)
        if not first.matched:
            result = dataclasses.replace(calibrate_codes(codes, weights, f1, f2, mean, mean_square, check, False),
                                         first=first)
        if not result.matched and counted and p.size > 1:
            order = worst_first(codes, weights / weights.sum(), counts, cells.n_steps)
            result = calibrate_worst_first(codes, weights, f1, f2, mean, mean_square, order, first, check, False)
        info.update(result.to_dict())
    return (cells.with_calibration(result.weights, result.log_z) if result.matched else cells), result
