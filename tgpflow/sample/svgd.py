"""Stein variational gradient descent, vanilla and graphical (docs/mathematics.md, "SVGD, graphical SVGD and the kernel
Stein discrepancy", [Wang et al.] Algorithm 1).

Particles x¹…xⁿ move along the Stein variational direction, coordinate by coordinate,

    φ*_i(x_l) = (1/n) Σ_j k_i(x_j, x_l) [ s_i(x_j) + (2/h_i)(x_{l,i} − x_{j,i}) ],
    k_i(x, x') = exp(−‖x_{C_i} − x'_{C_i}‖² / h_i),

with C_i = {i} ∪ N(i) the closed Markov blanket of node i (graphical SVGD) or all coordinates
with one shared h (vanilla SVGD). h_i = med_i², the squared median pairwise distance of the
particles on C_i, recomputed every iteration ([Wang et al.] §4; on at most ``median_rows`` particles
drawn with the run's seed when n is larger).

Steps: AdaGrad as in the authors' reference SVGD code — per-coordinate
G ← αG + (1−α)φ² (G ← φ² at the first step), x ← x + ε φ/(10⁻⁶ + √G), α = 0.9 — or plain
``x ← x + εφ`` (``optimizer="sgd"``).

Cost O(n² Σ_i |C_i|) per iteration. The sums over j run over blocks of target particles l
(``block`` rows at a time, by default sized so one block's tables stay below ~4 MiB: on the
benchmark machine fresh multi-MB temporaries cost more in page faults than the arithmetic); given a Dask ``client`` the
blocks are tasks on the cluster, with the particles and their scores broadcast once per iteration.
Float64 throughout.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Sequence

import numpy as np
import scipy.sparse as sps

from tgpflow.features.local_kernels import local_kernels, median_bandwidths, neighbourhood_matrix
from tgpflow.models.target import as_target, model_scale, preconditioned

__all__ = ["SVGDResult", "svgd", "svgd_direction", "grid_graph"]


@dataclasses.dataclass
class SVGDResult:
    particles: np.ndarray  # (n, d)
    n_iter: int
    bandwidths: np.ndarray  # (d,) the last h_i (vanilla: d copies of one h)
    direction_norm: float  # RMS of the last Stein direction: ~0 at a fixed point


def _direction_block(x: np.ndarray, s: np.ndarray, xl: np.ndarray, h: np.ndarray,
                     closed: np.ndarray | sps.csr_matrix | None) -> np.ndarray:
    """φ* at the particles ``xl`` (block of targets) from all particles ``x`` with scores ``s``."""
    n = x.shape[0]
    if closed is None:  # vanilla: one kernel matrix shared by all coordinates
        hh = float(h[0])
        sq = np.sum(xl**2, 1)[None, :] + np.sum(x**2, 1)[:, None] - 2.0 * x @ xl.T
        k = np.exp(-np.maximum(sq, 0.0) / hh)  # (n, B)
        return (k.T @ s + (2.0 / hh) * (xl * k.sum(0)[:, None] - k.T @ x)) / n
    diff = x[:, None, :] - xl[None, :, :]
    k = local_kernels(diff * diff, h, closed)  # (n, B, d)
    ks = np.einsum("jli,ji->li", k, s)
    kx = np.einsum("jli,ji->li", k, x)
    return (ks + (2.0 / h) * (xl * k.sum(0) - kx)) / n


def svgd_direction(x: np.ndarray, scores: np.ndarray, *, graph: Any = None, bandwidth: Any = "median",
                   block: int | None = None, client: Any = None, median_rows: int = 1000,
                   rng: np.random.Generator | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The Stein variational direction φ* (n, d) at the particles, and the bandwidths h used.

    ``graph=None`` is vanilla SVGD; otherwise see :func:`closed_neighbourhoods`. ``bandwidth``:
    "median" or a positive number (vanilla) / length-d array (graphical).
    """
    x = np.asarray(x, dtype=np.float64)
    closed = neighbourhood_matrix(graph, x.shape[1])
    return _direction(x, np.asarray(scores, dtype=np.float64), closed, bandwidth, block, client, median_rows, rng)


