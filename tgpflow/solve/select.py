"""Held-out selection of λ (and η) from validation statistics — no extra pass (docs/mathematics.md, "Fisher divergence
and base-measure learning", "Noise-conditional Fisher divergence" and "The Fisher variational predictive distribution").

The held-out loss of a tilted density with parameter θ is the mean Hyvärinen score-matching
loss over the validation rows, ``J_val(θ) = fd_loss(val, θ; λ=0)/N_val``: a quadratic in θ
whose coefficients are the validation statistics (with the base of the training rows). Each
method's θ(λ) is ``(r(λ) I + A₀)⁻¹ b`` with A₀ = ZZᵀ⊙Φ' (FD, FVPD's μ̂) or ZZᵀ⊙Ā (NCFD) of the
training rows, so one eigendecomposition ``A₀ = VΛVᵀ`` (O(S³)) and ``B = VᵀA₀ᵛᵃˡV`` make
every grid point O(S²):

* FD:   r = λγ²,   NCFD: r = λH (θ scored at the data level, σ = 0);
* FVPD: r = λγ²η and the score is the posterior expectation
  ``E_{θ~q}[J_val(θ)] = J_val(μ̂) + (η/2N_val) Σ_j B_jj/(r + Λ_j)`` (from Σ̂ = γ²η(rI + A₀)⁻¹) —
  the expected held-out Fisher divergence of the tilted density under q(θ). (The Hyvärinen
  loss of the predictive density itself is not quadratic in the statistics; it can be
  computed by a streamed evaluation, ``tgpflow.metrics.hyvarinen_loss``.)
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import scipy.linalg
from scipy.linalg.lapack import dgtsv, dormqr, dsytrd, dsytrd_lwork

from tgpflow.core.gaussian_base import Base
from tgpflow.features.rff import RandomFourierFeatures
from tgpflow.solve.base_learning import fd_loss
from tgpflow.solve.normalizer import WeightSums, base_proposal_blocks
from tgpflow.solve.tgp import base_hyvarinen_sum, base_log_sum, fd_system, feature_moments_under_base
from tgpflow.stats.projections import ProjectionCounts, ProjectionGrid, ks_by_direction
from tgpflow.stats.support import SupportBox, mass_outside_limit
from tgpflow.stats.tgp import TGPStats

__all__ = ["DEFAULT_LAM_GRID", "DEFAULT_LOGLIK_LAM_GRID", "GRID_EXTENSION_DECADES", "heldout_loss", "RidgePath",
           "GridScorer", "MIN_SELECT_ESS_FRACTION", "KS_MEDIAN_SE", "heldout_base_term", "score_tilts",
           "score_fold_tilts", "score_fvpd", "healthy", "choose"]

#: λ grid of ``lam="auto"`` with the Hyvärinen criterion: 19 values, 10⁻⁴ … 10², three per decade
#: (contains the paper's 0.1).
DEFAULT_LAM_GRID = tuple(float(v) for v in np.logspace(-4, 2, 19))
#: λ grid of ``lam="auto"`` with the log-likelihood criterion: 22 values, 10⁻³ … 10⁴. λ multiplies a
#: penalty beside a SUM over rows, so the right λ grows with N: measured on the demo mixture, the
#: held-out optimum was λ ≈ 2–5 at 200k rows and 10 at 2M (γ = 0.45), and up to 100 at Scott's γ.
DEFAULT_LOGLIK_LAM_GRID = tuple(float(v) for v in np.logspace(-3, 4, 22))
#: Decades (three values each, the default grid's spacing) by which ``lam="auto"`` extends its default grid
#: upwards while a bandwidth's best candidate is the grid's largest λ. Measured on MAGIC with bounds (seed 0,
#: grid to 10⁷): FD chose λ = 2154 (interior); FVPD, whose λ acts as λ/γ² on the FD-equivalent scale
#: (docs/mathematics.md, "The Fisher variational predictive distribution", η = 1/γ²; γ = 2.1 in the log/logit space),
# needs ≈ 10⁴ and sat on the default grid's top.
GRID_EXTENSION_DECADES = 3


def heldout_loss(val: TGPStats, features: RandomFourierFeatures, base: Base, theta: np.ndarray) -> float:
    """Mean Hyvärinen loss of the tilted density θ over the rows of ``val`` (from statistics)."""
    if val.n == 0:
        raise ValueError("the validation part has no rows; raise validation_fraction or add rows")
    return fd_loss(val, features, base, theta, 0.0) / val.n


class RidgePath:
    """θ(r) = (rI + A₀)⁻¹ b for many ridge values r from one tridiagonal reduction ``A₀ = QTQᵀ`` (LAPACK ``dsytrd``,
    Householder, 4/3·S³ flops): ``θ(r) = Q (T + rI)⁻¹ Qᵀb``, an O(S) tridiagonal solve per r and one blocked
    application of Q (``dormqr``, as LAPACK's ``dormtr`` applies it) to all of them.

    The eigendecomposition :class:`GridScorer` needs for its held-out loss terms costs about 2–3.5× as much at
    S = 1000, one BLAS thread (0.20–0.34 s against 0.10 s, back-transform of the eigenvectors included); the
    bandwidth search needs θ only, for every (γ, fold), 24 times in a default fit. Both are backward stable:
    at S = 1000, a rank-500 A₀ and r = 10⁻⁶ both were 7·10⁻¹⁰ from a dense LU solve.
    """

    def __init__(self, A0: np.ndarray, b: np.ndarray):
        S = A0.shape[0]
        sym = np.asfortranarray(0.5 * (A0 + A0.T))
        lwork = int(dsytrd_lwork(S, lower=1)[0])
        c, self.diag, self.off, self.tau, info = dsytrd(sym, lower=1, lwork=lwork, overwrite_a=1)
        _check_lapack("dsytrd", info)
        # the reflectors of Q, as dormtr reads them for uplo = "L": below the diagonal of A(2:n, 1:n−1)
        self.reflectors = c[1:, :S - 1]
        self.qb = np.concatenate([b[:1], self._apply_q(b[1:, None], transpose=True)[:, 0]])

    @property
    def n(self) -> int:
        """S, the order of A₀."""
        return int(self.diag.shape[0])

    def _apply_q(self, rows: np.ndarray, *, transpose: bool) -> np.ndarray:
        """Q's trailing (S−1)×(S−1) block (or its transpose) times ``rows``; Q's first row and column are e₁."""
        if self.n < 2:
            return rows
        # workspace: the blocked algorithm's optimum, columns × block size (64) plus its 65 × 64 triangular factor
        out, _, info = dormqr(b"L", b"T" if transpose else b"N", self.reflectors, self.tau,
                              np.asfortranarray(rows), lwork=64 * max(rows.shape[1], 1) + 65 * 64)
        _check_lapack("dormqr", info)
        return out

    def thetas(self, rs: Sequence[float]) -> np.ndarray:
        """(len(rs), S): θ(r) for each r of ``rs`` (r > −the least eigenvalue of A₀)."""
        if self.n == 1:
            return (self.qb[0] / (self.diag[0] + np.asarray(rs, dtype=np.float64)))[:, None]
        y = np.empty((self.n, len(rs)), order="F")
        for j, r in enumerate(rs):
            # partial pivoting: stable for any nonsingular T + rI (A₀ + rI is SPD for r > 0, but a
            # near-singular A₀ may have eigenvalues a rounding below 0)
            *_, x, info = dgtsv(self.off, self.diag + float(r), self.off, self.qb[:, None])
            _check_lapack("dgtsv", info, f"T + rI is singular at r = {r:g}")
            y[:, j] = x[:, 0]
        y[1:] = self._apply_q(y[1:], transpose=False)
        return y.T


def _check_lapack(name: str, info: int, singular: str = "") -> None:
    if info < 0:
        raise ValueError(f"LAPACK {name}: argument {-info} is invalid")
    if info > 0:
        raise np.linalg.LinAlgError(f"LAPACK {name} failed (info {info}){': ' + singular if singular else ''}")


class GridScorer:
    """Scores θ(r) = (rI + A₀)⁻¹ b on validation statistics in O(S²) per ridge value r, from one eigendecomposition
    ``A₀ = VΛVᵀ`` (module docstring)."""

    def __init__(self, A0: np.ndarray, b: np.ndarray, val: TGPStats, features: RandomFourierFeatures, base: Base):
        if val.n == 0:
            raise ValueError("the validation part has no rows; raise validation_fraction or add rows")
        # LAPACK's divide-and-conquer driver: 4× NumPy's default here at S = 1000
        self.lam_eig, self.V = scipy.linalg.eigh(0.5 * (A0 + A0.T), driver="evd", check_finite=False)
        self.beta = self.V.T @ b
        A_val, b_val = fd_system(val, features, base, 0.0)
        self.B = self.V.T @ A_val @ self.V
        self.c = self.V.T @ b_val
        m = val.moments
        self.const = base_hyvarinen_sum(val, base) / m.n
        self.scale = 1.0 / (features.gamma**2 * m.n)
        self.n_val = m.n

    def theta(self, r: float) -> np.ndarray:
        return self.V @ (self.beta / (self.lam_eig + r))

    def loss(self, r: float) -> float:
        """J_val(θ(r))."""
        t = self.beta / (self.lam_eig + r)
        return float((0.5 * t @ (self.B @ t) - t @ self.c) * self.scale + self.const)

    def expected_loss(self, r: float, eta: float) -> float:
        """E_{θ~N(θ(r), γ²η(rI+A₀)⁻¹)} J_val(θ) (FVPD, module docstring)."""
        return self.loss(r) + 0.5 * eta * float(np.sum(np.diag(self.B) / (self.lam_eig + r))) / self.n_val


# -- held-out log-likelihood and sliced KS (the model side by importance sampling from the base) ---

#: Candidates whose normaliser rests on fewer effective draws than this share of the proposals are
#: not selected: their log Z is too uncertain (and biased low), and their samples would be too.
#: 1 % separated good fits (≥ 14 %) from broken ones (0.016–0.63 %) on the demo mixture and on a
#: 2M-row, 7-column dataset of [Paisley et al.]'s Table II.
MIN_SELECT_ESS_FRACTION = 0.01
#: The standard error of a median of K sliced KS distances, in units of √((1/n + 1/m)/K) for samples of
#: effective sizes n and m from one distribution: 1/(2 f(median)) of the Kolmogorov distribution (f its
#: density; scipy.stats.kstwobign). It treats the K directions as independent: projections of the same rows
#: are positively correlated, so this is a lower bound on the noise, and only near-ties are resolved by it.
KS_MEDIAN_SE = 0.3180


def heldout_base_term(val: TGPStats, base: Base) -> float:
    """Mean over the held-out rows of −log of the unnormalised base: ½(x−μ)ᵀP(x−μ) from their moments, or a
    mixture's from the pass's sums (:func:`~tgpflow.solve.tgp.base_log_sum`)."""
    return -base_log_sum(val, base) / val.n


def _candidate_rows(sums: WeightSums, data_terms: np.ndarray, projections: ProjectionCounts | None,
                    grid: ProjectionGrid | None, box: SupportBox | None) -> list[dict[str, float]]:
    """Per candidate: held-out log-likelihood (data term − log Z), the normaliser and its ESS, the
    held-out sliced KS (median over the grid's directions) when projection counts are given, and the
    normalised mass outside the support box (with its limit) when a box is given."""
    ks = None
    if projections is not None and grid is not None and sums.hist is not None:
        model = sums.hist.reshape(len(data_terms), grid.n_directions, grid.n_bins)
        ks = np.median(ks_by_direction(projections, model), axis=-1)
    rows = []
    n_val = float(projections.n) if projections is not None else 0.0
    n_dirs = grid.n_directions if grid is not None else 1
    for j, est in enumerate(sums.estimates(box is not None)):
        row = {"loglik": float(data_terms[j] - est.log_z), "ess_fraction": est.ess_fraction, "log_z": est.log_z,
               "log_z_se": est.std_error}
        if ks is not None:
            row["sliced_ks"] = float(ks[j])
            # the standard error of the median KS at these sizes (KS_MEDIAN_SE)
            row["sliced_ks_noise"] = KS_MEDIAN_SE * math.sqrt((1.0 / n_val + 1.0 / est.ess) / n_dirs)
        if box is not None:
            row.update(mass_outside=est.mass_outside, mass_outside_limit=mass_outside_limit(box.rate_outside))
        rows.append(row)
    return rows


def _box_mask(box: SupportBox | None, data_units: Callable[[np.ndarray], np.ndarray] | None,
              points: np.ndarray) -> np.ndarray | None:
    if box is None:
        return None
    return box.outside(points if data_units is None else data_units(points))


def score_tilts(val: TGPStats, features: RandomFourierFeatures, base: Base, thetas: np.ndarray, *, n_draws: int,
                random_state: Any, projections: ProjectionCounts | None = None, grid: ProjectionGrid | None = None,
                box: SupportBox | None = None,
                data_units: Callable[[np.ndarray], np.ndarray] | None = None) -> list[dict[str, float]]:
    """Held-out scores of the normalised densities ``e^{θ_kᵀφ} N(μ, Σ)``, one per row θ_k.

    ``mean_val log p = θᵀψ_val/N_val − mean_val ½(x−μ)ᵀP(x−μ) − log Z(θ)`` with every log Z on the
    same seeded draws of the defensive proposal around the base (:mod:`tgpflow.solve.normalizer`); with the held-out
    rows' projection counts, also the sliced KS between them and each candidate's importance-weighted draws; with the
    training rows' support ``box`` (in the data's units, ``data_units`` mapping the draws there),
    each candidate's normalised mass outside it.
    """
    return score_fold_tilts([val], features, base, [thetas], n_draws=n_draws, random_state=random_state,
                            boxes=[box], data_units=data_units, projections=projections, grid=grid)[0]


def score_fold_tilts(vals: Sequence[TGPStats], features: RandomFourierFeatures, base: Base,
                     thetas: Sequence[np.ndarray], *, n_draws: int, random_state: Any,
                     boxes: Sequence[SupportBox | None], data_units: Callable[[np.ndarray], np.ndarray] | None = None,
                     projections: ProjectionCounts | None = None,
                     grid: ProjectionGrid | None = None) -> list[list[dict[str, float]]]:
    """:func:`score_tilts` for the folds of a cross-validation whose tilts share one ``base`` (a mixture base,
    fitted once for all of them): fold k's tilts ``thetas[k]`` scored on its validation statistics ``vals[k]``, its
    mass outside measured against ``boxes[k]``. Every fold's normalisers use the same seeded proposal draws, as every
    candidate within one fold does, so the features of a block of draws are formed once for all the folds (the
    cosines are most of a score's cost). ``projections`` (one fold only) as in :func:`score_tilts`."""
    if any(val.n == 0 for val in vals):
        raise ValueError("the validation part has no rows; raise validation_fraction or add rows")
    if projections is not None and len(vals) != 1:
        raise ValueError("held-out projection counts are one validation part's; score one fold with them")
    thetas = [np.atleast_2d(t) for t in thetas]
    hist = grid.n_directions * grid.n_bins if (grid is not None and projections is not None) else 0
    sums = [WeightSums(t.shape[0], features.n_dims, hist) for t in thetas]
    phi_t = None
    for points, log_prop, quad in base_proposal_blocks(base, n_draws, random_state):
        phi_t = _cos_features(features, points, phi_t)
        mapped = points if data_units is None or all(box is None for box in boxes) else data_units(points)
        bins = grid.bins(points) if hist else None
        for fold_sums, fold_thetas, box in zip(sums, thetas, boxes, strict=True):
            fold_sums.add((fold_thetas @ phi_t).T - (quad + log_prop)[:, None], points,
                          None if box is None else box.outside(mapped), bins=bins)
    return [_candidate_rows(fold_sums, fold_thetas @ val.psi / val.n - heldout_base_term(val, base), projections,
                            grid, box)
            for fold_sums, fold_thetas, val, box in zip(sums, thetas, vals, boxes, strict=True)]


def score_fvpd(val: TGPStats, features: RandomFourierFeatures, base: Base, A0: np.ndarray, b: np.ndarray,
               eta: float, lams: list[float], *, n_draws: int, random_state: Any,
               projections: ProjectionCounts | None = None, grid: ProjectionGrid | None = None,
               box: SupportBox | None = None,
               data_units: Callable[[np.ndarray], np.ndarray] | None = None) -> list[dict[str, float]]:
    """Held-out scores of the normalised FVPD predictive densities at η for every λ (docs/mathematics.md, "The Fisher
    variational predictive distribution"), as :func:`score_tilts`.

    ``mean_val log q = ½ tr(M⁻¹ Σ_val φφᵀ)/N_val − vᵀψ_val/N_val − mean_val ½(x−μ)ᵀP(x−μ) − log Z``
    with ``M_λ = C + λI``, ``C = Σ_φ + A0/(γ²η)``, ``m = μ_φ − b/(γ²η)`` (:func:`fvpd_predictive`):
    one eigendecomposition ``C = UΛUᵀ`` gives every λ, ``φᵀM_λ⁻¹φ = Σ_k (Uᵀφ)_k²/(Λ_k + λ)``, so the
    grid costs one (draws × S²) product. Needs the held-out ``phi_gram`` (Σφφᵀ of the validation rows).
    """
    if val.phi_gram is None:
        raise ValueError("the FVPD held-out log-likelihood needs Σφφᵀ of the validation rows (phi_gram)")
    g2eta = features.gamma**2 * eta
    mu_phi, cov_phi = feature_moments_under_base(features, base)
    lam_eig, U = scipy.linalg.eigh(cov_phi + 0.5 * (A0 + A0.T) / g2eta, driver="evd", check_finite=False)
    if lam_eig.min() + min(lams) <= 0:
        raise FloatingPointError("the FVPD predictive matrix M = Σ_φ + Σ̂⁻¹ is not positive definite; raise lam")
    lams = np.asarray(lams, dtype=np.float64)
    inv = 1.0 / (lam_eig[None, :] + lams[:, None])  # (k, S)
    m_u = U.T @ (mu_phi - b / g2eta)
    v_u = m_u * inv  # Uᵀv_λ per λ
    hist = grid.n_directions * grid.n_bins if (grid is not None and projections is not None) else 0
    sums = WeightSums(len(lams), features.n_dims, hist)
    phi_t = None
    for points, log_prop, quad in base_proposal_blocks(base, n_draws, random_state):
        phi_t = _cos_features(features, points, phi_t)
        pu = phi_t.T @ U
        log_q = 0.5 * (pu * pu) @ inv.T - pu @ v_u.T - quad[:, None]
        sums.add(log_q - log_prop[:, None], points, _box_mask(box, data_units, points),
                 bins=grid.bins(points) if hist else None)
    c_u = np.einsum("sk,sk->k", U, val.phi_gram @ U)  # diag(Uᵀ Σ_val φφᵀ U), one GEMM
    data = (0.5 * inv @ c_u - (U @ v_u.T).T @ val.psi) / val.n - heldout_base_term(val, base)
    return _candidate_rows(sums, data, projections, grid, box)


def _cos_features(features: RandomFourierFeatures, points: np.ndarray, buf: np.ndarray | None) -> np.ndarray:
    """φ(points)ᵀ (S, n) by the fused cosine kernel, into ``buf`` (the previous block's) when it has the room:
    the draws need φ only, not φ' (``transform`` forms both, and the angles, as separate (S, n) arrays)."""
    S, n = features.n_features, points.shape[0]
    out = buf.reshape(-1)[:S * n].reshape(S, n) if buf is not None and buf.size >= S * n else None
    return features.cos_features(points, out=out)


def healthy(row: dict[str, float]) -> bool:
    """A candidate whose normaliser is trustworthy (ESS ≥ :data:`MIN_SELECT_ESS_FRACTION` of the draws)
    and which puts no more mass outside the training rows' support box than the fit diagnostics allow."""
    return (row["ess_fraction"] >= MIN_SELECT_ESS_FRACTION
            and row.get("mass_outside", 0.0) <= row.get("mass_outside_limit", 1.0))


def choose(rows: list[dict[str, float]], criterion: str) -> int:
    """The best row by ``criterion`` — "loglik" (highest held-out log-likelihood), "sliced" (lowest held-out
    sliced KS) or "hyvarinen" (lowest held-out Hyvärinen loss). For the first two, only :func:`healthy`
    rows compete: a criterion measured on data rows cannot see mass where there are none, so the
    support is a constraint. When no row meets it, the constraint cannot tell the rows apart (on data
    with hard bounds, e.g. MAGIC's lengths ≥ 0, every smooth tilt of a Gaussian puts 25–35 % of its
    mass below the bound; the row with the least mass outside was the smoothest, with twice the
    paper's sliced KS), so the criterion decides among the rows with a trustworthy normaliser (the
    caller warns and names the fix, bounds=); without one, the largest ESS wins.

    "sliced" keeps the shape check of the sliced KS and the resolution of the log-likelihood: the rows
    whose KS is within the standard error of the best row's (``sliced_ks_noise``, :data:`KS_MEDIAN_SE`) are
    tied, and the tie goes to the highest held-out log-likelihood. With millions of rows several λ have
    the same KS to four digits: on 2M rows of the demo mixture the earlier row (λ = 4.6) was taken, a fit
    0.005 nats/row worse on held-out rows than λ = 10 (KS 1.582 ×10⁻² for both). A wider band (the KS's
    own spread, 0.26·√(1/n + 1/m)) let the log-likelihood override the KS on MAGIC, where the two disagree
    (bounded, S = 128: λ 215 instead of 1000, sample means 0.23 sd off instead of within 0.15).
    Remaining ties go to the earlier row."""
    if criterion == "hyvarinen":
        return min(range(len(rows)), key=lambda i: (rows[i]["loss"], i))
    ok = [i for i, r in enumerate(rows) if healthy(r)]
    if not ok:
        ok = [i for i, r in enumerate(rows) if r["ess_fraction"] >= MIN_SELECT_ESS_FRACTION]
        if not ok:
            return max(range(len(rows)), key=lambda i: (rows[i]["ess_fraction"], -i))
    if criterion == "sliced":
        best = min(ok, key=lambda i: (rows[i]["sliced_ks"], i))
        within = rows[best]["sliced_ks"] + rows[best].get("sliced_ks_noise", 0.0)
        ok = [i for i in ok if rows[i]["sliced_ks"] <= within]
    return max(ok, key=lambda i: (rows[i]["loglik"], -i))
