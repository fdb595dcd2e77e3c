"""scikit-learn-style estimators built on the pass and the solves, and their fitted models as values.

``est.fitted()`` returns a :class:`Fitted` value (:mod:`tgpflow.models.fitted`): ``TGPFitted`` and
``BoundedFitted`` (GPTiltedDensity), ``KernelFitted`` (NystromKEF, ScoreEstimator), ``RSRFitted``
(RootSobolevDensity); :func:`fitted_from_arrays` rebuilds any of them from ``to_arrays``/``to_meta``.
"""

from tgpflow.models.fitted import Fitted, fitted_from_arrays
from tgpflow.models.gp_tilted import GPTiltedDensity
from tgpflow.models.kernel_fitted import KernelFitted
from tgpflow.models.rsr_fitted import RSRFitted
from tgpflow.models.tgp_fitted import BoundedFitted, TGPFitted

__all__ = ["GPTiltedDensity", "Fitted", "TGPFitted", "BoundedFitted", "KernelFitted", "RSRFitted",
           "fitted_from_arrays"]
