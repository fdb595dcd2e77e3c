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
