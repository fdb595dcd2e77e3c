"""tgpflow: nonparametric densities and score functions fitted in one streamed pass on Dask.

See README.md for a quickstart, DESIGN.md/MATH.md (shared with the project) for the design
and the formulas each module implements.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

__version__ = "0.1.0"

from tgpflow.features.rff import RandomFourierFeatures  # noqa: E402
from tgpflow.models.gp_tilted import GPTiltedDensity  # noqa: E402
from tgpflow.features.nystrom import NystromBasis  # noqa: E402
from tgpflow.models.kde import ExactKDE  # noqa: E402
from tgpflow.models.kernel_score import NystromKEF, ScoreEstimator  # noqa: E402
from tgpflow.models.root_sobolev import RootSobolevDensity  # noqa: E402
from tgpflow.stats.moments import Moments  # noqa: E402
from tgpflow.stats.kef import DiagStats, KEFStats  # noqa: E402
from tgpflow.stats.ncfd import NCFDStats  # noqa: E402
from tgpflow.stats.split import StatsBundle  # noqa: E402
from tgpflow.stats.tgp import TGPStats  # noqa: E402

__all__ = ["GPTiltedDensity", "NystromKEF", "ScoreEstimator", "RootSobolevDensity", "ExactKDE", "RandomFourierFeatures", "NystromBasis",
           "Moments", "TGPStats", "NCFDStats", "KEFStats", "DiagStats", "StatsBundle", "load", "__version__"]

_MODEL_KINDS = {"GPTiltedDensity": GPTiltedDensity, "NystromKEF": NystromKEF, "ScoreEstimator": ScoreEstimator,
                "RootSobolevDensity": RootSobolevDensity}


def load(path: str | Path, *, verify: bool = False) -> Any:
    """Load a saved model: read its stored solution (no solve), after verifying the schema version and
    the checksums of every array and of the metadata; never unpickles.

    ``path`` is a model (``model.zarr``) or a pipeline's model directory (its ``CURRENT`` version).
    ``verify=True`` also solves the stored statistics again and refuses the file (ModelFileError) when
    the stored solution differs from that solve (see :mod:`tgpflow.models.model_file`); it costs a fit's
    solve, and needs a model saved with its statistics.
    """
    from tgpflow.io.artifact import read_artifact
    from tgpflow.pipeline.versions import ModelVersions, is_versions_dir

    if is_versions_dir(path):  # a pipeline's model directory: its current version
        return ModelVersions(path).load(verify=verify)
    kind, arrays, meta = read_artifact(path, expected_kinds=tuple(_MODEL_KINDS))
    return _MODEL_KINDS[kind]._from_artifact(arrays, meta, Path(path), verify=verify)
