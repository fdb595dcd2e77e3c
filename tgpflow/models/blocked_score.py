"""Row-blocked score and Hyvärinen terms shared by the fitted-model evaluators (docs/mathematics.md, "Metrics").

An evaluator supplies ``_blocks(x)`` (start, block) and ``_score_block(xb, with_div)`` → (score,
divergence or None); this base turns them into ``grad_log_density`` and ``hyvarinen_terms``.
``grad_log_density`` asks for no divergence: samplers call it thousands of times, and the
divergence can cost as much as the score (FVPD: an extra (n, S) × (S, S) product and an S³
inverse on first use).
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

__all__ = ["BlockedScore"]


class BlockedScore:
    def _blocks(self, x: np.ndarray) -> Iterator[tuple[int, np.ndarray]]:
        raise NotImplementedError

    def _score_block(self, xb: np.ndarray, with_div: bool = True) -> tuple[np.ndarray, np.ndarray | None]:
        raise NotImplementedError

    def grad_log_density(self, x: np.ndarray) -> np.ndarray:
        """The score ∇ log p(x), (n, d)."""
        out = np.empty(x.shape)
        for start, xb in self._blocks(x):
            out[start:start + xb.shape[0]] = self._score_block(xb, with_div=False)[0]
        return out

    def hyvarinen_terms(self, x: np.ndarray) -> np.ndarray:
        """½‖s(x)‖² + div s(x) per row (the summand of the Hyvärinen loss, docs/mathematics.md, "Conventions" and
        "Metrics")."""
        out = np.empty(x.shape[0])
        for start, xb in self._blocks(x):
            score, div = self._score_block(xb)
            out[start:start + xb.shape[0]] = 0.5 * np.einsum("nd,nd->n", score, score) + div
        return out
