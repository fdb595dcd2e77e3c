"""Statistics that save and load themselves: the algebra base of :mod:`tgpflow.core.summable` plus the artifact
writer of :mod:`tgpflow.io.artifact` (a layer above the core, so it is added here).

A statistics artifact holds :meth:`~tgpflow.core.summable.AdditiveStats.to_arrays` under the kind
``type(stats).__name__`` with the metadata ``{"fingerprint": …}`` — the layout the statistics store
(:mod:`tgpflow.pipeline.store`) and model files write too, and read back with ``from_arrays(fingerprint, arrays)``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Self

from tgpflow.core.summable import AdditiveStats
from tgpflow.io.artifact import read_artifact, write_artifact

__all__ = ["StoredStats"]


class StoredStats(AdditiveStats):
    """:class:`~tgpflow.core.summable.AdditiveStats` with ``save``/``load`` (Zarr or ``.npz``, never pickle)."""

    __slots__ = ()

    def save(self, path: str | Path) -> Path:
        """Write atomically to a Zarr group or, for a ``.npz`` path, a NumPy archive (no pickle)."""
        return write_artifact(path, type(self).__name__, self.to_arrays(), {"fingerprint": self.fingerprint})

    @classmethod
    def load(cls, path: str | Path) -> Self:
        """Read statistics written by :meth:`save` (checksums verified; another kind is refused)."""
        _, arrays, meta = read_artifact(path, expected_kinds=(cls.__name__,))
        return cls.from_arrays(meta["fingerprint"], arrays)
