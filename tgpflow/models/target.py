"""What a sampler or a Stein discrepancy needs from a distribution: its score, and its log density up to a
constant (used by :mod:`tgpflow.sample` and :mod:`tgpflow.metrics.stein`, which do not import each other).

Every fitted tgpflow model is a target (``grad_log_density``; ``log_density`` where the model
has one), evaluated through its ``fitted()`` value. Plain callables are wrapped with :class:`Target`. Both functions take (n, d) float64
rows and return (n,) / (n, d) float64 NumPy arrays; lazy (Dask) results are computed.
"""

from __future__ import annotations

import contextlib
import dataclasses
import warnings
from collections.abc import Iterator
from typing import Any, Callable

import numpy as np

__all__ = ["Target", "as_target"]

Rows = Callable[[np.ndarray], Any]


@dataclasses.dataclass(frozen=True)
class Target:
    """A distribution given by its score ``∇ log p`` and, optionally, ``log p`` up to a constant."""

    grad_log_density: Rows
    log_density: Rows | None = None

    def score(self, x: np.ndarray) -> np.ndarray:
        with _plain_rows():
            return _numpy(self.grad_log_density(x), x.shape)

    def logp(self, x: np.ndarray) -> np.ndarray:
        if self.log_density is None:
            raise ValueError("this target has no log density: the Metropolis step (MALA, HMC) needs one; "
                             "use the unadjusted Langevin sampler or SVGD instead")
        with _plain_rows():
            return _numpy(self.log_density(x), x.shape[:1])

    @property
    def has_log_density(self) -> bool:
        return self.log_density is not None


@contextlib.contextmanager
def _plain_rows() -> Iterator[None]:
    """Samplers pass plain (n, d) arrays in the model's column order, thousands of times: scikit-learn's
    "X does not have valid feature names" warning would repeat at every step and means nothing here."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="X does not have valid feature names")
        yield


def _numpy(value: Any, shape: tuple[int, ...]) -> np.ndarray:
    if hasattr(value, "compute"):
        value = value.compute()
    out = np.asarray(value, dtype=np.float64)
    if out.shape != shape:
        raise ValueError(f"the target returned shape {out.shape}, expected {shape}")
    return out


def as_target(obj: Any) -> Target:
    """A :class:`Target` from a fitted model, a ``Target``, or a score callable.

    A tgpflow estimator is sampled through its :class:`~tgpflow.models.fitted.Fitted` value
    (``est.fitted()``): plain rows in, NumPy out, without the estimator's input checks at every step.
    """
    if isinstance(obj, Target):
        return obj
    if hasattr(obj, "fitted") and callable(obj.fitted):  # an estimator: the log density its API offers
        fitted = obj.fitted()
        logp = fitted.log_density if fitted.has_log_density and hasattr(obj, "log_density") else None
        return Target(fitted.grad_log_density, logp)
    if hasattr(obj, "has_log_density") and hasattr(obj, "to_arrays"):  # a Fitted value
        return Target(obj.grad_log_density, obj.log_density if obj.has_log_density else None)
    if hasattr(obj, "grad_log_density"):
        return Target(obj.grad_log_density, getattr(obj, "log_density", None))
    if callable(obj):
        return Target(obj)
    raise TypeError(f"cannot sample from {type(obj).__name__}: it has no grad_log_density")


def model_scale(obj: Any, scale: Any = None) -> np.ndarray | None:
    """The diagonal preconditioner of a sampler: ``scale`` as given (one positive number per column), else the
    standardization of a model that has one (``scaling_``: ``scale=True`` or a pipeline's preprocess), else None."""
    if scale is None and getattr(obj, "scaling_", None) is not None:
        scale = obj.scaling_.scale
    if scale is None:
        return None
    scale = np.asarray(scale, dtype=np.float64)
    if scale.ndim != 1 or not np.all(np.isfinite(scale)) or not np.all(scale > 0):
        raise ValueError("scale must be one finite positive number per column")
    return scale


def preconditioned(target: Target, scale: np.ndarray) -> Target:
    """``target`` in ``z = x / scale``: score ``scale ⊙ s(scale ⊙ z)``, log density ``log p(scale ⊙ z)`` (up to the
    constant Jacobian, which cancels in a Metropolis ratio): a sampler's one step size then serves columns of
    very different spreads."""
    logp = None if not target.has_log_density else (lambda z: target.logp(z * scale))
    return Target(lambda z: target.score(z * scale) * scale, logp)
