"""tgpflow: nonparametric densities and score functions fitted in one streamed pass on Dask.

See README.md for a quickstart, and docs/ for what each model fits and how.

The public names are imported on first use (PEP 562 module ``__getattr__``): ``import tgpflow``
and ``tgpflow --help`` load neither scikit-learn, Numba nor distributed (tests/test_import_cost.py).
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import TYPE_CHECKING, Any

#: Public name → the module that defines it (imported when the name is first looked up).
_LAZY = {
    "GPTiltedDensity": "tgpflow.models.gp_tilted",
    "NystromKEF": "tgpflow.models.nystrom_kef",
    "ScoreEstimator": "tgpflow.models.kernel_score",
    "RootSobolevDensity": "tgpflow.models.root_sobolev",
    "ExactKDE": "tgpflow.models.kde",
    "RandomFourierFeatures": "tgpflow.features.rff",
    "NystromBasis": "tgpflow.features.nystrom",
    "Moments": "tgpflow.core.moments",
    "TGPStats": "tgpflow.stats.tgp",
    "NCFDStats": "tgpflow.stats.ncfd",
    "KEFStats": "tgpflow.stats.kef",
    "DiagStats": "tgpflow.stats.kef",
    "StatsBundle": "tgpflow.stats.split",
    "FitPlan": "tgpflow.models.fit_plan",
}
_SUBMODULES = frozenset({"cli", "cluster", "cluster_files", "core", "demo", "errors", "features", "io", "metrics", "models",
                         "pipeline", "sample", "solve", "stats"})
__all__ = ["GPTiltedDensity", "NystromKEF", "ScoreEstimator", "RootSobolevDensity", "ExactKDE", "RandomFourierFeatures",
           "NystromBasis", "Moments", "TGPStats", "NCFDStats", "KEFStats", "DiagStats", "StatsBundle", "FitPlan", "load",
           "__version__"]

if TYPE_CHECKING:  # what type checkers and IDEs see; at run time these come from __getattr__
    from tgpflow.core.moments import Moments
    from tgpflow.features.nystrom import NystromBasis
    from tgpflow.features.rff import RandomFourierFeatures
    from tgpflow.models.fit_plan import FitPlan
    from tgpflow.models.gp_tilted import GPTiltedDensity
    from tgpflow.models.kde import ExactKDE
    from tgpflow.models.kernel_score import ScoreEstimator
    from tgpflow.models.nystrom_kef import NystromKEF
    from tgpflow.models.root_sobolev import RootSobolevDensity
    from tgpflow.stats.kef import DiagStats, KEFStats
    from tgpflow.stats.ncfd import NCFDStats
    from tgpflow.stats.split import StatsBundle
    from tgpflow.stats.tgp import TGPStats


def __getattr__(name: str) -> Any:
    if name == "__version__":  # from the installed metadata (pyproject.toml), read when first asked for
        from tgpflow.core.version import __version__ as value
    elif name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
    elif name in _SUBMODULES:
        return importlib.import_module(f"{__name__}.{name}")
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__, *_SUBMODULES})


def load(path: str | Path, *, verify: bool = False, storage_options: dict[str, Any] | None = None) -> Any:
    """Load a saved model: read its stored solution (no solve), after verifying the schema version and
    the checksums of every array and of the metadata; never unpickles.

    ``path`` is a model (``model.zarr``) or a pipeline's model directory (its ``CURRENT`` version), as a
    path or an fsspec URL (``file://``, ``memory://``, ``s3://`` …; ``storage_options`` for its filesystem).
    ``verify=True`` also solves the stored statistics again and refuses the file (ModelFileError) when
    the stored solution differs from that solve (see :mod:`tgpflow.models.model_file`); it costs a fit's
    solve, and needs a model saved with its statistics.
    """
    from tgpflow.io.atomic import as_path
    from tgpflow.models.estimator_base import Estimator
    from tgpflow.pipeline.versions import ModelVersions, is_versions_dir

    path = as_path(path, storage_options)
    if is_versions_dir(path):  # a pipeline's model directory: its current version
        return ModelVersions(path).load(verify=verify)
    return Estimator.load(path, verify=verify)  # any kind of tgpflow.models.registry
