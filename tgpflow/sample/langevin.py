"""Langevin samplers on a score: unadjusted (ULA) and Metropolis-adjusted (MALA).

Many chains run at once as the rows of one (n_chains, d) array, so each step is one call of the
model's vectorised ``grad_log_density`` (and ``log_density`` for MALA). Step

    y = x + ε s(x) + √(2ε) ξ,   ξ ~ N(0, I),

and MALA accepts with probability min(1, p(y) q(x|y) / p(x) q(y|x)), q(y|x) ∝
exp(−‖y − x − ε s(x)‖²/4ε). During warm-up ε is adapted by the dual averaging of Hoffman &
Gelman (2014, Alg. 5) towards a target acceptance (0.574, the optimal MALA rate of Roberts &
Rosenthal 1998), using the mean acceptance probability over chains; after warm-up it is fixed
at the averaged value, so the kept draws come from a fixed Markov kernel. ULA adapts the same way
on the *hypothetical* MALA acceptance when the target has a log density, towards 0.95 by
default: ULA's stationary law is off by O(ε) (on N(0, σ²) its variance is σ²/(1 − ε/2σ²)), and
the MALA-optimal 0.574 would allow steps with a bias of several hundred per cent. Without a log
density ULA's step is left as given. A step that adapts beyond 10⁴ × the initial one means
acceptance stayed near 1 far out — an improper target (e.g. a kernel model with
``base="flat"``) — and raises instead of returning runaway chains. All arithmetic is float64; every draw comes
from the one ``numpy.random.Generator`` seeded by ``random_state``.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from tgpflow.models.target import as_target, model_scale, preconditioned
from tgpflow.sample.chains import Draws, mh_probability

__all__ = ["ChainResult", "langevin", "mala", "DualAveraging"]

#: Optimal asymptotic MALA acceptance (Roberts & Rosenthal 1998).
MALA_TARGET_ACCEPT = 0.574
#: ULA's default target (hypothetical MALA acceptance): keeps its O(ε) bias small.
ULA_TARGET_ACCEPT = 0.95


@dataclasses.dataclass
class ChainResult(Draws):
    """Langevin draws (see :class:`~tgpflow.sample.chains.Draws`) with the step and acceptance."""

    step_size: float
    acceptance_rate: float | None  # mean over kept steps and chains (None: ULA without a log density)
    acceptance_per_chain: np.ndarray | None
    warmup_acceptance: float | None
    n_warmup: int
    method: str

    def summary(self) -> dict[str, object]:
        return {"method": self.method, "step_size": self.step_size, "acceptance_rate": self.acceptance_rate,
                "warmup_acceptance": self.warmup_acceptance, "n_warmup": self.n_warmup,
                "n_draws": int(self.samples.shape[0]), "n_chains": int(self.samples.shape[1])}


class DualAveraging:
    """Step-size adaptation of Hoffman & Gelman (2014), Algorithm 5 (γ = 0.05, t₀ = 10, κ = 0.75)."""

    def __init__(self, step_size: float, target: float, gamma: float = 0.05, t0: float = 10.0, kappa: float = 0.75):
        self.mu = math.log(10.0 * step_size)
        self.target, self.gamma, self.t0, self.kappa = target, gamma, t0, kappa
        self.h_bar = 0.0
        self.log_step = math.log(step_size)
        self.log_step_bar = 0.0
        self.t = 0

    def update(self, accept_prob: float) -> float:
        self.t += 1
        t = self.t
        self.h_bar = (1 - 1 / (t + self.t0)) * self.h_bar + (self.target - accept_prob) / (t + self.t0)
        self.log_step = self.mu - math.sqrt(t) / self.gamma * self.h_bar
        eta = t ** (-self.kappa)
        self.log_step_bar = eta * self.log_step + (1 - eta) * self.log_step_bar
        return math.exp(self.log_step)

    @property
    def final(self) -> float:
        return math.exp(self.log_step_bar) if self.t else math.exp(self.log_step)


def _log_q(to: np.ndarray, frm: np.ndarray, score_frm: np.ndarray, eps: float) -> np.ndarray:
    """log q(to | frm) of the Langevin proposal, up to a constant shared by both directions."""
    r = to - frm - eps * score_frm
    return -np.einsum("nd,nd->n", r, r) / (4 * eps)


def langevin(target, x0: np.ndarray, n_steps: int, *, step_size: float = 0.1, n_warmup: int = 500,
             adapt: bool = True, metropolis: bool = False, target_accept: float | None = None,
             thin: int = 1, random_state: int | np.random.Generator | None = 0,
             scale: np.ndarray | None = None) -> ChainResult:
    """Run ``len(x0)`` Langevin chains for ``n_warmup`` + ``n_steps`` steps; keep every ``thin``-th draw.

    ``metropolis=True`` is MALA (needs ``log_density``). ``target`` is a fitted model, a
    :class:`~tgpflow.models.target.Target` or a score callable. ``scale`` (one positive number per column):
    a diagonal preconditioner — the chains move in ``z = x / scale``, so that one step size serves columns of
    very different spreads (the draws are returned in ``x``; the step size is ``z``'s). By default a model
    with a standardization (``scaling_``: ``scale=True`` or a pipeline's preprocess) uses its scales.
    """
    tgt, scale = as_target(target), model_scale(target, scale)
    if scale is not None:
        tgt = preconditioned(tgt, scale)
    x = np.array(x0, dtype=np.float64, ndmin=2, copy=True)
    if scale is not None:
        if x.shape[1] != scale.shape[0]:
            raise ValueError(f"scale has {scale.shape[0]} entries, the chains {x.shape[1]} columns")
        x = x / scale
    if not np.all(np.isfinite(x)):
        raise ValueError("x0 has non-finite values")
    if step_size <= 0 or n_steps < 1 or n_warmup < 0 or not 1 <= thin <= n_steps:
        raise ValueError(f"need step_size > 0, n_steps >= 1, n_warmup >= 0, 1 <= thin <= n_steps; got {step_size}, "
                         f"{n_steps}, {n_warmup}, {thin}")
    rng = np.random.default_rng(random_state)
    use_logp = tgt.has_log_density
    if metropolis and not use_logp:
        tgt.logp(x)  # raises the explanatory error
    if target_accept is None:
        target_accept = MALA_TARGET_ACCEPT if metropolis else ULA_TARGET_ACCEPT
    adapter = DualAveraging(step_size, target_accept) if adapt and n_warmup and use_logp else None
    eps = float(step_size)
    score = tgt.score(x)
    logp = tgt.logp(x) if use_logp else None
    kept, acc_sum, warm_acc = [], np.zeros(x.shape[0]), []
    for it in range(n_warmup + n_steps):
        warm = it < n_warmup
        y = x + eps * score + math.sqrt(2 * eps) * rng.standard_normal(x.shape)
        score_y = tgt.score(y)
        if use_logp:
            logp_y = tgt.logp(y)
            with np.errstate(invalid="ignore"):
                prob = mh_probability(logp_y - logp + _log_q(x, y, score_y, eps) - _log_q(y, x, score, eps))
        if metropolis:
            move = rng.random(x.shape[0]) < prob
            x[move], score[move], logp[move] = y[move], score_y[move], logp_y[move]
        else:  # ULA: always move
            x, score = y, score_y
            if use_logp:
                logp = logp_y
        if warm:
            if use_logp:
                warm_acc.append(float(prob.mean()))
            if adapter is not None:
                eps = adapter.update(float(prob.mean()))
                if it == n_warmup - 1:
                    eps = adapter.final
                if eps > 1e4 * step_size:
                    raise FloatingPointError(
                        f"the step size adapted to {eps:.3g} (from {step_size:g}): acceptance stays near 1 "
                        f"far from the start, so the target looks improper (a kernel model with base='flat' "
                        f"has no finite mass); fit with base='gaussian' or pass adapt=False")
            continue
        if use_logp:
            acc_sum += prob
        if (it - n_warmup + 1) % thin == 0:
            kept.append(x.copy())
    if not np.all(np.isfinite(x)):
        raise FloatingPointError(f"{int(np.sum(~np.isfinite(x).all(axis=1)))} chains diverged (non-finite "
                                 f"states) at step size {eps:.3g}: lower step_size or enable adaptation")
    acc = acc_sum / n_steps if use_logp else None
    draws = np.stack(kept) if scale is None else np.stack(kept) * scale
    return ChainResult(draws, eps, None if acc is None else float(acc.mean()), acc,
                       float(np.mean(warm_acc)) if warm_acc else None, n_warmup,
                       "mala" if metropolis else "ula")


def mala(target, x0: np.ndarray, n_steps: int, **kwargs) -> ChainResult:
    """Metropolis-adjusted Langevin: :func:`langevin` with ``metropolis=True``."""
    return langevin(target, x0, n_steps, metropolis=True, **kwargs)
