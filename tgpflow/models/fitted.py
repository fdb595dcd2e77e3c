"""Fitted models as values: a solution and its evaluation, without the statistics (docs/architecture.md, "Inside
the estimators").

A :class:`Fitted` value holds what evaluating one solved model needs — its draw (random Fourier
features or a Nyström basis), the coefficients the solve produced, its base measure — and gives

* ``log_density`` (unnormalised), ``grad_log_density`` (the score) and ``hyvarinen_terms``
  (``½‖s‖² + div s`` per row with the closed-form divergence, docs/mathematics.md, "Metrics");
* ``sample`` (importance resampling from the Gaussian base, docs/mathematics.md, "MAP, baselines and sampling"),
  ``base_draws`` and ``reference_sample`` (the weighted proposal draws of the sliced metrics, [Paisley et al.] §IV);
* ``to_arrays``/``to_meta`` and ``from_arrays``: numeric arrays plus a small JSON dict, never a pickle.

Rows are (n, d) float64 NumPy arrays; there are no input checks (the estimators make them).
Building a value from its arrays does no linear algebra: this is what makes a model file load in
the time it takes to read it. Metrics, reports, samplers and the pipeline evaluate a model through
``est.fitted()``. The kinds: :class:`~tgpflow.models.tgp_fitted.TGPFitted` (FD, NCFD, FVPD, MAP,
KDE-RFF; docs/mathematics.md, "Fisher divergence and base-measure learning", "Noise-conditional Fisher divergence", "The
Fisher variational predictive distribution" and "MAP, baselines and sampling"),
:class:`~tgpflow.models.tgp_fitted.BoundedFitted` (one of them on bounded columns),
:class:`~tgpflow.models.scaled_fitted.ScaledFitted` (any of them on standardized columns),
:class:`~tgpflow.models.kernel_fitted.KernelFitted` (NKEF, lite and the score estimators; "Nyström kernel exponential
family" and "Score estimators on a Nyström basis") and :class:`~tgpflow.models.rsr_fitted.RSRFitted` (RSR and KDE-SDO;
"Root-Sobolev density").
"""

from __future__ import annotations

import abc
import dataclasses
from typing import Any, ClassVar

import numpy as np

from tgpflow.core.gaussian_base import importance_resample
from tgpflow.core.proposal import weighted_draws

__all__ = ["Fitted", "WrappedFitted", "fitted_from_arrays", "prefixed", "proposal_count"]

_KINDS: dict[str, type[Fitted]] = {}


def proposal_count(n_samples: int, n_proposals: int | None = None) -> int:
    """The proposal draws of an importance resample of ``n_samples`` rows: ``n_proposals``, by default
    max(20·n_samples, 10 000)."""
    return int(n_proposals) if n_proposals is not None else max(20 * int(n_samples), 10_000)


def prefixed(arrays: dict[str, np.ndarray], prefix: str) -> dict[str, np.ndarray]:
    """The arrays whose names start with ``prefix``, under the rest of their names."""
    return {k[len(prefix):]: v for k, v in arrays.items() if k.startswith(prefix)}


class Fitted(abc.ABC):
    """One solved model (see the module docstring). ``base`` is its Gaussian base N(μ, Σ), or None."""

    kind: ClassVar[str]
    base: Any

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "kind" in cls.__dict__:
            _KINDS[cls.kind] = cls

    @property
    @abc.abstractmethod
    def draw(self) -> Any:
        """The feature draw or Nyström basis the model is built on (its fingerprint identifies it)."""

    @property
    def has_log_density(self) -> bool:
        """Whether the model is a density (a diagonal-kernel score estimate is not a gradient field)."""
        return True

    @abc.abstractmethod
    def log_density(self, x: np.ndarray) -> np.ndarray:
        """The unnormalised log density, (n,)."""

    @abc.abstractmethod
    def grad_log_density(self, x: np.ndarray) -> np.ndarray:
        """The score ∇ log p(x), (n, d)."""

    @abc.abstractmethod
    def hyvarinen_terms(self, x: np.ndarray) -> np.ndarray:
        """½‖s(x)‖² + div s(x) per row, (n,)."""

    @abc.abstractmethod
    def to_arrays(self) -> dict[str, np.ndarray]:
        """The value's numeric arrays (the draw under ``features.``/``basis.``)."""

    @abc.abstractmethod
    def to_meta(self) -> dict[str, Any]:
        """What is not an array, as JSON (``kind`` first: :func:`fitted_from_arrays` dispatches on it)."""

    @classmethod
    @abc.abstractmethod
    def from_arrays(cls, arrays: dict[str, np.ndarray], meta: dict[str, Any]) -> Fitted:
        """The value back from :meth:`to_arrays` and :meth:`to_meta` (no linear algebra)."""

    # -- drawing from the base (docs/mathematics.md, "MAP, baselines and sampling")
    # ------------------------------------------------
    def _gaussian_base(self) -> Any:
        if getattr(self, "base", None) is None:
            raise ValueError(f"a {type(self).__name__} without a Gaussian base has nothing to propose from: sample "
                             f"it by MCMC from given start rows (tgpflow.sample.langevin, mcmc_sample with init=)")
        return self.base

    def sample(self, n_samples: int, random_state: Any = None, *, n_proposals: int | None = None,
               return_ess: bool = False) -> np.ndarray | tuple[np.ndarray, float]:
        """``n_samples`` rows by importance resampling from the base N(μ, Σ), made defensive (docs/mathematics.md, "MAP,
        baselines and sampling"; :mod:`tgpflow.core.proposal`).

        ``n_proposals`` defaults to max(20·n_samples, 10 000); with ``return_ess`` the effective
        sample size of the weights is returned too.
        """
        base = self._gaussian_base()
        n_prop = proposal_count(n_samples, n_proposals)
        rows, ess = importance_resample(self.log_density, base.mean, base.cov, int(n_samples), n_prop,
                                        np.random.default_rng(random_state), getattr(base, "mixture", None))
        return (rows, ess) if return_ess else rows

    def base_draws(self, n_samples: int, random_state: Any = None) -> np.ndarray:
        """``n_samples`` draws of the base — N(μ, Σ), or a mixture base (e.g. MCMC starts)."""
        return self._gaussian_base().draws(int(n_samples), np.random.default_rng(random_state))

    def reference_sample(self, n_samples: int = 250_000, random_state: Any = 0) -> tuple[np.ndarray, np.ndarray]:
        """Draws ζ of the defensive proposal q around the base (:mod:`tgpflow.core.proposal`) and their
        normalised weights ∝ exp(log p̃(ζ) − log q(ζ)) ([Paisley et al.] §IV compares a model with data through
        them); draws where the log density is not finite (KDE-RFF's estimate ≤ 0) get weight 0."""
        base = self._gaussian_base()
        return weighted_draws(self.log_density, base.mean, base.cov, int(n_samples),
                              np.random.default_rng(random_state), getattr(base, "mixture", None))