def _direction(x: np.ndarray, s: np.ndarray, closed: np.ndarray | sps.csr_matrix | None, bandwidth: Any,
               block: int | None, client: Any, median_rows: int,
               rng: np.random.Generator | None) -> tuple[np.ndarray, np.ndarray]:
    n, d = x.shape
    if isinstance(bandwidth, str):
        if bandwidth != "median":
            raise ValueError(f"bandwidth must be 'median' or positive numbers; got {bandwidth!r}")
        h = median_bandwidths(x, closed, median_rows, rng)
    else:
        h = np.broadcast_to(np.asarray(bandwidth, dtype=np.float64), (d,)).copy()
        if np.any(h <= 0):
            raise ValueError("bandwidths must be > 0")
    if block is None:  # the (n, block, d) tables of one block stay below ~4 MiB: heap-reused, cache-friendly
        block = max(1, 2**19 // (n * (1 if closed is None else d)))
    starts = range(0, n, block)
    if client is None:
        phi = np.concatenate([_direction_block(x, s, x[a:a + block], h, closed) for a in starts])
    else:
        xs, ss, hs, cs = client.scatter([x, s, h, closed], broadcast=True)
        futures = [client.submit(_direction_block, xs, ss, x[a:a + block], hs, cs, pure=False) for a in starts]
        phi = np.concatenate(client.gather(futures))
    return phi, h


def svgd(target, x0: np.ndarray, n_iter: int = 1000, *, step_size: float = 0.1, graph: Any = None,
         bandwidth: Any = "median", optimizer: str = "adagrad", alpha: float = 0.9, block: int | None = None,
         client: Any = None, median_rows: int = 1000,
         random_state: int | np.random.Generator | None = 0, scale: np.ndarray | None = None) -> SVGDResult:
    """Move the particles ``x0`` (n, d) for ``n_iter`` SVGD iterations towards ``target``.

    ``target`` is a fitted model, a :class:`~tgpflow.models.target.Target` or a score callable;
    only its score is used. ``graph`` switches on graphical SVGD ([Wang et al.] Algorithm 1). ``scale``: a
    diagonal preconditioner, as :func:`~tgpflow.sample.langevin.langevin`'s (the particles move, and the kernel's
    bandwidth is taken, in ``x / scale``; by default a standardized model's scales).
    """
    tgt, scale = as_target(target), model_scale(target, scale)
    if scale is not None:
        tgt = preconditioned(tgt, scale)
    if optimizer not in ("adagrad", "sgd"):
        raise ValueError(f"optimizer must be 'adagrad' or 'sgd'; got {optimizer!r}")
    if n_iter < 1 or step_size <= 0:
        raise ValueError("need n_iter >= 1 and step_size > 0")
    x = np.array(x0, dtype=np.float64, ndmin=2, copy=True)
    if x.shape[0] < 2 or not np.all(np.isfinite(x)):
        raise ValueError("SVGD needs at least 2 particles with finite coordinates")
    if scale is not None:
        x = x / scale
    rng = np.random.default_rng(random_state)
    hist = None
    closed = neighbourhood_matrix(graph, x.shape[1])
    for _ in range(n_iter):
        phi, h = _direction(x, tgt.score(x), closed, bandwidth, block, client, median_rows, rng)
        if optimizer == "sgd":
            x += step_size * phi
            continue
        hist = phi**2 if hist is None else alpha * hist + (1 - alpha) * phi**2
        x += step_size * phi / (1e-6 + np.sqrt(hist))
    if not np.all(np.isfinite(x)):
        raise FloatingPointError(f"SVGD diverged (non-finite particles) at step_size={step_size:g}: lower it "
                                 f"(tgpflow sample --step-size)")
    return SVGDResult(x if scale is None else x * scale, n_iter, h, float(np.sqrt(np.mean(phi**2))))


def grid_graph(rows: int, cols: int) -> list[Sequence[int]]:
    """Neighbour lists of a rows × cols 4-neighbourhood grid (node r·cols + c), as in [Wang et al.] §4.1."""
    nb: list[list[int]] = [[] for _ in range(rows * cols)]
    for r in range(rows):
        for c in range(cols):
            i = r * cols + c
            if c + 1 < cols:
                nb[i].append(i + 1)
                nb[i + 1].append(i)
            if r + 1 < rows:
                nb[i].append(i + cols)
                nb[i + cols].append(i)
    return nb
