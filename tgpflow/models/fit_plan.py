"""What ``prepare`` fixes before a pass, as one value: :class:`FitPlan`.

A plan names the estimator it is for, the parameters its statistics depend on, the data's columns, the
standardization the model is fitted in, the box of the pilot rows (what a solve's diagnostics measure the mass
outside of), and the draw (as arrays and JSON metadata: GPTiltedDensity's features with its held-out grid, mixture
base, noise levels and resolved bounds; a kernel model's Nyström basis; a root-Sobolev density's SDO draw).
Statistics accumulated with one plan add up, wherever and whenever they were summed. ``est.prepare(X).plan()`` makes one;
``Estimator(**plan.params).with_plan(plan)`` puts it on a fresh estimator without reading data, so that its
``accumulate`` and ``chunk_tasks`` sum rows for that draw; ``save``/``load`` write it as a checksummed artifact
(never pickled), so that separate jobs can share one. A pipeline's store freezes each model's plan at its first
run and restores it at every later one.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import numpy as np

from tgpflow.features.scaling import Scaling
from tgpflow.io.artifact import read_artifact, write_artifact
from tgpflow.io.atomic import AnyPath
from tgpflow.stats.support import SupportBox

__all__ = ["FitPlan"]

#: The artifact kind of a saved plan.
PLAN_KIND = "FitPlan"


@dataclasses.dataclass(frozen=True, eq=False)
class FitPlan:
    """The estimator's class name, its columns (None: unnamed), their number, the standardization (None: none),
    the draw's arrays and metadata, the pilot rows' box in the data's units (None: not read), and the estimator's
    parameters that its statistics depend on (``statistics_params`` of its table: not the solve-only ones; None: not
    recorded, as in a pipeline store's draws, whose run checks them itself). See the module docstring."""

    estimator: str
    columns: tuple[str, ...] | None
    n_columns: int
    scaling: Scaling | None
    draw_arrays: Mapping[str, np.ndarray]
    draw_meta: Mapping[str, Any]
    support: SupportBox | None = None
    params: Mapping[str, Any] | None = None

    def __post_init__(self) -> None:
        if self.columns is not None and len(self.columns) != self.n_columns:
            raise ValueError(f"a plan for {self.n_columns} columns names {len(self.columns)}")
        if self.scaling is not None and self.scaling.n_dims != self.n_columns:
            raise ValueError(f"a plan for {self.n_columns} columns with a scaling of {self.scaling.n_dims}")

    @property
    def fingerprint(self) -> str:
        """The draw's fingerprint (statistics carry it; two plans with one fingerprint sum the same sums)."""
        return str(self.draw_meta.get("fingerprint", ""))

    def to_meta(self) -> dict[str, Any]:
        return {"estimator": self.estimator, "columns": None if self.columns is None else list(self.columns),
                "n_columns": self.n_columns, "scaling": None if self.scaling is None else self.scaling.to_dict(),
                "draw": dict(self.draw_meta), "support": None if self.support is None else self.support.to_dict(),
                "params": None if self.params is None else dict(self.params)}

    @classmethod
    def from_meta(cls, arrays: Mapping[str, np.ndarray], meta: Mapping[str, Any]) -> FitPlan:
        columns = meta.get("columns")
        support = meta.get("support")
        return cls(str(meta["estimator"]), None if columns is None else tuple(str(c) for c in columns),
                   int(meta["n_columns"]), Scaling.from_dict(meta.get("scaling")), dict(arrays), dict(meta["draw"]),
                   None if support is None else SupportBox.from_dict(support), meta.get("params"))

    def save(self, path: AnyPath, *, overwrite: bool = True, storage_options: dict[str, Any] | None = None) -> Any:
        """Write the plan atomically (a Zarr group, ``.npz`` by suffix; any fsspec URL), every array checksummed;
        an existing path is replaced only if it holds tgpflow statistics or a plan and ``overwrite``."""
        return write_artifact(path, PLAN_KIND, dict(self.draw_arrays), self.to_meta(), overwrite=overwrite,
                              storage_options=storage_options)

    @classmethod
    def load(cls, path: AnyPath, *, storage_options: dict[str, Any] | None = None) -> FitPlan:
        """The plan ``save`` wrote (checksums verified; anything else is refused, naming what it is)."""
        _, arrays, meta = read_artifact(path, expected_kinds=(PLAN_KIND,), storage_options=storage_options)
        return cls.from_meta(arrays, meta)
