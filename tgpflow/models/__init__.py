"""scikit-learn-style estimators built on the pass and the solves, and their fitted models as values.

``est.fitted()`` returns a :class:`Fitted` value (:mod:`tgpflow.models.fitted`): ``TGPFitted`` and
``BoundedFitted`` (GPTiltedDensity), ``KernelFitted`` (NystromKEF, ScoreEstimator), ``RSRFitted``
(RootSobolevDensity); :func:`fitted_from_arrays` rebuilds any of them from ``to_arrays``/``to_meta``.
The model kinds and their methods are listed once, in :mod:`tgpflow.models.registry`.

The names are imported on first use (PEP 562), so that the registry can be read (``tgpflow --help``,
the pipeline spec) without importing the estimators.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

_LAZY = {
    "GPTiltedDensity": "tgpflow.models.gp_tilted",
    "Fitted": "tgpflow.models.fitted",
    "fitted_from_arrays": "tgpflow.models.fitted",
    "KernelFitted": "tgpflow.models.kernel_fitted",
    "RSRFitted": "tgpflow.models.rsr_fitted",
    "BoundedFitted": "tgpflow.models.tgp_fitted",
    "TGPFitted": "tgpflow.models.tgp_fitted",
}

__all__ = ["GPTiltedDensity", "Fitted", "TGPFitted", "BoundedFitted", "KernelFitted", "RSRFitted",
           "fitted_from_arrays"]

if TYPE_CHECKING:
    from tgpflow.models.fitted import Fitted, fitted_from_arrays
    from tgpflow.models.gp_tilted import GPTiltedDensity
    from tgpflow.models.kernel_fitted import KernelFitted
    from tgpflow.models.rsr_fitted import RSRFitted
    from tgpflow.models.tgp_fitted import BoundedFitted, TGPFitted


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(_LAZY[name]), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
