"""scikit-learn-style estimators built on the pass and the solves."""

from tgpflow.models.gp_tilted import GPTiltedDensity

__all__ = ["GPTiltedDensity"]
