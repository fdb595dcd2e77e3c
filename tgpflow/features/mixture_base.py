"""A Gaussian mixture as the base measure under the tilt (docs/gp_tilted.md, "A mixture base").

``m(x) = Σ_k π_k N(x | μ_k, Σ_k)``, fitted on the pilot rows before the pass (scikit-learn's
``GaussianMixture``, full covariances, K chosen by held-out log-likelihood) and fixed from then on, so that
the pass can sum what the tilt's statistics need of it: its score ``s₀(x) = ∇ log m(x)`` at every row.
With responsibilities ``r_k(x) = π_k N_k(x) / m(x)`` and ``s_k(x) = −P_k (x − μ_k)`` (P_k = Σ_k⁻¹):

* ``s₀ = Σ_k r_k s_k``;
* ``∂_j s₀_j = Σ_k r_k (s_kj² − P_k,jj) − s₀_j²`` (the diagonal of the Hessian of log m);
* ``Δ log m = Σ_k r_k (‖s_k‖² − tr P_k) − ‖s₀‖²``.

Beside the K fitted components (K > 1) the mixture carries a floor, the pilot rows' own Gaussian with weight
:data:`MIXTURE_FLOOR`, so that a held-out row far from every component is not scored by a narrow component's tail.

Every product is float64, in blocks of rows sized so that the (rows, K, d) temporaries stay near 2 MiB (in cache).
A mixture of one component is exactly the Gaussian N(μ, Σ) of the other bases (tested).

K is the fewest components whose validation log-likelihood is within one standard error of the best count's
(the paired per-row differences): on a small pilot the best count by the mean alone is noise. Measured in the
GP-tilted fits of the ADBench development sets (FD, held out): on Stamps (272 training rows, 9 columns, 55
validation rows) the mean chose K = 4, whose narrow components gave held-out rows −175 nats and the fit −11.64
nats/row; the rule kept K = 2 (−8.70). On annthyroid it cost: K = 16 (−1.74) where the mean's K = 32 scored
−1.03. The letter set keeps K = 4 either way. Which K wins also moves with EM's seeded initialisation (one
start per K during the search); at the chosen K a small table gets up to :data:`MIXTURE_STARTS` starts.
"""

from __future__ import annotations

import copy
import dataclasses
import itertools
import math
from functools import cached_property
from typing import Any

import numpy as np

from tgpflow.core.backend import device_of, namespace
from tgpflow.core.engine import Progress, compute, parallel_tasks, single_blas_thread
from tgpflow.features.digest import array_hash
from tgpflow.io.column_kinds import dequantize

__all__ = ["GaussianMixtureBase", "fit_mixture_base", "MIXTURE_COMPONENTS", "MIXTURE_FIT_ROWS", "MIXTURE_REG",
           "MIXTURE_FLOOR", "mixture_starts"]

