"""Held-out scores of a fitted density, streamed over any source (docs/mathematics.md, "Conventions" and "Metrics").

* :func:`hyvarinen_loss` — ``J(s) = mean_i [½‖s(x_i)‖² + div s(x_i)]`` with the model's closed-form
  divergence; lower is better; equals the Fisher divergence to the data up to a model-free constant.
* :func:`heldout_loglik` — ``mean_i log p(x_i)`` of the normalised density (log Z by importance
  sampling from the model's base, :meth:`GPTiltedDensity.log_normalizer`); higher is better.

One pass each, chunk sums tree-reduced in float64.
"""

from __future__ import annotations

from typing import Any

from tgpflow.metrics.streamed import streamed_mean

__all__ = ["hyvarinen_loss", "heldout_loglik"]


def hyvarinen_loss(model: Any, X: Any, *, sigma: float | None = None, columns: list[str] | None = None,
                   on_bad_rows: str = "raise") -> float:
    """Mean of ``½‖s‖² + div s`` of ``model`` over the rows of ``X`` (any source).

    ``model`` needs ``hyvarinen_terms`` (every tgpflow density does); ``sigma`` is passed on
    for noise-conditional models.
    """
    if not hasattr(model, "hyvarinen_terms"):
        raise TypeError(f"{type(model).__name__} has no hyvarinen_terms; it cannot be scored by score matching")
    terms = model.fitted(sigma).hyvarinen_terms if hasattr(model, "fitted") else model.hyvarinen_terms
    return streamed_mean(model, X, terms, columns=columns, on_bad_rows=on_bad_rows)


def heldout_loglik(model: Any, X: Any, *, columns: list[str] | None = None, on_bad_rows: str = "raise") -> float:
    """Mean normalised log density of ``model`` over the rows of ``X`` (any source): the held-out
    log-likelihood per row, in nats. Needs a model with a normaliser (``log_normalizer``)."""
    if not hasattr(model, "log_normalizer"):
        raise TypeError(f"{type(model).__name__} has no normaliser estimate: its held-out log-likelihood is undefined")
    log_z = model.normalizer_.log_z if getattr(model, "normalizer_", None) is not None else model.log_normalizer().log_z
    density = model.fitted().log_density
    return streamed_mean(model, X, lambda rows: density(rows) - log_z, columns=columns, on_bad_rows=on_bad_rows)
