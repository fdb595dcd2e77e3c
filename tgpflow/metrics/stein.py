"""Kernel Stein discrepancy and maximum mean discrepancy (docs/mathematics.md, "SVGD, graphical SVGD and the kernel
Stein discrepancy" and "Metrics", [Wang et al.] Theorem 2).

KSD² of a sample {x_j} against a target with score s, in its per-coordinate form ([Wang et al.]
Thm 2; vanilla: one RBF kernel on all coordinates, graphical: k_i on the closed blanket C_i):

    KSD² = Σ_i (1/n²) Σ_{j,l} u_i(x_j, x_l),
    u_i = k_i [ s_i s'_i + (2/h_i)Δ s_i − (2/h_i)Δ s'_i + 2/h_i − 4Δ²/h_i² ],  Δ = x_{j,i} − x_{l,i},

with s = s(x_j), s' = s(x_l). The V-statistic keeps j = l; the U-statistic drops it and divides
by n(n−1) (unbiased, can be negative). h_i = med_i² on C_i, as in SVGD.

MMD² with k(x, y) = exp(−‖x − y‖²/h), h = the squared median pairwise distance of the pooled
sample (the median trick of [Wang et al.] §4.1): biased (V) or unbiased (U) estimate.

Both run over blocks of rows (memory O(n · block · d)), float64 accumulators.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tgpflow.features.local_kernels import local_kernels, median_bandwidths, neighbourhood_matrix
from tgpflow.models.target import as_target

__all__ = ["ksd", "mmd"]


def _ksd_block(x: np.ndarray, s: np.ndarray, xl: np.ndarray, sl: np.ndarray, h: np.ndarray, closed: Any,
               offset: int, u_stat: bool) -> float:
    diff = x[:, None, :] - xl[None, :, :]  # Δ (n, B, d): x_j − x_l
    k = local_kernels(diff * diff, h, closed)
    u = k * (s[:, None, :] * sl[None, :, :] + (2.0 / h) * diff * (s[:, None, :] - sl[None, :, :])
             + 2.0 / h - 4.0 * diff * diff / h**2)
    total = u.sum(axis=-1)  # (n, B): Σ_i u_i
    if u_stat:
        b = xl.shape[0]
        total[offset + np.arange(b), np.arange(b)] = 0.0
    return float(total.sum())


def ksd(x: np.ndarray, target: Any, *, graph: Any = None, bandwidth: Any = "median", u_statistic: bool = False,
        block: int | None = None, random_state: int | None = 0) -> float:
    """KSD² of the rows ``x`` against ``target`` (a model, Target or score callable); see module doc."""
    x = np.asarray(x, dtype=np.float64)
    n, d = x.shape
    if n < 2:
        raise ValueError("KSD needs at least 2 rows")
    s = as_target(target).score(x)
    closed = neighbourhood_matrix(graph, d)
    if isinstance(bandwidth, str):
        h = median_bandwidths(x, closed, 1000, np.random.default_rng(random_state))
    else:
        h = np.broadcast_to(np.asarray(bandwidth, dtype=np.float64), (d,)).copy()
    block = block or max(1, 2**22 // (n * d))
    total = sum(_ksd_block(x, s, x[a:a + block], s[a:a + block], h, closed, a, u_statistic)
                for a in range(0, n, block))
    return total / (n * (n - 1) if u_statistic else n * n)


def _rbf_sum(a: np.ndarray, b: np.ndarray, h: float, block: int, drop_diagonal: bool) -> float:
    total = 0.0
    na = np.sum(a * a, 1)
    for start in range(0, b.shape[0], block):
        bl = b[start:start + block]
        sq = na[:, None] + np.sum(bl * bl, 1)[None, :] - 2.0 * a @ bl.T
        k = np.exp(-np.maximum(sq, 0.0) / h)
        if drop_diagonal:
            idx = np.arange(bl.shape[0])
            k[start + idx, idx] = 0.0
        total += float(k.sum())
    return total


def mmd(x: np.ndarray, y: np.ndarray, *, bandwidth: Any = "median", unbiased: bool = False, block: int = 1024,
        random_state: int | None = 0) -> float:
    """MMD² between the rows of ``x`` and ``y`` with the median-trick RBF kernel (see module doc)."""
    x = np.asarray(x, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    if x.ndim != 2 or y.ndim != 2 or x.shape[1] != y.shape[1]:
        raise ValueError(f"x and y must be 2-d with the same number of columns; got {x.shape}, {y.shape}")
    m, n = x.shape[0], y.shape[0]
    if min(m, n) < 2:
        raise ValueError("MMD needs at least 2 rows on each side")
    if isinstance(bandwidth, str):
        h = float(median_bandwidths(np.concatenate([x, y]), None, 1000, np.random.default_rng(random_state))[0])
    else:
        h = float(bandwidth)
    kxx = _rbf_sum(x, x, h, block, unbiased) / (m * (m - 1) if unbiased else m * m)
    kyy = _rbf_sum(y, y, h, block, unbiased) / (n * (n - 1) if unbiased else n * n)
    kxy = _rbf_sum(x, y, h, block, False) / (m * n)
    return kxx + kyy - 2.0 * kxy