#: The component counts that a mixture base tries, in order, keeping the best by held-out log-likelihood
#: (the search stops after two counts in a row that do not improve on the best).
MIXTURE_COMPONENTS = (1, 2, 4, 8, 16, 32, 64)
#: Pilot rows the component search fits on (a uniform subsample of the pilot beyond this).
MIXTURE_FIT_ROWS = 20_000
#: ``reg_covar`` of scikit-learn's fit (its default), in units of each column's pilot variance (the fit runs on
#: standardized rows). Measured on MAGIC (standardized, 80/20, K = 64): held-out −4.923 nats/row at 10⁻⁶,
#: −5.042 at 10⁻⁴, −5.189 at 10⁻³. Columns of integer codes, where a small floor lets a component collapse onto
#: one value, are dequantized before the fit (:func:`fit_mixture_base`'s ``cells``).
MIXTURE_REG = 1e-6
#: A component count K is tried only with at least this many training rows per component and column (+1). At 10
#: the letter set (1 024 training rows, 32 columns) stopped at K = 2, where a tuned mixture takes K = 4: FD on
#: the mixture base scored −28.65 nats/row held out against the tuned mixture's −24.88; at 5, −25.11. The held-out
#: log-likelihood still decides among the counts tried, so the smaller floor only lets it look further.
MIXTURE_ROWS_PER_DIM = 5
#: The weight of a floor under the mixture's tails: beside the K fitted components, the Gaussian of the rows
#: themselves (their mean and covariance, after the dequantizing) with this weight (none where K = 1: the mixture is
#: that Gaussian already). Held-out rows far from every fitted component then get the density a single Gaussian
#: gives them, not a narrow component's far tail; rows where the mixture lives lose log(1 − 0.001) ≈ 0.001 nats. On
#: cardio (split 1 of ``benchmarks/vs_mixture.py``, FD) five held-out rows of 366, far along a column the pilot
#: rows barely spread, scored −1 400 to −2 900 nats each, and the fit −33.5 nats/row against the tuned mixture's
#: −14.1; with the floor +3.1 nats/row above it.
MIXTURE_FLOOR = 1e-3
#: EM starts at the chosen K (one per K during the search): as many as fit in :data:`MIXTURE_START_ROWS` rows of
#: EM (⌊MIXTURE_START_ROWS / training rows⌋), at most this many; the best on the validation rows is carried on. On
#: small tables a K's fit moves most with EM's initialisation and each start is cheap; above 10 000 training rows
#: (MAGIC, the demo's 20 000-row pilot) one start. Measured (FD, ADBench, held out, against a tuned GaussianMixture):
#: three starts took thyroid (2 200 search rows) from −0.085 to +0.098 nats/row and cardio's sliced KS from 1.30× to
#: 1.02× the mixture's; after later changes thyroid's split 0 read −0.047 with three starts, +0.061 with eight and
#: +0.142 with nine (this rule's count there) or ten (docs/gp_tilted.md, "A mixture base"). Each start can only
#: raise the validation score.
MIXTURE_STARTS = 10
#: The EM rows that the extra starts at the chosen K may spend (:func:`mixture_starts`).
MIXTURE_START_ROWS = 20_000
#: Elements of a block's (rows, K·d) whitened residuals: 2 MiB, so a block stays in cache (measured at K = 64, d = 10:
#: 0.29 s per 65 536 rows against 0.41 s at 32 MiB).
_BLOCK_ELEMENTS = 1 << 18


