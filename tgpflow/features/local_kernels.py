"""Local kernels on closed Markov blankets, shared by graphical SVGD and the kernel Stein discrepancy
(docs/mathematics.md, "SVGD, graphical SVGD and the kernel Stein discrepancy" and "Metrics", [Wang et al.] §3–§4).

For a graph on the d coordinates, C_i = {i} ∪ N(i) is the closed Markov blanket of coordinate i and

    k_i(x, x') = exp(−‖x_{C_i} − x'_{C_i}‖² / h_i),   h_i = (median pairwise distance on C_i)²;

with no graph (vanilla SVGD, plain KSD) there is one kernel on all coordinates with one h. The
samplers (:mod:`tgpflow.sample.svgd`) and the metrics (:mod:`tgpflow.metrics.stein`) both build on
these functions, so neither imports the other.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import scipy.sparse as sps

__all__ = ["closed_neighbourhoods", "neighbourhood_matrix", "local_kernels", "median_bandwidths"]


def closed_neighbourhoods(graph: Any, d: int) -> sps.csr_matrix:
    """The (d, d) 0/1 matrix M with M[c, i] = 1 iff c ∈ C_i = {i} ∪ N(i).

    ``graph``: a (d, d) adjacency matrix (dense or scipy sparse; nonzero = edge, made symmetric),
    or a sequence of d neighbour lists. ``None`` means the complete graph (vanilla SVGD).
    """
    if graph is None:
        return sps.csr_matrix(np.ones((d, d)))
    if sps.issparse(graph) or isinstance(graph, np.ndarray):
        adj = sps.csr_matrix(graph, dtype=np.float64)
        if adj.shape != (d, d):
            raise ValueError(f"the adjacency matrix is {adj.shape}; the particles have d = {d}")
    else:
        lists = list(graph)
        if len(lists) != d:
            raise ValueError(f"{len(lists)} neighbour lists for d = {d} coordinates")
        rows = [j for i, nb in enumerate(lists) for j in nb]
        cols = [i for i, nb in enumerate(lists) for _ in nb]
        if rows and (min(rows) < 0 or max(rows) >= d):
            raise ValueError(f"a neighbour index is outside 0..{d - 1}")
        adj = sps.csr_matrix((np.ones(len(rows)), (rows, cols)), shape=(d, d))
    adj = abs(adj) + abs(adj.T) + sps.identity(d, format="csr")
    adj.data[:] = 1.0
    return adj.tocsr()


def neighbourhood_matrix(graph: Any, d: int) -> np.ndarray | sps.csr_matrix | None:
    """The closed-neighbourhood matrix in the faster form: dense BLAS for d ≤ 256, sparse beyond."""
    if graph is None:
        return None
    closed = closed_neighbourhoods(graph, d)
    return closed.toarray() if d <= 256 else closed


def local_kernels(sq: np.ndarray, h: np.ndarray, closed: np.ndarray | sps.csr_matrix | None) -> np.ndarray:
    """k_i(x_j, x_l) = exp(−‖x_{j,C_i} − x_{l,C_i}‖²/h_i) from squared coordinate differences ``sq``
    (n, B, d): shape (n, B, d), or (n, B, 1) for the one kernel of vanilla SVGD (``closed=None``)."""
    if closed is None:
        return np.exp(-sq.sum(axis=-1, keepdims=True) / h[0])
    return np.exp(-np.asarray(sq.reshape(-1, sq.shape[-1]) @ closed).reshape(sq.shape) / h)


def median_bandwidths(x: np.ndarray, closed: np.ndarray | sps.csr_matrix | None, max_rows: int = 1000,
                      rng: np.random.Generator | None = None) -> np.ndarray:
    """h_i = (median pairwise distance of the particles on C_i)² for every i (vanilla: one h)."""
    d = x.shape[1]
    if closed is not None:  # the (pairs, d) table stays below ~80 MB
        max_rows = min(max_rows, int(np.sqrt(2e7 / d)))
    if x.shape[0] > max_rows:
        x = x[(rng or np.random.default_rng(0)).choice(x.shape[0], max_rows, replace=False)]
    iu = np.triu_indices(x.shape[0], 1)
    diff = x[iu[0]] - x[iu[1]]  # (pairs, d)
    sq = diff * diff
    if closed is None:
        h = float(np.median(sq.sum(axis=1)))  # median of squared distances = (median distance)²
        return np.full(d, h if h > 0 else 1.0)
    dist = np.asarray(closed.T @ sq.T)  # (d, pairs): squared distance on each C_i, rows contiguous
    h = np.median(dist, axis=1)
    h[h <= 0] = 1.0
    return h
