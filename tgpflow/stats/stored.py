"""Statistics that save and load themselves: the algebra base of :mod:`tgpflow.core.summable` plus the artifact
writer of :mod:`tgpflow.io.artifact` (a layer above the core, so it is added here).

A statistics artifact holds :meth:`~tgpflow.core.summable.AdditiveStats.to_arrays` — the sums and the draw's
arrays (``draw.*``) — under the kind ``type(stats).__name__`` with the metadata
:meth:`~tgpflow.core.summable.AdditiveStats.artifact_meta` (``{"fingerprint": …, "draws": {"draw": its scalars}}``),
the layout the statistics store (:mod:`tgpflow.pipeline.store`) writes too; both read it back with
``from_artifact(arrays, meta)``. A file written before statistics carried their draw has neither ``draw.*`` nor
``draws``: it loads with the draw None, and a solve asks for it (``features=``, ``basis=``).
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
        return write_artifact(path, type(self).__name__, self.to_arrays(), self.artifact_meta())

    @classmethod
    def load(cls, path: str | Path) -> Self:
        """Read statistics written by :meth:`save` (checksums verified; another kind is refused)."""
        _, arrays, meta = read_artifact(path, expected_kinds=(cls.__name__,))
        return cls.from_artifact(arrays, meta)
