"""The rows a root-Sobolev iteration maps over, once per pass (docs/mathematics.md, "Root-Sobolev density": one
map-reduce per iteration).

:class:`IterationRows` keeps a source's blocks in memory between passes when they fit
``persist_bytes`` (persisted on the workers under a distributed client, computed once otherwise)
and re-streams them from the source when they do not; ``where`` says which, for the log. With
``part`` it holds only the training or the held-out rows of the row-hash split.
"""

from __future__ import annotations

from typing import Any

import dask
import numpy as np

from tgpflow.io.sources import Source
from tgpflow.core.memory import plan_pass
from tgpflow.core.engine import Progress, compute, tree_reduce
from tgpflow.stats.split import SPLIT_SALT, validation_mask

__all__ = ["IterationRows"]


def _split_rows(block: np.ndarray, keys: np.ndarray, fraction: float, part: str) -> np.ndarray:
    held = validation_mask(keys, fraction, SPLIT_SALT)
    return block[held] if part == "val" else block[~held]


class IterationRows:
    """The rows of ``source`` (or its ``part`` = "train" | "val" of the hashed split) for repeated passes;
    each compute over them reports to ``progress``."""

    def __init__(self, source: Source, persist_bytes: int, part: str | None = None, fraction: float = 0.0,
                 progress: Progress | None = None):
        self.progress = progress
        blocks = source.blocks()
        self.n_columns, self._planned = source.n_columns, set()
        if part is not None:
            select = dask.delayed(_split_rows, pure=True)
            blocks = [select(b, k, fraction, part) for b, k in zip(blocks, source.row_keys(), strict=True)]
        est = (source.n_rows or 0) * source.n_columns * 8
        self.persisted = source.n_rows is not None and est <= persist_bytes
        if self.persisted:
            try:
                from distributed import get_client

                self.blocks = get_client().persist(blocks)
                self.where = "persisted in distributed memory"
            except (ImportError, ValueError):
                held = compute(*blocks, progress=progress) if blocks else ()
                self.blocks = [dask.delayed(b, pure=True) for b in held]
                self.where = "held in memory"
        else:
            self.blocks = blocks
            self.where = "re-streamed from the source each iteration"

    def reduce(self, fn: Any, *args: Any) -> Any:
        """One pass: ``fn(block, *args)`` on every block, tree-reduced (fan-in 8)."""
        if fn not in self._planned:  # once per kind of pass: log the memory plan, refuse early
            plan_pass(fn, args, self.n_columns)
            self._planned.add(fn)
        task = dask.delayed(fn, pure=True)
        shared = [dask.delayed(a, pure=True) for a in args]
        return compute(tree_reduce([task(b, *shared) for b in self.blocks], 8), progress=self.progress)[0]
