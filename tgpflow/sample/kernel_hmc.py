"""Gradient-free Hamiltonian Monte Carlo with a learned score ([Sutherland et al.] §5.2, after Strathmann et al. 2015).

The target π is known only through an unnormalised log density (no gradient). Warm-up runs
adaptive random-walk Metropolis chains (Haario et al. 2001: proposal covariance
2.38²/d · Σ̂ + 10⁻⁶ I from the chain history) and collects their history; a score model
(``NystromKEF`` by default, or any tgpflow estimator with ``grad_log_density``, e.g.
``GPTiltedDensity``) is fitted on a seeded subsample of that history. After warm-up the surrogate
is frozen and every proposal follows Hamiltonian dynamics on it — L leapfrog steps of size ε
on U = −f with ∇f the learned score, momentum p ~ N(0, I) — and is accepted with the **true**
log density: log α = log π(x*) − log π(x) − ½‖p*‖² + ½‖p‖².

Why this is exact: the learned score is the gradient of the model's log density f, so the
leapfrog map on U = −f is volume-preserving and reversible; the Metropolis test on the true
Hamiltonian then leaves π invariant whatever the quality of f (quality only moves the
acceptance rate). Freezing the surrogate after warm-up keeps the kept draws a fixed Markov kernel.

:func:`trajectory_acceptance` is the paper's diagnostic: from a start point, 100 leapfrog steps
of size 0.1 on the surrogate, the hypothetical acceptance probability at each step, averaged
over the trajectory.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

import numpy as np

from tgpflow.sample.chains import Draws, mh_probability

__all__ = ["KernelHMCResult", "kernel_hmc", "leapfrog", "trajectory_acceptance"]

LogDensity = Callable[[np.ndarray], np.ndarray]


@dataclasses.dataclass
class KernelHMCResult(Draws):
    acceptance_rate: float
    warmup_acceptance: float
    trajectory_acceptance: float  # the paper's per-trajectory average of hypothetical acceptances
    surrogate: Any
    n_history: int



def leapfrog(score: Callable[[np.ndarray], np.ndarray], x: np.ndarray, p: np.ndarray, step: float, n_steps: int,
             every: bool = False) -> tuple[np.ndarray, np.ndarray] | list[tuple[np.ndarray, np.ndarray]]:
    """``n_steps`` leapfrog steps of H = −f(x) + ½‖p‖² with ∇f = ``score``; rows are independent chains.

    ``every=True`` returns the (x, p) after each full step (for the per-step diagnostic).
    """
    x, p = x.copy(), p + 0.5 * step * score(x)
    path = []
    for k in range(n_steps):
        x = x + step * p
        g = score(x)
        if every:
            path.append((x.copy(), p + 0.5 * step * g))  # the synchronised momentum at step k
        if k < n_steps - 1:
            p = p + step * g
        else:
            p = p + 0.5 * step * g
    return path if every else (x, p)


def _acceptance(logp0: np.ndarray, p0: np.ndarray, logp1: np.ndarray, p1: np.ndarray) -> np.ndarray:
    """The Metropolis probability of the move (x0, p0) → (x1, p1) under H = −log π + ½‖p‖²."""
    with np.errstate(invalid="ignore"):
        return mh_probability(logp1 - logp0 - 0.5 * np.einsum("nd,nd->n", p1, p1) + 0.5 * np.einsum("nd,nd->n", p0, p0))


def trajectory_acceptance(log_density: LogDensity, score: Callable[[np.ndarray], np.ndarray], x0: np.ndarray,
                          n_steps: int = 100, step: float = 0.1,
                          random_state: int | np.random.Generator | None = 0) -> np.ndarray:
    """Mean over each trajectory of the hypothetical acceptance at each of its ``n_steps`` steps.

    Rows of ``x0`` are independent starts; returns one average per start ([Sutherland et al.] §5.2).
    """
    rng = np.random.default_rng(random_state)
    x0 = np.array(x0, dtype=np.float64, ndmin=2)
    p0 = rng.standard_normal(x0.shape)
    lp0 = np.asarray(log_density(x0), dtype=np.float64)
    path = leapfrog(score, x0, p0, step, n_steps, every=True)
    return np.mean([_acceptance(lp0, p0, np.asarray(log_density(x), dtype=np.float64), p) for x, p in path], axis=0)


def _default_surrogate() -> Any:
    from tgpflow.models.nystrom_kef import NystromKEF

    return NystromKEF(n_basis=200, bandwidth="median", lam=1e-3, base="flat", random_state=0)


def kernel_hmc(log_density: LogDensity, x0: np.ndarray, n_samples: int, *, surrogate: Any = None,
               n_warmup: int = 2000, n_history: int = 1000, n_leapfrog: int = 20, step_size: float = 0.1,
               step_jitter: float = 0.2, thin: int = 1,
               random_state: int | np.random.Generator | None = 0) -> KernelHMCResult:
    """Sample π ∝ exp(``log_density``) with ``len(x0)`` chains: adaptive-Metropolis warm-up, a score
    model fitted on ≤ ``n_history`` warm-up states, then ``n_samples`` surrogate-HMC steps per chain.

    ε is drawn per step uniformly in [(1−j)ε, (1+j)ε] (j = ``step_jitter``), independently of
    the state, which keeps the kernel reversible and avoids periodic trajectories.
    """
    rng = np.random.default_rng(random_state)
    x = np.array(x0, dtype=np.float64, ndmin=2, copy=True)
    n_chains, d = x.shape
    if n_warmup < 10 or n_leapfrog < 1 or step_size <= 0 or not 0 <= step_jitter < 1 or not 1 <= thin <= n_samples:
        raise ValueError("need n_warmup >= 10, n_leapfrog >= 1, step_size > 0, 0 <= step_jitter < 1 and "
                         "1 <= thin <= n_samples")
    logp = np.asarray(log_density(x), dtype=np.float64)
    if not np.all(np.isfinite(logp)):
        raise ValueError("log_density is not finite at every starting point")
    # warm-up: adaptive random-walk Metropolis, covariance from the pooled history so far
    history = np.empty((n_warmup, n_chains, d))
    cov = np.eye(d) * 0.1
    accepted = 0.0
    for t in range(n_warmup):
        if t >= 50 and t % 50 == 0:  # Haario's scaling, re-estimated every 50 steps
            cov = (2.38**2 / d) * np.cov(history[t // 2:t].reshape(-1, d), rowvar=False).reshape(d, d)
            cov += 1e-6 * np.eye(d)
        y = x + rng.standard_normal(x.shape) @ np.linalg.cholesky(cov).T
        logp_y = np.asarray(log_density(y), dtype=np.float64)
        with np.errstate(invalid="ignore"):
            move = rng.random(n_chains) < mh_probability(logp_y - logp)
        x[move], logp[move] = y[move], logp_y[move]
        accepted += move.mean()
        history[t] = x
    pool = history[n_warmup // 2:].reshape(-1, d)  # the second half of warm-up, all chains
    pick = rng.choice(pool.shape[0], size=min(n_history, pool.shape[0]), replace=False)
    model = _default_surrogate() if surrogate is None else surrogate
    model.fit(pool[pick])

    def score(v: np.ndarray) -> np.ndarray:
        s = model.grad_log_density(v)
        return np.asarray(s.compute() if hasattr(s, "compute") else s, dtype=np.float64)

    kept, acc = [], np.zeros(n_chains)
    for t in range(n_samples):
        eps = step_size * (1 + step_jitter * (2 * rng.random() - 1))
        p = rng.standard_normal(x.shape)
        y, q = leapfrog(score, x, p, eps, n_leapfrog)
        logp_y = np.asarray(log_density(y), dtype=np.float64)
        prob = _acceptance(logp, p, logp_y, q)
        move = rng.random(n_chains) < prob
        x[move], logp[move] = y[move], logp_y[move]
        acc += prob
        if (t + 1) % thin == 0:
            kept.append(x.copy())
    traj = trajectory_acceptance(log_density, score, x, 100, 0.1, rng)
    return KernelHMCResult(np.stack(kept), float(acc.mean() / n_samples), float(accepted / n_warmup),
                           float(traj.mean()), model, int(len(pick)))
