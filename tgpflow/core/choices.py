"""Named choices and defaults that the parameter tables share with the modules that implement them.

They live here, in a module that imports nothing, so that :mod:`tgpflow.models.params` (and with it
``tgpflow fit --help``) does not import dask, SciPy or numba to learn a default. Each implementing
module re-exports its own names from here.
"""

from __future__ import annotations

__all__ = ["KERNELS", "WHITEN_MODES", "PRECISIONS", "REGULARIZERS", "DEFAULT_RANK_TOL", "DEFAULT_PILOT_ROWS",
           "DEFAULT_NORMALIZER_DRAWS"]

#: Shift-invariant kernels with a spectral sampler (:mod:`tgpflow.features.kernels`).
KERNELS = ("gaussian", "imq")
#: How the SDO kernel's input is whitened (:mod:`tgpflow.features.sdo`): by the moments of the bulk
#: of the pilot rows, of all of them, or not.
WHITEN_MODES = ("robust", "classical", "none")
#: Precision of the GP-tilted statistics pass (:mod:`tgpflow.stats.tgp`).
PRECISIONS = ("float64", "mixed")
#: Spectral regularizers of the kernel exponential family (:mod:`tgpflow.solve.kef`).
REGULARIZERS = ("tikhonov", "cutoff", "landweber", "nu")
#: Eigenvalues κ of the basis Gram G below DEFAULT_RANK_TOL·κ_max are cut: the span's numerical rank
#: (:mod:`tgpflow.solve.kef`).
DEFAULT_RANK_TOL = 1e-10
#: Rows the pilot reads for centring, scaling and bandwidths (:mod:`tgpflow.io.pilot`).
DEFAULT_PILOT_ROWS = 100_000
#: Importance draws of the normaliser (:mod:`tgpflow.solve.normalizer`). At a healthy ESS (≥ 10% of
#: the draws) the standard error of log Z is ≤ 0.01.
DEFAULT_NORMALIZER_DRAWS = 2**17
