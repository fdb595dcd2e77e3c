"""Plain-NumPy reference implementations (small n only), independent of tgpflow's pass.

They evaluate the models' defining formulas row by row with ``numpy.cos``/``numpy.sin``
from the raw ``cos(Z x/γ + c)`` form (no shift, no compiled kernel, no statistics).
"""

from __future__ import annotations

import numpy as np


def phi_raw(X, Z, c, gamma):
    S = Z.shape[0]
    ang = X @ Z.T / gamma + c
    return np.sqrt(2.0 / S) * np.cos(ang), -np.sqrt(2.0 / S) * np.sin(ang)


def fd_objective(theta, X, Z, c, gamma, mean, P, lam):
    """Seed 003 eq 6 + λ/2‖θ‖²: Σ_i [½‖s(x_i)‖² + tr ∇s(x_i)], s = (1/γ)Zᵀ(θ⊙φ') − P(x−μ)."""
    phi, dphi = phi_raw(X, Z, c, gamma)
    s = (dphi * theta) @ Z / gamma - (X - mean) @ P
    trace = -(phi * theta) @ np.einsum("sd,sd->s", Z, Z) / gamma**2 - np.trace(P)
    return 0.5 * np.sum(s * s) + np.sum(trace) + 0.5 * lam * theta @ theta


def quadratic_minimiser(f, dim):
    """Minimiser of a quadratic f on R^dim from evaluations only (polarisation identities)."""
    f0 = f(np.zeros(dim))
    E = np.eye(dim)
    fp = np.array([f(E[k]) for k in range(dim)])
    fm = np.array([f(-E[k]) for k in range(dim)])
    H = np.empty((dim, dim))
    for k in range(dim):
        H[k, k] = fp[k] + fm[k] - 2 * f0
        for m in range(k):
            H[k, m] = H[m, k] = f(E[k] + E[m]) - fp[k] - fp[m] + f0
    g = 0.5 * (fp - fm)
    return np.linalg.solve(H, -g), H, g, f0


def gauss_hermite(mean, cov, n_nodes):
    """Tensor Gauss–Hermite rule for N(mean, cov): nodes (K, d) and weights (K,) summing to 1."""
    t, w = np.polynomial.hermite_e.hermegauss(n_nodes)
    w = w / w.sum()
    d = mean.shape[0]
    grids = np.meshgrid(*([t] * d), indexing="ij")
    nodes = np.column_stack([g.ravel() for g in grids])
    weights = np.prod(np.meshgrid(*([w] * d), indexing="ij"), axis=0).ravel()
    return mean + nodes @ np.linalg.cholesky(cov).T, weights


def ncfd_objective(theta, X, Z, c, gamma, mean, cov, lam, sigmas, n_nodes=30):
    """Seed 003 eq 27 + (λ/2)‖θ‖²: (1/H) Σ_h Σ_i E_ξ[½‖s_h‖² + tr∇s_h](x_i + ξ), ξ ~ N(0, σ_h²I),
    by tensor Gauss–Hermite quadrature in ξ (row by row, raw cos/sin; no statistics)."""
    d = X.shape[1]
    total = 0.0
    for sigma in sigmas:
        g = np.sqrt(gamma**2 + sigma**2)
        P = np.linalg.inv(cov + sigma**2 * np.eye(d))
        if sigma == 0:
            nodes, weights = np.zeros((1, d)), np.ones(1)
        else:
            nodes, weights = gauss_hermite(np.zeros(d), sigma**2 * np.eye(d), n_nodes)
        for x in X:
            Y = x + nodes
            phi, dphi = phi_raw(Y, Z, c, g)
            s = (dphi * theta) @ Z / g - (Y - mean) @ P
            tr = -(phi * theta) @ np.einsum("sd,sd->s", Z, Z) / g**2 - np.trace(P)
            total += weights @ (0.5 * np.sum(s * s, axis=1) + tr)
    return total / len(sigmas) + 0.5 * lam * theta @ theta


def fd_divergence(score_fn, X, h=1e-5):
    """div s(x) by central differences of a black-box score function."""
    out = np.zeros(X.shape[0])
    for j in range(X.shape[1]):
        e = np.zeros(X.shape[1])
        e[j] = h
        out += (score_fn(X + e)[:, j] - score_fn(X - e)[:, j]) / (2 * h)
    return out