class WrappedFitted(Fitted):
    """A fitted model of transformed rows, ``inner``, evaluated in the data's units: its base and draw are the inner
    model's (in the transformed space), and its samples, base draws and reference draws are the inner model's
    mapped back by :meth:`_to_data` (the weights and the normaliser are the same in both spaces). The kinds:
    :class:`~tgpflow.models.tgp_fitted.BoundedFitted` (t⁻¹ of bounded columns) and
    :class:`~tgpflow.models.scaled_fitted.ScaledFitted` (a standardization's inverse)."""

    inner: Fitted

    @abc.abstractmethod
    def _to_data(self, rows: np.ndarray) -> np.ndarray:
        """Rows of the inner model's space in the data's units."""

    @abc.abstractmethod
    def _own_arrays(self) -> dict[str, np.ndarray]:
        """The wrapper's arrays beside the inner model's (``scaling.*``, ``bounds.*``, ``cells.*``)."""

    def to_arrays(self) -> dict[str, np.ndarray]:
        """The inner model's arrays under ``inner.``, then the wrapper's own."""
        return {**{f"inner.{k}": v for k, v in self.inner.to_arrays().items()}, **self._own_arrays()}

    def at_level(self, sigma: float) -> WrappedFitted:
        """The NCFD model at noise level σ (in the inner model's units), wrapped the same way."""
        return dataclasses.replace(self, inner=self.inner.at_level(sigma))  # type: ignore[attr-defined]

    @property
    def base(self) -> Any:
        """The inner model's Gaussian base (or None), in its transformed space."""
        return getattr(self.inner, "base", None)

    @property
    def draw(self) -> Any:
        return self.inner.draw

    @property
    def has_log_density(self) -> bool:
        return self.inner.has_log_density

    def sample(self, n_samples: int, random_state: Any = None, *, n_proposals: int | None = None,
               return_ess: bool = False) -> np.ndarray | tuple[np.ndarray, float]:
        rows, ess = self.inner.sample(n_samples, random_state, n_proposals=n_proposals, return_ess=True)
        rows = self._to_data(rows)
        return (rows, ess) if return_ess else rows

    def base_draws(self, n_samples: int, random_state: Any = None) -> np.ndarray:
        return self._to_data(self.inner.base_draws(n_samples, random_state))

    def reference_sample(self, n_samples: int = 250_000, random_state: Any = 0) -> tuple[np.ndarray, np.ndarray]:
        points, weights = self.inner.reference_sample(n_samples, random_state)
        return self._to_data(points), weights


def fitted_from_arrays(arrays: dict[str, np.ndarray], meta: dict[str, Any]) -> Fitted:
    """Any :class:`Fitted` value back from its arrays and meta (dispatch on ``meta["kind"]``)."""
    import tgpflow.models.kernel_fitted  # noqa: F401 - each module registers its kinds
    import tgpflow.models.lattice_fitted  # noqa: F401
    import tgpflow.models.rsr_fitted  # noqa: F401
    import tgpflow.models.scaled_fitted  # noqa: F401
    import tgpflow.models.tgp_fitted  # noqa: F401

    kind = meta.get("kind")
    if kind not in _KINDS:
        raise ValueError(f"unknown fitted-model kind {kind!r}; known: {sorted(_KINDS)}")
    return _KINDS[kind].from_arrays(arrays, meta)
