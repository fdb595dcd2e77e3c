"""The two models of the root-Sobolev family as values: how ``f = wᵀφ`` makes the density, and whether the fit
has statistics that add up (docs/root_sobolev.md).

:class:`~tgpflow.models.root_sobolev.RootSobolevDensity` and its fitted value
:class:`~tgpflow.models.rsr_fitted.RSRFitted` read their ``method`` only through these objects
(:func:`sobolev_method`), as the GP-tilted family reads its own through :mod:`tgpflow.models.tgp_methods`:

* ``"rsr"``, the root-Sobolev density ``p ∝ f²``: its score is ``2∇f/f`` and its Hyvärinen terms ``2Δf/f`` are
  exact; its fit iterates over the rows (:mod:`tgpflow.models.rsr_iteration`), each pass summing ``φ/f`` at the
  current w, so it has no statistics to accumulate once and solve later.
* ``"kde_sdo"``, the KDE-SDO baseline ``p ∝ f`` with ``w = Σφ(x_i)/N``: a sum over rows, so its statistics
  ``Σφ(x_i), N`` add up (``accumulate``, ``fit_from_stats``, an exact ``partial_fit``, a pipeline's store).
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np

__all__ = ["SobolevMethod", "sobolev_method", "NO_RSR_STATS"]

#: Why method="rsr" has no accumulate/fit_from_stats, and what to do instead.
NO_RSR_STATS = ("RootSobolevDensity(method='rsr') has no additive sufficient statistics: every natural-gradient "
                "pass sums φ(x)/f(x) at the current w (docs/root_sobolev.md), so there is nothing to accumulate once "
                "and solve later. Refit on the rows (fit; partial_fit for an online update), or use "
                "method='kde_sdo', whose statistics Σφ(x_i), N add up")


class SobolevMethod:
    """One model of the family: ``p ∝ f^power`` for ``f = wᵀφ``."""

    name: ClassVar[str]
    #: The density is proportional to f to this power (the score is ``power · ∇f/f``).
    power: ClassVar[int]
    #: Whether its statistics ``Σφ(x_i), N`` add up (else its fit iterates over the rows).
    additive: ClassVar[bool]

    @property
    def exact_hyvarinen(self) -> bool:
        """Whether ``½‖s‖² + div s = 2Δf/f`` holds exactly per row (a square, ``p ∝ f²``)."""
        return self.power == 2

    def log_density(self, f: np.ndarray) -> np.ndarray:
        """The unnormalised log density at rows where ``f = wᵀφ`` takes the values ``f``."""
        raise NotImplementedError

    def require_statistics(self) -> None:
        """Refuse what only a model with additive statistics has (``accumulate``, ``fit_from_stats``, a pass)."""
        if not self.additive:
            raise ValueError(NO_RSR_STATS)

    def __repr__(self) -> str:
        return f"<root-Sobolev method {self.name!r}>"


class _RootSobolev(SobolevMethod):
    name = "rsr"
    power = 2
    additive = False

    def log_density(self, f: np.ndarray) -> np.ndarray:
        """log f² (−inf where f = 0)."""
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.log(f * f)


class _KDESDO(SobolevMethod):
    name = "kde_sdo"
    power = 1
    additive = True

    def log_density(self, f: np.ndarray) -> np.ndarray:
        """log f where f > 0, −inf elsewhere (the RFF SDO kernel takes negative values)."""
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.where(f > 0, np.log(np.where(f > 0, f, 1.0)), -np.inf)


_METHODS: dict[str, SobolevMethod] = {m.name: m for m in (_RootSobolev(), _KDESDO())}


def sobolev_method(name: str) -> SobolevMethod:
    """The method object of ``name`` (``"rsr"`` or ``"kde_sdo"``)."""
    try:
        return _METHODS[name]
    except KeyError:
        raise ValueError(f"method must be one of {tuple(_METHODS)}; got {name!r}") from None
