"""Oracles independent of what they check: plain-NumPy reference implementations and a tree hash.

The references (small n only) evaluate the models' defining formulas row by row with
``numpy.cos``/``numpy.sin`` from the raw ``cos(Z x/γ + c)`` form (no shift, no compiled kernel,
no statistics). :func:`tree_hash` says whether anything under a path changed (names and bytes).
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import scipy.special as sp


def tree_hash(root: Path, skip: tuple[str, ...] = ()) -> str:
    """SHA-256 over every path and file content under root (or of root itself, a file), but names in ``skip``."""
    h = hashlib.sha256()
    paths = [root] if root.is_file() else sorted(p for p in root.rglob("*"))
    for p in paths:
        if p.name in skip:
            continue
        h.update(str(p.relative_to(root.parent)).encode())
        if p.is_file():
            h.update(p.read_bytes())
    return h.hexdigest()


def phi_raw(X, Z, c, gamma):
    S = Z.shape[0]
    ang = X @ Z.T / gamma + c
    return np.sqrt(2.0 / S) * np.cos(ang), -np.sqrt(2.0 / S) * np.sin(ang)


def fd_objective(theta, X, Z, c, gamma, mean, P, lam):
    """[Paisley et al.] eq 6 + λ/2‖θ‖²: Σ_i [½‖s(x_i)‖² + tr ∇s(x_i)], s = (1/γ)Zᵀ(θ⊙φ') − P(x−μ)."""
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
    """[Paisley et al.] eq 27 + (λ/2)‖θ‖²: (1/H) Σ_h Σ_i E_ξ[½‖s_h‖² + tr∇s_h](x_i + ξ), ξ ~ N(0, σ_h²I),
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


def gauss_k(x, y, s):
    return np.exp(-np.sum((x - y) ** 2) / s)


def gauss_dy(x, y, s):
    """∂_y k(y, x) for k = exp(−‖x−y‖²/s): (2/s)(x − y) k."""
    return 2.0 / s * (x - y) * gauss_k(x, y, s)


def gauss_cf(x, y, s):
    """∂_x ∂_yᵀ k(x, y) by the textbook formula, one pair at a time."""
    r = x - y
    return 2.0 / s * (np.eye(len(x)) - 2.0 / s * np.outer(r, r)) * gauss_k(x, y, s)


def _score_matching_sum(f, X, grad_log_q0, h):
    """Σ_x [Δf + ½‖∇f‖² + ∇f·∇log q0](x) with ∇f, Δf by central differences of the black-box f."""
    d = X.shape[1]
    total = 0.0
    for x in X:
        g = np.zeros(d)
        lap = 0.0
        f0 = f(x)
        for j in range(d):
            e = np.zeros(d)
            e[j] = h
            fp, fm = f(x + e), f(x - e)
            g[j] = (fp - fm) / (2 * h)
            lap += (fp - 2 * f0 + fm) / h**2
        total += lap + 0.5 * g @ g + (0.0 if grad_log_q0 is None else g @ grad_log_q0(x))
    return total


def nkef_objective(beta, X, Y, s, lam, eps, grad_log_q0=None, h=1e-4):
    """Ĵ(f) + (λ/2)‖f‖²_H + (ε/2)‖β‖² with the cross term ([Sutherland et al.] eq 2 + B1), f = Σ_a ∂_y k(Y_a,·)ᵀβ_a.
    ∇f and Δf by central differences of the black-box f; ‖f‖²_H from textbook kernel derivatives."""
    m, d = Y.shape
    B = beta.reshape(m, d)

    def f(x):
        return sum(gauss_dy(x, Y[a], s) @ B[a] for a in range(m))

    total = _score_matching_sum(f, X, grad_log_q0, h)
    G = np.block([[gauss_cf(Y[a], Y[b], s) for b in range(m)] for a in range(m)])
    return total / X.shape[0] + 0.5 * lam * beta @ G @ beta + 0.5 * eps * beta @ beta


def lite_objective(alpha, X, Y, s, lam, grad_log_q0=None, h=1e-4):
    """Ĵ(f) + (λ/2)(‖f‖²_H + ‖α‖²) for f = Σ_a α_a k(Y_a, ·) (docs/mathematics.md, "Nyström kernel exponential family"
    lite; B3 scaling); FD derivatives."""

    def f(x):
        return sum(alpha[a] * gauss_k(Y[a], x, s) for a in range(len(Y)))

    total = _score_matching_sum(f, X, grad_log_q0, h)
    K = np.array([[gauss_k(a, b, s) for b in Y] for a in Y])
    return total / X.shape[0] + 0.5 * lam * (alpha @ K @ alpha + alpha @ alpha)


def nu_method_filter(s, t, nu):
    """g_t(s) = (1 − r_t(s))/s of t ν-method steps on an operator scaled to ‖T‖ ≤ 1, from its
    definition (Engl, Hanke & Neubauer, *Regularization of Inverse Problems*, §6.3; Hanke 1991):
    r_t(s) = P_t^(α,β)(1 − 2s) / P_t^(α,β)(1), α = 2ν − ½, β = −½ — the Jacobi polynomials, not the
    recursion's coefficients. Near s = 0, g → −r_t'(0) (the derivative of the Jacobi polynomial)."""
    a, b = 2 * nu - 0.5, -0.5
    r = sp.eval_jacobi(t, a, b, 1 - 2 * s) / sp.eval_jacobi(t, a, b, 1.0)
    dr0 = -(t + a + b + 1) * sp.eval_jacobi(t - 1, a + 1, b + 1, 1.0) / sp.eval_jacobi(t, a, b, 1.0)  # d/ds at 0
    small = np.abs(s) < 1e-8
    return np.where(small, -dr0, (1 - r) / np.where(small, 1.0, s))