@dataclasses.dataclass(frozen=True, eq=False)
class GaussianMixtureBase:
    """Weights π (K,), means (K, d) and covariances (K, d, d) of a Gaussian mixture base (module docstring)."""

    weights: np.ndarray
    means: np.ndarray
    covariances: np.ndarray

    def __post_init__(self) -> None:
        K, d = self.means.shape
        if self.weights.shape != (K,) or self.covariances.shape != (K, d, d):
            raise ValueError(f"a mixture base has inconsistent shapes: weights {self.weights.shape}, means "
                             f"{self.means.shape}, covariances {self.covariances.shape}")
        if not (np.all(self.weights > 0) and math.isclose(float(self.weights.sum()), 1.0, rel_tol=1e-9)):
            raise ValueError("a mixture base's weights must be positive and sum to 1")

    @property
    def n_components(self) -> int:
        return int(self.weights.shape[0])

    @property
    def n_dims(self) -> int:
        return int(self.means.shape[1])

    @cached_property
    def fingerprint(self) -> str:
        """SHA-256 of (π, μ_k, Σ_k) as float64 bytes: statistics summed against one mixture are refused with another."""
        return array_hash(b"tgpflow.GaussianMixtureBase.v1", self.means.shape,
                          (self.weights, self.means, self.covariances)).hexdigest()

    @cached_property
    def _factors(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(U_k with P_k = U_k U_kᵀ, upper; the precisions P_k; log π_k + log|U_k| − d/2 log 2π)."""
        chol = np.linalg.cholesky(self.covariances)  # Σ_k = L Lᵀ
        eye = np.broadcast_to(np.eye(self.n_dims), chol.shape)
        inv = np.linalg.solve(chol, eye)  # L⁻¹; P = L⁻ᵀL⁻¹ = U Uᵀ with U = L⁻ᵀ
        U = np.swapaxes(inv, 1, 2)
        P = U @ np.swapaxes(U, 1, 2)
        const = (np.log(self.weights) + np.log(np.abs(np.diagonal(U, axis1=1, axis2=2))).sum(axis=1)
                 - 0.5 * self.n_dims * math.log(2 * math.pi))
        return U, 0.5 * (P + np.swapaxes(P, 1, 2)), const

    @cached_property
    def mean(self) -> np.ndarray:
        """The mixture's mean Σ π_k μ_k."""
        return self.weights @ self.means

    @cached_property
    def cov(self) -> np.ndarray:
        """The mixture's covariance Σ π_k (Σ_k + (μ_k − μ)(μ_k − μ)ᵀ)."""
        dm = self.means - self.mean
        cov = np.einsum("k,kij->ij", self.weights, self.covariances) + (dm * self.weights[:, None]).T @ dm
        return 0.5 * (cov + cov.T)

    def at_level(self, sigma: float) -> GaussianMixtureBase:
        """The mixture convolved with N(0, σ²I): every Σ_k + σ²I (the noise-conditional base, docs/mathematics.md,
        "Noise-conditional Fisher divergence")."""
        if sigma == 0:
            return self
        return GaussianMixtureBase(self.weights, self.means, self.covariances + sigma * sigma * np.eye(self.n_dims))

    def _rows_per_block(self) -> int:
        return max(1, _BLOCK_ELEMENTS // (self.n_components * (self.n_dims + 1)))

    @cached_property
    def _stacked(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """[U_1 … U_K] and [P_1 … P_K] side by side (d, K·d), with μ_kᵀU_k and μ_kᵀP_k (K·d): every component's
        whitened residual (x − μ_k)ᵀU_k, and score, of a block of rows in one GEMM each."""
        U, P, _ = self._factors
        K, d = self.n_components, self.n_dims
        u_cat = np.ascontiguousarray(U.transpose(1, 0, 2).reshape(d, K * d))
        p_cat = np.ascontiguousarray(P.transpose(1, 0, 2).reshape(d, K * d))
        return (u_cat, np.einsum("kd,kde->ke", self.means, U).reshape(-1),
                p_cat, np.einsum("kd,kde->ke", self.means, P).reshape(-1))

    def component_arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """([U_1 … U_K] (d, K·d), μ_kᵀU_k (K·d), log π_k + log|U_k| − d/2 log 2π (K)): log π_k N(x | μ_k, Σ_k) is
        ``const_k − ½‖(xᵀU_cat − u_mean)_k‖²``, the arrays a device evaluates it from (docs/gpu.md)."""
        u_cat, u_mean, _, _ = self._stacked
        return u_cat, u_mean, self._factors[2]

    def score_on(self, y: Any) -> Any:
        """The score s₀ (n, d) at rows ``y`` of any array namespace, computed where they are (docs/gpu.md: NCFD's
        noisy scores on the device); float64, the formula of :meth:`derivatives`."""
        xp, dev = namespace(y), device_of(y)
        u_cat, u_mean, p_cat, p_mean = (xp.asarray(a, device=dev) for a in self._stacked)
        const = xp.asarray(self._factors[2], device=dev)
        n, K, d = int(y.shape[0]), self.n_components, self.n_dims
        z = xp.reshape(y @ u_cat - u_mean, (n, K, d))
        log_comp = const[None, :] - 0.5 * xp.sum(z * z, axis=2)
        r = xp.exp(log_comp - xp.max(log_comp, axis=1)[:, None])
        r = r / xp.sum(r, axis=1)[:, None]  # responsibilities (n, K)
        return xp.sum(r[:, :, None] * xp.reshape(p_mean - y @ p_cat, (n, K, d)), axis=1)

    def _log_components(self, x: np.ndarray) -> np.ndarray:
        """log π_k N(x | μ_k, Σ_k), (n, K), of a block of rows."""
        u_cat, u_mean, _, _ = self._stacked
        y = x @ u_cat
        y -= u_mean
        y *= y
        y3 = y.reshape(x.shape[0], self.n_components, self.n_dims)
        sq = y3[:, :, 0].copy()
        for j in range(1, self.n_dims):  # d strided adds: NumPy's reduction over a short last axis was 3-15x slower
            sq += y3[:, :, j]
        return self._factors[2][None] - 0.5 * sq

    def log_pdf(self, x: np.ndarray) -> np.ndarray:
        """log m(x), normalised, (n,)."""
        x = np.asarray(x, dtype=np.float64)
        out = np.empty(x.shape[0])
        step = self._rows_per_block()
        for a in range(0, x.shape[0], step):
            out[a:a + step] = _logsumexp_rows(self._log_components(x[a:a + step]))
        return out

    def derivatives(self, x: np.ndarray, *, hess_diag: bool = False) -> tuple[np.ndarray, np.ndarray, np.ndarray,
                                                                              np.ndarray | None]:
        """(log m, s₀ (n, d), Δ log m (n,), the Hessian's diagonal (n, d) or None) at the rows of ``x``."""
        x = np.asarray(x, dtype=np.float64)
        n, d = x.shape
        K = self.n_components
        log_m, score, lap = np.empty(n), np.empty((n, d)), np.empty(n)
        diag = np.empty((n, d)) if hess_diag else None
        _, P, _ = self._factors
        _, _, p_cat, p_mean = self._stacked
        trace, pdiag = np.trace(P, axis1=1, axis2=2), np.diagonal(P, axis1=1, axis2=2)
        step = self._rows_per_block()
        for a in range(0, n, step):
            xb = x[a:a + step]
            log_comp = self._log_components(xb)
            lm = _logsumexp_rows(log_comp)
            r = np.exp(log_comp - lm[:, None])  # responsibilities (nb, K)
            s_k = (p_mean - xb @ p_cat).reshape(xb.shape[0], K, d)  # −P_k(x − μ_k)
            s = np.einsum("nk,nkd->nd", r, s_k)
            sq = s_k * s_k
            log_m[a:a + step], score[a:a + step] = lm, s
            lap[a:a + step] = r @ (-trace) + np.einsum("nk,nkd->n", r, sq) - np.einsum("nd,nd->n", s, s)
            if diag is not None:
                diag[a:a + step] = np.einsum("nk,nkd->nd", r, sq) - r @ pdiag - s * s
        return log_m, score, lap, diag

    def draw(self, n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        """``n`` draws and the component of each (the component first, then its coordinates, one stream)."""
        comp = rng.choice(self.n_components, size=int(n), p=self.weights)
        z = rng.standard_normal((int(n), self.n_dims))
        chol = np.linalg.cholesky(self.covariances)
        out = np.empty_like(z)
        for k in np.unique(comp):  # a component's draws at once: no (n, d, d) gather of the factors
            rows = comp == k
            out[rows] = self.means[k] + z[rows] @ chol[k].T
        return out, comp

    # -- storage --------------------------------------------------------------------------------
    def to_arrays(self) -> dict[str, np.ndarray]:
        return {"weights": self.weights, "means": self.means, "covariances": self.covariances}

    @classmethod
    def from_arrays(cls, arrays: dict[str, Any]) -> GaussianMixtureBase:
        return cls(*(np.asarray(arrays[k], dtype=np.float64) for k in ("weights", "means", "covariances")))

    def describe(self) -> str:
        return f"GaussianMixtureBase(K={self.n_components}, d={self.n_dims}, fingerprint={self.fingerprint[:12]})"


def _logsumexp_rows(a: np.ndarray) -> np.ndarray:
    """log Σ_k exp(a_nk) per row of a finite (n, K) block, shifted by the row's largest term. scipy's logsumexp, which
    also handles signs, weights and the array API, took 1.3–2× as long on the blocks a density evaluates."""
    top = a.max(axis=1)
    top = np.where(np.isfinite(top), top, 0.0)
    return top + np.log(np.exp(a - top[:, None]).sum(axis=1))


def fit_mixture_base(rows: np.ndarray, random_state: Any = 0, components: tuple[int, ...] = MIXTURE_COMPONENTS,
                     max_rows: int = MIXTURE_FIT_ROWS, cells: dict[int, float] | None = None,
                     progress: Progress | None = None) -> tuple[GaussianMixtureBase, list[dict[str, float]]]:
    """A full-covariance Gaussian mixture of ``rows``, K by held-out log-likelihood (module docstring).

    The rows are standardized column by column (the fit's ``reg_covar`` is :data:`MIXTURE_REG` of each column's
    variance), split 80/20 by a seeded permutation, and each K of ``components`` (those with at least
    :data:`MIXTURE_ROWS_PER_DIM`·(d + 1) training rows a component) is fitted on the 80 % and scored on the 20 %;
    the fewest components within one standard error of the best count (paired over the validation rows) are
    kept, and that K's fit is carried on to all rows (at most ``max_rows``; EM warm-started from it). ``cells``:
    column → the width of its lattice's cells (integer codes, binary flags:
    :func:`~tgpflow.io.column_kinds.column_kinds`); those columns are dequantized by seeded uniform noise over each
    value's cell before the fit, so that no component collapses onto one value of a code. Returns the mixture in the
    rows' units, its floor last where K > 1 (:data:`MIXTURE_FLOOR`), and the curve (K, held-out log-likelihood per
    row in those units).

    The counts are fitted as tasks on the active scheduler, as many at once as it runs (:func:`_search`), and the
    search reads their results in order: the same counts are kept, with the same seeds, as one fit after another
    would (tested). ``progress``: called with the futures of each distributed compute.
    """
    rows = np.asarray(rows, dtype=np.float64)
    n, d = rows.shape
    rng = np.random.default_rng(random_state)
    if n > max_rows:
        rows = rows[np.sort(rng.choice(n, max_rows, replace=False))]
        n = max_rows
    if cells:
        rows = dequantize(rows, cells, rng)
    center, scale = rows.mean(axis=0), rows.std(axis=0)
    scale = np.where(scale > 0, scale, 1.0)
    z = (rows - center) / scale
    order = rng.permutation(n)
    n_val = max(1, n // 5)
    train, val = z[order[n_val:]], z[order[:n_val]]
    log_det = float(np.log(scale).sum())  # the Jacobian back to the rows' units
    tried = list(itertools.takewhile(lambda k: k == 1 or train.shape[0] >= MIXTURE_ROWS_PER_DIM * (d + 1) * k,
                                     components))
    seeds = _em_seeds(copy.deepcopy(rng), len(tried))  # each count's seed, as a fit after another drew them
    fits, scores, curve = _search(train, val, log_det, tried, seeds, progress)
    for _ in range(len(fits)):  # the seeds the search used, drawn from rng itself: the starts below follow them
        rng.integers(2**31)
    best_k = _one_standard_error(scores, max(scores, key=lambda k: scores[k].mean()))
    gm, val_score = fits[best_k], float(scores[best_k].mean())
    starts = mixture_starts(train.shape[0])
    if starts > 1:  # a K's fit moves with EM's initialisation: keep the best of a few starts
        more = _fits([best_k] * (starts - 1), _em_seeds(rng, starts - 1), train, val, log_det, progress)
        for other, other_scores in more:
            if float(other_scores.mean()) > val_score:
                gm, val_score = other, float(other_scores.mean())
    gm.set_params(warm_start=True, max_iter=100)  # all the rows, from the chosen K's fit
    with single_blas_thread():  # a few small matrices a call: threads only cost
        gm.fit(z)
    weights, means = gm.weights_ / gm.weights_.sum(), center + gm.means_ * scale
    covs = gm.covariances_ * np.outer(scale, scale)[None]
    if means.shape[0] > 1 and MIXTURE_FLOOR > 0:  # the rows' own Gaussian under the tails (MIXTURE_FLOOR)
        wide = np.cov(z, rowvar=False, bias=True).reshape(d, d) + MIXTURE_REG * np.eye(d)
        weights = np.append((1.0 - MIXTURE_FLOOR) * weights, MIXTURE_FLOOR)
        means = np.vstack([means, center])
        covs = np.concatenate([covs, (wide * np.outer(scale, scale))[None]])
    return GaussianMixtureBase(weights, means, covs), curve


def mixture_starts(n_train: int) -> int:
    """EM starts at the chosen K for a search on ``n_train`` rows (:data:`MIXTURE_STARTS`)."""
    return int(min(MIXTURE_STARTS, max(1, MIXTURE_START_ROWS // max(n_train, 1))))


def _em_seeds(rng: np.random.Generator, n: int) -> list[int]:
    return [int(rng.integers(2**31)) for _ in range(n)]


def _search(train: np.ndarray, val: np.ndarray, log_det: float, tried: list[int], seeds: list[int],
            progress: Progress | None) -> tuple[dict[int, Any], dict[int, np.ndarray], list[dict[str, float]]]:
    """Each count of ``tried`` fitted and scored, in waves of as many fits as the scheduler runs at once, until two
    counts in a row do not improve on the best (the counts of a wave beyond that are dropped). Returns the fits, each
    validation row's log-likelihood under each, and the curve, of the counts read."""
    fits: dict[int, Any] = {}
    scores: dict[int, np.ndarray] = {}
    curve: list[dict[str, float]] = []
    best, worse = -math.inf, 0
    width = parallel_tasks()
    for at in range(0, len(tried), width):
        wave = tried[at:at + width]
        for k, (gm, k_scores) in zip(wave, _fits(wave, seeds[at:at + width], train, val, log_det, progress),
                                     strict=True):
            fits[k], scores[k] = gm, k_scores
            score = float(k_scores.mean())
            curve.append({"components": k, "heldout_loglik": score})
            best, worse = (score, 0) if score > best else (best, worse + 1)
            if worse == 2:
                return fits, scores, curve
    return fits, scores, curve


def _fits(counts: list[int], seeds: list[int], train: np.ndarray, val: np.ndarray, log_det: float,
          progress: Progress | None) -> list[tuple[Any, np.ndarray]]:
    """A fit of each count (its EM seed) on ``train`` and each validation row's log-likelihood under it, as tasks."""
    import dask

    task = dask.delayed(_fit_and_score, pure=True)
    shared = [dask.delayed(a, pure=True) for a in (train, val)]
    return list(compute(*[task(k, seed, *shared, log_det) for k, seed in zip(counts, seeds, strict=True)],
                        progress=progress))


def _fit_and_score(k: int, seed: int, train: np.ndarray, val: np.ndarray, log_det: float) -> tuple[Any, np.ndarray]:
    from sklearn.mixture import GaussianMixture

    gm = GaussianMixture(k, covariance_type="full", reg_covar=MIXTURE_REG, max_iter=200, n_init=1,
                         random_state=seed).fit(train)
    return gm, gm.score_samples(val) - log_det


def _one_standard_error(scores: dict[int, np.ndarray], best: int) -> int:
    """The fewest components whose validation log-likelihood is within one standard error of the best count's: the
    paired per-row differences' mean ≤ their standard error (the one-standard-error rule; module docstring)."""
    for k in sorted(scores):
        diff = scores[best] - scores[k]
        if k == best or diff.mean() <= diff.std(ddof=1) / math.sqrt(diff.size):
            return k
    return best
